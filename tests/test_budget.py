"""--ponybench-max-cost and --ponybench-max-cell-cost, the estimate before the first cell and
the spend as cells finish, against the stand-in CLI (every cell costs COST).

Under -n 0 the per-cell caps are exact and there is no history to estimate from; under -n 2
an earlier run in the benchmark directory gives the estimate and the spend ledger must be
shared by the workers.
"""
from __future__ import annotations

import json
import re
import xml.etree.ElementTree as ET

import pytest

from support.benchproc import (
    ADD_TASK, GOOD_ADD, bench_args, calls, fake_env, only_run_dir, results, run, run_dirs, summary, write_project,
)

COST = 0.25  # what the fake reports for every cell
MAX_COST = 0.9  # cells start while the spend is 0, .25, .5, .75: four run, then none
MAX_CELL_COST = 0.5
CAPS = [f"--ponybench-max-cost={MAX_COST}", f"--ponybench-max-cell-cost={MAX_CELL_COST}"]


def budgets(call_list: list[dict]) -> list[float]:
    values = []
    for call in call_list:
        argv = call["argv"]
        values.append(float(argv[argv.index("--max-budget-usd") + 1]))
    return values


def progress_lines(stdout: str) -> list[tuple[int, int, float]]:
    """(cells done, of total, dollars spent so far) from each progress line (progress.py)."""
    found = re.findall(r"^ponybench: (\d+)/(\d+) cells \(.*?\); .*?; \$([\d.]+) spent", stdout, re.M)
    return [(int(done), int(total), float(spent)) for done, total, spent in found]


def skip_messages(junit) -> dict[str, str]:
    skipped = {}
    for case in ET.parse(junit).getroot().iter("testcase"):
        for skip in case.iter("skipped"):
            skipped[case.get("name")] = skip.get("message")
    return skipped


def test_the_budget_stops_new_cells_caps_each_cli_call_and_shows_the_spend(tmp_path):
    root = write_project(tmp_path, {"add": ADD_TASK})
    env = fake_env(root, write=GOOD_ADD, cost=COST)
    done = run(root, bench_args(root, "--runs=6", f"--junitxml={root / 'junit.xml'}", *CAPS), env)
    assert done.returncode == 0, done.stdout[-3000:]
    run_dir = only_run_dir(root)

    # Cells start while 0, .25, .5, .75 are spent; the last two are skipped, and said so.
    ran = results(run_dir)
    assert len(ran) == 4 and all(r["passed"] for r in ran)
    skipped = skip_messages(root / "junit.xml")
    assert sorted(skipped) == ["add__baseline__haiku__4", "add__baseline__haiku__5"]
    assert all(m.startswith("budget reached: $1.00 of $0.9000 spent") for m in skipped.values()), skipped
    assert "2 cells skipped: budget reached ($1.00 of $0.9000)" in done.stdout
    assert f"--ponybench-resume={run_dir}" in done.stdout
    data = summary(run_dir)
    assert data["budget_skipped"] == 2 and data["spent_usd"] == pytest.approx(4 * COST)

    # Each call: min(per-cell cap, budget - spent) with 0, 1, 2, 3 cells finished before it.
    assert budgets(calls(root)) == pytest.approx([0.5, 0.5, 0.4, 0.15])

    # Before the first cell: how many, no history to estimate from; then the spend per cell.
    assert "ponybench: 6 cells in " in done.stdout
    assert "no earlier run of these tasks and models to estimate the cost from" in done.stdout
    # Progress: the first cell and the last (the skipped ones count as done), plain lines.
    lines = progress_lines(done.stdout)
    assert lines[0] == (1, 6, pytest.approx(0.25)) and lines[-1] == (6, 6, pytest.approx(1.0)), lines
    assert "(4 passed, 0 failed, 0 infra, 2 skipped)" in done.stdout
    assert done.stdout.index("ponybench: 6 cells in ") < done.stdout.index("ponybench: 1/6 cells ")


def test_the_budget_holds_across_xdist_workers_and_the_estimate_uses_earlier_runs(tmp_path):
    root = write_project(tmp_path, {"add": ADD_TASK})
    # An earlier run of the same task and model in the same benchmark directory, and one of
    # another model that must not count.
    earlier = root / "runs" / "20200101-000000"
    earlier.mkdir(parents=True)
    history = [{"cell": f"add__baseline__haiku__{i}", "task": "add", "model": "haiku", "cost_usd": cost}
               for i, cost in enumerate((0.2, 0.3))]
    history.append({"cell": "add__baseline__opus__0", "task": "add", "model": "opus", "cost_usd": 9.0})
    (earlier / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in history))

    env = fake_env(root, write=GOOD_ADD, cost=COST)
    done = run(root, bench_args(root, "--runs=10", "-n", "2", *CAPS), env)
    assert done.returncode == 0, done.stdout[-3000:]
    (run_dir,) = [d for d in run_dirs(root) if d != earlier]

    # Mean $0.25 a cell over the earlier haiku cells: 10 cells, $2.50, before any cell.
    assert ("estimated cost $2.50 from earlier runs of these tasks and models "
            "(0 of 10 cells have no history)") in done.stdout
    assert "budget $0.9000 ($0.0000 spent so far)" in done.stdout
    assert done.stdout.index("estimated cost") < done.stdout.index("ponybench: 1/10 cells ")

    ran = results(run_dir)
    # A cell starts only while at most 3 have finished (0.75 < 0.9), and at most one more is
    # in flight on the other worker: 4 or 5 cells. Each worker counting alone would run 8.
    assert 4 <= len(ran) <= 5, [r["cell"] for r in ran]
    skipped = 10 - len(ran)
    assert f"{skipped} cells skipped: budget reached" in done.stdout
    assert summary(run_dir)["budget_skipped"] == skipped
    assert len(calls(root)) == len(ran)
    assert all(0 < b <= MAX_CELL_COST for b in budgets(calls(root)))
    assert progress_lines(done.stdout)[-1][:2] == (10, 10)


# Another worker's cell finishes (and records its spend) right after this worker's budget
# check passed: the budget left for the CLI is then zero.
RACE_CONFTEST = """\
from pytest_ponybench.run import collect

_check = collect.CellItem.check_budget

def check_then_another_worker_finishes(self, state):
    _check(self, state)
    state.run_dir.record_spend("a-cell-of-another-worker", 1.0)

collect.CellItem.check_budget = check_then_another_worker_finishes
"""


def test_a_budget_used_up_after_the_check_skips_the_cell_never_starts_the_cli_with_zero(tmp_path):
    root = write_project(tmp_path, {"add": ADD_TASK}, conftest=RACE_CONFTEST)
    env = fake_env(root, write=GOOD_ADD, cost=COST)
    done = run(root, bench_args(root, f"--ponybench-max-cost={MAX_COST}", "-rs"), env)
    assert calls(root) == [], f"the CLI started with --max-budget-usd {budgets(calls(root))}"
    assert done.returncode == 0, done.stdout[-3000:]
    assert "1 cells skipped: budget reached" in done.stdout


def test_cells_that_print_no_result_line_are_charged_their_tokens_and_the_budget_stops_them(tmp_path):
    """Issue 36, item 3: a session killed at its timeout (or cut off) prints no result line,
    so its cost was recorded as $0 while its tokens were counted; four stalling cells spent
    about 3.1x the cap. Each cell here prints an assistant message with its usage and no
    result line: 100 in, 50,000 out, 7 cache-write and 5 cache-read tokens of Haiku 4.5 are
    about $0.25 at list price, so the budget stops the run after four cells, as it does for
    cells that report $0.25 (above)."""
    root = write_project(tmp_path, {"add": ADD_TASK})
    env = fake_env(root, write=GOOD_ADD, mode="no_result", input_tokens=100, output_tokens=50_000)
    done = run(root, bench_args(root, "--runs=6", f"--ponybench-max-cost={MAX_COST}"), env)
    assert done.returncode in (0, 1), done.stdout[-3000:]  # the cells fail (no result): not the point
    run_dir = only_run_dir(root)
    estimate = (100 * 1 + 50_000 * 5 + 7 * 2 + 5 * 0.1) / 1e6
    ran = results(run_dir)
    assert len(ran) == 4, [(r["cell"], r.get("cost_usd")) for r in ran]
    assert all(r["cost_usd"] == pytest.approx(estimate, abs=1e-6) and r["cost_estimated"] is True for r in ran), ran
    assert "2 cells skipped: budget reached" in done.stdout
    assert summary(run_dir)["spent_usd"] == pytest.approx(4 * estimate, abs=1e-5)
    md = (run_dir / "summary.md").read_text()
    assert "(estimated for 4 cells with no result line)" in md and "(estimated)" in md
