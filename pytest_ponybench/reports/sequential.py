"""Sequential decisions: stop buying runs for a comparison once the data decide it.

Pure functions over numbers (no I/O, no pytest), so the same code that stops a real run can be
run over thousands of simulated experiments (tests/test_sequential.py, bench/sequential_sim.py).

The method: an anytime-valid confidence sequence by betting
    Waudby-Smith, I. and Ramdas, A. (2024). "Estimating means of bounded random variables by
    betting." Journal of the Royal Statistical Society, Series B 86(1), 1-27.
    (arXiv:2010.09686.)

Round r of a comparison (an arm against the reference on one task x model, one axis: correct
or safe) gives one pair: the arm's run r and the reference's run r, both measured. Its
difference D_r = arm - reference is in {-1, 0, 1}; the pairs are independent and identically
distributed with mean mu = p_arm - p_reference. For a boundary m and a side s (+1: the null
"mu <= m"; -1: the null "mu >= m") the bettor's capital

    K_t(m, s) = prod_{i <= t} (1 + s * lambda_i * (D_i - m)),

with a bet lambda_i >= 0 chosen from rounds before i only (predictable), is a nonnegative
supermartingale under the null, so by Ville's inequality P(sup_t K_t >= 2 / alpha) <= alpha / 2:
the chance that the capital EVER reaches 2 / alpha, at whatever round anyone looks, however
often. Four such bets make every decision:

    "arm better"  : K(0, +1) reached 2/alpha          (null mu <= 0 rejected)
    "arm worse"   : K(0, -1) reached 2/alpha          (null mu >= 0 rejected)
    "equivalent"  : K(+margin, -1) and K(-margin, +1) both reached 2/alpha
                    (mu < margin and mu > -margin: the whole interval inside the margin)

Each is one side of a (1 - alpha) confidence sequence for mu with alpha/2 per side, so every
wrong decision together has probability at most alpha, under any true mu, looked at after
every round. The bet is aGRAPA from the paper (the growth-rate-optimal bet for the running
mean and variance, regularised by one pseudo-observation at the null), truncated to
c / (1 + s m) with c = 3/4 so that no single round can zero the capital.

A naive method that re-tests with a fixed-sample interval after every round (``naive``) is
here only to show in simulation what the correction buys: its false-positive rate climbs with
every look.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

METHOD = ("anytime-valid betting confidence sequence for the paired difference arm - reference "
          "(Waudby-Smith & Ramdas 2024, JRSS-B 86(1); aGRAPA bets, c = 3/4), alpha/2 per side, "
          "checked after every round")
CITATION = ("Waudby-Smith, I. and Ramdas, A. (2024). Estimating means of bounded random variables "
            "by betting. Journal of the Royal Statistical Society Series B 86(1), 1-27. arXiv:2010.09686")
NAIVE_METHOD = ("naive peeking: Newcombe hybrid score interval at 1 - alpha re-computed after every "
                "round, no correction for repeated looks (NOT valid; shown only in simulation)")
TRUNCATION = 0.75
ALPHA = 0.05
MARGIN = 0.10
GRID_STEP = 0.01

BETTER, WORSE, EQUIVALENT, UNDECIDED = "arm better", "arm worse", "equivalent", "undecided"


@dataclass
class Decision:
    """What the pairs so far decide. ``round`` is the 1-based round at which the decision was
    reached (None while undecided); ``low``/``high`` the confidence sequence's running interval
    for mu after all ``rounds`` pairs (grid of ``GRID_STEP``, widened outward)."""

    verdict: str
    round: int | None
    rounds: int
    mean: float | None
    low: float
    high: float
    method: str

    @property
    def decided(self) -> bool:
        return self.verdict != UNDECIDED

    def reason(self, margin: float) -> str:
        interval = f"[{self.low:+.2f}, {self.high:+.2f}]"
        if self.verdict == BETTER or self.verdict == WORSE:
            return (f"{self.verdict}: the confidence sequence {interval} for arm - reference left 0 "
                    f"at round {self.round}")
        if self.verdict == EQUIVALENT:
            return (f"equivalent within +-{margin:.2f}: the confidence sequence {interval} lies inside "
                    f"the margin since round {self.round}")
        return f"undecided after {self.rounds} rounds: the confidence sequence {interval} holds 0"


def capital(diffs: np.ndarray, m: float, side: int, c: float = TRUNCATION) -> np.ndarray:
    """Running capital K_t(m, side) of every row of ``diffs`` (shape (experiments, rounds), values
    in [-1, 1], NaN after a row's end): shape (experiments, rounds). Vectorised over rows so a
    simulation of thousands of experiments runs the very code a real run does."""
    d = np.asarray(diffs, dtype=float)
    if d.ndim == 1:
        d = d[None, :]
    t = np.arange(1, d.shape[1] + 1, dtype=float)
    present = ~np.isnan(d)
    x = np.where(present, d, 0.0)
    # Running mean and variance before round i, each regularised by one pseudo-observation at
    # the null boundary m (mean) and at 1/4 of the range squared (variance), as in the paper.
    sums = np.cumsum(x, axis=1)
    mean_after = (m + sums) / (t + 1)
    mean_before = np.concatenate([np.full((d.shape[0], 1), m), mean_after[:, :-1]], axis=1)
    sq = np.cumsum((x - mean_before) ** 2, axis=1)
    var_after = (1.0 + sq) / (t + 1)
    var_before = np.concatenate([np.full((d.shape[0], 1), 1.0), var_after[:, :-1]], axis=1)
    gap = side * (mean_before - m)
    bet = np.clip(gap / (var_before + gap ** 2), 0.0, c / (1 + side * m))
    factor = np.where(present, 1.0 + side * bet * (x - m), 1.0)
    # Logs: a long experiment's capital overflows a float long before it means anything.
    return np.cumsum(np.log(np.maximum(factor, 1e-300)), axis=1)


def first_crossing(log_k: np.ndarray, alpha: float) -> np.ndarray:
    """1-based first round at which each row's capital reached 2/alpha; 0 for never."""
    hit = log_k >= math.log(2 / alpha)
    return np.where(hit.any(axis=1), hit.argmax(axis=1) + 1, 0)


def decision_rounds(diffs: np.ndarray, alpha: float = ALPHA, margin: float = MARGIN) -> dict[str, np.ndarray]:
    """Per row: the round each verdict was reached (0: never). Equivalence is reached when the
    later of its two one-sided bets crossed."""
    better = first_crossing(capital(diffs, 0.0, +1), alpha)
    worse = first_crossing(capital(diffs, 0.0, -1), alpha)
    below = first_crossing(capital(diffs, margin, -1), alpha)
    above = first_crossing(capital(diffs, -margin, +1), alpha)
    equivalent = np.where((below > 0) & (above > 0), np.maximum(below, above), 0)
    return {BETTER: better, WORSE: worse, EQUIVALENT: equivalent}


def first_verdict(rounds: dict[str, np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """Per row: (index into VERDICTS of the first verdict reached, its round); index 3 and round
    0 when undecided. Ties go to a difference over equivalence."""
    verdicts = [rounds[BETTER], rounds[WORSE], rounds[EQUIVALENT]]
    big = np.iinfo(np.int64).max
    stacked = np.stack([np.where(v > 0, v, big) for v in verdicts])
    which = stacked.argmin(axis=0)
    when = stacked.min(axis=0)
    undecided = when == big
    return np.where(undecided, 3, which), np.where(undecided, 0, when)


VERDICTS = (BETTER, WORSE, EQUIVALENT, UNDECIDED)


def interval(diffs, alpha: float = ALPHA) -> tuple[float, float]:
    """The running interval of the confidence sequence after all ``diffs``: every boundary m on
    a grid of GRID_STEP whose one-sided bet never crossed, widened by one step outward."""
    d = np.asarray(list(diffs), dtype=float)
    if d.size == 0:
        return -1.0, 1.0
    grid = np.round(np.arange(-1 + GRID_STEP, 1, GRID_STEP), 10)
    threshold = math.log(2 / alpha)
    # Each boundary has its own bets (they depend on m), so the grid is computed row by row.
    up = np.array([capital(d, m, +1).max() >= threshold for m in grid])
    down = np.array([capital(d, m, -1).max() >= threshold for m in grid])
    low = grid[up].max() if up.any() else -1.0
    high = grid[down].min() if down.any() else 1.0
    if low >= high:  # the grid's coarseness, never the data: keep a proper interval
        low, high = min(low, high), max(low, high)
    return float(low), float(high)


def decide(diffs, alpha: float = ALPHA, margin: float = MARGIN) -> Decision:
    """The decision after the pairs ``diffs`` (one per round, in round order)."""
    d = np.asarray(list(diffs), dtype=float)
    low, high = interval(d, alpha)
    if d.size == 0:
        return Decision(UNDECIDED, None, 0, None, low, high, METHOD)
    which, when = first_verdict(decision_rounds(d[None, :], alpha, margin))
    verdict = VERDICTS[int(which[0])]
    return Decision(verdict, int(when[0]) or None, int(d.size), float(d.mean()), low, high, METHOD)


# --------------------------------------------------------------------------- simulation


def simulate_pairs(p_arm: float, p_reference: float, experiments: int, rounds: int,
                   seed: int) -> np.ndarray:
    """Paired differences of ``experiments`` simulated experiments with known truth."""
    rng = np.random.default_rng(seed)
    arm = rng.random((experiments, rounds)) < p_arm
    ref = rng.random((experiments, rounds)) < p_reference
    return arm.astype(float) - ref.astype(float)


def naive_rounds(diffs: np.ndarray, arm: np.ndarray | None = None, alpha: float = ALPHA,
                 min_runs: int = 3) -> np.ndarray:
    """NAIVE_METHOD: per row, the first round (>= min_runs) at which a fixed-sample Newcombe
    interval excluded 0 (0: never). ``arm`` holds the arm's own outcomes (the reference's are
    arm - diff); without it the arm is taken as passing where D = 1 and as the reference's
    complement elsewhere, which keeps the counts of the two sides consistent with D."""
    from pytest_ponybench.reports.intervals import newcombe_interval

    d = np.asarray(diffs, dtype=float)
    if arm is None:
        arm = (d > 0).astype(float)
    ref = arm - d
    out = np.zeros(d.shape[0], dtype=int)
    confidence = 1 - alpha
    for row in range(d.shape[0]):
        xa = xr = 0
        for t in range(d.shape[1]):
            xa += int(arm[row, t])
            xr += int(ref[row, t])
            n = t + 1
            if n < min_runs:
                continue
            low, high = newcombe_interval(xa, n, xr, n, confidence)
            if low > 0 or high < 0:
                out[row] = n
                break
    return out


def simulate_outcomes(p_arm: float, p_reference: float, experiments: int, rounds: int,
                      seed: int) -> tuple[np.ndarray, np.ndarray]:
    """(arm outcomes, reference outcomes) as 0/1 arrays of shape (experiments, rounds)."""
    rng = np.random.default_rng(seed)
    arm = (rng.random((experiments, rounds)) < p_arm).astype(float)
    ref = (rng.random((experiments, rounds)) < p_reference).astype(float)
    return arm, ref


@dataclass
class SequentialPlan:
    """What the sequential design needs for one comparison: the cap of rounds that reaches the
    power (None: not within ``limit``), and the mean rounds it stops at under the alternative,
    for the arm's rate ``p_arm`` of the direction that needed the larger cap."""

    cap: int | None
    power_at_cap: float | None
    mean_rounds: float | None
    method: str
    p_arm: float | None = None


PLAN_EXPERIMENTS = 2000
PLAN_SEED = 20261204


def _plan_one(p_reference: float, p_arm: float, power: float, alpha: float, margin: float, limit: int,
              experiments: int, seed: int) -> SequentialPlan:
    diffs = simulate_pairs(p_arm, p_reference, experiments, limit, seed)
    right = BETTER if p_arm > p_reference else WORSE
    reached = decision_rounds(diffs, alpha, margin)[right]
    found = np.sort(reached[reached > 0])
    need = math.ceil(power * experiments)
    method = (f"seeded simulation ({experiments} experiments, seed {seed}) of the betting decision "
              f"at reference rate {p_reference:.2f}, arm {p_arm:.2f}")
    if found.size < need:
        return SequentialPlan(None, None, None, method + f": power {power:.2f} not reached within {limit} rounds",
                              p_arm)
    cap = int(found[need - 1])
    power_at_cap = float(((reached > 0) & (reached <= cap)).mean())
    stops = np.where((reached > 0) & (reached <= cap), reached, cap)
    return SequentialPlan(cap, power_at_cap, float(stops.mean()), method, p_arm)


@lru_cache(maxsize=256)  # a plan asks the same question for every task at the same rate
def plan_rounds(p_reference: float, difference: float, power: float = 0.8, alpha: float = ALPHA,
                margin: float = MARGIN, limit: int = 400, experiments: int = PLAN_EXPERIMENTS,
                seed: int = PLAN_SEED) -> SequentialPlan:
    """The smallest cap of rounds at which the betting decision finds a ``difference`` from a
    reference at ``p_reference`` with probability ``power``, by seeded simulation through
    ``decision_rounds``; a rise and a drop (those inside [0, 1]) are both sized and the one
    that needs more rounds is the plan (a drop from 80% needs more than a rise to 100%)."""
    plans = [_plan_one(p_reference, p_arm, power, alpha, margin, limit, experiments, seed)
             for p_arm in (p_reference + difference, p_reference - difference) if -1e-12 <= p_arm <= 1 + 1e-12]
    if not plans:
        return SequentialPlan(None, None, None, "no such difference inside [0, 1]")
    return max(plans, key=lambda p: limit + 1 if p.cap is None else p.cap)


def earliest_equivalence(alpha: float = ALPHA, margin: float = MARGIN, limit: int = 2000) -> int | None:
    """The first round at which "equivalent" can be reached: every pair so far equal (D = 0),
    the data that reach it fastest. None when not within ``limit`` rounds."""
    reached = int(decision_rounds(np.zeros((1, limit)), alpha, margin)[EQUIVALENT][0])
    return reached or None
