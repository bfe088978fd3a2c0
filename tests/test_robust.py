"""The robust axis (issue 34): what a careful engineer may want but the ticket does not ask for.
It is scored, recorded and shown like correct and safe, and never decides a cell's pass/fail,
a bad reference's catch, or an accepted variant's acceptance."""
from __future__ import annotations

import json
from pathlib import Path

import yaml

from pytest_ponybench.cell import lifecycle as cell, workspace
from pytest_ponybench.instruments import gate, strength
from pytest_ponybench.reports import compare, history, stats, summary as summaries, tables
from pytest_ponybench.specs.spec import ArmSpec, load_task
from pytest_ponybench.store.rundir import write_record

GOOD = "def add(a, b):\n    return a + b\n"
# Fine for the ticket, but refuses the far edge of floats: fails robust only.
CAREFUL_NOT = "import math\n\ndef add(a, b):\n    total = a + b\n    if math.isinf(total):\n" \
              "        raise OverflowError('too big')\n    return total\n"
TASK = {"file": "add.py", "prompt": "Write add(a, b) in add.py.",
        "checks": {"correct": "assert load(FILE).add(1, 2) == 3, 'add(1, 2) is not 3'\n",
                   "robust": "assert load(FILE).add(1e308, 1e308) == float('inf'), 'overflows'\n"},
        "refs": {"axis": "correct", "good": GOOD, "bad": "def add(a, b):\n    return a - b\n"}}


def task_of(tmp_path: Path, content: dict = TASK):
    path = tmp_path / "add.yaml"
    path.write_text(yaml.safe_dump(content))
    return load_task(path, tmp_path)


def scored(tmp_path: Path, task, code: str) -> dict:
    c = cell.Cell(task, ArmSpec(name="baseline", path=None), "haiku", "claude-haiku-4-5-20251001", 0)
    ws = tmp_path / "runs" / c.id
    ws.mkdir(parents=True, exist_ok=True)
    (ws / "add.py").write_text(code)
    write_record(ws, cell.AGENT_RECORD, {"status": "finished", "error": ""}, None)
    return cell.score_cell(c, ws).to_json()


def test_a_robust_failure_is_recorded_with_its_reason_and_the_cell_still_passes(tmp_path):
    record = scored(tmp_path, task_of(tmp_path), CAREFUL_NOT)
    assert (record["correct"], record["safe"], record["robust"]) == (1, None, 0)
    assert "too big" in record["robust_reason"], record["robust_reason"]
    assert record["passed"] is True and record["failure"] == ""


def test_a_task_without_robust_checks_records_robust_as_not_measured(tmp_path):
    task = task_of(tmp_path, {**TASK, "checks": {"correct": TASK["checks"]["correct"]}})
    record = scored(tmp_path, task, GOOD)
    assert record["robust"] is None and record["robust_reason"] == "not measured: the task has no robust check"
    assert record["passed"] is True


def test_the_good_reference_must_pass_robust_and_the_bad_one_need_not(tmp_path):
    task = task_of(tmp_path)
    assert gate.prove_reference(task, "good") is None
    lazy_and_fragile = "def add(a, b):\n    if abs(a) > 1e300:\n        raise OverflowError\n    return a - b\n"
    fragile_bad = task_of(tmp_path, {**TASK, "refs": {**TASK["refs"], "bad": lazy_and_fragile}})
    assert gate.prove_reference(fragile_bad, "bad") is None, "a bad reference is caught on correct alone"
    fragile_good = task_of(tmp_path, {**TASK, "refs": {**TASK["refs"], "good": CAREFUL_NOT}})
    problem = gate.prove_reference(fragile_good, "good")
    assert problem is not None and "the good reference fails its checks (robust:" in problem, problem


def test_an_accepted_variant_is_judged_without_robust_and_a_robust_one_on_it(tmp_path):
    task = task_of(tmp_path)
    accepted = strength.judge(task, strength.Variant(task="add", name="plain", kind="accepted", code=CAREFUL_NOT))
    assert accepted.held and set(accepted.verdicts) == {"correct"}, accepted.verdicts  # robust decides nothing here
    fragile = strength.judge(task, strength.Variant(task="add", name="fragile", kind="caught", axis="robust",
                                                    mistake="overflows", code=CAREFUL_NOT))
    assert fragile.held and not fragile.verdicts["robust"].ok and fragile.verdicts["correct"].ok
    caught = strength.judge(task, strength.Variant(task="add", name="minus", kind="caught", axis="correct",
                                                   mistake="subtracts", code="def add(a, b):\n    raise OverflowError\n"))
    assert caught.held and caught.other_failures == {}, caught.other_failures


def test_a_rescore_of_a_cell_judged_before_robust_shows_robust_from_the_current_task(tmp_path):
    key = b"k" * 32
    old_task = task_of(tmp_path, {**TASK, "checks": {"correct": TASK["checks"]["correct"]}})
    c = cell.Cell(old_task, ArmSpec(name="baseline", path=None), "haiku", "claude-haiku-4-5-20251001", 0)
    ws = tmp_path / "run" / c.id
    workspace.seed(old_task, ws, key=key)
    workspace.write_files(ws, {"add.py": CAREFUL_NOT})
    write_record(ws, cell.AGENT_RECORD, {"status": "finished", "error": ""}, key)
    old = cell.finish(c, ws, key).to_json()  # its verdicts kept under the old checks
    assert old["robust"] is None and old["passed"] is True
    rescored = cell.score_cell(cell.Cell(task_of(tmp_path), c.arm, c.model, c.model_id, c.run), ws, key).to_json()
    assert (rescored["correct"], rescored["robust"], rescored["passed"]) == (1, 0, True), rescored


# --------------------------------------------------------------------------- outputs


def records_of(task: str, arm: str, correct: list[int], robust: list[int | None]) -> list[dict]:
    """Measured cells of one task x arm x haiku; robust None: a record from before the axis."""
    out = []
    for run, (c, r) in enumerate(zip(correct, robust)):
        record = dict(cell=f"{task}__{arm}__haiku__{run}", task=task, arm=arm, model="haiku", run=run,
                      status="finished", ran=True, correct=c, safe=None, passed=bool(c), failure="",
                      total_loc=10, src_loc=10, src_files=1, cost_usd=0.1)
        if r is not None:
            record.update(robust=r, robust_reason="ok" if r else "add(1e308, 1e308): too big")
        out.append(record)
    return out


RUN = (records_of("t1", "baseline", [1] * 4, [1] * 4) + records_of("t1", "terse", [1] * 4, [0, 0, 0, 1])
       + records_of("t2", "baseline", [1] * 4, [None] * 4) + records_of("t2", "terse", [1] * 4, [None] * 4))


def test_summary_and_the_cell_table_show_robust_apart_from_pass_fail():
    rows = {(r["task"], r["arm"]): r for r in summaries.aggregate(RUN)}
    assert rows[("t1", "terse")]["robust_rate"] == 0.25 and rows[("t1", "terse")]["correct_rate"] == 1.0
    assert rows[("t2", "terse")]["robust_rate"] is None  # records from before robust: not measured
    (t1, t2) = tables.cell_tables(RUN, "baseline")
    column = t1.headers.index("robust")
    assert t1.headers[2:column + 1] == ["correct", "safe", "robust"]
    assert [row[column] for row in t1.rows] == ["4/4 (100%)", "1/4 (25%)"]
    assert [row[column] for row in t2.rows] == ["-", "-"]


def test_robust_failures_are_listed_with_their_reasons_without_failing_a_cell():
    assert tables.failure_rows(RUN) == []  # every cell passed
    (row,) = tables.failure_rows(RUN, "robust")
    assert (row["task"], row["arm"], row["failed"], row["cells"]) == ("t1", "terse", 3, 4)
    assert row["reasons"] == [{"reason": "add(1e308, 1e308): too big", "cells": 3}]
    ((heading, lines),) = tables.failure_sections(RUN)
    assert heading == "t1 · terse: 3 of 4 cells failed robust (which fails no cell)"
    assert lines == ["3 cells: add(1e308, 1e308): too big"]


def test_robust_has_its_own_difference_and_adjustment_family():
    arm_stats = stats.arm_stats(RUN, "baseline", min_runs=3, min_tasks=1)
    by_task = {c.task: c.stats for c in arm_stats.comparisons}
    assert by_task["t1"].robust_diff.value == -0.75 and by_task["t1"].robust_diff.p_value is not None
    assert by_task["t1"].robust_diff.p_adjusted == by_task["t1"].robust_diff.p_value  # its family: one test
    assert tables.not_measured(by_task["t2"].robust_diff)
    header = tables.comparison_table(arm_stats).headers
    assert header[4:10] == ["correct Δ [95% CI]", "p (BH)", "safe Δ [95% CI]", "p (BH)",
                            "robust Δ [95% CI]", "p (BH)"]
    (pooled,) = arm_stats.pooled
    assert pooled.stats.robust_rate.value == 0.25 and pooled.stats.robust_diff.value == -0.75


def test_the_robust_gate_is_off_by_default_and_works_when_set(tmp_path, capsys):
    old = [r for r in RUN if r["arm"] == "terse"]
    new = [dict(r, robust=0, robust_reason="too big") if r["task"] == "t1" else r for r in old]
    comparison = compare.compare_runs(old, new)
    assert compare.Gates().min_robust_rate is None and compare.check_gates(comparison, compare.Gates()) == []
    (failure,) = compare.check_gates(comparison, compare.Gates(min_robust_rate=0.5), allow_unevaluated=True)
    assert failure.startswith("terse / haiku: robust rate 0% [") and "below the minimum 50%" in failure
    write = {name: tmp_path / name for name in ("old", "new")}
    for name, records in (("old", old), ("new", new)):
        write[name].mkdir()
        (write[name] / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    assert compare.main([str(write["old"]), str(write["new"])]) == 0
    assert compare.main([str(write["old"]), str(write["new"]), "--min-robust-rate", "0.5"]) == 1
    assert "robust rate 0%" in capsys.readouterr().out


def test_history_keeps_robust_as_its_own_series_and_flags_its_fall():
    def run(name: str, date: str, robust: list[int | None]) -> history.Run:
        records = [dict(r, robust=value) for r, value in zip(records_of("t1", "terse", [1] * 8, [1] * 8), robust)]
        return history.Run(path=name, name=name, date=date, claude_version="2.1.328", rehearsal=False,
                           budget_skipped=0, infra=0, cells=8, records=records)

    old = [None] * 8  # runs from before robust: no point on its series
    runs = [run(f"r{i}", f"2026-12-0{i}", values) for i, values in
            enumerate([old, [1] * 8, [1] * 8, [1] * 8, [0] * 8], start=1)]
    (series,) = [s for s in history.build(runs) if s.figure == "robust"]
    assert [p.n for p in series.points] == [0, 8, 8, 8, 8]
    assert [bool(p.flag) for p in series.points] == [False] * 4 + [True]
    assert series.points[-1].flag.startswith("robust rate 0% against 100% earlier")
    (table,) = history.tables(history.build(runs))
    assert table.headers[5:8] == ["correct", "safe", "robust"]
    assert table.rows[-1][7].startswith("0% [")
