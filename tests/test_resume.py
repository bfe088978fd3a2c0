"""Resume: a run killed in the middle loses at most the cells in flight, and
`--ponybench-resume=RUN_DIR` finishes it without paying for any finished cell again.

The key proof goes through the real CLI in rehearsal, behind a wrapper that logs each agent
invocation: SIGKILL the whole pytest process group once a cell has finished and another is
running, check nothing of the run is left alive, resume, and count the invocations.
"""
from __future__ import annotations

import signal
import xml.etree.ElementTree as ET

import pytest

from support import proc_watch
from support.benchproc import (
    ADD_TASK, GOOD_ADD, Session, bench_args, by_cell, calls, counting_claude, fake_env, fake_pids,
    finished_cells, invocations, only_run_dir, results, run, run_dirs, summary, wait_for, write_project,
)
from support.records import record_data

# The scripted model holds each answer PONY_STALL seconds times (run + 1): cells slow enough
# to be caught in flight, and parallel ones that never finish together. The resume runs
# without it.
STALL_CONFTEST = """\
import os

def pytest_ponybench_rehearsal_script(cell, script):
    if os.environ.get("PONY_STALL"):
        script.stall_seconds = float(os.environ["PONY_STALL"]) * (cell.run + 1)
"""


def assert_nothing_left(run_dir, pids=()) -> None:
    """No process works inside the run directory, and none of `pids` lives."""
    left = proc_watch.wait_until_dead(proc_watch.working_in(run_dir) + list(pids), timeout=10)
    proc_watch.kill(left)
    assert left == [], f"processes of the killed run survived: {left}"


def junit_cells(path) -> list[str]:
    cells = []
    for case in ET.parse(path).getroot().iter("testcase"):
        props = {p.get("name"): p.get("value") for p in case.iter("property")}
        cells.append(props.get("cell"))
    return cells


@pytest.mark.parametrize("workers", [0, 2], ids=["n0", "n2"])
def test_sigkill_mid_run_then_resume_scores_every_cell_once_and_pays_none_twice(tmp_path, claude_bin, workers):
    n_cells = 4 if workers == 0 else 5
    cells = {f"add__baseline__haiku__{i}" for i in range(n_cells)}
    root = write_project(tmp_path, {"add": ADD_TASK}, conftest=STALL_CONFTEST)
    wrapper, log = counting_claude(tmp_path, claude_bin)
    args = bench_args(root, "--ponybench-rehearse", f"--runs={n_cells}", "-n", str(workers), claude=wrapper)

    with Session(root, args, {"PONY_STALL": "1"}, name="first") as first:
        run_dir = wait_for(lambda: run_dirs(root) and run_dirs(root)[0], 120, "the run directory", first)
        # One cell finished and another one's CLI already started: the kill hits a cell in flight.
        wait_for(lambda: finished_cells(run_dir) and len(invocations(log)) > len(finished_cells(run_dir)),
                 120, "a finished cell and one in flight", first)
        first.kill()  # SIGKILL to the controller and its workers: no handler, no finally runs
    assert_nothing_left(run_dir)

    finished = finished_cells(run_dir)
    first_calls = invocations(log)
    in_flight = len(first_calls) - len(finished)
    assert 0 < len(finished) < n_cells
    assert 1 <= in_flight <= max(workers, 1), (first_calls, finished)
    assert set(first_calls) >= finished

    junit = tmp_path / "resume.xml"
    done = run(root, bench_args(root, "--ponybench-rehearse", f"--runs={n_cells}", "-n", str(workers),
                                f"--ponybench-resume={run_dir}", f"--junitxml={junit}", claude=wrapper))
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    assert run_dirs(root) == [run_dir], "a resume continues its run, it does not start another"

    resume_calls = invocations(log)[len(first_calls):]
    # No finished cell paid twice: the resume invoked the CLI once for each unfinished cell.
    assert sorted(resume_calls) == sorted(cells - finished)
    assert len(invocations(log)) == n_cells + in_flight

    records = by_cell(results(run_dir))  # every cell once
    assert set(records) == cells
    assert all(r["status"] == "finished" and r["passed"] for r in records.values())
    assert {c for c, r in records.items() if r["reused"]} == finished
    assert summary(run_dir)["cells"] == n_cells
    assert sorted(junit_cells(junit)) == sorted(cells)
    # The resume says what it ran and what it reported from the kept run, and what is left.
    left = n_cells - len(finished)
    assert f"ran {left} cells; {len(finished)} more finished earlier (reported from the kept run)" in done.stdout
    assert (f"ponybench: {left} cells to run in {run_dir} ({len(finished)} of {n_cells} finished earlier: "
            f"reported from the kept run, not paid again)") in done.stdout


def test_sigterm_keeps_finished_results_writes_the_summary_and_leaves_no_process(tmp_path):
    root = write_project(tmp_path, {"add": ADD_TASK})
    cells = [f"add__baseline__haiku__{i}" for i in range(3)]
    env = fake_env(root, write=GOOD_ADD, cells={cells[1]: {"mode": "hang_tree"}})
    args = bench_args(root, "--runs=3", "--ponybench-timeout=300")

    with Session(root, args, env) as first:
        run_dir = wait_for(lambda: run_dirs(root) and run_dirs(root)[0], 60, "the run directory", first)
        hanging = run_dir / cells[1]
        child = wait_for(lambda: fake_pids(hanging),
                         60, "the hanging cell's child", first)
        first.signal(signal.SIGTERM)
        code = first.wait(60)
    assert code == pytest.ExitCode.INTERRUPTED, first.stdout[-3000:]
    assert_nothing_left(run_dir, child)

    assert [r["cell"] for r in results(run_dir)] == [cells[0]]
    assert results(run_dir)[0]["passed"]
    assert summary(run_dir)["cells"] == 1
    assert finished_cells(run_dir) == {cells[0]}

    # The resume runs the interrupted cell from a fresh seed and the one never started.
    paid = len(calls(root))
    fake_env(root, write=GOOD_ADD)
    done = run(root, args + [f"--ponybench-resume={run_dir}"], env)
    assert done.returncode == 0, done.stdout[-3000:]
    assert sorted(c["cwd"].rsplit("/", 1)[-1] for c in calls(root)[paid:]) == cells[1:]
    records = by_cell(results(run_dir))
    assert sorted(records) == cells and all(r["passed"] for r in records.values())
    assert not (run_dir / cells[1] / "_ponybench.stderr.txt").read_text().count("fake-pid")


def test_a_changed_task_spec_reruns_its_cells_and_keeps_the_old_workspace_aside(tmp_path):
    mul = {"file": "mul.py", "prompt": "Write mul(a, b) in mul.py.",
           "checks": {"correct": 'assert find_function(load(FILE), "mul")(2, 3) == 6, "mul(2, 3) is not 6"\n'},
           "refs": {"axis": "correct", "good": "def mul(a, b):\n    return a * b\n",
                    "bad": "def mul(a, b):\n    return a + b\n"}}
    root = write_project(tmp_path, {"add": ADD_TASK, "mul": mul})
    env = fake_env(root, write={**GOOD_ADD, "mul.py": "def mul(a, b):\n    return a * b\n"})
    args = bench_args(root, "--runs=2")
    first = run(root, args, env)
    assert first.returncode == 0, first.stdout[-3000:]
    run_dir = only_run_dir(root)
    old = by_cell(results(run_dir))
    assert len(old) == 4

    changed = dict(ADD_TASK, prompt="Write add(a, b) in add.py, and mind negative numbers.")
    write_project(root, {"add": changed, "mul": mul})
    paid = len(calls(root))
    done = run(root, args + [f"--ponybench-resume={run_dir}"], env)
    assert done.returncode == 0, done.stdout[-3000:]

    add_cells = sorted(c for c in old if c.startswith("add__"))
    assert sorted(c["cwd"].rsplit("/", 1)[-1] for c in calls(root)[paid:]) == add_cells
    new = by_cell(results(run_dir))
    assert set(new) == set(old)
    for cell, record in new.items():
        if cell.startswith("add__"):
            assert not record["reused"] and record["spec_hash"] != old[cell]["spec_hash"]
            stale = run_dir / f"{cell}.stale-{old[cell]['spec_hash']}"
            kept = record_data(stale, "result")
            assert kept["spec_hash"] == old[cell]["spec_hash"], "the paid-for workspace is kept aside"
        else:
            assert record["reused"] and record["spec_hash"] == old[cell]["spec_hash"]
    assert summary(run_dir)["cells"] == 4


def test_sigkill_of_the_controller_alone_under_xdist_leaves_nothing_running_and_resumes(tmp_path):
    """The OOM killer picks the controller, not its group: the workers lose their channel
    and exit, and each agent's supervisor follows its worker."""
    root = write_project(tmp_path, {"add": ADD_TASK})
    cells = [f"add__baseline__haiku__{i}" for i in range(6)]
    env = fake_env(root, write=GOOD_ADD, mode="sleep_then_ok", sleep=0.5, cells={cells[1]: {"mode": "hang_tree"}})
    args = bench_args(root, "--runs=6", "--ponybench-timeout=300", "-n", "2")

    with Session(root, args, env) as first:
        run_dir = wait_for(lambda: run_dirs(root) and run_dirs(root)[0], 60, "the run directory", first)
        hanging = run_dir / cells[1]
        child = wait_for(lambda: finished_cells(run_dir) and fake_pids(hanging), 60, "a finished cell and the hanging one's child", first)
        first.signal(signal.SIGKILL)
        first.proc.wait(30)
        # The workers notice on their own; nothing of the run may stay alive for long.
        wait_for(lambda: not proc_watch.working_in(run_dir) and not proc_watch.alive(child[0]), 30,
                 "the workers and their agents to die")
    finished = finished_cells(run_dir)
    assert cells[1] not in finished and len(finished) < len(cells)

    paid = len(calls(root))
    fake_env(root, write=GOOD_ADD)
    done = run(root, args + [f"--ponybench-resume={run_dir}"], env)
    assert done.returncode == 0, done.stdout[-3000:]
    assert sorted(c["cwd"].rsplit("/", 1)[-1] for c in calls(root)[paid:]) == sorted(set(cells) - finished)
    records = by_cell(results(run_dir))
    assert sorted(records) == cells and all(r["passed"] for r in records.values())
