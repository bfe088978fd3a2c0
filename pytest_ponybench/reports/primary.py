"""The primary answer: one line per arm and model against the reference arm, pooled over tasks.

The question a user brings is "does my arm change what the agent writes, and is the
difference real?". This is its answer, printed before anything else (the terminal, the top of
summary.md and report.html, summary.json's `primary`, JUnit's run-level properties); the
per-task tables below it are exploratory.

Per axis, pooled over the tasks with ``MIN_RUNS`` measured runs on each side (each task one
unit, stats.py's hierarchical bootstrap):

* every rate axis of specs/spec.py ``AXES`` (correct, safe, and any axis added there): the
  mean over tasks of the rate difference, "better" or "worse" when its 95% interval excludes 0;
* LOC: the geometric mean of per-task median-LOC ratios over the cells that delivered code,
  with a bootstrap interval and an exact sign test over tasks (how many tasks went each way);
* size over all cells: the same ratio with a cell that delivered nothing counted at the
  task's largest observed LOC (PonyBench v3's imputation), so delivering less often is not
  "smaller";
* each judged axis, where the run was judged: the pooled difference of mean scores.

A verdict follows its interval and nothing else: never "no clear difference" beside an
interval that excludes no-difference, never a direction beside one that spans it. Where the
runs or tasks are too few the line says so once ("too few runs: 1 of 3 needed"), not per axis.
Pooled intervals are unadjusted 95% intervals: one confirmatory question per arm and axis.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field
from statistics import median
from typing import Any, Sequence

from pytest_ponybench.reports import stats
from pytest_ponybench.reports.intervals import CONFIDENCE, rng_for, sign_test_p
from pytest_ponybench.reports.tables import fmt_points, fmt_ratio, not_measured
from pytest_ponybench.specs.spec import AXES
from pytest_ponybench.store import record as records_

RATE_WORDS = {"higher": "better", "lower": "worse"}
SIZE_METHOD = ("geometric mean over tasks of per-task median total_loc ratios over every measured cell, "
               "a cell that delivered no code counted at the task's largest observed total_loc (over "
               "every arm); hierarchical percentile bootstrap")
JUDGED_METHOD = ("mean over tasks of the per-task difference of mean judged scores, bootstrap over cells "
                 "within each task (judge_report.py)")
SIGN_TEST = "exact two-sided sign test over the tasks' median-LOC ratios (ties left out)"


@dataclass
class AxisAnswer:
    axis: str
    figure: str  # as printed: '-100 pp [-100, -72]', '0.85x [0.70, 0.98]'
    verdict: str  # better / worse / fewer lines / more lines / higher / lower / no clear difference / why none
    value: float | None
    low: float | None
    high: float | None
    method: str
    detail: str = ""  # LOC: the sign test over tasks


@dataclass
class PrimaryAnswer:
    model: str
    arm: str
    reference: str
    tasks: int  # tasks with enough runs on both sides, pooled
    runs: int  # the most measured runs any task has on both sides
    axes: list[AxisAnswer] = field(default_factory=list)
    note: str = ""  # too few runs or tasks: the one thing the line says
    # Exploratory per task (Benjamini-Hochberg within the arm): 'safe worse on t1, t2'.
    per_task: list[str] = field(default_factory=list)


def rate_answer(axis: str, estimate: stats.Estimate) -> AxisAnswer:
    verdict = RATE_WORDS.get(estimate.verdict, estimate.verdict)
    return AxisAnswer(axis, fmt_points(estimate), verdict, estimate.value, estimate.low,
                      estimate.high, estimate.method)


def loc_answer(axis: str, estimate: stats.Estimate, detail: str = "") -> AxisAnswer:
    return AxisAnswer(axis, fmt_ratio(estimate), estimate.verdict, estimate.value, estimate.low,
                      estimate.high, estimate.method, detail)


def sign_detail(values: dict[str, tuple[list[float], list[float]]], used: Sequence[str]) -> str:
    """'fewer in 3 of 3 tasks, sign test p 0.25' over the tasks the LOC ratio used."""
    ratios = [median(values[t][0]) / median(values[t][1]) for t in used]
    fewer, more = sum(1 for r in ratios if r < 1), sum(1 for r in ratios if r > 1)
    return (f"fewer in {fewer}, more in {more} of {len(ratios)} tasks, "
            f"sign test p {sign_test_p(fewer, more):.2g}")


def judged_answers(records: Sequence[dict], model: str, arm: str, reference: str) -> list[AxisAnswer]:
    from pytest_ponybench.reports import judge_report  # only a judged run has these

    out = []
    for row in judge_report.rows(records, reference):
        if (row["task"], row["model"], row["arm"]) != ("(pooled)", model, arm):
            continue
        for axis, fig in row.items():
            if not isinstance(fig, dict) or "diff_ci" not in fig:
                continue
            if fig["diff_ci"] is None:
                out.append(AxisAnswer(f"judged {axis}", "-", "too few judged cells", None, None, None,
                                      JUDGED_METHOD))
                continue
            low, high = fig["diff_ci"]
            verdict = stats.interval_verdict(low, high, 0.0, "higher", "lower")
            out.append(AxisAnswer(f"judged {axis}", f"{fig['diff']:+.2f} [{low:+.2f}, {high:+.2f}]", verdict,
                                  fig["diff"], low, high, JUDGED_METHOD))
    return out


def per_task_findings(comparisons: Sequence[stats.ArmComparison]) -> list[str]:
    """The per-task findings of one arm and model, by axis and direction: 'safe worse on t1, t3'."""
    found: dict[str, list[str]] = {}
    for c in comparisons:
        for axis, estimate in (("correct", c.stats.correct_diff), ("safe", c.stats.safe_diff),
                               ("LOC", c.stats.loc_ratio)):
            if estimate.verdict in ("higher", "lower", "more lines", "fewer lines"):
                found.setdefault(f"{axis} {RATE_WORDS.get(estimate.verdict, estimate.verdict)}", []).append(c.task)
    return [f"{finding} on {', '.join(sorted(tasks))}" for finding, tasks in found.items()]


def answer(model: str, arm: str, reference: str, pairs: dict[str, tuple[list[dict], list[dict]]],
           records: Sequence[dict], largest: dict[tuple[str, ...], float | None],
           pooled: stats.PooledStats | None, *, min_runs: int, min_tasks: int, n_boot: int, seed: int,
           confidence: float) -> PrimaryAnswer:
    """``largest``: each (task, model)'s largest delivered LOC over every arm (size, all cells).
    ``pooled``: the report's pooled figures for this arm and model (stats.compare_pooled: the
    same tasks and seeds), reused where they cover an axis rather than bootstrapped twice."""
    measured = {t: (sum(map(records_.is_measured, a)), sum(map(records_.is_measured, r)))
                for t, (a, r) in pairs.items()}
    enough = [t for t, (n, n_ref) in measured.items() if min(n, n_ref) >= min_runs]
    runs = max((min(n, n_ref) for n, n_ref in measured.values()), default=0)
    result = PrimaryAnswer(model, arm, reference, tasks=len(enough), runs=runs)
    if not any(r for _a, r in pairs.values()):
        result.note = f"the reference arm `{reference}` has no cell on these tasks and this model: nothing to compare"
        return result
    if runs < min_runs:
        result.note = (f"too few runs: {runs} of {min_runs} needed per task on each side "
                       f"(--runs {min_runs} or more)")
        return result
    if len(enough) < min_tasks:
        result.note = (f"too few tasks to pool: {len(enough)} with {min_runs}+ runs on each side, "
                       f"{min_tasks} needed (the per-task figures below are exploratory)")
        return result
    pairs = {t: pairs[t] for t in enough}
    options: dict[str, Any] = dict(min_runs=min_runs, min_tasks=min_tasks, n_boot=n_boot, confidence=confidence)
    for axis in AXES:
        estimate = getattr(pooled, f"{axis}_diff", None)
        if estimate is None:  # an axis the pooled table has no column for: the same method, seed key
            estimate, _used = stats.pooled_rate_difference(pairs, axis, rng=rng_for(seed, "pooled", axis, model, arm),
                                                           **options)
        if not not_measured(estimate):
            result.axes.append(rate_answer(axis, estimate))
    delivered = {t: (records_.loc_values(a), records_.loc_values(r)) for t, (a, r) in pairs.items()}
    if pooled is not None:
        loc, used = pooled.loc_ratio, pooled.tasks_loc
    else:
        loc, used = stats.pooled_median_ratio(delivered, rng=rng_for(seed, "pooled", "loc", model, arm),
                                              method=stats.pooled_loc_method(n_boot), **options)
    result.axes.append(loc_answer("LOC", loc, sign_detail(delivered, used) if used else ""))
    every = {}
    for t, (a, r) in pairs.items():
        worst = largest.get((t, model))
        if worst is not None:
            every[t] = (records_.loc_all_cells(a, worst), records_.loc_all_cells(r, worst))
    size, _used = stats.pooled_median_ratio(every, rng=rng_for(seed, "pooled", "size", model, arm),
                                            method=f"{SIZE_METHOD}, {n_boot} resamples", **options)
    result.axes.append(loc_answer("size, all cells", size))
    result.axes += judged_answers(records, model, arm, reference)
    return result


def answers(records: Sequence[dict], reference: str = "baseline", arm_stats: stats.ArmStats | None = None, *,
            min_runs: int = stats.MIN_RUNS, min_tasks: int = stats.MIN_TASKS, n_boot: int = stats.N_BOOT,
            seed: int = stats.SEED, confidence: float = CONFIDENCE) -> list[PrimaryAnswer]:
    """One answer per arm (other than ``reference``) and model, in arm order, with the per-task
    findings of ``arm_stats`` (computed here when not given)."""
    records = [r for r in records if all(records_.name_of(r, k) != "?" for k in ("task", "arm", "model"))]
    if arm_stats is None:
        arm_stats = stats.arm_stats(records, reference, min_runs=min_runs, min_tasks=min_tasks,
                                    n_boot=n_boot, seed=seed, confidence=confidence)
    cells = records_.group_by(records, "model", "arm", "task")
    largest = {key: records_.largest_loc(c) for key, c in records_.group_by(records, "task", "model").items()}
    pooled = {(p.model, p.arm): p.stats for p in arm_stats.pooled}
    result = []
    for model in sorted({m for m, _a, _t in cells}):
        for arm in sorted({a for m, a, _t in cells if m == model and a != reference}):
            pairs = {t: (c, cells.get((model, reference, t), [])) for (m, a, t), c in cells.items()
                     if (m, a) == (model, arm)}
            one = answer(model, arm, reference, pairs, records, largest, pooled.get((model, arm)),
                         min_runs=min_runs, min_tasks=min_tasks,
                         n_boot=n_boot, seed=seed, confidence=confidence)
            one.per_task = per_task_findings([c for c in arm_stats.comparisons if (c.model, c.arm) == (model, arm)])
            result.append(one)
    return result


def line(a: PrimaryAnswer) -> str:
    """'arm small-diff · haiku against baseline, 3 tasks x 4 runs: correct +0 pp [-15, +15] no
    clear difference; safe -100 pp [-100, -72] worse; LOC ...'"""
    head = f"arm `{a.arm}` · {a.model} against `{a.reference}`"
    exploratory = f"; exploratory, per task: {'; '.join(a.per_task)}" if a.per_task else ""
    if a.note:
        return f"{head}: {a.note}{exploratory}"
    parts = []
    for x in a.axes:
        verdict = x.verdict.upper() if x.verdict in ("better", "worse") else x.verdict
        figure = "" if x.figure in ("-", "") or x.value is None else f"{x.figure} "
        parts.append(f"{x.axis} {figure}{verdict}" + (f" ({x.detail})" if x.detail else ""))
    return f"{head}, {a.tasks} tasks x {a.runs} runs: " + "; ".join(parts) + exploratory


HEADING = "The answer per arm (pooled over tasks, 95% intervals; the per-task figures are exploratory)"


def lines(answers_: Sequence[PrimaryAnswer], reference: str) -> list[str]:
    """The terminal's first lines: a heading and a line per arm and model."""
    if not answers_:
        return [f"{HEADING}: no arm to compare with `{reference}`"]
    return [f"{HEADING}:"] + [f"  {line(a)}" for a in answers_]


def to_json(answers_: Sequence[PrimaryAnswer]) -> list[dict]:
    return [asdict(a) for a in answers_]


def junit_properties(answers_: Sequence[PrimaryAnswer]) -> list[tuple[str, str]]:
    """Run-level JUnit properties: the whole line per arm and model, and each axis's verdict
    (`ponybench_primary:<arm>:<model>:<axis>`), scalars as JUnit wants them."""
    props = []
    for a in answers_:
        key = f"ponybench_primary:{a.arm}:{a.model}"
        props.append((key, line(a)))
        props += [(f"{key}:{x.axis}", x.verdict) for x in a.axes]
    return props


def methods(n_boot: int = stats.N_BOOT) -> list[str]:
    return [f"Rates: {stats.pooled_rate_method(n_boot)}.",
            f"LOC: {stats.pooled_loc_method(n_boot)}; {SIGN_TEST}.",
            f"size, all cells: {SIZE_METHOD}.",
            "A verdict follows its interval: better/worse (fewer/more lines) only where it excludes "
            "no difference. Unadjusted: one confirmatory question per arm and axis."]
