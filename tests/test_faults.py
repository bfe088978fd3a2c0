"""Faults a benchmark run survives, each in a real pytest session against the stand-in CLI.

The agent hangs with children, leaves a setsid grandchild, crashes, prints garbage, floods
hundreds of megabytes, writes outside its workspace; a check runs agent code that loops,
forks, exits or floods; Ctrl-C lands in the middle of a cell; two runs start at once; an
xdist worker dies under a cell. Every time: a clear verdict for that cell, the other cells
run, nothing of the run stays alive.
"""
from __future__ import annotations

import signal
import subprocess
import sys
import xml.etree.ElementTree as ET

import pytest

from pytest_ponybench.cell import agent
from pytest_ponybench.store import record as statuses
from support import proc_watch
from support.benchproc import (
    ADD_TASK, GOOD_ADD, Session, bench_args, by_cell, calls, fake_env, fake_pids, finished_cells, killing_named_workers,
    only_run_dir, results, run, run_dirs, summary, wait_for, write_project,
)
from support.records import record_data


def cell(run: int, task: str = "add") -> str:
    return f"{task}__baseline__haiku__{run}"


def assert_nothing_left(run_dir, pids=()) -> None:
    left = proc_watch.wait_until_dead(proc_watch.working_in(run_dir) + list(pids), timeout=10)
    proc_watch.kill(left)
    assert left == [], f"processes survived: {left}"


def assert_dead(pid: int, message: str) -> None:
    if proc_watch.alive(pid):
        proc_watch.kill([pid])  # this test's own leftover: never leave it running
        raise AssertionError(message)


# --- one session, one fault per cell -----------------------------------------------------

AGENT_FAULTS = {
    0: {"mode": "hang_tree"},  # hangs with a child: killed at the cell timeout
    # 1: a good cell right after the hang
    2: {"mode": "spawn_setsid"},  # finishes, but leaves a setsid grandchild running
    3: {"mode": "crash"},
    4: {"mode": "garbage"},
    5: {"mode": "escape"},  # writes ../escaped-by-agent.txt
    6: {"mode": "escape_hook", "escape_to": "__init__.py"},  # no tool call; "__" as in a cell id
    # 7: a good cell
}


def test_agent_faults_each_get_a_verdict_and_the_run_goes_on_with_no_survivor(tmp_path):
    """One session, one fault per cell (AGENT_FAULTS), run one cell at a time."""
    root = write_project(tmp_path, {"add": ADD_TASK})
    env = fake_env(root, write=GOOD_ADD, cells={cell(i): spec for i, spec in AGENT_FAULTS.items()})
    junit = root / "junit.xml"
    done = run(root, bench_args(root, "--runs=8", "--ponybench-timeout=4", f"--junitxml={junit}"), env)
    run_dir = only_run_dir(root)
    records = by_cell(results(run_dir))
    assert set(records) == {cell(i) for i in range(8)}, "a fault stopped the session"
    assert records[cell(1)]["passed"] and records[cell(7)]["passed"], "good cells after faulty ones"

    # A CLI that hangs with a child: killed with its tree at the cell timeout.
    hung = records[cell(0)]
    assert hung["status"] == statuses.TIMEOUT and not hung["passed"]
    assert "killed with its process tree" in hung["error"]
    assert "agent never ran properly (timeout)" in done.stdout
    (child,) = fake_pids(run_dir / cell(0))
    assert_dead(child, "the hanging CLI's child outlived the cell")

    # A CLI that finishes but leaves a setsid grandchild: the cell passes, the grandchild dies.
    assert records[cell(2)]["passed"], records[cell(2)]["failure"]
    (grandchild,) = fake_pids(run_dir / cell(2))
    assert_dead(grandchild, "a setsid grandchild of the CLI survived its cell")

    # A crash and garbage: agent errors that say what happened.
    crash, garbage = records[cell(3)], records[cell(4)]
    assert crash["status"] == statuses.CLI_ERROR and "exited with code 139" in crash["error"]
    assert "Segmentation fault (pretend)" in crash["error"]
    assert garbage["status"] == statuses.BAD_OUTPUT and "not stream-json" in garbage["error"]
    assert not crash["passed"] and not garbage["passed"]

    # Writes beside the workspace: a property (results and JUnit) and the failure message.
    props = {}
    for case in ET.parse(junit).getroot().iter("testcase"):
        values = {p.get("name"): p.get("value") for p in case.iter("property")}
        props[values["cell"]] = values
    for run_index, name in ((5, "escaped-by-agent.txt"), (6, "__init__.py")):
        record = records[cell(run_index)]
        assert (run_dir / name).is_file()
        assert record["escaped"] == name and not record["passed"]
        assert record["failure"] == f"the agent wrote outside its workspace: {name}"
        assert f"the agent wrote outside its workspace: {name}" in done.stdout
        assert props[cell(run_index)]["escaped"] == name
    # Only the cell that wrote it is blamed: the later ones found the file already there.
    assert [c for c, r in records.items() if r["escaped"]] == [cell(5), cell(6)]

    assert_nothing_left(run_dir)


# --- floods ------------------------------------------------------------------------------

def test_a_flood_of_hundreds_of_megabytes_keeps_memory_and_the_transcript_bounded(tmp_path):
    flood_mb = 300
    root = write_project(tmp_path, {"add": ADD_TASK})
    env = fake_env(root, mode="flood", flood_mb=flood_mb)
    # Peak RSS of the pytest process (and of anything it waited for), measured by a parent
    # that runs nothing else.
    measure = ("import resource, subprocess, sys\n"
               "code = subprocess.run(sys.argv[1:], stdout=subprocess.DEVNULL).returncode\n"
               "print(code, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)\n")
    done = subprocess.run([sys.executable, "-c", measure, sys.executable, "-m", "pytest", *bench_args(root)],
                          cwd=root, env={**__import__("os").environ, **env}, capture_output=True, text=True,
                          timeout=240)
    code, peak_kib = map(int, done.stdout.split())
    assert code == pytest.ExitCode.TESTS_FAILED, done.stderr[-2000:]
    assert peak_kib < flood_mb * 1024, f"the harness peaked at {peak_kib // 1024} MiB reading a {flood_mb} MiB flood"

    ws = only_run_dir(root) / cell(0)
    transcript = ws / "_ponybench.transcript.jsonl"
    assert transcript.stat().st_size <= 2 * agent.KEEP_BYTES + 200
    with open(transcript, "rb") as fh:
        fh.seek(0)
        head = fh.readline(200)
    assert head.startswith(b"[ponybench: ") and "-byte output".encode() in head
    assert f"{flood_mb * 1024 * 1024}-byte output".encode() in head
    (record,) = results(only_run_dir(root))
    assert record["status"] == statuses.BAD_OUTPUT and "not stream-json" in record["error"]


# --- checks that hit hostile agent code --------------------------------------------------

RUN_TASK = {
    "description": "return one",
    "file": "one.py",
    "prompt": "Write run() in one.py, returning 1.",
    "check_timeout": 3,
    "checks": {"correct": 'assert find_function(load(FILE), "run")() == 1, "run() did not return 1"\n'},
    "refs": {"axis": "correct", "good": "def run():\n    return 1\n", "bad": "def run():\n    return 2\n"},
}
HOSTILE = {
    0: "def run():\n    while True:\n        pass\n",
    1: ("import os, time\n\ndef run():\n    for _ in range(3):\n        if os.fork() == 0:\n"
        "            os.setsid()\n            time.sleep(600)\n    while True:\n        time.sleep(1)\n"),
    2: "import os\n\ndef run():\n    os._exit(7)\n",
    3: "import sys\n\ndef run():\n    for _ in range(200):\n        sys.stdout.write('y' * 1048576)\n    return 1\n",
    4: "def run():\n    return 1\n",
}


def test_checks_that_loop_fork_exit_or_flood_fail_with_a_reason_and_the_session_goes_on(tmp_path):
    root = write_project(tmp_path, {"one": RUN_TASK})
    env = fake_env(root, cells={cell(i, "one"): {"write": {"one.py": code}} for i, code in HOSTILE.items()})
    done = run(root, bench_args(root, f"--runs={len(HOSTILE)}"), env)
    run_dir = only_run_dir(root)
    records = by_cell(results(run_dir))
    assert set(records) == {cell(i, "one") for i in HOSTILE}, done.stdout[-3000:]
    reasons = {i: records[cell(i, "one")]["correct_reason"] for i in HOSTILE}
    assert all(records[cell(i, "one")]["ran"] for i in HOSTILE), "the agent itself ran fine"
    assert reasons[0] == "correct check timed out after 3 s: the code under test looped or blocked"
    assert reasons[1] == reasons[0]
    # Behind the trust boundary the exit ends the agent's host mid-call; in process, the check.
    assert (reasons[2].startswith("correct check process ended with exit code 7 without a verdict")
            or "ended its own process (exit code 7)" in reasons[2]), reasons[2]
    assert any(said in reasons[3] for said in ("File too large", "without a verdict", "ended its own process")), reasons[3]
    for i in range(4):
        assert records[cell(i, "one")]["failure"] == f"incorrect: {reasons[i]}"
    assert records[cell(4, "one")]["passed"]
    assert_nothing_left(run_dir)
    assert done.returncode == pytest.ExitCode.TESTS_FAILED


# --- signals, concurrency, a dying worker ------------------------------------------------

def test_ctrl_c_mid_cell_keeps_finished_results_writes_the_summary_leaves_no_process(tmp_path):
    root = write_project(tmp_path, {"add": ADD_TASK})
    env = fake_env(root, write=GOOD_ADD, cells={cell(1): {"mode": "hang_tree"}})
    with Session(root, bench_args(root, "--runs=3", "--ponybench-timeout=300", "-n", "0"), env) as session:
        run_dir = wait_for(lambda: run_dirs(root) and run_dirs(root)[0], 60, "the run directory", session)
        hanging = run_dir / cell(1)
        child = wait_for(lambda: fake_pids(hanging),
                         60, "the hanging cell's child", session)
        session.signal(signal.SIGINT)
        code = session.wait(60)
    assert code == pytest.ExitCode.INTERRUPTED, session.stdout[-3000:]
    assert_nothing_left(run_dir, child)
    assert [r["cell"] for r in results(run_dir)] == [cell(0)]
    assert summary(run_dir)["cells"] == 1
    assert (run_dir / "summary.md").is_file()
    assert not (run_dir / cell(2)).exists(), "a cell started after Ctrl-C"


def test_two_runs_at_once_in_the_same_directory_do_not_collide(tmp_path):
    root = write_project(tmp_path, {"add": ADD_TASK})
    env = fake_env(root, write=GOOD_ADD, mode="sleep_then_ok", sleep=0.5)
    args = bench_args(root, "--runs=2")
    sessions = [Session(root, args, env, name=f"run{i}") for i in range(2)]
    try:
        codes = [s.wait(180) for s in sessions]
    finally:
        for s in sessions:
            s.__exit__()
    assert codes == [0, 0], [s.stdout[-2000:] for s in sessions]
    dirs = run_dirs(root)
    assert len(dirs) == 2
    for run_dir in dirs:
        records = by_cell(results(run_dir))
        assert sorted(records) == [cell(0), cell(1)] and all(r["passed"] for r in records.values())
        assert {r["workspace"] for r in records.values()} == {str(run_dir / cell(0)), str(run_dir / cell(1))}
        assert summary(run_dir)["cells"] == 2
    assert len(calls(root)) == 4


def test_a_crashed_xdist_worker_is_an_agent_error_for_its_cell_and_the_rest_continue(tmp_path):
    root = write_project(tmp_path, {"add": ADD_TASK})
    env = fake_env(root, write=GOOD_ADD, cells={cell(1): {"mode": "kill_worker"}})
    args = bench_args(root, "--runs=4", "-n", "2")
    with killing_named_workers(root):  # the worker the cell's CLI names dies, as in a crash
        done = run(root, args, env)
    run_dir = only_run_dir(root)
    records = by_cell(results(run_dir))
    assert set(records) == {cell(i) for i in range(4)}, done.stdout[-3000:]
    crashed = records[cell(1)]
    assert crashed["status"] == "interrupted" and not crashed["passed"]
    assert "worker" in crashed["error"] and "crashed" in crashed["error"]
    assert all(records[cell(i)]["passed"] for i in (0, 2, 3))
    (worker,) = fake_pids(run_dir / cell(1))
    assert_dead(worker, "the worker the fake killed is alive")
    assert_nothing_left(run_dir)

    # A resume reruns just that cell.
    paid = len(calls(root))
    fake_env(root, write=GOOD_ADD)
    again = run(root, args + [f"--ponybench-resume={run_dir}"], env)
    assert again.returncode == 0, again.stdout[-3000:]
    assert [c["cwd"].rsplit("/", 1)[-1] for c in calls(root)[paid:]] == [cell(1)]
    records = by_cell(results(run_dir))
    assert all(r["passed"] for r in records.values()) and not records[cell(1)]["reused"]
    assert finished_cells(run_dir) == set(records)
    assert record_data(run_dir / cell(1), "result")["status"] == "finished"
