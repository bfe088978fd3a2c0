"""Nothing a test starts outlives it (tests/support/proc_tree.py): a child pytest session that
leaves a double-forked setsid sleeper and then times out, is interrupted or ends well; the same
through pytester's runpytest_subprocess; and the harness's own tree (fork server, supervisor,
the stand-in CLI and its child, a check in its sandbox), which the marker must reach for the
sweep to find it.
"""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from support import proc_tree, proc_watch
from support.benchproc import (ADD_TASK, GOOD_ADD, QUIET, Session, bench_args, fake_env, fake_pids, run, run_dirs, wait_for,
                               write_project)

# A test of an inner session: it leaves a daemon (fork, setsid, fork again: the grandchild
# leads its own session and its parent is gone, so it belongs to no group and no parent of
# the session's), writes the daemon's pid, then sleeps until killed (or, with LEAVE_AND_END,
# ends at once). The daemon closes its files, as a daemon does: it holds no pipe of the test's
# open (a run() would wait for its end of file), so only a kill ends it.
LEAVES_A_SLEEPER = '''
import os, sys, time

def test_leaves_a_sleeper():
    pid_file = os.environ["SLEEPER_PID_FILE"]
    if os.fork() == 0:
        os.setsid()
        if os.fork() == 0:
            null = os.open(os.devnull, os.O_RDWR)
            for fd in (0, 1, 2):
                os.dup2(null, fd)
            os.closerange(3, 4096)  # pytest's saved copies of the session's stdout and stderr
            with open(pid_file + ".tmp", "w") as fh:
                fh.write(str(os.getpid()))
            os.rename(pid_file + ".tmp", pid_file)
            time.sleep(600)
        os._exit(0)
    while not os.path.exists(pid_file):
        time.sleep(0.01)
    if os.environ.get("LEAVE_AND_END") != "1":
        time.sleep(600)
'''


def sleeper_project(tmp_path: Path) -> tuple[Path, Path, dict[str, str]]:
    root = tmp_path / "project"
    root.mkdir()
    (root / "test_sleeper.py").write_text(LEAVES_A_SLEEPER)
    pid_file = tmp_path / "sleeper.pid"
    return root, pid_file, {"SLEEPER_PID_FILE": str(pid_file)}


def sleeper_pid(pid_file: Path) -> int:
    assert pid_file.exists(), "the inner session never left its sleeper: the test proves nothing"
    return int(pid_file.read_text())


def assert_gone(pid: int) -> None:
    left = proc_watch.wait_until_dead([pid], timeout=5)
    proc_watch.kill(left)  # this test's own leftover: not for the next test to meet
    assert left == [], f"the setsid sleeper {pid} outlived the call that started it"


def test_a_timed_out_run_leaves_no_setsid_sleeper(tmp_path):
    root, pid_file, env = sleeper_project(tmp_path)
    with pytest.raises(subprocess.TimeoutExpired):
        # Long enough for the inner session to start and leave its sleeper on a loaded machine
        # (checked below: without the pid file the test fails, it does not pass for nothing).
        run(root, [*QUIET, "-q"], env, timeout=20)
    assert_gone(sleeper_pid(pid_file))


def test_an_interrupted_run_leaves_no_setsid_sleeper(tmp_path):
    """The call is interrupted (as Ctrl-C would) once the sleeper is there: no time limit at all."""
    root, pid_file, env = sleeper_project(tmp_path)

    class Interrupted(Exception):
        pass

    def interrupt(signum, frame):
        raise Interrupted()

    def when_the_sleeper_is_there():
        deadline = time.monotonic() + 120
        while not pid_file.exists() and time.monotonic() < deadline:
            time.sleep(0.02)
        os.kill(os.getpid(), signal.SIGUSR1)  # handled in the main thread, inside run()

    before = signal.signal(signal.SIGUSR1, interrupt)
    try:
        watcher = threading.Thread(target=when_the_sleeper_is_there, daemon=True)
        watcher.start()
        with pytest.raises(Interrupted):
            run(root, [*QUIET, "-q"], env, timeout=300)
        watcher.join()
    finally:
        signal.signal(signal.SIGUSR1, before)
    assert_gone(sleeper_pid(pid_file))


def test_a_run_that_ends_well_keeps_its_tree_until_the_test_ends(tmp_path):
    """After a good end the tree lives until the test's end (a test may assert that the harness
    left nothing: an earlier sweep would hide what it left), then it goes."""
    root, pid_file, env = sleeper_project(tmp_path)
    with proc_tree.sweeping():  # what the autouse fixture does around every test
        done = run(root, [*QUIET, "-q"], {**env, "LEAVE_AND_END": "1"}, timeout=120)
        assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
        pid = sleeper_pid(pid_file)
        assert proc_watch.alive(pid), "the sleeper died with its session: the sweep below proves nothing"
    assert_gone(pid)


def test_a_session_left_by_a_failing_block_leaves_no_setsid_sleeper(tmp_path):
    root, pid_file, env = sleeper_project(tmp_path)
    with pytest.raises(ZeroDivisionError):
        with Session(root, [*QUIET, "-q"], env):
            wait_for(pid_file.exists, 120, "the sleeper's pid file")
            1 / 0  # the test fails inside the block
    assert_gone(sleeper_pid(pid_file))


def test_a_timed_out_runpytest_subprocess_leaves_no_setsid_sleeper(pytester, tmp_path, monkeypatch):
    pytester.makepyfile(test_sleeper=LEAVES_A_SLEEPER)
    pid_file = tmp_path / "sleeper.pid"
    monkeypatch.setenv("SLEEPER_PID_FILE", str(pid_file))
    with pytest.raises(pytester.TimeoutExpired):
        pytester.runpytest_subprocess(*QUIET, "-q", timeout=20)
    assert_gone(sleeper_pid(pid_file))


def test_the_marker_reaches_the_harness_fork_server_supervisor_and_cli(tmp_path):
    """The sweep finds what carries the marker: the harness passes its environment on to the
    processes it starts in sessions of their own, and the CLI's child."""
    root = write_project(tmp_path, {"add": ADD_TASK})
    env = fake_env(root, mode="hang_tree")
    with Session(root, bench_args(root, "--runs=1", "--ponybench-timeout=300", "-n", "0"), env) as session:
        run_dir = wait_for(lambda: run_dirs(root) and run_dirs(root)[0], 60, "the run directory", session)
        (child,) = wait_for(lambda: fake_pids(run_dir / "add__baseline__haiku__0"), 60, "the hanging CLI's child",
                            session)
        marked = proc_tree.carrying(session.marker)
        names = {Path(f"/proc/{pid}/comm").read_text().strip() for pid in marked if proc_watch.alive(pid)}
        assert {"pony-server", "pony-supervisor"} <= names, names
        assert child in marked
        assert session.proc.pid in marked
        groups = proc_tree.cgroups_of(marked)  # the agent's own cgroup, where the machine has cgroups
        proc_tree.end_tree(session.marker)
        assert proc_tree.carrying(session.marker) == []
        assert proc_watch.wait_until_dead(marked, timeout=5) == []
        assert [g for g in groups if os.path.exists(g)] == [], "the harness's cgroups outlived its processes"


def test_a_sweep_kills_a_process_that_forks_while_it_runs(tmp_path):
    """A process forking in a loop (each child forks on and exits): a pass that reads /proc
    before a fork misses the newborn, the next one gets it."""
    marker = proc_tree.new_marker()
    hopper = ("import os, time\n"
              "while True:\n"
              "    if os.fork():\n"
              "        os._exit(0)\n"
              "    os.setsid()\n"
              "    time.sleep(0.005)\n")
    first = subprocess.Popen([sys.executable, "-c", hopper], env=proc_tree.marked_env(dict(os.environ), marker))
    wait_for(lambda: first.poll() is not None and proc_tree.carrying(marker), 30, "the hopper's first hop")
    killed = proc_tree.end_tree(marker)
    assert killed, "the sweep found no hopper: it proves nothing"
    time.sleep(0.2)  # a hop that escaped would have forked again by now
    assert proc_tree.carrying(marker) == []


def test_the_marker_reaches_a_check_in_its_sandbox(tmp_path):
    """A check runs forked from a supervisor, in its own PID namespace under the untrusted uid
    where the machine allows it: it still carries the marker, and the sweep ends it."""
    task = {**ADD_TASK, "checks": {"correct": "import time\ntime.sleep(300)\n"}}  # the gate's proof hangs in it
    root = write_project(tmp_path, {"add": task})
    with Session(root, bench_args(root, "--runs=1", "-n", "0"), fake_env(root, write=GOOD_ADD)) as session:
        def checks_marked() -> list[int]:
            return [pid for pid in proc_tree.carrying(session.marker)
                    if proc_watch.alive(pid) and Path(f"/proc/{pid}/comm").read_text().strip() == "pony-check"]

        checks = wait_for(checks_marked, 180, "a check process carrying the marker", session)
        proc_tree.end_tree(session.marker)
        assert proc_watch.wait_until_dead(checks, timeout=5) == []
        assert proc_tree.carrying(session.marker) == []
