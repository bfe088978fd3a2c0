"""How strong is each task's check? Judge every variant under tests/variants/ and print, per
task, how many wrong implementations its checks catch and how many correct ones they accept.

    python bench/check_strength.py [TASK ...] [--variants DIR] [--tasks DIR]

--variants: another folder of variants files (tests/redteam/ holds implementations written
from the ticket alone by a reviewer who never saw the checks); --tasks: another tasks folder
(the task files of an earlier commit, to count what the checks caught before a change).

Variants are judged exactly like references (seeded into a temporary workspace, every check
run in a child process). Prints the table, each misjudged variant, the time taken, and the
slowest variants (a check that waits out a timeout shows here first).
"""
import os
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from pytest_ponybench.instruments import strength

REPO = Path(__file__).resolve().parents[1]


def _option(args: list[str], name: str, default: Path) -> Path:
    if name in args:
        at = args.index(name)
        value = Path(args[at + 1]).resolve()
        del args[at:at + 2]
        return value
    return default


def main() -> int:
    args = sys.argv[1:]
    variants_dir = _option(args, "--variants", REPO / strength.VARIANTS_DIR)
    tasks_dir = _option(args, "--tasks", REPO / "tasks")
    names = set(args) or None
    tasks = strength.load_tasks(tasks_dir, tasks_dir.parent / "fixtures", names)
    files = strength.variant_files(variants_dir)
    jobs = [(task, v) for task in tasks if task.name in files for v in strength.load_variants(files[task.name])]

    def judge_timed(job):
        start = time.perf_counter()
        judgement = strength.judge(*job)
        return judgement, time.perf_counter() - start

    started = time.perf_counter()
    with ThreadPoolExecutor(max_workers=2 * (os.cpu_count() or 1)) as pool:
        results = list(pool.map(judge_timed, jobs))
    by_task: dict[str, list] = {}
    for judgement, _ in results:
        by_task.setdefault(judgement.variant.task, []).append(judgement)
    strengths = [strength.TaskStrength(name, by_task[name]) for name in sorted(by_task)]
    timed = [(seconds, f"{j.variant.task}/{j.variant.name}") for j, seconds in results]
    elapsed = time.perf_counter() - started
    for line in strength.table_lines(strengths):
        print(line)
    caught = sum(s.caught for s in strengths)
    total = sum(s.caught_total for s in strengths)
    accepted = sum(s.accepted for s in strengths)
    accepted_total = sum(s.accepted_total for s in strengths)
    missing = sorted(t.name for t in tasks if t.name not in {s.task for s in strengths})
    print(f"\n{len(strengths)} tasks: {caught}/{total} wrong variants caught, {accepted}/{accepted_total} correct ones accepted")
    if missing:
        print(f"no variants file: {', '.join(missing)}")
    print(f"{len(timed)} variants judged in {elapsed:.1f} s; slowest:")
    for seconds, name in sorted(timed, reverse=True)[:5]:
        print(f"  {seconds:6.2f} s  {name}")
    return 0 if all(not s.misjudged for s in strengths) else 1


if __name__ == "__main__":
    sys.exit(main())
