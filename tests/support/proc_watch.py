"""Which processes are still alive: read from /proc, zombies counted as dead.

A killed process stays a zombie until its parent (or, for an orphan, PID 1) reaps it, and
PID 1 in a container may take a while. A zombie runs no code and holds no resources that
matter here, so a "no survivor" assertion must not wait for the reaper.
"""
from __future__ import annotations

import os
import signal
import time
from pathlib import Path


def _stat(pid: int) -> tuple[str, int] | None:
    """(state letter, process group) of a pid, or None when it does not exist."""
    try:
        raw = Path(f"/proc/{pid}/stat").read_bytes()
    except OSError:
        return None
    fields = raw[raw.rfind(b")") + 2:].split()
    return fields[0].decode(), int(fields[2])


def alive(pid: int) -> bool:
    stat = _stat(pid)
    return stat is not None and stat[0] != "Z"


def group_members(pgid: int) -> list[int]:
    """Live (non-zombie) processes of a process group."""
    members = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            stat = _stat(int(entry))
            if stat is not None and stat[1] == pgid and stat[0] != "Z":
                members.append(int(entry))
    return members


def working_in(directory: Path) -> list[int]:
    """Live processes whose working directory is `directory` or below it."""
    root = os.path.realpath(directory)
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            cwd = os.readlink(f"/proc/{entry}/cwd")
        except OSError:
            continue
        if (cwd == root or cwd.startswith(root + os.sep)) and alive(int(entry)):
            found.append(int(entry))
    return found


def wait_until_dead(pids, timeout: float = 5.0) -> list[int]:
    """Wait (bounded) for every pid to be gone or a zombie; return those still alive."""
    deadline = time.monotonic() + timeout
    left = [p for p in pids if alive(p)]
    while left and time.monotonic() < deadline:
        time.sleep(0.05)
        left = [p for p in left if alive(p)]
    return left


def kill(pids) -> None:
    """Clean up after a failed assertion: these are processes this test itself caused."""
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass


def marked(marker: str) -> list[int]:
    """Live processes whose command line holds `marker`. A process in a check's own PID
    namespace has another pid there than here: a marker in its argv finds it from outside."""
    found = []
    needle = marker.encode()
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            cmdline = Path(f"/proc/{entry}/cmdline").read_bytes()
        except OSError:
            continue
        if needle in cmdline and alive(int(entry)):
            found.append(int(entry))
    return found


class Sightings:
    """Watch /proc in a thread for processes carrying `marker` while a block runs: the pids
    seen, so that a later "none left" assertion is known to be about processes that existed."""

    def __init__(self, marker: str):
        import threading
        self.marker = marker
        self.seen: set[int] = set()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, daemon=True)

    def _watch(self) -> None:
        while not self._stop.is_set():
            self.seen.update(marked(self.marker))
            self._stop.wait(0.1)

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()
        return False
