"""``summary.md`` and ``report.html`` for one run directory.

``summary.md`` is Markdown tables that paste into a README or a pull request. ``report.html``
is one self-contained file (no network, no external files except the links to each cell's
workspace and transcript, relative to the run directory): the same tables, plots embedded as
base64 PNG, and a table of every cell. Plots need matplotlib (``pip install
pytest-ponybench[report]``); without it the HTML says so and still has every table.

Both files are built from the same table rows, and the numbers come from ``stats.arm_stats``.
"""
from __future__ import annotations

import base64
import html
import io
import os
from dataclasses import dataclass, field
from pathlib import Path
from statistics import mean, median
from typing import Sequence
from urllib.parse import quote

from . import stats
from .stats import ArmStats, Estimate

TRANSCRIPT = "_ponybench.transcript.jsonl"
PLOTS_NEED = "Plots need matplotlib: pip install pytest-ponybench[report]"


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


def fmt_points(estimate: Estimate) -> str:
    """A rate difference in percentage points with its interval: '+25 pp [-20, +60]'."""
    if estimate.value is None:
        return "too few runs" if "runs" in estimate.verdict else "too few data"
    return (f"{estimate.value * 100:+.0f} pp "
            f"[{estimate.low * 100:+.0f}, {estimate.high * 100:+.0f}]")


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


def fmt_p(estimate: Estimate) -> str:
    if estimate.p_value is None:
        return "-"
    return f"{estimate.p_value:.3g} ({estimate.p_holm:.3g})"


def verdict_of(named: Sequence[tuple[str, Estimate]]) -> str:
    """One short line: the findings, or why there is none."""
    findings, too_few = [], []
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
    """Per task x model, one row per arm: n, ran, correct, safe, LOC median, cost per cell."""
    tables = []
    for (task, model), task_records in stats.group_by(records, "task", "model").items():
        by_arm = stats.group_by(task_records, "arm")
        rows = []
        for arm in arm_order((a for (a,) in by_arm), reference):
            arm_records = by_arm[(arm,)]
            measured = [r for r in arm_records if stats.is_measured(r)]
            locs = stats.loc_values(arm_records)
            costs = [r["cost_usd"] for r in arm_records
                     if isinstance(r.get("cost_usd"), (int, float))]
            unmeasured = len(arm_records) - len(measured)
            rows.append([
                arm + (" (reference)" if arm == reference else ""),
                str(len(measured)) + (f" (+{unmeasured} not measured)" if unmeasured else ""),
                str(sum(1 for r in measured if r.get("ran") is True)),
                fmt_count(*stats.count(arm_records, "correct")),
                fmt_count(*stats.count(arm_records, "safe")),
                fmt_number(median(locs) if locs else None)
                + (f" ({len(locs)} with code)" if len(locs) < len(measured) else ""),
                fmt_cost(mean(costs) if costs else None),
            ])
        tables.append(Table(f"{task} · {model}",
                            ["arm", "n", "ran", "correct", "safe", "LOC median", "cost/cell"],
                            rows, numeric={1, 2, 5, 6}))
    return tables


def comparison_table(arm_stats: ArmStats) -> Table:
    ref = arm_stats.reference
    rows = []
    for c in arm_stats.comparisons:
        s = c.stats
        rows.append([
            c.task, c.model, c.arm, f"{s.n} vs {s.n_reference}",
            fmt_points(s.correct_diff), fmt_p(s.correct_diff),
            fmt_points(s.safe_diff), fmt_p(s.safe_diff),
            fmt_ratio(s.loc_ratio),
            verdict_of([("correct", s.correct_diff), ("safe", s.safe_diff),
                        ("LOC", s.loc_ratio)]),
        ])
    m = arm_stats.methods
    notes = [
        f"Δ: arm minus `{ref}`, in percentage points, 95% interval: {m['rate_difference']}.",
        f"p: {m['p_value']}; in brackets adjusted by {m['multiple_comparisons']} "
        f"({len([1 for c in arm_stats.comparisons for e in (c.stats.correct_diff, c.stats.safe_diff) if e.p_value is not None])} tests). "
        f"Verdicts on rates use the adjusted p < {1 - arm_stats.settings['confidence']:.2g}.",
        f"LOC ratio: arm / `{ref}`, {m['loc_ratio']} (seed {arm_stats.settings['seed']}); "
        f"LOC verdicts (interval excludes 1) are not adjusted for multiple comparisons.",
        f"Fewer than {arm_stats.settings['min_runs']} runs (or cells with code) on either side: "
        f"no number, \"too few\".",
    ]
    return Table(f"Arms against `{ref}`, per task", [
        "task", "model", "arm", "runs", "correct Δ [95% CI]", "p (Holm)",
        "safe Δ [95% CI]", "p (Holm)", "LOC ratio [95% CI]", "verdict"],
        rows, notes, level=2, numeric={3})


def pooled_table(arm_stats: ArmStats) -> Table:
    rows = []
    for p in arm_stats.pooled:
        s = p.stats
        rows.append([
            p.model, p.arm, str(len(s.tasks_rates)),
            fmt_rate(s.correct_rate), fmt_points(s.correct_diff),
            fmt_rate(s.safe_rate), fmt_points(s.safe_diff),
            fmt_ratio(s.loc_ratio),
            verdict_of([("correct", s.correct_diff), ("safe", s.safe_diff),
                        ("LOC", s.loc_ratio)]),
        ])
    m = arm_stats.methods
    notes = [
        f"Rates and Δ: {m['pooled_rate_difference']}.",
        f"LOC ratio: {m['pooled_loc_ratio']}.",
        f"A task enters when both sides have {arm_stats.settings['min_runs']}+ runs; pooling "
        f"needs {arm_stats.settings['min_tasks']}+ tasks. Pooled intervals are not adjusted "
        f"for multiple comparisons.",
    ]
    return Table(f"Arms against `{arm_stats.reference}`, pooled over tasks", [
        "model", "arm", "tasks", "correct (arm)", "correct Δ [95% CI]", "safe (arm)", "safe Δ [95% CI]",
        "LOC ratio [95% CI]", "verdict"], rows, notes, level=2, numeric={2})


def consistency_table(arm_stats: ArmStats) -> Table:
    rows = []
    for c in arm_stats.consistency:
        def share(k: int) -> str:
            return f"{k}/{c.tasks} ({k / c.tasks:.0%})" if c.tasks else "-"
        pass_k = ("-" if c.pass_k is None
                  else f"pass^{c.pass_k} {c.pass_hat_k:.0%} (pass^1 {c.pass_hat_1:.0%})")
        rows.append([c.arm, c.model, str(c.tasks), share(c.all_passed), share(c.flipped),
                     share(c.all_failed), pass_k, c.note])
    return Table("Consistency", ["arm", "model", "tasks (2+ runs)", "all runs passed",
                                 "runs disagreed", "all runs failed", "pass^k", "note"],
                 rows, [f"Method: {stats.CONSISTENCY}. A run passed when its pytest outcome "
                        f"passed (or, without one, when it was correct and safe).",
                        f"pass^k: {stats.PASS_K}."],
                 level=2, numeric={2})


HOW_TO_READ = (
    "Each cell is one agent run; identical runs can end differently, so every difference "
    "comes with a 95% interval. A rate difference whose interval spans 0, or a LOC ratio "
    "whose interval spans 1, is indistinguishable from noise at this number of runs. Rate "
    "verdicts use Fisher's exact test with Holm's correction over all tests in this report, "
    "so one lucky task among many does not count as a finding; they follow that p-value, not "
    "the interval, so an interval that only just excludes 0 can still read \"no clear "
    "difference\". The pooled table treats each "
    "task as one unit (resampling tasks, then runs), which asks whether the arm helps across "
    "tasks rather than on one. With 3 to 5 runs per side the bootstrap LOC intervals are "
    "on the optimistic side: read a LOC verdict that rests on one task with care. "
    "\"Too few\" means there was not enough data to say anything, not that there is no effect."
)


def header_lines(records: Sequence[dict], run_dir: Path, reference: str) -> list[str]:
    def names(key: str) -> str:
        return ", ".join(sorted({stats.name_of(r, key) for r in records})) or "-"
    costs = [r["cost_usd"] for r in records if isinstance(r.get("cost_usd"), (int, float))]
    unmeasured = [r for r in records if not stats.is_measured(r)]
    lines = []
    if any(r.get("rehearsal") for r in records):
        lines.append("REHEARSAL: a scripted model on 127.0.0.1 wrote these files through the real CLI; "
                     "the figures exercise the pipeline and say nothing about any real model.")
    lines += [f"{len(records)} cells; tasks: {names('task')}; arms: {names('arm')}; "
             f"models: {names('model')}; reference arm: `{reference}`; "
             f"total cost {fmt_cost(sum(costs) if costs else None)}."]
    if unmeasured:
        statuses = ", ".join(sorted({str(r.get("status")) for r in unmeasured}))
        were = "cell was" if len(unmeasured) == 1 else "cells were"
        lines.append(f"{len(unmeasured)} {were} not measured ({statuses}): the arm was "
                     f"not applied or the agent never started; they count in no rate.")
    unattributed = sum(1 for r in records
                       if any(stats.name_of(r, k) == "?" for k in ("task", "arm", "model")))
    if unattributed:
        lines.append(f"{unattributed} records lack a task, arm or model (shown under `?`) and "
                     f"are left out of the comparisons.")
    return lines


# --------------------------------------------------------------------------- Markdown


def md_escape(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def markdown_table(table: Table) -> str:
    lines = [f"{'#' * table.level} {table.title}", ""]
    if table.rows:
        lines.append("| " + " | ".join(md_escape(h) for h in table.headers) + " |")
        lines.append("|" + "|".join("---:" if i in table.numeric else "---"
                                    for i in range(len(table.headers))) + "|")
        lines += ["| " + " | ".join(md_escape(c) for c in row) + " |" for row in table.rows]
    else:
        lines.append("_(none)_")
    if table.notes:
        lines.append("")
        lines += [f"- {note}" for note in table.notes]
    return "\n".join(lines) + "\n"


def build_markdown(run_dir: Path, records: Sequence[dict], reference: str,
                   arm_stats: ArmStats) -> str:
    parts = [f"# ponybench: {run_dir.name}\n", "\n".join(header_lines(records, run_dir, reference)) + "\n",
             "## Results per task x model\n"]
    parts += [markdown_table(t) for t in cell_tables(records, reference)]
    if arm_stats.note:
        parts.append(f"## Arms against `{reference}`\n\n{arm_stats.note}.\n")
    else:
        parts += [markdown_table(comparison_table(arm_stats)),
                  markdown_table(pooled_table(arm_stats))]
    parts.append(markdown_table(consistency_table(arm_stats)))
    parts.append(f"## How to read\n\n{HOW_TO_READ}\n")
    return "\n".join(parts)


# --------------------------------------------------------------------------- plots


def load_matplotlib():
    """The Figure class and Agg canvas, or None without matplotlib (the `report` extra).

    The object-oriented API, not pyplot: no global state, no GUI backend, safe to use from
    any thread of a pytest session."""
    try:
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
    except ImportError:
        return None
    return Figure, FigureCanvasAgg


def png_data_uri(figure, canvas_class) -> str:
    canvas_class(figure)
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", dpi=96, bbox_inches="tight")
    return "data:image/png;base64," + base64.b64encode(buffer.getvalue()).decode("ascii")


def arm_colours(arms: Sequence[str]) -> dict[str, str]:
    palette = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2",
               "#7f7f7f", "#bcbd22", "#17becf"]
    return {arm: palette[i % len(palette)] for i, arm in enumerate(arms)}


def plot_loc(figure_class, model_records, arms, colours, model):
    """Delivered LOC of every cell, per task (x) and arm (offset), median as a bar."""
    tasks = sorted({stats.name_of(r, "task") for r in model_records})
    figure = figure_class(figsize=(max(5.0, 1.2 * len(tasks) + 2), 3.6))
    axes = figure.add_subplot()
    width = 0.8 / max(1, len(arms))
    for j, arm in enumerate(arms):
        label = arm  # on the first task with code only, so the legend lists each arm once
        for i, task in enumerate(tasks):
            locs = stats.loc_values(r for r in model_records if stats.name_of(r, "task") == task
                                    and stats.name_of(r, "arm") == arm)
            x = i - 0.4 + width * (j + 0.5)
            if locs:
                axes.scatter([x] * len(locs), locs, s=14, color=colours[arm], alpha=0.7,
                             label=label)
                axes.hlines(median(locs), x - width / 2.5, x + width / 2.5, color=colours[arm])
                label = None
    axes.set_xticks(range(len(tasks)), tasks, rotation=30, ha="right")
    axes.set_ylabel("total_loc (cells with code)")
    axes.set_title(f"LOC per arm and task · {model} (bar = median)")
    if axes.get_legend_handles_labels()[1]:
        axes.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    return figure


def plot_rates(figure_class, model_records, arms, colours, model, confidence):
    """Correct and safe rate per task and arm, with Wilson interval bars."""
    tasks = sorted({stats.name_of(r, "task") for r in model_records})
    figure = figure_class(figsize=(max(5.0, 1.2 * len(tasks) + 2), 5.6))
    width = 0.8 / max(1, len(arms))
    for k, metric in enumerate(("correct", "safe")):
        axes = figure.add_subplot(2, 1, k + 1)
        for j, arm in enumerate(arms):
            xs, ys, lows, highs = [], [], [], []
            for i, task in enumerate(tasks):
                x_, n_ = stats.count((r for r in model_records
                                      if stats.name_of(r, "task") == task
                                      and stats.name_of(r, "arm") == arm), metric)
                if not n_:
                    continue
                low, high = stats.wilson_interval(x_, n_, confidence)
                xs.append(i - 0.4 + width * (j + 0.5))
                ys.append(x_ / n_)
                lows.append(x_ / n_ - low)
                highs.append(high - x_ / n_)
            if xs:
                axes.errorbar(xs, ys, yerr=[lows, highs], fmt="o", color=colours[arm],
                              capsize=3, label=arm, markersize=4)
        axes.set_ylim(-0.05, 1.05)
        axes.set_ylabel(f"{metric} rate")
        axes.set_xticks(range(len(tasks)), tasks if k == 1 else [""] * len(tasks),
                        rotation=30, ha="right")
        if k == 0:
            axes.set_title(f"Rates per arm and task · {model} (bars: Wilson 95% interval)")
            if axes.get_legend_handles_labels()[1]:
                axes.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    return figure


def plot_cost(figure_class, model_records, arms, colours, model):
    """Cost of each cell against its delivered LOC."""
    figure = figure_class(figsize=(5.5, 3.8))
    axes = figure.add_subplot()
    for arm in arms:
        points = [(stats.delivered_loc(r), r.get("cost_usd")) for r in model_records
                  if stats.name_of(r, "arm") == arm]
        points = [(loc, cost) for loc, cost in points
                  if loc is not None and isinstance(cost, (int, float))]
        if points:
            axes.scatter(*zip(*points), s=16, color=colours[arm], alpha=0.75, label=arm)
    axes.set_xlabel("total_loc")
    axes.set_ylabel("cost (USD)")
    axes.set_title(f"Cost against LOC · {model}")
    if axes.get_legend_handles_labels()[1]:
        axes.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    return figure


def build_plots(records: Sequence[dict], reference: str,
                confidence: float) -> tuple[list[tuple[str, str]], str]:
    """(alt text, data URI) per plot, and a message for the reader ('' when all went well).

    Never raises: a report without plots is better than no report."""
    loaded = load_matplotlib()
    if loaded is None:
        return [], PLOTS_NEED
    figure_class, canvas_class = loaded
    arms = arm_order({stats.name_of(r, "arm") for r in records}, reference)
    colours = arm_colours(arms)
    plots = []
    try:
        for (model,), model_records in stats.group_by(records, "model").items():
            for alt, figure in (
                (f"LOC per arm and task, {model}",
                 plot_loc(figure_class, model_records, arms, colours, model)),
                (f"Correct and safe rates with intervals, {model}",
                 plot_rates(figure_class, model_records, arms, colours, model, confidence)),
                (f"Cost against LOC, {model}",
                 plot_cost(figure_class, model_records, arms, colours, model)),
            ):
                plots.append((alt, png_data_uri(figure, canvas_class)))
    except Exception as error:  # noqa: BLE001 - a plotting bug must not lose the tables
        return plots, f"Some plots could not be drawn ({type(error).__name__}: {error})."
    return plots, ""


# --------------------------------------------------------------------------- HTML


STYLE = """
body { font: 14px/1.45 system-ui, sans-serif; margin: 2em auto; max-width: 1200px; padding: 0 1em; color: #222; }
table { border-collapse: collapse; margin: .5em 0 1em; }
th, td { border: 1px solid #ccc; padding: .25em .6em; text-align: left; vertical-align: top; white-space: nowrap; }
td:last-child { white-space: normal; }
th { background: #f3f3f3; }
td.num { text-align: right; font-variant-numeric: tabular-nums; }
ul.notes { font-size: 12px; color: #555; }
img.plot { max-width: 100%; display: block; margin: .5em 0 1.5em; }
p.missing { background: #fff6d5; border: 1px solid #e6c85c; padding: .5em; }
code { background: #f3f3f3; padding: 0 .2em; }
"""

# Marks the page for the headless-browser test: JS errors on <html data-js-errors>, and once
# loaded, data-report-ready and the number of images that failed to decode.
SCRIPT_HEAD = """
window.ponybenchErrors = [];
window.addEventListener("error", function (event) {
  window.ponybenchErrors.push(String(event.message));
  document.documentElement.setAttribute("data-js-errors", String(window.ponybenchErrors.length));
});
window.addEventListener("load", function () {
  var broken = 0;
  document.querySelectorAll("img").forEach(function (img) {
    if (!img.complete || img.naturalWidth === 0) { broken += 1; }
  });
  document.documentElement.setAttribute("data-broken-images", String(broken));
  document.documentElement.setAttribute("data-report-ready", "yes");
});
"""


def inline_code(text: str) -> str:
    """HTML-escape, and turn Markdown `code` spans into <code>."""
    parts = html.escape(text).split("`")
    return "".join(f"<code>{p}</code>" if i % 2 else p for i, p in enumerate(parts))


def html_table(table: Table, table_id: str = "") -> str:
    level = min(6, table.level)
    out = [f"<h{level}>{inline_code(table.title)}</h{level}>"]
    if table.rows:
        attr = f' id="{table_id}"' if table_id else ""
        out.append(f"<table{attr}><thead><tr>"
                   + "".join(f"<th>{inline_code(h)}</th>" for h in table.headers)
                   + "</tr></thead><tbody>")
        for row in table.rows:
            out.append("<tr>" + "".join(
                f'<td class="num">{inline_code(c)}</td>' if i in table.numeric
                else f"<td>{inline_code(c)}</td>" for i, c in enumerate(row)) + "</tr>")
        out.append("</tbody></table>")
    else:
        out.append("<p><em>(none)</em></p>")
    if table.notes:
        out.append('<ul class="notes">' + "".join(f"<li>{inline_code(n)}</li>" for n in table.notes)
                   + "</ul>")
    return "\n".join(out)


def relative_href(target: Path, run_dir: Path) -> str:
    return quote(Path(os.path.relpath(target, run_dir)).as_posix())


def workspace_of(record: dict, run_dir: Path) -> Path | None:
    workspace = record.get("workspace")
    if workspace:
        return Path(workspace)
    if record.get("cell"):
        return run_dir / str(record["cell"])
    return None


def cells_html(records: Sequence[dict], run_dir: Path) -> str:
    headers = ["cell", "status", "correct", "safe", "total_loc", "cost", "out tokens",
               "duration", "workspace", "transcript", "error"]
    rows = []
    ordered = sorted(records, key=lambda r: (stats.name_of(r, "task"), stats.name_of(r, "model"),
                                             stats.name_of(r, "arm"), str(r.get("run"))))
    for r in ordered:
        workspace = workspace_of(r, run_dir)
        if workspace is not None:
            ws_link = f'<a href="{relative_href(workspace, run_dir)}/">{html.escape(workspace.name)}/</a>'
            transcript = workspace / TRANSCRIPT
            tr_link = (f'<a href="{relative_href(transcript, run_dir)}">transcript</a>'
                       if transcript.exists() else "-")
        else:
            ws_link = tr_link = "-"
        duration = r.get("duration_ms")
        cell_name = r.get("cell") or "__".join(stats.name_of(r, k) for k in ("task", "arm", "model", "run"))
        values = [html.escape(str(cell_name)), html.escape(str(r.get("status") or "-")),
                  html.escape(str(r.get("correct", "-"))), html.escape(str(r.get("safe", "-"))),
                  html.escape(str(r.get("total_loc", "-"))),
                  html.escape(fmt_cost(r.get("cost_usd") if isinstance(r.get("cost_usd"), (int, float)) else None)),
                  html.escape(str(r.get("out_tokens") if r.get("out_tokens") is not None else "-")),
                  html.escape(f"{duration / 1000:.0f} s" if isinstance(duration, (int, float)) else "-"),
                  ws_link, tr_link, html.escape(str(r.get("error") or ""))]
        rows.append("<tr>" + "".join(f"<td>{v}</td>" for v in values) + "</tr>")
    return ("<h2>Cells</h2>\n<p>Links are relative to the run directory.</p>\n"
            '<table id="cells"><thead><tr>' + "".join(f"<th>{h}</th>" for h in headers)
            + "</tr></thead><tbody>\n" + "\n".join(rows) + "\n</tbody></table>")


def build_html(run_dir: Path, records: Sequence[dict], reference: str, arm_stats: ArmStats,
               plots: list[tuple[str, str]], plot_message: str) -> str:
    body = [f"<h1>ponybench: {html.escape(run_dir.name)}</h1>"]
    body += [f"<p>{inline_code(line)}</p>" for line in header_lines(records, run_dir, reference)]
    body.append("<h2>Results per task x model</h2>")
    body += [html_table(t) for t in cell_tables(records, reference)]
    if arm_stats.note:
        body.append(f"<h2>Arms against <code>{html.escape(reference)}</code></h2>"
                    f"<p>{inline_code(arm_stats.note)}.</p>")
    else:
        body.append(html_table(comparison_table(arm_stats), "comparisons"))
        body.append(html_table(pooled_table(arm_stats), "pooled"))
    body.append(html_table(consistency_table(arm_stats), "consistency"))
    body.append("<h2>Plots</h2>")
    if plot_message:
        body.append(f'<p class="missing" id="plots-missing">{inline_code(plot_message)}</p>')
    body += [f'<img class="plot" alt="{html.escape(alt)}" src="{uri}">' for alt, uri in plots]
    body.append(cells_html(records, run_dir))
    body.append(f"<h2>How to read</h2>\n<p>{inline_code(HOW_TO_READ)}</p>")
    return ("<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
            f"<title>ponybench: {html.escape(run_dir.name)}</title>\n"
            f"<style>{STYLE}</style>\n<script>{SCRIPT_HEAD}</script>\n</head>\n<body>\n"
            + "\n".join(body) + "\n</body>\n</html>\n")


# --------------------------------------------------------------------------- entry point


def write_reports(run_dir, records: Sequence[dict], reference: str = "baseline") -> list[Path]:
    """Write ``summary.md`` and ``report.html`` into ``run_dir``; return their paths."""
    run_dir = Path(run_dir)
    records = [r for r in records if isinstance(r, dict)]
    arm_stats = stats.arm_stats(records, reference=reference)
    confidence = arm_stats.settings["confidence"]
    markdown_path, html_path = run_dir / "summary.md", run_dir / "report.html"
    markdown_path.write_text(build_markdown(run_dir, records, reference, arm_stats),
                             encoding="utf-8")
    plots, plot_message = build_plots(records, reference, confidence)
    html_path.write_text(build_html(run_dir, records, reference, arm_stats, plots, plot_message),
                         encoding="utf-8")
    return [markdown_path, html_path]
