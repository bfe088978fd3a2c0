"""Children that cannot outlive their cell, started cheaply: the harness's side.

Every program the harness starts (the agent, a check) runs under a supervisor that:

- leads a new session, so its process group holds what the program forks;
- is a child subreaper (Linux `PR_SET_CHILD_SUBREAPER`), so a descendant that escapes the
  group with `setsid` and loses its parent is re-parented to the supervisor, not to init;
- on SIGTERM, or when the program exits, kills every descendant it has, then exits.

Three modules do it. This one is what the rest of the package calls: `start` (a program),
`start_calls` (a cell's checks under one supervisor), the `Child` the harness waits on, the
kills (`kill_tree`, `wait_or_kill`, `kill_all_live`), and the client of this process's fork
server (`_Server`, `_spawn`, `stop_server`). `forkserver.py` is that server: one warm
interpreter per harness process that forks a supervisor for each request. `supervisor.py` is
what runs in a supervisor: the program or the calls, the sandbox of a call, the sweep.

The harness waits on a pipe only the supervisor holds, with the deadline as the timeout of
`select` (no polling): the supervisor writes the program's exit code to it after its sweep,
and, for calls, one JSON line per call as each one ends. At a deadline, a Ctrl-C or an
exception the harness sends SIGTERM (the supervisor sweeps its descendants), then SIGKILLs
the whole group as a net.

Imports: neither `forkserver` nor `supervisor` (the server is named only as a module in its
argv); they import this module, for the constants both sides share (GRACE, KILLED,
MESSAGE_LIMIT, WARM_MODULES) and the tree sweep (`descendants`, `sweep`, `kill_group`).

One module on purpose (about 500 lines): the client of the fork server, the `Child` it hands
back and the kills are one protocol with the server and the supervisor; split further, each
part would only read with the others.
"""
from __future__ import annotations

import json
import os
import select
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Set as AbstractSet


def environ_snapshot() -> dict[str, str]:
    """A copy of this process's environment that is safe in a thread: copying `os.environ`
    looks each key up after listing them, and pytest's main thread sets and deletes
    PYTEST_CURRENT_TEST around every test phase (a KeyError when it lands in between)."""
    while True:
        try:
            return dict(os.environ)
        except KeyError:
            continue


def python_module(module: str) -> list[str]:
    """argv for `python -m module` without the working directory on sys.path. Programs run
    in the workspace, where a file the agent wrote (json.py, http.py, subprocess.py) would
    otherwise shadow the standard library the harness's own module imports."""
    boot = ("import sys\n"
            "if sys.path and sys.path[0] == '':\n    del sys.path[0]\n"
            f"import runpy\nrunpy.run_module({module!r}, run_name='__main__', alter_sys=True)\n")
    return [sys.executable, "-c", boot]


PACKAGE_PARENT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # the folder holding pytest_ponybench/
GRACE = 5.0  # seconds the supervisor gets to sweep its descendants before the group is SIGKILLed
KILLED = 137  # the exit code reported when a supervisor died without saying its program's
# Modules the server imports once, so that a forked check finds them warm: the helper API,
# everything a check's namespace holds, and their standard-library imports, loaded before an
# agent's json.py could shadow them. A module missing here is imported anew in every check.
# The root names `checklib` and `graders` are what check code imports (task files, the checks
# generated for plugin evals): warm too, since a check's untrusted user may not be able to read
# the checkout to import them (a clone in a 0700 folder).
WARM_MODULES = ("pytest_ponybench.scoring.check_state", "pytest_ponybench.scoring.check_clock",
                "pytest_ponybench.scoring.check_boundary", "pytest_ponybench.checklib", "pytest_ponybench.graders",
                "pytest_ponybench.scoring.checks", "pytest_ponybench.scoring.regressions")
MESSAGE_LIMIT = 4 * 1024 * 1024  # bytes of one request (argv, environment, check code)
# The fork server's module, run with `--serve` (named, not imported: the server imports us).
SERVER_MODULE = "pytest_ponybench.processes.forkserver"

_live: set["Child"] = set()
_lock = threading.Lock()


# --- the harness side ----------------------------------------------------------------------

class Child:
    """A program started under a supervisor. `pid` is the supervisor's: its session and
    process group id. Waiting reads the supervisor's status pipe; nothing polls.

    Safe across threads: the thread running the cell waits, while a signal handler or another
    thread may signal it (`send_signal`, `alive`), which goes through a pidfd and never
    touches the status pipe."""

    def __init__(self, pid: int, status_fd: int, stdout=None):
        self.pid = pid
        self.returncode: int | None = None
        self.results: list[dict] = []  # start_calls: what the supervisor said of each call that ended
        self.stdout = stdout
        self._status = status_fd
        self._said = b""  # the status pipe's bytes so far
        self._waiting = threading.Lock()  # one reader of the status pipe at a time
        try:  # a handle on this very process: a signal through it never hits a reused pid
            self._pidfd: int | None = os.pidfd_open(pid)
        except (OSError, AttributeError):  # already gone, or no pidfd (old kernel)
            self._pidfd = None

    def wait(self, timeout: float | None = None) -> int:
        with self._waiting:
            if self.returncode is None:
                self._read_status(timeout)
        assert self.returncode is not None  # _read_status sets it, or raises
        return self.returncode

    def _read_status(self, timeout: float | None) -> None:
        """Read the status pipe to its end (the supervisor's exit), within `timeout`: a
        supervisor of calls writes a line as each call ends, long before it exits."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            remaining = None if deadline is None else max(0.0, deadline - time.monotonic())
            if not select.select([self._status], [], [], remaining)[0]:
                assert timeout is not None  # without one, select returns only when the pipe is ready
                raise subprocess.TimeoutExpired(f"supervisor {self.pid}", timeout)
            chunk = os.read(self._status, 65536)
            if not chunk:
                break
            self._said += chunk
        os.close(self._status)
        lines = self._said.decode("utf-8", "replace").splitlines()
        for line in lines:
            if line.startswith("{"):
                try:
                    self.results.append(json.loads(line))
                except ValueError:  # pragma: no cover - the supervisor writes whole lines
                    pass
        # The first code: a SIGTERM during the final sweep may add its own after it.
        codes = [line for line in lines if line.lstrip("-").isdigit()]
        self.returncode = int(codes[0]) if codes else KILLED  # none: killed before it could say
        with _lock:  # its tree is gone: swept by the supervisor, or by the server after it
            _live.discard(self)

    @property
    def limits(self) -> dict | None:
        """A program started with `limits`: {"memory": bool, "pids": bool (which limit its group
        met), "memory_bytes", "pids_max", "cgroup": "v1"|"v2", "memory_peak_bytes": the most
        its processes used at once (None if unknown)}, or {"error": why no group
        could be made}; None when it ran without a group (or was killed before saying)."""
        said = [r["limits"] for r in self.results if isinstance(r.get("limits"), dict)]
        return said[0] if said else None

    def poll(self) -> int | None:
        """The exit code, or None while it runs (or while another thread is waiting on it)."""
        if not self._waiting.acquire(blocking=False):
            return self.returncode
        try:
            if self.returncode is None:
                self._read_status(0)
        except subprocess.TimeoutExpired:
            pass
        finally:
            self._waiting.release()
        return self.returncode

    def alive(self) -> bool:
        """Whether the supervisor has not exited. While it has not, it is not reaped, so its
        pid is still its group's id and signalling the group is safe."""
        if self._pidfd is None:
            return self.returncode is None
        try:
            return not select.select([self._pidfd], [], [], 0)[0]
        except (OSError, ValueError):  # closed meanwhile: gone
            return False

    def send_signal(self, signum: int) -> None:
        try:
            if self._pidfd is not None:
                signal.pidfd_send_signal(self._pidfd, signum)
            elif self.returncode is None:
                os.kill(self.pid, signum)
        except (ProcessLookupError, PermissionError, OSError):
            pass

    def __del__(self):
        for fd in (self._pidfd, None if self.returncode is not None else self._status):
            if fd is not None:
                try:
                    os.close(fd)
                except OSError:
                    pass


class _Server:
    """This process's fork server and the socket to it."""

    def __init__(self):
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        # One request is one datagram, so the send buffer bounds its size: the default (about
        # 200 kB) is less than a confined agent's argv on a machine with many entries in /tmp.
        for option in (getattr(socket, "SO_SNDBUFFORCE", 32), socket.SO_SNDBUF):
            try:
                ours.setsockopt(socket.SOL_SOCKET, option, MESSAGE_LIMIT)
                break
            except OSError:  # not root: SO_SNDBUF, capped by net.core.wmem_max
                continue
        env = environ_snapshot()
        # The server must find this package even where the environment's PYTHONPATH lacks it.
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [PACKAGE_PARENT, env.get("PYTHONPATH")]))
        env["PYTHONHASHSEED"] = "0"  # forked checks inherit the server's hashing: reproducible
        env["PYTHONDONTWRITEBYTECODE"] = "1"  # no __pycache__ left in a kept workspace
        # Its own session: a Ctrl-C at the terminal reaches the harness, which decides.
        self.proc = subprocess.Popen(python_module(SERVER_MODULE) + ["--serve", str(theirs.fileno())],
                                     pass_fds=[theirs.fileno()], start_new_session=True, env=env,
                                     stdin=subprocess.DEVNULL)
        theirs.close()
        self.sock = ours
        self.owner = os.getpid()
        self.lock = threading.Lock()

    def request(self, message: dict, fds: list[int]) -> dict:
        data = json.dumps(message).encode()
        with self.lock:
            socket.send_fds(self.sock, [data], fds)
            reply = self.sock.recv(65536)
        if not reply:
            raise ConnectionError("the ponybench fork server exited")
        return json.loads(reply)

    def close(self) -> None:
        self.sock.close()  # the server reads end-of-file, stops its trees and exits
        try:
            self.proc.wait(timeout=GRACE + 1)
        except subprocess.TimeoutExpired:  # pragma: no cover - a wedged server
            self.proc.kill()
            self.proc.wait()


_server: _Server | None = None
_server_lock = threading.Lock()


def _server_for_this_process(fresh: bool = False) -> _Server:
    global _server
    with _server_lock:
        if fresh or _server is None or _server.owner != os.getpid() or _server.proc.poll() is not None:
            _server = _Server()
        return _server


def stop_server() -> None:
    """Stop this process's fork server (it also stops by itself when this process dies)."""
    global _server
    with _server_lock:
        server, _server = _server, None
    if server is not None and server.owner == os.getpid():
        server.close()


def _fd_of(stream, default: int, opened: list) -> int:
    if stream is None:
        return default
    if stream == subprocess.DEVNULL:
        fd = os.open(os.devnull, os.O_RDWR)
        opened.append(fd)
        return fd
    return stream if isinstance(stream, int) else stream.fileno()


def _spawn(message: dict, stdin=None, stdout=None, stderr=None, text: bool = False) -> Child:
    """Hand `message` and the child's standard streams to the fork server; a `Child`."""
    opened: list[int] = []
    reader = None
    try:
        in_fd = _fd_of(stdin, 0, opened)
        if stdout == subprocess.PIPE:
            read_end, out_fd = os.pipe()
            opened.append(out_fd)
            reader = open(read_end, "r" if text else "rb")
        else:
            out_fd = _fd_of(stdout, 1, opened)
        err_fd = out_fd if stderr == subprocess.STDOUT else _fd_of(stderr, 2, opened)
        status_read, status_write = os.pipe()
        opened.append(status_write)  # only the supervisor keeps it open: its exit is our EOF
        fds = [in_fd, out_fd, err_fd, status_write]
        try:
            reply = _server_for_this_process().request(message, fds)
        except (OSError, ConnectionError):  # the server died (killed by someone): once more
            reply = _server_for_this_process(fresh=True).request(message, fds)
    except BaseException:
        if reader is not None:
            reader.close()
        raise
    finally:
        for fd in opened:
            os.close(fd)
    if "error" in reply:
        os.close(status_read)
        raise OSError(reply["error"])
    child = Child(reply["pid"], status_read, reader)
    with _lock:
        _live.add(child)
    return child


def start(argv: list[str], env: dict[str, str] | None = None, max_file_size: int | None = None,
          cwd=None, stdin=None, stdout=None, stderr=None, text: bool = False, pid_namespace: bool = False,
          limits: dict | None = None) -> Child:
    """Start `argv` under a supervisor in a new session. `env` is the program's environment
    (default: this process's); `max_file_size` caps every file it (and all it starts)
    writes, its output files included. The streams take what `subprocess.Popen` takes:
    None (inherit), DEVNULL, a file or fd, PIPE (stdout only) and STDOUT (stderr only).

    `pid_namespace`: where the sandbox has namespaces (sandbox.support()), the program runs
    in a PID namespace of its own under a tiny init, so that when it ends (or the supervisor
    is stopped, or dies) everything it started dies with the namespace, a process that keeps
    forking and calling setsid included. Elsewhere it runs as without.

    `limits` ({"memory": bytes, "pids": processes}): where the machine has cgroups
    (sandbox.support()), the program and all it starts run in a cgroup of their own with those
    limits; when it ends (or is stopped) everything still in the group is killed and the group
    removed. The supervisor says what the group met on the status pipe, read as
    `Child.limits`; elsewhere the program runs without, and `Child.limits` is None."""
    message = {"op": "exec", "argv": [str(a) for a in argv], "env": environ_snapshot() if env is None else dict(env),
               "cwd": str(os.getcwd() if cwd is None else cwd), "max_file_size": max_file_size,
               "pid_namespace": bool(pid_namespace), "limits": dict(limits) if limits else None}
    return _spawn(message, stdin, stdout, stderr, text)


def start_calls(calls: list[dict], env: dict[str, str] | None = None, max_file_size: int | None = None,
                stdin=None) -> Child:
    """Run several calls one after the other under one supervisor, each `function(*args)` in
    a process of its own, forked from the supervisor with the fork server's warm modules (no
    interpreter starts), in `cwd`, with environment `env` (default: this process's) and
    `max_file_size`. Each call is a dict:

    - `function`: "module:name", a module of WARM_MODULES; `args`: JSON-safe; `cwd`;
    - `timeout`: seconds; at the deadline the supervisor kills the call's whole tree and
      goes on with the next call (what the call left running dies when it ends, too);
    - `output`: a file for the call's stdout and stderr (default: the supervisor's, /dev/null);
    - `result`: a file the function writes (JSON), reported back; `tail`: how many bytes of
      the end of `output` to report back.

    As each call ends, `Child.results` gets {"code", "timed_out", "result", "tail"}: the
    exit code (128 + N for a death by signal N), whether its deadline killed it, the JSON it
    left in `result` (None when there is none, or it is not JSON) and its output's tail.
    Calls after one the harness's own deadline cut short never report."""
    message = {"op": "calls", "calls": calls, "env": environ_snapshot() if env is None else dict(env),
               "max_file_size": max_file_size}
    return _spawn(message, stdin, subprocess.DEVNULL, subprocess.DEVNULL)


def output_tail(path, limit: int) -> str:
    """The last `limit` bytes of a child's output file, as text ("" when unreadable, and when
    the name is a link: never followed, so a link planted there cannot make the harness quote
    the file it points to)."""
    try:
        with os.fdopen(os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK), "rb") as fh:
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


def kill_tree(proc: Child) -> None:
    """Have the supervisor sweep its descendants, then kill its group, then wait for it."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=GRACE)
        except subprocess.TimeoutExpired:
            if proc.alive():  # not exited, so not reaped: its pid is still its group's id
                kill_group(proc.pid)
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:  # pragma: no cover - SIGKILL is not ignorable
                pass
    with _lock:
        _live.discard(proc)


def wait_or_kill(proc: Child, timeout: float) -> bool:
    """Wait for the program; at the deadline kill its tree. True when it timed out.

    The tree is killed on every way out, a normal exit, a Ctrl-C and an exception included:
    a child the program left running (a server it forked) must not outlive it (on a normal
    exit the supervisor has swept it already).
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
    # Polls /proc: a group has no handle to wait on. Used by proofs and tests, not per cell.
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not group_alive(pgid):
            return True
        time.sleep(0.05)
    return not group_alive(pgid)


def kill_all_live() -> None:
    """Kill every tree this process started and has not waited for (on SIGTERM or exit)."""
    with _lock:
        children = list(_live)
        _live.clear()
    for child in children:
        child.send_signal(signal.SIGTERM)
    for child in children:
        if child.alive():  # the server sweeps the orphans of a supervisor killed before its sweep
            kill_group(child.pid)


# --- process trees: the harness's, the server's and a supervisor's -------------------------

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


def _no_children_left() -> bool:
    """True when this process has no child at all, dead ones reaped on the way. In a child
    subreaper that means no descendant either: an orphan anywhere below (a daemon, a setsid
    escapee) is re-parented to us, so it would be our child. The common case of a check or an
    agent that left nothing behind then costs one system call instead of a scan of /proc."""
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return True
        if pid == 0:  # a live child: the full sweep finds and kills its tree
            return False


def sweep(spare: AbstractSet[int] = frozenset()) -> None:
    """Kill all descendants of this process until none is left (they may fork meanwhile),
    except the trees of the `spare` children."""
    me = os.getpid()
    if not spare and _no_children_left():
        return
    for _ in range(50):
        kept = set(spare)
        for pid in spare:
            kept.update(descendants(pid))
        found = [pid for pid in descendants(me) if pid not in kept]
        if not found:
            return
        for pid in found:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        time.sleep(0.02)  # only when something was left behind: let the kills land
        for pid in found:  # reap those that are (or became) our children
            try:
                os.waitpid(pid, os.WNOHANG)
            except ChildProcessError:
                pass
