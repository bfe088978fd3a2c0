"""The fork server: one warm interpreter per harness process that forks a supervisor
(`supervisor.py`) for each program the harness starts (`procs.py`, its client).

Supervisors are not new Python interpreters. Each harness process (the controller, an xdist
worker) starts one fork server on first use: `python -m pytest_ponybench.processes.forkserver --serve`,
with the check helpers already imported (`procs.WARM_MODULES`). For each program the server
forks a supervisor, which starts the agent (an `exec`) or forks each of a cell's checks. So a
check costs a fork, not two interpreter starts.

When the harness dies, even by SIGKILL, the kernel closes its end of the server's socket:
the server reads end-of-file, sends SIGTERM to every supervisor (each sweeps its tree) and
exits. Supervisors also get SIGTERM if the server itself dies (`PR_SET_PDEATHSIG`). The
server reaps each supervisor only after killing what is left of its group, so a group id is
never reused while anyone may still signal it; it is a child subreaper too, so the orphans
of a supervisor killed before its sweep land here and are swept.

Imports: `supervisor`, `procs` (the shared constants, `kill_group`, `sweep`) and `sandbox`;
nothing imports this module (the harness runs it by name).
"""
from __future__ import annotations

import gc
import json
import os
import selectors
import signal
import socket
import sys
import time

from pytest_ponybench.processes import procs, sandbox, supervisor


def serve(sock_fd: int) -> None:
    """The fork server: one request, one supervisor; until the harness closes the socket."""
    sock = socket.socket(fileno=sock_fd)
    # A subreaper: escapees of a supervisor killed before its sweep land here.
    supervisor._prctl(supervisor.PR_SET_CHILD_SUBREAPER, 1)
    supervisor._name("pony-server")
    for module in procs.WARM_MODULES:
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
        deadline = time.monotonic() + procs.GRACE
        while supervisors and time.monotonic() < deadline:  # only on the way out
            reap()
            time.sleep(0.02)
        for pid in list(supervisors):
            procs.kill_group(pid)
        procs.sweep()
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
                procs.kill_group(pid)
                supervisors.discard(pid)
                unswept = info.si_code == os.CLD_KILLED
            os.waitpid(pid, 0)
            if unswept:  # it died without its sweep: its orphans were re-parented here
                procs.sweep(spare=supervisors)
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
                data, fds, _flags, _addr = socket.recv_fds(sock, procs.MESSAGE_LIMIT, 4)
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
                    supervisor._supervisor(message, fds, me)
                supervisors.add(pid)
                reply: dict[str, int | str] = {"pid": pid}
            except Exception as exc:  # a bad request must not stop the other cells' children
                reply = {"error": f"ponybench fork server: {type(exc).__name__}: {exc}"}
            finally:
                for fd in fds:
                    os.close(fd)
            sock.send(json.dumps(reply).encode())


if __name__ == "__main__":
    serve(int(sys.argv[sys.argv.index("--serve") + 1]))
