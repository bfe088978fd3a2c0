"""The judge (judge.py): rubrics, what it sees, strict parsing, votes, fingerprints, pairs,
and one judge request through the real pinned CLI against the scripted judge."""
from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from pytest_ponybench.cell import workspace
from pytest_ponybench.judge import judge
from pytest_ponybench.rehearsal import scripted_judge
from pytest_ponybench.rehearsal.server import Fault, JudgeScript, ScriptedModel
from pytest_ponybench.store.rundir import write_record
from pytest_ponybench.specs.spec import load_task
from support.hostile_files import assert_named_not_shown, environ_secret, plant_hostile_files

ROOT = Path(__file__).resolve().parent.parent
CLAUDE = ROOT / "node_modules" / ".bin" / "claude"


def answer(score, cited="", why="one line", key="construct"):
    return json.dumps({"score": score, key: cited, "why": why})


# --------------------------------------------------------------------------- parsing

@pytest.mark.parametrize("text", [
    answer(2, "HandlerFactory"),
    "```json\n" + answer(2, "HandlerFactory") + "\n```",
    "  " + answer(0) + "\n",
])
def test_a_well_formed_answer_is_a_vote(text):
    vote, problem = judge.parse_answer("over_engineering", text)
    assert problem == ""
    assert vote.score in (0, 2)


@pytest.mark.parametrize("text, words", [
    ("", "empty"),
    ("Looks fine to me.", "not one JSON object"),
    ("Here: " + answer(1, "x"), "not one JSON object"),
    (answer(1, "x") + "\nthat is all", "not one JSON object"),
    (json.dumps({"score": 1, "construct": "x"}), "exactly the keys"),
    (json.dumps({"score": 1, "construct": "x", "why": "w", "extra": 1}), "exactly the keys"),
    (answer(True, "x"), "whole number"),
    (answer(4, "x"), "whole number"),
    (answer(1.0, "x"), "whole number"),
    (answer(2, "x", why="two\nlines"), "one line"),
    (answer(2, ""), "must name the construct"),
    (json.dumps([1, 2]), "exactly the keys"),
])
def test_a_malformed_answer_is_no_vote(text, words):
    vote, problem = judge.parse_answer("over_engineering", text)
    assert vote is None
    assert words in problem


def test_completeness_answers_name_what_is_missing():
    vote, _ = judge.parse_answer("completeness", answer(1, "the export", key="missing"))
    assert (vote.score, vote.cited) == (1, "the export")
    assert judge.parse_answer("completeness", answer(1, "x"))[0] is None  # construct is not its key


# --------------------------------------------------------------------------- votes

def asker(*texts, status="finished", cost=0.01):
    """A fake judge answering `texts` in the order it is asked (votes go out together, so which
    vote gets which answer is not fixed)."""
    import threading

    calls = []
    lock = threading.Lock()

    def ask(prompt_text):
        with lock:
            calls.append(prompt_text)
            text = texts[min(len(calls), len(texts)) - 1]
        return judge.Reply(status, text, cost, "" if status == "finished" else "API failed (529)")
    ask.calls = calls
    return ask


SUB = judge.files_submission({"app.py": "def f():\n    return 1\n"})


def test_votes_give_the_median_and_name_its_construct():
    ask = asker(answer(1, "a"), answer(3, "b"), answer(2, "c"))
    one = judge.judge_axis(ask, "over_engineering", "ticket", SUB, votes=3)
    assert (one.score, one.cited, sorted(one.votes), one.requests) == (2, "c", [1, 2, 3], 3)
    assert one.cost_usd == pytest.approx(0.03)


def test_a_malformed_answer_is_asked_again_once():
    ask = asker("prose", answer(2, "Registry"))
    one = judge.judge_axis(ask, "over_engineering", "ticket", SUB, votes=1)
    assert (one.score, one.requests, one.status) == (2, 2, judge.JUDGE_STATUS_OK)


def test_answers_malformed_twice_are_not_judged_never_zero():
    ask = asker("prose", "more prose")
    one = judge.judge_axis(ask, "over_engineering", "ticket", SUB, votes=1)
    assert one.score is None
    assert one.requests == 2
    assert one.status.startswith("not judged: malformed")
    fields = judge.record_fields({"over_engineering": one}, "m", "fp")
    assert fields["over_engineering"] is None and fields["over_engineering_votes"] == "-"
    assert judge.reusable(fields)  # paid for and answered: a rescore takes it as it is


def test_an_api_failure_is_an_infra_error_of_the_judgement():
    ask = asker("", status="infra_error")
    one = judge.judge_axis(ask, "completeness", "ticket", SUB, votes=3)
    assert one.score is None and one.requests == 3  # the votes go out together; none is asked again
    assert one.votes == [None, None, None]
    assert one.status.startswith("infra_error")
    assert not judge.reusable(judge.record_fields({"completeness": one}, "m", "fp"))


def test_the_fingerprint_names_model_rubric_cli_and_path():
    base = judge.fingerprint("claude-sonnet-4-6", "2.1.328")
    assert base == judge.fingerprint("claude-sonnet-4-6", "2.1.328")
    assert base != judge.fingerprint("claude-opus-4-8", "2.1.328")
    assert base != judge.fingerprint("claude-sonnet-4-6", "2.1.329")
    assert base != judge.fingerprint("claude-sonnet-4-6", "2.1.328", "rehearsal:agree")


def test_the_rubric_hash_follows_the_rubric(monkeypatch):
    before = judge.rubric_hash()
    monkeypatch.setitem(judge.RUBRICS, "completeness", judge.RUBRICS["completeness"] + " ")
    assert judge.rubric_hash() != before


def test_judged_axes_by_kind():
    assert judge.axes_for("surgical") == ("over_engineering",)
    assert judge.axes_for("open") == judge.axes_for("fixture") == judge.AXES


# --------------------------------------------------------------------------- what the judge sees

def test_tests_and_harness_files_stay_out_of_the_submission():
    sub = judge.files_submission({"app.py": "x = 1\n", "tests/test_app.py": "assert 1\n", "test_b.py": "",
                                  "_ponybench.transcript.jsonl": "{}", "_ponybench.probe.py": "x = 2\n", "notes.txt": "hi"})
    assert sub.paths == ("app.py",)
    assert "assert 1" not in sub.text


def test_a_seeded_file_left_as_it_was_stays_out(tmp_path):
    ws = tmp_path / "cell"
    ws.mkdir()
    (ws / "seeded.py").write_text("def keep():\n    return 0\n")
    (ws / "changed.py").write_text("def new():\n    return 2\n")
    (ws / "added.py").write_text("def added():\n    return 3\n")
    (ws / "test_added.py").write_text("def test_added():\n    assert True\n")
    import hashlib
    digest = lambda text: hashlib.sha256(text.encode()).hexdigest()
    write_record(ws, workspace.SEED_MANIFEST, {"seeded.py": digest("def keep():\n    return 0\n"),
                                               "changed.py": digest("def old():\n    return 1\n")}, None)
    task = load_task(ROOT / "tasks" / "csv_total.yaml", ROOT / "fixtures")
    sub = judge.cell_submission(task, ws, None)
    assert sub.paths == ("added.py", "changed.py")


def test_a_fixture_task_is_judged_on_its_diff(tmp_path):
    task = load_task(ROOT / "tasks" / "notes_health.yaml", ROOT / "fixtures")
    ws = tmp_path / "cell"
    workspace.seed(task, ws, files=task.refs.good)
    sub = judge.cell_submission(task, ws, None)
    assert sub.diff and sub.text.startswith("```diff")
    assert set(sub.paths) == {rel for rel in task.refs.good if judge._judged_path(rel)}
    assert all(line[:1] in "+- @" or line.startswith(("```", "diff")) for line in sub.text.splitlines() if line)


# --------------------------------------------------------------------------- pairs

TASKS = sorted((ROOT / "tasks").glob("*.yaml"))


@pytest.mark.parametrize("path", TASKS, ids=[p.stem for p in TASKS])
def test_every_shipped_task_has_pairs_an_agreeing_judge_ranks_rightly(path):
    task = load_task(path, ROOT / "fixtures")
    pairs = judge.pairs_for(task)
    assert {p.axis for p in pairs} == set(judge.axes_for(task.kind))
    for script, wrong in (("agree", False), ("disagree", True)):
        ask = lambda text, s=script: judge.Reply("finished", scripted_judge.scripted_answer(text, s))
        for pair in pairs:
            problem, _, requests = judge.prove_pair(ask, pair, task.prompt)
            assert requests == 2
            assert (problem is not None) == wrong, (script, pair.name, problem)


def test_the_stub_keeps_names_and_does_nothing():
    stubbed = judge.stub({"a.py": "def total(rows):\n    return sum(rows)\n"})["a.py"]
    assert "def total(rows)" in stubbed and "NotImplementedError" in stubbed and "sum(" not in stubbed
    js = judge.stub({"s.js": "function f(a) {\n  if (a) { return 1; }\n  return 2;\n}\nmodule.exports = {f};\n"})["s.js"]
    assert "return 2" not in js and "module.exports = {f}" in js


# --------------------------------------------------------------------------- through the real CLI

needs_cli = pytest.mark.skipif(not CLAUDE.exists(), reason="the pinned CLI is installed by `npm ci`")


def judge_env(url, home):
    return {"ANTHROPIC_BASE_URL": url, "ANTHROPIC_API_KEY": "rehearsal", "HOME": str(home),
            "CLAUDE_CONFIG_DIR": str(home / ".claude"), "IS_SANDBOX": "1", "CLAUDE_CODE_MAX_RETRIES": "0"}


@needs_cli
def test_a_judge_request_through_the_pinned_cli(tmp_path):
    with ScriptedModel() as model:
        url = model.register("judge", JudgeScript(malformed_first=1))
        ask = lambda text: judge.ask_cli(str(CLAUDE), "claude-sonnet-4-6", text, judge_env(url, tmp_path))
        pair = judge.pairs_for(load_task(ROOT / "tasks" / "csv_total.yaml", ROOT / "fixtures"))[0]
        one = judge.judge_axis(ask, "over_engineering", "the ticket", pair.worse, votes=1)
        bodies = model.requests("judge")
    assert (one.score, one.requests, one.status) == (3, 2, judge.JUDGE_STATUS_OK)  # malformed, asked again
    assert one.cost_usd > 0  # the CLI prices the scripted usage: judge cost is real cost on the ledger
    assert len(bodies) == 2 and not bodies[0].get("tools")
    system = " ".join(b.get("text", "") for b in bodies[0]["system"])
    assert judge.SYSTEM in system
    assert "HandlerFactory" in json.dumps(bodies[0]["messages"])


@needs_cli
def test_an_api_fault_of_the_judge_is_an_infra_error(tmp_path):
    with ScriptedModel() as model:
        url = model.register("judge", JudgeScript(fault=Fault("529")))
        ask = lambda text: judge.ask_cli(str(CLAUDE), "claude-sonnet-4-6", text, judge_env(url, tmp_path))
        one = judge.judge_axis(ask, "over_engineering", "the ticket", SUB, votes=3)
    assert one.score is None and one.status.startswith("infra_error") and one.requests == 3


def test_the_docs_show_the_rubrics_as_sent():
    doc = (ROOT / "docs" / "judge.md").read_text(encoding="utf-8")
    assert judge.SYSTEM in doc
    for text in judge.RUBRICS.values():
        assert text in doc


def test_a_spent_budget_leaves_a_cell_not_judged_and_asks_nothing(tmp_path):
    from types import SimpleNamespace

    from pytest_ponybench.run import judging

    ws = tmp_path / "cell"
    ws.mkdir()
    (ws / "calc.py").write_text("def double(x):\n    return 2 * x\n")
    state = SimpleNamespace(model_ids={"sonnet": "claude-sonnet-4-6"}, claude="claude", claude_version="2.1.328",
                            settings=SimpleNamespace(max_cost=1.0, rescore=None, rehearse=False),
                            run_dir=SimpleNamespace(key=None, read_options=lambda: {}), spent=lambda: 1.0)
    plugin = judging.JudgePlugin(state, SimpleNamespace(), judging.JudgeSettings(True, "sonnet", 1, ("agree", 0, None)))
    plugin.proven = True
    plugin.ask = lambda text: pytest.fail("the judge was asked although the budget is spent")
    task = load_task(ROOT / "tasks" / "csv_total.yaml", ROOT / "fixtures")
    cell = SimpleNamespace(task=task, id="c")
    record = {"status": "finished", "ran": True, "delivered": True, "workspace": str(ws)}
    fields = plugin.judged(cell, record)
    assert fields["judge_status"] == "not judged: the run's budget of $1 is spent"
    assert fields["over_engineering"] is None


# --------------------------------------------------------------------------- what the judge reads (issue 36 item 7)

def test_the_judge_follows_no_link_opens_no_fifo_and_reads_a_bounded_part(tmp_path):
    import tracemalloc

    ws = tmp_path / "cell"
    ws.mkdir()
    planted = plant_hostile_files(ws, tmp_path / "outside")
    (ws / "long.py").write_text("x = 1\n" * 8_000)  # 48 kB of text: shown cut, and said so
    (ws / "fine.py").write_text("def total(rows):\n    return sum(rows)\n")
    task = load_task(ROOT / "tasks" / "csv_total.yaml", ROOT / "fixtures")
    tracemalloc.start()
    try:
        sub = judge.cell_submission(task, ws, None)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    text = judge.prompt("over_engineering", "the ticket", sub)
    assert_named_not_shown(text, planted)
    assert "def total(rows):" in text
    assert f"[ponybench: the file was cut here, after {judge.MAX_FILE_BYTES} bytes: it is longer]" in text
    assert peak < 16 * judge.MAX_READ_BYTES, peak  # a few copies of what may be read, not a GiB
    shown, read = judge.read_file(ws, "big.py")
    assert read == judge.MAX_FILE_BYTES + 1 and shown.startswith("[ponybench: not shown: a binary file")


def test_a_fixture_task_s_diff_follows_no_link_and_skips_binary_files(tmp_path):
    task = load_task(ROOT / "tasks" / "notes_health.yaml", ROOT / "fixtures")
    ws = tmp_path / "cell"
    workspace.seed(task, ws, files=task.refs.good)
    planted = plant_hostile_files(ws, tmp_path / "outside")
    os.remove(ws / "big.py")  # git would hash the whole GiB; the reading is the other test's
    del planted["big.py"], planted["pipe.py"]  # git lists no FIFO: never read
    sub = judge.cell_submission(task, ws, None)
    text = judge.prompt("completeness", "the ticket", sub)
    assert "sk-outside-secret" not in text and environ_secret() not in text
    for rel, why in planted.items():
        assert f"+[ponybench: not shown: {why}" in text and f"b/{rel}" in text, (rel, text[:3000])


def option_config(ini: dict | None = None, **given):
    """A config as pytest makes it from run/options.py's table: every option at its
    command-line default unless given, every ini key at its default unless in `ini`."""
    from types import SimpleNamespace

    from pytest_ponybench.run.options import OPTIONS

    option = {row.name: None if row.ini else row.default for row in OPTIONS if row.flag}
    values = {**{row.ini: row.default for row in OPTIONS if row.ini}, **(ini or {})}
    return SimpleNamespace(option=SimpleNamespace(**{**option, **given}), getini=values.__getitem__)


def test_the_judges_settings_come_from_the_command_line_then_ini_then_the_default():
    from pytest_ponybench.run.judging import JudgeSettings, settings

    assert settings(option_config()) == JudgeSettings(False, judge.DEFAULT_JUDGE_MODEL, 3, ("agree", 0, None))
    from_ini = option_config({"ponybench_judge": True, "ponybench_judge_votes": "5", "ponybench_judge_model": "opus"})
    assert settings(from_ini) == JudgeSettings(True, "opus", 5, ("agree", 0, None))
    given = option_config({"ponybench_judge_votes": "5"}, ponybench_judge_votes=7, ponybench_judge_model="haiku")
    assert (settings(given).votes, settings(given).model) == (7, "haiku")
    with pytest.raises(pytest.UsageError, match=r"^ini option ponybench_judge_votes = '4': 4: give an odd number"):
        settings(option_config({"ponybench_judge_votes": "4"}))


# --------------------------------------------------------------------------- a plain rescore keeps judgements (issue 35 item 6)

def test_a_plain_rescore_keeps_the_judgements_its_old_record_names_and_the_drop_flag_registers_nothing(tmp_path):
    from types import SimpleNamespace

    from pytest_ponybench.judge import judged_graders as jg
    from pytest_ponybench.run import judging
    from pytest_ponybench.store.rundir import write_record

    key = b"k" * 32
    ws = tmp_path / "runs" / "cell"
    ws.mkdir(parents=True)
    axes = judge.record_fields({"over_engineering": judge.AxisJudgement("over_engineering", score=2, cited="", why="a registry", votes=[2])},
                               "claude-sonnet-4-6", "fpjudge")
    write_record(ws, judge.RECORD_PREFIX + "fpjudge", axes, key)
    tone = jg.JudgedGrader("tone", "llm", rubric="The answer is polite.", pass_example=jg.Work("Done."))
    moved = jg.JudgedGrader("scope", "llm", rubric="Now it asks something else.", pass_example=jg.Work("Done."))
    kept = [jg.Verdict("tone", "llm", tone.key, True, [True, True, False], "polite"),
            jg.Verdict("scope", "llm", "an-older-rubric", True, [True, True, True], "fine")]
    write_record(ws, jg.RECORD_PREFIX + "fpgraders", {"verdicts": [jg.verdict_data(v) for v in kept]}, key)
    old = {"judge_fingerprint": "fpjudge", "graders_judge_fingerprint": "fpgraders"}

    broken = jg.JudgedGrader("no-rubric", "llm", problem="grader no-rubric (llm) has no rubric")
    fields = judging.kept_fields(ws, old, key, (tone, broken, moved))
    assert (fields["over_engineering"], fields["judge_reused"], fields["judge_fingerprint"]) == (2, True, "fpjudge")
    # A verdict counts only while its grader asks the same: `scope`'s rubric changed since.
    assert fields["judged_graders"] == "tone (llm): pass 2/3: polite"
    assert (fields["graders_not_run"], fields["graders_judge_reused"]) == ("no-rubric (llm), scope (llm)", True)
    # Nothing named, nothing under that name, or not sealed by the run's key: nothing kept.
    assert judging.kept_fields(ws, {}, key, (tone,)) == {}
    assert judging.kept_fields(ws, {"judge_fingerprint": "other"}, key, (tone,)) == {}
    assert judging.kept_fields(ws, old, b"x" * 32, (tone,)) == {}

    registered = {}
    for drop in (False, True):
        config = option_config(ponybench_rescore_drop_judged=drop)
        config.getoption = lambda name, default=None, c=config: getattr(c.option, name, default)
        config.pluginmanager = SimpleNamespace(register=lambda plugin, name, d=drop: registered.__setitem__(d, name))
        state = SimpleNamespace(settings=SimpleNamespace(enabled=True, rescore=tmp_path / "runs"), evals=None,
                                run_dir=SimpleNamespace(key=key, read_results=lambda: []))
        judging.register(config, state)
    assert registered == {False: "ponybench-kept-judgements"}
