"""Every figure over time: ``ponybench-history RUN_DIR... [--out DIR]``.

Reads many kept runs (run directories, or folders holding them) and gives, per task x arm x
model, each run's correct, safe and robust rates, median LOC and cost per cell, in date order, with
the CLI version and model id each run used. Runs that would mislead are left out and named:
rehearsals (a scripted model; `--rehearsals` includes them, marked REHEARSAL, compared only
with other rehearsals), runs the budget cut short (cells skipped with "budget reached"), and
runs with more than a fifth of their cells infra errors. A run directory of a folder that
cannot be read (no results, a broken line) is skipped with one line naming it.

A figure "left its historical range" when the interval of its change against all earlier
included runs of the same task x arm x model excludes no change: Newcombe's interval for a
rate difference (this run minus the earlier runs pooled), a seeded percentile bootstrap for
the ratio of median LOC. Each flag prints the interval, not a bare delta. A history makes
hundreds of such tests (every point of every series), so a point is flagged only where its
test also survives Benjamini-Hochberg over every drift test of the history (Fisher's exact
p for rates, the Mann-Whitney U test for LOC) at 1 - CONFIDENCE: in a stable history the
chance of any flag at all is at most that, where 99% intervals alone flagged about 28 points
of 20 tasks x 4 arms x 10 runs.

Output: a table in the terminal, and summary.md and report.html (a plot per figure, needs
matplotlib) in ``--out``. Exit status 0, or 2 on bad input (a folder that holds no run, or
no run that can be read).
"""
from __future__ import annotations

import argparse
import html
import json
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path
from statistics import median
from typing import Sequence

from pytest_ponybench.reports import intervals, stats
from pytest_ponybench.reports.compare import RunError, is_rehearsal, load_records
from pytest_ponybench.reports.tables import Table
from pytest_ponybench.specs.argtypes import parse_number
from pytest_ponybench.store import record as records_
from pytest_ponybench.store.rundir import OPTIONS, RESULTS, RUN_ID, SUMMARY, write_atomic

FIGURES = (*records_.AXES, "loc", "cost")
CONFIDENCE = 0.99  # many runs x figures are looked at: a stricter interval keeps false flags rare
BH = (f"Benjamini-Hochberg q <= {1 - CONFIDENCE:.2g} over every drift test of the history (Fisher's exact p "
      f"for rates, the Mann-Whitney U test for LOC)")
MIN_EARLIER = 2  # earlier included runs a figure needs before it can be flagged


@dataclass
class Run:
    path: str
    name: str
    date: str
    claude_version: str
    rehearsal: bool
    budget_skipped: int
    infra: int
    cells: int
    records: list = field(default_factory=list, repr=False)
    left_out: str = ""  # why the run is not in the history, or ""


@dataclass
class Point:
    """One figure of one task x arm x model in one run."""

    run: str
    date: str
    claude_version: str
    model_id: str
    n: int
    value: float | None
    low: float | None
    high: float | None
    flag: str = ""  # why it left its historical range, with the interval; "" when it did not
    spec: str = ""  # the cells' spec_hash: changes with the task's or the arm's own text, or the model id
    rehearsal: bool = False  # a scripted model's figures (--rehearsals): compared with rehearsals only


@dataclass
class Series:
    task: str
    arm: str
    model: str
    figure: str
    points: list[Point]
    method: str


def looks_like_run(path: Path) -> bool:
    """A run directory, readable or not: its results, its options or its run id."""
    return any((path / name).is_file() for name in (RESULTS, OPTIONS, RUN_ID))


def find_runs(paths: Sequence[str]) -> list[Path]:
    """Run directories: each path that holds results.jsonl, else its subfolders that are runs
    (an empty or broken one included: main skips it, naming it)."""
    found = []
    for raw in paths:
        path = Path(raw)
        if not path.is_dir():
            raise RunError(f"{path}: no such directory")
        if (path / RESULTS).is_file():
            found.append(path)
            continue
        inner = sorted(p for p in path.iterdir() if p.is_dir() and looks_like_run(p))
        if not inner:
            raise RunError(f"{path}: neither a run directory nor a folder of runs (no {RESULTS} in it or below)")
        found += inner
    return list(dict.fromkeys(found))


def read_run(path: Path, infra_share: float = records_.INFRA_LOUD_SHARE, rehearsals: bool = False) -> Run:
    records = load_records(path)
    try:
        summary = json.loads((path / SUMMARY).read_text(encoding="utf-8"))
        summary = summary if isinstance(summary, dict) else {}
    except (OSError, ValueError):
        summary = {}
    versions = sorted({str(r["claude_version"]) for r in records if r.get("claude_version")})
    infra, cells = records_.infra_share(records)
    run = Run(path=str(path), name=path.name, date=str(summary.get("date") or path.name),
              claude_version=str(summary.get("claude_version") or ", ".join(versions) or "?"),
              rehearsal=is_rehearsal(path, records), budget_skipped=int(summary.get("budget_skipped") or 0),
              infra=infra, cells=cells, records=records)
    if run.rehearsal and not rehearsals:
        run.left_out = REHEARSAL_LEFT_OUT
    elif run.budget_skipped:
        run.left_out = f"cut short by the budget ({run.budget_skipped} cells skipped)"
    elif cells and infra / cells > infra_share:
        run.left_out = f"{infra} of {cells} cells infra errors (more than {infra_share:.0%})"
    return run


REHEARSAL_LEFT_OUT = "a rehearsal (scripted model): its figures say nothing about a real model"


def figure_of(records: Sequence[dict], figure: str, key: tuple[str, ...]) -> tuple[int, float | None, float | None, float | None, list]:
    """(n, value, low, high, raw values) of one figure over one run's cells of a task x arm x model."""
    measured = [r for r in records if records_.is_measured(r)]
    if figure in records_.AXES:
        values = [int(r[figure]) for r in measured if r.get(figure) is not None]
        if not values:
            return 0, None, None, None, []
        low, high = intervals.wilson_interval(sum(values), len(values), CONFIDENCE)
        return len(values), sum(values) / len(values), low, high, values
    if figure == "loc":
        locs = stats.loc_values(measured)
        if not locs:
            return 0, None, None, None, []
        return len(locs), float(median(locs)), None, None, locs
    costs = [float(r["cost_usd"]) for r in measured if isinstance(r.get("cost_usd"), (int, float))]
    if not costs:
        return 0, None, None, None, []
    return len(costs), sum(costs) / len(costs), None, None, costs


def loc_p(values: list, earlier: list) -> float:
    """p-value of "LOC did not move": the Mann-Whitney U test of this run's values against the
    earlier runs', two-sided, normal approximation with the tie correction and a continuity
    correction. Not the bootstrap's own p: with 4 runs a bootstrapped median has so few values
    that it puts all its resamples on one side of 1 by chance (p = 0 in a stable history)."""
    from collections import Counter
    from statistics import NormalDist

    n1, n2 = len(values), len(earlier)
    u = sum((v > w) + 0.5 * (v == w) for v in values for w in earlier)
    total = n1 + n2
    ties = sum(t ** 3 - t for t in Counter(list(values) + list(earlier)).values())
    variance = n1 * n2 / 12 * ((total + 1) - ties / (total * (total - 1)))
    if variance <= 0:
        return 1.0
    z = max(0.0, abs(u - n1 * n2 / 2) - 0.5) / variance ** 0.5
    return min(1.0, 2 * (1 - NormalDist().cdf(z)))


def drift(figure: str, values: list, earlier: list, key: tuple[str, ...]) -> tuple[str, float | None]:
    """(the flag of a figure whose change against the earlier runs pooled has an interval that
    excludes no change, or ""; the p-value of its test, None where there is none)."""
    if figure in records_.AXES:
        est = stats.rate_difference(sum(values), len(values), sum(earlier), len(earlier),
                                    confidence=CONFIDENCE, labels=("this run", "earlier runs"))
        if est.value is None or est.low is None or est.high is None or not (est.low > 0 or est.high < 0):
            return "", est.p_value
        return (f"{figure} rate {sum(values) / len(values):.0%} against {sum(earlier) / len(earlier):.0%} "
                f"earlier: {est.value * 100:+.0f} pp [{est.low * 100:+.0f}, {est.high * 100:+.0f}] "
                f"({stats.NEWCOMBE}, {CONFIDENCE:.0%})"), est.p_value
    if figure == "loc":
        est = stats.loc_ratio(values, earlier, n=len(values), n_ref=len(earlier), confidence=CONFIDENCE,
                              rng=intervals.rng_for(stats.SEED, *key), labels=("this run", "earlier runs"))
        if est.value is None:
            return "", None
        p = loc_p(values, earlier)
        if est.low is None or est.high is None or not (est.low > 1 or est.high < 1):
            return "", p
        return (f"median LOC x{est.value:.2f} [{est.low:.2f}, {est.high:.2f}] against earlier runs "
                f"(ratio of medians, seeded percentile bootstrap, {stats.N_BOOT} resamples, {CONFIDENCE:.0%})"), p
    return "", None  # cost: shown over time, never flagged (prices change with the model, not the arm)


METHODS = {
    **{axis: f"rate over measured cells, {stats.WILSON} ({CONFIDENCE:.0%}); flag: {stats.NEWCOMBE} against the "
             f"earlier runs pooled, and {BH}" for axis in records_.AXES},
    "loc": "median total_loc of cells that delivered code; flag: ratio of medians against the earlier runs pooled, "
           f"seeded percentile bootstrap ({stats.N_BOOT} resamples), and {BH}",
    "cost": "mean cost_usd per measured cell; never flagged",
}


def build(runs: list[Run]) -> list[Series]:
    """One series per task x arm x model x figure over the included runs, in date order. A
    rehearsal's figure is compared with earlier rehearsals only, a real run's with real runs."""
    included = sorted((r for r in runs if not r.left_out), key=lambda r: (r.date, r.name))
    tested: list[tuple[Point, str, float | None]] = []  # every drift test of the history
    keys = sorted({(str(rec.get("task")), str(rec.get("arm")), str(rec.get("model")))
                   for run in included for rec in run.records})
    out = []
    for key in keys:
        for figure in FIGURES:
            points: list[Point] = []
            pooled: dict[bool, list] = {False: [], True: []}
            for run in included:
                mine = [r for r in run.records if (str(r.get("task")), str(r.get("arm")), str(r.get("model"))) == key]
                if not mine:
                    continue
                n, value, low, high, raw = figure_of(mine, figure, key)
                ids = sorted({str(r.get("model_id")) for r in mine if r.get("model_id")})
                specs = ", ".join(sorted({str(r.get("spec_hash")) for r in mine if r.get("spec_hash")}))
                point = Point(run.name, run.date, run.claude_version, ", ".join(ids) or "?", n, value, low, high,
                              spec=specs or "?", rehearsal=run.rehearsal)
                earlier_runs = sum(1 for p in points if p.n and p.rehearsal == run.rehearsal)
                if raw and earlier_runs >= MIN_EARLIER:
                    tested.append((point, *drift(figure, raw, pooled[run.rehearsal], key + (figure, run.name))))
                if raw:
                    pooled[run.rehearsal] = pooled[run.rehearsal] + raw
                points.append(point)
            if any(p.n for p in points):
                out.append(Series(*key, figure, points, METHODS[figure]))
    adjusted = intervals.bh_adjust([p for _point, _flag, p in tested])
    for (point, flag, _p), q in zip(tested, adjusted):
        if flag and q is not None and q <= 1 - CONFIDENCE:
            point.flag = flag + f"; BH q = {q:.2g} over the history's {len(tested)} drift tests"
    return out


def fmt(figure: str, p: Point) -> str:
    if p.value is None:
        return "-"
    if figure in records_.AXES:
        return f"{p.value:.0%} [{p.low:.0%}, {p.high:.0%}] of {p.n}"
    if figure == "loc":
        return f"{p.value:g} ({p.n} cells)"
    return f"${p.value:.3f}"


def tables(series: list[Series]) -> list[Table]:
    """One table per task x arm x model: a row per run, a column per figure."""
    out = []
    groups: dict[tuple, dict[str, Series]] = {}
    for s in series:
        groups.setdefault((s.task, s.arm, s.model), {})[s.figure] = s
    for (task, arm, model), by_figure in groups.items():
        runs = list(dict.fromkeys(p.run for s in by_figure.values() for p in s.points))
        rows = []
        for run in runs:
            cells = {f: next((p for p in s.points if p.run == run), None) for f, s in by_figure.items()}
            first = next(p for p in cells.values() if p is not None)
            flags = "; ".join(p.flag for p in cells.values() if p is not None and p.flag)
            rows.append([first.date, f"{run} (REHEARSAL)" if first.rehearsal else run, first.claude_version,
                         first.model_id, first.spec]
                        + [fmt(f, point) if (point := cells.get(f)) else "-" for f in FIGURES]
                        + [("DRIFT: " + flags) if flags else ""])
        out.append(Table(f"{task} · {arm} · {model}",
                         ["date", "run", "CLI", "model id", "spec", *records_.AXES, "LOC median", "cost/cell", "flag"],
                         rows, notes=[f"{f}: {s.method}" for f, s in by_figure.items()]))
    return out


def left_out_lines(runs: list[Run]) -> list[str]:
    lines = [f"left out {r.name}: {r.left_out}" for r in runs if r.left_out]
    rehearsals = sum(1 for r in runs if r.left_out == REHEARSAL_LEFT_OUT)
    if rehearsals:
        lines.append(f"{rehearsals} rehearsals left out; --rehearsals includes them, marked REHEARSAL")
    included = sum(1 for r in runs if r.rehearsal and not r.left_out)
    if included:
        lines.append(f"REHEARSAL: {included} of these runs are rehearsals (a scripted model); their figures say "
                     f"nothing about a real model and are compared with other rehearsals only")
    return lines


def flags(series: list[Series]) -> list[str]:
    return [f"DRIFT {s.task} · {s.arm} · {s.model} in {p.run} ({p.date}, CLI {p.claude_version}, "
            f"{p.model_id}): {p.flag}" for s in series for p in s.points if p.flag]


def version_changes(runs: list[Run]) -> list[str]:
    included = sorted((r for r in runs if not r.left_out), key=lambda r: (r.date, r.name))
    out = []
    for before, after in zip(included, included[1:]):
        if before.claude_version != after.claude_version:
            out.append(f"CLI version {before.claude_version} -> {after.claude_version} at {after.name} ({after.date})")
    return out


def spec_changes(series: list[Series]) -> list[str]:
    """Where a task x arm x model's spec_hash changed: the task's or the arm's own text, or the
    model id, changed between two runs (once per task x arm x model, from its first figure)."""
    out, seen = [], set()
    for s in series:
        if (s.task, s.arm, s.model) in seen:
            continue
        seen.add((s.task, s.arm, s.model))
        for before, after in zip(s.points, s.points[1:]):
            if before.spec != after.spec:
                out.append(f"spec of {s.task} · {s.arm} · {s.model} changed {before.spec} -> {after.spec} "
                           f"at {after.run} (the task's or arm's text, or the model id)")
    return out


def markdown(runs: list[Run], series: list[Series]) -> str:
    from pytest_ponybench.reports.markdown import markdown_table

    included = [r for r in runs if not r.left_out]
    parts = ["# ponybench history", "",
             f"{len(included)} runs in the history, {len(runs) - len(included)} left out.", ""]
    parts += [f"- {line}" for line in left_out_lines(runs) + version_changes(runs) + spec_changes(series)
              + flags(series)]
    parts.append("")
    parts += [markdown_table(t) for t in tables(series)]
    return "\n".join(parts) + "\n"


def plot(series: Series) -> str | None:
    """A data URI of one figure over time (intervals as error bars, CLI changes as lines,
    flagged runs in red), or None without matplotlib."""
    from pytest_ponybench.reports import plots

    loaded = plots.load_matplotlib()
    if loaded is None:
        return None
    figure_class, canvas = loaded
    points = [p for p in series.points if p.value is not None]
    fig = figure_class(figsize=(max(5.0, 0.6 * len(points) + 2), 3.0))
    ax = fig.add_subplot()
    xs = list(range(len(points)))
    ys = [p.value for p in points]
    if series.figure in records_.AXES:
        lows, highs = [], []
        for p in points:
            assert p.value is not None and p.low is not None and p.high is not None  # a rate's Wilson interval
            lows.append(p.value - p.low)
            highs.append(p.high - p.value)
        ax.errorbar(xs, ys, yerr=[lows, highs], fmt="o-", color="#1f77b4", capsize=3)
        ax.set_ylim(-0.05, 1.05)
    else:
        ax.plot(xs, ys, "o-", color="#1f77b4")
    for x, p in zip(xs, points):
        if p.flag:
            ax.plot([x], [p.value], "o", color="#d62728", markersize=10, label="left its range")
    for x, (a, b) in enumerate(zip(points, points[1:]), 1):
        if a.claude_version != b.claude_version:
            ax.axvline(x - 0.5, color="#7f7f7f", linestyle="--")
            ax.text(x - 0.45, ax.get_ylim()[1], f"CLI {b.claude_version}", fontsize=7, va="top")
    ax.set_xticks(xs)
    ax.set_xticklabels([p.date[:10] for p in points], rotation=45, fontsize=7, ha="right")
    ax.set_title(f"{series.task} · {series.arm} · {series.model}: {series.figure}", fontsize=9)
    return plots.png_data_uri(fig, canvas)


def report_html(runs: list[Run], series: list[Series], draw: bool = True) -> str:
    from pytest_ponybench.reports.html_report import STYLE, html_table, inline_code

    out = [f"<!doctype html><html><head><meta charset='utf-8'><title>ponybench history</title>"
           f"<style>{STYLE}</style></head><body><h1>ponybench history</h1>"]
    out.append("<ul>" + "".join(f"<li>{inline_code(line)}</li>"
                                for line in left_out_lines(runs) + version_changes(runs) + spec_changes(series)
                                + flags(series)) + "</ul>")
    for table in tables(series):
        out.append(html_table(table))
    for s in series if draw else []:
        uri = plot(s)
        if uri is None:
            out.append("<p class='missing'>Plots need matplotlib: pip install matplotlib</p>")
            break
        out.append(f"<h3>{html.escape(s.task)} · {html.escape(s.arm)} · {html.escape(s.model)}: "
                   f"{html.escape(s.figure)}</h3><img class='plot' alt='{html.escape(s.figure)}' src='{uri}'>")
    out.append("</body></html>")
    return "\n".join(out)


def infra_fraction(text: str) -> float:
    number = parse_number(text, float, "a share between 0 and 1")
    if not 0 <= number <= 1:
        raise argparse.ArgumentTypeError(f"must be between 0 and 1, got {text}")
    return number


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="ponybench-history", description=__doc__.split("\n\n")[0])
    p.add_argument("runs", nargs="+", metavar="RUN_DIR", help="run directories, or folders of them")
    p.add_argument("--out", default="ponybench-history", metavar="DIR",
                   help="where summary.md, report.html and history.json go [default ponybench-history]")
    p.add_argument("--max-infra-share", type=infra_fraction, default=records_.INFRA_LOUD_SHARE, metavar="SHARE",
                   help=f"leave out runs with more than this share of infra-error cells [default {records_.INFRA_LOUD_SHARE}]")
    p.add_argument("--no-plots", action="store_true", help="report.html without plots (no matplotlib needed)")
    p.add_argument("--rehearsals", action="store_true",
                   help="include rehearsals (a scripted model's runs), marked REHEARSAL and compared with "
                        "rehearsals only [default: left out, and counted]")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = parser().parse_args(argv)
    runs, skipped = [], []
    try:
        found = find_runs(args.runs)
    except RunError as exc:
        print(f"ponybench-history: {exc}", file=sys.stderr)
        return 2
    for path in found:  # one run that cannot be read never hides the others
        try:
            runs.append(read_run(path, args.max_infra_share, args.rehearsals))
        except RunError as exc:
            skipped.append(f"skipped {path}: {exc}")
    if not runs:
        for line in skipped:
            print(f"ponybench-history: {line}", file=sys.stderr)
        print("ponybench-history: no run could be read", file=sys.stderr)
        return 2
    series = build(runs)
    from pytest_ponybench.reports.tables import text_table

    included = [r for r in runs if not r.left_out]
    print(f"ponybench history: {len(included)} runs, {len(runs) - len(included)} left out"
          + (f", {len(skipped)} skipped" if skipped else ""))
    for line in skipped + left_out_lines(runs) + version_changes(runs) + spec_changes(series):
        print(line)
    for table in tables(series):
        for line in text_table(table):
            print(line)
    for line in flags(series):
        print(line)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    write_atomic(out / "summary.md", markdown(runs, series))
    write_atomic(out / "report.html", report_html(runs, series, draw=not args.no_plots))
    write_atomic(out / "history.json", json.dumps(
        {"runs": [{k: v for k, v in asdict(r).items() if k != "records"} for r in runs],
         "series": [asdict(s) for s in series]}, indent=2))
    print(f"wrote {out / 'summary.md'}, {out / 'report.html'}, {out / 'history.json'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
