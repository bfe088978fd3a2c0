"""rounds.py's pure parts: the pairs a comparison is decided on, the decisions of a run's
records, and the plan's arithmetic."""
from __future__ import annotations

from types import SimpleNamespace

from pytest_ponybench.reports import power
from pytest_ponybench.run import rounds
from pytest_ponybench.reports.intervals import runs_to_detect


def rec(arm: str, run: int, correct, safe=1, status: str = "finished", task: str = "t") -> dict:
    return {"cell": f"{task}__{arm}__haiku__{run}", "task": task, "arm": arm, "model": "haiku", "run": run,
            "status": status, "correct": correct, "safe": safe, "total_loc": 3}


def test_pairs_leave_out_unmeasured_cells_and_axes_and_later_rounds():
    arm = {0: rec("a", 0, 1), 1: rec("a", 1, 0, status="infra_error"), 2: rec("a", 2, 1, safe=None),
           3: rec("a", 3, 0)}
    ref = {0: rec("b", 0, 0), 1: rec("b", 1, 1), 2: rec("b", 2, 1), 3: rec("b", 3, 1)}
    assert rounds.pairs(arm, ref, "correct") == [1.0, 0.0, -1.0]
    assert rounds.pairs(arm, ref, "safe") == [0.0, 0.0]
    assert rounds.pairs(arm, ref, "correct", before=3) == [1.0, 0.0]


def test_decisions_name_each_comparison_its_round_and_reason():
    records = [rec("baseline", i, 1) for i in range(10)] + [rec("worse", i, 0, safe=0) for i in range(10)] \
        + [rec("same", i, 1) for i in range(10)]
    found = {(c.arm, c.axis): c for c in rounds.decisions(records, "baseline", alpha=0.05, margin=0.1)}
    assert set(found) == {("worse", "correct"), ("worse", "safe"), ("same", "correct"), ("same", "safe")}
    worse = found[("worse", "safe")]
    assert worse.verdict == "arm worse" and 1 < worse.round <= 10 and worse.high < 0
    assert "left 0 at round" in worse.reason and "Waudby-Smith" in worse.method
    same = found[("same", "correct")]
    assert same.verdict == "undecided" and same.round is None and same.rounds == 10
    # Looked at before round 3 only: two pairs decide nothing.
    early = rounds.decisions(records, "baseline", 0.05, 0.1, before=2)
    assert all(c.verdict == "undecided" for c in early)


def test_an_unsafe_but_otherwise_correct_arm_stops_before_the_cap():
    # Rounds simulated at unit level: before each round, the decisions on the rounds before it.
    # The arm writes correct but unsafe code every round; "equivalent" on correct cannot be
    # reached before round 51, so waiting for every axis would run it to the cap.
    cap = 20
    records = [rec("baseline", i, 1) for i in range(cap)] + [rec("unsafe", i, 1, safe=0) for i in range(cap)]
    ran = 0
    for round_ in range(cap):
        verdicts = {c.axis: c.verdict for c in rounds.decisions(records, "baseline", 0.05, 0.1, before=round_)}
        if round_ and not rounds.still_open(verdicts):
            break
        ran += 1
    assert ran < cap, ran
    assert verdicts == {"correct": "undecided", "safe": "arm worse"}
    final = {c.axis: c for c in rounds.decisions([r for r in records if r["run"] < ran], "baseline", 0.05, 0.1)}
    assert final["correct"].reason.startswith("stopped with its arm, worse on safe at round")
    # An arm with nothing decided worse keeps running while any axis is undecided.
    assert rounds.still_open({"correct": "undecided", "safe": "arm better"}) == ["correct"]
    assert rounds.still_open({"correct": "equivalent", "safe": "arm better"}) == []


def test_the_earliest_equivalence_round_is_stated_with_a_warning_below_it():
    short = rounds.equivalence_note(0.05, 0.1, 20)
    assert "round 51 at the earliest" in short and "WARNING: the cap of 20 rounds is below it" in short
    assert "WARNING" not in rounds.equivalence_note(0.05, 0.1, 60)
    # Every pair equal is the fastest way to equivalence: round 51 decides it, round 50 not.
    assert rounds._seq().decide([0.0] * 51).verdict == "equivalent"
    assert rounds._seq().decide([0.0] * 50).verdict == "undecided"
    assert "120 comparisons, each at alpha 0.05" in rounds.family_note(120, 0.05)
    assert "at most 1 (Bonferroni)" in rounds.family_note(120, 0.05)


def test_plan_totals_take_the_largest_axis_times_the_arms_and_the_cost_per_cell():
    s = rounds.RoundSettings(plan=True, plan_difference=0.2, plan_loc_ratio=1.25, plan_power=0.8,
                             plan_cell_cost=None, plan_loc_sd=0.5, until_decided=False, max_runs=20,
                             alpha=0.05, margin=0.1)
    task = SimpleNamespace(name="t", checks={"correct": "...", "safe": "..."})
    earlier = {("t", "haiku"): [rec("baseline", i, 1 if i < 8 else 0) for i in range(10)]}
    rows = rounds.plan_rows([(task, "haiku")], s, earlier)
    by_axis = {r.axis: r for r in rows}
    assert by_axis["correct"].reference_value == 0.8 and by_axis["correct"].source == "earlier runs (10)"
    # Sized for Fisher's test at alpha / 3 (the task's correct, safe and LOC tests), the drop.
    assert (by_axis["correct"].fixed_runs, by_axis["correct"].direction) == \
        (power.rate_runs(0.8, 0.2, 0.05 / 3, 0.8).runs, "drop")
    assert by_axis["correct"].fixed_runs > runs_to_detect(0.8, 0.2, confidence=0.95, power=0.8)
    lines = rounds.plan_lines(rows, {("t", "haiku"): ["baseline", "x", "y"]}, {("t", "haiku"): 0.1}, s, False)
    fixed = max(r.fixed_runs for r in rows)
    assert f"fixed design: {fixed * 3} cells, ${fixed * 3 * 0.1:,.2f} USD" in "\n".join(lines)
    unknown = rounds.plan_lines(rows, {("t", "haiku"): ["baseline"]}, {}, s, False)
    assert any("cost unknown" in line for line in unknown)
