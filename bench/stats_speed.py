"""Time stats.arm_stats, primary.answers, report.write_reports and compare.compare_runs on a
synthetic run.

    python bench/stats_speed.py [TASKS] [RUNS]

The run has TASKS tasks x 4 arms x 2 models x RUNS runs (defaults 50 and 10: 4,000 cells, a
large benchmark). Outcomes and LOC are drawn from a seeded generator, so timings compare
between machines and commits.
"""
import random
import sys
import tempfile
import time
from pathlib import Path

from pytest_ponybench.reports import compare, primary, report, stats

ARMS = {"baseline": (0.8, 100), "terse": (0.8, 70), "verbose": (0.6, 140), "plugin": (0.85, 95)}
MODELS = ("haiku", "sonnet")


def synthetic_run(tasks: int, runs: int, seed: int) -> list[dict]:
    rnd = random.Random(seed)
    records = []
    for t in range(tasks):
        for arm, (p_correct, loc) in ARMS.items():
            for model in MODELS:
                for run in range(runs):
                    correct = int(rnd.random() < p_correct)
                    delivered = rnd.random() < 0.9
                    records.append(dict(
                        cell=f"task{t}__{arm}__{model}__{run}", task=f"task{t}", arm=arm,
                        model=model, run=run, correct=correct, safe=int(rnd.random() < 0.9),
                        passed=bool(correct), ran=True, status="finished",
                        total_loc=max(1, int(rnd.gauss(loc, loc / 6))) if delivered else 0,
                        cost_usd=rnd.uniform(0.02, 0.2), out_tokens=rnd.randint(500, 5000),
                        duration_ms=rnd.randint(10_000, 120_000), workspace=""))
    return records


def timed(label: str, function, *args):
    start = time.perf_counter()
    result = function(*args)
    print(f"{label:<32} {time.perf_counter() - start:7.2f} s")
    return result


def main() -> None:
    tasks = int(sys.argv[1]) if len(sys.argv) > 1 else 50
    runs = int(sys.argv[2]) if len(sys.argv) > 2 else 10
    old, new = synthetic_run(tasks, runs, 1), synthetic_run(tasks, runs, 2)
    print(f"{len(new)} cells: {tasks} tasks x {len(ARMS)} arms x {len(MODELS)} models x {runs} runs")
    arm_stats = timed("stats.arm_stats", stats.arm_stats, new)
    timed("primary.answers", primary.answers, new, "baseline", arm_stats)
    with tempfile.TemporaryDirectory() as run_dir:
        timed("report.write_reports", report.write_reports, Path(run_dir), new)
    timed("compare.compare_runs", compare.compare_runs, old, new)


if __name__ == "__main__":
    main()
