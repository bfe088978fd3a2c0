"""What one cell's checks cost, per task: judge each task's good reference (exactly as a cell
is judged: every axis in its own supervised child, plus the forbidden-edit rule) a few times
and print the median wall time and CPU time (this process and every child it reaped).

    python bench/check_cost.py [TASK ...] [--tasks DIR] [--repeat 3]

--tasks: another tasks folder (an earlier commit's, extracted with `git archive`), to compare
before and after a change of the checks. The last lines estimate a rescore of 1,000 kept
workspaces spread evenly over the measured tasks, at 4 at once on this machine (the
rescore's default on 2 cores). Nothing is cached: each judgement runs every check afresh.
"""
from __future__ import annotations

import os
import resource
import statistics
import sys
import tempfile
import time
from pathlib import Path

from pytest_ponybench.cell import lifecycle as cell, workspace
from pytest_ponybench.instruments import strength
from pytest_ponybench.processes import procs

REPO = Path(__file__).resolve().parents[1]


def _server_cpu() -> float:
    """The fork server's CPU and that of every supervisor and check it has reaped: checks are
    forked by the long-lived server, so this process never reaps them itself."""
    server = procs._server
    if server is None or server.proc.poll() is not None:
        return 0.0
    fields = Path(f"/proc/{server.proc.pid}/stat").read_text().rsplit(")", 1)[1].split()
    utime, stime, cutime, cstime = (int(v) for v in fields[11:15])
    return (utime + stime + cutime + cstime) / os.sysconf("SC_CLK_TCK")


def _cpu() -> float:
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime + _server_cpu()


def judge_once(task) -> tuple[float, float]:
    with tempfile.TemporaryDirectory(prefix=f"ponybench-cost-{task.name}-") as tmp:
        workspace.seed(task, Path(tmp), files=task.refs.good)
        wall, cpu = time.perf_counter(), _cpu()
        cell.judge(task, Path(tmp))
        return time.perf_counter() - wall, _cpu() - cpu


def main() -> int:
    args = sys.argv[1:]
    tasks_dir, repeat = REPO / "tasks", 3
    if "--tasks" in args:
        at = args.index("--tasks")
        tasks_dir = Path(args[at + 1]).resolve()
        del args[at:at + 2]
    if "--repeat" in args:
        at = args.index("--repeat")
        repeat = int(args[at + 1])
        del args[at:at + 2]
    tasks = [t for t in strength.load_tasks(tasks_dir, tasks_dir.parent / "fixtures", set(args) or None) if t.refs]
    walls, cpus = [], []
    print(f"{'task':<22} {'wall s':>8} {'cpu s':>8}   (median of {repeat})")
    for task in tasks:
        judge_once(task)  # warm: the fork server, the reference copy
        runs = [judge_once(task) for _ in range(repeat)]
        wall, cpu = statistics.median(r[0] for r in runs), statistics.median(r[1] for r in runs)
        walls.append(wall)
        cpus.append(cpu)
        print(f"{task.name:<22} {wall:8.2f} {cpu:8.2f}")
    if tasks:
        mean_wall, mean_cpu = statistics.mean(walls), statistics.mean(cpus)
        print(f"mean per cell: {mean_wall:.2f} s wall, {mean_cpu:.2f} s CPU; slowest {max(walls):.2f} s")
        print(f"1,000 cells over these tasks, 4 at once on 2 cores: about {1000 * max(mean_cpu / 2, mean_wall / 4):.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
