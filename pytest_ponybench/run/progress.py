"""A run you can watch: cells done of total, how they went, time and spend so far.

The controller feeds every cell's record (and every cell the budget skipped) to a
`ProgressPrinter`. On a terminal it keeps one line up to date (rewritten in place); into a
file or a CI log it prints plain lines, at most one every `interval` seconds, plus the first
and the last, so a long run neither floods a log nor goes silent. A cell is said to have
"passed" or "failed" (with the gate that failed), never "finished": a cell whose agent
finished but whose code was wrong did not finish anything a reader would want. Every dollar
figure of a rehearsal says "(simulated)".
"""
from __future__ import annotations

import shlex
import time
from dataclasses import dataclass, field
from typing import Callable

from pytest_ponybench.store import record as records
from pytest_ponybench.store.rundir import usd


def money(amount: float, rehearsal: bool) -> str:
    """A dollar figure as the terminal says it: a rehearsal's is simulated, and says so."""
    return usd(amount) + (" (simulated)" if rehearsal else "")

DEFAULT_INTERVAL = 5.0  # seconds between plain lines


def duration(seconds: float) -> str:
    seconds = int(round(max(seconds, 0)))
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    if hours:
        return f"{hours}h{minutes:02d}m"
    return f"{minutes}m{secs:02d}s" if minutes else f"{secs}s"


def outcome(record: dict) -> str:
    """How one cell went, in a word or two: passed, failed (the gate), infra error."""
    attempts = record.get("attempts")
    again = f" after {attempts} attempts" if isinstance(attempts, int) and attempts > 1 else ""
    if record.get("passed"):
        return "passed" + again
    if record.get("status") in records.INFRA:
        return f"infra error ({record.get('status')}){again}"
    if records.is_budget_cut(record):
        return "cut by the run's budget"
    if records.is_instrument_error(record):
        return "instrument error"
    gate = str(record.get("failure") or record.get("status") or "failed").split(":", 1)[0]
    return f"failed ({gate}){again}"


@dataclass
class Progress:
    """The counts of a run so far; `line()` says them in one line."""

    total: int
    rehearsal: bool = False
    started: float = field(default_factory=time.monotonic)
    passed: int = 0
    failed: int = 0
    infra: int = 0
    skipped: int = 0
    # What the run has spent, asked for only when a line is made: reading the spend ledger
    # on every report would cost the controller a pass over the whole ledger per cell.
    spent: Callable[[], float] = lambda: 0.0
    last: str = ""

    @property
    def done(self) -> int:
        return self.passed + self.failed + self.infra + self.skipped

    def add(self, record: dict) -> None:
        if record.get("passed"):
            self.passed += 1
        elif record.get("status") in records.INFRA:
            self.infra += 1
        elif records.skipped_apart(record):  # the budget cut it or an instrument failed: skipped, as pytest says
            self.skipped += 1
        else:
            self.failed += 1
        self.last = f"{record.get('cell')} {outcome(record)}"

    def skip(self) -> None:
        self.skipped += 1

    def money(self, amount: float) -> str:
        return money(amount, self.rehearsal)

    def line(self, now: float | None = None) -> str:
        now = time.monotonic() if now is None else now
        elapsed = now - self.started
        counts = f"{self.passed} passed, {self.failed} failed, {self.infra} infra"
        if self.skipped:
            counts += f", {self.skipped} skipped"
        left = self.total - self.done
        if left <= 0:
            timing = f"{duration(elapsed)} elapsed"
        elif self.done:
            timing = f"{duration(elapsed)} elapsed, about {duration(elapsed / self.done * left)} left"
        else:
            timing = f"{duration(elapsed)} elapsed"
        text = f"ponybench: {self.done}/{self.total} cells ({counts}); {timing}; {self.money(self.spent())} spent"
        return text + (f"; last: {self.last}" if self.last else "")


class ProgressPrinter:
    """Prints a Progress: `rewrite(line)` on a terminal, `write_line(line)` otherwise."""

    def __init__(self, progress: Progress, write_line, rewrite=None, tty: bool = False,
                 interval: float = DEFAULT_INTERVAL, clock=time.monotonic):
        self.progress = progress
        self.write_line = write_line
        self.rewrite = rewrite
        self.tty = tty and rewrite is not None
        self.interval = interval
        self.clock = clock
        self.printed_at: float | None = None
        self.open_line = False  # a rewritten line is on screen, not yet ended

    def update(self) -> None:
        now = self.clock()
        finished = self.progress.done >= self.progress.total
        if self.tty:
            self.rewrite(self.progress.line(now))
            self.open_line = not finished
            if finished:
                self.write_line("")
        elif finished or self.printed_at is None or now - self.printed_at >= self.interval:
            self.write_line(self.progress.line(now))
            self.printed_at = now

    def close(self) -> None:
        """End a rewritten line before anything else is printed (an interrupt, the summary)."""
        if self.open_line:
            self.write_line("")
            self.open_line = False


def resume_command(args: list[str] | tuple[str, ...], run_dir) -> str:
    """The command that finishes an interrupted run: the same arguments, resuming its run
    directory (a resume with other options is refused, so nothing else changes)."""
    kept, skip_next = [], False
    for arg in args:
        if skip_next:
            skip_next = False
            continue
        if arg in ("--ponybench-resume", "--ponybench-rescore"):
            skip_next = True
            continue
        if arg.startswith(("--ponybench-resume=", "--ponybench-rescore=")):
            continue
        kept.append(arg)
    return shlex.join(["pytest", *kept, f"--ponybench-resume={run_dir}"])
