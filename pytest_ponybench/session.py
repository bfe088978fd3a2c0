"""Controller state: the run directory, the results file, the summary.

Only the controller writes here (under xdist, the process that replays every worker's
report), so the results file has one writer and no locks. Each finished cell is appended
and flushed as its report arrives: an interrupted run keeps every finished cell.
"""
from __future__ import annotations

import datetime
import json
import os
from pathlib import Path

from . import report, summary

RESULTS = "results.jsonl"
SUMMARY = "summary.json"


def new_run_dir(base: Path) -> Path:
    """`<base>/<stamp>`, created exclusively: two runs started in the same second never share."""
    base.mkdir(parents=True, exist_ok=True)
    stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
    for attempt in range(1, 1000):
        candidate = base / (stamp if attempt == 1 else f"{stamp}-{attempt}")
        try:
            candidate.mkdir()
            return candidate.resolve()
        except FileExistsError:
            continue
    raise RuntimeError(f"could not create a run directory under {base}")


def read_results(run_dir: Path) -> list[dict]:
    """Every record of a run's results file; a torn last line (a killed writer) is skipped."""
    path = Path(run_dir) / RESULTS
    records = []
    if not path.exists():
        return records
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            record = json.loads(line)
        except ValueError:
            continue
        if isinstance(record, dict):
            records.append(record)
    return records


class RunSession:
    def __init__(self, run_dir: Path, rescore: bool = False):
        self.run_dir = run_dir
        self.rescore = rescore
        self.records: list[dict] = []
        # A rescore writes beside the old results and swaps at the end: interrupted, it loses nothing.
        self.results_path = run_dir / (RESULTS + ".rescore" if rescore else RESULTS)
        if rescore and self.results_path.exists():
            self.results_path.unlink()
        self.started = datetime.datetime.now().isoformat(timespec="seconds")

    def add(self, record: dict) -> None:
        self.records.append(record)
        with open(self.results_path, "a", encoding="utf-8") as fh:
            fh.write(json.dumps(record, sort_keys=True) + "\n")
            fh.flush()
            os.fsync(fh.fileno())

    def finish(self, model_ids: dict[str, str], claude_version: str, rehearsal: bool = False,
               reference: str = "baseline") -> list[Path]:
        """Write summary.json, then the reports. Results are on disk already, line by line."""
        if self.rescore and self.results_path.exists():
            os.replace(self.results_path, self.run_dir / RESULTS)
        rows = summary.aggregate(self.records)
        versions = sorted({r.get("claude_version") for r in self.records if r.get("claude_version")})
        data = {
            "date": self.started,
            "rescored": self.rescore,
            # A rehearsal's figures come from a scripted model: say so wherever they travel.
            "rehearsal": rehearsal or any(r.get("rehearsal") for r in self.records),
            "models": {m: model_ids.get(m, m) for m in sorted({r["model"] for r in self.records})},
            "claude_version": claude_version or ", ".join(versions),
            "cells": len(self.records),
            "rows": rows,
        }
        path = self.run_dir / SUMMARY
        tmp = path.with_name(SUMMARY + ".tmp")
        tmp.write_text(json.dumps(data, indent=2), encoding="utf-8")
        os.replace(tmp, path)
        return [path] + report.write_reports(self.run_dir, self.records, reference)
