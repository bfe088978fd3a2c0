"""What changed beside a cell's workspace while its agent ran, without listing the run.

The run directory holds every cell's workspace, so listing it costs in proportion to the run:
a listing before and after each agent made a 10,000-cell run quadratic. Instead, on Linux,
each agent run gets an inotify watch on the run directory (and on the few folders beside the
workspaces that no harness made): the kernel reports which names were created, written,
renamed or had their attributes changed while the agent ran, and only those names are
looked at. The cost of a cell is then the events of its own window (a handful from the
harness and from cells running beside it), whatever the size of the run.

A process lists the run directory once (the first watch of that run), to learn which
folders beside the workspaces were made by something other than the harness (an agent of an
earlier session): a write into one of them is watched too. Where inotify is missing (not
Linux), the user has no inotify instance or watch left, or the kernel's event queue
overflowed, the answer comes from a listing, as before.

What the harness itself writes there (workspace.harness_entry) is never reported.
"""
from __future__ import annotations

import ctypes
import errno
import os
import stat
import struct
import threading
import time
from pathlib import Path

IN_MODIFY = 0x00000002
IN_ATTRIB = 0x00000004
IN_CLOSE_WRITE = 0x00000008
IN_MOVED_FROM = 0x00000040
IN_MOVED_TO = 0x00000080
IN_CREATE = 0x00000100
IN_DELETE = 0x00000200
IN_Q_OVERFLOW = 0x00004000
IN_IGNORED = 0x00008000
IN_ONLYDIR = 0x01000000
IN_DONT_FOLLOW = 0x02000000
IN_ISDIR = 0x40000000
IN_NONBLOCK = 0o4000
IN_CLOEXEC = 0o2000000
MASK = IN_MODIFY | IN_ATTRIB | IN_CLOSE_WRITE | IN_MOVED_FROM | IN_MOVED_TO | IN_CREATE | IN_DELETE
EVENT = struct.Struct("iIII")  # wd, mask, cookie, len (struct inotify_event, then the name)


def _libc():
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.inotify_init1, libc.inotify_add_watch  # noqa: B018  (AttributeError where missing)
        return libc
    except (OSError, AttributeError):
        return None


_LIBC = _libc()
_lock = threading.Lock()
# Per run directory: the names beside the workspaces that are folders no harness made. Filled
# by one listing per process, then kept current by every watch's events.
_foreign_dirs: dict[str, set[str]] = {}


def available() -> bool:
    return _LIBC is not None


def foreign_dirs(run_dir: Path, is_harness) -> set[str]:
    key = str(run_dir)
    with _lock:
        if key not in _foreign_dirs:
            found = set()
            with os.scandir(run_dir) as entries:
                for entry in entries:
                    try:
                        if entry.is_dir(follow_symlinks=False) and not is_harness(entry.name, stat.S_IFDIR):
                            found.add(entry.name)
                    except OSError:
                        continue
            _foreign_dirs[key] = found
        return set(_foreign_dirs[key])


def _note_foreign_dir(run_dir: Path, name: str) -> None:
    with _lock:
        _foreign_dirs.setdefault(str(run_dir), set()).add(name)


class Watch:
    """Started before the agent, `changed()` after it: the names beside the workspace that
    appeared or changed meanwhile (harness entries left out), then closed."""

    def __init__(self, run_dir: Path, is_harness):
        self.run_dir = Path(run_dir)
        self.is_harness = is_harness  # (name, mode) -> bool: written by the harness
        self.started_ns = time.time_ns()
        self.fd = -1
        self.overflowed = False
        self.names: set[str] = set()
        self.watched: dict[int, str] = {}  # watch descriptor -> its name beside ("" for the run dir)
        if _LIBC is None:
            self.before = self._listing()
            return
        fd = _LIBC.inotify_init1(IN_NONBLOCK | IN_CLOEXEC)
        if fd < 0:  # no inotify instance left (fs.inotify.max_user_instances): list instead
            self.before = self._listing()
            return
        self.fd, self.before = fd, None
        if not self._add(""):  # no watch left (fs.inotify.max_user_watches): list instead
            self.close()
            self.before = self._listing()
            return
        for name in foreign_dirs(self.run_dir, is_harness):
            self._add(name)

    def _add(self, name: str) -> bool:
        path = os.fsencode(str(self.run_dir / name) if name else str(self.run_dir))
        wd = _LIBC.inotify_add_watch(self.fd, path, MASK | IN_ONLYDIR | IN_DONT_FOLLOW)
        if wd >= 0:
            self.watched[wd] = name
        return wd >= 0

    def _drain(self) -> None:
        while True:
            try:
                data = os.read(self.fd, 64 * 1024)
            except BlockingIOError:
                return
            except OSError as exc:
                if exc.errno == errno.EINTR:
                    continue
                raise
            offset = 0
            while offset < len(data):
                wd, mask, _cookie, length = EVENT.unpack_from(data, offset)
                raw = data[offset + EVENT.size: offset + EVENT.size + length].split(b"\0", 1)[0]
                offset += EVENT.size + length
                if mask & IN_Q_OVERFLOW:
                    self.overflowed = True
                    continue
                if mask & IN_IGNORED or wd not in self.watched:
                    continue
                top = self.watched[wd]
                if top:  # inside a folder beside the workspaces: that folder changed
                    self.names.add(top)
                    continue
                name = os.fsdecode(raw)
                mode = stat.S_IFDIR if mask & IN_ISDIR else stat.S_IFREG
                if not name or self.is_harness(name, mode):
                    continue
                self.names.add(name)
                if mask & IN_ISDIR and mask & (IN_CREATE | IN_MOVED_TO):
                    _note_foreign_dir(self.run_dir, name)
                    self._add(name)  # what is written into it next is seen too

    def changed(self) -> list[str]:
        """Names beside the workspace that appeared or changed since the watch started and
        are still there; the watch is closed."""
        try:
            if self.fd < 0:
                after = self._listing()
                return sorted(name for name, info in after.items() if self.before.get(name) != info)
            self._drain()
            if self.overflowed:  # events were lost: whatever changed since the start, from a listing
                return sorted(name for name, info in self._listing().items() if info[3] >= self.started_ns)
            present = []
            for name in self.names:
                try:
                    os.lstat(self.run_dir / name)
                except OSError:
                    continue  # made and removed again while the agent ran: nothing is left
                present.append(name)
            return sorted(present)
        finally:
            self.close()

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

    def _listing(self) -> dict[str, tuple]:
        """The run directory's own entries that no harness wrote: {name: (mode, size, mtime, ctime)}."""
        seen = {}
        with os.scandir(self.run_dir) as entries:
            for entry in entries:
                try:
                    info = entry.stat(follow_symlinks=False)
                except OSError:
                    continue
                if not self.is_harness(entry.name, info.st_mode):
                    seen[entry.name] = (info.st_mode, info.st_size, info.st_mtime_ns, info.st_ctime_ns)
        return seen
