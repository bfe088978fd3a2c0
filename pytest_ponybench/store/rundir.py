"""The run directory: one owner for every file a run keeps.

`<ponybench-dir>/<stamp>/` holds one workspace per cell and, beside them:

- `run.json`: the options the run was made with (a resume with other ones is refused);
- `results.jsonl`: one record per cell, appended by the controller as reports arrive;
- `summary.json`, `summary.md`, `report.html`: written by the controller at the end;
- `_ponybench.spend.jsonl`: the spend ledger, one line per paid cell, appended by whichever
  process ran it (every xdist worker on the machine reads it before starting a cell);
- `_ponybench.pause.json`: the shared 429 pause, `{"until": epoch seconds, "cell": ...}`,
  written when a cell saw the API answer 429; every worker waits it out before its next cell;
- `_ponybench.run-id`: the name of the run's key (below);
- `_ponybench.records/<cell>/`: the harness's records of each cell (its identity, seed
  manifests, how the agent run ended, its result), beside the workspace, never in it.

Records and results lines are authenticated with HMAC-SHA256 under a per-run key kept outside
the run directory and every workspace (`key_dir()`, mode 0600, named by the run id); a resume
or rescore trusts only what verifies. The agent runs as the same user today, so the key file
is a raised bar against an agent that rewrites what it finds beside its workspace, not a wall.

Every write here refuses to follow a link (the file's own name and its parent folder), writes
through a temporary name unique to its writer and renames it into place.

The plugin, the cells, the reports and ponybench-compare reach these files only through this
module, so a file name lives in one place.

One module on purpose (about 700 lines): it is the one owner of every file a run keeps, above;
that is its idea.
"""
from __future__ import annotations

import datetime
import errno
import hashlib
import hmac
import json
import math
import os
import secrets
import threading
import time
import warnings
from collections.abc import Iterable, Iterator
from pathlib import Path

from pytest_ponybench.specs import HARNESS_PREFIX

OPTIONS = "run.json"
RESULTS = "results.jsonl"
SUMMARY = "summary.json"
SUMMARY_MD = "summary.md"
REPORT_HTML = "report.html"
SPEND = f"{HARNESS_PREFIX}.spend.jsonl"
PAUSE_FILE = f"{HARNESS_PREFIX}.pause.json"  # the shared 429 pause (another host may relay it)
MAX_PAUSE = 3600.0  # seconds: no pause file holds cells back longer than this
RUN_ID = f"{HARNESS_PREFIX}.run-id"  # names the run's key in key_dir()
RECORDS = f"{HARNESS_PREFIX}.records"  # <run>/_ponybench.records/<cell>/<kind>.json
CELL_IDENTITY = "cell"  # the record kind naming a cell folder's cell (see cell/lifecycle.py)
KEY_ENV = "PONYBENCH_KEY_DIR"
MAC_FIELD = "mac"  # of a results.jsonl line
KEY_INPUT = "ponybench_run_key"  # the run's HMAC key, hex, in each xdist worker's workerinput


def is_kept_run(path: Path) -> bool:
    """A run directory (its options file) or one cell's workspace (its identity file): what
    the project's own pytest must never collect, since the agent's tests are in there."""
    return (Path(path) / OPTIONS).is_file() or (Path(path) / CELL_IDENTITY).is_file()


class NotARunDir(Exception):
    """A rescore, resume or compare target that is not a ponybench run directory."""


class RecordRefused(UserWarning):
    """A harness record or results line that does not verify under the run's key: it is
    ignored, and this warning says which one and why (one line)."""


def refuse(message: str) -> None:
    warnings.warn(RecordRefused(message), stacklevel=2)


# --------------------------------------------------------------------------- writes that follow no link


def _parent_fd(path: Path) -> int:
    """An open descriptor of `path`'s folder, refusing a folder that is itself a link: a link
    planted in place of a cell's records folder must not redirect the harness's writes."""
    try:
        return os.open(path.parent, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    except OSError as exc:
        if exc.errno == errno.ELOOP or (exc.errno == errno.ENOTDIR and os.path.islink(path.parent)):
            raise OSError(errno.ELOOP, f"refusing to write {path}: its folder is a symbolic link") from None
        raise


def _tmp_name(name: str) -> str:
    # Unique to this writer (process, thread, random): two workers writing the same file at
    # once never share a temporary, and a link planted at a guessable name is never opened.
    return f".{name}.{os.getpid()}-{threading.get_ident()}-{secrets.token_hex(6)}.tmp"


def _chunks(pieces: Iterable[str | bytes], size: int = 1 << 16) -> Iterator[bytes]:
    """`pieces` encoded and gathered into writes of about `size` bytes."""
    held, length = [], 0
    for piece in pieces:
        data = piece.encode("utf-8") if isinstance(piece, str) else piece
        held.append(data)
        length += len(data)
        if length >= size:
            yield b"".join(held)
            held, length = [], 0
    if held:
        yield b"".join(held)


def write_atomic(path: Path, text: str | bytes | Iterable[str | bytes], mode: int = 0o644) -> None:
    """Write beside, then rename over: a reader (or a resume after a kill) sees the old file
    or the new one, never half of one. The temporary is created exclusively without following
    links (O_EXCL | O_NOFOLLOW) in a folder opened without following a link, and the rename
    replaces a link at `path` instead of writing through it. `text` may be pieces of text (or bytes),
    written as they come: a report of 10,000 cells is never one string in memory."""
    path = Path(path)
    pieces = [text] if isinstance(text, (str, bytes)) else text
    dfd = _parent_fd(path)
    try:
        tmp = _tmp_name(path.name)
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, mode, dir_fd=dfd)
        try:
            try:
                for chunk in _chunks(pieces):
                    view = memoryview(chunk)
                    while view:
                        view = view[os.write(fd, view):]
            finally:
                os.close(fd)
            os.replace(tmp, path.name, src_dir_fd=dfd, dst_dir_fd=dfd)
        except BaseException:
            try:
                os.unlink(tmp, dir_fd=dfd)
            except OSError:
                pass
            raise
    finally:
        os.close(dfd)


def append_line(path: Path, line: str, room: int = 0) -> None:
    """Append one line with one O_APPEND write, refusing a link at the file or its folder.
    When the file does not end with a newline (someone wrote into it), one goes first, so the
    line is never glued to what was there. `room`: bytes kept allocated beyond the end
    afterwards (`keep_room`), so the next lines still fit on a disk that fills meanwhile."""
    path = Path(path)
    dfd = _parent_fd(path)
    try:
        fd = os.open(path.name, os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW, 0o644, dir_fd=dfd)
    finally:
        os.close(dfd)
    try:
        size = os.fstat(fd).st_size
        if size and os.pread(fd, 1, size - 1) != b"\n":
            line = "\n" + line
        data = memoryview(line.encode("utf-8"))
        while data:
            data = data[os.write(fd, data):]
        if room:
            keep_room(fd, room)
    finally:
        os.close(fd)


# --------------------------------------------------------------------------- a disk that fills

FALLOC_FL_KEEP_SIZE = 1
LEDGER_ROOM = 256 * 1024  # about 4,000 ledger lines, kept allocated beyond the ledger's end
RESULTS_ROOM = 1024 * 1024  # about 400 records, beyond the end of the results file
_fallocate_fn: list = []


def _fallocate():
    """libc's fallocate(2), or None (not Linux, or no libc to load)."""
    if not _fallocate_fn:
        try:
            import ctypes

            fn = ctypes.CDLL(None, use_errno=True).fallocate
            fn.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_longlong, ctypes.c_longlong]
            fn.restype = ctypes.c_int
        except (OSError, AttributeError, ImportError):
            fn = None
        _fallocate_fn.append(fn)
    return _fallocate_fn[0]


def keep_room(fd: int, room: int) -> bool:
    """Keep `room` bytes allocated beyond the end of the open file `fd` without changing its size
    (fallocate with FALLOC_FL_KEEP_SIZE): writes into that room need no free block, so the spend
    ledger, the results and a transcript still take their next lines when an agent has filled
    the disk. Renewed once less than half is left. Best effort: False where it cannot be (not
    Linux, a file system without it, a disk already full)."""
    st = os.fstat(fd)
    if st.st_blocks * 512 - st.st_size >= room // 2:
        return True
    fn = _fallocate()
    return fn is not None and fn(fd, FALLOC_FL_KEEP_SIZE, st.st_size, room) == 0


def release_room(fd: int) -> None:
    """Give back what `keep_room` kept beyond the end of `fd` (a finished transcript). A
    truncation to its own size frees the blocks past the end; a hole punched there would not
    (ext4 punches nothing past a file's size, so every transcript held its 1 MiB)."""
    st = os.fstat(fd)
    if st.st_blocks * 512 > st.st_size:
        os.ftruncate(fd, st.st_size)


def make_room(path: Path, room: int) -> None:
    """Create `path` (refusing a link) if needed and keep `room` bytes allocated beyond its end."""
    try:
        dfd = _parent_fd(Path(path))
        try:
            fd = os.open(Path(path).name, os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW, 0o644, dir_fd=dfd)
        finally:
            os.close(dfd)
        try:
            keep_room(fd, room)
        finally:
            os.close(fd)
    except OSError:
        pass  # best effort: the writes themselves say what is wrong


DISK_FULL = (errno.ENOSPC, errno.EDQUOT)


def disk_full(exc: BaseException) -> bool:
    """Whether `exc` says a disk (or a quota) is full; shutil's copy errors carry it in text."""
    if isinstance(exc, OSError) and exc.errno in DISK_FULL:
        return True
    return isinstance(exc, OSError) and exc.errno is None and "No space left on device" in str(exc)


def disk_full_sentence(path: Path, exc: BaseException) -> str:
    """The one sentence a full disk gets."""
    why = getattr(exc, "strerror", None) or "No space left on device"
    return (f"the disk of the run directory {path} is full ({why}): the run stops before its next cell; every "
            f"finished cell's record and every dollar spent (the spend ledger) are kept; free space, then finish "
            f"the run with --ponybench-resume={path}")


# --------------------------------------------------------------------------- the run's key


def key_dir() -> Path:
    """$PONYBENCH_KEY_DIR, else $XDG_CACHE_HOME/pytest-ponybench/run-keys, else
    ~/.cache/pytest-ponybench/run-keys: outside every run directory and workspace."""
    configured = os.environ.get(KEY_ENV)
    if configured:
        return Path(configured).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "pytest-ponybench" / "run-keys"


def _key_path(run_id: str) -> Path:
    return key_dir() / f"{run_id}.key"


def _valid_run_id(run_id: str) -> bool:
    return len(run_id) == 32 and all(c in "0123456789abcdef" for c in run_id)


def mac(key: bytes, kind: str, owner: str, payload: str) -> str:
    """HMAC-SHA256 of a record: its kind and its owner (the cell folder's name) are part of
    it, so an authentic record copied to another cell or read as another kind fails."""
    message = f"{kind}\0{owner}\0{payload}".encode("utf-8")
    return hmac.new(key, message, hashlib.sha256).hexdigest()


def canonical(data) -> str:
    return json.dumps(data, sort_keys=True, separators=(",", ":"), allow_nan=False)


# --------------------------------------------------------------------------- a cell's records


def records_dir(ws: Path) -> Path:
    """Where the harness keeps the records of the cell folder `ws`: beside it, never in it."""
    ws = Path(ws)
    return ws.parent / RECORDS / ws.name


def write_record(ws: Path, kind: str, data, key: bytes | None) -> None:
    """The harness's record `kind` of the cell folder `ws`, sealed with `key` (unsealed when
    None: a workspace made outside a run, for a reference or a test)."""
    folder = records_dir(ws)
    if not folder.is_dir():
        folder.mkdir(parents=True, exist_ok=True)
    payload = canonical(data)
    seal = mac(key, kind, Path(ws).name, payload) if key is not None else ""
    write_atomic(folder / f"{kind}.json", json.dumps({"kind": kind, "data": data, "mac": seal}, indent=1))


def read_record(ws: Path, kind: str, key: bytes | None):
    """(data, problem): the record `kind` of `ws` and None, or None and why it is not trusted.
    A missing record is (None, None). With a key only a record whose MAC verifies is data."""
    path = records_dir(ws) / f"{kind}.json"
    try:
        if os.path.islink(path):
            return None, f"{path} is a symbolic link"
        if path.stat().st_size > MAX_RECORD:
            return None, f"{path} is larger than a harness record can be"
        raw = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None, None
    except (OSError, ValueError) as exc:
        return None, f"{path} cannot be read as a record ({type(exc).__name__})"
    if not isinstance(raw, dict) or "data" not in raw:
        return None, f"{path} is not a harness record"
    if key is None:
        return raw["data"], None
    try:
        expected = mac(key, kind, Path(ws).name, canonical(raw["data"]))
    except ValueError:
        return None, f"{path} holds a value no harness record has"
    if not isinstance(raw.get("mac"), str) or not hmac.compare_digest(raw["mac"], expected):
        return None, f"{path} does not verify under the run's key (written or changed by something other than the harness)"
    return raw["data"], None


def move_cell(ws: Path, to: Path) -> None:
    """Rename a cell folder and its records folder together (an attempt, a stale copy)."""
    ws, to = Path(ws), Path(to)
    ws.rename(to)
    if records_dir(ws).is_dir():
        records_dir(to).parent.mkdir(parents=True, exist_ok=True)
        records_dir(ws).rename(records_dir(to))


MAX_RECORD = 16 * 1024 * 1024  # bytes: no record the harness writes comes near this


def read_jsonl(path: Path) -> list[dict]:
    """Every JSON object of a line-per-record file; a torn last line (a killed writer) and
    anything that is not an object are skipped."""
    return [record for _, record in _jsonl_lines(path) if isinstance(record, dict)]


def _jsonl_lines(path: Path):
    """(line number, parsed value or None) of each non-empty line of a file.

    Read a line at a time, never whole: a results file of 10,000 cells is 11 MB, and its text
    and its list of lines held at once doubled the controller's peak at the end of the run.
    Lines are numbered as `str.splitlines` of the whole text numbers them (a carriage return
    inside a line starts another), whatever the file holds."""
    try:
        fh = open(path, "rb")
    except OSError:
        return
    number = 0
    with fh:
        for raw in fh:
            for line in raw.decode("utf-8", "replace").splitlines():
                number += 1
                if not line.strip():
                    continue
                try:
                    yield number, json.loads(line)
                except ValueError:
                    yield number, None


def seal_result(record: dict, key: bytes | None) -> dict:
    """A results.jsonl record with its MAC (under the run's key) as the field `mac`."""
    record = {k: v for k, v in record.items() if k != MAC_FIELD}
    if key is not None:
        record[MAC_FIELD] = mac(key, "results", str(record.get("cell")), canonical(record))
    return record


def line_record(line, shared: dict[str, str] | None = None):
    """The CellRecord of one parsed results line, its MAC field left out; RecordError naming
    the field when the line is not a record."""
    from pytest_ponybench.store.record import CellRecord  # see read_results_file

    return CellRecord.from_json({k: v for k, v in line.items() if k != MAC_FIELD}
                                if isinstance(line, dict) else line, shared)


def read_results_file(path: Path, key: bytes | None, warn=None) -> list[dict]:
    """The cell records of a results file, each the JSON form of what `CellRecord.from_json`
    made of its line. A line that is garbage, not a record (`{}`, a field of the wrong type),
    or (with a key) not sealed by it is skipped and `warn` gets one sentence naming the file and
    line; the `mac` field is taken off what is returned."""
    # Imported here: a session without --ponybench imports this module (its names declare the
    # options) and must not load the record and spec modules (tests/test_collect_scope.py).
    from pytest_ponybench.store.record import RecordError

    kept = []
    shared: dict[str, str] = {}  # one copy of each short value that repeats (from_json)
    for number, record in _jsonl_lines(path):
        problem = None
        try:
            made = line_record(record, shared)
        except RecordError as exc:
            problem = str(exc)
        if problem is None and key is not None:
            try:
                body = {k: v for k, v in record.items() if k != MAC_FIELD}
                good = isinstance(record.get(MAC_FIELD), str) and hmac.compare_digest(
                    record[MAC_FIELD], mac(key, "results", record["cell"], canonical(body)))
            except ValueError:
                good = False
            if not good:
                problem = "its MAC does not verify under the run's key (it was not written by the harness)"
        if problem is not None:
            if warn is not None:
                warn(f"{path} line {number} skipped: {problem}")
            continue
        kept.append(made.to_json())  # its keys the dataclass's field names: one copy of each
    return kept


def usd(amount: float) -> str:
    """Dollars as people read them: cents for large amounts, four places for a few cents."""
    return f"${amount:,.2f}" if amount >= 1 else f"${amount:.4f}"


def valid_cost(value) -> float | None:
    """A cost the ledger believes: a finite, non-negative number (not a flag), else None."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    value = float(value)
    return value if math.isfinite(value) and value >= 0 else None


HISTORY_STOP = "gitdir: ponybench-run-no-repository\n"  # RunDir.stop_repository_history: a repository that is not there


class RunDir:
    """One run directory. Create a new one with `RunDir.create`, open a kept one with
    `RunDir.open` (which refuses a folder that is not a run)."""

    def __init__(self, path: Path, key: bytes | None = None):
        self.path = Path(path)
        self.key = key  # the run's HMAC key; None when it could not be found (key_problem says why)
        self.key_problem = "" if key is not None else "no key was loaded for this run"
        self.max_pause = MAX_PAUSE  # the longest pause this run's harness writes (plugin sets it)
        self.refused_lines: list[str] = []  # results.jsonl lines skipped, one sentence each
        self._ledger = (None, 0, 0.0)  # spent(): (the ledger file's identity, bytes read, their total)
        self._ledger_lock = threading.Lock()  # pool threads ask at once

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
            run = cls(candidate.resolve())
            run.stop_repository_history()
            run.make_key()
            return run
        raise RuntimeError(f"could not create a run directory under {base}")

    def stop_repository_history(self) -> None:
        """A `.git` file in the run directory that names no repository: the CLI, looking for
        the repository around a workspace, stops here instead of at the user's own (the
        default runs/ lies in the project) and so puts none of its commit messages in front
        of the model (it shows "Status: (unavailable)" and no commits). git itself passes over
        such a file. A confined agent never sees it: no folder above its workspace is in its
        view. Kept where it is; a link or folder at the name is left alone."""
        try:
            fd = os.open(self.path / ".git", os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
        except FileExistsError:
            return
        try:
            os.write(fd, HISTORY_STOP.encode())
        finally:
            os.close(fd)

    def make_key(self) -> None:
        """A new run id and key: the key in key_dir() (mode 0600, created exclusively), the id
        in the run directory."""
        run_id = secrets.token_hex(16)
        key = secrets.token_bytes(32)
        folder = key_dir()
        folder.mkdir(parents=True, exist_ok=True, mode=0o700)
        if folder.resolve() == self.path or self.path in folder.resolve().parents:
            raise RuntimeError(f"the key folder {folder} lies inside the run directory {self.path}; "
                               f"set {KEY_ENV} to a folder outside it")
        fd = os.open(_key_path(run_id), os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
        try:
            os.write(fd, key.hex().encode())
        finally:
            os.close(fd)
        write_atomic(self.path / RUN_ID, run_id + "\n")
        self.key, self.key_problem = key, ""

    def load_key(self) -> None:
        """The key of a kept run, from key_dir() by the run's id; without it (another machine,
        a cleared cache, an id file changed) nothing of the run can be trusted, and
        `key_problem` says so in one sentence."""
        try:
            run_id = (self.path / RUN_ID).read_text(encoding="utf-8").strip()
        except OSError:
            self.key, self.key_problem = None, (
                f"{self.path} has no {RUN_ID}: it was made before ponybench authenticated its records, "
                f"so none of them can be trusted")
            return
        if not _valid_run_id(run_id):
            self.key, self.key_problem = None, f"{self.path / RUN_ID} does not hold a run id"
            return
        try:
            key = bytes.fromhex(_key_path(run_id).read_text(encoding="ascii").strip())
        except (OSError, ValueError):
            self.key, self.key_problem = None, (
                f"the key of this run ({_key_path(run_id)}) is missing or unreadable, so none of its records "
                f"can be trusted; copy it from the machine that made the run")
            return
        self.key, self.key_problem = key, ""

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
            run.load_key()
            return run
        raise NotARunDir(f"{flag}: {path} is not a ponybench run directory (it has no {OPTIONS}, "
                         f"no {RESULTS} and no cell workspace); give a folder under your runs "
                         f"directory, such as runs/<stamp>")

    def holds_nothing(self) -> bool:
        """Whether no cell left anything here: no record, no workspace, nothing on the spend
        ledger (a judge's proof spends before any cell). A session that selected no cell (a
        typo in a task path or in -k) made such a directory."""
        try:
            ledger = self.spend_path.stat().st_size
        except FileNotFoundError:
            ledger = 0
        return not ledger and not self.read_results() and not any(self.cell_dirs())

    def discard(self) -> None:
        """Remove this run directory and its key: for a run that holds nothing (holds_nothing),
        so an empty folder never stands among the kept runs."""
        import shutil

        try:
            run_id = (self.path / RUN_ID).read_text(encoding="utf-8").strip()
        except OSError:
            run_id = ""
        if _valid_run_id(run_id):
            _key_path(run_id).unlink(missing_ok=True)
        shutil.rmtree(self.path, ignore_errors=True)

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
        """The cell workspaces (folders with a cell identity record beside them), sorted by name."""
        if not self.path.is_dir():
            return
        for entry in sorted(self.path.iterdir()):
            if not entry.name.startswith(HARNESS_PREFIX) and entry.is_dir() and not entry.is_symlink() \
                    and (records_dir(entry) / f"{CELL_IDENTITY}.json").is_file():
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

    def read_results(self, path: Path | None = None) -> list[dict]:
        """The records of results.jsonl (or `path`) that are records and verify under the
        run's key; each line skipped is noted once in `refused_lines`."""
        return read_results_file(path or self.results_path, self.key, self._note_refused)

    def _note_refused(self, line: str) -> None:
        if line not in self.refused_lines:
            self.refused_lines.append(line)

    # ---------------------------------------------------------------- the spend ledger

    def record_spend(self, cell_id: str, cost) -> None:
        """Append a finished cell's cost to the run's ledger. Workers on this machine share
        the run directory, so the budget holds across them; a line is one small O_APPEND
        write, whole or absent. None is no cost (0); a negative, non-finite or non-numeric
        cost is refused (ValueError): no such line ever lowers what the run has spent."""
        if cost is not None and valid_cost(cost) is None:
            raise ValueError(f"the spend ledger takes only a finite, non-negative cost, not {cost!r}")
        append_line(self.spend_path, json.dumps({"cell": str(cell_id), "cost_usd": float(cost or 0.0)}) + "\n",
                    room=LEDGER_ROOM)

    # ---------------------------------------------------------------- the shared 429 pause

    @property
    def pause_path(self) -> Path:
        return self.path / PAUSE_FILE

    def pause(self, seconds: float, cell_id: str) -> None:
        """Hold back every worker's next cell for `seconds` (a rate-limited key slows the run
        instead of burning cells). A pause already in force for longer is kept."""
        until = time.time() + min(seconds, self.max_pause)
        if until > self.paused_until():
            write_atomic(self.pause_path, json.dumps({"until": until, "cell": cell_id}))

    def paused_until(self) -> float:
        """Epoch seconds until which new cells wait; 0 when no pause was written. A pause file
        is anyone's to write: garbage reads as no pause, and no pause is believed beyond the
        longest one this harness writes (`max_pause` from now)."""
        try:
            if self.pause_path.is_symlink() or self.pause_path.stat().st_size > 4096:
                return 0.0
            until = json.loads(self.pause_path.read_text(encoding="utf-8")).get("until")
        except (OSError, ValueError, AttributeError):
            return 0.0
        if isinstance(until, bool) or not isinstance(until, (int, float)) or not math.isfinite(until):
            return 0.0
        return min(float(until), time.time() + self.max_pause)

    def wait_for_pause(self, sleep=time.sleep) -> float:
        """Sleep while a pause is in force (it may be extended meanwhile); the seconds waited,
        never more than `max_pause` in all, whatever the pause file says meanwhile."""
        waited = 0.0
        while waited < self.max_pause and (left := self.paused_until() - time.time()) > 0:
            step = min(left, 5.0, self.max_pause - waited)  # read again: another worker may have extended it
            sleep(step)
            waited += step
        return waited

    def spent(self) -> float:
        """Dollars recorded by every finished cell of this run so far, earlier sessions
        included. The ledger sits in the run directory, where anyone may write: a line that is
        garbage or whose cost is negative, non-finite or not a number counts for nothing.

        Read incrementally: the progress line asks after every cell, and reading the whole
        ledger each time made a run quadratic. Only the lines appended since the last call are
        read; a ledger replaced or shortened (not the harness's doing) is read again whole."""
        with self._ledger_lock:
            try:
                fd = os.open(self.spend_path, os.O_RDONLY | os.O_NOFOLLOW)
            except OSError:
                self._ledger = (None, 0, 0.0)
                return 0.0
            try:
                info = os.fstat(fd)
                identity, offset, total = self._ledger
                if identity != (info.st_dev, info.st_ino) or info.st_size < offset:
                    identity, offset, total = (info.st_dev, info.st_ino), 0, 0.0
                chunk = os.pread(fd, max(info.st_size - offset, 0), offset) if info.st_size > offset else b""
            finally:
                os.close(fd)
            whole = chunk[:chunk.rfind(b"\n") + 1]  # a line still being written is read next time
            entries = []
            for line in whole.decode("utf-8", "replace").splitlines():
                try:
                    entry = json.loads(line) if line.strip() else None
                except ValueError:
                    continue
                if isinstance(entry, dict):
                    entries.append(entry)
            total += ledger_total(entries)
            self._ledger = (identity, offset + len(whole), total)
            return total


def ledger_total(entries, skip=frozenset()) -> float:
    """The sum of the believable costs of ledger entries (those of cells in `skip` left out)."""
    total = 0.0
    for entry in entries:
        if entry.get("cell") in skip:
            continue
        cost = valid_cost(entry.get("cost_usd"))
        total += cost or 0.0
    return total


def max_pause(settings) -> float:
    """The longest 429 pause this run's harness writes (cell.retry_wait of the last attempt,
    never less than a second): no pause file is believed beyond it."""
    return max(settings.retry_wait * 2 ** settings.retries, 1.0)


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
