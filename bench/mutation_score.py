"""How many small wrong versions of each good reference do the task's checks kill?

    python bench/mutation_score.py [TASK ...] [--survivors]

Mutates every line a task's good reference adds to its seed (comparisons, boundaries, removed
statements, branches and calls, constants, swapped arguments: mutation.py), judges each mutant
with the task's checks exactly as a cell is judged, and prints per task killed/measured, the
ratio against the 90% target, the time taken and, with --survivors (or for any task under the
target), every surviving mutant's id: the line to kill, or to list under `equivalent_mutants`
with why. No cache: every mutant is judged afresh.
"""
import sys
import time
from pathlib import Path

from pytest_ponybench.instruments import mutation, strength

REPO = Path(__file__).resolve().parents[1]


def main() -> int:
    show_all = "--survivors" in sys.argv
    names = {a for a in sys.argv[1:] if not a.startswith("--")} or None
    tasks = strength.load_tasks(REPO / "tasks", REPO / "fixtures", names)
    failing = 0
    started = time.perf_counter()
    for task in tasks:
        begun = time.perf_counter()
        result = mutation.score(task)
        seconds = time.perf_counter() - begun
        problems = mutation.problems(result)
        failing += bool(problems) and not result.problem.startswith("no ")
        print(f"{task.name:<22} {mutation.line(result):<28} {seconds:6.1f} s")
        if show_all or problems:
            for line in problems if not show_all else [*problems, *(f"equivalent: {e}" for e in result.equivalent)]:
                print(f"    {line}")
    print(f"{len(tasks)} tasks in {time.perf_counter() - started:.1f} s; {failing} under the target or with survivors")
    return 1 if failing else 0


if __name__ == "__main__":
    sys.exit(main())
