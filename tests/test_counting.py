"""One run, one answer: every output counts the same cells.

A run with measured cells (passed, failed, timed out), cells whose arm never applied
(not_run, arm_unproven, interrupted) and an infra error: the terminal table, summary.json,
summary.md, report.html and ponybench-compare must give the same rate for every row, over the
measured cells only, and say how many were left out.
"""
from __future__ import annotations

import html
import json
import re

import pytest

from pytest_ponybench.reports import compare, summary
from pytest_ponybench.store import record
from pytest_ponybench.store.record import CellRecord
from pytest_ponybench.run.controller import Gathering
from pytest_ponybench.store.rundir import RunDir

# (arm, status, correct, safe) per run of task t1, model haiku.
CELLS = [
    ("baseline", "finished", 1, 1), ("baseline", "finished", 1, 0), ("baseline", "timeout", 0, 0),
    ("baseline", "not_run", 0, 0), ("baseline", "infra_error", 0, 0),
    ("terse", "finished", 1, 1), ("terse", "finished", 0, 1), ("terse", "cli_error", 0, 0),
    ("terse", "finished", 1, 1), ("terse", "arm_unproven", 0, 0), ("terse", "interrupted", 0, 0),
]
# Worked out by hand from CELLS: (correct, safe, measured, left out) per arm.
EXPECTED = {"baseline": (2, 1, 3, {"infra_error": 1, "not_run": 1}),
            "terse": (2, 3, 4, {"arm_unproven": 1, "interrupted": 1})}


def make_records() -> list[dict]:
    records = []
    for run, (arm, status, correct, safe) in enumerate(CELLS):
        measured = status in record.MEASURED
        records.append({
            "cell": f"t1__{arm}__haiku__{run}", "task": "t1", "arm": arm, "model": "haiku",
            "model_id": "claude-haiku-4-5-20251001", "run": run, "kind": "surgical", "spec_hash": "x",
            "status": status, "ran": status == "finished", "correct": correct, "safe": safe,
            "passed": bool(status == "finished" and correct and safe), "delivered": measured,
            "total_loc": 10 if measured else 0, "src_loc": 8, "src_files": 1, "files": 1,
            "test_files": 0, "test_loc": 0, "cost_usd": 0.01, "rehearsal": False, "reused": False,
        })
    return records


def fraction(text: str) -> tuple[int, int]:
    match = re.search(r"(\d+)/(\d+) \(\d+%\)", text)
    assert match, text
    return int(match.group(1)), int(match.group(2))


@pytest.fixture
def run_dir(tmp_path):
    run = RunDir.create(tmp_path / "runs")
    gathering = Gathering(run)
    for r in make_records():
        gathering.add(CellRecord.from_json(r))
    gathering.finish({"haiku": "claude-haiku-4-5-20251001"}, "2.1.328", rehearsal=False, reference="baseline")
    return run


def test_every_output_counts_the_same_cells(run_dir):
    for r in make_records():
        assert CellRecord.from_json(r).to_json() == r  # well formed, and its JSON form is itself
    expected_rates = {arm: (c / n, s / n) for arm, (c, s, n, _) in EXPECTED.items()}

    # summary.json
    data = json.loads(run_dir.summary_path.read_text())
    assert data["cells"] == len(CELLS) and data["measured"] == 7
    assert data["left_out"] == {"arm_unproven": 1, "infra_error": 1, "interrupted": 1, "not_run": 1}
    for row in data["rows"]:
        c, s, n, left = EXPECTED[row["arm"]]
        assert (row["n"], row["left_out"]) == (n, left)
        assert (row["correct_rate"], row["safe_rate"]) == (round(c / n, 3), round(s / n, 3))

    # the terminal table
    lines = summary.table_lines(pp_records(run_dir), "baseline")
    for arm, (c, s, n, left) in EXPECTED.items():
        row = next(line for line in lines if line.strip().startswith(arm))
        counts = re.findall(r"\d+/\d+ \(\d+%\)", row)
        assert [fraction(x) for x in counts[:2]] == [(c, n), (s, n)], row
        assert f"({'+'}{sum(left.values())})" in row
    assert any("Left out of every rate" in line for line in lines)

    # summary.md and report.html
    md = (run_dir.path / "summary.md").read_text()
    page = html.unescape((run_dir.path / "report.html").read_text())
    for arm, (c, s, n, left) in EXPECTED.items():
        md_row = next(line for line in md.splitlines() if line.startswith(f"| {arm}"))
        assert [fraction(x) for x in re.findall(r"\d+/\d+ \(\d+%\)", md_row)[:2]] == [(c, n), (s, n)]
        html_row = re.search(rf"<tr><td>{arm}[^<]*</td>.*?</tr>", page).group(0)
        assert [fraction(x) for x in re.findall(r"\d+/\d+ \(\d+%\)", html_row)[:2]] == [(c, n), (s, n)]
    assert "4 cells were left out of every rate" in md

    # ponybench-compare (a run against itself: the same rates on both sides)
    comparison = compare.compare_runs(run_dir.path, run_dir.path)
    for change in comparison.cells:
        c, s, n, _ = EXPECTED[change.arm]
        assert (change.stats.correct_rate, change.stats.safe_rate) == pytest.approx(expected_rates[change.arm])
        assert change.stats.n == n


def pp_records(run_dir: RunDir) -> list[dict]:
    return run_dir.read_results()


def test_the_controller_makes_the_summary_from_the_records_it_holds_never_from_results_jsonl(tmp_path, monkeypatch):
    # The records a session was handed are passed forward, not read back: the file is only
    # written (and compared byte for byte at the end, never parsed).
    run = RunDir.create(tmp_path / "runs")
    gathering = Gathering(run)
    for i in range(3):
        gathering.add(CellRecord.from_json({"cell": f"t{i}__baseline__haiku__0", "task": f"t{i}", "arm": "baseline",
                                            "model": "haiku", "status": "finished", "error": f"{i}"}))

    def no_reading(*args, **kwargs):
        raise AssertionError("the session read its own results back")

    monkeypatch.setattr(RunDir, "read_results", no_reading)
    every = gathering.all_records()
    assert [r["error"] for r in every] == ["0", "1", "2"]
    gathering.finish({"haiku": "claude-haiku-4-5-20251001"}, "2.1.328", rehearsal=False, reference="baseline",
                     plots=False)
    assert json.loads(run.summary_path.read_text())["cells"] == 3
    monkeypatch.undo()
    assert run.read_results() == every and run.refused_lines == []  # what was appended, untouched


def test_a_rescore_reads_back_its_own_and_the_earlier_records_before_and_after_the_merge(tmp_path):
    run = RunDir.create(tmp_path / "runs")
    first = Gathering(run)
    for cell in ("a__baseline__haiku__0", "b__baseline__haiku__0"):
        first.add(CellRecord.from_json({"cell": cell, "task": cell[0], "arm": "baseline", "model": "haiku", "status": "finished", "note": "first"}))
    again = Gathering(run, mode="rescore")
    again.add(CellRecord.from_json({"cell": "b__baseline__haiku__0", "task": "b", "arm": "baseline", "model": "haiku", "status": "finished",
               "note": "again"}))
    expected = [("a__baseline__haiku__0", "first"), ("b__baseline__haiku__0", "again")]
    assert [(r["cell"], r["note"]) for r in again.all_records()] == expected
    again.finish({}, "2.1.328", rehearsal=False, reference="baseline")
    assert [(r["cell"], r["note"]) for r in again.all_records()] == expected  # the terminal summary's view
    assert [(r["cell"], r["note"]) for r in run.read_results()] == expected
