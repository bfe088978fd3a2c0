"""Power of the tests the report runs, for the plan (`--ponybench-plan`, run/rounds.py).

A plan is only as good as the test it is sized for. The report tests a rate difference per
task with Fisher's exact test and a LOC difference with a percentile bootstrap interval of the
ratio of medians (stats.py), each inside a multiplicity rule across the arm's per-task tests.
The normal-approximation formulas (intervals.runs_to_detect, a t-test on log LOC) overstate
what those tests find at the run counts they return, so the plan computes power here:

* rates: Fisher's exact two-sided test, power computed exactly by summing the binomial
  probabilities of every table the test rejects (no simulation, no approximation);
* LOC: a seeded simulation of the report's own test (log-normal LOC, the median ratio's
  percentile bootstrap, each resample's median drawn from uniform order statistics), fast enough
  for a plan;
* multiplicity: a test at ``level`` = alpha / m, the threshold Benjamini-Hochberg (and Holm)
  give a difference that is alone among the m tests of its family, the harder case;
* direction: a drop from a high rate is harder to find than a rise (and only one may fit in
  [0, 1]), so both are sized and the larger run count is the plan's.

Pure functions over numbers; imports nothing of the package but intervals.py.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache
from statistics import NormalDist

import numpy as np


LIMIT = 1000  # the most runs per arm a plan looks at: beyond it, "more than 1000"
LOC_EXPERIMENTS = 1000
LOC_BOOT = 500
LOC_SEED = 20261207
RATE_METHOD = ("exact power of Fisher's two-sided test (the binomial probability of every table it "
               "rejects) at alpha / m, the threshold BH gives a difference alone among the m tests of "
               "an arm; the larger run count of a rise and a drop")
LOC_METHOD = (f"seeded simulation ({LOC_EXPERIMENTS} experiments, {LOC_BOOT} bootstrap resamples, seed "
              f"{LOC_SEED}) of the report's test: log-normal LOC, percentile bootstrap interval of the ratio "
              f"of medians at 1 - alpha / m excluding 1")


@dataclass(frozen=True)
class Sized:
    """Runs per arm and the power they buy (None: not within LIMIT runs)."""

    runs: int | None
    power: float | None
    direction: str  # "rise" or "drop" (rates), "ratio" (LOC); the one that needed more runs


def _log_comb(n: int, k: np.ndarray) -> np.ndarray:
    from math import lgamma

    lg = np.array([lgamma(i + 1) for i in range(n + 1)])
    return lg[n] - lg[k] - lg[n - k]


@lru_cache(maxsize=512)
def fisher_rejects(n: int, level: float) -> np.ndarray:
    """(n+1) x (n+1) booleans: does Fisher's two-sided test reject x1 of n against x2 of n at
    ``level``? The same p-value as intervals.fisher_p (tables no more likely than the observed
    one under fixed margins), in logs with a relative tolerance for ties."""
    k = np.arange(n + 1)
    log_c = _log_comb(n, k)
    rejects = np.zeros((n + 1, n + 1), dtype=bool)
    for s in range(2 * n + 1):
        x1 = np.arange(max(0, s - n), min(n, s) + 1)
        logw = log_c[x1] + log_c[s - x1]
        w = np.exp(logw - logw.max())
        p = (w[None, :] * (w[None, :] <= w[:, None] * (1 + 1e-9))).sum(axis=1) / w.sum()
        rejects[x1, s - x1] = p <= level
    return rejects


def _binomial_pmf(n: int, p: float) -> np.ndarray:
    k = np.arange(n + 1)
    if p <= 0 or p >= 1:
        return (k == (0 if p <= 0 else n)).astype(float)
    return np.exp(_log_comb(n, k) + k * math.log(p) + (n - k) * math.log1p(-p))


def fisher_power(n: int, p_arm: float, p_reference: float, level: float) -> float:
    """Exact chance that Fisher's two-sided test at ``level`` rejects, n runs per side."""
    joint = np.outer(_binomial_pmf(n, p_arm), _binomial_pmf(n, p_reference))
    return float(joint[fisher_rejects(n, level)].sum())


def _smallest(power_at, guess: int, target: float) -> tuple[int | None, float | None]:
    """An n >= 2 with power_at(n) >= target and power_at(n - 1) < target (power climbs with n,
    with the small saw-teeth of a discrete test): a bracket around ``guess`` in steps of 15%,
    then bisection, so a good guess costs few evaluations."""
    power_at = lru_cache(maxsize=None)(power_at)  # the bisection meets its bracket's ends again
    low, high = 1, max(2, guess)  # power_at(1) is taken to fall short: nothing decides on one run
    if power_at(high) >= target:
        while high > 2:
            step = min(high - 1, max(2, int(high * 0.85)))
            if power_at(step) >= target:
                high = step
            else:
                low = step
                break
    else:
        while True:
            low, high = high, min(LIMIT, max(high + 1, math.ceil(high * 1.15)))
            if power_at(high) >= target:
                break
            if high >= LIMIT:
                return None, None
    while high - low > 1:
        middle = (low + high) // 2
        if power_at(middle) >= target:
            high = middle
        else:
            low = middle
    return high, power_at(high)


@lru_cache(maxsize=1024)
def rate_runs(p_reference: float, difference: float, level: float, power: float) -> Sized:
    """Runs per arm for Fisher's test at ``level`` to find ``difference`` from ``p_reference``
    with chance ``power``: both directions that stay in [0, 1], the larger."""
    from pytest_ponybench.reports.intervals import runs_to_detect

    found = []
    for p_arm, direction in ((p_reference + difference, "rise"), (p_reference - difference, "drop")):
        if not -1e-12 <= p_arm <= 1 + 1e-12:
            continue
        p_arm = min(1.0, max(0.0, p_arm))
        # The normal approximation is a fine first guess for the search.
        guess = runs_to_detect(p_reference, difference, confidence=1 - level, power=power) or 2
        n, achieved = _smallest(lambda m: fisher_power(m, p_arm, p_reference, level), int(guess), power)
        found.append(Sized(n, achieved, direction))
    if not found:
        return Sized(None, None, "")
    return max(found, key=lambda s: LIMIT + 1 if s.runs is None else s.runs)


def bootstrap_medians(samples: np.ndarray, n_boot: int, rng: np.random.Generator) -> np.ndarray:
    """Medians of ``n_boot`` bootstrap resamples of each row of ``samples`` (shape E x n):
    shape (n_boot, E). The same distribution as intervals.resampled_medians, drawn in O(1) per
    resample: a resample's k-th smallest value is the sorted row at floor(n U_(k)), with U_(k)
    the k-th of n uniform order statistics, Beta(k, n - k + 1); the next one, for an even n,
    is U_(k) + (1 - U_(k)) Beta(1, n - k)."""
    xs = np.sort(samples, axis=1)
    e, n = xs.shape
    k = (n - 1) // 2 + 1
    u1 = rng.beta(k, n - k + 1, (n_boot, e))
    rows = np.arange(e)[None, :]
    first = xs[rows, np.minimum(n - 1, (n * u1).astype(np.int64))]
    if n % 2:
        return first
    u2 = u1 + (1 - u1) * rng.beta(1, n - k, (n_boot, e))
    return (first + xs[rows, np.minimum(n - 1, (n * u2).astype(np.int64))]) / 2


def loc_power(n: int, sd: float, ratio: float, level: float, experiments: int = LOC_EXPERIMENTS,
              n_boot: int = LOC_BOOT, seed: int = LOC_SEED) -> float:
    """Simulated chance that the report's LOC test (the percentile bootstrap interval of the
    ratio of medians at 1 - ``level``) excludes 1, n runs per side, log LOC normal with spread
    ``sd`` and the arm's median ``ratio`` times the reference's. On the log scale the ratio of
    medians is the difference of the medians' logs."""
    rng = np.random.default_rng([seed, n])
    arm = bootstrap_medians(rng.normal(math.log(ratio), sd, (experiments, n)), n_boot, rng)
    ref = bootstrap_medians(rng.normal(0.0, sd, (experiments, n)), n_boot, rng)
    low, high = np.quantile(arm - ref, [level / 2, 1 - level / 2], axis=0)
    return float(((low > 0) | (high < 0)).mean())


@lru_cache(maxsize=256)
def loc_runs(sd: float, ratio: float, level: float, power: float) -> Sized:
    """Runs per arm for the report's LOC test to find ``ratio`` with chance ``power``. The
    first guess is the normal approximation for medians (their variance pi/2 times a mean's)."""
    z = NormalDist().inv_cdf(1 - level / 2) + NormalDist().inv_cdf(power)
    guess = math.ceil(2 * z ** 2 * (math.pi / 2) * sd ** 2 / math.log(ratio) ** 2)
    n, achieved = _smallest(lambda m: loc_power(m, sd, ratio, level), guess, power)
    return Sized(n, achieved, "ratio")
