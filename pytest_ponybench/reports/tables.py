"""One table builder: the tables every output shows, as plain rows of strings.

The terminal summary, summary.md, report.html and ponybench-compare render these same
`Table`s (text, Markdown, HTML), so one run never shows two different counts. Which cells count
is record.py's definition; the statistics come from stats.py.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from statistics import mean, median
from typing import TYPE_CHECKING, Sequence

from pytest_ponybench.store import record as records_

if TYPE_CHECKING:  # stats imports numpy: not needed to build the cell tables
    from pytest_ponybench.reports.stats import ArmStats, Estimate

# The axes measured and shown but never deciding a cell's pass/fail (robust): their failures
# are listed apart from the cells that failed.
APART_AXES = tuple(axis for axis in records_.AXES if axis not in records_.PASS_AXES)

CONSISTENCY = "share of tasks (with >= 2 measured runs) where all runs passed / runs disagreed"


@dataclass
class Table:
    """A titled table: headers and rows of plain strings, shared by Markdown and HTML."""

    title: str
    headers: list[str]
    rows: list[list[str]]
    notes: list[str] = field(default_factory=list)
    level: int = 3
    numeric: set[int] = field(default_factory=set)  # column indexes aligned right


# --------------------------------------------------------------------------- formatting


def fmt_count(successes: int, n: int) -> str:
    return f"{successes}/{n} ({successes / n:.0%})" if n else "-"


def fmt_number(value: float | None, digits: int = 0) -> str:
    if value is None:
        return "-"
    return f"{value:,.{digits}f}"


def fmt_cost(value: float | None) -> str:
    return "-" if value is None else f"${value:.3f}"


def estimated_mark(cells: Sequence[dict], every: bool = False) -> str:
    """' (estimated)' after a cost that includes a cell's estimate (no result line gave its
    cost: its counted tokens at list price); with `every`, how many cells were estimated."""
    n = sum(1 for r in cells if r.get("cost_estimated") is True)
    if not n:
        return ""
    return f" (estimated for {n} {'cell' if n == 1 else 'cells'} with no result line)" if every else " (estimated)"


NOT_MEASURED = "not measured"  # stats.NOT_MEASURED, without importing numpy for the cell tables


def not_measured(estimate: Estimate) -> bool:
    """No number because no cell had a check on the axis (not for want of runs)."""
    return estimate.value is None and estimate.verdict.startswith(NOT_MEASURED)


def fmt_points(estimate: Estimate) -> str:
    """A rate difference in percentage points with its interval: '+25 pp [-20, +60]'."""
    if not_measured(estimate):
        return "-"
    if estimate.value is None:
        return "too few runs" if "runs" in estimate.verdict else "too few data"
    low, high = estimate.interval()
    return f"{estimate.value * 100:+.0f} pp [{low * 100:+.0f}, {high * 100:+.0f}]"


def fmt_rate(estimate: Estimate) -> str:
    if estimate.value is None:
        return "-"
    return f"{estimate.value:.0%} [{estimate.low:.0%}, {estimate.high:.0%}]"


def fmt_ratio(estimate: Estimate) -> str:
    if estimate.value is None:
        return "too few with code" if "code" in estimate.verdict else "too few data"
    if estimate.low is None:  # no spread: a value without an interval, never [1.25, 1.25]
        return f"{estimate.value:.2f}x (no spread)"
    return f"{estimate.value:.2f}x [{estimate.low:.2f}, {estimate.high:.2f}]"


def fmt_runs_needed(*estimates: Estimate) -> str:
    """Runs per arm a power estimate asks for where a difference is inconclusive, or '-'."""
    needed = [e.runs_needed for e in estimates if e.runs_needed]
    return str(max(needed)) if needed else "-"


def fmt_p(estimate: Estimate) -> str:
    if estimate.p_value is None:
        return "-"
    return f"{estimate.p_value:.3g} ({estimate.p_adjusted:.3g})"


def verdict_of(named: Sequence[tuple[str, Estimate]]) -> str:
    """One short line: the findings, or why there is none."""
    findings, too_few = [], []
    named = [(name, e) for name, e in named if not not_measured(e)]  # nothing to say about it
    if not named:
        return NOT_MEASURED
    for name, estimate in named:
        if estimate.value is None or estimate.low is None:  # no number, or no interval
            too_few.append(f"{name}: {estimate.verdict}")
        elif estimate.verdict != "no clear difference":
            findings.append(f"{name} {estimate.verdict}")
    if findings:
        return "; ".join(findings)
    if too_few and len(too_few) == len(named):
        return too_few[0].split(": ", 1)[1]
    return "no clear difference" + ("" if not too_few else f" ({'; '.join(too_few)})")


# --------------------------------------------------------------------------- tables


def arm_order(arms, reference: str) -> list[str]:
    return sorted(set(arms), key=lambda arm: (arm != reference, arm))


def cell_tables(records: Sequence[dict], reference: str) -> list[Table]:
    """Per task x model, one row per arm, every figure counted through record.py: the same
    table in the terminal, summary.md and report.html."""
    tables = []
    for (task, model), task_records in records_.group_by(records, "task", "model").items():
        by_arm = records_.group_by(task_records, "arm")
        largest = records_.largest_loc(task_records)  # over every arm: a non-delivery's size
        rows, left = [], []
        for arm in arm_order((a for (a,) in by_arm), reference):
            cells = by_arm[(arm,)]
            t = records_.tally(cells)
            measured = [r for r in cells if records_.is_measured(r)]
            locs = records_.loc_values(cells)
            costs = [r["cost_usd"] for r in measured if isinstance(r.get("cost_usd"), (int, float))]
            tokens = [r["total_tokens"] for r in measured if isinstance(r.get("total_tokens"), int)]
            rows.append([
                arm + (" (reference)" if arm == reference else ""),
                str(t.measured) + (f" (+{t.cells - t.measured})" if t.cells > t.measured else ""),
                *(fmt_count(*t.axes[axis]) for axis in records_.AXES),  # '-': the task has no check on it
                fmt_count(t.delivered, t.measured),
                fmt_number(median(locs) if locs else None),
                fmt_number(median(records_.loc_all_cells(cells, largest)) if largest and t.measured else None),
                fmt_number(mean(tokens) if tokens else None),
                fmt_cost(mean(costs) if costs else None) + estimated_mark(measured),
            ])
            if t.left_out:
                left.append(f"{arm}: {records_.left_out_text(t.left_out)}")
        notes = [f"Left out of every rate (the arm was not applied, the cell was cut short, the "
                 f"API failed, the run's budget cut it or an instrument failed): {'; '.join(left)}."] if left else []
        headers = ["arm", "n", *records_.AXES, "wrote code", "LOC median", "LOC, all cells", "tokens", "cost/cell"]
        tables.append(Table(f"{task} · {model}", headers, rows, notes,
                            numeric={1, *range(len(headers) - 4, len(headers))}))
    return tables


# --------------------------------------------------------------------------- plain text


def text_table(table: Table, indent: str = "  ") -> list[str]:
    """A table as aligned plain-text lines, for the terminal."""
    grid = [table.headers] + table.rows
    widths = [max(len(row[i]) for row in grid) for i in range(len(table.headers))]

    def line(row: list[str]) -> str:
        cells = [c.rjust(w) if i in table.numeric else c.ljust(w)
                 for i, (c, w) in enumerate(zip(row, widths))]
        return (indent + "  ".join(cells)).rstrip()

    return [table.title, line(table.headers)] + [line(r) for r in table.rows] + \
        [indent + note for note in table.notes]


# --------------------------------------------------------------------------- statistics tables


def comparison_table(arm_stats: ArmStats) -> Table:
    ref = arm_stats.reference
    rows = []
    for c in arm_stats.comparisons:
        s = c.stats
        diffs = [(axis, getattr(s, f"{axis}_diff")) for axis in records_.AXES]
        rows.append([
            c.task, c.model, c.arm, f"{s.n} vs {s.n_reference}",
            *(text for _axis, diff in diffs for text in (fmt_points(diff), fmt_p(diff))),
            fmt_ratio(s.loc_ratio),
            verdict_of([*diffs, ("LOC", s.loc_ratio)]),
            fmt_runs_needed(s.correct_diff, s.safe_diff),
        ])
    m = arm_stats.methods
    notes = [
        f"Δ: arm minus `{ref}`, in percentage points, 95% interval: {m['rate_difference']}.",
        f"p: {m['p_value']}; in brackets adjusted by {m['multiple_comparisons']}. A verdict is a "
        f"finding where the interval excludes no difference and the adjusted p < "
        f"{1 - arm_stats.settings['confidence']:.2g}; \"unadjusted only\" where just the interval does.",
        f"LOC ratio: arm / `{ref}`, {m['loc_ratio']} (seed {arm_stats.settings['seed']}); its "
        f"bootstrap p is adjusted in the same way (a family of its own per arm and model).",
        f"Fewer than {arm_stats.settings['min_runs']} runs (or cells with code) on either side: "
        f"no number, \"too few\".",
        f"runs to detect: where a rate difference is inconclusive, {m['runs_needed']} "
        f"(the larger of correct and safe).",
    ]
    headers = ["task", "model", "arm", "runs",
               *(h for axis in records_.AXES for h in (f"{axis} Δ [95% CI]", "p (BH)")),
               "LOC ratio [95% CI]", "verdict", "runs to detect"]
    return Table(f"Arms against `{ref}`, per task (exploratory)", headers, rows, notes, level=2,
                 numeric={3, len(headers) - 1})


def pooled_table(arm_stats: ArmStats) -> Table:
    rows = []
    for p in arm_stats.pooled:
        s = p.stats
        rows.append([
            p.model, p.arm, str(len(s.tasks_rates)),
            *(text for axis in records_.AXES
              for text in (fmt_rate(getattr(s, f"{axis}_rate")), fmt_points(getattr(s, f"{axis}_diff")))),
            fmt_ratio(s.loc_ratio),
            verdict_of([*((axis, getattr(s, f"{axis}_diff")) for axis in records_.AXES), ("LOC", s.loc_ratio)]),
            fmt_runs_needed(s.correct_diff, s.safe_diff),
        ])
    m = arm_stats.methods
    notes = [
        f"Rates and Δ: {m['pooled_rate_difference']}.",
        f"LOC ratio: {m['pooled_loc_ratio']}.",
        f"A task enters when both sides have {arm_stats.settings['min_runs']}+ runs; pooling "
        f"needs {arm_stats.settings['min_tasks']}+ tasks. Pooled intervals are not adjusted "
        f"for multiple comparisons.",
    ]
    headers = ["model", "arm", "tasks", *(h for axis in records_.AXES for h in (f"{axis} (arm)", f"{axis} Δ [95% CI]")),
               "LOC ratio [95% CI]", "verdict", "runs to detect"]
    return Table(f"Arms against `{arm_stats.reference}`, pooled over tasks", headers, rows, notes, level=2,
                 numeric={2, len(headers) - 1})


def consistency_table(arm_stats: ArmStats) -> Table:
    rows = []
    for c in arm_stats.consistency:
        def share(k: int) -> str:
            return f"{k}/{c.tasks} ({k / c.tasks:.0%})" if c.tasks else "-"
        pass_k = ("-" if c.pass_k is None
                  else f"pass^{c.pass_k} {c.pass_hat_k:.0%} (pass^1 {c.pass_hat_1:.0%}; {c.pass_k_rule})")
        rows.append([c.arm, c.model, str(c.tasks), share(c.all_passed), share(c.flipped),
                     share(c.all_failed), pass_k, c.note])
    return Table("Consistency", ["arm", "model", "tasks (2+ runs)", "all runs passed",
                                 "runs disagreed", "all runs failed", "pass^k", "note"],
                 rows, [f"Method: {arm_stats.methods['consistency']}. A run passed when its pytest outcome "
                        f"passed (or, without one, when it was correct and safe).",
                        f"pass^k: {arm_stats.methods['pass_k']}."],
                 level=2, numeric={2})


HOW_TO_READ = (
    "Each cell is one agent run; identical runs can end differently, so every difference "
    "comes with a 95% interval. A rate difference whose interval spans 0, or a LOC ratio "
    "whose interval spans 1, is indistinguishable from noise at this number of runs. The "
    "answer per arm at the top is the pooled one, the confirmatory question. The per-task "
    "figures are exploratory: their verdicts also ask Fisher's exact test (LOC: the bootstrap) "
    "to hold after Benjamini-Hochberg over the tasks of one arm, model and axis, and say "
    "\"unadjusted only\" where only the interval excludes no difference; a verdict never "
    "contradicts its interval. The pooled table treats each "
    "task as one unit (resampling tasks, then runs), which asks whether the arm helps across "
    "tasks rather than on one. With 3 to 5 runs per side the bootstrap LOC intervals are "
    "on the optimistic side: read a LOC verdict that rests on one task with care. "
    "\"LOC median\" is over the cells that delivered code; \"LOC, all cells\" over every "
    "measured cell, one that delivered none counted at the task's largest observed LOC (any "
    "arm), so an arm that delivers less often does not look smaller for it. "
    "\"Too few\" means there was not enough data to say anything, not that there is no effect."
)


def header_lines(records: Sequence[dict], reference: str) -> list[str]:
    def names(key: str) -> str:
        return ", ".join(sorted({records_.name_of(r, key) for r in records})) or "-"
    costs = [r["cost_usd"] for r in records if isinstance(r.get("cost_usd"), (int, float))]
    left_out = records_.left_out(records)
    lines = []
    if any(r.get("rehearsal") for r in records):
        lines.append("REHEARSAL: a scripted model on 127.0.0.1 wrote these files through the real CLI; "
                     "the figures exercise the pipeline and say nothing about any real model.")
    lines += [f"{len(records)} cells; tasks: {names('task')}; arms: {names('arm')}; "
             f"models: {names('model')}; reference arm: `{reference}`; "
             f"total cost {fmt_cost(sum(costs) if costs else None)}{estimated_mark(records, every=True)}."]
    if left_out:
        total = sum(left_out.values())
        were = "cell was" if total == 1 else "cells were"
        lines.append(f"{total} {were} left out of every rate "
                     f"({', '.join(f'{n} {status}' for status, n in left_out.items())}): the arm was "
                     f"not applied, the cell was cut short, or the API failed; they say nothing about the arm.")
    unattributed = sum(1 for r in records
                       if any(records_.name_of(r, k) == "?" for k in ("task", "arm", "model")))
    if unattributed:
        lines.append(f"{unattributed} records lack a task, arm or model (shown under `?`) and "
                     f"are left out of the comparisons.")
    return lines


# --------------------------------------------------------------------------- run against run (compare)


def rate_pair(old: float | None, new: float | None) -> str:
    def one(v):
        return "-" if v is None else f"{v:.0%}"
    return f"{one(old)} -> {one(new)}"


def change_points(estimate: Estimate) -> str:
    if not_measured(estimate):
        return "-"
    if estimate.value is None:
        return "too few runs"
    low, high = estimate.interval()
    text = f"{estimate.value * 100:+.0f} pp [{low * 100:+.0f}, {high * 100:+.0f}]"
    return text + (f" p={estimate.p_adjusted:.2g}" if estimate.p_adjusted is not None else "")


def change_ratio(estimate: Estimate) -> str:
    if estimate.value is None:
        return "too few with code"
    if estimate.low is None or estimate.high is None:  # no spread: both are None
        return f"{(estimate.value - 1) * 100:+.0f}% (no spread)"
    return (f"{(estimate.value - 1) * 100:+.0f}% [{(estimate.low - 1) * 100:+.0f}%, "
            f"{(estimate.high - 1) * 100:+.0f}%]")


def change_table(comparison) -> Table:
    """ponybench-compare, per task x arm x model: new against old."""
    rows = []
    for c in comparison.cells:
        s = c.stats
        rows.append([c.task, c.arm, c.model, f"{s.n_reference} / {s.n}",
                     *(text for axis in records_.AXES
                       for text in (rate_pair(getattr(s, f"{axis}_rate_reference"), getattr(s, f"{axis}_rate")),
                                    change_points(getattr(s, f"{axis}_diff")))),
                     f"{fmt_number(s.loc_median_reference, 1)} -> {fmt_number(s.loc_median, 1)}",
                     change_ratio(s.loc_ratio)])
    return Table("Per task (new against old):",
                 ["task", "arm", "model", "runs old/new", *(h for axis in records_.AXES for h in (axis, "change")),
                  "LOC median", "LOC change"], rows)


def pooled_change_table(comparison) -> Table:
    """ponybench-compare, per arm x model pooled over tasks (each task counts once)."""
    rows = []
    for g in comparison.groups:
        ch = g.changes
        rows.append([g.arm, g.model, str(g.tasks_new), str(len(ch.tasks_rates)) if ch else "0",
                     *(text for axis in records_.AXES
                       for text in (fmt_rate(getattr(g, f"{axis}_rate_new")),
                                    change_points(getattr(ch, f"{axis}_diff")) if ch else "-")),
                     change_ratio(ch.loc_ratio) if ch else "-"])
    m = comparison.methods
    notes = [f"Changes are new minus old with 95% intervals. Per task: {m['rate_change']}; "
             f"p: {m['p_value']}, {m['multiple_comparisons']}; LOC: {m['loc_ratio']}. "
             f"Pooled: {m['pooled_rate_change']}; LOC: {m['pooled_loc_ratio']}."]
    return Table("Per arm and model, pooled over tasks (each task counts once):",
                 ["arm", "model", "tasks", "in both", *(h for axis in records_.AXES for h in (f"{axis} (new)", "change")),
                  "LOC change"], rows, notes)


# --------------------------------------------------------------------------- infra errors and activity


def infra_rows(records: Sequence[dict]) -> list[dict]:
    """Per arm x model with an infra error or a retry: cells, infra errors (left out of every
    rate), cells that needed more than one attempt, and what the failed attempts cost."""
    rows = []
    for (arm, model), cells in records_.group_by(records, "arm", "model").items():
        infra = sum(1 for r in cells if records_.is_infra(r))
        retried = sum(1 for r in cells if isinstance(r.get("attempts"), int) and r["attempts"] > 1)
        cost = sum(float(r.get("infra_cost_usd") or 0.0) for r in cells
                   if isinstance(r.get("infra_cost_usd"), (int, float)))
        if infra or retried:
            rows.append({"arm": arm, "model": model, "cells": len(cells), "infra_errors": infra,
                         "retried": retried, "infra_cost_usd": round(cost, 6)})
    return rows


def infra_loud_line(records: Sequence[dict]) -> str:
    """A warning when more than a fifth of the run's cells were infra errors, else ''."""
    infra, total = records_.infra_share(records)
    if not total or infra / total <= records_.INFRA_LOUD_SHARE:
        return ""
    return (f"WARNING: {infra} of {total} cells ({infra / total:.0%}) ended as infra errors (the model API "
            f"failed): the rates rest on fewer cells than planned; resume the run later to fill them in.")


def infra_lines(records: Sequence[dict]) -> list[str]:
    lines = [f"infra errors: arm `{r['arm']}` · {r['model']}: {r['infra_errors']} of {r['cells']} cells "
             f"left out of every rate; {r['retried']} cells retried; failed attempts cost "
             f"{fmt_cost(r['infra_cost_usd'])}" for r in infra_rows(records)]
    loud = infra_loud_line(records)
    return lines + ([loud] if loud else [])


def apart_rows(records: Sequence[dict]) -> list[dict]:
    """Cells left out of every rate because of the harness, not the arm: cut by the run's
    budget (`budget_cut`) or failed by the harness's own instrument (`instrument_error`); one
    row per cell, with its one sentence (summary.json `apart`)."""
    return [{"cell": str(r.get("cell") or "?"), "arm": records_.name_of(r, "arm"), "model": records_.name_of(r, "model"),
             "status": records_.status_of(r), "cost_usd": r.get("cost_usd") if isinstance(r.get("cost_usd"), (int, float)) else None,
             "error": " ".join(str(r.get("error") or "").split())[:FAILURE_EXCERPT]}
            for r in records if records_.is_budget_cut(r) or records_.is_instrument_error(r)]


def apart_lines(records: Sequence[dict]) -> list[str]:
    """One line per cell the run's budget cut or an instrument failed: left out of every rate,
    named, never counted as a failed run of the arm."""
    lines = []
    for row in apart_rows(records):
        what = "cut by the run's budget" if row["status"] == records_.BUDGET_CUT else "instrument error"
        lines.append(f"{what}: {row['cell']} (arm `{row['arm']}` · {row['model']}) left out of every rate: {row['error']}")
    return lines


def _per_cell(total: float, n: int) -> float:
    return round(total / n, 2) if n else 0.0


def activity_rows(records: Sequence[dict]) -> list[dict]:
    """Per arm x model, over measured cells: how often each skill fired, reads and edits per
    cell, and tool calls per cell by tool (from the records' `tool_calls`, `skills_used`,
    `files_read`, `edits`)."""
    from pytest_ponybench.cell.transcript import parse_counts  # the record's 'Name:count' format is transcript.py's

    rows = []
    for (arm, model), cells in records_.group_by(records, "arm", "model").items():
        measured = [r for r in cells if records_.is_measured(r) and "tool_calls" in r]
        if not measured:
            continue
        skills: dict[str, int] = {}
        tools: dict[str, int] = {}
        for r in measured:
            for skill in {s for s in str(r.get("skills_used") or "").split(",") if s}:
                skills[skill] = skills.get(skill, 0) + 1
            for tool, n in parse_counts(r.get("tool_calls")).items():
                tools[tool] = tools.get(tool, 0) + n
        n = len(measured)
        rows.append({"arm": arm, "model": model, "cells": n, "skills_fired": dict(sorted(skills.items())),
                     "reads_per_cell": _per_cell(sum(int(r.get("files_read") or 0) for r in measured), n),
                     "edits_per_cell": _per_cell(sum(int(r.get("edits") or 0) for r in measured), n),
                     "tool_calls_per_cell": {t: _per_cell(c, n) for t, c in sorted(tools.items())}})
    return rows


def activity_lines(records: Sequence[dict]) -> list[str]:
    """One line per arm x model: what the arm made the agent do."""
    lines = []
    for r in activity_rows(records):
        n = r["cells"]
        fired = "; ".join(f"skill `{s}` fired in {k} of {n} cells" for s, k in r["skills_fired"].items()) \
            or f"no skill fired in {n} cells"
        tools = ", ".join(f"{t} {c:g}" for t, c in r["tool_calls_per_cell"].items()) or "none"
        lines.append(f"arm `{r['arm']}` · {r['model']}: {fired}; reads per cell {r['reads_per_cell']:g}; "
                     f"edits per cell {r['edits_per_cell']:g}; tool calls per cell: {tools}")
    return lines


# --------------------------------------------------------------------------- why cells failed

FAILURE_EXCERPT = 300  # a reason longer than this is cut: the cell's record keeps it whole


def failure_rows(records: Sequence[dict], axis: str | None = None) -> list[dict]:
    """Per task x arm with a failed cell: the cells, the failed ones, and each distinct
    one-line reason with how many cells it failed, the most frequent first. Infra errors, budget
    cuts and instrument errors are not failures of the arm (their own sections list them).
    `axis`: the measured cells that failed that axis instead, with its reasons (robust, which
    fails no cell, is listed this way)."""
    rows = []
    for (task, arm), cells in records_.group_by(records, "task", "arm").items():
        if axis is None:
            failed = [r for r in cells if r.get("passed") is False and not records_.skipped_apart(r)]
        else:
            failed = [r for r in cells if records_.outcome(r, axis) == 0]
        if not failed:
            continue
        reasons: dict[str, int] = {}
        for r in failed:
            said = r.get(f"{axis}_reason") if axis else r.get("failure")
            reason = " ".join(str(said or r.get("error") or "no reason recorded").split())
            if len(reason) > FAILURE_EXCERPT:
                reason = reason[:FAILURE_EXCERPT - 3] + "..."
            reasons[reason] = reasons.get(reason, 0) + 1
        ordered = sorted(reasons.items(), key=lambda item: (-item[1], item[0]))
        rows.append({"task": task, "arm": arm, "cells": len(cells), "failed": len(failed),
                     "reasons": [{"reason": reason, "cells": n} for reason, n in ordered]})
    return rows


def failure_sections(records: Sequence[dict]) -> list[tuple[str, list[str]]]:
    """(heading, reason lines) per task x arm, for summary.md and report.html."""
    sections = []
    for axis in (None, *APART_AXES):
        for row in failure_rows(records, axis):
            what = "failed" if axis is None else f"failed {axis} (which fails no cell)"
            heading = f"{row['task']} · {row['arm']}: {row['failed']} of {row['cells']} cells {what}"
            lines = [f"{r['cells']} {'cell' if r['cells'] == 1 else 'cells'}: {r['reason']}" for r in row["reasons"]]
            sections.append((heading, lines))
    return sections
