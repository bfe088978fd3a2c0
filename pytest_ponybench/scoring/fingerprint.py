"""What a verdict depends on, as keys: one mechanism for the proof cache (instruments/gate.py:
a reference proven once is not proven again) and for a cell's verdicts (cell/lifecycle.py: a
rescore or a resume judges again only a cell whose key changed).

A key is a hash of the parts a verdict is decided by:

- the harness (`harness_fingerprint`): the code of the checks' path (`HARNESS_SOURCES`), the
  Python, and the versions of the libraries that decide a verdict (`DECIDING_LIBRARIES`,
  pinned in pyproject.toml too: the same workspace must get the same verdict on every machine,
  and where a version differs anyway, nothing judged under another is reused);
- the checks (`check_digest`): every part of a task spec that judging a workspace reads;
- the workspace (`workspace_digest`): every entry's path, kind, mode and content.
"""
from __future__ import annotations

import functools
import hashlib
import importlib.metadata
import json
import os
import platform
import stat
import sys
from pathlib import Path

from pytest_ponybench.specs.spec import TaskSpec
from pytest_ponybench.store import tree

# The harness code a verdict depends on: a change to any of them proves and judges everything again.
HARNESS_SOURCES = ("scoring/checks.py", "scoring/checklib.py", "scoring/check_state.py", "scoring/check_clock.py",
                   "scoring/check_boundary.py", "scoring/remote.py", "scoring/host.py", "scoring/inputs.py", "scoring/batteries.py",
                   "scoring/regressions.py", "processes/procs.py", "processes/forkserver.py",
                   "processes/supervisor.py", "cell/workspace.py", "instruments/gate.py", "specs/spec.py",
                   "instruments/mutation.py")  # paths under pytest_ponybench/
# Libraries whose version can turn a verdict: Hypothesis draws the differential checks' inputs
# (a red-team case of sql_lookup failed under 6.170.27 and passed under 6.155.2).
DECIDING_LIBRARIES = ("hypothesis",)


@functools.cache
def _sources_digest() -> str:
    here = Path(__file__).resolve().parents[1]  # pytest_ponybench/
    digest = hashlib.sha256()
    for name in HARNESS_SOURCES:
        digest.update(name.encode() + b"\0" + (here / name).read_bytes())
    return digest.hexdigest()


@functools.cache
def library_versions() -> dict[str, str]:
    """The installed version of each deciding library, and of the SQLite the checks' sqlite3
    module is built on (a machine's own library, which the Python version does not name)."""
    import sqlite3

    versions = {"sqlite": sqlite3.sqlite_version}
    for name in DECIDING_LIBRARIES:
        try:
            versions[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            versions[name] = "absent"
    return versions


def harness_fingerprint(cli_version: str = "") -> str:
    digest = hashlib.sha256(_sources_digest().encode())
    digest.update(json.dumps([sys.version, platform.release(), cli_version, library_versions()],
                             sort_keys=True).encode())
    return digest.hexdigest()


def proof_key(harness: str, *parts) -> str:
    return hashlib.sha256(json.dumps([harness, *parts], default=str).encode()).hexdigest()[:32]


def fixture_fingerprint(task: TaskSpec) -> list:
    """What of a fixture directory a proof or a verdict depends on: every file's path, size
    and modification time (its content is read only when it changes)."""
    if task.fixture is None:
        return []
    entries = []
    for root, dirs, files in os.walk(task.fixture):
        dirs.sort()
        for name in sorted(files):
            path = os.path.join(root, name)
            try:
                st = os.stat(path)
            except OSError:
                continue
            entries.append([os.path.relpath(path, task.fixture), st.st_size, st.st_mtime_ns])
    return entries


def fixture_digest(task: TaskSpec) -> str:
    """A fixture directory's files by path and content: the same on every host, where its
    fingerprint's modification times are not (a remote worker's unpacked copy keeps whole
    seconds). Read again only when the fingerprint changes."""
    if task.fixture is None:
        return ""
    return _fixture_digest(str(task.fixture), json.dumps(fixture_fingerprint(task)))


@functools.lru_cache(maxsize=64)
def _fixture_digest(fixture: str, stamp: str) -> str:
    digest = hashlib.sha256()
    for path, _size, _mtime in json.loads(stamp):
        digest.update(path.encode(errors="surrogateescape") + b"\0")
        try:
            digest.update(Path(fixture, path).read_bytes())
        except OSError as exc:
            digest.update(f"unreadable {exc.errno}".encode())
        digest.update(b"\n")
    return digest.hexdigest()


def check_digest(task: TaskSpec) -> list:
    """The parts of a task spec that judging a workspace reads (lifecycle.judge): the checks
    and their limits, the files the ticket forbids with what was seeded, the good reference
    (`load_reference`) and the fixture. Not the prompt: a rescore of a task whose ticket
    changed judges the kept workspaces as they are."""
    return [task.checks, task.file, task.check_timeout, task.checks_in_process, list(task.forbidden),
            task.seed, task.refs.good if task.refs is not None else None, fixture_digest(task)]


def workspace_digest(ws: Path, skip: tuple[str, ...] = ()) -> str:
    """Every entry under `ws` but the top-level names in `skip`, links never followed: its
    path, kind, mode and size (a file's), and a file's content or a link's target. Any change a check
    could see changes it."""
    os.scandir(ws).close()  # a workspace that is gone raises, as its digest would be nobody's
    digest = hashlib.sha256()
    for name, entry in tree.walk(ws, lambda rel, _: rel in skip):
        try:
            st = entry.stat(follow_symlinks=False)
        except OSError as exc:
            digest.update(f"{name}\0gone {exc.errno}\n".encode(errors="surrogateescape"))
            continue
        # A folder's own size is the filesystem's bookkeeping (it differs between a folder
        # and its copy, e.g. a remote workspace brought home), not anything a check sees.
        size = 0 if stat.S_ISDIR(st.st_mode) else st.st_size
        # The read and execute bits decide what a check can do with a file; group and other
        # write and the set-id and sticky bits do not, and an extraction clears them
        # (tarfile's data filter, bringing a remote workspace home).
        mode = stat.S_IMODE(st.st_mode) & ~0o7022
        digest.update(f"{name}\0{stat.S_IFMT(st.st_mode)}\0{mode}\0{size}\0".encode(errors="surrogateescape"))
        if stat.S_ISLNK(st.st_mode):
            digest.update(os.readlink(entry.path).encode(errors="surrogateescape"))
        elif stat.S_ISREG(st.st_mode):
            try:  # never through a link or into a FIFO put in its place since the stat
                fd = os.open(entry.path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
            except OSError as exc:
                digest.update(f"unreadable {exc.errno}".encode())
            else:
                with os.fdopen(fd, "rb") as fh:
                    for block in iter(lambda: fh.read(1 << 20), b""):
                        digest.update(block)
        digest.update(b"\n")
    return digest.hexdigest()


def verdict_key(task: TaskSpec, ws: Path, skip: tuple[str, ...] = ()) -> str:
    """The key of the verdicts of workspace `ws` (but the top-level names in `skip`, which no
    check sees) under `task`'s checks, with this harness and these library versions: equal
    keys, equal verdicts."""
    return proof_key(harness_fingerprint(), "verdict", check_digest(task), workspace_digest(ws, skip))
