"""A run you can watch (progress.py): the counts, the time left, the spend, how lines are
printed on a terminal and into a log, and the resume command after an interrupt."""
from __future__ import annotations

import re
import signal

import pytest

from pytest_ponybench.run import progress
from pytest_ponybench.store import record as records
from support.benchproc import (
    ADD_TASK, GOOD_ADD, Session, bench_args, cli_stderr, fake_env, results, run, run_dirs, wait_for, write_project,
)


def rec(cell: str, passed: bool, status: str = records.FINISHED, failure: str = "") -> dict:
    return {"cell": cell, "passed": passed, "status": status, "failure": failure}


class Clock:
    def __init__(self):
        self.now = 100.0

    def __call__(self):
        return self.now


def test_the_line_counts_cells_estimates_time_left_and_marks_simulated_dollars():
    ledger = [0.0]
    count = progress.Progress(total=4, rehearsal=True, started=100.0, spent=lambda: ledger[0])
    assert count.line(100.0) == "ponybench: 0/4 cells (0 passed, 0 failed, 0 infra); 0s elapsed; $0.0000 (simulated) spent"
    ledger[0] = 0.25
    count.add(rec("a__x__haiku__0", True))
    ledger[0] = 0.5
    count.add(rec("a__x__haiku__1", False, failure="incorrect: add(2, 3) is not 5"))
    line = count.line(130.0)
    assert line.startswith("ponybench: 2/4 cells (1 passed, 1 failed, 0 infra); 30s elapsed, about 30s left; "
                           "$0.5000 (simulated) spent")
    # A cell whose agent finished but whose code was wrong failed, and says at which gate.
    assert line.endswith("last: a__x__haiku__1 failed (incorrect)") and "finished" not in line
    count.add(rec("a__x__haiku__2", False, status=sorted(records.INFRA)[0]))
    count.skip()
    assert count.line(200.0).startswith(
        "ponybench: 4/4 cells (1 passed, 1 failed, 1 infra, 1 skipped); 1m40s elapsed; $0.5000 (simulated) spent")
    real = progress.Progress(total=1, started=0.0)
    assert "(simulated)" not in real.line(3700.0) and "1h01m elapsed" in real.line(3700.0)


def test_a_log_gets_plain_lines_at_most_every_interval_plus_the_first_and_the_last():
    clock, lines, ledger_reads = Clock(), [], []
    spent = lambda: ledger_reads.append(1) or 0.0  # noqa: E731
    printer = progress.ProgressPrinter(progress.Progress(total=5, started=100.0, spent=spent), lines.append,
                                       rewrite=None, tty=False, interval=5.0, clock=clock)
    for step in (0.5, 1.0, 1.0, 3.0, 0.1):  # cells end 0.5, 1.5, 2.5, 5.5, 5.6 s after the first line
        clock.now += step
        printer.progress.add(rec("c", True))
        printer.update()
    assert [re.match(r"ponybench: (\d)/5", line).group(1) for line in lines] == ["1", "4", "5"]
    # The spend ledger is read for the lines printed, not for every cell.
    assert len(ledger_reads) == len(lines)


def test_a_terminal_gets_one_line_rewritten_in_place_and_ended_once():
    clock, plain, rewritten = Clock(), [], []
    printer = progress.ProgressPrinter(progress.Progress(total=2, started=100.0), plain.append,
                                       rewrite=rewritten.append, tty=True, clock=clock)
    printer.progress.add(rec("c0", True))
    printer.update()
    assert len(rewritten) == 1 and plain == [] and printer.open_line
    printer.close()  # an interrupt: the line is ended before anything else is printed
    assert plain == [""] and not printer.open_line
    printer.progress.add(rec("c1", True))
    printer.update()
    assert len(rewritten) == 2 and rewritten[-1].startswith("ponybench: 2/2 cells") and plain == ["", ""]


def test_the_resume_command_keeps_every_argument_and_resumes_the_run():
    args = ["--ponybench", "-n", "2", "-k", "sql and yagni", "--ponybench-resume", "runs/old", "--runs=3"]
    assert progress.resume_command(args, "/r/20261203-1") == (
        "pytest --ponybench -n 2 -k 'sql and yagni' --runs=3 --ponybench-resume=/r/20261203-1")
    assert progress.resume_command(["--ponybench-resume=runs/x"], "/r/y") == "pytest --ponybench-resume=/r/y"


def progress_lines(stdout: str) -> list[str]:
    return [line for line in stdout.splitlines() if re.match(r"ponybench: \d+/\d+ cells", line)]


def test_a_run_into_a_log_prints_plain_progress_and_never_finished_for_a_failed_cell(tmp_path):
    root = write_project(tmp_path, {"add": ADD_TASK})
    bad = {"add.py": "def add(a, b):\n    return a - b\n"}
    env = fake_env(root, write=GOOD_ADD, cells={"add__baseline__haiku__1": {"write": bad}})
    done = run(root, bench_args(root, "--runs=3", "-n", "0"), env)
    assert done.returncode == pytest.ExitCode.TESTS_FAILED, done.stdout[-3000:]
    lines = progress_lines(done.stdout)
    assert lines[0].startswith("ponybench: 1/3 cells (1 passed, 0 failed, 0 infra)")
    assert lines[-1].startswith("ponybench: 3/3 cells (2 passed, 1 failed, 0 infra)")
    assert "\r" not in done.stdout  # not a terminal: no line rewritten in place
    ponybench_lines = [line for line in done.stdout.splitlines() if line.startswith("ponybench:")]
    assert not any("finished" in line for line in ponybench_lines), ponybench_lines
    failed = [r for r in results(run_dirs(root)[0]) if not r["passed"]]
    assert [r["status"] for r in failed] == [records.FINISHED]  # the status is finished, the line says failed


def test_after_ctrl_c_the_last_line_is_the_command_that_resumes_the_run(tmp_path):
    root = write_project(tmp_path, {"add": ADD_TASK})
    env = fake_env(root, write=GOOD_ADD, cells={"add__baseline__haiku__1": {"mode": "hang_tree"}})
    args = bench_args(root, "--runs=3", "--ponybench-timeout=300", "-n", "0")
    with Session(root, args, env) as session:
        run_dir = wait_for(lambda: run_dirs(root) and run_dirs(root)[0], 60, "the run directory", session)
        wait_for(lambda: cli_stderr(run_dir / "add__baseline__haiku__1"),
                 60, "the hanging cell", session)
        session.signal(signal.SIGINT)
        code = session.wait(60)
        stdout = session.stdout
    assert code == pytest.ExitCode.INTERRUPTED, stdout[-3000:]
    last = [line for line in stdout.splitlines() if line.strip()][-1]
    assert last.startswith("interrupted; finish this run"), stdout[-2000:]
    assert last.endswith(f"--ponybench-resume={run_dir}")
    assert "--runs=3" in last and "--ponybench-timeout=300" in last


def test_setup_above_the_run_directory_is_warned_about_only_where_it_still_reaches_the_model(tmp_path):
    root = write_project(tmp_path / "p", {"add": ADD_TASK})
    # CLAUDE.md is off in every cell (CLAUDE_CODE_DISABLE_CLAUDE_MDS): no warning for it.
    (root / "CLAUDE.md").write_text("Always write Rust.\n")
    # A project skill above a run directory reaches the model only where the run directory has
    # no history stop (tests/test_isolation.py): a run made today has one, so no warning.
    (root / ".claude" / "skills" / "rusty").mkdir(parents=True)
    (root / ".claude" / "skills" / "rusty" / "SKILL.md").write_text("---\nname: rusty\n---\nWrite Rust.\n")
    done = run(root, bench_args(root, "--runs=1"), fake_env(root, write=GOOD_ADD))
    assert done.returncode == 0, done.stdout[-3000:]
    assert "ponybench: 1/1 cells" in done.stdout
    assert "is above the run directory" not in done.stdout
    assert "CLAUDE.md" not in done.stdout
    # A run directory made before the stop existed, resumed: the skill reaches the model again,
    # and the run says so before the first cell.
    run_dir = next((root / "runs").iterdir())
    (run_dir / ".git").unlink()
    (run_dir / "add__baseline__haiku__0" / "_ponybench.result.json").unlink(missing_ok=True)
    again = run(root, [*bench_args(root), f"--ponybench-resume={run_dir}"], fake_env(root, write=GOOD_ADD))
    warning = (f"ponybench: warning: {root / '.claude' / 'skills'} is above the run directory, so the CLI puts "
               f"what it holds in front of the model in every cell of every arm; keep runs elsewhere "
               f"(--ponybench-dir=/tmp/ponybench-runs)")
    assert warning in again.stdout, again.stdout[-3000:]
    assert "CLAUDE.md" not in again.stdout
