"""Truth at the edges, and what the session survives (issue 20, parts 5 and 6).

- A cell the run's budget cut short (`--ponybench-max-cost`: the last cell under the cap gets
  what is left as the CLI's `--max-budget-usd`, and the CLI stops there) is `budget_cut`: left
  out of every rate, named apart, run again by a resume; a cell stopped by the per-cell cap
  (`--ponybench-max-cell-cost`), which every cell ran under alike, stays a failed run.
- An imported grader whose own pattern does not finish over a bounded text is the
  instrument's failure (`instrument_error`), named as such, never a timeout of the agent.
- A disk that fills, a worker killed by its cell, a results file turned to garbage: the run
  goes on or stops with one sentence, keeping every finished record and every dollar spent.

The budget tests run the real, pinned CLI against the scripted model (a rehearsal cell costs
what the CLI computes from the scripted usage at list price: $0.0039 a cell, $0.00195 after
its first turn, measured with 2.1.328).
"""
from __future__ import annotations

import json
import xml.etree.ElementTree as ET

import pytest
from support.benchproc import ADD_TASK, bench_args, by_cell, only_run_dir, results, run, summary, write_project

from pytest_ponybench.cell import lifecycle as cell, workspace
from pytest_ponybench.reports import summary as summaries, tables
from pytest_ponybench.run import plugin_evals
from pytest_ponybench.scoring import checks, graders
from pytest_ponybench.store import record as records
from pytest_ponybench.store.rundir import write_record
from pytest_ponybench.specs.spec import ArmSpec

CELL = "add__baseline__haiku__{}".format
REHEARSAL_CELL_COST = 0.0039  # the whole rehearsal cell (two turns)


def ledger(run_dir) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "_ponybench.spend.jsonl").read_text().splitlines()]


def junit_cases(path) -> dict[str, dict]:
    cases = {}
    for case in ET.parse(path).getroot().iter("testcase"):
        skipped = case.find("skipped")
        failed = case.find("failure")
        props = {p.get("name"): p.get("value") for p in case.iter("property")}
        cases[case.get("name")] = {"skipped": None if skipped is None else skipped.get("message"),
                                   "failed": failed is not None, "status": props.get("status")}
    return cases


def rehearse(root, claude_bin, *extra):
    return run(root, bench_args(root, "--ponybench-rehearse", *extra, claude=claude_bin))


def test_a_cell_the_run_s_budget_cut_is_left_out_of_the_rates_named_and_run_again_by_a_resume(tmp_path, claude_bin):
    root = write_project(tmp_path, {"add": ADD_TASK})
    # Cell 0 runs with $0.005 and finishes ($0.0039); cell 1 gets the $0.0011 left, and the CLI
    # stops after its first turn; cell 2 never starts (the budget is reached).
    done = rehearse(root, claude_bin, "--runs=3", "--ponybench-max-cost=0.005", f"--junitxml={root / 'junit.xml'}")
    out = done.stdout
    run_dir = only_run_dir(root)
    records = by_cell(results(run_dir))
    assert records[CELL(0)]["status"] == "finished" and records[CELL(0)]["cost_usd"] == pytest.approx(REHEARSAL_CELL_COST)
    cut = records[CELL(1)]
    assert cut["status"] == "budget_cut", cut
    assert "the run's budget cut this cell" in cut["error"] and "$0.0011" in cut["error"], cut["error"]
    assert CELL(2) not in records
    # Every dollar spent is on the ledger, the cut cell's included.
    assert [line["cell"] for line in ledger(run_dir)] == [CELL(0), CELL(1)]

    # The rates count only cell 0; the cut cell is named apart everywhere, never a failure.
    data = summary(run_dir)
    (row,) = data["rows"]
    assert row["n"] == 1 and row["correct_rate"] == 1.0 and row["left_out"] == {"budget_cut": 1}, row
    assert data["budget_cut"] == 1 and [a["cell"] for a in data["apart"]] == [CELL(1)]
    assert data["failures"] == [] and "budget_cut" in data["statuses"]["budget_cut"]
    assert f"cut by the run's budget: {CELL(1)}" in out, out[-3000:]
    assert "1 passed, 2 skipped" in out and "FAILED" not in out, out[-2000:]
    md = (run_dir / "summary.md").read_text()
    assert "## Left out by the harness" in md and CELL(1) in md and "Why cells failed" not in md
    assert CELL(1) in (run_dir / "report.html").read_text().split('id="apart"')[1].split("</ul>")[0]
    cases = junit_cases(root / "junit.xml")
    assert cases[CELL(1)]["skipped"].startswith("budget_cut: the run's budget cut this cell")
    assert cases[CELL(1)]["status"] == "budget_cut" and not cases[CELL(1)]["failed"]
    assert done.returncode == 0, out[-3000:]

    # A resume with more budget runs the cut cell again (its paid workspace kept as an attempt)
    # and cell 2; cell 0 is reported from the kept run.
    again = rehearse(root, claude_bin, "--runs=3", "--ponybench-max-cost=1", f"--ponybench-resume={run_dir}")
    assert again.returncode == 0, again.stdout[-3000:]
    records = by_cell(results(run_dir))
    assert all(records[CELL(i)]["status"] == "finished" and records[CELL(i)]["passed"] for i in range(3))
    assert records[CELL(0)]["reused"] and not records[CELL(1)]["reused"]
    assert (run_dir / f"{CELL(1)}.attempt-1").is_dir()
    assert summary(run_dir)["rows"][0]["n"] == 3 and summary(run_dir)["budget_cut"] == 0


def test_a_cell_stopped_by_the_per_cell_cap_stays_a_failed_run_of_its_arm(tmp_path, claude_bin):
    # The per-cell cap is a condition every cell runs under alike: an arm that needs more than
    # it fails, even when the run's budget is also set (and far from spent).
    root = write_project(tmp_path, {"add": ADD_TASK})
    done = rehearse(root, claude_bin, "--ponybench-max-cell-cost=0.0001", "--ponybench-max-cost=1")
    (record,) = results(only_run_dir(root))
    assert record["status"] == "cli_error" and "error_max_budget_usd" in record["error"], record
    assert done.returncode == 1 and "1 failed" in done.stdout
    (row,) = summary(only_run_dir(root))["rows"]
    assert row["n"] == 1 and row["correct_rate"] == 0.0


# --------------------------------------------------------------------------- the instrument's own pattern

CATASTROPHIC = "^(a+)+$"  # exponential over a run of a's that ends in something else
GRADE_TIMEOUT = 2.0  # the check's time here; an imported case has 30 s (bench/grader_search.py)


def graded_workspace(tmp_path, answer: str):
    """A kept workspace whose transcript ends with `answer` (what a regex grader reads)."""
    ws = tmp_path / "case__baseline__haiku__0"
    ws.mkdir()
    lines = [{"type": "system", "subtype": "init", "cwd": str(ws)},
             {"type": "assistant", "message": {"id": "m", "content": [{"type": "text", "text": answer}]}},
             {"type": "result", "subtype": "success", "result": answer}]
    (ws / workspace.TRANSCRIPT).write_text("".join(json.dumps(line) + "\n" for line in lines))
    return ws


def grade(ws, code: str) -> checks.Verdict:
    return checks.run_checks({"correct": code}, ws, None, GRADE_TIMEOUT, transcript=ws / workspace.TRANSCRIPT)["correct"]


def test_a_grader_whose_own_pattern_backtracks_is_an_instrument_error_not_the_agent_s_timeout(tmp_path):
    ws = graded_workspace(tmp_path, "a" * 40 + "!")  # a short, ordinary answer
    code = graders.check_code([{"name": "all-a", "type": "regex", "pattern": CATASTROPHIC}])
    verdict = grade(ws, code)
    assert verdict.instrument and not verdict.ok, verdict
    assert verdict.reason.startswith(f"the grader all-a's own pattern /{CATASTROPHIC}/ did not finish over 41 "
                                     "characters of the last message within the check's 2 s"), verdict.reason
    assert "timed out" not in verdict.reason


def test_a_slow_search_over_a_long_text_of_the_agent_s_stays_the_cell_s_timeout(tmp_path):
    # Over a long text an agent could make even a sane pattern slow: not provably the pattern's.
    ws = graded_workspace(tmp_path, "a" * (graders.SHORT_TEXT + 1) + "!")
    verdict = grade(ws, graders.check_code([{"name": "all-a", "type": "regex", "pattern": CATASTROPHIC}]))
    assert not verdict.instrument and verdict.reason.startswith("correct check timed out after 2 s"), verdict


def test_agent_code_that_prints_the_grader_s_mark_and_loops_is_still_the_agent_s_timeout(tmp_path):
    # A task check runs the agent's code, which could print the mark to pass its own loop off
    # as the instrument's: only a check that is exactly the graders' code is believed.
    ws = graded_workspace(tmp_path, "done")
    (ws / "evil.py").write_text(
        "import os, json\n"
        f"os.write(2, ('\\n{graders.SEARCH_MARK}' + json.dumps({{'name': 'g', 'pattern': 'x', 'chars': 1, "
        "'where': 'the last message'}) + '\\n').encode())\n"
        "while True:\n    pass\n")
    verdict = grade(ws, "load('evil.py')\n")  # behind the trust boundary: run where it is loaded
    assert not verdict.instrument and verdict.reason.startswith("correct check timed out"), verdict
    # Nor does graders' code with anything more in it.
    code = graders.check_code([{"name": "all-a", "type": "regex", "pattern": CATASTROPHIC}]) + "import evil\n"
    assert not graders.is_check_code(code)


def test_a_cell_whose_grader_backtracks_is_left_out_of_the_rates_and_named(tmp_path):
    from dataclasses import replace

    evals = tmp_path / "evals" / "all-a"
    evals.mkdir(parents=True)
    (evals / "prompt.md").write_text("Say a lot of a.\n")
    (evals / "case.yaml").write_text(json.dumps({"graders": [{"name": "all-a", "type": "regex", "pattern": CATASTROPHIC}]}))
    task = replace(plugin_evals.load_case(evals, "tidy").task, check_timeout=GRADE_TIMEOUT)
    c = cell.Cell(task, ArmSpec(name="baseline", path=None), "haiku", "claude-haiku-4-5-20251001", 0)
    ws = graded_workspace(tmp_path, "a" * 40 + "!")
    ws = ws.rename(tmp_path / c.id)
    write_record(ws, cell.AGENT_RECORD, {"status": "finished", "error": ""}, None)
    record = cell.score_cell(c, ws).to_json()
    assert record["status"] == "instrument_error" and not records.is_measured(record), record
    assert record["error"].startswith("instrument error: the grader all-a's own pattern"), record["error"]
    assert record["failure"] == record["error"]
    (row,) = summaries.aggregate([record])
    assert row["correct_rate"] is None and row["left_out"] == {"instrument_error": 1}
    assert tables.apart_lines([record]) == [f"instrument error: {c.id} (arm `baseline` · haiku) left out of every "
                                            f"rate: {record['error'][:tables.FAILURE_EXCERPT]}"]
    assert tables.failure_rows([record]) == []


# --------------------------------------------------------------------------- what the session survives


@pytest.fixture
def small_disk(tmp_path):
    """A 16 MiB tmpfs mounted for the test (we are root here); skipped, saying why, where the
    kernel or the container refuses the mount."""
    import subprocess

    mount = tmp_path / "disk"
    mount.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=16m", "tmpfs", str(mount)],
                          capture_output=True, text=True)
    if done.returncode != 0:
        pytest.skip(f"mount -t tmpfs was refused here (it needs root and CAP_SYS_ADMIN): {done.stderr.strip()}")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], capture_output=True)


def test_a_disk_the_agent_fills_stops_the_run_with_one_sentence_keeping_every_record_and_dollar(tmp_path, small_disk):
    from support.benchproc import GOOD_ADD, calls, fake_env

    root = write_project(tmp_path / "project", {"add": ADD_TASK})
    env = fake_env(root, write=GOOD_ADD, cost=0.25, cells={CELL(1): {"mode": "fill_disk"}})
    args = bench_args(root, "--runs=3")
    args = [a if not a.startswith("--ponybench-dir=") else f"--ponybench-dir={small_disk}" for a in args]
    done = run(root, args, env)
    out = done.stdout + done.stderr
    assert "INTERNALERROR" not in out and "Traceback" not in out, out[-4000:]
    (run_dir,) = [p for p in small_disk.iterdir() if p.is_dir()]
    sentence = f"the disk of the run directory {run_dir} is full (No space left on device): the run stops"
    assert sentence in out, out[-4000:]
    assert done.returncode == pytest.ExitCode.INTERRUPTED  # stopped, as after a 401
    # The spend of the cell that filled the disk is on the ledger, and every record is kept.
    assert [line["cell"] for line in ledger(run_dir)] == [CELL(0), CELL(1)]
    assert sum(line["cost_usd"] for line in ledger(run_dir)) == pytest.approx(0.5)
    records = by_cell(results(run_dir))
    assert records[CELL(0)]["passed"] and records[CELL(1)]["status"] == "interrupted", records
    assert records[CELL(1)]["error"].startswith(sentence)
    assert CELL(2) not in records and len(calls(root)) == 2  # the run stopped before the next cell

    # Space freed, a resume finishes the run; the ledger still holds what the full disk cost.
    (run_dir / CELL(1) / "fill.bin").unlink()
    fake_env(root, write=GOOD_ADD, cost=0.25)
    again = run(root, args + [f"--ponybench-resume={run_dir}"], env)
    assert again.returncode == 0, again.stdout[-3000:]
    records = by_cell(results(run_dir))
    assert all(records[CELL(i)]["passed"] for i in range(3))
    assert sum(line["cost_usd"] for line in ledger(run_dir)) == pytest.approx(1.0)
    assert summary(run_dir)["spent_usd"] == pytest.approx(1.0)


def test_a_killed_worker_and_a_results_file_turned_to_garbage_mid_run_lose_no_other_cell(tmp_path):
    # Under -n 2 one cell's CLI kills its xdist worker, and another cell's agent overwrites the
    # run's results.jsonl with garbage while the run goes on. (The pieces are covered one by
    # one in test_faults and test_attacks_records; here they meet in one live session.)
    from support.benchproc import GOOD_ADD, fake_env, killing_named_workers

    root = write_project(tmp_path, {"add": ADD_TASK})
    # The last cell overwrites the file once the others' lines are in it.
    garbage = {"write": {**GOOD_ADD, "../results.jsonl": "{}\nnot json at all\n"}, "sleep_before_write": 4}
    env = fake_env(root, write=GOOD_ADD, cells={CELL(1): {"mode": "kill_worker"}, CELL(4): garbage})
    with killing_named_workers(root):  # the worker cell 1's CLI names dies, as in a crash
        done = run(root, bench_args(root, "--runs=5", "-n", "2"), env)
    out = done.stdout
    assert "INTERNALERROR" not in out + done.stderr, out[-3000:]
    run_dir = only_run_dir(root)
    data = summary(run_dir)
    assert data["cells"] == 5 and data["left_out"] == {"interrupted": 1}, data
    (row,) = data["rows"]
    assert row["n"] == 4 and row["correct_rate"] == 1.0
    # The lost cell is named in one line; the changed file in one warning (it is written again
    # from the records the session holds, never read back).
    assert f"worker 'gw0' crashed while running 'tasks/add.yaml::{CELL(1)}'" in out \
        or f"worker 'gw1' crashed while running 'tasks/add.yaml::{CELL(1)}'" in out, out[-3000:]
    assert out.count("ponybench: warning: ") == 1 and "results.jsonl was changed by something" in out, out[-3000:]
    from pytest_ponybench.store.rundir import RunDir

    # What a rescore or a resume reads: the garbage skipped, and every cell there.
    records = by_cell(RunDir.open(run_dir, "--ponybench-resume").read_results())
    assert sorted(records) == [CELL(i) for i in range(5)], sorted(records)
    assert records[CELL(1)]["status"] == "interrupted" and "crashed" in records[CELL(1)]["error"]


def test_a_429_pause_written_by_two_workers_at_once_ends_no_cell_interrupted(tmp_path):
    # Every cell's first attempt is rate-limited (a 429 after the CLI's retries), so both
    # workers write the shared pause around the same moment; each cell's second attempt passes.
    from support.benchproc import GOOD_ADD, fake_env

    root = write_project(tmp_path, {"add": ADD_TASK})
    env = fake_env(root, write=GOOD_ADD, cost=0.1, api_error_times=1, api_status=429, api_type="rate_limit_error",
                   api_error_cost=0.01)
    done = run(root, bench_args(root, "--runs=4", "-n", "2", "-o", "ponybench_retry_wait=0.2"), env)
    assert done.returncode == 0, done.stdout[-3000:]
    run_dir = only_run_dir(root)
    records = by_cell(results(run_dir))
    assert all(r["status"] == "finished" and r["passed"] and r["attempts"] == 2 for r in records.values()), records
    assert sorted(line["cell"] for line in ledger(run_dir)) == sorted(CELL(i) for i in range(4) for _ in (0, 1))
    assert summary(run_dir)["spent_usd"] == pytest.approx(4 * 0.11)


def test_what_no_program_can_copy_is_removed_and_named_and_the_cell_is_scored_resumed_and_rescored(tmp_path):
    """Issue 36, item 5: a file 1,200 folders deep (a 2.4 kB path) made the copy for checks,
    the walk of metrics and the removal of a rerun raise RecursionError, and a FIFO or a
    socket made the copy fail: the paid cell was `interrupted`, left out of every rate, failed
    again at every resume and broke a rescore. Now each is removed once the agent is gone,
    named in the record, and the cell is scored with what remains (its add.py)."""
    import os
    from pathlib import Path

    from support.benchproc import GOOD_ADD, calls, fake_env

    root = write_project(tmp_path, {"add": ADD_TASK})
    env = fake_env(root, write=GOOD_ADD, odd_files=True)
    done = run(root, bench_args(root, "-p", "no:randomly"), env)
    assert done.returncode == 0, done.stdout[-3000:]
    run_dir = only_run_dir(root)
    [record] = results(run_dir)
    assert (record["status"], record["passed"]) == ("finished", True), record
    named = record["skipped_files"]
    assert "d/d/d/" in named and "deeper than 100 folders" in named, named
    assert "pipe: a named pipe (FIFO)" in named and "sock: a socket" in named, named
    assert "outside.txt: a link that leads outside the workspace" in named, named
    ws = run_dir / CELL(0)
    assert [n for n in ("pipe", "sock", "outside.txt") if os.path.lexists(ws / n)] == []
    depths = [len(Path(folder).relative_to(ws).parts) for folder, _, _ in os.walk(ws)]  # os.walk recurses
    assert max(depths) <= workspace.MAX_DEPTH  # the folders above the bound stay, empty
    assert (ws / "add.py").is_file()

    # A resume reuses the scored cell: no second call of the CLI, nothing paid twice.
    again = run(root, bench_args(root, "-p", "no:randomly", f"--ponybench-resume={run_dir}"), env)
    assert again.returncode == 0, again.stdout[-3000:]
    assert len(calls(root)) == 1
    # A rescore scores the kept workspace again, to the same verdict.
    rescored = run(root, bench_args(root, "-p", "no:randomly", f"--ponybench-rescore={run_dir}"), env)
    assert rescored.returncode == 0, rescored.stdout[-3000:]
    assert "rescored 1 cells" in rescored.stdout
    [record] = results(run_dir)
    assert (record["status"], record["passed"]) == ("finished", True) and record["skipped_files"] == named


def test_a_tree_deeper_than_the_recursion_limit_is_removed(tmp_path):
    """A rerun's fresh workspace (and put_back) remove what the last attempt left, however deep."""
    import os

    top = tmp_path / "ws"
    top.mkdir()
    here = os.open(".", os.O_RDONLY)
    try:
        os.chdir(top)
        for _ in range(1500):
            os.mkdir("d")
            os.chdir("d")
        os.mkfifo("pipe")
        os.symlink("/etc", "link")
    finally:
        os.fchdir(here)
        os.close(here)
    workspace.fresh(top)
    assert list(top.iterdir()) == []


def test_only_the_workspace_is_pruned_never_what_a_link_in_its_place_leads_to(tmp_path):
    import os

    outside = tmp_path / "outside"
    outside.mkdir()
    os.mkfifo(outside / "pipe")
    os.symlink("/etc/hostname", outside / "out.txt")
    (tmp_path / "ws").symlink_to(outside)
    assert workspace.remove_uncopyable(tmp_path / "ws") == ""
    assert sorted(p.name for p in outside.iterdir()) == ["out.txt", "pipe"]
    # The same entries in a workspace go, named; a link that stays inside stays.
    ws = tmp_path / "real-ws"
    ws.mkdir()
    os.mkfifo(ws / "pipe")
    os.symlink("/etc/hostname", ws / "out.txt")
    (ws / "inside.txt").symlink_to("pipe-free.txt")
    named = workspace.remove_uncopyable(ws)
    assert "pipe: a named pipe (FIFO)" in named and "out.txt: a link that leads outside the workspace" in named
    assert sorted(p.name for p in ws.iterdir()) == ["inside.txt"]
