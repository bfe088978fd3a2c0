"""--ponybench-plan and --ponybench-until-decided end to end: the real pinned CLI against the
scripted model, a good reference against a bad arm and an arm that writes the same code.
"""
from __future__ import annotations

import json
import re
import textwrap
from pathlib import Path


TASK = """\
description: double a number without importing os
tags: [demo]
file: calc.py
prompt: Implement double(x) in calc.py.
seed:
  calc.py: |
    def double(x):
        raise NotImplementedError
checks:
  correct: |
    double = find_function(load(FILE), "double")
    for x in (2, 5, -1):
        assert double(x) == 2 * x, f"double({x}) gave {double(x)!r}"
  safe: |
    assert not hasattr(load(FILE), "os"), "calc.py imports os"
refs:
  axis: correct
  good: |
    def double(x):
        return 2 * x
  bad: |
    def double(x):
        return x + 2 if x != 2 else 4
"""

# The arm "worse" plays the task's bad reference (wrong and unsafe); "same" plays the good one,
# as the reference arm does: a comparison no number of rounds under the cap decides.
CONFTEST = """\
import os

BAD = "import os\\ndef double(x):\\n    return x + 2 if x != 2 else 4\\n"


def pytest_ponybench_rehearsal_script(cell, script):
    if cell.arm.name == "worse":
        script.writes = [(path, BAD) for path, _ in script.writes]
"""

MAX_RUNS = 8
ALPHA = "0.2"  # a 1-in-5 error rate keeps the rehearsal short: a clear difference decides in 6 rounds


def make_project(pytester) -> Path:
    pytester.makefile(".toml", pyproject='[tool.pytest.ini_options]\ntestpaths = ["tasks"]\n')
    for folder in ("tasks", "arms"):
        (pytester.path / folder).mkdir()
    (pytester.path / "tasks" / "double.yaml").write_text(TASK)
    (pytester.path / "arms" / "baseline.yaml").write_text("description: nothing added\n")
    (pytester.path / "arms" / "same.yaml").write_text("prompt: Write plain code, PONYBENCH-SAME-ARM.\n")
    (pytester.path / "arms" / "worse.yaml").write_text("prompt: Write any code, PONYBENCH-WORSE-ARM.\n")
    (pytester.path / "conftest.py").write_text(textwrap.dedent(CONFTEST))
    return pytester.path


def run(pytester, claude_bin, *args):
    return pytester.runpytest_subprocess(
        "--ponybench", "--ponybench-rehearse", f"--ponybench-claude={claude_bin}",
        f"--ponybench-dir={pytester.path / 'runs'}", "-p", "no:cacheprovider",
        "--ponybench-alpha", ALPHA, *args, timeout=900)


def test_until_decided_stops_the_clear_comparison_and_runs_the_open_one_to_the_cap(pytester, claude_bin):
    root = make_project(pytester)
    plan = run(pytester, claude_bin, "--ponybench-plan")
    assert plan.ret == 0
    text = plan.stdout.str()
    assert not (root / "runs").exists() or not any((root / "runs").iterdir()), "a plan made a run"
    fixed = int(re.search(r"fixed design: (\d+) cells", text).group(1))
    assert "Waudby-Smith & Ramdas 2024" in text and "exact power of Fisher's two-sided test" in text
    assert "can be reached at round" in text

    result = run(pytester, claude_bin, "--ponybench-until-decided", "--ponybench-max-runs", str(MAX_RUNS))
    out = result.stdout.str()
    (run_dir,) = [p for p in (root / "runs").iterdir() if p.is_dir()]
    ledger = [json.loads(line) for line in (run_dir / "_ponybench.spend.jsonl").read_text().splitlines()]
    paid = {entry["cell"] for entry in ledger}
    by_arm = {arm: sorted(int(c.rsplit("__", 1)[1]) for c in paid if f"__{arm}__" in c)
              for arm in ("baseline", "same", "worse")}
    # The open comparison (same vs baseline) got every round; the clear one stopped early.
    assert by_arm["baseline"] == list(range(MAX_RUNS)) == by_arm["same"], by_arm
    assert 0 < len(by_arm["worse"]) < MAX_RUNS, by_arm
    assert len(paid) < fixed and len(paid) < 3 * MAX_RUNS

    data = json.loads((run_dir / "sequential.json").read_text())
    found = {(c["arm"], c["axis"]): c for c in data["comparisons"]}
    safe = found[("worse", "safe")]
    assert safe["verdict"] == "arm worse" and safe["round"] == len(by_arm["worse"])
    assert found[("same", "safe")]["verdict"] == "undecided" and found[("same", "safe")]["round"] is None
    assert found[("same", "correct")]["rounds"] == MAX_RUNS
    assert "Waudby-Smith" in data["citation"]
    summary = (run_dir / "summary.md").read_text()
    assert "## Sequential decisions" in summary and "| worse | safe | round " in summary
    page = (run_dir / "report.html").read_text()
    assert "<h2>Sequential decisions</h2>" in page and "<td>worse</td><td>safe</td><td>round " in page
    assert re.search(r"double / haiku / worse vs baseline / safe: stopped at round \d+: arm worse", out), out
    assert "double / haiku / same vs baseline / correct: ran to round 8" in out
    assert f"until decided: the cells above are at most {MAX_RUNS} rounds" in out
    skipped = MAX_RUNS - len(by_arm["worse"])
    assert f"{skipped} cells not run: their comparisons were decided" in out
    # The progress line counts the decided cells as skipped, so it reaches the total.
    assert re.search(rf"{3 * MAX_RUNS}/{3 * MAX_RUNS} cells \(.*{skipped} skipped", out), out

    # A plan after the run takes the reference's rates and the cost per cell from it.
    later = run(pytester, claude_bin, "--ponybench-plan").stdout.str()
    assert "| double | haiku | safe | 100% | earlier runs (8) |" in later, later
    assert re.search(r"fixed design: \d+ cells, \$\d+\.\d+ simulated USD \(rehearsal\) \(cost per cell from earlier", later)

    # A resume continues the rounds: nothing is paid again, the decided arm stays stopped.
    again = run(pytester, claude_bin, "--ponybench-until-decided", "--ponybench-max-runs", str(MAX_RUNS),
                f"--ponybench-resume={run_dir}")
    # (exit code 1: the worse arm's cells fail, as they did in the first session)
    assert f"ran 0 cells; {len(paid)} more finished earlier" in again.stdout.str(), again.stdout.str()
    after = [json.loads(line) for line in (run_dir / "_ponybench.spend.jsonl").read_text().splitlines()]
    assert len(after) == len(ledger)
    assert f"{skipped} cells not run: their comparisons were decided" in again.stdout.str()


def test_a_plan_runs_nothing_and_names_its_cost_source(pytester, claude_bin):
    root = make_project(pytester)
    result = run(pytester, claude_bin, "--ponybench-plan", "--ponybench-plan-cell-cost", "0.5",
                 "--ponybench-plan-difference", "0.4")
    assert result.ret == 0
    out = result.stdout.str()
    assert "nothing was run" in out and "else the guess $0.5" in out
    assert "| double | haiku | correct | - | none: taken at 50% |" in out
    assert "| double | haiku | loc |" in out
    assert not (root / "runs").exists() or not any((root / "runs").iterdir())
    # -k selects the plan's cells as it would a run's.
    narrowed = run(pytester, claude_bin, "--ponybench-plan", "-k", "baseline or worse").stdout.str()
    assert "2 arms (baseline, worse)" in narrowed


def test_bad_plan_values_are_refused_naming_the_option(pytester, claude_bin):
    make_project(pytester)
    result = run(pytester, claude_bin, "--ponybench-plan", "--ponybench-plan-power", "1.5")
    assert result.ret != 0
    assert "--ponybench-plan-power" in result.stderr.str() and "between 0 and 1" in result.stderr.str()
    (pytester.path / "pyproject.toml").write_text(
        '[tool.pytest.ini_options]\ntestpaths = ["tasks"]\nponybench_margin = "2"\n')
    result = run(pytester, claude_bin, "--ponybench-until-decided")
    assert result.ret != 0 and "ini option ponybench_margin = '2': must be between 0 and 1" in result.stderr.str()


def test_until_decided_refuses_cells_started_ahead(pytester, claude_bin):
    make_project(pytester)
    result = run(pytester, claude_bin, "--ponybench-until-decided", "--ponybench-at-once", "2")
    assert result.ret != 0
    assert "cannot start cells ahead: drop --ponybench-at-once 2" in result.stderr.str()
    assert not (pytester.path / "runs").exists() or not any((pytester.path / "runs").iterdir())


def test_until_decided_under_xdist(pytester, claude_bin):
    # Two workers collect the same cells in the same round order (xdist refuses a run whose
    # workers disagree), and each reads the sealed results of the other's cells.
    root = make_project(pytester)
    cap = 10  # a worker may start a round while the last one still runs: room for a late look
    result = run(pytester, claude_bin, "-n", "2", "--ponybench-until-decided", "--ponybench-max-runs", str(cap))
    out = result.stdout.str()
    (run_dir,) = [p for p in (root / "runs").iterdir() if p.is_dir()]
    paid = {json.loads(line)["cell"] for line in (run_dir / "_ponybench.spend.jsonl").read_text().splitlines()}
    count = {arm: sum(1 for c in paid if f"__{arm}__" in c) for arm in ("baseline", "same", "worse")}
    assert count["baseline"] == count["same"] == cap and count["worse"] < cap, (count, out[-3000:])
    data = json.loads((run_dir / "sequential.json").read_text())
    found = {(c["arm"], c["axis"]): c["verdict"] for c in data["comparisons"]}
    assert found[("worse", "safe")] == "arm worse" and found[("same", "safe")] == "undecided"


def test_a_reference_stops_with_the_arms_this_session_runs(pytester, claude_bin):
    # -k leaves "same" out: the reference serves only "worse", whose comparisons decide, so
    # the reference's cells stop with them instead of waiting for an arm that never runs.
    root = make_project(pytester)
    run(pytester, claude_bin, "--ponybench-until-decided", "--ponybench-max-runs", str(MAX_RUNS),
        "-k", "baseline or worse")
    (run_dir,) = [p for p in (root / "runs").iterdir() if p.is_dir()]
    paid = {json.loads(line)["cell"] for line in (run_dir / "_ponybench.spend.jsonl").read_text().splitlines()}
    count = {arm: sum(1 for c in paid if f"__{arm}__" in c) for arm in ("baseline", "same", "worse")}
    assert count["same"] == 0 and count["baseline"] == count["worse"] < MAX_RUNS, count
