"""How long README's test command takes on a fresh clone: clone this checkout (its committed
HEAD) into a temporary folder, link its node_modules (the pinned CLI) in, run
`python3 -m pytest -n 2` there with a JUnit XML report, and print the wall time and the
slowest files by the time their tests took (summed over both workers).

    python bench/test_suite_time.py [--quality] [--top 15] [-- PYTEST ARGS ...]

--quality: CI's second step instead (`-m "library_gate or selftest or ponybench_quality"`, .ci/run). Arguments after
`--` go to pytest (a subset: `-- tests/test_e2e.py`). The issue's limits: README's test command
at most 15 minutes on 2 cores, .ci/run at most 30. The whole suite loads both cores for its
whole run: on a machine others share, say so beside the figure.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from collections import defaultdict
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def slowest_files(junit: Path, top: int) -> list[tuple[str, float, int]]:
    """(file, seconds, tests) of the `top` files whose tests took longest, from a JUnit XML."""
    seconds: dict[str, float] = defaultdict(float)
    count: dict[str, int] = defaultdict(int)
    for case in ET.parse(junit).getroot().iter("testcase"):
        # classname is the dotted module (and class): tests.test_e2e or tests.test_x.TestY
        parts = (case.get("classname") or "?").split(".")
        name = next((".".join(parts[:i + 1]) for i, p in enumerate(parts) if p.startswith("test_")),
                    ".".join(parts))
        seconds[name] += float(case.get("time") or 0)
        count[name] += 1
    ranked = sorted(seconds.items(), key=lambda kv: -kv[1])[:top]
    return [(name, secs, count[name]) for name, secs in ranked]


def main() -> int:
    args = sys.argv[1:]
    extra: list[str] = []
    if "--" in args:
        extra = args[args.index("--") + 1:]
        args = args[:args.index("--")]
    top = int(args[args.index("--top") + 1]) if "--top" in args else 15
    command = [sys.executable, "-m", "pytest", "-n", "2"]
    if "--quality" in args:
        command += ["-m", "library_gate or selftest or ponybench_quality"]
    folder = Path(tempfile.mkdtemp(prefix="ponybench-suite-time-"))
    try:
        clone = folder / "clone"
        subprocess.run(["git", "clone", "--quiet", str(REPO), str(clone)], check=True)
        if (REPO / "node_modules").is_dir():
            (clone / "node_modules").symlink_to(REPO / "node_modules")
        junit = folder / "junit.xml"
        load = os.getloadavg()[0]
        start = time.monotonic()
        done = subprocess.run([*command, f"--junitxml={junit}", "-p", "no:cacheprovider", *extra], cwd=clone,
                              env={**os.environ, "PYTHONPATH": str(clone)}, stdin=subprocess.DEVNULL)
        wall = time.monotonic() - start
        print(f"\n{' '.join(command[1:])} {' '.join(extra)} on a fresh clone: {wall:.0f} s wall "
              f"({wall / 60:.1f} min), exit {done.returncode}; load average {load:.1f} before, "
              f"{os.getloadavg()[0]:.1f} after, on {os.cpu_count()} cores")
        if junit.is_file():
            print(f"slowest {top} files (seconds of test time, both workers summed):")
            for name, secs, n in slowest_files(junit, top):
                print(f"  {secs:8.1f} s  {n:4d} tests  {name}")
        return done.returncode
    finally:
        shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
