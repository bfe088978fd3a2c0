"""Error rates of the sequential decision, proven by simulation with known truth.

Every simulated experiment goes through `sequential.decision_rounds`, the code that stops a
real run. Seeded, so the figures are the same every time. The bound on a rate estimated from
N experiments is the nominal rate plus three binomial standard errors, sqrt(a (1 - a) / N): a
correct method passes it except with probability about 0.1%, while a method whose true rate
is well above it fails.
"""
from __future__ import annotations

import math

import numpy as np
import pytest

from pytest_ponybench.reports import sequential as seq
from pytest_ponybench.reports.intervals import runs_to_detect, z_value

EXPERIMENTS = 2000
ROUNDS = 60  # looks per experiment: a run of 60 rounds checked after every round
ALPHA = seq.ALPHA


def bound(rate: float, n: int = EXPERIMENTS) -> float:
    """The highest simulated rate a method with true rate `rate` passes (three standard errors)."""
    return rate + 3 * math.sqrt(rate * (1 - rate) / n)


def false_positive_rate(decide_rounds, p: float, seed: int) -> float:
    """Share of experiments with no true difference (both sides at rate p) in which the method
    declared a difference at any of its looks."""
    arm, ref = seq.simulate_outcomes(p, p, EXPERIMENTS, ROUNDS, seed)
    return float((decide_rounds(arm, ref) > 0).mean())


def betting(arm, ref):
    rounds = seq.decision_rounds(arm - ref, ALPHA)
    return np.where(rounds[seq.BETTER] > 0, rounds[seq.BETTER],
                    np.where(rounds[seq.WORSE] > 0, rounds[seq.WORSE], 0))


def naive(arm, ref):
    return seq.naive_rounds(arm - ref, arm, ALPHA)


def holds_alpha(decide_rounds) -> tuple[bool, list[float]]:
    rates = [false_positive_rate(decide_rounds, p, seed) for seed, p in enumerate((0.2, 0.5, 0.9), 11)]
    return all(r <= bound(ALPHA) for r in rates), rates


def test_the_betting_decision_keeps_the_false_positive_rate_under_alpha_at_every_look():
    ok, rates = holds_alpha(betting)
    assert ok, f"false-positive rates {rates} above {bound(ALPHA):.4f}"


def test_naive_peeking_fails_the_same_assertion():
    # The project's own fixed-sample interval, re-checked after every round without correction:
    # the very test above must catch it, or the test proves nothing.
    ok, rates = holds_alpha(naive)
    assert not ok, f"naive peeking passed with {rates}: the alpha test cannot tell a wrong method"
    assert max(rates) > 2 * ALPHA


def test_equivalence_is_wrongly_declared_at_most_alpha_when_the_difference_sits_on_the_margin():
    # mu = +margin exactly: "equivalent" (and "arm worse") are wrong decisions here.
    margin = 0.2
    arm, ref = seq.simulate_outcomes(0.7, 0.5, EXPERIMENTS, 300, seed=5)
    rounds = seq.decision_rounds(arm - ref, ALPHA, margin)
    wrong = float(((rounds[seq.EQUIVALENT] > 0) | (rounds[seq.WORSE] > 0)).mean())
    assert wrong <= bound(ALPHA), wrong
    # ... while with no difference at all, the same margin is reached in most experiments:
    arm, ref = seq.simulate_outcomes(0.5, 0.5, EXPERIMENTS, 300, seed=6)
    reached = float((seq.decision_rounds(arm - ref, ALPHA, margin)[seq.EQUIVALENT] > 0).mean())
    assert reached > 0.5, reached


@pytest.mark.parametrize("p_reference, difference", [(0.5, 0.2), (0.8, 0.2), (0.3, 0.4)])
def test_power_at_the_planned_cap_is_what_the_plan_claims(p_reference, difference):
    plan = seq.plan_rounds(p_reference, difference, power=0.8, alpha=ALPHA)
    assert plan.cap is not None
    p_arm = plan.p_arm
    # Fresh experiments (another seed than the plan's), through the same decision code.
    arm, ref = seq.simulate_outcomes(p_arm, p_reference, EXPERIMENTS, plan.cap, seed=99)
    side = seq.BETTER if p_arm > p_reference else seq.WORSE
    power = float((seq.decision_rounds(arm - ref, ALPHA)[side] > 0).mean())
    se = math.sqrt(0.8 * 0.2 / EXPERIMENTS)
    assert abs(power - 0.8) <= 3 * se + 0.01, (plan, power)
    # The sequential design stops earlier than its cap on average.
    assert plan.mean_rounds < plan.cap
    # Sized for the harder direction: at 80% a drop to 60%, not a rise to 100%.
    if p_reference == 0.8:
        assert p_arm == pytest.approx(0.6)
        assert plan.cap > seq._plan_one(0.8, 1.0, 0.8, ALPHA, seq.MARGIN, 400, seq.PLAN_EXPERIMENTS,
                                        seq.PLAN_SEED).cap


def pooled_z_power(p1: float, p2: float, n: int, seed: int) -> float:
    """Power of the two-proportion pooled z-test (the test the fixed-design formula is for)."""
    rng = np.random.default_rng(seed)
    x1 = rng.binomial(n, p1, EXPERIMENTS)
    x2 = rng.binomial(n, p2, EXPERIMENTS)
    pbar = (x1 + x2) / (2 * n)
    se = np.sqrt(np.maximum(pbar * (1 - pbar) * 2 / n, 1e-12))
    z = np.abs(x1 / n - x2 / n) / se
    return float((z > z_value(1 - ALPHA)).mean())


def test_the_fixed_design_runs_of_the_plan_reach_their_power():
    n = runs_to_detect(0.5, 0.2, confidence=1 - ALPHA, power=0.8)
    power = pooled_z_power(0.7, 0.5, n, seed=3)
    assert abs(power - 0.8) <= 3 * math.sqrt(0.16 / EXPERIMENTS) + 0.01, (n, power)


def test_a_clear_difference_is_decided_early_and_no_difference_is_not():
    better = seq.decide([1] * 15)
    assert better.verdict == seq.BETTER and better.round < 15 and better.low > 0
    worse = seq.decide([-1] * 15)
    assert worse.verdict == seq.WORSE and worse.high < 0 and worse.round == better.round
    same = seq.decide([0] * 15)
    assert same.verdict == seq.UNDECIDED and same.low < 0 < same.high
    assert "undecided after 15 rounds" in same.reason(seq.MARGIN)
    assert "left 0 at round" in better.reason(seq.MARGIN)
    # Once reached, a decision stays: later rounds that look the other way do not undo it.
    assert seq.decide([1] * better.round + [-1] * 3).verdict == seq.BETTER


def test_the_same_data_give_the_same_decision_and_plan():
    data = list(seq.simulate_pairs(0.6, 0.4, 1, 50, seed=1)[0])
    assert seq.decide(data) == seq.decide(data)
    assert seq.plan_rounds(0.5, 0.3) == seq.plan_rounds(0.5, 0.3)
