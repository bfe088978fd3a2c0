"""summary.md: the tables as Markdown, to paste into a README or a pull request."""
from __future__ import annotations

from pathlib import Path
from typing import Sequence

from pytest_ponybench.reports import primary
from pytest_ponybench.reports.stats import ArmStats
from pytest_ponybench.reports.tables import (HOW_TO_READ, Table, activity_lines, cell_tables,
                                             comparison_table, consistency_table, failure_sections,
                                             header_lines, infra_lines, pooled_table, apart_lines)


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


def primary_markdown(answers: Sequence[primary.PrimaryAnswer], reference: str) -> str:
    """The answer per arm, first: a heading, a bullet per arm and model, the methods."""
    heading, *lines = primary.lines(answers, reference)
    return (f"## {heading.rstrip(':')}\n\n" + "".join(f"- {md_escape(line.strip())}\n" for line in lines)
            + "\n_Methods._ " + md_escape(" ".join(primary.methods())) + "\n")


def build_markdown(run_dir: Path, records: Sequence[dict], reference: str,
                   arm_stats: ArmStats, answers: Sequence[primary.PrimaryAnswer]) -> str:
    parts = [f"# ponybench: {run_dir.name}\n", "\n".join(header_lines(records, reference)) + "\n",
             primary_markdown(answers, reference), "## Results per task x model\n"]
    parts += [markdown_table(t) for t in cell_tables(records, reference)]
    failures = failure_sections(records)
    if failures:  # a red CI job's summary says why, right under the tables
        parts.append("## Why cells failed\n\n" + "\n".join(
            f"### {md_escape(heading)}\n\n" + "".join(f"- {md_escape(line)}\n" for line in lines)
            for heading, lines in failures))
    infra = infra_lines(records)
    if infra:
        parts.append("## Infra errors\n\n" + "\n".join(f"- {line}" for line in infra) + "\n")
    apart = apart_lines(records)
    if apart:  # not the arm's doing: the budget cut them, or an instrument failed
        parts.append("## Left out by the harness\n\n" + "\n".join(f"- {md_escape(line)}" for line in apart) + "\n")
    activity = activity_lines(records)
    if activity:
        parts.append("## What the arms made the agent do\n\n" + "\n".join(f"- {line}" for line in activity) + "\n")
    from pytest_ponybench.reports.judge_report import table as judged_table  # --ponybench-judge's columns

    judged = judged_table(records, reference)
    if judged is not None:
        parts.append(markdown_table(judged))
    if arm_stats.note:
        parts.append(f"## Arms against `{reference}`\n\n{arm_stats.note}.\n")
    else:
        parts += [markdown_table(comparison_table(arm_stats)),
                  markdown_table(pooled_table(arm_stats))]
    parts.append(markdown_table(consistency_table(arm_stats)))
    parts.append(f"## How to read\n\n{HOW_TO_READ}\n")
    return "\n".join(parts)
