"""Checks of pytest_ponybench.reports.stats against values worked out independently.

Wilson and Newcombe against the formula by hand and Newcombe's published table; Fisher by
enumerating hypergeometric terms with math.comb; bootstrap intervals against exact bootstrap
distributions enumerated for tiny data.
"""
import itertools
import json
import math
from statistics import median

import numpy as np
import pytest

from pytest_ponybench.reports import intervals, stats

Z95 = 1.959963984540054  # the 97.5% quantile of the standard normal


def record(task, arm, correct, safe, loc=50, model="haiku", run=0, **extra):
    base = dict(task=task, arm=arm, model=model, run=run, correct=correct, safe=safe,
                ran=True, status="finished", passed=bool(correct and safe), total_loc=loc)
    base.update(extra)
    return base


def cells(task, arm, outcomes, model="haiku", locs=None):
    """Records for one task x arm: outcomes is a list of (correct, safe)."""
    locs = locs or [50] * len(outcomes)
    return [record(task, arm, c, s, loc, model=model, run=i)
            for i, ((c, s), loc) in enumerate(zip(outcomes, locs))]


def wilson(x, n):
    """The Wilson score interval by its formula (x may be fractional: effective counts)."""
    z2 = Z95 ** 2
    centre, half = (x + z2 / 2) / (n + z2), Z95 / (n + z2) * math.sqrt(x * (n - x) / n + z2 / 4)
    return max(0.0, centre - half), min(1.0, centre + half)


def fisher_by_hand(x1, n1, x2, n2):
    """Two-sided Fisher p: the sum of hypergeometric probabilities of all tables with the same
    margins that are no more likely than the observed one."""
    successes, total = x1 + x2, n1 + n2
    def prob(k):
        return math.comb(n1, k) * math.comb(n2, successes - k) / math.comb(total, successes)
    observed = prob(x1)
    ks = range(max(0, successes - n2), min(n1, successes) + 1)
    return sum(prob(k) for k in ks if prob(k) <= observed * (1 + 1e-9))


# --------------------------------------------------------------------------- Wilson, Newcombe


def test_wilson_three_of_four_by_hand():
    # x=3, n=4: z^2 = 3.8415; centre = (3 + 1.9207) / 7.8415 = 0.62753;
    # half = z / 7.8415 * sqrt(3*1/4 + 0.96036) = 0.24995 * 1.30781 = 0.32689
    z2 = Z95 ** 2
    centre = (3 + z2 / 2) / (4 + z2)
    half = Z95 / (4 + z2) * math.sqrt(3 * 1 / 4 + z2 / 4)
    low, high = intervals.wilson_interval(3, 4)
    assert low == pytest.approx(centre - half, abs=1e-12)
    assert high == pytest.approx(centre + half, abs=1e-12)
    assert (round(low, 4), round(high, 4)) == (0.3006, 0.9544)


def test_wilson_zero_successes_starts_at_zero():
    # x=0: centre = half, so low = 0 and high = z^2 / (n + z^2) = 3.8415 / 7.8415 = 0.4899
    low, high = intervals.wilson_interval(0, 4)
    assert low == pytest.approx(0.0, abs=1e-12)
    assert high == pytest.approx(Z95 ** 2 / (4 + Z95 ** 2), abs=1e-12)


@pytest.mark.parametrize("x1, n1, x2, n2, low, high", [
    # Newcombe (1998), Statistics in Medicine 17:873-890, Table II, method 10.
    (56, 70, 48, 80, 0.0524, 0.3339),
    (9, 10, 3, 10, 0.1705, 0.8090),
    (6, 7, 2, 7, 0.0582, 0.8062),
    (5, 56, 0, 29, -0.0381, 0.1926),
    (0, 10, 0, 20, -0.1611, 0.2775),
    (0, 10, 0, 10, -0.2775, 0.2775),
    (10, 10, 0, 20, 0.6791, 1.0000),
    (10, 10, 0, 10, 0.6075, 1.0000),
])
def test_newcombe_matches_published_table(x1, n1, x2, n2, low, high):
    got = stats.newcombe_interval(x1, n1, x2, n2)
    assert (round(got[0], 4), round(got[1], 4)) == (low, high)


# --------------------------------------------------------------------------- Fisher, Holm, BH


def test_fisher_three_of_four_against_none_of_four():
    # Margins: 4 and 4 runs, 3 successes in all, C(8,3) = 56 tables.
    # P(k) numerators for k = 0..3: C(4,k) C(4,3-k) = 4, 24, 24, 4. Observed k = 3 (4/56);
    # as or less likely: k = 0 and k = 3, so p = 8/56.
    assert stats.fisher_p(3, 4, 0, 4) == pytest.approx(8 / 56, rel=1e-9)


@pytest.mark.parametrize("table", [(4, 4, 0, 4), (2, 5, 4, 5), (7, 10, 2, 10), (10, 10, 5, 10),
                                   (1, 3, 3, 3), (0, 6, 0, 6)])
def test_fisher_matches_hypergeometric_enumeration(table):
    assert stats.fisher_p(*table) == pytest.approx(fisher_by_hand(*table), rel=1e-9)


def test_holm_worked_example():
    # m = 4. Sorted: 0.005 * 4 = 0.02; 0.01 * 3 = 0.03; 0.03 * 2 = 0.06; 0.04 * 1 = 0.04,
    # raised to the running maximum 0.06. Back in input order:
    adjusted = stats.holm_adjust([0.01, 0.04, 0.03, 0.005])
    assert adjusted == pytest.approx([0.03, 0.06, 0.06, 0.02])


def test_holm_skips_none_and_caps_at_one():
    # Family of 2 (the None is no test): 0.3 * 2 = 0.6, then 0.7 * 1 = 0.7.
    assert stats.holm_adjust([0.7, None, 0.3]) == [pytest.approx(0.7), None, pytest.approx(0.6)]
    assert stats.holm_adjust([0.6, 0.9]) == [1.0, 1.0]
    assert stats.holm_adjust([]) == []


def test_bh_worked_example():
    # m = 4. Sorted: 0.005, 0.01, 0.03, 0.04 -> x 4/1, 4/2, 4/3, 4/4 = 0.02, 0.02, 0.04, 0.04,
    # each lowered to the running minimum from the largest down. Back in input order:
    assert stats.bh_adjust([0.01, 0.04, 0.03, 0.005, None]) == [
        pytest.approx(0.02), pytest.approx(0.04), pytest.approx(0.04), pytest.approx(0.02), None]
    # Two: 0.0325 x 2 = 0.065, 0.17 x 1 = 0.17.
    assert stats.bh_adjust([0.17, 0.0325]) == [pytest.approx(0.17), pytest.approx(0.065)]


def test_smallest_fisher_p_of_the_margins():
    # 4 against 4 runs, 4 successes in all: the most extreme table (0/4 against 4/4) is 2 of
    # C(8,4) = 70 as extreme; all 8 runs passing allow one table only: p = 1.
    assert intervals.smallest_fisher_p(4, 4, 4) == pytest.approx(2 / 70)
    assert intervals.smallest_fisher_p(4, 4, 8) == 1.0
    assert intervals.smallest_fisher_p(3, 3, 3) == pytest.approx(0.1)


def test_a_large_difference_at_4_runs_is_found_per_task_and_no_verdict_contradicts_its_interval():
    # 0/4 safe against 4/4 on three tasks: Fisher p = 2/70 = 0.0286 each. Holm over every test
    # of the report (6: correct and safe on 3 tasks) gave 0.171: "no clear difference" beside
    # an interval of -100 pp [-100, -31]. BH over the arm's safe tests: 0.0286 x 3/3; the
    # correct tests (4/4 against 4/4) cannot give p < 0.05 and are left out of the family.
    records = []
    for task in ("t1", "t2", "t3"):
        records += cells(task, "arm", [(1, 0)] * 4) + cells(task, "baseline", [(1, 1)] * 4)
    report = stats.arm_stats(records)
    for c in report.comparisons:
        safe = c.stats.safe_diff
        assert safe.p_value == pytest.approx(2 / 70) and safe.p_adjusted == pytest.approx(2 / 70)
        assert safe.high < 0 and safe.verdict == "lower"
        assert c.stats.correct_diff.verdict == "no clear difference"
    assert "Benjamini-Hochberg" in report.methods["multiple_comparisons"]


def test_bh_within_arm_and_axis_and_a_verdict_that_only_the_interval_carries():
    # task1: correct 10/10 vs 0/10 -> p1 = 2 / C(20,10); safe 10/10 vs 10/10 -> left out.
    # task2: correct 6/10 vs 2/10 -> p2 ~ 0.170; safe 10/10 vs 5/10 -> p3 = 504/15504 ~ 0.0325.
    # Families: correct {p1, p2}: p1 x 2, p2 x 1. safe {p3}: p3 itself, a finding.
    records = (cells("task1", "arm", [(1, 1)] * 10) + cells("task1", "baseline", [(0, 1)] * 10)
               + cells("task2", "arm", [(1, 1)] * 6 + [(0, 1)] * 4)
               + cells("task2", "baseline", [(1, 1)] * 2 + [(0, 1)] * 3 + [(0, 0)] * 5))
    report = stats.arm_stats(records)
    by_task = {c.task: c.stats for c in report.comparisons}
    p1 = 2 / math.comb(20, 10)
    p2 = fisher_by_hand(6, 10, 2, 10)
    p3 = fisher_by_hand(10, 10, 5, 10)
    assert p3 == pytest.approx(504 / 15504)
    assert by_task["task1"].correct_diff.p_adjusted == pytest.approx(2 * p1)
    assert by_task["task2"].correct_diff.p_adjusted == pytest.approx(p2)
    assert by_task["task2"].safe_diff.p_adjusted == pytest.approx(p3)
    assert by_task["task1"].correct_diff.verdict == "higher"
    assert by_task["task2"].safe_diff.verdict == "higher"
    # A second arm with the same safe difference on two tasks: BH 0.0325 x 2/2 stays a
    # finding. With 6/10 against 2/10 beside it instead, 0.0325 x 2 = 0.065: the interval
    # still excludes 0, so the verdict says "higher, unadjusted only", never "no clear difference".
    more = (cells("task3", "arm", [(1, 1)] * 6 + [(1, 0)] * 4)
            + cells("task3", "baseline", [(1, 1)] * 2 + [(1, 0)] * 8))
    report = stats.arm_stats(records + more)
    by_task = {c.task: c.stats for c in report.comparisons}
    safe = by_task["task2"].safe_diff
    assert safe.p_adjusted == pytest.approx(2 * p3) and safe.low > 0
    assert safe.verdict == "higher, unadjusted only (adjusted p 0.065)"
    for c in report.comparisons:  # no verdict contradicts its interval
        for e in (c.stats.correct_diff, c.stats.safe_diff):
            if e.low is not None and e.low <= 0 <= e.high:
                assert e.verdict == "no clear difference", e


# --------------------------------------------------------------------------- one task x model


def test_rate_difference_value_interval_and_p():
    estimate = stats.rate_difference(9, 10, 3, 10)
    assert estimate.value == pytest.approx(0.6)
    assert (round(estimate.low, 4), round(estimate.high, 4)) == (0.1705, 0.8090)
    assert estimate.p_value == pytest.approx(fisher_by_hand(9, 10, 3, 10))
    assert "Newcombe" in estimate.method and "Fisher" in estimate.test


def test_rate_difference_too_few_runs_gives_no_number():
    estimate = stats.rate_difference(2, 2, 0, 4, labels=("terse", "baseline"))
    assert (estimate.value, estimate.low, estimate.high, estimate.p_value) == (None,) * 4
    assert estimate.verdict.startswith("too few runs to conclude")
    assert "terse 2" in estimate.note and "baseline 4" in estimate.note and "need 3" in estimate.note


def test_loc_ratio_point_is_ratio_of_medians():
    # median(10, 20, 30, 40) = 25; median(50, 50, 60) = 50; ratio 0.5
    estimate = stats.loc_ratio([10, 20, 30, 40], [50, 50, 60], n=4, n_ref=3)
    assert estimate.value == pytest.approx(0.5)
    assert estimate.low <= 0.5 <= estimate.high
    assert "bootstrap" in estimate.method and str(stats.N_BOOT) in estimate.method


def test_loc_ratio_interval_matches_exact_bootstrap_distribution():
    # With 3 values a side there are 27 x 27 equally likely resample pairs: enumerate them and
    # take the exact distribution of median(a*) / median(r*). The Monte Carlo percentile
    # endpoints must sit where that exact CDF crosses 2.5% and 97.5% (up to MC error).
    a, r = [10, 20, 40], [20, 30, 60]
    ratios = sorted(median(x) / median(y) for x in itertools.product(a, repeat=3)
                    for y in itertools.product(r, repeat=3))
    total = len(ratios)

    def below(v):
        return sum(q < v - 1e-12 for q in ratios) / total

    def at_most(v):
        return sum(q <= v + 1e-12 for q in ratios) / total

    estimate = stats.loc_ratio(a, r, n=3, n_ref=3, rng=np.random.default_rng(7))
    assert estimate.value == pytest.approx(20 / 30)
    for endpoint, level in ((estimate.low, 0.025), (estimate.high, 0.975)):
        assert below(endpoint) <= level + 0.01
        assert at_most(endpoint) >= level - 0.01


def test_loc_ratio_without_spread_has_no_interval():
    # Was (0.5, 0.5, 0.5) with verdict "fewer lines": a zero-width interval from 3 runs a side
    # claims a certainty the runs cannot carry. Now the ratio stays and the interval goes.
    estimate = stats.loc_ratio([30, 30, 30], [60, 60, 60], n=3, n_ref=3)
    assert (estimate.value, estimate.low, estimate.high) == (0.5, None, None)
    assert estimate.verdict == estimate.note == "no spread in 3 runs against 3: no interval"
    assert "no interval where the bootstrap has no spread" in estimate.method


def test_loc_ratio_with_rare_outlier_has_no_interval_either():
    # One run of 10 has 20 lines, the rest 10. A resampled median of 10 draws moves above 10
    # only when 5 or more draws are the outlier: P(Binomial(10, 0.1) >= 5), about 0.0016, far
    # below 2.5%. So both percentile ends are ratio 1: no spread, though the runs vary.
    tail = sum(math.comb(10, k) * 0.1 ** k * 0.9 ** (10 - k) for k in range(5, 11))
    assert tail < 0.025
    estimate = stats.loc_ratio([10] * 9 + [20], [10] * 10, n=10, n_ref=10)
    assert (estimate.value, estimate.low, estimate.high) == (1.0, None, None)
    assert estimate.note == "no spread in the resampled medians of 10 runs against 10: no interval"


def test_loc_ratio_too_few_delivered_code():
    records = cells("t", "arm", [(1, 1)] * 4, locs=[0, 0, 0, 12]) + cells("t", "baseline", [(1, 1)] * 4)
    pair = stats.compare_pair(records[:4], records[4:], labels=("arm", "baseline"))
    assert pair.loc_delivered == 1 and pair.loc_median == 12
    assert pair.loc_ratio.value is None
    assert "too few cells with code" in pair.loc_ratio.verdict
    assert "arm delivered code in 1 of 4 runs, baseline in 4 of 4" in pair.loc_ratio.note


def test_compare_pair_is_deterministic_per_key():
    records = cells("t", "arm", [(1, 1)] * 5, locs=[10, 14, 20, 25, 30])
    reference = cells("t", "baseline", [(1, 0)] * 5, locs=[20, 22, 35, 40, 41])
    first = stats.compare_pair(records, reference, key=("t", "haiku", "arm"))
    again = stats.compare_pair(records, reference, key=("t", "haiku", "arm"))
    assert first == again


# --------------------------------------------------------------------------- pooled


def test_pooled_rate_difference_weighs_tasks_equally():
    # Big task: 40/40 vs 0/40 (difference 1); two small tasks 4/4 vs 4/4 (difference 0).
    # Task as unit: (1 + 0 + 0) / 3 = 1/3. Weighted by cells it would be 40/48 - 8/48 = 0.667.
    pairs = {"big": (cells("big", "a", [(1, 1)] * 40), cells("big", "b", [(0, 1)] * 40)),
             "s1": (cells("s1", "a", [(1, 1)] * 4), cells("s1", "b", [(1, 1)] * 4)),
             "s2": (cells("s2", "a", [(1, 1)] * 4), cells("s2", "b", [(1, 1)] * 4))}
    estimate, used = stats.pooled_rate_difference(pairs, "correct")
    assert used == ["big", "s1", "s2"]
    assert estimate.value == pytest.approx(1 / 3)
    # No within-task spread, so the bootstrap is resampling 3 tasks: the mean is K/3 with
    # K ~ Binomial(3, 1/3) draws of the big task. P(K=0) = 8/27 and P(K=3) = 1/27, both above
    # 2.5%, so the interval is exactly [0, 1].
    assert (estimate.low, estimate.high) == (0.0, 1.0)


def test_pooled_rate_difference_exact_task_level_quantile():
    # Differences (1, 0, 0, 0), no within-task spread: mean = K/4, K ~ Binomial(4, 1/4).
    # P(K<=2) = 243/256 = 0.949 < 0.975 < P(K<=3) = 255/256: the upper end is 3/4.
    # P(K=0) = 81/256 = 0.316 > 0.025: the lower end is 0.
    pairs = {"big": (cells("big", "a", [(1, 1)] * 10), cells("big", "b", [(0, 1)] * 10))}
    for name in ("t1", "t2", "t3"):
        pairs[name] = (cells(name, "a", [(0, 1)] * 3), cells(name, "b", [(0, 1)] * 3))
    estimate, _ = stats.pooled_rate_difference(pairs, "correct")
    assert estimate.value == pytest.approx(0.25)
    # The bootstrap gives [0, 0.75]; the interval is its hull with Newcombe at the pooled
    # rates 0.25 and 0, each over Kish's effective runs 4^2 / (1/10 + 3 * 1/3) = 16 / 1.1 =
    # 14.545 (updated: the lower end was exactly 0 before the floor). By hand:
    # Wilson(0.25 n, n): centre (3.636 + 1.921) / 18.387 = 0.30221, half 0.10659 * 1.92035 =
    # 0.20469, so l1 = 0.09752; Wilson(0, n) upper = z^2 / (n + z^2) = 0.20892.
    # low = 0.25 - sqrt(0.15248^2 + 0.20892^2) = 0.25 - 0.25865 = -0.00865; the Newcombe upper
    # end (about 0.5) is inside the bootstrap's 0.75.
    n_eff = 16 / 1.1
    l1, _u1 = wilson(0.25 * n_eff, n_eff)
    _l2, u2 = wilson(0, n_eff)
    low = 0.25 - math.sqrt((0.25 - l1) ** 2 + u2 ** 2)
    assert low == pytest.approx(-0.00865, abs=5e-5)
    assert estimate.low == pytest.approx(low, abs=1e-12) and estimate.high == 0.75


def test_pooled_loc_ratio_is_geometric_mean_and_exact_without_spread():
    # Per-task ratios 2, 0.5 and 1 (the last task has 40 runs): geometric mean 1.
    # Resampling 3 tasks: the smallest pooled value is 0.5 (task2 drawn 3 times, p = 1/27 =
    # 0.037 > 0.025) and the largest 2 (p = 1/27): so the interval is exactly [0.5, 2].
    pairs = {"t1": (cells("t1", "a", [(1, 1)] * 3, locs=[20] * 3), cells("t1", "b", [(1, 1)] * 3, locs=[10] * 3)),
             "t2": (cells("t2", "a", [(1, 1)] * 3, locs=[5] * 3), cells("t2", "b", [(1, 1)] * 3, locs=[10] * 3)),
             "t3": (cells("t3", "a", [(1, 1)] * 40, locs=[10] * 40), cells("t3", "b", [(1, 1)] * 40, locs=[10] * 40))}
    estimate, used = stats.pooled_loc_ratio(pairs)
    assert used == ["t1", "t2", "t3"]
    assert estimate.value == pytest.approx(1.0)
    assert estimate.low == pytest.approx(0.5) and estimate.high == pytest.approx(2.0)
    assert estimate.verdict == "no clear difference"
    assert "geometric mean" in estimate.method and "hierarchical" in estimate.method


def test_pooled_needs_enough_tasks():
    pairs = {"t1": (cells("t1", "a", [(1, 1)] * 4), cells("t1", "b", [(1, 1)] * 4)),
             "t2": (cells("t2", "a", [(1, 1)] * 4), cells("t2", "b", [(1, 1)] * 2))}
    estimate, used = stats.pooled_rate_difference(pairs, "correct")
    assert used == ["t1"]  # t2 has 2 reference runs, fewer than MIN_RUNS
    assert estimate.value is None
    assert estimate.verdict == "too few tasks to pool: 1 with 3+ runs per side (need 3)"


def test_pooled_rate_level():
    # Per-task safe rates 1, 0.5 (of 4) and 0 (of 2): mean 0.5 whatever the run counts.
    by_task = {"t1": cells("t1", "a", [(1, 1)] * 3),
               "t2": cells("t2", "a", [(1, 1)] * 2 + [(1, 0)] * 2),
               "t3": cells("t3", "a", [(1, 0)] * 2)}
    estimate = stats.pooled_rate(by_task, "safe")
    assert estimate.value == pytest.approx(0.5)
    assert 0 <= estimate.low <= 0.5 <= estimate.high <= 1


# --------------------------------------------------------------------------- pooled at the edges


def all_pass_and_all_fail(tasks=5, runs=4):
    pairs = {}
    for t in range(tasks):
        name = f"t{t}"
        pairs[name] = (cells(name, "a", [(1, 1)] * runs), cells(name, "b", [(0, 1)] * runs))
    return pairs


def test_effective_runs_by_hand():
    assert stats.effective_runs([4] * 5) == pytest.approx(20)  # equal counts: all the runs
    # 2 and 8 runs: 2^2 / (1/2 + 1/8) = 4 / 0.625 = 6.4, fewer than the 10 runs, because the
    # equal-weight mean leans on the task with 2 runs as much as on the one with 8.
    assert stats.effective_runs([2, 8]) == pytest.approx(6.4)


def test_pooled_level_all_passing_is_not_certain():
    # 5 tasks x 4 runs, all correct. The bootstrap alone gives [100%, 100%] (every resample of
    # an all-pass task passes). Floor: Wilson of 20 of 20: low = 20 / (20 + z^2) = 20 / 23.8415
    # = 0.8389, high 1.
    by_task = {t: records for t, (records, _ref) in all_pass_and_all_fail().items()}
    estimate = stats.pooled_rate(by_task, "correct")
    assert estimate.value == 1.0
    assert estimate.low == pytest.approx(20 / (20 + Z95 ** 2), abs=1e-12)
    assert round(estimate.low, 4) == 0.8389 and estimate.high == 1.0
    assert "Wilson" in estimate.method and "Kish" in estimate.method
    # All failing mirrors it: [0, z^2 / (20 + z^2)] = [0, 0.1611].
    failing = {t: ref for t, (_records, ref) in all_pass_and_all_fail().items()}
    estimate = stats.pooled_rate(failing, "correct")
    assert (estimate.value, estimate.low) == (0.0, 0.0)
    assert estimate.high == pytest.approx(Z95 ** 2 / (20 + Z95 ** 2), abs=1e-12)


def test_pooled_level_floor_uses_effective_runs():
    # Two tasks, all passing, 2 and 8 runs: Kish 6.4 runs, low = 6.4 / (6.4 + z^2) = 0.6249
    # (with all 10 runs it would be 10 / 13.8415 = 0.7225: too sure of the 2-run task).
    by_task = {"t1": cells("t1", "a", [(1, 1)] * 2), "t2": cells("t2", "a", [(1, 1)] * 8)}
    estimate = stats.pooled_rate(by_task, "safe")
    assert estimate.low == pytest.approx(6.4 / (6.4 + Z95 ** 2), abs=1e-12)
    assert round(estimate.low, 4) == 0.6249


def test_pooled_difference_all_pass_against_all_fail_is_not_certain():
    # Was +100 pp [+100, +100]. Newcombe at 20 of 20 against 0 of 20: the Wilson ends are
    # l1 = 20 / (20 + z^2) and u2 = z^2 / (20 + z^2) = 0.16113, so
    # low = 1 - sqrt((1 - l1)^2 + u2^2) = 1 - sqrt(2) * 0.16113 = 0.7721; high = 1.
    estimate, used = stats.pooled_rate_difference(all_pass_and_all_fail(), "correct")
    assert len(used) == 5 and estimate.value == 1.0
    u2 = Z95 ** 2 / (20 + Z95 ** 2)
    assert estimate.low == pytest.approx(1 - math.sqrt(2) * u2, abs=1e-12)
    assert round(estimate.low, 4) == 0.7721 and estimate.high == 1.0
    assert estimate.verdict == "higher"
    assert "Newcombe" in estimate.method and "hierarchical" in estimate.method
    # The same rates on both sides: no difference, but not [0, 0] either: Newcombe at 20 of 20
    # against 20 of 20 is [-(1 - l), 1 - l] = [-0.1611, 0.1611].
    same = {t: (records, records) for t, (records, _ref) in all_pass_and_all_fail().items()}
    estimate, _ = stats.pooled_rate_difference(same, "correct")
    assert (estimate.low, estimate.high) == (pytest.approx(-u2), pytest.approx(u2))
    assert estimate.verdict == "no clear difference"


def test_pooled_difference_keeps_the_wider_bootstrap_end():
    # One task of three fell 4/4 -> 0/4, the others stayed 4/4: difference -1/3. Newcombe at
    # 8 of 12 against 12 of 12 ends below 0 by hand: Wilson(8, 12) upper 0.86189, so
    # high = -1/3 + sqrt((0.86189 - 2/3)^2 + (1 - 12/15.8415)^2) = -1/3 + 0.31137 = -0.0220.
    # The bootstrap (which can leave the fallen task out, p = 8/27) reaches 0: the hull keeps 0.
    pairs = {"t1": (cells("t1", "a", [(0, 1)] * 4), cells("t1", "b", [(1, 1)] * 4))}
    for t in ("t2", "t3"):
        pairs[t] = (cells(t, "a", [(1, 1)] * 4), cells(t, "b", [(1, 1)] * 4))
    _l1, u1 = wilson(8, 12)
    newcombe_high = -1 / 3 + math.sqrt((u1 - 2 / 3) ** 2 + (1 - 12 / (12 + Z95 ** 2)) ** 2)
    assert newcombe_high == pytest.approx(-0.0220, abs=1e-4)
    estimate, _ = stats.pooled_rate_difference(pairs, "correct")
    assert estimate.value == pytest.approx(-1 / 3) and estimate.high == 0.0
    assert estimate.verdict == "no clear difference"


def test_pooled_loc_ratio_without_spread_has_no_interval():
    # Every run of every task: 120 lines against 100. Was 1.20x [1.20, 1.20].
    pairs = {t: (cells(t, "a", [(1, 1)] * 4, locs=[120] * 4),
                 cells(t, "b", [(1, 1)] * 4, locs=[100] * 4)) for t in ("t1", "t2", "t3")}
    estimate, used = stats.pooled_loc_ratio(pairs)
    assert used == ["t1", "t2", "t3"]
    assert (estimate.value, estimate.low, estimate.high) == (pytest.approx(1.2), None, None)
    assert estimate.note == estimate.verdict == "no spread in 12 runs against 12 over 3 tasks: no interval"


# --------------------------------------------------------------------------- power


@pytest.mark.parametrize("reference_rate, runs", [
    # n = (z_a sqrt(2 pbar qbar) + z_b sqrt(p1 q1 + p2 q2))^2 / 0.2^2, z_a 1.95996, z_b 0.84162
    # 50% -> 70% (or 30%): pbar 0.6: (1.95996 * 0.69282 + 0.84162 * 0.67823)^2 / 0.04 =
    # (1.35790 + 0.57082)^2 / 0.04 = 92.999 -> 93, the textbook figure.
    (0.5, 93),
    # 100% -> 80% only: pbar 0.9: (1.95996 * 0.42426 + 0.84162 * 0.4)^2 / 0.04 =
    # (0.83154 + 0.33665)^2 / 0.04 = 34.12 -> 35.
    (1.0, 35),
    (0.0, 35),
    # 90% -> 70% (110% is out): pbar 0.8: (1.95996 * 0.56569 + 0.84162 * 0.54772)^2 / 0.04 =
    # (1.10872 + 0.46098)^2 / 0.04 = 61.60 -> 62.
    (0.9, 62),
    # 30%: up to 50% needs 93 (pbar 0.4, as 50 -> 70), down to 10% needs 62: the larger, 93.
    (0.3, 93),
    (None, 93),  # no reference run: 50% assumed
])
def test_runs_to_detect_by_hand(reference_rate, runs):
    assert stats.runs_to_detect(reference_rate) == runs


def test_runs_needed_where_inconclusive_and_none_on_a_finding():
    # Inconclusive: 2/4 against 2/4, reference rate 50%: 93 runs per arm.
    assert stats.rate_difference(2, 4, 2, 4).runs_needed == 93
    # Too few runs (reference 0 of 4): from 0%, 35 runs per arm.
    assert stats.rate_difference(2, 2, 0, 4).runs_needed == 35
    # In a report: task1 10/10 against 0/10 is a finding (p = 2 / C(20,10)):
    # no runs_needed; its safe difference (10/10 against 10/10) is inconclusive: 35.
    records = cells("task1", "arm", [(1, 1)] * 10) + cells("task1", "baseline", [(0, 1)] * 10)
    report = stats.arm_stats(records)
    (comparison,) = report.comparisons
    assert comparison.stats.correct_diff.verdict == "higher"
    assert comparison.stats.correct_diff.runs_needed is None
    assert comparison.stats.safe_diff.runs_needed == 35
    assert report.settings["detectable_difference"] == 0.2 and report.settings["power"] == 0.8
    assert "two-proportion normal approximation" in report.methods["runs_needed"]


# --------------------------------------------------------------------------- consistency


def pass_hat_by_enumeration(outcomes_per_task, k):
    """The share of k-subsets of each task's runs in which every run passed, averaged."""
    shares = []
    for outcomes in outcomes_per_task:
        subsets = list(itertools.combinations(outcomes, k))
        shares.append(sum(all(s) for s in subsets) / len(subsets))
    return sum(shares) / len(shares)


def test_pass_k_by_hand_and_by_enumeration():
    # Runs (passed of measured): 4 of 4, 3 of 4, 4 of 5; k = 4, the smallest count.
    # C(4,4)/C(4,4) = 1; C(3,4)/C(4,4) = 0; C(4,4)/C(5,4) = 1/5: pass^4 = 1.2 / 3 = 0.4.
    # pass^1 = (1 + 0.75 + 0.8) / 3 = 0.85.
    outcomes = {"t1": [1, 1, 1, 1], "t2": [1, 1, 0, 1], "t3": [1, 0, 1, 1, 1]}
    records = []
    for task, runs in outcomes.items():
        records += cells(task, "arm", [(o, 1) for o in runs])
    records += cells("single", "arm", [(0, 1)])  # one run: not in pass^k (nor in `tasks`)
    records.append(record("t1", "arm", 0, 0, status="not_run", passed=False))  # not measured
    (row,) = stats.consistency(records)
    assert row.pass_k == 4 and row.tasks == 3 and row.single_run_tasks == 1
    assert row.pass_hat_k == pytest.approx(0.4)
    assert row.pass_hat_k == pytest.approx(pass_hat_by_enumeration(outcomes.values(), 4))
    assert row.pass_hat_1 == pytest.approx(0.85)
    assert "C(c, k) / C(n, k)" in row.pass_k_method
    # Every run of every task passing: pass^k = 1; the share of all-pass tasks agrees.
    (row,) = stats.consistency(cells("a", "arm", [(1, 1)] * 3) + cells("b", "arm", [(1, 1)] * 5))
    assert (row.pass_k, row.pass_hat_k, row.pass_hat_1, row.share_all_passed) == (3, 1.0, 1.0, 1.0)


def test_pass_k_takes_one_k_over_the_arms_of_a_model():
    # Both arms pass 75% of the runs of every task, a at 4 runs, b at 8. Each arm's own
    # smallest run count would compare pass^4 of a with pass^8 of b, two different questions;
    # one k for the model (4, the smaller, or a k given) asks both the same one.
    four = [(1, 1)] * 3 + [(0, 1)]
    records = (cells("t1", "a", four) + cells("t2", "a", four)
               + cells("t1", "b", four * 2) + cells("t2", "b", four * 2))
    rows = {r.arm: r for r in stats.consistency(records)}
    assert rows["a"].pass_k == rows["b"].pass_k == 4
    assert rows["b"].pass_k_rule == "k = 4, the smallest run count over the arms of haiku"
    # a: C(3,4) / C(4,4) = 0; b: C(6,4) / C(8,4) = 15/70.
    assert rows["a"].pass_hat_k == 0.0 and rows["b"].pass_hat_k == pytest.approx(15 / 70)
    rows = {r.arm: r for r in stats.consistency(records, k=2)}
    assert rows["a"].pass_k == rows["b"].pass_k == 2 and rows["a"].pass_k_rule == "k = 2, as given"
    assert rows["a"].pass_hat_k == pytest.approx(3 / 6) and rows["b"].pass_hat_k == pytest.approx(15 / 28)
    # Equal counts at unequal run numbers give equal pass^k: 4 of 4 and 8 of 8.
    rows = {r.arm: r for r in stats.consistency(cells("t1", "a", [(1, 1)] * 4) + cells("t1", "b", [(1, 1)] * 8))}
    assert rows["a"].pass_k == rows["b"].pass_k == 4 and rows["a"].pass_hat_k == rows["b"].pass_hat_k == 1.0


def test_pass_k_without_tasks_of_two_runs_is_none():
    (row,) = stats.consistency(cells("a", "arm", [(1, 1)]))
    assert (row.pass_k, row.pass_hat_k, row.pass_hat_1) == (None, None, None)
    json.dumps(stats.arm_stats(cells("a", "arm", [(1, 1)])).to_dict(), allow_nan=False)



def test_consistency_counts_tasks_by_agreement():
    records = (cells("all_pass", "arm", [(1, 1)] * 3) + cells("mixed", "arm", [(1, 1), (1, 0), (1, 1)])
               + cells("all_fail", "arm", [(0, 1)] * 3) + cells("single", "arm", [(1, 1)]))
    # `passed` missing: falls back to correct and safe
    records.append({"task": "mixed2", "arm": "arm", "model": "haiku", "correct": 1, "safe": 1, "status": "finished"})
    records.append({"task": "mixed2", "arm": "arm", "model": "haiku", "correct": 0, "safe": 1, "status": "finished"})
    # never measured: ignored
    records.append(record("all_pass", "arm", 0, 0, status="wrong_arm", passed=False))
    (row,) = stats.consistency(records)
    assert (row.tasks, row.all_passed, row.flipped, row.all_failed, row.single_run_tasks) == (4, 1, 2, 1, 1)
    assert row.share_all_passed == pytest.approx(1 / 4)
    assert row.share_flipped == pytest.approx(2 / 4)


# --------------------------------------------------------------------------- whole report


def test_single_arm_has_no_comparisons():
    report = stats.arm_stats(cells("t", "baseline", [(1, 1)] * 4))
    assert report.comparisons == [] and report.pooled == []
    assert "nothing to compare" in report.note
    assert len(report.consistency) == 1


def test_missing_reference_arm_is_said():
    report = stats.arm_stats(cells("t", "terse", [(1, 1)] * 4), reference="baseline")
    assert report.comparisons == [] and "'baseline' is not in these results" in report.note


def test_unmeasured_cells_and_missing_fields_do_not_count():
    records = cells("t", "arm", [(1, 1)] * 3) + cells("t", "baseline", [(0, 0)] * 3)
    records += [
        record("t", "arm", 0, 0, status="wrong_arm"),       # arm not applied: ignored
        record("t", "arm", 0, 0, status="not_run"),
        {"task": "t", "arm": "arm", "model": "haiku", "status": "cli_error", "correct": None,
         "safe": None, "total_loc": None, "cost_usd": None},  # agent error, fields None
        {"arm": "arm"},                                     # broken line: no task, model
    ]
    report = stats.arm_stats(records)
    assert report.unattributed == 1 and {c.task for c in report.comparisons} == {"t"}
    pair = next(c.stats for c in report.comparisons if c.task == "t")
    assert (pair.n, pair.correct_rate, pair.safe_rate) == (4, 1.0, 1.0)
    assert pair.correct_diff.value == pytest.approx(1.0)
    json.dumps(report.to_dict(), allow_nan=False)  # JSON-safe: no NaN, no infinity


def test_report_is_deterministic_and_stable_when_arms_are_added():
    base = []
    for task in ("t1", "t2", "t3"):
        base += cells(task, "baseline", [(1, 1), (0, 1), (1, 1), (1, 0)], locs=[40, 55, 60, 70])
        base += cells(task, "terse", [(1, 1), (1, 1), (1, 1), (0, 1)], locs=[20, 25, 40, 31])
    first = stats.arm_stats(base).to_dict()
    assert stats.arm_stats(base).to_dict() == first
    more = base + cells("t1", "verbose", [(1, 1)] * 4, locs=[90, 95, 99, 120])
    terse_before = [c for c in first["comparisons"] if c["arm"] == "terse"]
    terse_after = [c for c in stats.arm_stats(more).to_dict()["comparisons"] if c["arm"] == "terse"]
    # The LOC intervals come from per-comparison seeds: adding an arm does not move them.
    assert [c["stats"]["loc_ratio"] for c in terse_after] == [c["stats"]["loc_ratio"] for c in terse_before]
    pooled = first["pooled"][0]
    assert pooled["arm"] == "terse" and pooled["stats"]["tasks_rates"] == ["t1", "t2", "t3"]
    for estimate in (pooled["stats"]["correct_diff"], pooled["stats"]["loc_ratio"]):
        assert estimate["method"] and estimate["low"] <= estimate["value"] <= estimate["high"]


def test_resampled_medians_equal_plain_medians_of_the_same_draws():
    # The vectorised median (padding, sort, middle positions) against statistics.median of the
    # very same draws, for groups of sizes 1 to 10 (odd and even).
    groups = [[7], [3, 9], [5, 1, 4], [10, 2, 8, 6], [1, 5, 2, 9, 4, 3, 7], list(range(10, 0, -1))]
    picks = np.random.default_rng(1).integers(0, len(groups), size=(300, len(groups)))
    got = stats.resampled_medians(groups, picks, np.random.default_rng(5))
    # Replay the generator: one uniform per (resample, position, slot up to the longest group).
    uniforms = np.random.default_rng(5).random(picks.shape + (10,))
    for b in range(picks.shape[0]):
        for t in range(picks.shape[1]):
            group = groups[picks[b, t]]
            draws = [group[int(u * len(group))] for u in uniforms[b, t, :len(group)]]
            assert got[b, t] == median(draws)
