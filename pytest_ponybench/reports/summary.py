"""summary.json's rows (per task x arm x model, with the original benchmark's definitions) and
the table printed in pytest's terminal summary.

Rates are over measured cells only (record.py says which count); each row also says how many
cells were left out, and why, so no reader has to guess what a rate is over.
"""
from __future__ import annotations

import statistics

from pytest_ponybench.reports.tables import cell_tables, text_table
from pytest_ponybench.store import record as records_


def _mean(values, digits):
    values = [v for v in values if v is not None]
    return round(statistics.mean(values), digits) if values else None


def _median(values):
    return statistics.median(values) if values else None


def aggregate(records: list[dict]) -> list[dict]:
    """One row per task x arm x model. LOC statistics use only measured cells that delivered
    code, except `total_loc_median_all_cells`: every measured cell, one that delivered nothing
    counted at the task's largest observed LOC over every arm (records_.loc_all_cells)."""
    rows = []
    largest = {key: records_.largest_loc(cells)
               for key, cells in records_.group_by(records, "task", "model").items()}
    for (task, arm, model), cells in records_.group_by(records, "task", "arm", "model").items():
        worst = largest.get((task, model))
        t = records_.tally(cells)
        measured = [c for c in cells if records_.is_measured(c)]
        with_code = [c for c in measured if records_.delivered_loc(c) is not None]
        with_tokens = [c for c in measured if c.get("out_tokens") is not None]
        rows.append({
            "task": task, "arm": arm, "model": model,
            "n": t.measured, "cells": t.cells, "left_out": t.left_out,
            # None when the task has no check on the axis: not measured, never 100%.
            **{f"{axis}_rate": t.axis_rate(axis) for axis in records_.AXES},
            "wrote_file_rate": t.rate(t.delivered),
            "total_loc_median": _median([c["total_loc"] for c in with_code]),
            "total_loc_max": max((c["total_loc"] for c in with_code), default=None),
            "total_loc_median_all_cells": _median(records_.loc_all_cells(cells, worst)) if worst else None,
            "src_loc_median": _median([c["src_loc"] for c in with_code]),
            "src_files_median": _median([c["src_files"] for c in with_code]),
            "wrote_tests_rate": t.rate(t.wrote_tests),
            "cost_mean": _mean([c.get("cost_usd") for c in measured], 4),
            "out_tokens_mean": _mean([c["out_tokens"] for c in with_tokens], None),
            "total_tokens_mean": _mean([(c.get("in_tokens") or 0) + c["out_tokens"] + (c.get("cache_tokens") or 0)
                                        for c in with_tokens], None),
            "time_s_mean": _mean([c["duration_ms"] / 1000 for c in measured if c.get("duration_ms") is not None], 1),
        })
    return rows


def terminal_lines(records: list[dict], reference: str, answers: list | None = None) -> list[str]:
    """What the terminal prints under "ponybench summary": the answer per arm first (primary.py;
    computed here when the run's end did not, e.g. a full disk), then the tables."""
    from pytest_ponybench.reports import primary  # numpy: only at the end of a run

    if answers is None:
        answers = primary.answers(records, reference)
    return primary.lines(answers, reference) + [""] + table_lines(records, reference)


def table_lines(records: list[dict], reference: str) -> list[str]:
    """The terminal summary: the same per task x model tables as summary.md."""
    lines = []
    for table in cell_tables(records, reference):
        lines += text_table(table)
    return lines


STEP_SUMMARY_VAR = "GITHUB_STEP_SUMMARY"


def append_step_summary(summary_md, environ=None) -> bool:
    """Append the run's summary.md to the file GitHub Actions names in $GITHUB_STEP_SUMMARY
    (the job's summary page), when that variable is set; True when it was appended."""
    import os
    from pathlib import Path

    target = (os.environ if environ is None else environ).get(STEP_SUMMARY_VAR)
    source = Path(summary_md)
    if not target or not source.is_file():
        return False
    with open(target, "a", encoding="utf-8") as fh:
        fh.write(source.read_text(encoding="utf-8").rstrip("\n") + "\n\n")
    return True
