#!/usr/bin/env python3
"""Harness overhead per cell: seeding, the supervised CLI start, transcript parsing, checks,
metrics. The CLI is the stand-in (tests/fakes/fake_claude.py), which answers at once, so the
figures are the harness's own time. Prints figures; asserts nothing.

    python bench/cell_overhead.py [TASK ...]     (default: every task in tasks/)
"""
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from pytest_ponybench.cell import lifecycle as cell  # noqa: E402
from pytest_ponybench.specs import spec  # noqa: E402
from pytest_ponybench.rehearsal.server import rehearsal_files  # noqa: E402


def main(names: list[str]) -> None:
    fake = REPO / "tests" / "fakes" / "fake_claude.py"
    arm = spec.ArmSpec(name="baseline", path=None)
    paths = [REPO / "tasks" / f"{n}.yaml" for n in names] or sorted((REPO / "tasks").glob("*.yaml"))
    with tempfile.TemporaryDirectory(prefix="ponybench-bench-") as tmp:
        run_dir = Path(tmp)
        ctx = cell.CellContext(run_dir=run_dir, claude=str(fake), timeout=60, arms_dir=REPO / "arms")
        rows = []
        for path in paths:
            task = spec.load_task(path, REPO / "fixtures")
            script = run_dir / f"{task.name}.json"
            script.write_text(json.dumps({"write": rehearsal_files(task)}))
            os.environ["PONYBENCH_FAKE"] = str(script)
            times = []
            for run in range(3):
                start = time.perf_counter()
                record = cell.run_cell(cell.Cell(task, arm, "haiku", "claude-haiku-4-5-20251001", run), ctx)
                times.append(time.perf_counter() - start)
            rows.append((task.name, task.kind, statistics.median(times), record["passed"]))
    print(f"{'task':22} {'kind':9} {'median s/cell':>13}  passed")
    for name, kind, median, passed in rows:
        print(f"{name:22} {kind:9} {median:13.3f}  {passed}")
    print(f"\nall tasks: median {statistics.median(r[2] for r in rows):.3f} s per cell, "
          f"total {sum(r[2] for r in rows):.2f} s for one cell of each of {len(rows)} tasks")


if __name__ == "__main__":
    main(sys.argv[1:])
