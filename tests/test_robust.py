"""The robust axis (issue 34): what a careful engineer may want but the ticket does not ask for.
It is scored, recorded and shown like correct and safe, and never decides a cell's pass/fail,
a bad reference's catch, or an accepted variant's acceptance."""
from __future__ import annotations

from pathlib import Path

import yaml

from pytest_ponybench.cell import lifecycle as cell, workspace
from pytest_ponybench.instruments import gate, strength
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
    return cell.score_cell(c, ws)


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


def test_an_accepted_variant_that_fails_only_robust_is_still_accepted(tmp_path):
    task = task_of(tmp_path)
    accepted = strength.judge(task, strength.Variant(task="add", name="plain", kind="accepted", code=CAREFUL_NOT))
    assert not accepted.verdicts["robust"].ok and accepted.held
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
    old = cell.finish(c, ws, key)  # its verdicts kept under the old checks
    assert old["robust"] is None and old["passed"] is True
    rescored = cell.score_cell(cell.Cell(task_of(tmp_path), c.arm, c.model, c.model_id, c.run), ws, key)
    assert (rescored["correct"], rescored["robust"], rescored["passed"]) == (1, 0, True), rescored
