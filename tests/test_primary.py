"""The answer per arm: pooled over tasks, first in every output, a verdict that follows its interval.

Built from records through the controller's own end of run (Gathering.finish) and the lines the
terminal prints, without running a cell; tests/test_answer_e2e.py runs the same case through the
pinned CLI (a conftest's rehearsal hook makes one arm write the unsafe references).
"""
from __future__ import annotations

import json

import pytest

from pytest_ponybench.reports import primary, summary
from pytest_ponybench.run.controller import Gathering
from pytest_ponybench.store.record import CellRecord
from pytest_ponybench.store.rundir import RunDir

TASKS = {"upload_path": 12, "memo_rates": 30, "shell_quote": 9}  # task: the good reference's LOC


def cell(task, arm, run, *, safe, loc, delivered=True, correct=1):
    return {
        "cell": f"{task}__{arm}__haiku__{run}", "task": task, "arm": arm, "model": "haiku",
        "model_id": "claude-haiku-4-5-20251001", "run": run, "kind": "surgical", "spec_hash": "x",
        "status": "finished", "ran": True, "correct": correct, "safe": safe,
        "passed": bool(correct and safe), "delivered": delivered, "total_loc": loc if delivered else 0,
        "src_loc": loc, "src_files": 1, "files": 1, "test_files": 0, "test_loc": 0, "cost_usd": 0.01,
        "rehearsal": True, "reused": False,
    }


def unsafe_arm_records(runs: int) -> list[dict]:
    """`unsafe-ref` writes each task's unsafe reference (correct, not safe, 2 lines more);
    `baseline` the good one."""
    records = []
    for task, loc in TASKS.items():
        for run in range(runs):
            records.append(cell(task, "baseline", run, safe=1, loc=loc))
            records.append(cell(task, "unsafe-ref", run, safe=0, loc=loc + 2))
    return records


def finish(tmp_path, records) -> tuple[dict, list[str]]:
    run = RunDir.create(tmp_path / "runs")
    gathering = Gathering(run)
    for r in records:
        gathering.add(CellRecord.from_json(r))
    gathering.finish({"haiku": "claude-haiku-4-5-20251001"}, "2.1.328", rehearsal=True, reference="baseline")
    data = json.loads(run.summary_path.read_text())
    lines = summary.terminal_lines(gathering.all_records(), "baseline", gathering.primary)
    return data, lines


def test_an_arm_writing_the_unsafe_reference_is_worse_on_safe_pooled_and_per_task_first(tmp_path):
    data, lines = finish(tmp_path, unsafe_arm_records(4))
    # The terminal: the heading, then the arm's line, before any table.
    assert lines[0].startswith("The answer per arm")
    first = lines[1]
    assert first.startswith("  arm `unsafe-ref` · haiku against `baseline`, 3 tasks x 4 runs:")
    assert "safe -100 pp [" in first and "] WORSE" in first  # pooled
    assert "exploratory, per task: safe worse on memo_rates, shell_quote, upload_path" in first
    assert "correct +0 pp" in first and "correct +0 pp [-24, +24] no clear difference" in first
    # summary.json: `primary` first, the same verdicts.
    assert next(iter(data)) == "primary"
    (answer,) = data["primary"]
    axes = {a["axis"]: a for a in answer["axes"]}
    assert axes["safe"]["verdict"] == "worse" and axes["safe"]["high"] < 0
    assert axes["correct"]["verdict"] == "no clear difference"
    assert answer["per_task"] == ["safe worse on memo_rates, shell_quote, upload_path"]
    # LOC: 2 more lines on every task, so every resample of tasks is above 1; the sign test
    # over 3 tasks cannot go below 0.25.
    assert axes["LOC"]["verdict"] == "more lines" and axes["LOC"]["low"] > 1
    assert axes["LOC"]["detail"] == "fewer in 0, more in 3 of 3 tasks, sign test p 0.25"


def test_every_verdict_follows_its_interval():
    records = unsafe_arm_records(4)
    # A flakier arm on a fourth task, so that intervals span zero somewhere.
    for run in range(4):
        records += [cell("t4", "baseline", run, safe=run % 2, loc=10 + run),
                    cell("t4", "unsafe-ref", run, safe=(run + 1) % 2, loc=11 + run)]
    for a in primary.answers(records, "baseline"):
        for x in a.axes:
            if x.low is None:
                continue
            null = 1.0 if x.axis in ("LOC", "size, all cells") else 0.0
            if x.low <= null <= x.high:
                assert x.verdict == "no clear difference", x
            else:
                assert x.verdict in ("better", "worse", "more lines", "fewer lines", "higher", "lower"), x


def test_size_over_all_cells_counts_a_non_delivery_at_the_task_s_largest_loc():
    # The arm delivers code in 3 of 6 runs at 5 lines; the reference always, at 10. Over the
    # delivered cells the arm looks half the size; over all cells its three empty runs count
    # at the task's largest LOC (10): median of 5, 5, 5, 10, 10, 10 = 7.5.
    records = []
    for task in TASKS:
        for run in range(6):
            records.append(cell(task, "baseline", run, safe=1, loc=10))
            records.append(cell(task, "lean", run, safe=1, loc=5, delivered=run < 3, correct=int(run < 3)))
    (a,) = primary.answers(records, "baseline")
    axes = {x.axis: x for x in a.axes}
    assert axes["LOC"].value == pytest.approx(0.5)
    assert axes["size, all cells"].value == pytest.approx(0.75)
    rows = {(r["task"], r["arm"]): r for r in summary.aggregate(records)}
    assert rows[("memo_rates", "lean")]["total_loc_median"] == 5
    assert rows[("memo_rates", "lean")]["total_loc_median_all_cells"] == 7.5


def test_one_run_says_too_few_once_per_arm(tmp_path):
    data, lines = finish(tmp_path, unsafe_arm_records(1))
    assert lines[1] == ("  arm `unsafe-ref` · haiku against `baseline`: too few runs: 1 of 3 needed per task "
                        "on each side (--runs 3 or more)")
    assert sum("too few" in line for line in lines) == 1
    assert data["primary"][0]["note"].startswith("too few runs: 1 of 3 needed")
    assert data["primary"][0]["axes"] == []
    # Without the reference arm there is nothing to compare, which more runs would not fix.
    (a,) = primary.answers([r for r in unsafe_arm_records(4) if r["arm"] != "baseline"], "baseline")
    assert a.note == "the reference arm `baseline` has no cell on these tasks and this model: nothing to compare"


def test_a_rate_axis_added_to_the_specs_and_the_judged_axes_get_a_verdict_without_more_code(monkeypatch):
    # A third axis named in specs/spec.py AXES (the `robust` branch adds one): the pooled
    # difference appears on the line with no code of its own. Judged scores (0-3) likewise.
    monkeypatch.setattr(primary, "AXES", ("correct", "safe", "robust"))
    records = []
    for task in TASKS:
        for run in range(4):
            records.append(dict(cell(task, "baseline", run, safe=1, loc=10), robust=1,
                                judge_status="judged", over_engineering=1, completeness=3))
            records.append(dict(cell(task, "brittle", run, safe=1, loc=10), robust=0,
                                judge_status="judged", over_engineering=3, completeness=3))
    (a,) = primary.answers(records, "baseline")
    axes = {x.axis: x for x in a.axes}
    assert axes["robust"].verdict == "worse" and axes["robust"].figure.startswith("-100 pp [")
    assert axes["judged over_engineering"].verdict == "higher"
    assert axes["judged over_engineering"].figure == "+2.00 [+2.00, +2.00]"
    assert axes["judged completeness"].verdict == "no clear difference"
    assert "robust -100 pp" in primary.line(a)
    assert ("ponybench_primary:brittle:haiku:robust", "worse") in primary.junit_properties([a])
