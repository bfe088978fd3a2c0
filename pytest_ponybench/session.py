"""Controller state: the run directory, the results file, the summary.

Only the controller writes here (under xdist, the process that replays every worker's
report), so the results file has one writer and no locks. Each finished cell is appended
and flushed as its report arrives: an interrupted run keeps every finished cell.
"""
from __future__ import annotations

import datetime
import json
import os
import signal
from pathlib import Path

from . import summary

RESULTS = "results.jsonl"
SUMMARY = "summary.json"
SPEND = "_ponybench.spend.jsonl"  # every paid cell's cost, appended by whichever process ran it


def write_atomic(path: Path, text: str) -> None:
    """Write beside, then rename over: a reader (or a resume after a kill) sees the old file
    or the new one, never half of one."""
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)


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


def record_spend(run_dir: Path, cell_id: str, cost: float | None) -> None:
    """Append a finished cell's cost to the run's ledger. Workers share the run directory,
    so the budget holds across xdist workers; a line is one small O_APPEND write."""
    line = json.dumps({"cell": cell_id, "cost_usd": cost or 0.0}) + "\n"
    fd = os.open(Path(run_dir) / SPEND, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line.encode())
    finally:
        os.close(fd)


def spent(run_dir: Path) -> float:
    """Dollars recorded by every finished cell of this run so far, earlier sessions included."""
    total = 0.0
    try:
        lines = (Path(run_dir) / SPEND).read_text(encoding="utf-8").splitlines()
    except OSError:
        return 0.0
    for line in lines:
        try:
            total += float(json.loads(line).get("cost_usd") or 0.0)
        except (ValueError, AttributeError):
            continue
    return total


def usd(amount: float) -> str:
    """Dollars as people read them: cents for large amounts, four places for a few cents."""
    return f"${amount:,.2f}" if amount >= 1 else f"${amount:.4f}"


def cost_history(base: Path, exclude: Path | None, rehearsal: bool) -> dict[tuple[str, str], float]:
    """Mean cost per (task, model) over earlier runs kept under `base`: the basis of the
    estimate shown before a run. Rehearsal costs never stand in for real ones, nor back."""
    costs: dict[tuple[str, str], list[float]] = {}
    for results in sorted(Path(base).glob(f"*/{RESULTS}")):
        if exclude is not None and results.parent.resolve() == Path(exclude).resolve():
            continue
        for record in read_results(results.parent):
            cost = record.get("cost_usd")
            if isinstance(cost, (int, float)) and bool(record.get("rehearsal")) == rehearsal:
                costs.setdefault((record.get("task"), record.get("model")), []).append(float(cost))
    return {key: sum(values) / len(values) for key, values in costs.items()}


class RunSession:
    """The controller's view of one run: `mode` is "run", "resume" or "rescore"."""

    def __init__(self, run_dir: Path, mode: str = "run"):
        self.run_dir = run_dir
        self.mode = mode
        self.records: list[dict] = []
        self.budget_skipped = 0
        # A resume or rescore writes beside the old results and merges at the end: interrupted,
        # it loses nothing (and every workspace keeps its own result anyway).
        self.results_path = run_dir / (RESULTS if mode == "run" else f"{RESULTS}.{mode}")
        if self.results_path.exists() and mode != "run":
            self.results_path.unlink()
        self.started = datetime.datetime.now().isoformat(timespec="seconds")

    def add(self, record: dict) -> None:
        self.records.append(record)
        line = json.dumps(record, sort_keys=True) + "\n"
        # A Ctrl-C or SIGTERM waits until the line is whole: a torn line would swallow the next.
        blocked = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT, signal.SIGTERM})
        try:
            with open(self.results_path, "a", encoding="utf-8") as fh:
                fh.write(line)
                fh.flush()
                os.fsync(fh.fileno())
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, blocked)

    def _merged(self) -> list[dict]:
        """This session's records, plus earlier ones of cells it did not report (a resume or
        rescore narrowed with -k keeps the rest of the run)."""
        mine = {r["cell"] for r in self.records}
        earlier = [r for r in read_results(self.run_dir) if r.get("cell") not in mine]
        return earlier + self.records

    def finish(self, model_ids: dict[str, str], claude_version: str, rehearsal: bool = False,
               reference: str = "baseline") -> list[Path]:
        """Write summary.json, then the reports. Results are on disk already, line by line."""
        records = self.records
        if self.mode != "run":
            records = self._merged()
            write_atomic(self.run_dir / RESULTS, "".join(json.dumps(r, sort_keys=True) + "\n" for r in records))
            self.results_path.unlink(missing_ok=True)
        rows = summary.aggregate(records)
        versions = sorted({r.get("claude_version") for r in records if r.get("claude_version")})
        data = {
            "date": self.started,
            "mode": self.mode,
            # A rehearsal's figures come from a scripted model: say so wherever they travel.
            "rehearsal": rehearsal or any(r.get("rehearsal") for r in records),
            "models": {m: model_ids.get(m, m) for m in sorted({r["model"] for r in records})},
            "claude_version": claude_version or ", ".join(versions),
            "cells": len(records),
            "budget_skipped": self.budget_skipped,
            "spent_usd": round(spent(self.run_dir), 6),
            "rows": rows,
        }
        path = self.run_dir / SUMMARY
        write_atomic(path, json.dumps(data, indent=2))
        from . import report  # numpy and scipy: only when a report is written, never when pytest loads the plugin

        return [path] + report.write_reports(self.run_dir, records, reference)
