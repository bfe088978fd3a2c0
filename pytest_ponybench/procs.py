"""Children that cannot outlive their cell.

Every program the harness starts (the agent, a check) runs under a small supervisor, this
module run as `python -m pytest_ponybench.procs -- ARGV...`, which:

- leads a new session, so its process group holds what the program forks;
- is a child subreaper (Linux `PR_SET_CHILD_SUBREAPER`), so a descendant that escapes the
  group with `setsid` and loses its parent is re-parented to the supervisor, not to init;
- gets SIGTERM when the harness process dies (`PR_SET_PDEATHSIG`), even by SIGKILL, so a
  killed pytest worker or controller cannot leave an agent running and spending;
- on SIGTERM, or when the program exits, kills every descendant it has, then exits.

The harness waits on the supervisor; at a deadline, a Ctrl-C or an exception it sends
SIGTERM (the supervisor sweeps its descendants), then SIGKILLs the whole group as a net.
"""
from __future__ import annotations

import ctypes
import os
import signal
import subprocess
import sys
import threading
import time

PR_SET_PDEATHSIG = 1
PR_SET_CHILD_SUBREAPER = 36


def python_module(module: str) -> list[str]:
    """argv for `python -m module` without the working directory on sys.path. Programs run
    in the workspace, where a file the agent wrote (json.py, http.py, subprocess.py) would
    otherwise shadow the standard library the harness's own module imports."""
    boot = ("import sys\n"
            "if sys.path and sys.path[0] == '':\n    del sys.path[0]\n"
            f"import runpy\nrunpy.run_module({module!r}, run_name='__main__', alter_sys=True)\n")
    return [sys.executable, "-c", boot]


SUPERVISOR = python_module("pytest_ponybench.procs")
PACKAGE_PARENT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
GRACE = 5.0  # seconds the supervisor gets to sweep its descendants before the group is SIGKILLed

_live: set[int] = set()
_lock = threading.Lock()


def _limits(max_file_size: int):
    """A preexec function: no file larger than `max_file_size` (a flood cannot fill the disk),
    and no core dumps."""
    def apply() -> None:
        import resource

        resource.setrlimit(resource.RLIMIT_FSIZE, (max_file_size, max_file_size))
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    return apply


def start(argv: list[str], env: dict[str, str] | None = None, max_file_size: int | None = None,
          **popen_kwargs) -> subprocess.Popen:
    """Start `argv` under a supervisor in a new session. `env` is the program's environment;
    `max_file_size` caps every file it (and all it starts) writes, its output files included."""
    if max_file_size is not None:
        popen_kwargs["preexec_fn"] = _limits(max_file_size)
    env = dict(os.environ if env is None else env)
    # The supervisor must find this package even where the environment's PYTHONPATH lacks it.
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [PACKAGE_PARENT, env.get("PYTHONPATH")]))
    argv = SUPERVISOR + ["--parent", str(os.getpid()), "--"] + [str(a) for a in argv]
    proc = subprocess.Popen(argv, start_new_session=True, env=env, **popen_kwargs)
    with _lock:
        _live.add(proc.pid)
    return proc


def output_tail(path, limit: int) -> str:
    """The last `limit` bytes of a child's output file, as text ("" when unreadable)."""
    try:
        with open(path, "rb") as fh:
            fh.seek(0, os.SEEK_END)
            fh.seek(max(0, fh.tell() - limit))
            return fh.read().decode("utf-8", "replace").strip()
    except OSError:
        return ""


def kill_group(pgid: int) -> None:
    try:
        os.killpg(pgid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def kill_tree(proc: subprocess.Popen) -> None:
    """Have the supervisor sweep its descendants, then kill its group, then reap it."""
    if proc.poll() is None:
        try:
            proc.send_signal(signal.SIGTERM)
            proc.wait(timeout=GRACE)
        except (ProcessLookupError, subprocess.TimeoutExpired):
            pass
    kill_group(proc.pid)  # with start_new_session the group id is the supervisor's pid
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:  # pragma: no cover - SIGKILL is not ignorable
        pass
    with _lock:
        _live.discard(proc.pid)


def wait_or_kill(proc: subprocess.Popen, timeout: float) -> bool:
    """Wait for the program; at the deadline kill its tree. True when it timed out.

    The tree is killed on every way out, a normal exit, a Ctrl-C and an exception included:
    a child the program left running (a server it forked) must not outlive it.
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
    """Kill every tree this process started and has not reaped (on SIGTERM or exit)."""
    with _lock:
        pids = list(_live)
        _live.clear()
    for pid in pids:
        try:
            os.kill(pid, signal.SIGTERM)
        except ProcessLookupError:
            continue
    for pid in pids:
        kill_group(pid)


# --- the supervisor ------------------------------------------------------------------------

def descendants(root: int) -> list[int]:
    """Every live process below `root`, read from /proc."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as fh:
                stat = fh.read().decode("ascii", "replace")
        except OSError:
            continue
        # The command name is in parentheses and may hold spaces: the ppid follows the last ')'.
        fields = stat[stat.rfind(")") + 2:].split()
        if len(fields) > 1:
            children.setdefault(int(fields[1]), []).append(int(entry))
    found, todo = [], [root]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


def _reap() -> None:
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


def sweep() -> None:
    """Kill all descendants of this process until none is left (they may fork meanwhile)."""
    me = os.getpid()
    for _ in range(50):
        found = descendants(me)
        if not found:
            return
        for pid in found:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        time.sleep(0.02)
        _reap()


def _supervise(parent: int, argv: list[str]) -> int:
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
    libc.prctl(PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
    if os.getppid() != parent:  # the harness died before the death signal was armed
        return 137

    def stop(signum, frame):
        sweep()
        os._exit(128 + signum)

    for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(signum, stop)
    try:
        child = subprocess.Popen(argv)
    except OSError as exc:
        print(f"ponybench: cannot start {argv[0]}: {exc.strerror}", file=sys.stderr)
        return 127
    code = child.wait()
    sweep()  # what the program left behind: forked servers, setsid escapees
    return code if code >= 0 else 128 - code


if __name__ == "__main__":
    args = sys.argv[1:]
    split = args.index("--")
    parent_pid = int(args[args.index("--parent") + 1])
    os._exit(_supervise(parent_pid, args[split + 1:]))
