"""The reports of one run directory: summary.md (markdown.py) and report.html
(html_report.py, with plots.py), both built from the tables of tables.py, with the numbers of
stats.arm_stats and the cell counts of record.py."""
from __future__ import annotations

from pathlib import Path
from typing import Sequence

from pytest_ponybench.reports import primary, stats
from pytest_ponybench.reports.html_report import html_pieces
from pytest_ponybench.reports.markdown import build_markdown
from pytest_ponybench.reports.plots import PLOTS_NOT_ASKED, build_plots
from pytest_ponybench.store.rundir import write_atomic


def write_reports(run_dir, records: Sequence[dict], reference: str = "baseline",
                  plots: bool = True, arm_stats: stats.ArmStats | None = None,
                  answers: list[primary.PrimaryAnswer] | None = None) -> list[Path]:
    """Write ``summary.md`` and ``report.html`` into ``run_dir``; return their paths.
    ``plots``: draw the plots (matplotlib), or say in the page how to ask for them.
    ``arm_stats`` and ``answers`` (the primary answers): computed here when not given."""
    run_dir = Path(run_dir)
    records = [r for r in records if isinstance(r, dict)]
    if arm_stats is None:
        arm_stats = stats.arm_stats(records, reference=reference)
    if answers is None:
        answers = primary.answers(records, reference, arm_stats)
    confidence = arm_stats.settings["confidence"]
    markdown_path, html_path = run_dir / "summary.md", run_dir / "report.html"
    write_atomic(markdown_path, build_markdown(run_dir, records, reference, arm_stats, answers))
    images, plot_message = build_plots(records, reference, confidence) if plots else ([], PLOTS_NOT_ASKED)
    # In pieces: the cells' table of a 10,000-cell run is never one string in the controller.
    write_atomic(html_path, html_pieces(run_dir, records, reference, arm_stats, answers, images, plot_message))
    return [markdown_path, html_path]
