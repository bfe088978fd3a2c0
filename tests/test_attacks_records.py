"""Attacks on the harness's records, as a hostile agent (or the code it wrote) would make them.

The agent runs as the same user as the harness and can write anywhere that user can: into its
workspace, beside it in the run directory, into other cells. Each test below is one attack of
issue 20 that broke a promise before the records were kept beside the workspace and sealed with
the run's key (rundir.py); each failed on the code before that change.
"""
from __future__ import annotations

import json
import multiprocessing
import os
import time
from pathlib import Path

import pytest

from pytest_ponybench.cell import lifecycle as cell, workspace
from pytest_ponybench.run import controller
from pytest_ponybench.store.record import CellRecord
from pytest_ponybench.store.rundir import RunDir
from pytest_ponybench.specs.spec import ArmSpec, TaskSpec
from support.records import record_path

MODEL_ID = "claude-haiku-4-5-20251001"


@pytest.fixture(autouse=True)
def key_dir(tmp_path, monkeypatch):
    """Run keys in a folder of this test, outside its run directory."""
    folder = tmp_path / "keys"
    monkeypatch.setenv("PONYBENCH_KEY_DIR", str(folder))
    return folder


def a_cell(tmp_path: Path, fixture: Path | None = None, arm: str = "baseline") -> cell.Cell:
    task = TaskSpec(name="add", path=tmp_path / "add.yaml", prompt="Write add(a, b) in add.py.", file="add.py",
                    seed={"add.py": "def add(a, b):\n    raise NotImplementedError\n"}, fixture=fixture)
    return cell.Cell(task, ArmSpec(name=arm, path=None), "haiku", MODEL_ID, 0)


def forged_result(c: cell.Cell) -> dict:
    """What an agent writes to pass its own cell for free: the record of a passed cell."""
    return {**cell.identity(c), "status": "finished", "ran": True, "passed": True, "correct": 1, "safe": 1,
            "correct_reason": "ok", "safe_reason": "ok", "failure": "", "error": "", "cost_usd": 0.0}


def forge(ws: Path, kind: str, old_name: str, data) -> None:
    """Write a record where the harness keeps it (beside the workspace, with a made-up MAC)
    and where it used to keep it (in the workspace)."""
    path = record_path(ws, kind)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"kind": kind, "data": data, "mac": "0" * 64}))
    ws.mkdir(parents=True, exist_ok=True)
    (ws / old_name).write_text(json.dumps(data))


def test_a_forged_result_is_not_reused_by_a_resume(tmp_path):
    run_dir = RunDir.create(tmp_path / "runs")
    c = a_cell(tmp_path)
    ws = run_dir.cell_dir(c.id)
    forge(ws, "cell", "_ponybench.cell.json", cell.identity(c))
    forge(ws, "result", "_ponybench.result.json", forged_result(c))
    assert cell.kept_result(c, run_dir) is None, "a forged result was reused as a finished, passed, free cell"
    lines = cell.refused_lines(run_dir, rescore=False)
    assert len(lines) == 1 and c.id in lines[0] and "does not verify" in lines[0], lines


def test_an_authentic_result_of_another_cell_copied_in_is_not_reused(tmp_path):
    run_dir = RunDir.create(tmp_path / "runs")
    c, other = a_cell(tmp_path), cell.Cell(a_cell(tmp_path).task, ArmSpec(name="baseline", path=None), "haiku", MODEL_ID, 1)
    from pytest_ponybench.store.rundir import write_record

    write_record(run_dir.cell_dir(other.id), "result", {**forged_result(other)}, run_dir.key)
    run_dir.cell_dir(other.id).mkdir()
    run_dir.cell_dir(c.id).mkdir()
    assert cell.kept_result(other, run_dir) is not None  # the harness's own record verifies
    record_path(run_dir.cell_dir(c.id), "result").parent.mkdir(parents=True)
    record_path(run_dir.cell_dir(c.id), "result").write_bytes(record_path(run_dir.cell_dir(other.id), "result").read_bytes())
    assert cell.kept_result(c, run_dir) is None, "a sealed record moved to another cell was trusted"


def test_a_rewritten_fixture_manifest_and_cell_identity_are_refused_by_a_rescore(tmp_path):
    source = tmp_path / "fixture"
    source.mkdir()
    (source / "app.py").write_text("x = 1\n")
    run_dir = RunDir.create(tmp_path / "runs")
    c = a_cell(tmp_path, fixture=source)
    ws = run_dir.cell_dir(c.id)
    ws.mkdir()
    from pytest_ponybench.store.rundir import write_record

    write_record(ws, "cell", cell.identity(c), run_dir.key)
    write_record(ws, cell.AGENT_RECORD, {"status": "finished", "error": ""}, run_dir.key)
    workspace.seed(c.task, ws, key=run_dir.key)
    assert cell.rescore_problem(ws, run_dir.key) is None  # untouched: rescored
    (ws / "new.py").write_text("a = 1\nb = 2\nc = 3\n")
    # The agent lists its own file as the fixture's (zero LOC) and moves its cell to another arm.
    forge(ws, "fixture", "_ponybench.fixture.json", ["app.py", "new.py"])
    problem = cell.rescore_problem(ws, run_dir.key)
    assert problem and "fixture.json" in problem and "does not verify" in problem
    assert workspace.fixture_manifest(ws, run_dir.key) == set()
    forge(ws, "cell", "_ponybench.cell.json", {**cell.identity(c), "arm": "other-arm"})
    assert cell.read_identity(ws, run_dir.key) == {}, "a rewritten identity moved the cell to another arm"
    lines = cell.refused_lines(run_dir, rescore=True)
    assert len(lines) == 1 and c.id in lines[0] and "left out of the rescore" in lines[0], lines


def records_for(n: int) -> list[dict]:
    return [{"cell": f"add__baseline__haiku__{i}", "task": "add", "arm": "baseline", "model": "haiku",
             "status": "finished", "passed": True, "correct": 1, "safe": 1, "run": i} for i in range(n)]


def test_garbage_and_an_empty_object_in_results_jsonl_are_skipped_with_one_warning_each(tmp_path):
    run_dir = RunDir.create(tmp_path / "runs")
    gathering = controller.Gathering(run_dir)
    first, second = records_for(2)
    gathering.add(CellRecord.from_json(first))
    with open(run_dir.results_path, "a") as fh:  # the agent's Write of `{}`, and some garbage, no newline
        fh.write("{}\nnot json\n{}")
    gathering.add(CellRecord.from_json(second))
    reader = RunDir(run_dir.path, run_dir.key)  # a later reader of the file as it is now
    assert [r["cell"] for r in reader.read_results()] == [first["cell"], second["cell"]]
    lines = reader.refused_lines
    assert [line.split(" line ")[1].split(" ")[0] for line in lines] == ["2", "3", "4"], lines
    every = gathering.all_records()
    assert sorted(r["cell"] for r in every) == [first["cell"], second["cell"]]
    gathering.finish({"haiku": MODEL_ID}, "2.1.328", rehearsal=True, reference="baseline", plots=False)
    assert json.loads(run_dir.summary_path.read_text())["cells"] == 2
    # The session made its outputs from the records it holds; the changed file is said once
    # and written again whole, so no later reader meets the garbage.
    refused = run_dir.refused_lines
    assert len(refused) == 1 and str(run_dir.results_path) in refused[0] and "changed by something" in refused[0]
    assert [r["cell"] for r in run_dir.read_results()] == [first["cell"], second["cell"]]
    assert run_dir.refused_lines == refused


def test_a_forged_line_in_results_jsonl_and_an_overwritten_file_lose_no_finished_record(tmp_path):
    run_dir = RunDir.create(tmp_path / "runs")
    gathering = controller.Gathering(run_dir)
    from pytest_ponybench.store.rundir import write_record

    for record in records_for(2):
        ws = run_dir.cell_dir(record["cell"])
        ws.mkdir()
        write_record(ws, "result", record, run_dir.key)  # what the cell kept beside its workspace
        gathering.add(CellRecord.from_json(record))
    forged = {**records_for(3)[2], "cell": "add__baseline__haiku__0", "passed": False, "correct": 0}
    with open(run_dir.results_path, "a") as fh:
        fh.write(json.dumps(forged) + "\n")  # another cell's agent fails cell 0
    every = {r["cell"]: r for r in gathering.all_records()}
    assert every["add__baseline__haiku__0"]["passed"] is True and len(every) == 2
    run_dir.results_path.write_text("{}")  # the Write tool overwrites the whole file
    every = {r["cell"]: r for r in gathering.all_records()}
    assert sorted(every) == ["add__baseline__haiku__0", "add__baseline__haiku__1"]
    assert all(r["passed"] for r in every.values())


def test_a_link_planted_at_a_temporary_name_does_not_redirect_a_harness_write(tmp_path):
    run_dir = RunDir.create(tmp_path / "runs")
    run_dir.results_path.write_text('{"cell": "kept"}\n')
    for name in ("_ponybench.pause.json.tmp", "run.json.tmp", "summary.json.tmp"):
        (run_dir.path / name).symlink_to(run_dir.results_path)
    run_dir.pause(5, "add__baseline__haiku__0")
    run_dir.write_options({"tasks": ["add"]})
    assert run_dir.results_path.read_text() == '{"cell": "kept"}\n', "the harness wrote through a planted link"
    assert json.loads(run_dir.pause_path.read_text())["cell"] == "add__baseline__haiku__0"


def test_a_link_planted_as_a_cell_s_records_folder_is_refused(tmp_path):
    run_dir = RunDir.create(tmp_path / "runs")
    from pytest_ponybench.store.rundir import records_dir, write_record

    ws = run_dir.cell_dir("add__baseline__haiku__0")
    ws.mkdir()
    records_dir(ws).parent.mkdir()
    records_dir(ws).symlink_to(run_dir.path)  # the harness would write result.json into the run directory
    with pytest.raises(OSError, match="symbolic link"):
        write_record(ws, "result", {"cell": ws.name}, run_dir.key)
    assert not (run_dir.path / "result.json").exists()


def _pauses(path: str, seconds: list[float], errors) -> None:
    run_dir = RunDir(Path(path))
    try:
        for s in seconds:
            run_dir.pause(s, f"cell-{os.getpid()}")
    except Exception as exc:  # the old shared `.tmp` name: the other writer renamed it away
        errors.put(f"{type(exc).__name__}: {exc}")


def test_two_workers_writing_the_429_pause_at_once_never_collide(tmp_path):
    run_dir = RunDir.create(tmp_path / "runs")
    errors = multiprocessing.get_context("fork").Queue()
    ctx = multiprocessing.get_context("fork")
    procs = [ctx.Process(target=_pauses, args=(str(run_dir.path), [1 + i * 0.001 + w for i in range(400)], errors))
             for w in range(3)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
    found = []
    while not errors.empty():
        found.append(errors.get())
    assert found == []
    assert run_dir.paused_until() > time.time()
    assert not [p for p in run_dir.path.iterdir() if p.name.endswith(".tmp")], "a temporary was left behind"


def test_a_negative_cost_in_the_ledger_does_not_lower_the_spend(tmp_path):
    run_dir = RunDir.create(tmp_path / "runs")
    run_dir.record_spend("add__baseline__haiku__0", 0.5)
    with open(run_dir.spend_path, "a") as fh:  # the agent appends to the ledger beside its workspace
        for cost in ("-100", "NaN", "-Infinity", "Infinity", '"12"', "true", "null"):
            fh.write(f'{{"cell": "x", "cost_usd": {cost}}}\n')
        fh.write("garbage\n{}\n[1]\n")
    assert run_dir.spent() == pytest.approx(0.5)
    for cost in (-1.0, float("nan"), float("inf"), "0.5", True):
        with pytest.raises(ValueError, match="finite, non-negative"):
            run_dir.record_spend("add__baseline__haiku__0", cost)
    assert run_dir.spent() == pytest.approx(0.5)


def test_a_far_pause_is_capped_to_the_longest_pause_the_harness_writes(tmp_path):
    run_dir = RunDir.create(tmp_path / "runs")
    run_dir.pause_path.write_text(json.dumps({"until": time.time() + 10 ** 9, "cell": "forged"}))
    slept = []

    def sleep(seconds):
        slept.append(seconds)
        assert sum(slept) <= 7200, "the run would wait for the forged pause without end"

    from pytest_ponybench.store.rundir import max_pause
    from types import SimpleNamespace

    run_dir.max_pause = max_pause(SimpleNamespace(retry_wait=10.0, retries=2))  # 40 s: what the harness writes
    assert run_dir.paused_until() <= time.time() + 40.5
    assert run_dir.wait_for_pause(sleep) <= 40.0 + 1e-6
    for until in ("Infinity", "NaN", '"soon"', "1e999"):
        run_dir.pause_path.write_text(f'{{"until": {until}}}')
        assert run_dir.paused_until() <= time.time() + 40.5


BOMB = "".join(f"{name}: &{name} [" + ",".join([f"*{prev}"] * 9 if prev else ['"lol"'] * 9) + "]\n"
               for prev, name in zip([None, *"abcdefgh"], "abcdefghi"))


def test_a_yaml_anchor_bomb_task_file_is_refused_at_once_naming_the_file(tmp_path):
    from pytest_ponybench.specs.spec import SpecError, load_task

    path = tmp_path / "bomb.yaml"
    path.write_text(f'prompt: "Write add."\nfile: add.py\nchecks: {{correct: "assert True"}}\n{BOMB}')
    assert len(path.read_bytes()) < 700
    started = time.monotonic()
    with pytest.raises(SpecError) as refused:
        load_task(path, tmp_path)
    assert time.monotonic() - started < 1.0
    assert str(path) in str(refused.value) and "alias" in str(refused.value)


def a_case(tmp_path: Path) -> Path:
    case = tmp_path / "evals" / "greet"
    (case / "files").mkdir(parents=True)
    (case / "prompt.md").write_text("Say hello in hello.txt.\n")
    (case / "case.yaml").write_text("graders:\n  - type: file_exists\n    path: hello.txt\n")
    return case


def test_an_anchor_bomb_in_an_eval_case_is_refused_naming_the_file(tmp_path):
    from pytest_ponybench.run import plugin_evals
    from pytest_ponybench.specs.spec import SpecError

    case = a_case(tmp_path)
    (case / "case.yaml").write_text("graders:\n  - type: file_exists\n    path: hello.txt\n" + BOMB)
    started = time.monotonic()
    with pytest.raises(SpecError, match="case.yaml.*alias"):
        plugin_evals.load_case(case, "plug")
    assert time.monotonic() - started < 1.0


def test_a_symlink_in_an_eval_case_s_files_is_refused_naming_the_link(tmp_path):
    from pytest_ponybench.run import plugin_evals
    from pytest_ponybench.specs.spec import SpecError

    case = a_case(tmp_path)
    secret = tmp_path / "secret.txt"
    secret.write_text("a secret of the user's\n")
    (case / "files" / "notes.txt").symlink_to(secret)
    with pytest.raises(SpecError, match=r"files/notes\.txt: a symbolic link"):
        plugin_evals.load_case(case, "plug")
    (case / "files" / "notes.txt").unlink()
    (case / "files" / "sub").symlink_to(tmp_path, target_is_directory=True)
    with pytest.raises(SpecError, match=r"files/sub: a symbolic link"):
        plugin_evals.load_case(case, "plug")
    (case / "files" / "sub").unlink()
    assert plugin_evals.load_case(case, "plug").task.name == "greet"  # without links, it loads
