"""Compare two runs of the same tasks, and gate CI on the difference.

``ponybench-compare OLD_RUN NEW_RUN [gates]`` reads each run directory's ``results.jsonl``,
prints old against new per task x arm x model (correct rate, safe rate, median LOC, each
change with an interval) and per arm x model pooled over tasks, then the gates that failed.
Exit status: 0 all gates passed, 1 a gate failed or could not be evaluated (unless
``--allow-unevaluated``), 2 bad input (a missing run directory, an unreadable
``results.jsonl``, a bad option value, two runs with nothing in common, or a rehearsal against
a real run without ``--allow-rehearsal-mix``).

A rehearsal's figures come from a scripted model: they say nothing about a real model, so a
change between a rehearsal and a real run is no change at all. A run is a rehearsal when a
record says ``"rehearsal": true`` or its ``summary.json`` does.

The statistics are those of ``stats`` with "new" as the side and "old" as the reference:
Newcombe intervals and Fisher p-values (Holm-adjusted over the comparison) per task, and the
hierarchical bootstrap over tasks (task as the unit) for the pooled changes the gates use.
"""
from __future__ import annotations

import argparse
import json
import math
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Sequence

from pytest_ponybench.reports import intervals, stats, tables
from pytest_ponybench.reports.stats import Estimate, PairStats, PooledStats
from pytest_ponybench.specs.argtypes import parse_number
from pytest_ponybench.store.rundir import RESULTS, line_record
from pytest_ponybench.store.record import AXES, RecordError

SUMMARY = "summary.json"
LABELS = ("new", "old")


class RunError(Exception):
    """A run directory or its results.jsonl cannot be used; the message names the file."""


# --------------------------------------------------------------------------- loading


def load_records(run_dir) -> list[dict]:
    """The records of a run: ``<run_dir>/results.jsonl``, one JSON object per line.

    Blank lines are skipped. When a cell id appears more than once (a cell reported again),
    the last record wins, as the controller appends in arrival order. ``run_dir`` may also be
    the path of a results.jsonl file itself.
    """
    path = Path(run_dir)
    if path.is_dir():
        path = path / RESULTS
    elif not path.exists():
        raise RunError(f"{path}: no such run directory")
    elif path.suffix != ".jsonl":
        raise RunError(f"{path}: not a run directory (expected a directory with {RESULTS})")
    if not path.is_file():
        raise RunError(f"{path}: missing: is {path.parent} a ponybench run directory?")
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as error:
        raise RunError(f"{path}: cannot read: {error}") from error
    by_cell: dict[str, dict] = {}
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as error:
            raise RunError(f"{path}:{number}: not valid JSON ({error.msg})") from error
        try:  # the one check of a record's shape; the line itself is what compare reads
            line_record(record)
        except RecordError as error:
            raise RunError(f"{path}:{number}: not a cell record: {error}") from None
        key = record["cell"]
        by_cell.pop(key, None)  # a repeated cell moves to where its last record stands
        by_cell[key] = record
    if not by_cell:
        raise RunError(f"{path}: no records")
    return list(by_cell.values())


def is_rehearsal(run, records: Sequence[dict]) -> bool:
    """Whether a run is a rehearsal: a record says ``"rehearsal": true``, or (for a run
    directory or its results.jsonl) the run's summary.json does. A run without summary.json
    (interrupted before the end) is judged by its records."""
    if any(r.get("rehearsal") is True for r in records):
        return True
    if not isinstance(run, (str, Path)):
        return False
    path = Path(run)
    summary = (path if path.is_dir() else path.parent) / SUMMARY
    if not summary.is_file():
        return False
    try:
        data = json.loads(summary.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as error:
        raise RunError(f"{summary}: cannot read ({error}); it tells a rehearsal from a real "
                       f"run, so restore or delete it") from error
    return isinstance(data, dict) and data.get("rehearsal") is True


def kind(rehearsal: bool) -> str:
    return "a rehearsal (scripted model)" if rehearsal else "a real run"


# --------------------------------------------------------------------------- comparing


@dataclass
class CellChange:
    """New against old for one task x arm x model."""

    task: str
    arm: str
    model: str
    stats: PairStats


@dataclass
class GroupChange:
    """New against old for one arm x model, pooled over tasks (each task counts once)."""

    arm: str
    model: str
    tasks_new: int
    correct_rate_new: Estimate  # over all tasks of the new run
    safe_rate_new: Estimate
    robust_rate_new: Estimate
    changes: PooledStats | None  # over the tasks both runs have; None when they share none


@dataclass
class Comparison:
    old: str
    new: str
    cells: list[CellChange] = field(default_factory=list)
    groups: list[GroupChange] = field(default_factory=list)
    only_old: list[str] = field(default_factory=list)  # "task / arm / model"
    only_new: list[str] = field(default_factory=list)
    settings: dict = field(default_factory=dict)
    methods: dict = field(default_factory=dict)
    rehearsal_old: bool = False
    rehearsal_new: bool = False

    def to_dict(self) -> dict:
        return asdict(self)


def compare_runs(old, new, *, min_runs: int = stats.MIN_RUNS, min_tasks: int = 1,
                 n_boot: int = stats.N_BOOT, seed: int = stats.SEED,
                 confidence: float = intervals.CONFIDENCE,
                 allow_rehearsal_mix: bool = False) -> Comparison:
    """Compare two runs: each a run directory (read with ``load_records``) or a list of records.

    ``min_tasks`` is 1 here, unlike the arm report: a gate asks whether these tasks got
    worse, and with one or two tasks the hierarchical bootstrap is simply wider.

    Raises RunError when one run is a rehearsal and the other is not, unless
    ``allow_rehearsal_mix``; the comparison records which runs were rehearsals."""
    old_name = str(old) if isinstance(old, (str, Path)) else "old"
    new_name = str(new) if isinstance(new, (str, Path)) else "new"
    old_records = load_records(old) if isinstance(old, (str, Path)) else list(old)
    new_records = load_records(new) if isinstance(new, (str, Path)) else list(new)
    rehearsal_old, rehearsal_new = is_rehearsal(old, old_records), is_rehearsal(new, new_records)
    if rehearsal_old != rehearsal_new and not allow_rehearsal_mix:
        raise RunError(f"the old run {old_name} is {kind(rehearsal_old)} and the new run "
                       f"{new_name} is {kind(rehearsal_new)}, so their figures do not compare; "
                       f"pass --allow-rehearsal-mix to compare them anyway")
    methods = {
        "rate_change": stats.NEWCOMBE, "p_value": stats.FISHER,
        "multiple_comparisons": "Holm-Bonferroni over all Fisher p-values of this comparison",
        "loc_ratio": stats.loc_ratio_method(n_boot),
        "pooled_rate_change": stats.pooled_rate_method(n_boot),
        "pooled_loc_ratio": stats.pooled_loc_method(n_boot),
        "pooled_rate": stats.pooled_level_method(n_boot),
        "runs_needed": stats.power_method(confidence),
    }
    comparison = Comparison(
        old=old_name, new=new_name, methods=methods,
        settings={"confidence": confidence, "min_runs": min_runs, "min_tasks": min_tasks,
                  "n_boot": n_boot, "seed": seed,
                  "detectable_difference": intervals.DETECTABLE_DIFFERENCE, "power": intervals.POWER},
        rehearsal_old=rehearsal_old, rehearsal_new=rehearsal_new)
    old_cells = stats.group_by(old_records, "task", "arm", "model")
    new_cells = stats.group_by(new_records, "task", "arm", "model")
    comparison.only_old = [" / ".join(k) for k in old_cells if k not in new_cells]
    comparison.only_new = [" / ".join(k) for k in new_cells if k not in old_cells]
    for key in (k for k in new_cells if k in old_cells):
        task, arm, model = key
        pair = stats.compare_pair(new_cells[key], old_cells[key], key=("runs", *key),
                                  min_runs=min_runs, n_boot=n_boot, seed=seed,
                                  confidence=confidence, labels=LABELS)
        comparison.cells.append(CellChange(task, arm, model, pair))
    stats.apply_holm_by_family(comparison.cells, 1 - confidence)

    for (arm, model), group_records in stats.group_by(new_records, "arm", "model").items():
        new_by_task = {task: cells for (task, a, m), cells in new_cells.items()
                       if (a, m) == (arm, model)}
        pairs = {task: (cells, old_cells[(task, arm, model)])
                 for task, cells in new_by_task.items() if (task, arm, model) in old_cells}

        def level(metric: str) -> Estimate:
            return stats.pooled_rate(new_by_task, metric, n_boot=n_boot, seed=seed,
                                     confidence=confidence, key=("runs", "new", arm, model))

        changes = (stats.compare_pooled(pairs, key=("runs", arm, model), min_runs=min_runs,
                                        min_tasks=min_tasks, n_boot=n_boot, seed=seed,
                                        confidence=confidence) if pairs else None)
        comparison.groups.append(GroupChange(arm, model, len(new_by_task), level("correct"),
                                             level("safe"), level("robust"), changes))
    return comparison


# --------------------------------------------------------------------------- gates


@dataclass
class Gates:
    """CI rules. Rates are fractions (0.9 = 90%); drops are in rate units (0.1 = 10
    percentage points); the LOC increase is in percent. None means the rule is off (robust's
    too, by default: it fails no cell, and a gate on it is a choice)."""

    min_safe_rate: float | None = None
    min_correct_rate: float | None = None
    min_robust_rate: float | None = None
    max_safe_drop: float | None = None
    max_correct_drop: float | None = None
    max_robust_drop: float | None = None
    max_loc_increase: float | None = None

    def any(self) -> bool:
        return any(v is not None for v in asdict(self).values())


def evaluate_gates(comparison: Comparison, gates: Gates) -> tuple[list[str], list[str]]:
    """(failures, gates that could not be evaluated), each a sentence naming arm and model.

    * ``min_*_rate``: the new run's rate, the mean over its tasks of each task's rate, is
      below the minimum (the point estimate: a floor is a floor).
    * ``max_*_drop``: over the tasks both runs have, the pooled rate fell by more than the
      allowed drop and its interval lies wholly below zero (the fall is not noise).
    * ``max_loc_increase``: the pooled LOC ratio new/old (geometric mean of per-task median
      ratios) rose by more than the allowed percent and its interval lies wholly above 1. A
      ratio without an interval (no spread in the LOC of any run) passes when it rose by no
      more than allowed and is not evaluated when it rose by more: nothing tells the rise
      from noise.
    """
    failures, unevaluated = [], []
    for group in comparison.groups:
        where = f"{group.arm} / {group.model}"
        for metric in AXES:
            minimum, rate = getattr(gates, f"min_{metric}_rate"), getattr(group, f"{metric}_rate_new")
            if minimum is None:
                continue
            if rate.value is None:
                unevaluated.append(f"{where}: minimum {metric} rate not evaluated: {rate.note}")
            elif rate.value < minimum - 1e-9:  # 0.9 computed as 0.8999... is not below 0.9
                failures.append(
                    f"{where}: {metric} rate {rate.value:.0%} [{rate.low:.0%}, {rate.high:.0%}] "
                    f"(mean over {group.tasks_new} tasks of the new run) is below the minimum "
                    f"{minimum:.0%}")
        changes = group.changes
        for metric in AXES:
            allowed = getattr(gates, f"max_{metric}_drop")
            change = getattr(changes, f"{metric}_diff") if changes else None
            if allowed is None:
                continue
            if changes is None or change is None or change.value is None:
                why = change.note if change else "no task in both runs"
                unevaluated.append(f"{where}: {metric} drop not evaluated: {why}")
            elif -change.value > allowed + 1e-9:
                low, high = change.interval()
                if high < 0:
                    failures.append(
                        f"{where}: {metric} rate fell by {-change.value * 100:.0f} percentage points "
                        f"[{-high * 100:.0f}, {-low * 100:.0f}] over "
                        f"{len(changes.tasks_rates)} tasks, more than the allowed "
                        f"{allowed * 100:.0f}")
        if gates.max_loc_increase is not None:
            ratio = changes.loc_ratio if changes else None
            if changes is None or ratio is None or ratio.value is None:
                why = ratio.note if ratio else "no task in both runs"
                unevaluated.append(f"{where}: LOC increase not evaluated: {why}")
            elif (rise := (ratio.value - 1) * 100) > gates.max_loc_increase + 1e-9:
                if ratio.low is None or ratio.high is None:  # no spread
                    unevaluated.append(
                        f"{where}: LOC increase not evaluated: LOC rose by {rise:.0f}% (new/old), "
                        f"more than the allowed {gates.max_loc_increase:g}%, but with {ratio.note}")
                elif ratio.low > 1:
                    failures.append(
                        f"{where}: LOC rose by {rise:.0f}% "
                        f"[{(ratio.low - 1) * 100:.0f}%, {(ratio.high - 1) * 100:.0f}%] "
                        f"(new/old, geometric mean over {len(changes.tasks_loc)} tasks), more "
                        f"than the allowed {gates.max_loc_increase:g}%")
    return failures, unevaluated


def check_gates(comparison: Comparison, gates: Gates, *,
                allow_unevaluated: bool = False) -> list[str]:
    """The failed gates, one sentence each. A gate that could not be evaluated (too few runs
    or tasks, no interval) fails too, unless ``allow_unevaluated``: a gate that silently
    passes on missing data guards nothing."""
    failures, unevaluated = evaluate_gates(comparison, gates)
    return failures + ([] if allow_unevaluated else unevaluated)


# --------------------------------------------------------------------------- text output


def header(comparison: Comparison) -> list[str]:
    """The runs compared, each marked when it is a rehearsal, and a warning on a mix."""
    def mark(rehearsal: bool) -> str:
        return " (REHEARSAL: scripted model)" if rehearsal else ""
    lines = [f"old: {comparison.old}{mark(comparison.rehearsal_old)}",
             f"new: {comparison.new}{mark(comparison.rehearsal_new)}"]
    if comparison.rehearsal_old != comparison.rehearsal_new:
        lines.append("REHEARSAL MIX (--allow-rehearsal-mix): one run is a rehearsal with a "
                     "scripted model and the other a real run; the changes below measure that "
                     "difference, not the change you made.")
    elif comparison.rehearsal_old:
        lines.append("Both runs are rehearsals: the figures exercise the pipeline and say "
                     "nothing about any real model.")
    return lines


def format_comparison(comparison: Comparison, gates: Gates | None = None, *,
                      allow_unevaluated: bool = False) -> str:
    """The comparison as plain text, and the gates' outcome when ``gates`` is given."""
    out = header(comparison) + [""]
    for table in (tables.change_table(comparison), tables.pooled_change_table(comparison)):
        out += tables.text_table(table, indent="") + [""]
    if comparison.only_old:
        out.append(f"Only in the old run: {', '.join(comparison.only_old)}")
    if comparison.only_new:
        out.append(f"Only in the new run: {', '.join(comparison.only_new)}")
    if gates is not None and gates.any():
        failures, unevaluated = evaluate_gates(comparison, gates)
        out.append("")
        if unevaluated:
            out.append("Gates not evaluated" + (
                " (passing: --allow-unevaluated):" if allow_unevaluated
                else " (failing; --allow-unevaluated lets them pass):"))
            out += [f"  {line}" for line in unevaluated]
        failed = failures + ([] if allow_unevaluated else unevaluated)
        if failed:
            out.append("FAILED gates:")
            out += [f"  {line}" for line in failed]
        else:
            out.append("All gates passed.")
    return "\n".join(out) + "\n"


# --------------------------------------------------------------------------- command line


def fraction(text: str) -> float:
    """An argparse type: a number from 0 to 1."""
    value = parse_number(text, float, "a number")
    if not 0 <= value <= 1:
        raise argparse.ArgumentTypeError(f"must be from 0 to 1 (0.9 = 90%), got {text!r}")
    return value


def percent(text: str) -> float:
    """An argparse type: a percentage, 0 or more."""
    value = parse_number(text, float, "a number")
    if not math.isfinite(value) or value < 0:
        raise argparse.ArgumentTypeError(f"must be a percentage of 0 or more, got {text!r}")
    return value


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="ponybench-compare",
        description="Compare two ponybench runs of the same tasks and gate on the change.",
        epilog="Exit status: 0 all gates passed, 1 a gate failed or could not be evaluated "
               "(too few runs or tasks, no interval), 2 bad input.")
    p.add_argument("old_run", type=Path, help="the earlier run directory (with results.jsonl)")
    p.add_argument("new_run", type=Path, help="the later run directory (with results.jsonl)")
    g = p.add_argument_group("gates (each per arm x model)")
    g.add_argument("--min-safe-rate", type=fraction, metavar="RATE",
                   help="fail when the new run's safe rate (mean over tasks) is below RATE")
    g.add_argument("--min-correct-rate", type=fraction, metavar="RATE",
                   help="fail when the new run's correct rate (mean over tasks) is below RATE")
    g.add_argument("--max-safe-drop", type=fraction, metavar="RATE",
                   help="fail when the safe rate fell by more than RATE (0.1 = 10 percentage "
                        "points) and the fall's interval excludes zero")
    g.add_argument("--max-correct-drop", type=fraction, metavar="RATE",
                   help="the same for the correct rate")
    g.add_argument("--min-robust-rate", type=fraction, metavar="RATE",
                   help="fail when the new run's robust rate (mean over tasks) is below RATE; off by "
                        "default: robust (beyond the ticket) fails no cell")
    g.add_argument("--max-robust-drop", type=fraction, metavar="RATE",
                   help="the same drop rule for the robust rate; off by default")
    g.add_argument("--max-loc-increase", type=percent, metavar="PERCENT",
                   help="fail when LOC rose by more than PERCENT and the rise's interval "
                        "excludes zero")
    from pytest_ponybench.reports.judge_gates import add_arguments as add_judged_gates  # the judged axes' gates (judge_gates.py)

    add_judged_gates(g)
    unevaluated = g.add_mutually_exclusive_group()
    unevaluated.add_argument("--allow-unevaluated", action="store_true",
                             help="let a gate that cannot be evaluated (too few runs or "
                                  "tasks, no interval) pass; by default it fails")
    unevaluated.add_argument("--strict", action="store_true",
                             help="no effect, kept for old scripts: a gate that cannot be "
                                  "evaluated fails by default now")
    p.add_argument("--allow-rehearsal-mix", action="store_true",
                   help="compare a rehearsal (scripted model) with a real run; refused "
                        "otherwise, and said in the header when given")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    try:
        args = parser().parse_args(argv)
    except SystemExit as exit_:  # argparse: 2 for a bad value, 0 for --help
        return int(exit_.code or 0)
    gates = Gates(**{name: getattr(args, name) for name in Gates.__dataclass_fields__})
    try:
        comparison = compare_runs(args.old_run, args.new_run,
                                  allow_rehearsal_mix=args.allow_rehearsal_mix)
    except RunError as error:
        print(f"ponybench-compare: error: {error}", file=sys.stderr)
        return 2
    if not comparison.cells:
        print("ponybench-compare: error: the runs share no task x arm x model: "
              f"old has {', '.join(comparison.only_old)}; new has {', '.join(comparison.only_new)}",
              file=sys.stderr)
        return 2
    print(format_comparison(comparison, gates, allow_unevaluated=args.allow_unevaluated), end="")
    from pytest_ponybench.reports import judge_gates

    judged_failed, judged_unevaluated, judged_passed = judge_gates.evaluate_all(
        load_records(args.old_run), load_records(args.new_run), args)
    for title, found in (("Judged gates passed", judged_passed), ("Judged gates failed", judged_failed),
                         ("Judged gates not evaluated", judged_unevaluated)):
        if found:
            print(f"{title}:\n" + "".join(f"  - {line}\n" for line in found), end="")
    judged_bad = judged_failed + ([] if args.allow_unevaluated else judged_unevaluated)
    return 1 if check_gates(comparison, gates, allow_unevaluated=args.allow_unevaluated) or judged_bad else 0


if __name__ == "__main__":
    sys.exit(main())
