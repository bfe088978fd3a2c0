#!/usr/bin/env python3
"""Where one cell's harness time goes: timers around the functions `cell.run_cell` calls
(fresh workspace, seed, snapshot, agent start and wait, transcript, the checks, metrics,
spend ledger, record files), with the stand-in CLI (tests/fakes/fake_claude.py) answering at
once, so every figure is the harness's own. Prints a table; asserts nothing.

    python bench/cell_breakdown.py [--cells 40] [--task add] [--root CHECKOUT]

`--root` measures another checkout of the plugin (e.g. an earlier commit, for a before and
after); the task is one of its tasks/ (default: a small built-in task).
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path
from types import SimpleNamespace

HERE = Path(__file__).resolve().parents[1]
ADD = """\
description: add two numbers
file: add.py
prompt: Write add(a, b) in add.py.
checks:
  correct: |
    add = find_function(load(FILE), "add")
    assert add(2, 3) == 5, "add(2, 3) is not 5"
  safe: |
    add = find_function(load(FILE), "add")
    assert add(-1, 1) == 0
refs:
  axis: correct
  good: |
    def add(a, b):
        return a + b
  bad: |
    def add(a, b):
        return a - b
"""


def timed(table: dict, label: str, function):
    def wrapper(*args, **kwargs):
        start = time.perf_counter()
        try:
            return function(*args, **kwargs)
        finally:
            table[label].append(time.perf_counter() - start)
    return wrapper


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cells", type=int, default=40)
    parser.add_argument("--task", default=None, help="a task of ROOT/tasks (default: a built-in add task)")
    parser.add_argument("--root", type=Path, default=HERE, help="the plugin checkout to measure")
    args = parser.parse_args()
    root = args.root.resolve()
    sys.path.insert(0, str(root))
    from pytest_ponybench.cell import agent, lifecycle as cell, workspace
    from pytest_ponybench.scoring import checks, metrics
    from pytest_ponybench.specs import spec
    from pytest_ponybench.store import rundir
    from pytest_ponybench.rehearsal.server import rehearsal_files

    fake = HERE / "tests" / "fakes" / "fake_claude.py"
    table: dict[str, list[float]] = defaultdict(list)
    with tempfile.TemporaryDirectory(prefix="ponybench-breakdown-") as tmp:
        tmp = Path(tmp)
        if args.task:
            task_path = root / "tasks" / f"{args.task}.yaml"
        else:
            task_path = tmp / "add.yaml"
            task_path.write_text(ADD)
        task = spec.load_task(task_path, root / "fixtures")
        script = tmp / "fake.json"
        script.write_text(json.dumps({"write": rehearsal_files(task)}))
        os.environ.update(PONYBENCH_FAKE=str(script), IS_SANDBOX="1")
        run_dir = tmp / "run"
        run_dir.mkdir()
        # The plugin's default hooks (plugin.py): the CLI's own environment, no arm to prove.
        hook = SimpleNamespace(pytest_ponybench_agent_env=lambda **_: {}, pytest_ponybench_prove_arm=lambda **_: None)
        ctx = cell.CellContext(run_dir=rundir.RunDir(run_dir), claude=str(fake), timeout=60, arms_dir=root / "arms",
                               hook=hook)
        arm = spec.ArmSpec(name="baseline", path=None)

        for module, name, label in [
            (workspace, "fresh", "fresh workspace"), (workspace, "seed", "seed"),
            (workspace, "watch_beside", "watch beside"), (agent, "run", "agent start+wait"),
            (agent, "bound_file", "bound transcript"), (agent, "read_transcript", "transcript"),
            (checks, "run_checks", "checks (all axes)"), (metrics, "cell_stats", "metrics"),
            (rundir.RunDir, "record_spend", "spend ledger"), (cell, "_write_json", "record files"),
        ]:
            if hasattr(module, name):
                setattr(module, name, timed(table, label, getattr(module, name)))
        total = []
        cell.run_cell(cell.Cell(task, arm, "haiku", "claude-haiku-4-5-20251001", 999), ctx)  # warm up
        table.clear()
        cpu0 = os.times()
        for run in range(args.cells):
            start = time.perf_counter()
            record = cell.run_cell(cell.Cell(task, arm, "haiku", "claude-haiku-4-5-20251001", run), ctx)
            total.append(time.perf_counter() - start)
            assert record["passed"], record["failure"]
        from pytest_ponybench.processes import procs
        if hasattr(procs, "stop_server"):  # its CPU (and its children's) counts once it is reaped
            procs.stop_server()
        cpu1 = os.times()

        direct = []
        for _ in range(10):
            start = time.perf_counter()
            with open(tmp / "direct.out", "wb") as out:
                subprocess.run(agent.build_argv(str(fake), task.prompt, "claude-haiku-4-5-20251001",
                                                "", None, None), cwd=run_dir / cell.Cell(task, arm, "haiku", "x", 0).id,
                               stdout=out, stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL,
                               env=agent.agent_env({}))
            direct.append(time.perf_counter() - start)

    print(f"plugin at {root}; task {task.name}; {args.cells} cells, one at a time, instant stand-in CLI")
    print(f"{'step':20} {'calls/cell':>10} {'median ms':>10} {'ms/cell':>8}")
    for label, times in table.items():
        per_cell = sum(times) / args.cells * 1000
        print(f"{label:20} {len(times) / args.cells:10.1f} {statistics.median(times) * 1000:10.1f} {per_cell:8.1f}")
    print(f"{'whole cell':20} {1:10.1f} {statistics.median(total) * 1000:10.1f} {sum(total) / args.cells * 1000:8.1f}")
    print(f"the stand-in started directly (no harness): median {statistics.median(direct) * 1000:.1f} ms")
    cpu = (cpu1.user - cpu0.user) + (cpu1.system - cpu0.system)
    child_cpu = (cpu1.children_user - cpu0.children_user) + (cpu1.children_system - cpu0.children_system)
    print(f"CPU per cell: harness process {cpu / args.cells * 1000:.0f} ms, "
          f"waited-for children {child_cpu / args.cells * 1000:.0f} ms (the stand-in CLI included)")


if __name__ == "__main__":
    main()
