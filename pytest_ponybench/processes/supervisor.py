"""What runs in a supervisor, forked by the fork server (`forkserver.py`) for each program
the harness starts (`procs.start`, `procs.start_calls`).

A supervisor leads a session of its own, is a child subreaper (`PR_SET_CHILD_SUBREAPER`) and
dies with the server (`PR_SET_PDEATHSIG`). It starts the agent (an `exec`, in the program's
cgroup when `limits` asks for one, under an init in a PID namespace of its own when
`pid_namespace` does) or forks each of a cell's checks (run in the forked process with
`checklib` warm). On SIGTERM, or when the program exits, it kills every descendant it has
(`procs.sweep`), then writes the program's exit code to the status pipe and exits.

A cell's checks share one supervisor (`procs.start_calls`): it runs them one after the other,
each in a process of its own forked from it, each with its own deadline, which the supervisor
keeps by waiting on the call's pidfd; after each it kills what the call left running, and
writes one JSON line for the call to the status pipe. So the checks of a cell cost one
supervisor, not one each.

A call with a `sandbox` view (every check, from `checks`) runs sandboxed where the machine
allows it (`sandbox.py`): in a cgroup of its own, under a tiny init cloned into new PID and
mount namespaces. The namespace is the call's whole tree: killing the init kills it all, and
the init dies with its supervisor, so neither the deadline nor a killed supervisor needs the
sweep for it.

Imports: `procs` (the shared constants and the sweep) and `sandbox`; never `forkserver`,
which imports this module.
"""
from __future__ import annotations

import ctypes
import json
import os
import resource
import select
import signal
import subprocess
import sys

from pytest_ponybench.processes import procs, sandbox

PR_SET_PDEATHSIG = 1
PR_SET_NAME = 15
PR_SET_CHILD_SUBREAPER = 36


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
                    for number in range(1, signal.NSIG):  # the program gets the default actions
                        try:
                            signal.signal(number, signal.SIG_DFL)
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
    procs.sweep()  # what the call left running: servers it started, setsid escapees
    tail = procs.output_tail(call["output"], int(call.get("tail") or 0)) if output is not None else ""
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
    procs.sweep()  # nothing is left (the namespace died with its init); one system call to be sure
    hit = {}
    if group is not None:
        hit = group.hit()
        group.remove()
    _calls_done.append(pid)
    tail = procs.output_tail(call["output"], int(call.get("tail") or 0)) if output is not None else ""
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
            os._exit(procs.KILLED)
        signal.set_wakeup_fd(-1)
        _close_all_but(fds)
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)

        def stop(signum, frame):
            procs.sweep()
            _end_program_cgroup(status)
            os.write(status, f"{128 + signum}\n".encode())
            os._exit(128 + signum)

        for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
            signal.signal(signum, stop)
        if message["op"] == "exec":
            code = _run_program(message, fds, _program_cgroup(message, status))
        else:  # "calls": a cell's checks, each forked from here with the warm modules
            code = _run_calls(message, fds, status)
        procs.sweep()  # what the program left behind: forked servers, setsid escapees
        _end_program_cgroup(status)  # and anything else still in its cgroup
        os.write(status, f"{code}\n".encode())
        os._exit(0)
    except BaseException:
        os._exit(procs.KILLED)
