#!/usr/bin/env python3
"""What the installed plugin costs a project that never asked for it: a one-test pytest
session in a repository with an Ansible-style `tasks/main.yml`, with the plugin loaded and
with `-p no:ponybench`, run alternately N times each. Prints the median wall and CPU time
of each, [lowest-highest], and their ratios; asserts nothing (issue 37 asks for at most 1.10).

    python bench/inert_load.py [--n 15] [--root CHECKOUT]

The checkout measured is put first on PYTHONPATH, so its plugin is the one pytest loads
whatever is installed. Both sides run with `-p no:cacheprovider`, so neither writes a cache.
"""
from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def ansible_project(root: Path) -> Path:
    """A repository with a playbook's tasks folder and one ordinary test."""
    (root / "tasks").mkdir()
    (root / "tasks" / "main.yml").write_text("- name: install\n  apt:\n    name: nginx\n")
    (root / "tests").mkdir()
    (root / "tests" / "test_one.py").write_text("def test_one():\n    assert 1 + 1 == 2\n")
    (root / "pytest.ini").write_text("[pytest]\n")
    return root


def children_cpu() -> float:
    used = resource.getrusage(resource.RUSAGE_CHILDREN)
    return used.ru_utime + used.ru_stime


def session(root: Path, env: dict, extra: list[str]) -> tuple[float, float]:
    """(wall, CPU) seconds of one `pytest -q` session; stops the bench if it does not pass its
    one test. CPU is what the session's process used: on a loaded machine it moves far less
    than the wall time does."""
    start, cpu = time.perf_counter(), children_cpu()
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *extra],
                          cwd=root, env=env, capture_output=True, text=True)
    seconds = (time.perf_counter() - start, children_cpu() - cpu)
    if done.returncode != 0 or "1 passed" not in done.stdout:
        sys.exit(f"the session did not pass its one test ({' '.join(extra) or 'plugin loaded'}):\n"
                 + done.stdout[-2000:] + done.stderr[-2000:])
    return seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=15, help="sessions per side (default 15)")
    parser.add_argument("--root", type=Path, default=Path(__file__).resolve().parents[1],
                        help="the checkout whose plugin is measured (default: this one)")
    args = parser.parse_args()
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(args.root.resolve()),
                                                                       os.environ.get("PYTHONPATH")]))}
    sides = {"plugin loaded": [], "-p no:ponybench": []}
    with tempfile.TemporaryDirectory(prefix="ponybench-inert-") as tmp:
        root = ansible_project(Path(tmp))
        session(root, env, [])  # warm the page cache and the bytecode of both sides
        for _ in range(args.n):
            sides["plugin loaded"].append(session(root, env, []))
            sides["-p no:ponybench"].append(session(root, env, ["-p", "no:ponybench"]))
    for index, kind in enumerate(("wall", "CPU")):
        medians = {}
        for name, runs in sides.items():
            times = [run[index] for run in runs]
            medians[name] = statistics.median(times)
            print(f"{kind:4} {name:18} {medians[name]:.3f} s  [{min(times):.3f}-{max(times):.3f}]  (median of {args.n})")
        ratio = medians["plugin loaded"] / medians["-p no:ponybench"]
        print(f"{kind:4} ratio              {ratio:.2f}  (the plugin adds {100 * (ratio - 1):+.0f}%; at most +10% asked)")


if __name__ == "__main__":
    main()
