"""ponybench-history over a dozen kept runs: figures over time, runs left out with a reason,
a CLI-version change, and a drift planted in one run flagged with its interval (and nothing
else flagged)."""
from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest

from pytest_ponybench.reports import history

ARMS = ("baseline", "tidy")
RUNS_PER_CELL = 6
DRIFT_RUN = 9  # the run where tidy's correct rate and LOC fall apart


def cell(run_no: int, arm: str, i: int, *, version: str, status: str = "finished") -> dict:
    drifted = arm == "tidy" and run_no == DRIFT_RUN
    # A steady history with ordinary noise: one failure in some runs, LOC varying by a line.
    correct = 0 if drifted else int(not (i == 0 and run_no % 3 == 0))
    loc = (30 + i) if drifted else (10 + (i + run_no) % 3)
    return {"cell": f"t__{arm}__haiku__{i}", "task": "t", "arm": arm, "model": "haiku",
            "model_id": "claude-haiku-4-5", "run": i, "status": status, "correct": correct,
            "safe": 1, "total_loc": loc, "delivered": True, "cost_usd": 0.01 + 0.001 * i,
            "claude_version": version, "rehearsal": False,
            # tidy's arm text changed before run 4: its spec hash with it
            "spec_hash": f"{arm}-{'v2' if arm == 'tidy' and run_no >= 4 else 'v1'}"}


def make_run(root: Path, run_no: int, *, version: str, rehearsal: bool = False, budget_skipped: int = 0,
             infra: int = 0) -> Path:
    path = root / f"202612{run_no + 1:02d}-100000"
    path.mkdir(parents=True)
    records = [cell(run_no, arm, i, version=version) for arm in ARMS for i in range(RUNS_PER_CELL)]
    for r in records[:infra]:
        r["status"] = "infra_error"
    for r in records:
        r["rehearsal"] = rehearsal
    (path / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    (path / "summary.json").write_text(json.dumps({
        "date": f"2026-12-{run_no + 1:02d}T10:00:00", "claude_version": version, "rehearsal": rehearsal,
        "budget_skipped": budget_skipped}))
    return path


@pytest.fixture
def runs(tmp_path) -> Path:
    root = tmp_path / "runs"
    for n in range(12):
        make_run(root, n, version="2.1.328" if n < 6 else "2.1.400")
    make_run(root, 12, version="2.1.400", rehearsal=True)
    make_run(root, 13, version="2.1.400", budget_skipped=4)
    make_run(root, 14, version="2.1.400", infra=5)  # 5 of 12 cells
    return root


def test_history_flags_the_planted_drift_and_nothing_else(runs, tmp_path, capsys):
    out = tmp_path / "out"
    assert history.main([str(runs), "--out", str(out), "--no-plots"]) == 0
    text = capsys.readouterr().out
    assert "ponybench history: 12 runs, 3 left out" in text
    assert "left out 20261213-100000: a rehearsal" in text
    assert "left out 20261214-100000: cut short by the budget (4 cells skipped)" in text
    assert "left out 20261215-100000: 5 of 12 cells infra errors" in text
    assert "CLI version 2.1.328 -> 2.1.400 at 20261207-100000" in text
    assert "spec of t · tidy · haiku changed tidy-v1 -> tidy-v2 at 20261205-100000" in text
    assert "spec of t · baseline" not in text
    drifts = [line for line in text.splitlines() if line.startswith("DRIFT")]
    assert len(drifts) == 2, drifts
    assert all("t · tidy · haiku in 20261210-100000" in line for line in drifts)
    correct = next(line for line in drifts if "correct rate" in line)
    # The interval, not a bare delta, and the method that made it.
    assert re.search(r"correct rate 0% against \d+% earlier: -\d+ pp \[-\d+, -\d+\] \(Newcombe", correct), correct
    loc = next(line for line in drifts if "median LOC" in line)
    assert re.search(r"median LOC x\d\.\d\d \[\d\.\d\d, \d\.\d\d\] against earlier runs", loc), loc
    assert "CLI 2.1.400" in correct and "claude-haiku-4-5" in correct
    summary = (out / "summary.md").read_text()
    assert "### t · tidy · haiku" in summary and "DRIFT: correct rate 0%" in summary
    data = json.loads((out / "history.json").read_text())
    assert len(data["runs"]) == 15
    flagged = [(s["arm"], s["figure"], p["run"]) for s in data["series"] for p in s["points"] if p["flag"]]
    assert sorted(flagged) == [("tidy", "correct", "20261210-100000"), ("tidy", "loc", "20261210-100000")]


def test_the_same_runs_give_the_same_history(runs, tmp_path):
    for name in ("a", "b"):
        history.main([str(runs), "--out", str(tmp_path / name), "--no-plots"])
    assert (tmp_path / "a" / "history.json").read_text() == (tmp_path / "b" / "history.json").read_text()


def test_report_html_has_a_plot_per_figure(runs, tmp_path):
    pytest.importorskip("matplotlib")
    out = tmp_path / "out"
    # Two runs given one by one, the rest as their folder: the same run is read once.
    assert history.main([str(runs / "20261201-100000"), str(runs), "--out", str(out)]) == 0
    page = (out / "report.html").read_text()
    series = json.loads((out / "history.json").read_text())["series"]
    assert page.count("<img class='plot'") == len(series) == 2 * 4  # 2 arms x 4 figures


def test_a_folder_without_runs_is_refused_naming_it(tmp_path, capsys):
    (tmp_path / "empty").mkdir()
    assert history.main([str(tmp_path / "empty"), "--out", str(tmp_path / "out")]) == 2
    assert f"{tmp_path / 'empty'}: neither a run directory nor a folder of runs" in capsys.readouterr().err


def stable_history(tasks: int, arms: int, runs: int, cells: int, seed: int) -> list:
    """In-memory runs of a history where nothing changes: every task x arm keeps its own rates
    and LOC spread from run to run."""
    rng = np.random.default_rng(seed)
    truth = {(t, a): (rng.uniform(0.2, 0.95), rng.uniform(0.5, 1.0), rng.uniform(30, 300))
             for t in range(tasks) for a in range(arms)}
    out = []
    for i in range(runs):
        records = [{"task": f"t{t}", "arm": f"a{a}", "model": "haiku", "run": r, "status": "finished",
                    "correct": int(rng.random() < correct), "safe": int(rng.random() < safe),
                    "total_loc": max(1, int(loc * np.exp(rng.normal(0, 0.4))))}
                   for (t, a), (correct, safe, loc) in truth.items() for r in range(cells)]
        out.append(history.Run(path=f"r{i}", name=f"2026120{i}", date=f"2026-12-{i + 1:02d}", claude_version="2.1",
                               rehearsal=False, budget_skipped=0, infra=0, cells=len(records), records=records))
    return out


def test_a_stable_history_of_20_tasks_x_4_arms_flags_at_most_the_nominal_rate():
    series = history.build(stable_history(tasks=20, arms=4, runs=10, cells=4, seed=5))
    points = [p for s in series if s.figure != "cost" for p in s.points[history.MIN_EARLIER:]]
    flagged = [p for p in points if p.flag]
    # Benjamini-Hochberg at 0.01 over the 1920 drift tests: under no change at all, any flag
    # happens in at most 1% of histories (bench/claims.py measures it over many). The 99%
    # intervals alone flagged 42 points of this history.
    assert len(points) == 20 * 4 * 3 * (10 - history.MIN_EARLIER)
    assert not flagged, [p.flag for p in flagged]


def test_a_run_that_cannot_be_read_is_skipped_naming_it(runs, tmp_path, capsys):
    # What a typo in -k left before runs without cells were removed, a run cut before its
    # first result, and a results file someone broke: each skipped, the folder still read.
    (runs / "20261128-100000").mkdir()
    (runs / "20261128-100000" / "results.jsonl").write_text("")
    (runs / "20261128-100000" / "run.json").write_text("{}")
    (runs / "20261129-100000").mkdir()
    (runs / "20261129-100000" / "run.json").write_text("{}")
    broken = make_run(runs, 29, version="2.1.400")
    with open(broken / "results.jsonl", "a") as fh:
        fh.write("{not json\n")
    (runs / "notes").mkdir()  # not a run: passed over without a word
    assert history.main([str(runs), "--out", str(tmp_path / "out"), "--no-plots"]) == 0
    text = capsys.readouterr().out
    assert "ponybench history: 12 runs, 3 left out, 3 skipped" in text
    assert f"skipped {runs / '20261128-100000'}: {runs / '20261128-100000' / 'results.jsonl'}: no records" in text
    assert f"skipped {runs / '20261129-100000'}: {runs / '20261129-100000' / 'results.jsonl'}: missing" in text
    assert f"skipped {broken}: {broken / 'results.jsonl'}:13: not valid JSON" in text
    assert "notes" not in text
    # Nothing readable at all is still bad input.
    assert history.main([str(runs / "20261128-100000"), "--out", str(tmp_path / "out")]) == 2
    assert "no run could be read" in capsys.readouterr().err


def test_rehearsals_are_counted_by_default_and_shown_marked_when_asked(tmp_path, capsys):
    root = tmp_path / "runs"
    for n in range(3):
        make_run(root, n, version="2.1.400", rehearsal=True)
    assert history.main([str(root), "--out", str(tmp_path / "a"), "--no-plots"]) == 0
    text = capsys.readouterr().out
    assert "ponybench history: 0 runs, 3 left out" in text
    assert "3 rehearsals left out; --rehearsals includes them, marked REHEARSAL" in text
    # A planted drift among rehearsals is compared with rehearsals; real runs never with them.
    make_run(root, DRIFT_RUN, version="2.1.400", rehearsal=True)
    for n in (20, 21, 22):
        make_run(root, n, version="2.1.400")
    assert history.main([str(root), "--out", str(tmp_path / "b"), "--no-plots", "--rehearsals"]) == 0
    text = capsys.readouterr().out
    assert "ponybench history: 7 runs, 0 left out" in text
    assert "REHEARSAL: 4 of these runs are rehearsals (a scripted model)" in text
    assert "20261201-100000 (REHEARSAL)" in text and "20261221-100000 (REHEARSAL)" not in text
    drifts = [line for line in text.splitlines() if line.startswith("DRIFT")]
    assert drifts and all("in 20261210-100000" in line for line in drifts), drifts
    points = [p for s in json.loads((tmp_path / "b" / "history.json").read_text())["series"] for p in s["points"]]
    assert {p["run"] for p in points if p["rehearsal"]} == {"20261201-100000", "20261202-100000",
                                                            "20261203-100000", "20261210-100000"}
