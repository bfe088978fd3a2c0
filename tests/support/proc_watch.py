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
