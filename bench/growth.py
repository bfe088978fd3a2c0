#!/usr/bin/env python3
"""Does a cell's own work grow with the run? Cells run one at a time (cell.run_cell, the
instant stand-in CLI tests/fakes/fake_claude.py) in run directories already holding 100,
1,000 and 10,000 other cells (empty cell folders with their records folder, and a ledger and
results file of that many lines), and this prints, per size, the harness process's CPU per
cell (the stand-in and the checks' children not included) and the directory entries the
harness process read per cell (os.scandir and os.listdir, counted). Asserts nothing.

    python bench/growth.py [--sizes 100,1000,10000] [--cells 20] [--root CHECKOUT]

`--root` measures another checkout (a before and after). A flat line is the goal; the first
cell of each size is a warm-up (a process lists the run directory once, see beside.py).
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from types import SimpleNamespace

HERE = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(HERE / "bench"))
from cell_breakdown import ADD  # noqa: E402  the same small task


class _CountedEntries:
    """What os.scandir returns, counting each entry as it is read."""

    def __init__(self, counter: "Counter", inner):
        self.counter, self.inner = counter, inner

    def __iter__(self):
        return self

    def __next__(self):  # an iterator, as os.scandir's is: os.walk calls next() on it
        entry = next(self.inner)
        self.counter.entries += 1
        return entry

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.inner.close()

    def close(self):
        self.inner.close()


class Counter:
    """Wraps os.scandir and os.listdir, counting the entries they give (tests/test_flat_cells
    counts with it too)."""

    def __init__(self):
        self.entries = 0
        self._scandir, self._listdir = os.scandir, os.listdir

    def scandir(self, *args):
        return _CountedEntries(self, self._scandir(*args))

    def listdir(self, *args):
        names = self._listdir(*args)
        self.entries += len(names)
        return names

    def install(self):
        os.scandir, os.listdir = self.scandir, self.listdir


def fill(run_dir: Path, size: int, rundir) -> None:
    records = run_dir / rundir.RECORDS
    for n in range(size):
        name = f"other__baseline__haiku__{n}"
        (run_dir / name).mkdir()
        (records / name).mkdir(parents=True)
    with open(run_dir / rundir.SPEND, "w") as ledger, open(run_dir / rundir.RESULTS, "w") as results:
        for n in range(size):
            ledger.write(json.dumps({"cell": f"other__baseline__haiku__{n}", "cost_usd": 0.01}) + "\n")
            results.write(json.dumps({"cell": f"other__baseline__haiku__{n}", "task": "other", "arm": "baseline",
                                      "model": "haiku", "status": "finished"}) + "\n")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="100,1000,10000")
    parser.add_argument("--cells", type=int, default=20)
    parser.add_argument("--root", type=Path, default=HERE, help="the plugin checkout to measure")
    args = parser.parse_args()
    root = args.root.resolve()
    sys.path.insert(0, str(root))
    from pytest_ponybench.cell import lifecycle as cell
    from pytest_ponybench.specs import spec
    from pytest_ponybench.store import rundir
    from pytest_ponybench.rehearsal.server import rehearsal_files

    counter = Counter()
    counter.install()
    fake = HERE / "tests" / "fakes" / "fake_claude.py"
    print(f"plugin at {root}; {args.cells} cells per size, one at a time, instant stand-in CLI; "
          f"load {os.getloadavg()[0]:.2f} on {os.cpu_count()} cores")
    print(f"{'cells in run':>12} {'CPU ms/cell':>12} {'spread':>14} {'entries read/cell':>18}")
    for size in [int(s) for s in args.sizes.split(",")]:
        with tempfile.TemporaryDirectory(prefix="ponybench-growth-") as tmp:
            tmp = Path(tmp)
            task_path = tmp / "add.yaml"
            task_path.write_text(ADD)
            task = spec.load_task(task_path, root / "fixtures")
            script = tmp / "fake.json"
            script.write_text(json.dumps({"write": rehearsal_files(task)}))
            os.environ.update(PONYBENCH_FAKE=str(script), IS_SANDBOX="1", PONYBENCH_KEY_DIR=str(tmp / "keys"))
            run = rundir.RunDir.create(tmp / "runs")
            fill(run.path, size, rundir)
            hook = SimpleNamespace(pytest_ponybench_agent_env=lambda **_: {},
                                   pytest_ponybench_prove_arm=lambda **_: None)
            ctx = cell.CellContext(run_dir=run, claude=str(fake), timeout=60, arms_dir=root / "arms", hook=hook)
            arm = spec.ArmSpec(name="baseline", path=None)
            cell.run_cell(cell.Cell(task, arm, "haiku", "claude-haiku-4-5-20251001", 999), ctx)  # warm-up
            cpu, entries = [], []
            for n in range(args.cells):
                one = cell.Cell(task, arm, "haiku", "claude-haiku-4-5-20251001", n)
                before_entries, t0 = counter.entries, time.process_time()
                record = cell.run_cell(one, ctx)
                cpu.append(time.process_time() - t0)
                entries.append(counter.entries - before_entries)
                assert record["passed"], record["failure"]
            ms = sorted(c * 1000 for c in cpu)
            print(f"{size:12,} {statistics.median(ms):12.1f} {ms[len(ms) // 4]:6.1f}-{ms[3 * len(ms) // 4]:<6.1f} "
                  f"{statistics.median(entries):18.0f}", flush=True)


if __name__ == "__main__":
    main()
