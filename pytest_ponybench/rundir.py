"""The run directory: one owner for every file a run keeps.

`<ponybench-dir>/<stamp>/` holds one workspace per cell and, beside them:

- `run.json`: the options the run was made with (a resume with other ones is refused);
- `results.jsonl`: one record per cell, appended by the controller as reports arrive;
- `summary.json`, `summary.md`, `report.html`: written by the controller at the end;
- `_ponybench.spend.jsonl`: the spend ledger, one line per paid cell, appended by whichever
  process ran it (every xdist worker on the machine reads it before starting a cell);
- `_ponybench.pause.json`: the shared 429 pause, `{"until": epoch seconds, "cell": ...}`,
  written when a cell saw the API answer 429; every worker waits it out before its next cell.

The plugin, the cells, the reports and ponybench-compare reach these files only through this
module, so a file name lives in one place.
"""
from __future__ import annotations

import datetime
import json
import os
import time
from pathlib import Path

from .spec import HARNESS_PREFIX

OPTIONS = "run.json"
RESULTS = "results.jsonl"
SUMMARY = "summary.json"
SUMMARY_MD = "summary.md"
REPORT_HTML = "report.html"
SPEND = f"{HARNESS_PREFIX}.spend.jsonl"
PAUSE_FILE = f"{HARNESS_PREFIX}.pause.json"  # the shared 429 pause (another host may relay it)
MAX_PAUSE = 3600.0  # seconds: no pause file holds cells back longer than this
CELL_IDENTITY = f"{HARNESS_PREFIX}.cell.json"  # inside each workspace (see workspace.py)


def is_kept_run(path: Path) -> bool:
    """A run directory (its options file) or one cell's workspace (its identity file): what
    the project's own pytest must never collect, since the agent's tests are in there."""
    return (Path(path) / OPTIONS).is_file() or (Path(path) / CELL_IDENTITY).is_file()


class NotARunDir(Exception):
    """A rescore, resume or compare target that is not a ponybench run directory."""


def write_atomic(path: Path, text: str) -> None:
    """Write beside, then rename over: a reader (or a resume after a kill) sees the old file
    or the new one, never half of one."""
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)


def usd(amount: float) -> str:
    """Dollars as people read them: cents for large amounts, four places for a few cents."""
    return f"${amount:,.2f}" if amount >= 1 else f"${amount:.4f}"


def read_jsonl(path: Path) -> list[dict]:
    """Every JSON object of a line-per-record file; a torn last line (a killed writer) and
    anything that is not an object are skipped."""
    records = []
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError:
        return records
    for line in text.splitlines():
        try:
            record = json.loads(line)
        except ValueError:
            continue
        if isinstance(record, dict):
            records.append(record)
    return records


class RunDir:
    """One run directory. Create a new one with `RunDir.create`, open a kept one with
    `RunDir.open` (which refuses a folder that is not a run)."""

    def __init__(self, path: Path):
        self.path = Path(path)

    def __repr__(self) -> str:
        return f"RunDir({str(self.path)!r})"

    # ---------------------------------------------------------------- finding and making

    @classmethod
    def create(cls, base: Path) -> "RunDir":
        """`<base>/<stamp>`, created exclusively: two runs started in the same second never
        share a directory."""
        base = Path(base)
        base.mkdir(parents=True, exist_ok=True)
        stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
        for attempt in range(1, 1000):
            candidate = base / (stamp if attempt == 1 else f"{stamp}-{attempt}")
            try:
                candidate.mkdir()
            except FileExistsError:
                continue
            # git ignores the whole run (workspaces hold the agent's code and tests, and a
            # fixture's own repository); pytest skips it through plugin.pytest_ignore_collect.
            (candidate / ".gitignore").write_text("# a pytest-ponybench run: kept, never committed\n*\n",
                                                  encoding="utf-8")
            return cls(candidate.resolve())
        raise RuntimeError(f"could not create a run directory under {base}")

    @classmethod
    def open(cls, path: Path, flag: str) -> "RunDir":
        """A kept run, or NotARunDir naming `flag` (the option that named it) and the folder.

        A run directory has its options file, its results or at least one cell workspace;
        anything else is refused before a single file is written into it."""
        path = Path(path)
        if not path.is_dir():
            raise NotARunDir(f"{flag}: {path} is not a directory")
        run = cls(path.resolve())
        if run.options_path.is_file() or run.results_path.is_file() or any(run.cell_dirs()):
            return run
        raise NotARunDir(f"{flag}: {path} is not a ponybench run directory (it has no {OPTIONS}, "
                         f"no {RESULTS} and no cell workspace); give a folder under your runs "
                         f"directory, such as runs/<stamp>")

    # ---------------------------------------------------------------- paths

    @property
    def name(self) -> str:
        return self.path.name

    @property
    def options_path(self) -> Path:
        return self.path / OPTIONS

    @property
    def results_path(self) -> Path:
        return self.path / RESULTS

    @property
    def summary_path(self) -> Path:
        return self.path / SUMMARY

    @property
    def spend_path(self) -> Path:
        return self.path / SPEND

    def cell_dir(self, cell_id: str) -> Path:
        return self.path / cell_id

    def cell_dirs(self):
        """The cell workspaces (folders holding a cell identity), sorted by name."""
        if not self.path.is_dir():
            return
        for entry in sorted(self.path.iterdir()):
            if entry.is_dir() and (entry / CELL_IDENTITY).is_file():
                yield entry

    # ---------------------------------------------------------------- the stored options

    def read_options(self) -> dict | None:
        try:
            data = json.loads(self.options_path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return None
        return data if isinstance(data, dict) else None

    def write_options(self, options: dict) -> None:
        write_atomic(self.options_path, json.dumps(options, indent=1, sort_keys=True))

    # ---------------------------------------------------------------- records

    def read_results(self) -> list[dict]:
        return read_jsonl(self.results_path)

    # ---------------------------------------------------------------- the spend ledger

    def record_spend(self, cell_id: str, cost: float | None) -> None:
        """Append a finished cell's cost to the run's ledger. Workers on this machine share
        the run directory, so the budget holds across them; a line is one small O_APPEND
        write, whole or absent."""
        line = json.dumps({"cell": cell_id, "cost_usd": cost or 0.0}) + "\n"
        fd = os.open(self.spend_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, line.encode())
        finally:
            os.close(fd)

    # ---------------------------------------------------------------- the shared 429 pause

    @property
    def pause_path(self) -> Path:
        return self.path / PAUSE_FILE

    def pause(self, seconds: float, cell_id: str) -> None:
        """Hold back every worker's next cell for `seconds` (a rate-limited key slows the run
        instead of burning cells). A pause already in force for longer is kept."""
        until = time.time() + seconds
        if until > self.paused_until():
            write_atomic(self.pause_path, json.dumps({"until": until, "cell": cell_id}))

    def paused_until(self) -> float:
        """Epoch seconds until which new cells wait; 0 when no pause was written."""
        try:
            until = json.loads(self.pause_path.read_text(encoding="utf-8")).get("until")
        except (OSError, ValueError, AttributeError):
            return 0.0
        if not isinstance(until, (int, float)) or isinstance(until, bool):
            return 0.0
        return min(float(until), time.time() + MAX_PAUSE)  # a corrupt far-future pause cannot hang the run

    def wait_for_pause(self, sleep=time.sleep) -> float:
        """Sleep while a pause is in force (it may be extended meanwhile); the seconds waited."""
        waited = 0.0
        while (left := self.paused_until() - time.time()) > 0:
            step = min(left, 5.0)  # read again: another worker may have extended it
            sleep(step)
            waited += step
        return waited

    def spent(self) -> float:
        """Dollars recorded by every finished cell of this run so far, earlier sessions included."""
        total = 0.0
        for entry in read_jsonl(self.spend_path):
            try:
                total += float(entry.get("cost_usd") or 0.0)
            except (TypeError, ValueError):
                continue
        return total


def cost_history(base: Path, exclude: Path | None, rehearsal: bool) -> dict[tuple[str, str], float]:
    """Mean cost per (task, model) over earlier runs kept under `base`: the basis of the
    estimate shown before a run. Rehearsal costs never stand in for real ones, nor back."""
    costs: dict[tuple[str, str], list[float]] = {}
    for results in sorted(Path(base).glob(f"*/{RESULTS}")):
        if exclude is not None and results.parent.resolve() == Path(exclude).resolve():
            continue
        for record in read_jsonl(results):
            cost = record.get("cost_usd")
            if isinstance(cost, (int, float)) and bool(record.get("rehearsal")) == rehearsal:
                costs.setdefault((record.get("task"), record.get("model")), []).append(float(cost))
    return {key: sum(values) / len(values) for key, values in costs.items()}
