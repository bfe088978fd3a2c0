"""--ponybench-judge end to end: the real pinned CLI against the scripted judge
(rehearsal.JudgeScript), whose requests the run counts. No model API is reached."""
from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from support.ponyproject import DOUBLE_TASK

from pytest_ponybench.judge import judge

JUDGED = ("over_engineering", "over_engineering_construct", "over_engineering_votes", "completeness",
          "judge_status", "judge_model", "judge_rubric", "judge_fingerprint", "judge_cost_usd")


def run_dir(project) -> Path:
    (found,) = [p for p in (project.path / "runs").iterdir() if p.is_dir()]
    return found


def results(project) -> list[dict]:
    return [json.loads(line) for line in (run_dir(project) / "results.jsonl").read_text().splitlines()]


def ledger(project) -> list[dict]:
    return [json.loads(line) for line in (run_dir(project) / "_ponybench.spend.jsonl").read_text().splitlines()]


@pytest.fixture
def project(pytester):
    pytester.makefile(".toml", pyproject='[tool.pytest.ini_options]\ntestpaths = ["tasks"]\n')
    (pytester.path / "tasks").mkdir()
    (pytester.path / "arms").mkdir()
    (pytester.path / "tasks" / "double.yaml").write_text(DOUBLE_TASK)
    (pytester.path / "arms" / "baseline.yaml").write_text("description: nothing added\n")
    (pytester.path / "arms" / "terse.yaml").write_text("prompt: Answer tersely, PONYBENCH-TERSE.\n")
    return pytester


def run(pytester, claude_bin, *args):
    return pytester.runpytest_subprocess(
        "--ponybench", "--ponybench-rehearse", f"--ponybench-claude={claude_bin}", "--ponybench-judge",
        "--ponybench-judge-votes=1", f"--ponybench-dir={pytester.path / 'runs'}", "-p", "no:cacheprovider",
        *args, timeout=240)


def test_judged_cells_kept_and_a_rescore_asks_the_judge_nothing(project, claude_bin):
    junit = project.path / "junit.xml"
    result = run(project, claude_bin, f"--junitxml={junit}")
    assert result.ret == 0, result.stdout.str()
    # Every output has the judged columns and names the judge and its rubric.
    rubric = judge.rubric_hash()
    result.stdout.fnmatch_lines(["*ponybench judged axes*", "Judged axes", "task*over-eng. mean*",
                                 f"*judge claude-sonnet-4-6, rubric {rubric}*",
                                 "calibration: none on record for judge *: its judged axes cannot gate (ponybench-calibrate)",
                                 "judge cost $*, apart from the agents' $*"])
    summary = json.loads((run_dir(project) / "summary.json").read_text())
    assert summary["judged"]["rubric"] == rubric and "claude-sonnet-4-6" in summary["judged"]["judge"]
    assert summary["judged"]["judge_spent_usd"] > 0 and summary["judged"]["agent_spent_usd"] > 0
    assert {r["arm"] for r in summary["judged"]["rows"]} == {"baseline", "terse"}
    for name in ("summary.md", "report.html"):
        text = (run_dir(project) / name).read_text()
        assert "Judged axes" in text and f"rubric {rubric}" in text, name
    props = {p.get("name"): p.get("value") for p in ET.parse(junit).iter("property")}
    assert props["judge_model"] == "claude-sonnet-4-6" and props["judge_rubric"] == rubric
    assert props["over_engineering"] == "0"
    result.stdout.fnmatch_lines(["ponybench: judge claude-sonnet-4-6 (rubric *, rehearsal:agree): proven on 1 judge pairs*",
                                 # 2 for the pair, 1 per judged cell (2 cells, one axis each, one vote)
                                 "ponybench: the scripted judge answered 4 judge requests in this process"])
    made = results(project)
    assert [r["judge_status"] for r in made] == ["judged", "judged"]
    assert [r["over_engineering"] for r in made] == [0, 0]  # the good reference: nothing over-built
    assert all(r["completeness"] is None for r in made)  # a surgical task: its check decides completeness
    # The judge's cost is on the ledger, apart from the agents'.
    judged = [e for e in ledger(project) if e["cell"].endswith("/judge")]
    assert {e["cell"] for e in judged} == {"proof:double/judge"} | {f"{r['cell']}/judge" for r in made}
    assert sum(e["cost_usd"] for e in judged) > 0
    kept = sorted(run_dir(project).glob("_ponybench.records/*/judge-*.json"))
    assert len(kept) == 2

    again = project.runpytest_subprocess(f"--ponybench-rescore={run_dir(project)}", f"--ponybench-claude={claude_bin}",
                                         "--ponybench-judge", "--ponybench-judge-votes=1", "-p", "no:cacheprovider",
                                         timeout=240)
    assert again.ret == 0, again.stdout.str()
    again.stdout.fnmatch_lines(["ponybench: the scripted judge answered 0 judge requests in this process"])
    rescored = results(project)
    assert [{k: r[k] for k in JUDGED} for r in rescored] == [{k: r[k] for k in JUDGED} for r in made]
    assert all(r["judge_reused"] for r in rescored)

    # Another judge model: judged afresh (its own proof, then each cell), kept beside the first
    # judgement under its own fingerprint; no figure mixes the two.
    other = project.runpytest_subprocess(f"--ponybench-rescore={run_dir(project)}", f"--ponybench-claude={claude_bin}",
                                         "--ponybench-judge", "--ponybench-judge-votes=1",
                                         "--ponybench-judge-model=opus", "-p", "no:cacheprovider", timeout=240)
    assert other.ret == 0, other.stdout.str()
    other.stdout.fnmatch_lines(["ponybench: the scripted judge answered 4 judge requests in this process"])
    again = results(project)
    assert {r["judge_model"] for r in again} == {"claude-opus-4-8"}
    assert {r["judge_fingerprint"] for r in again}.isdisjoint({r["judge_fingerprint"] for r in made})
    assert not any(r["judge_reused"] for r in again)
    assert len(sorted(run_dir(project).glob("_ponybench.records/*/judge-*.json"))) == 4
    summary = json.loads((run_dir(project) / "summary.json").read_text())
    assert "claude-opus-4-8" in summary["judged"]["judge"] and "MIXED" not in summary["judged"]["judge"]


def test_a_judge_ranking_a_pair_wrongly_stops_the_judged_axes_before_any_cell(project, claude_bin):
    result = run(project, claude_bin, "--ponybench-rehearse-judge=disagree")
    assert result.ret == 0, result.stdout.str()  # the cells themselves are not the judge's to fail
    out = result.stdout.str()
    assert "NOT proven: it ranked 1 of 1 judge pairs wrongly" in out
    assert "double (minimal vs over-built, over_engineering): the judge scored the better one 3" in out
    assert out.index("NOT proven") < out.index("tasks/double.yaml")  # before any cell ran
    # Only the pair was asked: no cell was judged by an unproven judge.
    result.stdout.fnmatch_lines(["ponybench: the scripted judge answered 2 judge requests in this process"])
    for record in results(project):
        assert record["over_engineering"] is None
        assert record["judge_status"].startswith("judge unproven: double (minimal vs over-built")


def test_a_judge_api_fault_is_an_infra_error_of_the_judgement_not_of_the_cell(project, claude_bin):
    result = run(project, claude_bin, "--ponybench-rehearse-judge=529")
    assert result.ret == 0, result.stdout.str()
    for record in results(project):
        assert record["passed"] is True and record["status"] == "finished"
        assert record["over_engineering"] is None
        assert "infra_error" in record["judge_status"]


def test_judge_options_are_checked(project, claude_bin):
    bad = run(project, claude_bin, "--ponybench-judge-votes=2")
    assert bad.ret != 0
    bad.stderr.fnmatch_lines(["*--ponybench-judge-votes*odd number of votes*"])
    bad = run(project, claude_bin, "--ponybench-judge-model=gpt")
    assert bad.ret != 0
    assert "--ponybench-judge-model: unknown model 'gpt'" in bad.stderr.str() + bad.stdout.str()


def test_a_malformed_answer_is_asked_again_and_malformed_ones_are_never_zero(project, claude_bin):
    result = run(project, claude_bin, "--ponybench-rehearse-judge=malformed:1")
    assert result.ret == 0, result.stdout.str()
    # The first answer (the proof's) was prose: asked again once; then 2 for the pair's rest and 1 per cell.
    result.stdout.fnmatch_lines(["*proven on 1 judge pairs (0 remembered, 3 requests*",
                                 "ponybench: the scripted judge answered 5 judge requests in this process"])
    assert [r["over_engineering"] for r in results(project)] == [0, 0]

    always = project.runpytest_subprocess(
        "--ponybench", "--ponybench-rehearse", f"--ponybench-claude={claude_bin}", "--ponybench-judge",
        "--ponybench-judge-votes=1", "--ponybench-rehearse-judge=malformed", "--arms=baseline",
        f"--ponybench-dir={project.path / 'runs2'}", "-p", "no:cacheprovider", timeout=240)
    assert always.ret == 0, always.stdout.str()
    always.stdout.fnmatch_lines(["*NOT proven*", "*double (minimal vs over-built, over_engineering): not judged: "
                                 "not judged: malformed answers (the answer is not one JSON object*"])
    (record,) = [json.loads(line) for line in next((project.path / "runs2").iterdir()).joinpath("results.jsonl")
                 .read_text().splitlines()]
    assert record["over_engineering"] is None and record["judge_status"].startswith("judge unproven")


def test_judge_cost_counts_against_the_run_s_budget(project, claude_bin):
    # Simulated prices (the CLI prices the scripted usage): the proof costs about $0.012, a cell
    # about $0.004, its judgement about $0.006. With $0.017 the first cell runs and is judged;
    # without the judge's cost the run would have spent $0.016 and started the second cell.
    result = run(project, claude_bin, "--ponybench-max-cost=0.017")
    out = result.stdout.str()
    spent = {e["cell"]: e["cost_usd"] for e in ledger(project)}
    agents = sum(cost for cell, cost in spent.items() if not cell.endswith("/judge"))
    judged = sum(cost for cell, cost in spent.items() if cell.endswith("/judge"))
    assert agents + spent["proof:double/judge"] < 0.017 <= agents + judged, spent
    (first,) = results(project)[:1]
    assert first["judge_status"] == "judged", out
    assert "1 cells skipped: budget reached" in out


def test_a_resume_reports_kept_judgements_without_asking_again(project, claude_bin):
    first = run(project, claude_bin, "--arms=baseline")
    assert first.ret == 0, first.stdout.str()
    made = results(project)
    # The same run resumed: its cell is kept, so is its judgement; only the proof is asked again
    # (the proof cache is off in these tests).
    again = run(project, claude_bin, "--arms=baseline", f"--ponybench-resume={run_dir(project)}")
    assert again.ret == 0, again.stdout.str()
    again.stdout.fnmatch_lines(["ponybench: the scripted judge answered 2 judge requests in this process"])
    (record,) = results(project)
    assert record["reused"] and record["judge_reused"]
    assert {k: record[k] for k in JUDGED} == {k: made[0][k] for k in JUDGED}
    paid = [e["cell"] for e in ledger(project) if e["cell"] == f"{record['cell']}/judge"]
    assert paid == [f"{record['cell']}/judge"]  # judged once, never paid twice
