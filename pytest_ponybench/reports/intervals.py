"""Intervals, tests and resampling: the building blocks of stats.py, numbers in and numbers out.

Wilson and Newcombe score intervals, Kish's effective runs, runs needed for a given power,
Fisher's exact test (and the smallest p its margins allow), Holm's and Benjamini-Hochberg's
adjustments, the sign test, percentile intervals and the seeded, vectorised
bootstrap of medians. stats.py says which method answers which question, and why; the
sequential decisions (sequential.py) and the judged columns (judge_report.py) use these too.
Pure functions; imports nothing of the package.
"""
from __future__ import annotations

import math
import zlib
from statistics import NormalDist
from typing import Sequence

import numpy as np

CONFIDENCE = 0.95
# Power estimates: the smallest rate difference worth detecting (20 percentage points), and
# the chance of detecting it that a plan should have.
DETECTABLE_DIFFERENCE = 0.20
POWER = 0.80


def z_value(confidence: float = CONFIDENCE) -> float:
    return NormalDist().inv_cdf(1 - (1 - confidence) / 2)


def wilson_interval(successes: float, n: float, confidence: float = CONFIDENCE) -> tuple[float, float]:
    """Wilson score interval for a proportion successes / n (n >= 1; both may be fractional:
    the pooled floors pass an effective number of runs, effective_runs).

    centre = (x + z^2/2) / (n + z^2); half = z / (n + z^2) * sqrt(x (n - x) / n + z^2 / 4)
    """
    if n <= 0:
        raise ValueError("wilson_interval needs n >= 1")
    z = z_value(confidence)
    z2 = z * z
    centre = (successes + z2 / 2) / (n + z2)
    half = z / (n + z2) * math.sqrt(successes * (n - successes) / n + z2 / 4)
    return max(0.0, centre - half), min(1.0, centre + half)


def newcombe_interval(x1: float, n1: float, x2: float, n2: float,
                      confidence: float = CONFIDENCE) -> tuple[float, float]:
    """Newcombe's hybrid score interval for p1 - p2 (Newcombe 1998, method 10).

    With Wilson intervals (l1, u1) for p1 and (l2, u2) for p2 and d = p1 - p2:
    low = d - sqrt((p1 - l1)^2 + (u2 - p2)^2), high = d + sqrt((u1 - p1)^2 + (p2 - l2)^2).
    """
    p1, p2 = x1 / n1, x2 / n2
    l1, u1 = wilson_interval(x1, n1, confidence)
    l2, u2 = wilson_interval(x2, n2, confidence)
    d = p1 - p2
    low = d - math.sqrt((p1 - l1) ** 2 + (u2 - p2) ** 2)
    high = d + math.sqrt((u1 - p1) ** 2 + (p2 - l2) ** 2)
    return max(-1.0, low), min(1.0, high)


def effective_runs(run_counts: Sequence[int]) -> float:
    """Kish's effective number of runs behind an equal-weight mean over tasks: T^2 / sum(1/n_t).

    Each of the n_t runs of task t weighs 1 / (T n_t); Kish's (sum w)^2 / sum w^2 gives the
    number of equally weighted runs with the same binomial variance. Equal run counts: the sum
    of the runs (5 tasks x 4 runs: 20)."""
    return len(run_counts) ** 2 / sum(1 / n for n in run_counts)


def runs_to_detect(reference_rate: float | None, difference: float = DETECTABLE_DIFFERENCE,
                   confidence: float = CONFIDENCE, power: float = POWER) -> int | None:
    """Runs per arm for a two-sided test at 1 - ``confidence`` to detect ``difference`` from
    ``reference_rate`` with probability ``power`` (two-proportion normal approximation):

    n = (z_a sqrt(2 pbar (1 - pbar)) + z_b sqrt(p1 (1 - p1) + p2 (1 - p2)))^2 / difference^2,
    p1 the reference rate, p2 = p1 +- difference, pbar their mean; the larger n of the two
    directions that stay within [0, 1], rounded up. A reference without a measured run is
    taken at 50%, the most demanding rate. None when neither direction fits in [0, 1]."""
    p1 = 0.5 if reference_rate is None else reference_rate
    z_a, z_b = z_value(confidence), NormalDist().inv_cdf(power)
    needed = []
    for p2 in (p1 + difference, p1 - difference):
        if not -1e-12 <= p2 <= 1 + 1e-12:
            continue
        p2 = min(1.0, max(0.0, p2))
        pbar = (p1 + p2) / 2
        root = (z_a * math.sqrt(2 * pbar * (1 - pbar))
                + z_b * math.sqrt(p1 * (1 - p1) + p2 * (1 - p2)))
        # 92.9999999 from rounding is 93 runs, not 94.
        needed.append(math.ceil(root ** 2 / difference ** 2 - 1e-9))
    return max(needed) if needed else None


def fisher_p(x1: int, n1: int, x2: int, n2: int) -> float:
    """Two-sided Fisher exact p-value for the 2x2 table [[x1, n1-x1], [x2, n2-x2]]."""
    # Under fixed margins the first cell is hypergeometric. Every table's probability shares the
    # denominator C(n1 + n2, x1 + x2), so comparing the integer numerators C(n1, k) C(n2, s - k)
    # decides "no more likely than observed" exactly, ties included, with no float tolerance.
    # (scipy.stats.fisher_exact gives the same values, at some 70 MB of imports.)
    s = x1 + x2
    weights = {k: math.comb(n1, k) * math.comb(n2, s - k)
               for k in range(max(0, s - n2), min(n1, s) + 1)}
    observed = weights[x1]
    extreme = sum(w for w in weights.values() if w <= observed)
    return min(1.0, extreme / math.comb(n1 + n2, s))


def holm_adjust(p_values: Sequence[float | None]) -> list[float | None]:
    """Holm-Bonferroni adjusted p-values, in the input order; None entries stay None and are
    not part of the family.

    Sort the m p-values ascending; the i-th (0-based) becomes (m - i) * p, made monotone with
    a running maximum and capped at 1.
    """
    present = sorted((p, i) for i, p in enumerate(p_values) if p is not None)
    m = len(present)
    adjusted: list[float | None] = [None] * len(p_values)
    running = 0.0
    for rank, (p, i) in enumerate(present):
        running = max(running, min(1.0, (m - rank) * p))
        adjusted[i] = running
    return adjusted


def smallest_fisher_p(n1: int, n2: int, successes: int) -> float:
    """The smallest two-sided Fisher p-value any table with these margins can give: 1 when both
    sides had one outcome in every run (4/4 against 4/4), 0.029 for 0/4 against 4/4.

    A test whose smallest p is above alpha can never be a finding under any adjustment, so it
    is left out of the family it would only dilute (Tarone 1990; Gilbert 2005 for
    Benjamini-Hochberg)."""
    return min(fisher_p(k, n1, successes - k, n2)
               for k in range(max(0, successes - n2), min(n1, successes) + 1))


def bh_adjust(p_values: Sequence[float | None]) -> list[float | None]:
    """Benjamini-Hochberg adjusted p-values (q-values), in the input order; None entries stay
    None and are not part of the family.

    Sort the m p-values ascending; the i-th (1-based) becomes m p / i, made monotone with a
    running minimum from the largest down and capped at 1. Rejecting q <= alpha keeps the
    expected share of false findings among the findings at most alpha (independent or
    positively dependent tests), and under no difference at all the chance of any finding."""
    present = sorted((p, i) for i, p in enumerate(p_values) if p is not None)
    m = len(present)
    adjusted: list[float | None] = [None] * len(p_values)
    running = 1.0
    for rank in range(m - 1, -1, -1):
        p, i = present[rank]
        running = min(running, m * p / (rank + 1))
        adjusted[i] = running
    return adjusted


def sign_test_p(up: int, down: int) -> float:
    """Two-sided exact sign test: the chance of a split at least as uneven as up against down
    (ties left out before) if each were a fair coin; 1.0 with no untied pair."""
    n = up + down
    if not n:
        return 1.0
    tail = sum(math.comb(n, k) for k in range(0, min(up, down) + 1)) / 2 ** n
    return min(1.0, 2 * tail)


def percentile_interval(samples: np.ndarray, confidence: float = CONFIDENCE) -> tuple[float, float]:
    alpha = 1 - confidence
    low, high = np.quantile(samples, [alpha / 2, 1 - alpha / 2])
    return float(low), float(high)


def has_spread(low: float, high: float) -> bool:
    """False for a zero-width interval (up to floating-point noise in the ratios)."""
    return high - low > 1e-9 * max(1.0, abs(high))


def rng_for(seed: int, *key: str) -> np.random.Generator:
    """A generator seeded by the report seed and the comparison's own key, so a comparison's
    interval does not change when other arms or tasks are added to the run."""
    return np.random.default_rng([seed, zlib.crc32("\x1f".join(key).encode())])


def resampled_medians(groups: Sequence[Sequence[float]], picks: np.ndarray,
                      rng: np.random.Generator) -> np.ndarray:
    """Medians of bootstrap resamples of runs within groups.

    ``picks`` (shape B x T) says which group each of B resamples draws at each of T positions;
    for each position the group's values are resampled with replacement (same size as the
    group) and the median taken. Returns B x T medians. Vectorised by padding the groups to
    the longest one.
    """
    sizes = np.array([len(g) for g in groups])
    padded = np.full((len(groups), sizes.max()), np.nan)
    for i, values in enumerate(groups):
        padded[i, : len(values)] = values
    n = sizes[picks][..., None]  # B x T x 1
    width = padded.shape[1]
    within = (rng.random(picks.shape + (width,)) * n).astype(np.int64)
    draws = padded[picks[..., None], within]
    # Positions beyond a group's size sort last as +inf; the median of the first n sorted
    # draws is the mean of positions (n-1)//2 and n//2 (np.nanmedian is ~10x slower).
    draws[np.arange(width) >= n] = np.inf
    draws.sort(axis=2)
    middle_low = np.take_along_axis(draws, (n - 1) // 2, axis=2)
    middle_high = np.take_along_axis(draws, n // 2, axis=2)
    return ((middle_low + middle_high) / 2)[..., 0]
