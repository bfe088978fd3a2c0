"""Several cells at once in one pytest process (pool.py, --ponybench-at-once), each in a real
pytest session against the stand-in CLI: the cells really overlap, every cell is reported
once, a resume reuses what finished, and Ctrl-C leaves no process and no false result."""
from __future__ import annotations

import json
import signal

import pytest

from support import proc_watch
from support.benchproc import (
    ADD_TASK, GOOD_ADD, Session, bench_args, by_cell, calls, fake_env, fake_pids, finished_cells, only_run_dir,
    results, run, run_dirs, wait_for, write_project,
)
from support.records import record_path


def cell(run_index: int) -> str:
    return f"add__baseline__haiku__{run_index}"


def test_four_cells_at_once_in_one_process_each_reported_once(tmp_path):
    root = write_project(tmp_path, {"add": ADD_TASK})
    # Each stand-in CLI finishes only once 4 of them run at the same time: one at a time, every
    # cell would fail. 8 cells: two rounds of 4.
    env = fake_env(root, write=GOOD_ADD, mode="await_peers", peers=4, peers_dir=str(root / "peers"), sleep=60)
    junit = root / "junit.xml"
    done = run(root, bench_args(root, "--runs=8", "--ponybench-at-once=4", "-n", "0", f"--junitxml={junit}"), env)
    assert done.returncode == 0, done.stdout[-3000:]
    run_dir = only_run_dir(root)
    records = by_cell(results(run_dir))
    assert sorted(records) == sorted(cell(i) for i in range(8))
    assert all(r["passed"] for r in records.values())
    assert len(calls(root)) == 8, "a cell ran twice or not at all"
    assert done.stdout.count("PASSED") + done.stdout.count(" passed") >= 1
    assert json.loads((run_dir / "summary.json").read_text())["cells"] == 8
    assert proc_watch.working_in(run_dir) == []


def test_one_at_a_time_the_same_cells_cannot_meet(tmp_path):
    # The check above can fail: without the pool no two stand-ins ever run together.
    root = write_project(tmp_path, {"add": ADD_TASK})
    env = fake_env(root, write=GOOD_ADD, mode="await_peers", peers=2, peers_dir=str(root / "peers"), sleep=1)
    done = run(root, bench_args(root, "--runs=2", "-n", "0"), env)
    records = by_cell(results(only_run_dir(root)))
    assert not any(r["passed"] for r in records.values())
    assert "peers ran at once" in records[cell(0)]["error"]
    assert done.returncode == pytest.ExitCode.TESTS_FAILED


def test_a_resume_in_the_pool_reuses_finished_cells_and_runs_the_rest(tmp_path):
    root = write_project(tmp_path, {"add": ADD_TASK})
    env = fake_env(root, write=GOOD_ADD)
    args = bench_args(root, "--runs=6", "--ponybench-at-once=3", "-n", "0")
    assert run(root, args, env).returncode == 0
    run_dir = only_run_dir(root)
    for lost in (1, 4):  # as if the run had died while these two were in flight
        record_path(run_dir / cell(lost), "result").unlink()
    paid = len(calls(root))
    again = run(root, args + [f"--ponybench-resume={run_dir}"], env)
    assert again.returncode == 0, again.stdout[-3000:]
    rerun = sorted(c["cwd"].rsplit("/", 1)[-1] for c in calls(root)[paid:])
    assert rerun == [cell(1), cell(4)]
    assert finished_cells(run_dir) == {cell(i) for i in range(6)}


def test_ctrl_c_stops_the_pool_kills_every_tree_and_keeps_no_false_result(tmp_path):
    root = write_project(tmp_path, {"add": ADD_TASK})
    # Cells 0 and 1 finish; the others hang with a child, all at once in the pool.
    hang = {cell(i): {"mode": "hang_tree"} for i in range(2, 6)}
    env = fake_env(root, write=GOOD_ADD, cells=hang)
    args = bench_args(root, "--runs=6", "--ponybench-at-once=6", "--ponybench-timeout=300", "-n", "0")
    with Session(root, args, env) as session:
        run_dir = wait_for(lambda: run_dirs(root) and run_dirs(root)[0], 60, "the run directory", session)
        wait_for(lambda: all(fake_pids(run_dir / cell(i)) for i in range(2, 6)), 60, "four hanging cells at once", session)
        session.signal(signal.SIGINT)
        code = session.wait(60)
    assert code == pytest.ExitCode.INTERRUPTED, session.stdout[-3000:]
    left = proc_watch.wait_until_dead(proc_watch.working_in(run_dir), timeout=10)
    proc_watch.kill(left)
    assert left == [], f"processes survived: {left}"
    kept = finished_cells(run_dir)
    assert not kept & {cell(i) for i in range(2, 6)}, "a killed cell kept a result a resume would reuse"


def test_the_budget_stops_cells_the_pool_would_start(tmp_path):
    # Every cell costs $0.25 and the run may spend $0.90: cells start while 0 to 0.75 are spent,
    # so 4 run, plus at most one that started beside the fourth (2 at once); the rest skip.
    root = write_project(tmp_path, {"add": ADD_TASK})
    env = fake_env(root, write=GOOD_ADD, cost=0.25)
    done = run(root, bench_args(root, "--runs=8", "--ponybench-at-once=2", "-n", "0",
                                "--ponybench-max-cost=0.9"), env)
    assert done.returncode == 0, done.stdout[-3000:]
    ran = results(only_run_dir(root))
    assert 4 <= len(ran) <= 5 and all(r["passed"] for r in ran)
    assert len(calls(root)) == len(ran), "a cell ran that was never reported"
    assert f"{8 - len(ran)} skipped" in done.stdout
