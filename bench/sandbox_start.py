#!/usr/bin/env python3
"""What the agent's sandbox costs a cell: the start of a program that does nothing (/bin/true),
bare and wrapped as a cell's CLI is (confine.confine), and the once-per-process trial that
decides whether the sandbox works. Wall and CPU (this process's children) per start, the
median of N. Prints figures; asserts nothing.

    python bench/sandbox_start.py [--n 30] [--root CHECKOUT]
"""
from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def timed(argv: list[str], cwd: Path, n: int) -> tuple[float, float]:
    """(median wall ms, mean child CPU ms) of `n` runs of argv."""
    walls = []
    cpu0 = os.times()
    for _ in range(n):
        start = time.perf_counter()
        subprocess.run(argv, cwd=cwd, check=True, stdin=subprocess.DEVNULL)
        walls.append((time.perf_counter() - start) * 1000)
    cpu1 = os.times()
    cpu = (cpu1.children_user - cpu0.children_user) + (cpu1.children_system - cpu0.children_system)
    return statistics.median(walls), cpu * 1000 / n


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=30)
    parser.add_argument("--root", default=str(Path(__file__).resolve().parents[1]))
    args = parser.parse_args()
    sys.path.insert(0, args.root)
    from pytest_ponybench.cell import confine as confinement

    start = time.perf_counter()
    box = confinement.sandbox()
    trial_ms = (time.perf_counter() - start) * 1000
    if not box.works:
        print(f"no sandbox here: {box.problem}")
        return 0
    folder = Path(tempfile.mkdtemp(prefix="ponybench-sandbox-bench-"))
    try:
        ws = folder / "runs" / "run" / "cell"
        ws.mkdir(parents=True)
        bare = ["/bin/true"]
        boxed = confinement.confine(bare, ws, dict(os.environ), run_dir=ws.parent)
        print(f"trial (once per process): {trial_ms:.0f} ms; sandbox as uid "
              f"{confinement.SANDBOX_UID if box.own_user else os.getuid()}; load average {os.getloadavg()[0]:.1f}")
        for name, argv in (("bare", bare), ("confined", boxed)):
            wall, cpu = timed(argv, ws, args.n)
            print(f"{name:9s} start of /bin/true: {wall:6.1f} ms wall (median of {args.n}), {cpu:5.1f} ms CPU")
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
