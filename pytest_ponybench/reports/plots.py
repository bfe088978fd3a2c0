"""The plots of report.html, embedded as base64 PNG. They need matplotlib (the `report`
extra); without it report.html says so and still has every table."""
from __future__ import annotations

import base64
import io
from statistics import median
from typing import Sequence

from pytest_ponybench.reports import intervals, stats
from pytest_ponybench.reports.tables import arm_order
from pytest_ponybench.store import record as records_

PLOTS_NEED = "Plots need matplotlib: pip install matplotlib"
# Drawing costs seconds and some 50 MB at the end of every session: only when asked for.
PLOTS_NOT_ASKED = "Plots were not drawn: run with `--ponybench-plots` (needs matplotlib)"


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
    """The rate of every axis (correct, safe, robust) per task and arm, with Wilson interval bars."""
    tasks = sorted({stats.name_of(r, "task") for r in model_records})
    figure = figure_class(figsize=(max(5.0, 1.2 * len(tasks) + 2), 2.8 * len(records_.AXES)))
    width = 0.8 / max(1, len(arms))
    for k, metric in enumerate(records_.AXES):
        axes = figure.add_subplot(len(records_.AXES), 1, k + 1)
        for j, arm in enumerate(arms):
            xs, ys, lows, highs = [], [], [], []
            for i, task in enumerate(tasks):
                x_, n_ = stats.count((r for r in model_records
                                      if stats.name_of(r, "task") == task
                                      and stats.name_of(r, "arm") == arm), metric)
                if not n_:
                    continue
                low, high = intervals.wilson_interval(x_, n_, confidence)
                xs.append(i - 0.4 + width * (j + 0.5))
                ys.append(x_ / n_)
                lows.append(x_ / n_ - low)
                highs.append(high - x_ / n_)
            if xs:
                axes.errorbar(xs, ys, yerr=[lows, highs], fmt="o", color=colours[arm],
                              capsize=3, label=arm, markersize=4)
        axes.set_ylim(-0.05, 1.05)
        axes.set_ylabel(f"{metric} rate")
        axes.set_xticks(range(len(tasks)), tasks if k == len(records_.AXES) - 1 else [""] * len(tasks),
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
        points = [(records_.delivered_loc(r), r.get("cost_usd")) for r in model_records
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
