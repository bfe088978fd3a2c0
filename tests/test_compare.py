"""ponybench-compare: loading run directories, old-versus-new statistics, gates and exit codes."""
import json
import math
import tomllib
from pathlib import Path

import pytest

from pytest_ponybench.reports import compare, tables

REPO = Path(__file__).resolve().parents[1]
Z95 = 1.959963984540054


def cells(task, safe, correct=None, locs=None, arm="terse", model="haiku"):
    """Records for one task x arm x model: `safe` and `correct` are lists of 0/1 per run."""
    correct = correct if correct is not None else [1] * len(safe)
    locs = locs if locs is not None else [100] * len(safe)
    return [dict(cell=f"{task}__{arm}__{model}__{run}", task=task, arm=arm, model=model,
                 run=run, correct=c, safe=s, passed=bool(c and s), status="finished", ran=True,
                 total_loc=loc, cost_usd=0.1)
            for run, (c, s, loc) in enumerate(zip(correct, safe, locs))]


def write_run(path, records):
    path.mkdir(parents=True, exist_ok=True)
    (path / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


def three_tasks(safe=(None, None, None), locs=(None, None, None)):
    records = []
    for task, s, loc in zip(("t1", "t2", "t3"), safe, locs):
        records += cells(task, s or [1] * 4, locs=loc or [100] * 4)
    return records


def wilson(x, n):
    z2 = Z95 ** 2
    centre, half = (x + z2 / 2) / (n + z2), Z95 / (n + z2) * math.sqrt(x * (n - x) / n + z2 / 4)
    return max(0.0, centre - half), min(1.0, centre + half)


# --------------------------------------------------------------------------- loading


def test_load_records_reads_lines_and_keeps_the_last_record_of_a_cell(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    first, second = cells("t1", [1, 0])
    again = dict(first, safe=0)
    (run / "results.jsonl").write_text(
        json.dumps(first) + "\n\n" + json.dumps(second) + "\n" + json.dumps(again) + "\n")
    records = compare.load_records(run)
    assert [(r["cell"], r["safe"]) for r in records] == [("t1__terse__haiku__1", 0),
                                                         ("t1__terse__haiku__0", 0)]
    assert compare.load_records(run / "results.jsonl") == records


@pytest.mark.parametrize("content, message", [
    (None, "results.jsonl: missing"),
    ('{"cell": "c", "task": "t1", "arm": "a", "model": "m", "status": "finished"}\n{"task": \n',
     "results.jsonl:2: not valid JSON"),
    ('[1, 2]\n', "results.jsonl:1: not a cell record: it is not a JSON object"),
    ('{"task": "t1"}\n', "results.jsonl:1: not a cell record: it has no cell, arm, model, status"),
    ('{"cell": "c", "task": "t1", "arm": "a", "model": "m", "status": "finished", "correct": "yes"}\n',
     "results.jsonl:1: not a cell record: correct='yes' is not int or NoneType"),
    ("\n\n", "results.jsonl: no records"),
    (b"\xff\xfe{", "results.jsonl: cannot read"),
])
def test_load_records_names_the_bad_file(tmp_path, content, message):
    run = tmp_path / "run"
    run.mkdir()
    if isinstance(content, bytes):
        (run / "results.jsonl").write_bytes(content)
    elif content is not None:
        (run / "results.jsonl").write_text(content)
    with pytest.raises(compare.RunError) as error:
        compare.load_records(run)
    assert str(run / "results.jsonl") in str(error.value)
    assert message in str(error.value)


def test_load_records_missing_directory(tmp_path):
    with pytest.raises(compare.RunError, match="no such run directory"):
        compare.load_records(tmp_path / "nope")


# --------------------------------------------------------------------------- statistics


def test_compare_runs_per_task_values_by_hand():
    old = cells("t1", [1, 1, 1, 1], correct=[1, 1, 0, 0], locs=[100, 100, 100, 100])
    new = cells("t1", [1, 0, 0, 0], correct=[1, 1, 0, 0], locs=[150, 150, 150, 150])
    comparison = compare.compare_runs(old, new)
    (change,) = comparison.cells
    s = change.stats
    assert (change.task, change.arm, change.model) == ("t1", "terse", "haiku")
    assert (s.safe_rate_reference, s.safe_rate) == (1.0, 0.25)
    # Newcombe for 1/4 - 4/4 from Wilson intervals by hand:
    l1, u1 = wilson(1, 4)
    l2, u2 = wilson(4, 4)
    low = -0.75 - math.sqrt((0.25 - l1) ** 2 + (u2 - 1) ** 2)
    high = -0.75 + math.sqrt((u1 - 0.25) ** 2 + (1 - l2) ** 2)
    assert s.safe_diff.value == pytest.approx(-0.75)
    assert (s.safe_diff.low, s.safe_diff.high) == (pytest.approx(low), pytest.approx(high))
    # Fisher: margins 4 and 4 runs, 5 safe. Numerators C(4,k) C(4,5-k), k = 1..4: 4, 24, 24,
    # 4 of C(8,5) = 56; observed k = 1: p = (4 + 4) / 56. Two tests (correct: p = 1): Holm x2.
    assert s.safe_diff.p_value == pytest.approx(8 / 56)
    assert s.safe_diff.p_adjusted == pytest.approx(16 / 56)
    assert s.correct_diff.value == 0 and s.correct_diff.p_value == pytest.approx(1.0)
    # Every run 100 lines old, 150 new: the ratio without an interval (was [1.5, 1.5]).
    assert s.loc_ratio.value == pytest.approx(1.5)
    assert (s.loc_ratio.low, s.loc_ratio.high) == (None, None)
    assert s.loc_ratio.note == "no spread in 4 runs against 4: no interval"
    assert tables.change_ratio(s.loc_ratio) == "+50% (no spread)"
    (group,) = comparison.groups
    assert group.tasks_new == 1 and group.safe_rate_new.value == pytest.approx(0.25)
    json.dumps(comparison.to_dict(), allow_nan=False)


def test_compare_runs_lists_what_only_one_run_has():
    old = cells("t1", [1] * 4) + cells("gone", [1] * 4)
    new = cells("t1", [1] * 4) + cells("t1", [1] * 4, arm="fresh")
    comparison = compare.compare_runs(old, new)
    assert comparison.only_old == ["gone / terse / haiku"]
    assert comparison.only_new == ["t1 / fresh / haiku"]
    assert [c.arm for c in comparison.cells] == ["terse"]


def test_too_few_runs_says_so():
    comparison = compare.compare_runs(cells("t1", [1, 1]), cells("t1", [0, 0, 0, 0]))
    estimate = comparison.cells[0].stats.safe_diff
    assert estimate.value is None
    assert estimate.verdict == "too few runs to conclude: new 4, old 2 (need 3 per side)"
    text = compare.format_comparison(comparison)
    assert "too few runs" in text


# --------------------------------------------------------------------------- gates


def test_min_safe_rate_gate():
    # New safe rates per task 1, 1, 0.5: mean 0.8333 (each task once).
    new = three_tasks(safe=(None, None, [1, 1, 0, 0]))
    comparison = compare.compare_runs(three_tasks(), new)
    assert compare.check_gates(comparison, compare.Gates(min_safe_rate=0.8)) == []
    (failure,) = compare.check_gates(comparison, compare.Gates(min_safe_rate=0.9))
    assert failure.startswith("terse / haiku: safe rate 83% [")
    assert "below the minimum 90%" in failure


def test_min_rate_gate_at_exactly_the_threshold_passes():
    # Per-task safe rates 1, 0.8 ... mean exactly 0.9 in decimal, 0.8999... in floating point.
    new = []
    for task, safe in (("t1", [1] * 5), ("t2", [1, 1, 1, 1, 0]), ("t3", [1] * 5),
                       ("t4", [1, 1, 1, 1, 0])):
        new += cells(task, safe)
    comparison = compare.compare_runs(new, new)
    assert compare.check_gates(comparison, compare.Gates(min_safe_rate=0.9)) == []


def test_max_safe_drop_fails_on_a_real_drop():
    # Every task went from 4/4 safe to 0/4: drop 100 points. The bootstrap alone says
    # [-1, -1] (the old message "[100, 100]"); the Newcombe floor at 0 of 12 against 12 of 12:
    # high = -1 + sqrt(2) * z^2 / (12 + z^2) = -1 + sqrt(2) * 0.24257 = -0.657, so [66, 100].
    new = three_tasks(safe=([0] * 4, [0] * 4, [0] * 4))
    comparison = compare.compare_runs(three_tasks(), new)
    change = comparison.groups[0].changes.safe_diff
    assert change.high == pytest.approx(-1 + math.sqrt(2) * Z95 ** 2 / (12 + Z95 ** 2))
    (failure,) = compare.check_gates(comparison, compare.Gates(max_safe_drop=0.1))
    assert failure == ("terse / haiku: safe rate fell by 100 percentage points [66, 100] over 3 "
                       "tasks, more than the allowed 10")


def test_max_safe_drop_ignores_a_drop_that_may_be_noise():
    # Only t1 fell (4/4 -> 0/4): pooled drop 1/3, more than 10 points. Resampling the 3 tasks
    # leaves t1 out with probability (2/3)^3 = 8/27 > 2.5%, so the interval reaches 0 and the
    # drop is not distinguishable from one bad task: the gate passes.
    new = three_tasks(safe=([0] * 4, None, None))
    comparison = compare.compare_runs(three_tasks(), new)
    change = comparison.groups[0].changes.safe_diff
    assert change.value == pytest.approx(-1 / 3) and change.high == 0.0
    assert compare.check_gates(comparison, compare.Gates(max_safe_drop=0.1)) == []


def test_max_loc_increase():
    # t1 doubled with spread (every run 200 or 210 against 100), t2 and t3 rose 50% without:
    # geometric mean (2.05 * 1.5 * 1.5)^(1/3) = 4.6125^(1/3) = 1.6646 (+66%). The smallest
    # resample draws only the 1.5 tasks (p = (2/3)^3 = 8/27 > 2.5%): 1.5 > 1, so the interval
    # lies above 1 and starts at +50%.
    new = three_tasks(locs=([200, 210, 200, 210], [150] * 4, [150] * 4))
    comparison = compare.compare_runs(three_tasks(), new)
    ratio = comparison.groups[0].changes.loc_ratio
    assert ratio.value == pytest.approx((2.05 * 1.5 * 1.5) ** (1 / 3))
    assert ratio.low == pytest.approx(1.5)
    assert compare.check_gates(comparison, compare.Gates(max_loc_increase=70)) == []
    (failure,) = compare.check_gates(comparison, compare.Gates(max_loc_increase=10))
    assert failure.startswith("terse / haiku: LOC rose by 66% [50%, ")
    assert failure.endswith("(new/old, geometric mean over 3 tasks), more than the allowed 10%")


def test_max_loc_increase_without_spread():
    # Every run of every task 100 -> 120 lines: ratio 1.2 and no interval (was [1.2, 1.2]).
    # Within the allowed rise the gate passes; beyond it nothing tells the rise from noise:
    # not evaluated, so it fails unless allowed.
    new = three_tasks(locs=([120] * 4,) * 3)
    comparison = compare.compare_runs(three_tasks(), new)
    assert compare.check_gates(comparison, compare.Gates(max_loc_increase=25)) == []
    (failure,) = compare.check_gates(comparison, compare.Gates(max_loc_increase=10))
    assert failure == ("terse / haiku: LOC increase not evaluated: LOC rose by 20% (new/old), "
                       "more than the allowed 10%, but with no spread in 12 runs against 12 over "
                       "3 tasks: no interval")
    assert compare.check_gates(comparison, compare.Gates(max_loc_increase=10),
                               allow_unevaluated=True) == []


def test_max_loc_increase_needs_an_interval_above_zero():
    # t1 doubled, t2 and t3 unchanged: geometric mean 2^(1/3) = 1.26, +26% > 10%, but
    # resampling tasks leaves t1 out with probability 8/27, so the interval starts at +0%.
    new = three_tasks(locs=([200] * 4, None, None))
    comparison = compare.compare_runs(three_tasks(), new)
    ratio = comparison.groups[0].changes.loc_ratio
    assert ratio.value == pytest.approx(2 ** (1 / 3)) and ratio.low == pytest.approx(1.0)
    assert compare.check_gates(comparison, compare.Gates(max_loc_increase=10)) == []


def test_gates_that_cannot_be_evaluated_fail_unless_allowed():
    # Was: passed unless strict=True. A gate that cannot look at the data guards nothing.
    comparison = compare.compare_runs(cells("t1", [1, 1]), cells("t1", [1, 1]))
    gates = compare.Gates(max_safe_drop=0.1)
    (failure,) = compare.check_gates(comparison, gates)
    assert failure.startswith("terse / haiku: safe drop not evaluated: too few tasks to pool")
    assert compare.check_gates(comparison, gates, allow_unevaluated=True) == []
    text = compare.format_comparison(comparison, gates)
    assert "Gates not evaluated (failing; --allow-unevaluated lets them pass):" in text
    assert "FAILED gates:" in text
    text = compare.format_comparison(comparison, gates, allow_unevaluated=True)
    assert "Gates not evaluated (passing: --allow-unevaluated):" in text
    assert "All gates passed." in text


# --------------------------------------------------------------------------- main()


def test_main_exit_codes(tmp_path, capsys):
    old = write_run(tmp_path / "old", three_tasks())
    new = write_run(tmp_path / "new", three_tasks(safe=([0] * 4, [0] * 4, [0] * 4)))
    assert compare.main([str(old), str(new)]) == 0
    out = capsys.readouterr().out
    assert "Per task (new against old):" in out and "100% -> 0%" in out

    assert compare.main([str(old), str(new), "--min-safe-rate", "0.9"]) == 1
    out = capsys.readouterr().out
    # 0 of 12 safe: the Wilson floor z^2 / (12 + z^2) = 0.2426 (was [0%, 0%]).
    assert "FAILED gates:" in out and "safe rate 0% [0%, 24%]" in out

    assert compare.main([str(old), str(old), "--min-safe-rate", "0.9", "--max-safe-drop", "0.05",
                         "--max-loc-increase", "10"]) == 0
    assert "All gates passed." in capsys.readouterr().out


def test_main_bad_input_exits_2(tmp_path, capsys):
    old = write_run(tmp_path / "old", three_tasks())
    assert compare.main([str(old), str(tmp_path / "missing")]) == 2
    assert f"{tmp_path / 'missing'}: no such run directory" in capsys.readouterr().err

    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "results.jsonl").write_text("{oops\n")
    assert compare.main([str(old), str(broken)]) == 2
    assert f"{broken / 'results.jsonl'}:1: not valid JSON" in capsys.readouterr().err

    other = write_run(tmp_path / "other", cells("elsewhere", [1] * 4))
    assert compare.main([str(old), str(other)]) == 2
    assert "share no task x arm x model" in capsys.readouterr().err


def test_main_fails_on_unevaluated_gates_unless_allowed_and_strict_is_a_no_op(tmp_path, capsys):
    old = write_run(tmp_path / "old", cells("t1", [1, 1]))
    new = write_run(tmp_path / "new", cells("t1", [1, 1]))
    gate = ["--max-safe-drop", "0.1"]
    assert compare.main([str(old), str(new), *gate]) == 1
    default = capsys.readouterr().out
    assert "safe drop not evaluated" in default and "FAILED gates:" in default
    assert compare.main([str(old), str(new), *gate, "--strict"]) == 1  # old scripts: same
    assert capsys.readouterr().out == default
    assert compare.main([str(old), str(new), *gate, "--allow-unevaluated"]) == 0
    assert "All gates passed." in capsys.readouterr().out
    assert compare.main([str(old), str(new), "--strict", "--allow-unevaluated"]) == 2
    assert "not allowed with argument" in capsys.readouterr().err


def test_rehearsal_against_real_run_is_refused_unless_allowed(tmp_path, capsys):
    real = write_run(tmp_path / "real", three_tasks())
    rehearsed = write_run(tmp_path / "rehearsed",
                          [dict(r, rehearsal=True) for r in three_tasks()])
    assert compare.main([str(real), str(rehearsed)]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    (line,) = captured.err.splitlines()  # one sentence
    assert line == (f"ponybench-compare: error: the old run {real} is a real run and the new run "
                    f"{rehearsed} is a rehearsal (scripted model), so their figures do not "
                    f"compare; pass --allow-rehearsal-mix to compare them anyway")
    with pytest.raises(compare.RunError, match="--allow-rehearsal-mix"):
        compare.compare_runs(rehearsed, real)

    assert compare.main([str(real), str(rehearsed), "--allow-rehearsal-mix"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[:3] == [f"old: {real}", f"new: {rehearsed} (REHEARSAL: scripted model)",
                       "REHEARSAL MIX (--allow-rehearsal-mix): one run is a rehearsal with a "
                       "scripted model and the other a real run; the changes below measure that "
                       "difference, not the change you made."]


def test_rehearsal_is_read_from_summary_json_too(tmp_path, capsys):
    real = write_run(tmp_path / "real", three_tasks())
    rehearsed = write_run(tmp_path / "rehearsed", three_tasks())
    (rehearsed / "summary.json").write_text(json.dumps({"rehearsal": True, "rows": []}))
    assert compare.main([str(rehearsed), str(real)]) == 2
    assert "the old run" in capsys.readouterr().err
    # Two rehearsals compare, and the header says what they are.
    also = write_run(tmp_path / "also", [dict(r, rehearsal=True) for r in three_tasks()])
    assert compare.main([str(rehearsed / "results.jsonl"), str(also)]) == 0
    out = capsys.readouterr().out
    assert "Both runs are rehearsals" in out and "REHEARSAL MIX" not in out
    # A summary.json that says it is not a rehearsal (or says nothing) is a real run.
    (rehearsed / "summary.json").write_text(json.dumps({"rehearsal": False}))
    comparison = compare.compare_runs(rehearsed, real)
    assert (comparison.rehearsal_old, comparison.rehearsal_new) == (False, False)
    (rehearsed / "summary.json").write_text("{broken")
    assert compare.main([str(rehearsed), str(real)]) == 2
    assert f"{rehearsed / 'summary.json'}: cannot read" in capsys.readouterr().err


@pytest.mark.parametrize("option, value, message", [
    ("--min-safe-rate", "1.5", "must be from 0 to 1"),
    ("--max-safe-drop", "-0.1", "must be from 0 to 1"),
    ("--min-correct-rate", "ninety", "'ninety' is not a number"),
    ("--max-loc-increase", "-5", "must be a percentage of 0 or more"),
    ("--max-loc-increase", "nan", "must be a percentage of 0 or more"),
])
def test_bad_gate_values_are_rejected_at_parse_time(tmp_path, capsys, option, value, message):
    # Parsing fails before any run directory is read (these do not exist).
    assert compare.main([str(tmp_path / "a"), str(tmp_path / "b"), option, value]) == 2
    err = capsys.readouterr().err
    assert f"argument {option}: {message}" in err


def test_console_script_is_declared():
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    assert project["scripts"]["ponybench-compare"] == "pytest_ponybench.reports.compare:main"


def test_an_axis_no_cell_measured_is_not_evaluated_not_passed():
    # Tasks without a safe check: safe is None in every record (not measured, never 1).
    unmeasured = [dict(r, safe=None, safe_reason="not measured: the task has no safe check")
                  for r in three_tasks()]
    comparison = compare.compare_runs(unmeasured, unmeasured)
    (group,) = comparison.groups
    assert group.safe_rate_new.value is None and group.correct_rate_new.value == 1.0
    failures = compare.check_gates(comparison, compare.Gates(min_safe_rate=0.9, max_safe_drop=0.1))
    assert failures == [
        "terse / haiku: minimum safe rate not evaluated: not measured: no cell has a safe check",
        "terse / haiku: safe drop not evaluated: not measured: no cell has a safe check"]
    assert compare.check_gates(comparison, compare.Gates(min_correct_rate=0.9)) == []
    # Per task: '-' for the axis, never a number or "too few runs".
    rows = tables.change_table(comparison).rows
    assert {(row[6], row[7]) for row in rows} == {("- -> -", "-")}
    # Half the tasks measured: the rate is over those alone.
    mixed = unmeasured[:4] + three_tasks(safe=(None, [1, 1, 0, 0], [1, 1, 1, 1]))[4:]
    level = compare.compare_runs(mixed, mixed).groups[0].safe_rate_new
    assert level.value == pytest.approx(0.75)
