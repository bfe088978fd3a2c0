#!/usr/bin/env python3
"""A user's loops, side by side with the original script's `--selftest` on the same machine:
the first and second `pytest -m selftest` (an empty proof cache, then the one it filled), the
README's benchmark command (a rehearsal of every shipped task and arm through the pinned
CLI), and a rescore of that unchanged rehearsal. Prints each wall time and its ratio to the
script's; asserts nothing. Issue 37 asks: cold selftest at most 40x, warm at most 4x, the
rescore at most 4x, and the benchmark command what README says.

    python bench/user_loops.py [--n 3] [--workers 0] [--claude PATH | --stand-in] [--script-dir DIR]

Every run is a user's project: an empty folder for the selftest (the shipped library is what
it proves), a folder linking the checkout's tasks/, arms/ and fixtures/ for the benchmark
command, this checkout first on PYTHONPATH, PONYBENCH_CACHE_DIR a fresh folder. The script is
copied from ../shared/seed/ (run.py.txt without its three header lines, tasks.py.txt beside
it) into a temporary benchmarks/agentic/ and run there, as the seed's README says. A run that
fails is timed all the same, its last lines printed (the figure still says what it cost).
"""
from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SEEDS = (REPO.parent.parent / "shared" / "seed", REPO.parent / "shared" / "seed", Path("/work/shared/seed"))
QUIET = ["-q", "-p", "no:cacheprovider"]


def timed(argv: list[str], cwd: Path, env: dict | None = None) -> float:
    started = time.perf_counter()
    done = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True)
    seconds = time.perf_counter() - started
    if done.returncode not in (0, 1) or (done.returncode == 1 and "--ponybench" not in " ".join(argv)):
        print(f"FAILED (exit {done.returncode}, {seconds:.1f} s): {' '.join(argv[2:])}\n"
              + "\n".join((done.stdout + done.stderr).splitlines()[-4:]))
    return seconds


def script_selftest(seed: Path, tmp: Path) -> float:
    folder = tmp / "script" / "benchmarks" / "agentic"
    if not folder.is_dir():
        folder.mkdir(parents=True)
        lines = (seed / "run.py.txt").read_text(encoding="utf-8").splitlines(keepends=True)
        (folder / "run.py").write_text("".join(lines[3:]), encoding="utf-8")
        (folder / "tasks.py").write_text((seed / "tasks.py.txt").read_text(encoding="utf-8"), encoding="utf-8")
    return timed([sys.executable, "run.py", "--selftest"], folder)


def benchmark_project(tmp: Path) -> Path:
    root = tmp / "bench-project"
    root.mkdir()
    for name in ("tasks", "arms", "fixtures"):
        (root / name).symlink_to(REPO / name)
    (root / "pytest.ini").write_text("[pytest]\ntestpaths = tasks\n")
    return root


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=3, help="runs of the script, the warm selftest and the rescore")
    parser.add_argument("--workers", type=int, default=0, help="xdist workers for the selftest (README: none)")
    parser.add_argument("--claude", default=str(REPO / "node_modules" / ".bin" / "claude"))
    parser.add_argument("--stand-in", action="store_true", help="the benchmark command with tests/fakes/fake_claude.py")
    parser.add_argument("--script-dir", type=Path, default=None, help="the seed folder (run.py.txt, tasks.py.txt)")
    args = parser.parse_args()
    seed = args.script_dir or next((s for s in SEEDS if (s / "run.py.txt").is_file()), None)
    if seed is None:
        sys.exit("the original script's seed folder was not found; give --script-dir")
    claude = str(REPO / "tests" / "fakes" / "fake_claude.py") if args.stand_in else args.claude
    with tempfile.TemporaryDirectory(prefix="ponybench-user-loops-") as name:
        tmp = Path(name)
        env = {k: v for k, v in os.environ.items() if k not in ("PYTEST_ADDOPTS", "PYTEST_XDIST_WORKER")}
        env["PONYBENCH_CACHE_DIR"] = str(tmp / "cache")
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))
        script = statistics.median(script_selftest(seed, tmp) for _ in range(args.n))
        empty = tmp / "project"
        empty.mkdir()
        selftest = [sys.executable, "-m", "pytest", "-m", "selftest", *QUIET]
        selftest += ["-n", str(args.workers)] if args.workers else []
        cold = timed(selftest, empty, env)
        warm = statistics.median(timed(selftest, empty, env) for _ in range(args.n))
        root = benchmark_project(tmp)
        runs = root / "runs"
        bench = timed([sys.executable, "-m", "pytest", *QUIET, "--ponybench", "--ponybench-rehearse", "-n", "2",
                       f"--ponybench-claude={claude}", f"--ponybench-dir={runs}"], root, env)
        made = sorted(p for p in runs.glob("*") if (p / "results.jsonl").is_file()) if runs.is_dir() else []
        rescore = None
        if made:
            cells = sum(1 for _ in open(made[-1] / "results.jsonl", encoding="utf-8"))
            rescore = statistics.median(timed([sys.executable, "-m", "pytest", *QUIET,
                                               f"--ponybench-rescore={made[-1]}"], root, env) for _ in range(args.n))
    print(f"original script --selftest          {script:7.2f} s           (median of {args.n})")
    print(f"pytest -m selftest, cold            {cold:7.2f} s {cold / script:6.1f}x   (asked: at most 40x)")
    print(f"pytest -m selftest, warm            {warm:7.2f} s {warm / script:6.1f}x   (asked: at most 4x; median of {args.n})")
    print(f"benchmark command (rehearsal, -n 2) {bench:7.2f} s {bench / script:6.1f}x   (README: about 2 minutes)")
    if rescore is None:
        print("rescore of the unchanged rehearsal: no run was made (see FAILED above)")
    else:
        print(f"rescore of it, unchanged ({cells} cells) {rescore:5.2f} s {rescore / script:6.1f}x   "
              f"(asked: at most 4x; median of {args.n})")
    print(f"1-minute load average at the end: {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")


if __name__ == "__main__":
    main()
