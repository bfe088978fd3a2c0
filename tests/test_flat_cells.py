"""A cell's own work does not grow with the run: no listing of the run directory per cell
(beside.py watches it instead), and what the watch reports is what a listing would."""
import importlib.util
import json
import os
from pathlib import Path
from types import SimpleNamespace

import pytest

from pytest_ponybench.cell import beside, lifecycle as cell, workspace
from pytest_ponybench.specs import spec
from pytest_ponybench.store import rundir

REPO = Path(__file__).resolve().parents[1]
FAKE = REPO / "tests" / "fakes" / "fake_claude.py"
ADD = """\
description: add two numbers
file: add.py
prompt: Write add(a, b) in add.py.
checks:
  correct: |
    add = find_function(load(FILE), "add")
    assert add(2, 3) == 5, "add(2, 3) is not 5"
refs:
  axis: correct
  good: |
    def add(a, b):
        return a + b
  bad: |
    def add(a, b):
        return a - b
"""


def entry_counter():
    """bench/growth.py's counter of the directory entries this process reads: the test and
    the figures it guards count alike."""
    loader = importlib.util.spec_from_file_location("_ponybench_bench_growth", REPO / "bench" / "growth.py")
    growth = importlib.util.module_from_spec(loader)
    loader.loader.exec_module(growth)
    return growth.Counter()


def entries_read_by_one_cell(tmp_path, monkeypatch, others: int) -> int:
    """The entries read while one cell runs in a run that already holds `others` cells."""
    tmp_path.mkdir()
    task_path = tmp_path / "add.yaml"
    task_path.write_text(ADD)
    task = spec.load_task(task_path, REPO / "fixtures")
    script = tmp_path / "fake.json"
    script.write_text(json.dumps({"write": {"add.py": "def add(a, b):\n    return a + b\n"}}))
    monkeypatch.setenv("PONYBENCH_FAKE", str(script))
    monkeypatch.setenv("IS_SANDBOX", "1")
    run = rundir.RunDir.create(tmp_path / "runs")
    for n in range(others):
        (run.path / f"other__baseline__haiku__{n}").mkdir()
        (run.path / rundir.RECORDS / f"other__baseline__haiku__{n}").mkdir(parents=True)
    hook = SimpleNamespace(pytest_ponybench_agent_env=lambda **_: {}, pytest_ponybench_prove_arm=lambda **_: None)
    ctx = cell.CellContext(run_dir=run, claude=str(FAKE), timeout=60, arms_dir=REPO / "arms", hook=hook)
    arm = spec.ArmSpec(name="baseline", path=None)
    # The first cell of a process may list the run once (beside.foreign_dirs): not per cell.
    cell.run_cell(cell.Cell(task, arm, "haiku", "claude-haiku-4-5-20251001", 0), ctx)
    counter = entry_counter()
    monkeypatch.setattr(os, "scandir", counter.scandir)
    monkeypatch.setattr(os, "listdir", counter.listdir)
    record = cell.run_cell(cell.Cell(task, arm, "haiku", "claude-haiku-4-5-20251001", 1), ctx).to_json()
    monkeypatch.undo()
    assert record["passed"], record["failure"]
    return counter.entries


def test_the_entries_a_cell_reads_do_not_grow_with_the_run(tmp_path, monkeypatch):
    small = entries_read_by_one_cell(tmp_path / "small", monkeypatch, 10)
    large = entries_read_by_one_cell(tmp_path / "large", monkeypatch, 400)
    assert small > 0, "the counter saw nothing: it no longer counts what the harness reads"
    # One listing of the run would be 390 more entries; a cell's own files are the same.
    assert large - small < 5, f"a cell read {small} entries in a run of 11 cells and {large} in one of 401"


@pytest.fixture(params=["inotify", "listing"])
def watch_kind(request, monkeypatch):
    if request.param == "listing":
        monkeypatch.setattr(beside, "_LIBC", None)
    elif not beside.available():
        pytest.skip("inotify is Linux's; elsewhere the listing is the watch")
    return request.param


def test_the_watch_reports_what_changed_beside_and_nothing_the_harness_wrote(tmp_path, watch_kind):
    run = tmp_path / "run"
    (run / "old-agent-folder").mkdir(parents=True)  # left by an agent of an earlier session
    (run / "untouched.txt").write_text("x")
    (run / "rewritten.txt").write_text("x")
    beside._foreign_dirs.clear()
    watch = workspace.watch_beside(run)
    (run / "new.txt").write_text("x")
    (run / "rewritten.txt").write_text("xy")
    (run / "old-agent-folder" / "inside.txt").write_text("x")
    (run / "made-and-removed.txt").write_text("x")
    (run / "made-and-removed.txt").unlink()
    # The harness's own: another cell's workspace, the records, the results, the ledger.
    (run / "t__baseline__haiku__3").mkdir()
    (run / "t__baseline__haiku__3.attempt-1").mkdir()
    (run / rundir.RECORDS).mkdir()
    (run / rundir.RESULTS).write_text("{}\n")
    (run / rundir.SPEND).write_text("{}\n")
    changed = watch.changed()
    assert changed == ["new.txt", "old-agent-folder", "rewritten.txt"]


def test_a_folder_an_agent_makes_is_watched_for_the_next_cell(tmp_path):
    if not beside.available():
        pytest.skip("inotify is Linux's")
    run = tmp_path / "run"
    run.mkdir()
    beside._foreign_dirs.clear()
    first = workspace.watch_beside(run)
    (run / "made-by-agent").mkdir()
    assert first.changed() == ["made-by-agent"]
    second = workspace.watch_beside(run)
    (run / "made-by-agent" / "later.txt").write_text("x")  # a write inside it, by the next agent
    assert second.changed() == ["made-by-agent"]


def test_lost_events_fall_back_to_what_changed_since_the_start(tmp_path):
    if not beside.available():
        pytest.skip("inotify is Linux's")
    run = tmp_path / "run"
    run.mkdir()
    (run / "before.txt").write_text("x")
    os.utime(run / "before.txt", ns=(0, 0))
    watch = workspace.watch_beside(run)
    (run / "during.txt").write_text("x")
    watch.overflowed = True  # as when the kernel's queue overflowed
    assert watch.changed() == ["during.txt"]


def test_the_spend_so_far_reads_only_what_was_appended_since_it_was_last_asked(tmp_path, monkeypatch):
    run = rundir.RunDir(tmp_path)
    for n in range(200):
        run.record_spend(f"c{n}", 0.01)
    assert run.spent() == pytest.approx(2.0)
    read = []
    real_pread = os.pread
    monkeypatch.setattr(os, "pread", lambda fd, size, offset: read.append(size) or real_pread(fd, size, offset))
    run.record_spend("last", 0.5)
    read.clear()  # what the append itself read (the ledger's last byte)
    assert run.spent() == pytest.approx(2.5)
    assert sum(read) == len(json.dumps({"cell": "last", "cost_usd": 0.5}) + "\n")  # not the 200 lines before
    with open(run.spend_path, "a") as ledger:  # a line still being written counts once it is whole
        ledger.write('{"cell": "torn", "cost_usd": 1')
    assert run.spent() == pytest.approx(2.5)
    with open(run.spend_path, "a") as ledger:
        ledger.write('.0}\n')
    assert run.spent() == pytest.approx(3.5)
    replaced = tmp_path / "new-ledger"
    replaced.write_text(json.dumps({"cell": "x", "cost_usd": 0.25}) + "\n")
    replaced.replace(run.spend_path)  # another file in its place: read again whole
    assert run.spent() == pytest.approx(0.25)


def test_records_read_back_share_their_keys_and_repeated_values(tmp_path):
    path = tmp_path / "results.jsonl"
    lines = [{"cell": f"add__baseline__haiku__{n}", "task": "add", "arm": "baseline", "model": "haiku",
              "status": "finished", "failure": "incorrect: add(2, 3) is not 5", "workspace": f"/runs/x/{n}"}
             for n in range(3)]
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    first, second, _ = rundir.read_results_file(path, None)
    assert first == lines[0] and second == lines[1]
    assert first["failure"] is second["failure"] and first["task"] is second["task"]
    assert all(a is b for a, b in zip(first, second))  # the keys, once


def test_no_watch_left_falls_back_to_a_listing(tmp_path, monkeypatch):
    if not beside.available():
        pytest.skip("inotify is Linux's")
    run = tmp_path / "run"
    run.mkdir()

    class NoWatches:  # the user's inotify watches are all taken (fs.inotify.max_user_watches)
        inotify_init1 = staticmethod(beside._LIBC.inotify_init1)

        @staticmethod
        def inotify_add_watch(*args):
            return -1

    monkeypatch.setattr(beside, "_LIBC", NoWatches)
    watch = workspace.watch_beside(run)
    (run / "escaped.txt").write_text("x")
    assert watch.changed() == ["escaped.txt"]
