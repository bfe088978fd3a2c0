#!/usr/bin/env python3
"""A rescore of an unchanged rehearsal, beside the original script's `--selftest`.

    python bench/rescore_unchanged.py [--base DIR] [--repeat 3] [--claude PATH | --stand-in]

Makes (once; kept in --base and reused by later calls) a rehearsal of every shipped task and
arm through the pinned CLI (`pytest --ponybench --ponybench-rehearse -n 2`: 20 tasks x 4 arms,
80 cells), then times `pytest --ponybench-rescore` of it --repeat times. Nothing changed, so
each cell's kept verdicts hold (cell/lifecycle.judged) and no check runs. Prints the median
wall time of the rescore, of the original script's `python run.py --selftest` (read from
../shared/seed/ beside the checkout, or --script-dir) and their ratio; issue 37 asks for at
most 4x. Asserts nothing.

--stand-in makes the run with tests/fakes/fake_claude.py instead of the real CLI (no node
needed; its cells fail their checks, which are judged and kept all the same).
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

REPO = Path(__file__).resolve().parents[1]
QUIET = ["-p", "no:cacheprovider", "-p", "no:hypothesispytest", "-p", "no:benchmark"]


def project(base: Path) -> Path:
    """A benchmark project of the shipped tasks and arms (links to the checkout's)."""
    root = base / "project"
    if not root.is_dir():
        root.mkdir(parents=True)
        for name in ("tasks", "arms", "fixtures"):
            (root / name).symlink_to(REPO / name)
        (root / "pytest.ini").write_text("[pytest]\ntestpaths = tasks\n")
        (root / "conftest.py").write_text('import sys\n\nsys.modules["matplotlib"] = None  # no plots\n')
    return root


def pytest(root: Path, args: list[str]) -> tuple[float, subprocess.CompletedProcess]:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTEST_ADDOPTS", "PYTEST_XDIST_WORKER")}
    # This checkout's plugin, whichever one is installed.
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), env.get("PYTHONPATH", "")) if p)
    started = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "pytest", *QUIET, *args], cwd=root, env=env,
                          capture_output=True, text=True)
    return time.monotonic() - started, done


def the_run(root: Path, claude: str) -> Path:
    runs = root / "runs"
    found = sorted(p for p in runs.glob("*") if (p / "results.jsonl").is_file()) if runs.is_dir() else []
    if found:
        return found[-1]
    print(f"making the rehearsal in {runs} (once) ...", flush=True)
    wall, done = pytest(root, ["--ponybench", "--ponybench-rehearse", "-n", "2", f"--ponybench-claude={claude}",
                               f"--ponybench-dir={runs}"])
    found = sorted(p for p in runs.glob("*") if (p / "results.jsonl").is_file()) if runs.is_dir() else []
    if not found:
        sys.exit(f"the rehearsal made no run (exit {done.returncode}):\n{done.stdout[-3000:]}\n{done.stderr[-2000:]}")
    cells = sum(1 for _ in open(found[-1] / "results.jsonl"))
    print(f"rehearsal: {cells} cells in {wall:.0f} s (exit {done.returncode})", flush=True)
    return found[-1]


def script_selftest(seed: Path) -> float:
    """Wall seconds of the original script's `--selftest`, run from a temporary copy."""
    with tempfile.TemporaryDirectory(prefix="ponybench-script-") as tmp:
        folder = Path(tmp) / "benchmarks" / "agentic"
        folder.mkdir(parents=True)
        lines = (seed / "run.py.txt").read_text().splitlines(keepends=True)
        (folder / "run.py").write_text("".join(lines[3:]))  # without the upload's page header
        shutil.copy(seed / "tasks.py.txt", folder / "tasks.py")
        started = time.monotonic()
        done = subprocess.run([sys.executable, "run.py", "--selftest"], cwd=folder, capture_output=True, text=True)
        wall = time.monotonic() - started
        if done.returncode != 0:
            sys.exit(f"the script's selftest failed:\n{done.stdout[-2000:]}{done.stderr[-2000:]}")
        return wall


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base", type=Path, default=Path(tempfile.gettempdir()) / "ponybench-rescore-bench")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--claude", default=str(REPO / "node_modules" / ".bin" / "claude"))
    parser.add_argument("--stand-in", action="store_true", help="make the run with tests/fakes/fake_claude.py")
    parser.add_argument("--script-dir", type=Path, default=REPO.parent.parent / "shared" / "seed")
    args = parser.parse_args()
    claude = str(REPO / "tests" / "fakes" / "fake_claude.py") if args.stand_in else args.claude
    root = project(args.base)
    run = the_run(root, claude)
    rescores = []
    for _ in range(args.repeat):
        wall, done = pytest(root, [f"--ponybench-rescore={run}"])
        if done.returncode not in (0, 1):  # 1: some cells failed their checks, as in the run
            sys.exit(f"the rescore failed (exit {done.returncode}):\n{done.stdout[-3000:]}\n{done.stderr[-2000:]}")
        rescores.append(wall)
    script = statistics.median(script_selftest(args.script_dir) for _ in range(args.repeat))
    rescore = statistics.median(rescores)
    print(f"rescore of an unchanged {run.name} ({sum(1 for _ in open(run / 'results.jsonl'))} cells): "
          f"{rescore:.2f} s (median of {args.repeat}: {', '.join(f'{w:.2f}' for w in rescores)})")
    print(f"original script's --selftest: {script:.2f} s")
    print(f"ratio: {rescore / script:.1f}x (issue 37: at most 4x)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
