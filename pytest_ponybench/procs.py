"""Children that cannot outlive their cell, started cheaply.

Every program the harness starts (the agent, a check) runs under a supervisor that:

- leads a new session, so its process group holds what the program forks;
- is a child subreaper (Linux `PR_SET_CHILD_SUBREAPER`), so a descendant that escapes the
  group with `setsid` and loses its parent is re-parented to the supervisor, not to init;
- on SIGTERM, or when the program exits, kills every descendant it has, then exits.

Supervisors are not new Python interpreters. Each harness process (the controller, an xdist
worker) starts one *fork server* on first use: `python -m pytest_ponybench.procs --serve`,
with the check helpers already imported. For each program the server forks a supervisor,
which starts the agent (an `exec`) or forks each of a cell's checks (run in the forked
process with `checklib` warm). So a check costs a fork, not two interpreter starts.

When the harness dies, even by SIGKILL, the kernel closes its end of the server's socket:
the server reads end-of-file, sends SIGTERM to every supervisor (each sweeps its tree) and
exits. Supervisors also get SIGTERM if the server itself dies (`PR_SET_PDEATHSIG`).

A cell's checks share one supervisor (`start_calls`): it runs them one after the other, each
in a process of its own forked from it, each with its own deadline, which the supervisor keeps
by waiting on the call's pidfd; after each it kills what the call left running. So the checks
of a cell cost one supervisor, not one each.

A call with a `sandbox` view (every check, from `checks`) runs sandboxed where the machine
allows it (`sandbox.py`): in a cgroup of its own, under a tiny init cloned into new PID and
mount namespaces. The namespace is the call's whole tree: killing the init kills it all, and
the init dies with its supervisor, so neither the deadline nor a killed supervisor needs the
sweep for it.

The harness waits on a pipe only the supervisor holds, with the deadline as the timeout of
`select` (no polling): the supervisor writes the program's exit code to it after its sweep,
and, for calls, one JSON line per call as each one ends. At a deadline, a Ctrl-C or an
exception the harness sends SIGTERM (the supervisor sweeps its descendants), then SIGKILLs
the whole group as a net. The server reaps each
supervisor only after killing what is left of its group, so a group id is never reused
while anyone may still signal it.
"""
from __future__ import annotations

import ctypes
import gc
import json
import os
import resource
import select
import selectors
import signal
import socket
import subprocess
import sys
import threading
import time

from . import sandbox

PR_SET_PDEATHSIG = 1
PR_SET_NAME = 15
PR_SET_CHILD_SUBREAPER = 36


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


PACKAGE_PARENT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
GRACE = 5.0  # seconds the supervisor gets to sweep its descendants before the group is SIGKILLed
KILLED = 137  # the exit code reported when a supervisor died without saying its program's
# Modules the server imports once, so that a forked check finds them warm: the helper API,
# everything a check's namespace holds, and their standard-library imports, loaded before an
# agent's json.py could shadow them. A module missing here is imported anew in every check.
WARM_MODULES = ("pytest_ponybench.check_state", "pytest_ponybench.check_clock", "pytest_ponybench.check_boundary",
                "pytest_ponybench.checklib", "pytest_ponybench.checks", "pytest_ponybench.regressions")
MESSAGE_LIMIT = 4 * 1024 * 1024  # bytes of one request (argv, environment, check code)

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
            self._pidfd = os.pidfd_open(pid)
        except (OSError, AttributeError):  # already gone, or no pidfd (old kernel)
            self._pidfd = None

    def wait(self, timeout: float | None = None) -> int:
        with self._waiting:
            if self.returncode is None:
                self._read_status(timeout)
        return self.returncode

    def _read_status(self, timeout: float | None) -> None:
        """Read the status pipe to its end (the supervisor's exit), within `timeout`: a
        supervisor of calls writes a line as each call ends, long before it exits."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            remaining = None if deadline is None else max(0.0, deadline - time.monotonic())
            if not select.select([self._status], [], [], remaining)[0]:
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
        self.proc = subprocess.Popen(python_module("pytest_ponybench.procs") + ["--serve", str(theirs.fileno())],
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


def sweep(spare: set[int] = frozenset()) -> None:
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


_libc_prctl = None


def _prctl(option: int, value) -> None:
    # Looked up once (in the fork server, before it forks): a lookup in each forked process
    # costs a dlopen and a new ctypes function object there.
    global _libc_prctl
    if _libc_prctl is None:
        _libc_prctl = ctypes.CDLL(None, use_errno=True).prctl
    _libc_prctl(option, value, 0, 0, 0)


def _name(name: str) -> None:
    """What `ps` and `top` show for this process (15 bytes at most): the fork server and its
    forks are all `python` otherwise, and a stuck one could not be told from the others."""
    _prctl(PR_SET_NAME, ctypes.c_char_p(name.encode()[:15]))


def _close_all_but(keep: list[int]) -> None:
    low = 3
    for fd in sorted(set(f for f in keep if f >= 3)):
        os.closerange(low, fd)
        low = fd + 1
    os.closerange(low, 1 << 16)


def _limits(max_file_size: int | None) -> None:
    """No file larger than `max_file_size` (a flood cannot fill the disk), no core dumps."""
    if max_file_size is not None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (max_file_size, max_file_size))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))


_program_group: list = []  # in a supervisor: the cgroup of its program, until it is emptied


def _program_cgroup(message: dict, status: int):
    """The cgroup a program started with `limits` runs in (made by its supervisor, named by
    the supervisor's pid so the server can remove it if the supervisor dies), or None: no
    limits asked for, none on this machine (said once per run by the harness), or one that
    could not be made here (said on the status pipe)."""
    limits = message.get("limits")
    if not limits or sandbox.support().cgroup:
        return None
    try:
        group = sandbox.CallCgroup.create("program", memory=int(limits["memory"]), pids=int(limits["pids"]))
    except OSError as exc:
        group, why = None, f"cgroup: {exc.strerror or exc}"
    else:
        why = "no cgroup hierarchy with memory and pids controllers this process may use"
    if group is None:
        os.write(status, (json.dumps({"limits": {"error": why}}) + "\n").encode())
        return None
    _program_group.append(group)
    return group


def _end_program_cgroup(status: int) -> None:
    """Kill whatever is left in the program's cgroup, say which limits it met, remove it."""
    while _program_group:
        group = _program_group[0]  # left in the list until done: a SIGTERM meanwhile does it all again
        group.kill_all()
        said = {**group.hit(), "memory_bytes": group.memory, "pids_max": group.pids, "cgroup": group.kind,
                "memory_peak_bytes": group.peak()}
        group.remove()
        os.write(status, (json.dumps({"limits": said}) + "\n").encode())
        _program_group.pop(0)


def _run_program(message: dict, fds: list[int], group=None) -> int:
    """Start the program (subprocess uses vfork: cheaper than a fork of this Python; a fork
    when it must join `group` first) and wait for it; its exit code, 128 + N for a death by
    signal N."""
    argv = message["argv"]
    # Set here, inherited by the program: the supervisor itself writes only to a pipe.
    _limits(message.get("max_file_size"))
    if message.get("pid_namespace") and not sandbox.support().namespaces:
        return _run_program_in_namespace(message, fds, group)
    try:
        # restore_signals: the program gets the default actions Python set aside for itself
        # (SIGPIPE, SIGXFSZ: a write past the file-size cap kills it, as in a shell); the
        # handlers this supervisor installed are reset by exec. The supervisor is in the
        # program's cgroup while it starts it, so the program is born there (nothing it starts
        # is ever outside it) and the start stays a vfork: joining in the child (preexec_fn)
        # forces a fork of this Python, about 30 ms a cell on a loaded machine.
        group = _enter_program_cgroup(group)
        try:
            child = subprocess.Popen(argv, cwd=message.get("cwd"), env=message["env"], stdin=fds[0],
                                     stdout=fds[1], stderr=fds[2], close_fds=True, restore_signals=True)
        finally:
            if group is not None:
                group.leave()
    except OSError as exc:
        os.write(fds[2], f"ponybench: cannot start {argv[0]}: {exc.strerror}\n".encode())
        return 127
    finally:
        for fd in fds[:3]:
            os.close(fd)
    code = child.wait()
    return code if code >= 0 else 128 - code


def _enter_program_cgroup(group):
    """Move the supervisor into the program's cgroup for the program's start (it leaves after);
    the group, or None when it cannot be entered: the program then runs without it."""
    if group is None:
        return None
    try:
        group.join()
    except OSError:
        _program_group.clear()
        group.remove()
        return None
    return group


def _run_program_in_namespace(message: dict, fds: list[int], group=None) -> int:
    """`_run_program` with the program under an init in a PID namespace of its own: the init
    forks and execs it, reaps, and exits with its code; the kernel then kills the rest. The
    init is born in the program's cgroup (the supervisor is in it for the clone), so a group
    that cannot be entered is said the same way as without a namespace."""
    argv = message["argv"]
    group = _enter_program_cgroup(group)
    try:
        pid = sandbox.clone_namespaces(sandbox.CLONE_NEWPID)
    except OSError as exc:
        os.write(fds[2], f"ponybench: cannot start {argv[0]} in a PID namespace: {exc.strerror}\n".encode())
        for fd in fds[:3]:
            os.close(fd)
        return 127
    finally:
        if group is not None and os.getpid() != 1:  # the supervisor, not the init (pid 1 in its namespace)
            group.leave()
    if pid == 0:
        try:
            _prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
            _name("pony-init")
            # The kernel gives a namespace's init only the signals it handles from inside: with
            # the supervisor's handlers the program could end its init (and its own run); with
            # none it cannot. The supervisor ends the init from outside, with SIGKILL.
            for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
                signal.signal(signum, signal.SIG_DFL)
            child = os.fork()
            if child == 0:
                try:
                    for target, fd in enumerate(fds[:3]):
                        os.dup2(fd, target)
                    _close_all_but([])
                    for signum in range(1, signal.NSIG):  # the program gets the default actions
                        try:
                            signal.signal(signum, signal.SIG_DFL)
                        except (OSError, ValueError):
                            pass
                    if message.get("cwd"):
                        os.chdir(message["cwd"])
                    os.execvpe(argv[0], argv, message["env"])
                except OSError as exc:
                    os.write(2, f"ponybench: cannot start {argv[0]}: {exc.strerror}\n".encode())
                    os._exit(127)
            for fd in set(fds):  # the status pipe too: only the supervisor says when it ended
                os.close(fd)
            sandbox.run_init(child)
        except BaseException:
            os._exit(126)
    for fd in fds[:3]:
        os.close(fd)
    _, wait_status = os.waitpid(pid, 0)
    code = os.waitstatus_to_exitcode(wait_status)
    return code if code >= 0 else 128 - code


def _set_environ(env: dict[str, str]) -> None:
    """Make this process's environment `env`, touching only what differs from the server's
    (clearing and refilling it costs a putenv per variable in every check)."""
    for key in [k for k in os.environ if k not in env]:
        del os.environ[key]
    for key, value in env.items():
        if os.environ.get(key) != value:
            os.environ[key] = value


def _call(message: dict, fds: list[int]) -> None:
    """In a check's own process (forked by its supervisor): streams, limits, environment,
    working directory, then `function(*args)`. Never returns."""
    try:
        _name("pony-check")
        for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGCHLD):
            signal.signal(signum, signal.SIG_DFL)
        for target, fd in enumerate(fds[:3]):
            os.dup2(fd, target)
        _close_all_but([])
        _limits(message.get("max_file_size"))
        if message.get("cwd"):
            os.chdir(message["cwd"])
        _set_environ(message["env"])
        module, name = message["function"].split(":")
        getattr(sys.modules[module], name)(*message["args"])
        os._exit(0)
    except BaseException:
        os._exit(126)


RESULT_LIMIT = 1024 * 1024  # bytes of a call's result file read back; a larger one is no result


def _read_result(path: str | None) -> dict | None:
    if not path:
        return None
    try:
        with open(path, "rb") as fh:
            data = json.loads(fh.read(RESULT_LIMIT + 1)[:RESULT_LIMIT])
        return data if isinstance(data, dict) else None
    except (OSError, ValueError):
        return None


def _wait_with_deadline(pid: int, timeout: float) -> tuple[int, bool]:
    """Wait for our child `pid`, at most `timeout` seconds (its pidfd, no polling); at the
    deadline SIGKILL it. Its exit code and whether it was killed at the deadline."""
    timed_out = False
    try:
        pidfd = os.pidfd_open(pid)
    except (OSError, AttributeError):  # pragma: no cover - no pidfd: the harness's deadline stands in
        pidfd = None
    if pidfd is not None:
        try:
            timed_out = not select.select([pidfd], [], [], timeout)[0]
        finally:
            os.close(pidfd)
    if timed_out:
        os.kill(pid, signal.SIGKILL)
    _, wait_status = os.waitpid(pid, 0)
    code = os.waitstatus_to_exitcode(wait_status)
    return (code if code >= 0 else 128 - code), timed_out


def _one_call(message: dict, call: dict, fds: list[int]) -> dict:
    """Fork and wait for one call of `start_calls`; what is reported of it."""
    if call.get("sandbox") is not None and sandbox.support().active:
        return _one_sandboxed_call(message, call, fds)
    output = None
    if call.get("output"):
        try:
            output = os.open(call["output"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        except OSError as exc:  # this call cannot run; the next ones still do
            return {"code": 127, "timed_out": False, "result": None,
                    "tail": f"ponybench: cannot open the call's output file: {exc}"}
    pid = os.fork()
    if pid == 0:
        _call({**message, **call}, [fds[0], *([output, output] if output is not None else fds[1:3])])
    if output is not None:
        os.close(output)
    code, timed_out = _wait_with_deadline(pid, float(call["timeout"]))
    sweep()  # what the call left running: servers it started, setsid escapees
    tail = output_tail(call["output"], int(call.get("tail") or 0)) if output is not None else ""
    return {"code": code, "timed_out": timed_out, "result": _read_result(call.get("result")), "tail": tail}


def _open_output(call: dict) -> tuple[int | None, dict | None]:
    """The call's output file, opened here (by the harness's user), or why it cannot be."""
    if not call.get("output"):
        return None, None
    try:
        return os.open(call["output"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600), None
    except OSError as exc:  # this call cannot run; the next ones still do
        return None, {"code": 127, "timed_out": False, "result": None,
                      "tail": f"ponybench: cannot open the call's output file: {exc}"}


def _one_sandboxed_call(message: dict, call: dict, fds: list[int]) -> dict:
    """One call in the sandbox (see `sandbox`): a cgroup, then an init cloned into new PID and
    mount namespaces that builds the call's mount view and forks the call's process. The
    call's whole tree is the namespace: killing the init at the deadline kills it all, and
    when the call's process ends the init exits and the kernel kills what it left."""
    output, failed = _open_output(call)
    if failed is not None:
        return failed
    group = None
    try:
        if not sandbox.support().cgroup:
            group = sandbox.CallCgroup.create(str(len(_calls_done)))
    except OSError:
        group = None  # limits are missing for this call only: it still runs in its namespaces
    streams = [fds[0], *([output, output] if output is not None else fds[1:3])]
    # The init says on this pipe that the sandbox stands, before the call's code runs: a call
    # that exits with the init's own failure code cannot pass for the harness's failure.
    ready_read, ready_write = os.pipe()
    try:
        pid = sandbox.clone_namespaces()
    except OSError as exc:
        for fd in (ready_read, ready_write, *([output] if output is not None else [])):
            os.close(fd)
        if group is not None:
            group.remove()
        return {"code": 125, "timed_out": False, "result": None, "tail": "",
                "sandbox_error": f"cannot clone the check's namespaces: {exc}"}
    if pid == 0:
        os.close(ready_read)
        _init_of_call(message, call, streams, group, ready_write)
    os.close(ready_write)
    if output is not None:
        os.close(output)
    code, timed_out = _wait_with_deadline(pid, float(call["timeout"]))
    ready = os.read(ready_read, 1) == b"1"
    os.close(ready_read)
    sweep()  # nothing is left (the namespace died with its init); one system call to be sure
    hit = {}
    if group is not None:
        hit = group.hit()
        group.remove()
    _calls_done.append(pid)
    tail = output_tail(call["output"], int(call.get("tail") or 0)) if output is not None else ""
    report = {"code": code, "timed_out": timed_out, "result": _read_result(call.get("result")), "tail": tail}
    if not ready:
        report["sandbox_error"] = tail or "the check's sandbox could not be set up"
    if any(hit.values()):
        report["limits"] = {**hit, "memory_bytes": sandbox.MEMORY_LIMIT, "pids_max": sandbox.PIDS_LIMIT}
    return report


_calls_done: list[int] = []  # the sandboxed calls of this supervisor so far (names their cgroups)


def _init_of_call(message: dict, call: dict, streams: list[int], group, ready: int) -> None:
    """pid 1 of a call's namespace: dies with the supervisor, joins the call's cgroup, builds
    the mount view, says so on `ready`, forks the call's process and reaps until it ends.
    Never returns."""
    try:
        _prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
        # A session of the namespace's own: the call's process group is not the supervisor's,
        # so a kill(0, ...) or killpg from the call reaches only its own namespace.
        os.setsid()
        _name("pony-init")
        if group is not None:
            group.join()
        sandbox.enter_view(call["sandbox"])
        os.write(ready, b"1")
        os.close(ready)
        child = os.fork()
        if child == 0:
            sandbox.IN_SANDBOX = True
            _call({**message, **call}, streams)
        for fd in set(streams):  # the init holds nothing of the call's: its output ends with it
            if fd > 2:
                os.close(fd)
        sandbox.run_init(child)
    except BaseException as exc:
        try:
            os.write(streams[2], f"ponybench: cannot set up the check's sandbox: {exc}\n".encode())
        except OSError:
            pass
        os._exit(125)


def _run_calls(message: dict, fds: list[int], status: int) -> int:
    """The calls of `start_calls`, one after the other, each reported as it ends."""
    for call in message["calls"]:
        os.write(status, (json.dumps(_one_call(message, call, fds)) + "\n").encode())
    for fd in fds[:3]:
        os.close(fd)
    return 0


def _supervisor(message: dict, fds: list[int], server: int) -> None:
    """In the supervisor (forked by the server): own session, subreaper, the program, the
    sweep, the exit code on the status pipe. Never returns."""
    status = fds[3]
    try:
        os.setsid()
        _prctl(PR_SET_CHILD_SUBREAPER, 1)
        _prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
        _name("pony-supervisor")
        if os.getppid() != server:  # the server died before the death signal was armed
            os._exit(KILLED)
        signal.set_wakeup_fd(-1)
        _close_all_but(fds)
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)

        def stop(signum, frame):
            sweep()
            _end_program_cgroup(status)
            os.write(status, f"{128 + signum}\n".encode())
            os._exit(128 + signum)

        for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
            signal.signal(signum, stop)
        if message["op"] == "exec":
            code = _run_program(message, fds, _program_cgroup(message, status))
        else:  # "calls": a cell's checks, each forked from here with the warm modules
            code = _run_calls(message, fds, status)
        sweep()  # what the program left behind: forked servers, setsid escapees
        _end_program_cgroup(status)  # and anything else still in its cgroup
        os.write(status, f"{code}\n".encode())
        os._exit(0)
    except BaseException:
        os._exit(KILLED)


def serve(sock_fd: int) -> None:
    """The fork server: one request, one supervisor; until the harness closes the socket."""
    sock = socket.socket(fileno=sock_fd)
    _prctl(PR_SET_CHILD_SUBREAPER, 1)  # escapees of a supervisor killed before its sweep land here
    _name("pony-server")
    for module in WARM_MODULES:
        __import__(module)
    sandbox.support()  # found once here; every supervisor and check forked from here knows it
    # Every fork would otherwise copy the pages the collector touches in its first pass over
    # these long-lived objects: keep them out of its sight.
    gc.collect()
    gc.freeze()
    supervisors: set[int] = set()
    wake_read, wake_write = os.pipe()
    os.set_blocking(wake_write, False)
    signal.set_wakeup_fd(wake_write)
    signal.signal(signal.SIGCHLD, lambda signum, frame: None)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the harness decides when its children stop

    def shut_down(*_args):
        for pid in supervisors:
            try:
                os.kill(pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
        deadline = time.monotonic() + GRACE
        while supervisors and time.monotonic() < deadline:  # only on the way out
            reap()
            time.sleep(0.02)
        for pid in list(supervisors):
            kill_group(pid)
        sweep()
        os._exit(0)

    signal.signal(signal.SIGTERM, shut_down)
    signal.signal(signal.SIGHUP, shut_down)

    def reap() -> None:
        while True:
            try:
                info = os.waitid(os.P_ALL, 0, os.WEXITED | os.WNOWAIT | os.WNOHANG)
            except ChildProcessError:
                return
            if info is None:
                return
            pid = info.si_pid
            unswept = False
            if pid in supervisors:
                # Not reaped yet, so its group id is still its own: kill what its sweep missed.
                kill_group(pid)
                supervisors.discard(pid)
                unswept = info.si_code == os.CLD_KILLED
            os.waitpid(pid, 0)
            if unswept:  # it died without its sweep: its orphans were re-parented here
                sweep(spare=supervisors)
                sandbox.remove_leftover_cgroups(pid)  # and without removing its calls' cgroups

    selector = selectors.DefaultSelector()
    selector.register(sock, selectors.EVENT_READ)
    selector.register(wake_read, selectors.EVENT_READ)
    while True:
        for key, _ in selector.select():
            if key.fileobj is not sock:
                try:
                    os.read(wake_read, 4096)
                except BlockingIOError:  # pragma: no cover
                    pass
                reap()
                continue
            try:
                data, fds, _flags, _addr = socket.recv_fds(sock, MESSAGE_LIMIT, 4)
            except OSError:
                data, fds = b"", []
            if not data:  # the harness is gone (exited, or killed even by SIGKILL)
                shut_down()
            try:
                message = json.loads(data)
                me = os.getpid()
                pid = os.fork()
                if pid == 0:
                    sock.close()
                    _supervisor(message, fds, me)
                supervisors.add(pid)
                reply = {"pid": pid}
            except Exception as exc:  # a bad request must not stop the other cells' children
                reply = {"error": f"ponybench fork server: {type(exc).__name__}: {exc}"}
            finally:
                for fd in fds:
                    os.close(fd)
            sock.send(json.dumps(reply).encode())


if __name__ == "__main__":
    serve(int(sys.argv[sys.argv.index("--serve") + 1]))
