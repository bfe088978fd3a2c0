"""report.html: one self-contained page (no network, no script; links to each cell's
workspace and transcript, relative to the run directory) with the tables, the plots and a
table of every cell."""
from __future__ import annotations

import html
import os
from pathlib import Path
from typing import Iterator, Sequence
from urllib.parse import quote

from pytest_ponybench.cell.workspace import TRANSCRIPT
from pytest_ponybench.reports import primary, stats
from pytest_ponybench.reports.stats import ArmStats
from pytest_ponybench.reports.tables import (HOW_TO_READ, Table, activity_lines, cell_tables, fmt_cost,
                                             comparison_table, consistency_table, failure_sections,
                                             header_lines, infra_lines, pooled_table, apart_lines)
from pytest_ponybench.store.record import AXES



STYLE = """
body { font: 14px/1.45 system-ui, sans-serif; margin: 2em auto; max-width: 1200px; padding: 0 1em; color: #222; }
table { border-collapse: collapse; margin: .5em 0 1em; }
th, td { border: 1px solid #ccc; padding: .25em .6em; text-align: left; vertical-align: top; white-space: nowrap; }
td:last-child { white-space: normal; min-width: 16em; }
div.scroll { max-width: 100%; overflow-x: auto; }
th { background: #f3f3f3; }
td.num { text-align: right; font-variant-numeric: tabular-nums; }
ul.notes { font-size: 12px; color: #555; }
img.plot { max-width: 100%; display: block; margin: .5em 0 1.5em; }
p.missing { background: #fff6d5; border: 1px solid #e6c85c; padding: .5em; }
code { background: #f3f3f3; padding: 0 .2em; }
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
        # A wide table scrolls inside its own box instead of widening the page.
        out.append(f'<div class="scroll"><table{attr}><thead><tr>'
                   + "".join(f"<th>{inline_code(h)}</th>" for h in table.headers)
                   + "</tr></thead><tbody>")
        for row in table.rows:
            out.append("<tr>" + "".join(
                f'<td class="num">{inline_code(c)}</td>' if i in table.numeric
                else f"<td>{inline_code(c)}</td>" for i, c in enumerate(row)) + "</tr>")
        out.append("</tbody></table></div>")
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


def _axis(record: dict, axis: str) -> str:
    """A cell's figure (0/1 on an axis, a LOC count), '-' where it was not measured (no check
    on the axis, or the agent never ran)."""
    value = record.get(axis)
    return "-" if value is None else str(value)


def cells_html(records: Sequence[dict], run_dir: Path) -> Iterator[str]:
    """The table of every cell, a row at a time (10,000 rows are 3.5 MB of page)."""
    headers = ["cell", "status", *AXES, "total_loc", "cost", "out tokens",
               "duration", "workspace", "transcript", "error"]
    yield ("<h2>Cells</h2>\n<p>Links are relative to the run directory.</p>\n"
           '<div class="scroll"><table id="cells"><thead><tr>' + "".join(f"<th>{h}</th>" for h in headers)
           + "</tr></thead><tbody>\n")
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
                  *(html.escape(_axis(r, axis)) for axis in AXES),
                  html.escape(_axis(r, "total_loc")),
                  html.escape(fmt_cost(r.get("cost_usd") if isinstance(r.get("cost_usd"), (int, float)) else None)),
                  html.escape(str(r.get("out_tokens") if r.get("out_tokens") is not None else "-")),
                  html.escape(f"{duration / 1000:.0f} s" if isinstance(duration, (int, float)) else "-"),
                  ws_link, tr_link, html.escape(str(r.get("error") or ""))]
        yield "<tr>" + "".join(f"<td>{v}</td>" for v in values) + "</tr>\n"
    yield "</tbody></table></div>"


def html_pieces(run_dir: Path, records: Sequence[dict], reference: str, arm_stats: ArmStats, answers,
                plots: list[tuple[str, str]], plot_message: str) -> Iterator[str]:
    """report.html in pieces, for writing as they come (report.write_reports)."""
    body = [f"<h1>ponybench: {html.escape(run_dir.name)}</h1>"]
    body += [f"<p>{inline_code(line)}</p>" for line in header_lines(records, reference)]
    # The answer per arm, first, as wrapping lines: nothing of it hides past the page's edge.
    heading, *lines = primary.lines(answers, reference)
    body.append(f"<h2>{inline_code(heading.rstrip(':'))}</h2>\n<ul id=\"primary\">"
                + "".join(f"<li>{inline_code(line.strip())}</li>" for line in lines) + "</ul>"
                + '<ul class="notes">' + "".join(f"<li>{inline_code(m)}</li>" for m in primary.methods()) + "</ul>")
    body.append("<h2>Results per task x model</h2>")
    body += [html_table(t) for t in cell_tables(records, reference)]
    failures = failure_sections(records)
    if failures:
        body.append('<h2>Why cells failed</h2>\n<div id="failures">' + "".join(
            f"<h3>{inline_code(heading)}</h3><ul>" + "".join(f"<li>{html.escape(line)}</li>" for line in lines) + "</ul>"
            for heading, lines in failures) + "</div>")
    for title, lines, list_id in (("Infra errors", infra_lines(records), "infra"),
                                  ("Left out by the harness", apart_lines(records), "apart"),
                                  ("What the arms made the agent do", activity_lines(records), "activity")):
        if lines:
            body.append(f'<h2>{title}</h2>\n<ul id="{list_id}">'
                        + "".join(f"<li>{inline_code(line)}</li>" for line in lines) + "</ul>")
    from pytest_ponybench.reports.judge_report import table as judged_table  # --ponybench-judge's columns

    judged = judged_table(records, reference)
    if judged is not None:
        body.append(html_table(judged, "judged"))
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
    yield ("<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
           f"<title>ponybench: {html.escape(run_dir.name)}</title>\n"
           f"<style>{STYLE}</style>\n</head>\n<body>\n" + "\n".join(body) + "\n")
    yield from cells_html(records, run_dir)
    yield f"\n<h2>How to read</h2>\n<p>{inline_code(HOW_TO_READ)}</p>\n</body>\n</html>\n"
