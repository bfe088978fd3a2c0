"""Everything a test's child process starts dies with the test: a marker in the environment
and a sweep of /proc for it.

A test that starts `python -m pytest --ponybench ...` starts a tree that reaches far: the
harness's fork server and supervisors are sessions of their own (setsid), the stand-in CLI
may leave a setsid sleeper, a check runs in a PID namespace of its own under another uid. When
the test kills its child (a timeout, a failure, Ctrl-C), none of those is in the child's
process group, and an orphan is re-parented to init, so neither `killpg` nor a walk of the
parent links finds them afterwards.

Why a marker in the environment (`PONYBENCH_TEST_TREE=<uuid>`, one per call):
- every process inherits its parent's environment unless a program builds another one, and
  /proc/<pid>/environ shows the environment a process was started with, whatever it did since
  (setsid, a double fork, a new PID namespace, a change of uid: root reads it all). The harness
  passes its own environment on everywhere (procs.environ_snapshot for the fork server,
  supervisors and programs, agent.agent_env for the CLI, checks._run for a check's process;
  bubblewrap keeps it), so the marker reaches every process the call starts.
- a cgroup per call would be stronger, but the harness moves its agent and checks into cgroups
  of its own (procs.start(limits=...), sandbox.py): on a v2-only machine a process lives in one
  cgroup, so they would leave ours, and a test's cgroup with processes in it would stop the
  harness from enabling controllers below it. PR_SET_CHILD_SUBREAPER on the test process keeps
  orphans below it, but it cannot tell one call's orphans from another's, and reaping them
  would steal exit codes that subprocess.Popen waits for.
A process that starts a program with an environment built from nothing (none does in the
harness; `env -i` in a test's own script would) escapes the marker: the harness's own tree kill
(supervisors are subreapers, sandboxed calls die with their namespace) still covers those.

The sweep kills every live process carrying the marker, then looks again until a pass finds
none: a process may fork between the read of /proc and its kill. It runs at once when the call
fails (a timeout, Ctrl-C, an assertion inside a Session's block), and otherwise when the test
ends (tests/conftest.py), after its assertions: several tests assert that the harness itself
left nothing behind, and an earlier sweep would make those assertions pass whatever it did.
"""
from __future__ import annotations

import atexit
import contextlib
import os
import signal
import time
import uuid

from support.proc_watch import alive

MARKER_VAR = "PONYBENCH_TEST_TREE"

# Markers handed out and not yet swept: the conftest's autouse fixtures sweep those a test (or
# a module's fixtures) made when it ends, atexit whatever is left.
_unswept: set[str] = set()


def new_marker() -> str:
    marker = uuid.uuid4().hex
    _unswept.add(marker)
    return marker


def marked_env(env: dict[str, str], marker: str) -> dict[str, str]:
    return {**env, MARKER_VAR: marker}


def carrying(marker: str) -> list[int]:
    """Live processes (zombies excluded) whose starting environment holds MARKER_VAR=marker."""
    needle = f"{MARKER_VAR}={marker}\0".encode()
    me = os.getpid()
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == me:
            continue
        try:
            with open(f"/proc/{entry}/environ", "rb") as fh:
                environ = fh.read()
        except OSError:  # gone meanwhile, or another user's and we are not root
            continue
        if needle in environ and alive(int(entry)):
            found.append(int(entry))
    return found


class TreeSurvived(AssertionError):
    pass


# Empty passes in a row before a sweep believes it: one pass reads /proc, then each process's
# environ, and a process that forks and exits in a loop can be gone from the listing it was in
# and born after it, so a single empty pass proves nothing against it.
EMPTY_PASSES = 3


def end_tree(marker: str, rounds: int = 200) -> list[int]:
    """SIGKILL every process carrying `marker` until none is left (EMPTY_PASSES empty passes
    in a row); the pids killed. A process forked after a pass read /proc is found by a later
    one; one that keeps escaping for `rounds` passes (a fork bomb faster than the sweep) is an
    error, not a silent leftover."""
    killed: list[int] = []
    empty = 0
    for _ in range(rounds):
        left = carrying(marker)
        if not left:
            empty += 1
            if empty >= EMPTY_PASSES:
                _unswept.discard(marker)
                _remove_cgroups_of(killed)
                return killed
            time.sleep(0.01)
            continue
        empty = 0
        for pid in left:
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
        killed.extend(p for p in left if p not in killed)
        time.sleep(0.01)  # SIGKILL is delivered at once, but the exit takes a moment
    raise TreeSurvived(f"processes marked {MARKER_VAR}={marker} still run after {rounds} sweeps: "
                       f"{carrying(marker)}")


def _remove_cgroups_of(killed: list[int]) -> None:
    """A supervisor removes its program's cgroup when it ends, and the fork server those of a
    supervisor that died first; killed together, neither does. Their (now empty) groups are
    named after the supervisor's pid: remove those of the pids killed, as the fork server would."""
    if not killed:
        return
    from pytest_ponybench.processes import sandbox

    for pid in killed:
        with contextlib.suppress(OSError):
            sandbox.remove_leftover_cgroups(pid)


def cgroups_of(pids) -> list[str]:
    """The harness's cgroups (sandbox.py names them `ponybench-<supervisor pid>-...`) of these
    pids, in this process's hierarchies."""
    from pytest_ponybench.processes import sandbox

    return [group for pid in pids for group in sandbox.supervisor_cgroups(pid)]


@contextlib.contextmanager
def sweeping():
    """Every tree whose marker is handed out in the block is killed when the block ends (the
    conftest's autouse fixtures wrap each test and each module in one)."""
    before = set(_unswept)
    try:
        yield
    finally:
        for marker in sorted(_unswept - before):
            end_tree(marker)


@contextlib.contextmanager
def call_tree(env: dict[str, str]):
    """`with call_tree(env) as marked:` start the child with `marked` (env plus a fresh marker).
    If the block raises (a timeout, a failed assertion, Ctrl-C), everything the child started
    is killed at once. If it ends well the tree is left to the enclosing `sweeping()` (the end
    of the test): a test may still assert that the harness cleaned up after itself, and a
    sweep here would hide a harness that did not."""
    marker = new_marker()
    try:
        yield marked_env(env, marker)
    except BaseException:
        end_tree(marker)
        raise


@contextlib.contextmanager
def marked_os_environ():
    """`call_tree` for helpers that read os.environ themselves (pytester's popen): the marker
    is in os.environ for the block only."""
    marker = new_marker()
    before = os.environ.get(MARKER_VAR)
    os.environ[MARKER_VAR] = marker
    try:
        yield marker
    except BaseException:
        end_tree(marker)
        raise
    finally:
        if before is None:
            os.environ.pop(MARKER_VAR, None)
        else:
            os.environ[MARKER_VAR] = before


@atexit.register
def _sweep_at_exit() -> None:
    for marker in list(_unswept):
        with contextlib.suppress(Exception):
            end_tree(marker)
