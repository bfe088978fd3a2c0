"""Children in their own session, and killing whole process trees.

Every process the harness starts (the agent, a check) leads a new session, so its process
group holds everything it forks. Killing the group kills the tree; a `finally` makes sure a
timeout, a Ctrl-C or an exception never leaves one behind. A registry of live groups lets
the plugin kill stragglers when a worker is told to stop (SIGTERM) or exits.
"""
from __future__ import annotations

import os
import signal
import subprocess
import threading
import time

_live: set[int] = set()
_lock = threading.Lock()


def start(argv: list[str], **popen_kwargs) -> subprocess.Popen:
    proc = subprocess.Popen(argv, start_new_session=True, **popen_kwargs)
    with _lock:
        _live.add(proc.pid)
    return proc


def kill_group(pgid: int) -> None:
    try:
        os.killpg(pgid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def kill_tree(proc: subprocess.Popen) -> None:
    """Kill the process and everything in its group, then reap it."""
    kill_group(proc.pid)  # with start_new_session the group id is the leader's pid
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:  # pragma: no cover - SIGKILL is not ignorable
        pass
    with _lock:
        _live.discard(proc.pid)


def wait_or_kill(proc: subprocess.Popen, timeout: float) -> bool:
    """Wait for the process; at the deadline kill its tree. True when it timed out.

    The group is killed on every way out, normal exit included: a child the process left
    running (a server it forked) must not outlive it.
    """
    timed_out = False
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        timed_out = True
    finally:
        kill_tree(proc)
    return timed_out


def _live_member(pgid: int) -> bool | None:
    """Whether /proc lists a member of the group that is not a zombie; None without /proc."""
    try:
        entries = os.listdir("/proc")
    except OSError:  # pragma: no cover - not Linux
        return None
    for entry in entries:
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as fh:
                stat = fh.read()
        except OSError:
            continue
        fields = stat[stat.rfind(b")") + 2:].split()  # state, ppid, pgrp, ...
        if len(fields) > 2 and fields[2] == str(pgid).encode() and fields[0] != b"Z":
            return True
    return False


def group_alive(pgid: int) -> bool:
    """Whether any process of the group still runs. A killed process stays a zombie until it
    is reaped (an orphan by PID 1, which in a container may take seconds or never happen);
    signalling a zombie succeeds, so only /proc can tell a dead group from a live one."""
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # pragma: no cover - exists but not ours
        return True
    live = _live_member(pgid)
    return True if live is None else live


def wait_group_gone(pgid: int, timeout: float = 5.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not group_alive(pgid):
            return True
        time.sleep(0.05)
    return not group_alive(pgid)


def kill_all_live() -> None:
    """Kill every group this process started and has not reaped (on SIGTERM or exit)."""
    with _lock:
        pids = list(_live)
        _live.clear()
    for pid in pids:
        kill_group(pid)
