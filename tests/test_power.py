"""power.py: the plan's printed power is what the report's own tests deliver at its run counts,
checked against seeded simulations through the report's functions (intervals.fisher_p,
stats.loc_ratio), not through the formulas being checked."""
from __future__ import annotations

import itertools

import numpy as np
import pytest

from pytest_ponybench.reports import intervals, power, stats

ALPHA = 0.05


def test_fisher_rejection_region_is_the_reports_own_fisher_test():
    for n in (3, 4, 7, 12):
        region = power.fisher_rejects(n, ALPHA)
        for x1, x2 in itertools.product(range(n + 1), repeat=2):
            assert region[x1, x2] == (intervals.fisher_p(x1, n, x2, n) <= ALPHA), (n, x1, x2)


@pytest.mark.parametrize("p_reference, family", [(0.8, 1), (0.5, 4)])
def test_the_plans_rate_power_is_the_simulated_power_of_fisher_under_bh(p_reference, family):
    sized = power.rate_runs(p_reference, 0.2, ALPHA / family, 0.8)
    n, p_arm = sized.runs, p_reference - 0.2 if sized.direction == "drop" else p_reference + 0.2
    # One task of the arm differs, the other family - 1 tests do not: BH over all of them, as
    # the report adjusts an arm's per-task tests.
    rng = np.random.default_rng(7)
    experiments, found = 1000, 0
    for _ in range(experiments):
        x_arm, x_ref = rng.binomial(n, p_arm), rng.binomial(n, p_reference)
        nulls = rng.binomial(n, p_reference, size=(family - 1, 2))
        p_values = [intervals.fisher_p(x_arm, n, x_ref, n)] + [intervals.fisher_p(a, n, b, n) for a, b in nulls]
        found += intervals.bh_adjust(p_values)[0] <= ALPHA
    assert abs(found / experiments - sized.power) <= 0.05, (sized, found / experiments)


def test_a_drop_from_a_high_rate_needs_more_runs_than_a_rise_and_the_plan_takes_it():
    sized = power.rate_runs(0.8, 0.2, ALPHA, 0.8)
    assert sized.direction == "drop"
    assert power.fisher_power(sized.runs, 1.0, 0.8, ALPHA) > power.fisher_power(sized.runs, 0.6, 0.8, ALPHA) >= 0.8
    # The normal approximation's count falls short of 0.8 under Fisher's test.
    short = intervals.runs_to_detect(0.8, 0.2, confidence=1 - ALPHA, power=0.8)
    assert power.fisher_power(short, 0.6, 0.8, ALPHA) < 0.8


def test_bootstrap_medians_have_the_distribution_of_resampled_medians():
    rng = np.random.default_rng(3)
    for n in (5, 8):
        x = rng.normal(size=n)
        fast = power.bootstrap_medians(x[None, :], 100_000, np.random.default_rng(1))[:, 0]
        slow = intervals.resampled_medians([x.tolist()], np.zeros((100_000, 1), dtype=np.int64),
                                           np.random.default_rng(2))[:, 0]
        for q in (0.025, 0.25, 0.5, 0.75, 0.975):
            assert np.mean(fast <= np.quantile(slow, q)) == pytest.approx(np.mean(slow <= np.quantile(slow, q)),
                                                                          abs=0.01), (n, q)


def test_the_plans_loc_power_is_the_simulated_power_of_the_reports_loc_test():
    sd, ratio = 0.5, 2.0
    sized = power.loc_runs(sd, ratio, ALPHA, 0.8)
    n = sized.runs
    rng = np.random.default_rng(11)
    experiments, found = 400, 0
    for e in range(experiments):
        arm = np.round(100 * ratio * np.exp(rng.normal(0, sd, n))).astype(int).tolist()
        ref = np.round(100 * np.exp(rng.normal(0, sd, n))).astype(int).tolist()
        est = stats.loc_ratio(arm, ref, n=n, n_ref=n, rng=np.random.default_rng(e), confidence=1 - ALPHA)
        found += est.verdict in ("more lines", "fewer lines")
    assert abs(found / experiments - sized.power) <= 0.05, (sized, found / experiments)
    # The t-test formula the plan used before (n = 2 (z_a + z_b)^2 sd^2 / log(ratio)^2) buys less.
    assert n > 2 * (1.959964 + 0.841621) ** 2 * sd ** 2 / np.log(ratio) ** 2


def test_bh_worked_example():
    # Sorted 0.005, 0.01, 0.03, 0.04 (m = 4): m p / rank = 0.02, 0.02, 0.04, 0.04, then a running
    # minimum from the largest down; None is not part of the family.
    assert intervals.bh_adjust([0.01, 0.04, 0.03, 0.005, None]) == pytest.approx([0.02, 0.04, 0.04, 0.02, None])
    assert intervals.bh_adjust([0.5, 0.9]) == pytest.approx([0.9, 0.9])
