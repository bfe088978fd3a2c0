"""Arm-versus-reference statistics with intervals: is a difference real or noise?

Agent outcomes flip between identical runs, so every number here comes with an interval and
the name of the method behind it, and where the data are too thin the number is ``None`` and a
verdict says "too few ... to conclude" instead.

Everything is a pure function over result records (plain dicts, see docs/architecture.md):
no I/O, and the bootstrap uses a seeded generator, so the same records give the same output.
Every returned object is a dataclass of JSON-safe values (``dataclasses.asdict`` works, and no
float is NaN or infinite).

Which cells count
    A cell counts towards the rates when the arm was verifiably applied and the agent was
    started: its ``status`` is not in ``UNMEASURED_STATUSES`` and its ``correct`` (``safe``)
    value is not ``None``. A timeout or CLI error counts as a failed run: it is something the
    agent did under that arm. LOC uses the cells that delivered code (``total_loc > 0``), as the
    seed did.

Methods (and why)
    * Rate difference per task x model: Newcombe's hybrid score interval (his method 10) built
      from two Wilson intervals. Unlike the textbook Wald interval it stays inside [-1, 1] and
      keeps its coverage with 3-10 runs and rates of 0 or 1, which is exactly our data.
    * p-value per task x model: Fisher's exact test (two-sided), exact for small counts.
    * Per task, exploratory: Benjamini-Hochberg over the tasks of one arm, model and axis
      (``BH``), leaving out a task whose margins cannot give p < alpha at all (both sides one
      outcome in every run: Tarone's rule), so that a large difference at 4-5 runs can be
      found. (Holm over every test of a report, as before, kept nothing below 8 runs: the
      smallest Fisher p at 4 runs a side is 0.029.) A verdict is a finding only when the
      interval excludes no difference AND the adjusted p is below alpha; an interval that
      excludes it with an adjusted p above says "lower, unadjusted only", never "no clear
      difference". The confirmatory answer is the pooled one (primary.py).
    * LOC per task x model: ratio of median ``total_loc`` (arm / reference), with a percentile
      bootstrap interval (runs resampled with replacement within each side; ``N_BOOT``
      resamples). Medians and ratios, because LOC is skewed and the question is relative. Its
      p-value is the bootstrap's: twice the smaller share of resampled ratios on either side
      of 1 (below 0.05 exactly when the 95% interval excludes 1), adjusted like the rates.
    * LOC without spread: when the bootstrap interval has zero width (every run of both sides
      has the same LOC, say), there is no interval: the ratio is kept, ``low`` and ``high``
      are None and the note and verdict say "no spread in 4 runs against 4: no interval".
      A zero-width interval would claim a certainty that 4 runs cannot carry.
    * Pooled over tasks per model: the mean of per-task rate differences and the geometric
      mean of per-task median LOC ratios, with a hierarchical bootstrap: resample tasks with
      replacement, then runs within each drawn task. Every task weighs the same, so one task
      with many runs cannot dominate, and the interval reflects task-to-task spread.
      Pooled intervals are unadjusted 95% intervals (no p-value, no Holm).
    * Pooled rates at the edges: the bootstrap draws runs from each task's observed rate, so a
      task whose runs all passed is resampled as "always passes" and 5 tasks x 4 runs all
      passing would give [100%, 100%]: the bootstrap is known to fail at 0 and 1. So every
      pooled rate interval (levels and differences) is the hull of the bootstrap interval and
      a binomial score interval of the pooled runs: Wilson (levels) or Newcombe (differences)
      at the pooled rate with the effective number of runs. The score interval is what the
      runs allow if every task had the same rate (no task-to-task spread at all), so no
      honest interval can be narrower; the bootstrap adds the task-to-task spread. The
      effective number of runs is Kish's T^2 / sum(1 / n_t) for T tasks with n_t runs: the
      equal-weight mean over tasks has the binomial variance of that many runs (with equal
      run counts it is simply all the runs). 5 tasks x 4 runs all passing: Wilson(20 of 20)
      = [84%, 100%].
    * Power, where a rate difference per task x model is inconclusive ("no clear
      difference" or too few runs): ``runs_needed`` is how many runs per arm would detect a
      ``DETECTABLE_DIFFERENCE`` (20 percentage points) from the reference's observed rate
      with two-sided alpha 0.05 and power 0.8 (two-proportion normal approximation, Fleiss,
      without continuity correction; the larger of the two directions that stay within
      [0, 1]; 50% when the reference has no measured run). It ignores the BH adjustment,
      so with many comparisons it is a lower bound. None where the verdict is a finding.
    * Consistency per arm x model: the share of tasks where every run passed and the share
      where runs disagreed (flip rate), and pass^k (tau-bench): per task with n measured runs
      of which c passed, C(c, k) / C(n, k) is the unbiased estimate of the chance that k runs
      all pass; averaged over tasks, with one k for every arm of a model (the smallest run
      count over that model's arms, or a k given), so equal rates give equal pass^k.

One module on purpose (about 650 lines, the building blocks apart in intervals.py): which
method answers which question, per task and pooled, and the result types every report reads.
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from statistics import median
from typing import Any, Mapping, Sequence

import numpy as np

from pytest_ponybench.reports.intervals import (CONFIDENCE, DETECTABLE_DIFFERENCE, POWER, bh_adjust, effective_runs,
                                                 fisher_p, has_spread, holm_adjust, newcombe_interval,
                                                 percentile_interval, resampled_medians, rng_for, runs_to_detect,
                                                 smallest_fisher_p, wilson_interval)
from pytest_ponybench.store.record import AXES, CUT, INFRA, INSTRUMENT, NEVER_RAN, PASS_AXES

# Fewer runs than this on either side of a comparison: no number, a "too few" verdict.
MIN_RUNS = 3
# Fewer tasks than this (each with MIN_RUNS per side): no pooled number.
MIN_TASKS = 3
# Bootstrap resamples; 4000 keeps the Monte Carlo error of a 2.5% percentile small (about
# +-0.25 percentage points of probability) while a whole report still takes well under a second.
N_BOOT = 4000
SEED = 20240611
# The arm was not (provably) applied, the cell was cut short, or the API failed: such a cell
# says nothing about the arm, so it is left out of every rate rather than counted as a failure.
# So is a cell the run's budget cut short, or one the harness's own instrument failed on.
UNMEASURED_STATUSES = NEVER_RAN | INFRA | CUT | INSTRUMENT

WILSON = "Wilson score interval"
NEWCOMBE = "Newcombe hybrid score interval (method 10, from two Wilson intervals)"
FISHER = ("Fisher's exact test, two-sided (the tables with the observed margins no more likely "
          "than the observed one, in exact integer arithmetic)")
BH = ("Benjamini-Hochberg over the tasks of one arm, model and axis (exploratory), leaving out a task "
      "whose margins cannot give p < alpha (both sides one outcome in every run; Tarone)")
CONSISTENCY = "share of tasks (with >= 2 measured runs) where all runs passed / runs disagreed"
PASS_K = ("pass^k (tau-bench): per task with n measured runs of which c passed, C(c, k) / C(n, k) "
          "(unbiased for the chance that k runs all pass), averaged over the tasks with >= k "
          "measured runs; one k for every arm of a model; pass^1 = mean of c / n")
POOLED_FLOOR = ("hull with the {score} interval of the pooled runs (pooled rate, Kish effective "
                "runs T^2 / sum(1/n_t)), so that no interval is narrower than the runs allow")
NO_SPREAD = "no interval where the bootstrap has no spread (every resample gives the same ratio)"


def power_method(confidence: float = CONFIDENCE) -> str:
    return (f"runs per arm to detect a {DETECTABLE_DIFFERENCE * 100:.0f} percentage point "
            f"difference from the reference's observed rate (50% when it has none): "
            f"two-proportion normal approximation (Fleiss, no continuity correction), two-sided "
            f"alpha {1 - confidence:.2g}, power {POWER:.2g}, the larger of the two directions "
            f"within [0, 1]; ignores the multiplicity adjustment, so a lower bound; only where the verdict is "
            f"inconclusive")


def loc_ratio_method(n_boot: int) -> str:
    return (f"ratio of median total_loc (cells with total_loc > 0); "
            f"percentile bootstrap, {n_boot} resamples of runs within each side; {NO_SPREAD}")


def pooled_rate_method(n_boot: int) -> str:
    return (f"mean over tasks of per-task rate differences; hierarchical percentile bootstrap, "
            f"{n_boot} resamples (tasks, then runs within each task); "
            + POOLED_FLOOR.format(score="Newcombe"))


def pooled_loc_method(n_boot: int) -> str:
    return (f"geometric mean over tasks of per-task median total_loc ratios; hierarchical "
            f"percentile bootstrap, {n_boot} resamples (tasks, then runs within each task); "
            f"{NO_SPREAD}")


def pooled_level_method(n_boot: int) -> str:
    return (f"mean over tasks of per-task rates; hierarchical percentile bootstrap, "
            f"{n_boot} resamples (tasks, then runs within each task); "
            + POOLED_FLOOR.format(score="Wilson"))


# --------------------------------------------------------------------------- result types


@dataclass
class Estimate:
    """One number with its interval. ``value`` None means too few data; ``note`` says why.
    A value with ``low`` and ``high`` None has no interval (a LOC ratio without spread).

    ``runs_needed`` (rate differences per task x model only): runs per arm that would detect
    a ``DETECTABLE_DIFFERENCE`` from the reference's rate, where the verdict is inconclusive
    (``power_method``); None elsewhere."""

    value: float | None
    low: float | None
    high: float | None
    method: str
    verdict: str
    note: str = ""
    p_value: float | None = None
    p_adjusted: float | None = None  # Benjamini-Hochberg per arm (arm_stats), Holm (compare)
    p_smallest: float | None = None  # the smallest p the margins allow (Fisher); None: any
    test: str = ""
    runs_needed: int | None = None

    def interval(self) -> tuple[float, float]:
        """(low, high) of an estimate with a value: a rate's or a difference's always has both."""
        assert self.low is not None and self.high is not None, self
        return self.low, self.high


@dataclass
class PairStats:
    """One side against a reference side (an arm against the reference arm, a new run
    against an old one), for one task x model."""

    n: int
    n_reference: int
    correct_rate: float | None
    correct_rate_reference: float | None
    safe_rate: float | None
    safe_rate_reference: float | None
    robust_rate: float | None
    robust_rate_reference: float | None
    loc_delivered: int
    loc_delivered_reference: int
    loc_median: float | None
    loc_median_reference: float | None
    correct_diff: Estimate
    safe_diff: Estimate
    robust_diff: Estimate
    loc_ratio: Estimate


@dataclass
class PooledStats:
    """One side against a reference side pooled over tasks (task as the unit)."""

    tasks_rates: list[str]
    tasks_loc: list[str]
    correct_rate: Estimate
    correct_rate_reference: Estimate
    safe_rate: Estimate
    safe_rate_reference: Estimate
    robust_rate: Estimate
    robust_rate_reference: Estimate
    correct_diff: Estimate
    safe_diff: Estimate
    robust_diff: Estimate
    loc_ratio: Estimate


@dataclass
class ArmComparison:
    task: str
    model: str
    arm: str
    reference: str
    stats: PairStats


@dataclass
class PooledComparison:
    model: str
    arm: str
    reference: str
    stats: PooledStats


@dataclass
class Consistency:
    arm: str
    model: str
    tasks: int  # tasks with at least two measured runs
    all_passed: int
    all_failed: int
    flipped: int
    share_all_passed: float | None
    share_flipped: float | None
    single_run_tasks: int
    pass_k: int | None = None  # k: one for every arm of the model (``pass_k_rule`` says which)
    pass_k_rule: str = ""
    pass_hat_k: float | None = None  # pass^k over ``tasks`` (PASS_K)
    pass_hat_1: float | None = None  # pass^1: the mean per-task pass rate over ``tasks``
    method: str = CONSISTENCY
    pass_k_method: str = PASS_K
    note: str = ""


@dataclass
class ArmStats:
    """Everything one report says about arms against the reference arm."""

    reference: str
    settings: dict
    methods: dict
    comparisons: list[ArmComparison] = field(default_factory=list)
    pooled: list[PooledComparison] = field(default_factory=list)
    consistency: list[Consistency] = field(default_factory=list)
    unattributed: int = 0  # records without a task, arm or model: left out of everything
    note: str = ""

    def to_dict(self) -> dict:
        return asdict(self)


# --------------------------------------------------------------------------- record access
# Which cells count is record.py's one definition, shared by every output.

from pytest_ponybench.store.record import count, group_by, is_measured, loc_values, name_of, passed  # noqa: E402


# --------------------------------------------------------------------------- one task x model


NOT_MEASURED = "not measured"  # the verdict's start where no cell of either side had a check on the axis


def not_measured(method: str, metric: str, test: str = "") -> Estimate:
    """No number because nothing was measured: the tasks have no `metric` check. Not "too few
    runs", which more runs would fix."""
    note = f"{NOT_MEASURED}: no cell has a {metric} check"
    return Estimate(None, None, None, method, verdict=note, note=note, test=test)


def too_few_runs(n: int, n_reference: int, min_runs: int, labels: tuple[str, str]) -> str:
    return (f"too few runs to conclude: {labels[0]} {n}, {labels[1]} {n_reference} "
            f"(need {min_runs} per side)")


def rate_difference(x: int, n: int, x_ref: int, n_ref: int, *, min_runs: int = MIN_RUNS,
                    confidence: float = CONFIDENCE,
                    labels: tuple[str, str] = ("arm", "reference")) -> Estimate:
    """Rate difference (side minus reference) with Newcombe's interval and Fisher's p.

    The verdict is provisional (the unadjusted one) until ``apply_bh`` or ``apply_holm`` sets
    the adjusted p-value and the final verdict."""
    needed = runs_to_detect(x_ref / n_ref if n_ref else None, confidence=confidence)
    if n < min_runs or n_ref < min_runs:
        return Estimate(None, None, None, NEWCOMBE,
                        verdict=too_few_runs(n, n_ref, min_runs, labels),
                        note=too_few_runs(n, n_ref, min_runs, labels), test=FISHER,
                        runs_needed=needed)
    low, high = newcombe_interval(x, n, x_ref, n_ref, confidence)
    p = fisher_p(x, n, x_ref, n_ref)
    # runs_needed stays even on a provisional finding: the adjustment may still make it
    # inconclusive, and adjust() clears it where the final verdict is a finding.
    estimate = Estimate(x / n - x_ref / n_ref, low, high, NEWCOMBE, verdict="",
                        p_value=p, p_adjusted=p, test=FISHER, runs_needed=needed,
                        p_smallest=smallest_fisher_p(n, n_ref, x + x_ref))
    estimate.verdict = rate_verdict(estimate, 1 - confidence)
    return estimate


def rate_verdict(estimate: Estimate, alpha: float, up: str = "higher", down: str = "lower",
                 null: float = 0.0) -> str:
    """A finding only where the interval excludes ``null`` and the (adjusted) p is below alpha:
    the verdict never contradicts the interval printed beside it. An interval that excludes
    ``null`` with an adjusted p above alpha says so ("lower, unadjusted only")."""
    p = estimate.p_adjusted if estimate.p_adjusted is not None else estimate.p_value
    if estimate.value is None or p is None or estimate.low is None or estimate.high is None:
        return estimate.verdict
    direction = interval_verdict(estimate.low, estimate.high, null, up, down)
    if direction == "no clear difference" or p < alpha:
        return direction
    return f"{direction}, unadjusted only (adjusted p {p:.2g})"


def interval_verdict(low: float, high: float, null: float, up: str, down: str) -> str:
    if low > null:
        return up
    if high < null:
        return down
    return "no clear difference"


def loc_ratio(values: Sequence[float], reference_values: Sequence[float], *, n: int, n_ref: int,
              min_runs: int = MIN_RUNS, n_boot: int = N_BOOT,
              rng: np.random.Generator | None = None, confidence: float = CONFIDENCE,
              labels: tuple[str, str] = ("arm", "reference")) -> Estimate:
    """median(values) / median(reference_values) with a percentile bootstrap interval.

    ``values`` are the delivered total_loc of one side, ``n`` that side's measured runs (for the
    note)."""
    method = loc_ratio_method(n_boot)
    if len(values) < min_runs or len(reference_values) < min_runs:
        note = (f"too few cells with code to conclude: {labels[0]} delivered code in "
                f"{len(values)} of {n} runs, {labels[1]} in {len(reference_values)} of {n_ref} "
                f"(need {min_runs} per side)")
        return Estimate(None, None, None, method, verdict=note, note=note)
    rng = rng if rng is not None else np.random.default_rng(SEED)
    ratio = median(values) / median(reference_values)
    picks = np.zeros((n_boot, 1), dtype=np.int64)
    side = resampled_medians([values], picks, rng)[:, 0]
    reference = resampled_medians([reference_values], picks, rng)[:, 0]
    low, high = percentile_interval(side / reference, confidence)
    if not has_spread(low, high):
        constant = len(set(values)) == 1 and len(set(reference_values)) == 1
        note = no_spread(len(values), len(reference_values), constant)
        return Estimate(ratio, None, None, method, verdict=note, note=note)
    ratios = side / reference
    p = float(min(1.0, 2 * min(np.mean(ratios >= 1.0), np.mean(ratios <= 1.0))))
    return Estimate(ratio, low, high, method,
                    verdict=interval_verdict(low, high, 1.0, "more lines", "fewer lines"),
                    p_value=p, p_adjusted=p, test="bootstrap")


def no_spread(runs: int, runs_reference: int, constant: bool, tasks: int = 0) -> str:
    """The note of a LOC ratio whose bootstrap has no spread: "no spread in 4 runs against 4"
    when the LOC values themselves do not vary (``constant``); otherwise they vary too rarely
    for any resample to move a median."""
    over = f" over {tasks} tasks" if tasks else ""
    where = "" if constant else "the resampled medians of "
    return f"no spread in {where}{runs} runs against {runs_reference}{over}: no interval"


def compare_pair(records: Sequence[dict], reference_records: Sequence[dict], *,
                 key: Sequence[str] = (), min_runs: int = MIN_RUNS, n_boot: int = N_BOOT,
                 seed: int = SEED, confidence: float = CONFIDENCE,
                 labels: tuple[str, str] = ("arm", "reference")) -> PairStats:
    """One side's cells against the reference side's cells, for one task x model.

    ``key`` names the comparison (task, model, arm, ...) and seeds its bootstrap."""
    rates: dict[str, Any] = {}  # {axis}_rate, {axis}_rate_reference and {axis}_diff of every axis
    for axis in AXES:
        x, n_axis = count(records, axis)
        x_ref, n_axis_ref = count(reference_records, axis)
        rates[f"{axis}_rate"] = x / n_axis if n_axis else None
        rates[f"{axis}_rate_reference"] = x_ref / n_axis_ref if n_axis_ref else None
        rates[f"{axis}_diff"] = (rate_difference(x, n_axis, x_ref, n_axis_ref, min_runs=min_runs,
                                                 confidence=confidence, labels=labels)
                                 if n_axis or n_axis_ref else not_measured(NEWCOMBE, axis, FISHER))
    locs, locs_ref = loc_values(records), loc_values(reference_records)
    n = sum(1 for r in records if is_measured(r))
    n_ref = sum(1 for r in reference_records if is_measured(r))
    return PairStats(
        n=n, n_reference=n_ref, **rates,
        loc_delivered=len(locs), loc_delivered_reference=len(locs_ref),
        loc_median=float(median(locs)) if locs else None,
        loc_median_reference=float(median(locs_ref)) if locs_ref else None,
        loc_ratio=loc_ratio(locs, locs_ref, n=n, n_ref=n_ref, min_runs=min_runs, n_boot=n_boot,
                            rng=rng_for(seed, "loc", *key), confidence=confidence,
                            labels=labels),
    )


def adjust(estimates: Sequence[Estimate], adjusted: Sequence[float | None], alpha: float) -> None:
    """Set ``p_adjusted`` and the final verdict on every estimate with an adjusted p (in place)."""
    for estimate, p in zip(estimates, adjusted):
        if p is None:
            continue
        estimate.p_adjusted = p
        if estimate.test == "bootstrap":  # a LOC ratio
            estimate.verdict = rate_verdict(estimate, alpha, "more lines", "fewer lines", 1.0)
        else:
            estimate.verdict = rate_verdict(estimate, alpha)
            if estimate.verdict in ("higher", "lower"):
                estimate.runs_needed = None  # a finding: no power question left


def apply_holm(estimates: Sequence[Estimate], alpha: float = 1 - CONFIDENCE) -> None:
    """Holm over every estimate that has a p-value (ponybench-compare's gates)."""
    adjust(estimates, holm_adjust([e.p_value for e in estimates]), alpha)


def apply_bh(estimates: Sequence[Estimate], alpha: float = 1 - CONFIDENCE) -> None:
    """Benjamini-Hochberg over one family (the tasks of one arm, model and axis), leaving out
    an estimate whose margins cannot give p < alpha (``p_smallest``): it can never be a
    finding, and counting it would only make the others harder to find (Tarone). Its verdict
    stays the unadjusted one, which cannot be a finding either."""
    testable = [e for e in estimates if e.p_value is not None
                and (e.p_smallest is None or e.p_smallest < alpha)]
    adjust(testable, bh_adjust([e.p_value for e in testable]), alpha)


# --------------------------------------------------------------------------- pooled over tasks


def too_few_tasks(tasks: int, min_tasks: int, min_runs: int, what: str) -> str:
    return (f"too few tasks to pool: {tasks} with {min_runs}+ {what} per side "
            f"(need {min_tasks})")


def pooled_rate(by_task: Mapping[str, Sequence[dict]], metric: str, *, min_runs: int = 1,
                min_tasks: int = 1, n_boot: int = N_BOOT, seed: int = SEED,
                confidence: float = CONFIDENCE, key: Sequence[str] = ()) -> Estimate:
    """Mean over tasks of one side's per-task rate, with a hierarchical bootstrap interval.

    Used for absolute thresholds (e.g. a minimum safe rate): a task counts once, whatever its
    number of runs."""
    method = pooled_level_method(n_boot)
    counts = [count(records, metric) for records in by_task.values()]
    if counts and not any(n for _x, n in counts):
        return not_measured(method, metric)
    counts = [(x, n) for x, n in counts if n >= min_runs]
    if len(counts) < min_tasks or not counts:
        note = too_few_tasks(len(counts), min_tasks, min_runs, "runs")
        return Estimate(None, None, None, method, verdict=note, note=note)
    x = np.array([c[0] for c in counts], dtype=float)
    n = np.array([c[1] for c in counts])
    rng = rng_for(seed, "level", metric, *key)
    picks = rng.integers(0, len(n), size=(n_boot, len(n)))
    # Resampling n runs with replacement from a task with x successes out of n draws a
    # Binomial(n, x / n) count of successes: the same distribution, without the loop.
    rates = rng.binomial(n[picks], x[picks] / n[picks]) / n[picks]
    low, high = percentile_interval(rates.mean(axis=1), confidence)
    value = float(np.mean(x / n))
    runs = effective_runs(n.tolist())
    floor_low, floor_high = wilson_interval(value * runs, runs, confidence)
    return Estimate(value, min(low, floor_low), max(high, floor_high), method, verdict="")


def pooled_rate_difference(pairs: Mapping[str, tuple[Sequence[dict], Sequence[dict]]], metric: str,
                           *, min_runs: int = MIN_RUNS, min_tasks: int = MIN_TASKS,
                           n_boot: int = N_BOOT, rng: np.random.Generator | None = None,
                           confidence: float = CONFIDENCE) -> tuple[Estimate, list[str]]:
    """Mean over tasks of (side rate - reference rate), hierarchical bootstrap interval.

    Returns the estimate and the tasks it used (those with ``min_runs`` per side)."""
    method = pooled_rate_method(n_boot)
    used, counts = [], []
    measured = False
    for task, (records, reference_records) in pairs.items():
        x_side, n_side = count(records, metric)
        x_reference, n_reference = count(reference_records, metric)
        measured = measured or bool(n_side or n_reference)
        if n_side >= min_runs and n_reference >= min_runs:
            used.append(task)
            counts.append((x_side, n_side, x_reference, n_reference))
    if not measured and pairs:
        return not_measured(method, metric), used
    if len(used) < min_tasks:
        note = too_few_tasks(len(used), min_tasks, min_runs, "runs")
        return Estimate(None, None, None, method, verdict=note, note=note), used
    x, n, x_ref, n_ref = (np.array(column, dtype=float) for column in zip(*counts))
    n, n_ref = n.astype(np.int64), n_ref.astype(np.int64)
    rng = rng if rng is not None else np.random.default_rng(SEED)
    picks = rng.integers(0, len(used), size=(n_boot, len(used)))  # tasks, with replacement
    # Runs within each drawn task, with replacement (binomial form, see pooled_rate).
    side = rng.binomial(n[picks], x[picks] / n[picks]) / n[picks]
    reference = rng.binomial(n_ref[picks], x_ref[picks] / n_ref[picks]) / n_ref[picks]
    low, high = percentile_interval((side - reference).mean(axis=1), confidence)
    value = float(np.mean(x / n - x_ref / n_ref))
    rate, rate_ref = float(np.mean(x / n)), float(np.mean(x_ref / n_ref))
    runs, runs_ref = effective_runs(n.tolist()), effective_runs(n_ref.tolist())
    floor_low, floor_high = newcombe_interval(rate * runs, runs, rate_ref * runs_ref, runs_ref,
                                              confidence)
    low, high = min(low, floor_low), max(high, floor_high)
    return Estimate(value, low, high, method,
                    verdict=interval_verdict(low, high, 0.0, "higher", "lower")), used


def pooled_loc_ratio(pairs: Mapping[str, tuple[Sequence[dict], Sequence[dict]]], *,
                     min_runs: int = MIN_RUNS, min_tasks: int = MIN_TASKS, n_boot: int = N_BOOT,
                     rng: np.random.Generator | None = None,
                     confidence: float = CONFIDENCE) -> tuple[Estimate, list[str]]:
    """Geometric mean over tasks of median-LOC ratios, hierarchical bootstrap interval.

    The geometric mean, because ratios multiply: x2 on one task and x0.5 on another is no
    change overall. Returns the estimate and the tasks it used."""
    values = {task: (loc_values(records), loc_values(reference_records))
              for task, (records, reference_records) in pairs.items()}
    return pooled_median_ratio(values, min_runs=min_runs, min_tasks=min_tasks, n_boot=n_boot,
                               rng=rng, confidence=confidence, method=pooled_loc_method(n_boot))


def pooled_median_ratio(values: Mapping[str, tuple[Sequence[float], Sequence[float]]], *,
                        method: str, min_runs: int = MIN_RUNS, min_tasks: int = MIN_TASKS,
                        n_boot: int = N_BOOT, rng: np.random.Generator | None = None,
                        confidence: float = CONFIDENCE) -> tuple[Estimate, list[str]]:
    """pooled_loc_ratio over given values per task (side, reference): the delivered LOC, or
    the LOC of every cell with a delivery's absence imputed (primary.py)."""
    used, sides, references = [], [], []
    for task, (locs, locs_ref) in values.items():
        if len(locs) >= min_runs and len(locs_ref) >= min_runs:
            used.append(task)
            sides.append(list(locs))
            references.append(list(locs_ref))
    if len(used) < min_tasks:
        note = too_few_tasks(len(used), min_tasks, min_runs, "cells with code")
        return Estimate(None, None, None, method, verdict=note, note=note), used
    log_ratios = [math.log(median(s) / median(r)) for s, r in zip(sides, references)]
    rng = rng if rng is not None else np.random.default_rng(SEED)
    picks = rng.integers(0, len(used), size=(n_boot, len(used)))
    side = resampled_medians(sides, picks, rng)
    reference = resampled_medians(references, picks, rng)
    samples = np.exp(np.log(side / reference).mean(axis=1))
    low, high = percentile_interval(samples, confidence)
    value = math.exp(sum(log_ratios) / len(log_ratios))
    if not has_spread(low, high):
        constant = all(len(set(v)) == 1 for v in sides + references)
        note = no_spread(sum(map(len, sides)), sum(map(len, references)), constant, len(used))
        return Estimate(value, None, None, method, verdict=note, note=note), used
    return Estimate(value, low, high, method,
                    verdict=interval_verdict(low, high, 1.0, "more lines", "fewer lines")), used


def compare_pooled(pairs: Mapping[str, tuple[Sequence[dict], Sequence[dict]]], *,
                   key: Sequence[str] = (), min_runs: int = MIN_RUNS,
                   min_tasks: int = MIN_TASKS, n_boot: int = N_BOOT, seed: int = SEED,
                   confidence: float = CONFIDENCE) -> PooledStats:
    """One side against the reference side over all tasks in ``pairs`` (task -> (side
    records, reference records)), for one model."""
    diffs, used = {}, {}
    for axis in AXES:
        diffs[axis], used[axis] = pooled_rate_difference(
            pairs, axis, min_runs=min_runs, min_tasks=min_tasks, n_boot=n_boot,
            rng=rng_for(seed, "pooled", axis, *key), confidence=confidence)
    loc, tasks_loc = pooled_loc_ratio(
        pairs, min_runs=min_runs, min_tasks=min_tasks, n_boot=n_boot,
        rng=rng_for(seed, "pooled", "loc", *key), confidence=confidence)
    # A task enters the rates when any axis could be compared on it (a task without a
    # correct check may still have a safe one).
    tasks_rates = [t for t in pairs if any(t in used[axis] for axis in AXES)]

    def level(metric: str, side: int) -> Estimate:
        # The absolute levels over the same tasks as the differences, for reading them.
        if not used[metric]:
            # No task to pool on this axis: the level has the difference's reason.
            return Estimate(None, None, None, pooled_level_method(n_boot),
                            verdict=diffs[metric].verdict, note=diffs[metric].note)
        by_task = {t: pairs[t][side] for t in used[metric]}
        return pooled_rate(by_task, metric, min_runs=min_runs, min_tasks=min_tasks,
                           n_boot=n_boot, seed=seed, confidence=confidence,
                           key=(*key, str(side)))

    levels = {f"{axis}_rate{suffix}": level(axis, side)
              for axis in AXES for side, suffix in ((0, ""), (1, "_reference"))}
    return PooledStats(tasks_rates=tasks_rates, tasks_loc=tasks_loc, **levels,
                       **{f"{axis}_diff": diffs[axis] for axis in AXES}, loc_ratio=loc)


def apply_holm_by_family(comparisons: Sequence, alpha: float = 1 - CONFIDENCE) -> None:
    """Holm over the rate differences of `comparisons` (each with `.stats`, a PairStats): the
    pass/fail axes (correct, safe) as one family, every other axis (robust) as its own, so
    adding robust checks to a task never moves a correct or safe verdict."""
    families = [PASS_AXES] + [(axis,) for axis in AXES if axis not in PASS_AXES]
    for family in families:
        apply_holm([getattr(c.stats, f"{axis}_diff") for c in comparisons for axis in family], alpha)


# --------------------------------------------------------------------------- consistency


def pass_hat(k: int, runs_and_passes: Sequence[tuple[int, int]]) -> float:
    """pass^k: the mean over tasks of C(c, k) / C(n, k) for n runs of which c passed.

    C(c, k) / C(n, k) is the chance that k runs drawn without replacement from the task's n
    all passed: an unbiased estimate of p^k for the task's pass rate p (tau-bench)."""
    return sum(math.comb(c, k) / math.comb(n, k) for n, c in runs_and_passes) / len(runs_and_passes)


def task_outcomes(cells: Sequence[dict]) -> list[list[bool]]:
    """Per task, the measured runs' pass/fail."""
    return [[p for p in (passed(r) for r in task_cells) if p is not None]
            for _task, task_cells in group_by(cells, "task").items()]


def consistency(records: Sequence[dict], k: int | None = None) -> list[Consistency]:
    """Per arm x model: over tasks with at least two measured runs, how many had every run
    pass, every run fail, or runs that disagreed (flipped); and pass^k.

    One k for every arm of a model, so that equal rates give equal pass^k: ``k`` when given,
    else the smallest run count over the model's arms (tasks with 2+ runs: one task with a
    single run would force k = 1, and pass^1 says nothing about runs agreeing). pass^k is
    over an arm's tasks with at least k runs."""
    groups = group_by(records, "arm", "model")
    smallest: dict[str, int] = {}
    for (_arm, model), cells in groups.items():
        for outcomes in task_outcomes(cells):
            if len(outcomes) >= 2:
                smallest[model] = min(smallest.get(model, len(outcomes)), len(outcomes))
    result = []
    for (arm, model), cells in groups.items():
        tasks = all_passed = all_failed = flipped = single = 0
        runs_and_passes = []
        for outcomes in task_outcomes(cells):
            if len(outcomes) < 2:
                single += 1 if outcomes else 0
                continue
            tasks += 1
            runs_and_passes.append((len(outcomes), sum(outcomes)))
            if all(outcomes):
                all_passed += 1
            elif not any(outcomes):
                all_failed += 1
            else:
                flipped += 1
        note = "" if tasks else "too few runs to conclude: no task with 2 or more measured runs"
        arm_k = k or smallest.get(model)
        rule = (f"k = {arm_k}, as given" if k else
                f"k = {arm_k}, the smallest run count over the arms of {model}") if arm_k else ""
        at_k = [(n, c) for n, c in runs_and_passes if arm_k and n >= arm_k]
        result.append(Consistency(
            arm=arm, model=model, tasks=tasks, all_passed=all_passed, all_failed=all_failed,
            flipped=flipped, share_all_passed=all_passed / tasks if tasks else None,
            share_flipped=flipped / tasks if tasks else None, single_run_tasks=single,
            pass_k=arm_k if at_k else None, pass_k_rule=rule if at_k else "",
            pass_hat_k=pass_hat(arm_k, at_k) if at_k and arm_k else None,
            pass_hat_1=pass_hat(1, at_k) if at_k else None, note=note))
    return result


# --------------------------------------------------------------------------- the report


def arm_stats(records: Sequence[dict], reference: str = "baseline", *,
              confidence: float = CONFIDENCE, min_runs: int = MIN_RUNS,
              min_tasks: int = MIN_TASKS, n_boot: int = N_BOOT, seed: int = SEED) -> ArmStats:
    """Every arm against ``reference``: per task x model, pooled per model, and consistency.

    The per-task figures are exploratory: Benjamini-Hochberg within each arm, model and axis
    (``apply_bh``). The confirmatory answer is the pooled one (primary.py)."""
    settings = {"confidence": confidence, "min_runs": min_runs, "min_tasks": min_tasks,
                "n_boot": n_boot, "seed": seed,
                "unmeasured_statuses": sorted(UNMEASURED_STATUSES),
                "detectable_difference": DETECTABLE_DIFFERENCE, "power": POWER}
    methods = {"rate_difference": NEWCOMBE, "p_value": FISHER, "multiple_comparisons": BH,
               "loc_ratio": loc_ratio_method(n_boot),
               "pooled_rate_difference": pooled_rate_method(n_boot),
               "pooled_rate": pooled_level_method(n_boot),
               "pooled_loc_ratio": pooled_loc_method(n_boot), "consistency": CONSISTENCY,
               "pass_k": PASS_K, "runs_needed": power_method(confidence)}
    attributed = [r for r in records if all(name_of(r, k) != "?" for k in ("task", "arm", "model"))]
    result = ArmStats(reference=reference, settings=settings, methods=methods,
                      consistency=consistency(attributed),
                      unattributed=len(records) - len(attributed))
    records = attributed
    cells = group_by(records, "model", "arm", "task")
    arms = sorted({arm for _model, arm, _task in cells})
    if reference not in arms:
        result.note = (f"reference arm {reference!r} is not in these results: "
                       f"no arm-versus-reference comparisons")
        return result
    if arms == [reference]:
        result.note = f"only the reference arm {reference!r} ran: nothing to compare"
        return result
    for model in sorted({model for model, _arm, _task in cells}):
        for arm in arms:
            if arm == reference:
                continue
            pairs = {}
            for (m, a, task), arm_cells in cells.items():
                if m != model or a != arm:
                    continue
                reference_cells = cells.get((model, reference, task), [])
                pairs[task] = (arm_cells, reference_cells)
                pair = compare_pair(arm_cells, reference_cells, key=(task, model, arm),
                                    min_runs=min_runs, n_boot=n_boot, seed=seed,
                                    confidence=confidence, labels=(arm, reference))
                result.comparisons.append(ArmComparison(task, model, arm, reference, pair))
            if pairs:
                pooled = compare_pooled(pairs, key=(model, arm), min_runs=min_runs,
                                        min_tasks=min_tasks, n_boot=n_boot, seed=seed,
                                        confidence=confidence)
                result.pooled.append(PooledComparison(model, arm, reference, pooled))
    for family in families(result.comparisons):
        apply_bh(family, 1 - confidence)
    return result


def families(comparisons: Sequence[ArmComparison]) -> list[list[Estimate]]:
    """The per-task estimates of one arm, model and axis (each of AXES, and LOC): one family each."""
    grouped: dict[tuple[str, str, str], list[Estimate]] = {}
    for c in comparisons:
        for axis in AXES:
            grouped.setdefault((c.model, c.arm, axis), []).append(getattr(c.stats, f"{axis}_diff"))
        grouped.setdefault((c.model, c.arm, "loc"), []).append(c.stats.loc_ratio)
    return list(grouped.values())
