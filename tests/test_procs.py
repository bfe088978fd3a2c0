"""The supervisor and its fork server (procs.py, forkserver.py, supervisor.py): cheap children
that still cannot outlive their cell. Every guarantee is checked against real processes read
from /proc."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest

from pytest_ponybench.processes import procs, sandbox
from pytest_ponybench.scoring import checks
from support import proc_watch

REPO = Path(__file__).resolve().parents[1]

# A program that starts a child in its group and a setsid grandchild in a session of its
# own, writes their pids, and then sleeps (or exits, with `exit` as its argument).
FAMILY = textwrap.dedent("""
    import os, subprocess, sys, time
    sleeper = [sys.executable, "-c", "import time; time.sleep(120)"]
    child = subprocess.Popen(sleeper)
    escapee = subprocess.Popen(sleeper, start_new_session=True)
    with open(sys.argv[1], "w") as fh:
        fh.write(f"{os.getpid()} {child.pid} {escapee.pid}")
    if sys.argv[2:] == ["exit"]:
        os._exit(0)
    time.sleep(120)
""")


def wait_for_pids(path: Path, timeout: float = 20) -> list[int]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            pids = [int(p) for p in path.read_text().split()]
        except (OSError, ValueError):
            pids = []
        if len(pids) == 3:
            return pids
        time.sleep(0.02)
    raise AssertionError(f"{path} never listed the family's pids")


def assert_all_dead(pids: list[int], what: str) -> None:
    left = proc_watch.wait_until_dead(pids, timeout=10)
    proc_watch.kill(left)
    assert left == [], f"{what}: {left} survived"


def test_a_program_that_exits_leaves_no_child_and_no_setsid_escapee(tmp_path):
    pids_file = tmp_path / "pids"
    proc = procs.start([sys.executable, "-c", FAMILY, str(pids_file), "exit"], stdin=subprocess.DEVNULL)
    assert procs.wait_or_kill(proc, 30) is False
    assert proc.returncode == 0
    assert_all_dead(wait_for_pids(pids_file), "what an exited program left behind")


def test_at_the_deadline_the_whole_tree_dies_escapee_included(tmp_path):
    pids_file = tmp_path / "pids"
    proc = procs.start([sys.executable, "-c", FAMILY, str(pids_file)], stdin=subprocess.DEVNULL)
    wait_for_pids(pids_file)
    assert procs.wait_or_kill(proc, 0.5) is True
    assert_all_dead(wait_for_pids(pids_file) + [proc.pid], "the tree of a program past its deadline")


def test_the_program_leads_its_own_session_with_its_cwd_env_and_file_size_cap(tmp_path):
    probe = textwrap.dedent("""
        import json, os, resource, sys
        json.dump({"sid": os.getsid(0), "pgid": os.getpgid(0), "cwd": os.getcwd(),
                   "flag": os.environ.get("PONY_PROBE"), "fsize": resource.getrlimit(resource.RLIMIT_FSIZE)[0]},
                  sys.stdout)
    """)
    ws = tmp_path / "ws"
    ws.mkdir()
    proc = procs.start([sys.executable, "-c", probe], cwd=ws, env={**os.environ, "PONY_PROBE": "yes"},
                       stdout=subprocess.PIPE, stdin=subprocess.DEVNULL, max_file_size=12345, text=True)
    try:
        seen = json.loads(proc.stdout.read())
    finally:
        proc.stdout.close()
    assert procs.wait_or_kill(proc, 30) is False
    assert seen["sid"] == seen["pgid"] == proc.pid != os.getsid(0)  # the supervisor's session
    assert seen["cwd"] == str(ws) and seen["flag"] == "yes" and seen["fsize"] == 12345


def test_a_missing_program_is_exit_code_127_with_a_message(tmp_path):
    err = tmp_path / "err.txt"
    with open(err, "wb") as fh:
        proc = procs.start([str(tmp_path / "no-such-program")], stderr=fh, stdin=subprocess.DEVNULL)
        assert procs.wait_or_kill(proc, 30) is False
    assert proc.returncode == 127
    assert "ponybench: cannot start" in err.read_text()


def test_a_signal_death_is_128_plus_the_signal():
    proc = procs.start([sys.executable, "-c", "import os, signal; os.kill(os.getpid(), signal.SIGSEGV)"],
                       stdin=subprocess.DEVNULL)
    assert procs.wait_or_kill(proc, 30) is False
    assert proc.returncode == 128 + signal.SIGSEGV


def test_a_child_started_from_a_thread_that_ended_keeps_running_until_killed(tmp_path):
    # A parent-death signal fires when the *thread* that forked exits; a child started from
    # a pool thread must not die with that thread.
    pids_file = tmp_path / "pids"
    started = []
    thread = threading.Thread(target=lambda: started.append(
        procs.start([sys.executable, "-c", FAMILY, str(pids_file)], stdin=subprocess.DEVNULL)))
    thread.start()
    thread.join()
    (proc,) = started
    family = wait_for_pids(pids_file)
    assert proc.poll() is None and all(proc_watch.alive(p) for p in family)
    procs.kill_tree(proc)
    assert_all_dead(family, "the tree after kill_tree")


def test_kill_all_live_stops_every_tree(tmp_path):
    children = [procs.start([sys.executable, "-c", FAMILY, str(tmp_path / f"pids{i}")], stdin=subprocess.DEVNULL)
                for i in range(3)]
    families = [wait_for_pids(tmp_path / f"pids{i}") for i in range(3)]
    procs.kill_all_live()
    for child in children:
        child.wait(timeout=30)
    assert_all_dead([p for family in families for p in family] + [c.pid for c in children], "after kill_all_live")


def test_a_supervisor_killed_outright_still_takes_its_tree_and_escapee_with_it(tmp_path):
    # SIGKILL gives the supervisor no chance to sweep: the fork server kills its group and
    # the orphans that were re-parented to the server.
    pids_file = tmp_path / "pids"
    proc = procs.start([sys.executable, "-c", FAMILY, str(pids_file)], stdin=subprocess.DEVNULL)
    family = wait_for_pids(pids_file)
    os.kill(proc.pid, signal.SIGKILL)
    assert proc.wait(timeout=30) == procs.KILLED
    assert_all_dead(family, "the tree of a supervisor killed by SIGKILL")


HARNESS = textwrap.dedent("""
    import subprocess, sys, time
    sys.path.insert(0, sys.argv[1])
    from pytest_ponybench.processes import procs
    for i in range(2):
        procs.start([sys.executable, "-c", sys.argv[2], f"{sys.argv[3]}{i}"], stdin=subprocess.DEVNULL)
    print("started", flush=True)
    time.sleep(120)
""")


def test_a_harness_killed_by_sigkill_leaves_no_process_of_its_cells(tmp_path):
    harness = subprocess.Popen([sys.executable, "-c", HARNESS, str(REPO), FAMILY, str(tmp_path / "pids")],
                               stdout=subprocess.PIPE, text=True, start_new_session=True)
    try:
        assert harness.stdout.readline().strip() == "started"
        families = [wait_for_pids(tmp_path / f"pids{i}") for i in range(2)]
        below = procs.descendants(harness.pid)  # the fork server, the supervisors, the families
        assert len(below) >= 1 + 2 + 2 * 3
        os.kill(harness.pid, signal.SIGKILL)
        harness.wait()
        everything = [p for family in families for p in family] + below
        assert_all_dead(everything, "the cells of a harness killed by SIGKILL")
    finally:
        harness.stdout.close()
        proc_watch.kill([p for p in procs.descendants(os.getpid()) if p != harness.pid])


def test_a_check_runs_forked_in_its_own_session_and_workspace_with_its_limits(tmp_path):
    ws = tmp_path / "ws"
    ws.mkdir()
    probe = f"""
        import os, resource, sys
        assert os.getpid() != {os.getpid()}
        # Session ids of two PID namespaces are not comparable (the sandbox's check may be sid 2 where
        # CI's worker is too): another namespace with a leader inside it is a session of its own.
        elsewhere = os.readlink("/proc/self/ns/pid") != {os.readlink("/proc/self/ns/pid")!r}
        assert os.getsid(0) == os.getpgid(0) != 0, "not the leader of its own process group's session"
        assert elsewhere or os.getsid(0) != {os.getsid(0)}, "not in a session of its own"
        assert os.getcwd() == {str(ws)!r} and WORKSPACE == Path({str(ws)!r})
        assert resource.getrlimit(resource.RLIMIT_FSIZE)[0] == {checks.FILE_SIZE_LIMIT}
        assert sys.dont_write_bytecode
        assert {str(ws)!r} not in sys.path  # behind the trust boundary: the check imports nothing of the workspace
    """
    assert checks.run_check(textwrap.dedent(probe), ws, "correct", None, 30) == checks.Verdict(True, "ok")


def test_checks_from_many_threads_at_once_each_get_their_own_verdict(tmp_path):
    ws = tmp_path / "ws"
    ws.mkdir()
    results = {}

    def one(i):
        results[i] = checks.run_check(f"assert {i} % 2 == 0, 'odd {i}'", ws, "correct", None, 30)

    threads = [threading.Thread(target=one, args=(i,)) for i in range(12)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for i in range(12):
        expected = checks.Verdict(True, "ok") if i % 2 == 0 else checks.Verdict(False, f"odd {i}")
        assert results[i] == expected


def test_a_new_server_replaces_one_that_was_killed(tmp_path):
    first = procs.start([sys.executable, "-c", "pass"], stdin=subprocess.DEVNULL)
    assert procs.wait_or_kill(first, 30) is False
    server = procs._server
    assert server is not None
    server.proc.kill()
    server.proc.wait()
    again = procs.start([sys.executable, "-c", "raise SystemExit(3)"], stdin=subprocess.DEVNULL)
    assert procs.wait_or_kill(again, 30) is False and again.returncode == 3
    assert procs._server is not server


@pytest.fixture(autouse=True)
def no_tree_left_behind():
    yield
    with procs._lock:
        left = list(procs._live)
    assert left == [], f"children left unwaited: {[c.pid for c in left]}"


def test_kill_all_live_from_another_thread_while_the_owner_waits(tmp_path):
    # A signal handler (or the pool's stop) kills trees that a cell's thread is waiting on:
    # the waiter gets an exit code, not an error from a pipe closed under it.
    pids_file = tmp_path / "pids"
    proc = procs.start([sys.executable, "-c", FAMILY, str(pids_file)], stdin=subprocess.DEVNULL)
    family = wait_for_pids(pids_file)
    outcome = {}

    def owner():
        try:
            outcome["timed_out"] = procs.wait_or_kill(proc, 120)
        except BaseException as exc:  # noqa: BLE001 - the test reports it
            outcome["error"] = exc

    waiter = threading.Thread(target=owner)
    waiter.start()
    procs.kill_all_live()
    waiter.join(60)
    assert not waiter.is_alive()
    assert outcome == {"timed_out": False}, outcome
    assert proc.returncode is not None and proc.returncode != 0
    assert_all_dead(family, "the tree killed from another thread")


def test_the_environment_snapshot_survives_a_key_deleted_while_copying(monkeypatch):
    # What pytest's main thread does to PYTEST_CURRENT_TEST while a pool thread copies the
    # environment: the key is listed, then gone when looked up.
    from collections.abc import Mapping

    class Racing(Mapping):
        def __init__(self):
            self.data = {"KEEP": "1", "PYTEST_CURRENT_TEST": "t (call)"}
            self.races = 1

        def __iter__(self):
            keys = list(self.data)
            if self.races:
                self.races -= 1
                del self.data["PYTEST_CURRENT_TEST"]
            return iter(keys)

        def __getitem__(self, key):
            return self.data[key]

        def __len__(self):
            return len(self.data)

    racing = Racing()
    with pytest.raises(KeyError):
        dict(Racing())  # the race, unguarded
    monkeypatch.setattr(os, "environ", racing)
    snapshot = procs.environ_snapshot()
    monkeypatch.undo()
    assert snapshot == {"KEEP": "1"}


def test_a_forked_check_imports_nothing_its_fork_server_has_not_imported(tmp_path):
    # Each module a check needs but the server lacks is imported again in every check's
    # process (about 3.5 ms for regressions.py alone, twice a cell).
    probe = textwrap.dedent("""
        import sys
        from pytest_ponybench.processes import forkserver, procs, supervisor  # what the server imports
        for module in procs.WARM_MODULES:
            __import__(module)
        before = set(sys.modules)
        from pytest_ponybench import checklib
        from pytest_ponybench.graders import assert_graders  # what the checks of plugin evals import
        from pytest_ponybench.scoring import checks
        checklib.namespace("x.py")
        supervisor._limits(1024)
        print(" ".join(sorted(set(sys.modules) - before)))
    """)
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, cwd=tmp_path,
                          env={**os.environ, "PYTHONPATH": procs.PACKAGE_PARENT})
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == []


# --- several calls under one supervisor (procs.start_calls: a cell's checks) ---------------

def check_call(code: str, cwd: Path, scratch: Path, timeout: float = 30) -> dict:
    """A call of `start_calls` running check code (checks.run_here), its verdict as its result."""
    scratch.mkdir(exist_ok=True)
    verdict = scratch / "verdict.json"
    return {"function": "pytest_ponybench.scoring.checks:run_here", "args": [textwrap.dedent(code), str(verdict), ""],
            "cwd": str(cwd), "timeout": timeout, "result": str(verdict),
            "output": str(scratch / "output.txt"), "tail": 500}


def run_calls(calls: list[dict], deadline: float = 120) -> tuple[procs.Child, bool]:
    proc = procs.start_calls(calls, stdin=subprocess.DEVNULL)
    return proc, procs.wait_or_kill(proc, deadline)


def test_calls_run_one_after_another_each_in_a_process_of_its_own(tmp_path):
    stamp = """
        import os, time
        started = time.monotonic()
        time.sleep(0.2)
        with open(os.path.join({out!r}, "{n}"), "w") as fh:
            fh.write(f"{{os.getpid()}} {{os.getppid()}} {{os.getsid(0)}} {{started}} {{time.monotonic()}} {{os.getcwd()}}")
    """
    calls = [check_call(stamp.format(out=str(tmp_path), n=n), tmp_path, tmp_path / f"s{n}") for n in range(3)]
    proc, timed_out = run_calls(calls)
    assert not timed_out and proc.returncode == 0
    assert [r["code"] for r in proc.results] == [0, 0, 0]
    assert [r["result"] for r in proc.results] == [{"ok": True, "reason": "ok"}] * 3
    rows = [(tmp_path / str(n)).read_text().split() for n in range(3)]
    assert len({row[0] for row in rows}) == 3, "two calls shared a process"
    assert {row[1] for row in rows} == {row[2] for row in rows} == {str(proc.pid)}, \
        "every call is a child of the supervisor, in its session"
    assert float(rows[0][4]) <= float(rows[1][3]) and float(rows[1][4]) <= float(rows[2][3]), "calls overlapped"
    assert {row[5] for row in rows} == {str(tmp_path)}


def test_a_call_past_its_deadline_dies_with_its_tree_and_the_next_call_runs(tmp_path):
    pids_file = tmp_path / "pids"
    start_family = f"""
        import subprocess, sys
        subprocess.Popen([sys.executable, "-c", {FAMILY!r}, {str(pids_file)!r}])
        while True:
            pass
    """
    all_dead = f"""
        import os
        for pid in open({str(pids_file)!r}).read().split():
            try:
                state = open(f"/proc/{{pid}}/stat").read().rsplit(")", 1)[1].split()[0]
            except OSError:
                continue
            assert state == "Z", f"process {{pid}} of the earlier call still runs"
    """
    proc, timed_out = run_calls([check_call(start_family, tmp_path, tmp_path / "a", timeout=5),
                                 check_call(all_dead, tmp_path, tmp_path / "b")])
    assert not timed_out
    first, second = proc.results
    assert first["timed_out"] is True and first["code"] == 128 + signal.SIGKILL and first["result"] is None
    assert second == {"code": 0, "timed_out": False, "result": {"ok": True, "reason": "ok"}, "tail": ""}
    assert_all_dead(wait_for_pids(pids_file), "the tree of a call past its deadline")


def test_what_a_call_leaves_running_is_gone_before_the_next_call_starts(tmp_path):
    pids_file = tmp_path / "pids"
    leave_family = f"""
        import subprocess, sys
        subprocess.run([sys.executable, "-c", {FAMILY!r}, {str(pids_file)!r}, "exit"], check=True)
    """
    # The family's parent exited: its child and setsid grandchild were re-parented to the
    # supervisor, which kills them when the call ends.
    was_swept = f"""
        import os
        pids = open({str(pids_file)!r}).read().split()
        live = [p for p in pids if os.path.exists(f"/proc/{{p}}") and
                open(f"/proc/{{p}}/stat").read().rsplit(")", 1)[1].split()[0] != "Z"]
        assert not live, f"still running: {{live}}"
    """
    proc, _ = run_calls([check_call(leave_family, tmp_path, tmp_path / "a"),
                         check_call(was_swept, tmp_path, tmp_path / "b")])
    assert [r["result"] for r in proc.results] == [{"ok": True, "reason": "ok"}] * 2, proc.results
    assert_all_dead(wait_for_pids(pids_file), "what a call left running")


def test_a_call_that_cannot_start_says_why_and_the_next_one_runs(tmp_path):
    broken = {**check_call("pass", tmp_path, tmp_path / "a"), "output": str(tmp_path / "missing" / "output.txt")}
    proc, _ = run_calls([broken, check_call("pass", tmp_path, tmp_path / "b")])
    first, second = proc.results
    assert first["code"] == 127 and first["result"] is None
    assert "cannot open the call's output file" in first["tail"] and "missing" in first["tail"]
    assert second["result"] == {"ok": True, "reason": "ok"}


def test_at_the_harness_s_deadline_the_calls_die_and_what_ended_is_kept(tmp_path):
    # 8 s, not 1: on a loaded 2-core machine the second call may need a while to write its pid.
    pid_file = tmp_path / "pid"
    looping = f"""
        import os
        open({str(pid_file)!r}, "w").write(str(os.getpid()))
        while True:
            pass
    """
    proc, timed_out = run_calls([check_call("pass", tmp_path, tmp_path / "a"),
                                 check_call(looping, tmp_path, tmp_path / "b", timeout=600)], deadline=8)
    assert timed_out
    assert [r["result"] for r in proc.results] == [{"ok": True, "reason": "ok"}]
    assert_all_dead([int(pid_file.read_text()), proc.pid], "a call cut short by the harness")


def test_ps_tells_the_server_a_supervisor_and_a_check_apart(tmp_path):
    # Unsandboxed (a call without a view): the check sees its supervisor and the server.
    probe = """
        import os
        def comm(pid):
            return open(f"/proc/{pid}/comm").read().strip()
        supervisor = os.getppid()
        server = int(open(f"/proc/{supervisor}/stat").read().rsplit(")", 1)[1].split()[1])
        assert [comm("self"), comm(supervisor), comm(server)] == ["pony-check", "pony-supervisor", "pony-server"], \\
            [comm("self"), comm(supervisor), comm(server)]
    """
    proc, _ = run_calls([check_call(probe, tmp_path, tmp_path / "a")])
    assert proc.results[0]["result"] == {"ok": True, "reason": "ok"}, proc.results


def test_ps_tells_a_sandboxed_check_and_its_init_apart(tmp_path):
    if not sandbox.support().active:
        pytest.fail(f"this machine runs checks unsandboxed ({sandbox.support().describe()}): nothing to tell apart")
    # In its namespace a check sees itself and its init (pid 1), nothing above.
    probe = """
        import os
        def comm(pid):
            return open(f"/proc/{pid}/comm").read().strip()
        assert (os.getpid(), os.getppid()) == (2, 1), (os.getpid(), os.getppid())
        assert [comm("self"), comm(1)] == ["pony-check", "pony-init"], [comm("self"), comm(1)]
        assert sorted(int(p) for p in os.listdir("/proc") if p.isdigit()) == [1, 2]
    """
    assert checks.run_check(textwrap.dedent(probe), tmp_path, "correct", None, 30) == checks.Verdict(True, "ok")


# --- PID namespaces (sandbox.py): a tree killed whole, with no /proc scan -------------------

HOPPER = """
import os
while True:  # fork, let the parent exit, setsid: a /proc sweep keeps finding a new pid
    if os.fork():
        os._exit(0)
    os.setsid()
"""


def require_namespaces() -> None:
    found = sandbox.support()
    if not found.namespaces:
        return
    message = f"this machine has no PID namespaces for the harness ({found.namespaces})"
    if os.environ.get("CI") or (sys.platform.startswith("linux") and os.geteuid() == 0):
        pytest.fail(message + ", which CI and root on Linux are expected to have")
    pytest.skip(message)


def sandboxed_call(code: str, tmp_path: Path, name: str, timeout: float = 30) -> dict:
    scratch, ws = tmp_path / name, tmp_path / f"{name}-ws"  # the scratch folder outside the overlaid one
    ws.mkdir()
    call = check_call(code, ws, scratch, timeout)
    return {**call, "sandbox": {"scratch": str(scratch), "in_place": [str(ws)], "home": os.environ.get("HOME", ""),
                                "path": os.environ.get("PATH", "")}}


def test_a_program_in_its_own_pid_namespace_leaves_no_pid_hopper(tmp_path):
    require_namespaces()
    marker = f"pony-hopper-{tmp_path.name}"
    program = f"import subprocess, sys, time\nsubprocess.Popen([sys.executable, '-c', {HOPPER!r}, {marker!r}])\ntime.sleep(1)\n"
    with proc_watch.Sightings(marker) as seen:
        proc = procs.start([sys.executable, "-c", program], stdin=subprocess.DEVNULL, pid_namespace=True)
        assert procs.wait_or_kill(proc, 30) is False
    assert proc.returncode == 0
    assert seen.seen, "the hopper never ran: the test proves nothing"
    left = proc_watch.wait_until_dead(proc_watch.marked(marker), timeout=3) + proc_watch.marked(marker)
    proc_watch.kill(left)
    assert not left, f"the hopper outlived its program: {left}"


def test_a_program_in_its_own_pid_namespace_keeps_its_exit_code_and_streams(tmp_path):
    require_namespaces()
    proc = procs.start([sys.executable, "-c", "import os; print(os.getpid(), os.getcwd()); raise SystemExit(5)"],
                       cwd=tmp_path, stdout=subprocess.PIPE, text=True, stdin=subprocess.DEVNULL, pid_namespace=True)
    out = proc.stdout.read()
    procs.wait_or_kill(proc, 30)
    assert proc.returncode == 5
    assert out.split() == ["2", str(tmp_path)]  # pid 2: the init is pid 1 of the namespace


def test_a_program_in_its_own_pid_namespace_can_signal_neither_its_init_nor_the_harness(tmp_path):
    # The program sees the host's /proc (no /proc of its own is mounted), but a signal to a
    # process outside its namespace finds no such process, and its init (pid 1 there) ignores
    # what it sends: the supervisor's handlers, were the init to keep them, would let it in.
    require_namespaces()
    program = textwrap.dedent(f"""
        import os, signal, time
        said = []
        try:
            os.kill({os.getpid()}, 0)
            said.append("harness reached")
        except ProcessLookupError:
            said.append("harness out of reach")
        said.append("sees the harness" if os.path.exists("/proc/{os.getpid()}") else "sees no harness")
        for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
            os.kill(1, signum)
        time.sleep(0.5)
        print(", ".join(said))
        """)
    proc = procs.start([sys.executable, "-c", program], stdout=subprocess.PIPE, text=True, stdin=subprocess.DEVNULL,
                       pid_namespace=True)
    out = proc.stdout.read()
    procs.wait_or_kill(proc, 30)
    assert (proc.returncode, out.strip()) == (0, "harness out of reach, sees the harness"), (proc.returncode, out)


def test_a_sandboxed_call_s_pid_hopper_is_gone_when_the_call_ends(tmp_path):
    require_namespaces()
    marker = f"pony-hopper-{tmp_path.name}"
    code = f"""
        import subprocess, sys, time
        import os
        subprocess.Popen([sys.executable, "-c", {HOPPER!r}, {marker!r}], start_new_session=True)
        # The check sees its own namespace's /proc: it proves the hopper ran before it ends.
        deadline, seen = time.monotonic() + 20, False
        while not seen and time.monotonic() < deadline:
            for entry in os.listdir("/proc"):
                try:
                    seen = seen or {marker!r}.encode() in open(f"/proc/{{entry}}/cmdline", "rb").read()
                except OSError:
                    pass
            time.sleep(0.05)
        assert seen, "the hopper never ran: the test proves nothing"
        time.sleep(1)
    """
    with proc_watch.Sightings(marker):
        proc, timed_out = run_calls([sandboxed_call(code, tmp_path, "a", timeout=60)])
    assert not timed_out and proc.results[0]["result"] == {"ok": True, "reason": "ok"}, proc.results
    left = proc_watch.wait_until_dead(proc_watch.marked(marker), timeout=3) + proc_watch.marked(marker)
    proc_watch.kill(left)
    assert not left, f"the hopper outlived its call: {left}"


def test_a_killed_supervisor_takes_its_sandboxed_call_with_it(tmp_path):
    require_namespaces()
    marker = f"pony-sleeper-{tmp_path.name}"
    code = f"""
        import subprocess, sys, time
        subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)", {marker!r}], start_new_session=True)
        time.sleep(120)
    """
    with proc_watch.Sightings(marker) as seen:
        proc = procs.start_calls([sandboxed_call(code, tmp_path, "a", timeout=120)], stdin=subprocess.DEVNULL)
        deadline = time.monotonic() + 20
        while not seen.seen and time.monotonic() < deadline:
            time.sleep(0.1)
        os.kill(proc.pid, signal.SIGKILL)  # no sweep: its call's init dies with it (PR_SET_PDEATHSIG)
        procs.wait_or_kill(proc, 10)
    assert seen.seen, "the call's sleeper never ran: the test proves nothing"
    left = proc_watch.wait_until_dead(proc_watch.marked(marker), timeout=5)
    proc_watch.kill(left)
    assert not left, f"the call outlived its killed supervisor: {left}"


def test_a_sandbox_that_cannot_be_set_up_is_the_harness_s_failure_not_the_check_s(tmp_path):
    require_namespaces()
    broken = sandboxed_call("pass", tmp_path, "a")
    broken["sandbox"] = {**broken["sandbox"], "writable": [str(tmp_path / "no-such-copy")]}
    # A check that exits with the init's own failure code is still the check's failure.
    mimic = sandboxed_call("import os\nos._exit(125)", tmp_path, "b")
    proc, _ = run_calls([broken, mimic])
    first, second = proc.results
    assert "no-such-copy" in first["sandbox_error"], first
    assert "sandbox_error" not in second and second["code"] == 125, second
    verdict = checks._verdict("correct", 30, first)
    assert verdict.instrument and "its sandbox failed" in verdict.reason, verdict
    assert not checks._verdict("correct", 30, second).instrument


def test_a_sandboxed_call_with_tmpdir_inside_tmp_runs(tmp_path, monkeypatch):
    # $TMPDIR below /tmp (as a remote worker's is): covered with /tmp, the call's folder shown back.
    require_namespaces()
    inner, ws = tmp_path / "hosttmp", tmp_path / "ws"
    inner.mkdir()
    ws.mkdir()
    code = """
        import tempfile
        folder = tempfile.mkdtemp()
        open(folder + "/x", "w").write("x")
    """
    done = subprocess.run([sys.executable, "-c", textwrap.dedent("""
        import json, sys
        from pathlib import Path
        from pytest_ponybench.scoring import checks
        ws = Path(sys.argv[1])
        print(json.dumps(checks.run_checks({"correct": sys.argv[2]}, ws, None, 30)["correct"].__dict__))
    """), str(ws), textwrap.dedent(code)], capture_output=True, text=True,
        env={**os.environ, "TMPDIR": str(inner), "PYTHONPATH": procs.PACKAGE_PARENT}, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert json.loads(done.stdout.splitlines()[-1])["ok"] is True, done.stdout
