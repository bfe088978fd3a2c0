"""Verdicts are content-addressed (cell/lifecycle.judged, scoring/fingerprint.py): a rescore or
a resume reuses a cell's kept verdicts while its workspace files, its task's checks, the
harness and the deciding library versions are all unchanged, and judges again what changed.
The check runner is counted: a reused verdict runs no check. The deciding libraries are pinned,
installed at their pins, and draw the same inputs every time (issue 34, deterministic verdicts)."""
from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from pytest_ponybench.cell import lifecycle as cell, workspace
from pytest_ponybench.scoring import checks, fingerprint
from pytest_ponybench.specs.spec import ArmSpec, load_task
from pytest_ponybench.store.rundir import RunDir, write_record

KEY = b"k" * 32
TASK = {"file": "mod.py", "prompt": "Write f() in mod.py.",
        "checks": {"correct": "assert load(FILE).f() == 1, 'f() is not 1'\n"},
        "refs": {"axis": "correct", "good": "def f():\n    return 1\n", "bad": "def f():\n    return 2\n"}}
GOOD = {"mod.py": "def f():\n    return 1\n"}


def make_cell(tmp_path: Path, task: dict = TASK, files: dict = GOOD) -> tuple[cell.Cell, Path]:
    """A finished cell of a sealed run (`KEY`), its verdicts judged and kept once."""
    path = tmp_path / "t.yaml"
    path.write_text(yaml.safe_dump(task))
    spec = load_task(path, tmp_path)
    c = cell.Cell(spec, ArmSpec(name="baseline", path=None), "haiku", "claude-haiku-4-5-20251001", 0)
    ws = tmp_path / "run" / c.id
    workspace.seed(spec, ws, key=KEY)
    workspace.write_files(ws, files)
    write_record(ws, cell.AGENT_RECORD, {"status": "finished", "error": ""}, KEY)
    return c, ws


def retask(c: cell.Cell, tmp_path: Path, task: dict) -> cell.Cell:
    path = tmp_path / "t.yaml"
    path.write_text(yaml.safe_dump(task))
    return cell.Cell(load_task(path, tmp_path), c.arm, c.model, c.model_id, c.run)


@pytest.fixture
def judging(monkeypatch) -> list:
    """Every call of the check runner (and still run it)."""
    calls = []
    real = checks.run_checks

    def counted(*args, **kwargs):
        calls.append(args[1])
        return real(*args, **kwargs)

    monkeypatch.setattr(checks, "run_checks", counted)
    return calls


def another_hypothesis(monkeypatch) -> None:
    versions = {**fingerprint.library_versions(), "hypothesis": "6.170.27"}
    monkeypatch.setattr(fingerprint, "library_versions", lambda: versions)


def test_an_unchanged_cell_is_not_judged_again(tmp_path, judging):
    c, ws = make_cell(tmp_path)
    first = cell.finish(c, ws, KEY).to_json()
    assert first["correct"] == 1 and len(judging) == 1 and first["verdict_key"]
    again = cell.score_cell(c, ws, KEY).to_json()
    assert len(judging) == 1, "an unchanged cell was judged again"
    assert again == first


def test_a_changed_workspace_file_is_judged_again(tmp_path, judging):
    c, ws = make_cell(tmp_path)
    first = cell.finish(c, ws, KEY).to_json()
    (ws / "mod.py").write_text("def f():\n    return 2\n")
    again = cell.score_cell(c, ws, KEY).to_json()
    assert len(judging) == 2 and again["correct"] == 0 and again["verdict_key"] != first["verdict_key"]


def test_a_changed_check_is_judged_again(tmp_path, judging):
    c, ws = make_cell(tmp_path)
    assert cell.finish(c, ws, KEY).to_json()["correct"] == 1
    stricter = {**TASK, "checks": {"correct": "assert load(FILE).f() == 2, 'f() is not 2'\n"}}
    again = cell.score_cell(retask(c, tmp_path, stricter), ws, KEY).to_json()
    assert len(judging) == 2 and again["correct"] == 0


def test_a_changed_prompt_alone_reuses_the_verdicts(tmp_path, judging):
    c, ws = make_cell(tmp_path)
    cell.finish(c, ws, KEY)
    cell.score_cell(retask(c, tmp_path, {**TASK, "prompt": "Write f() in mod.py, please."}), ws, KEY)
    assert len(judging) == 1, "a change no check reads judged the cell again"


def test_a_changed_harness_is_judged_again(tmp_path, judging, monkeypatch):
    c, ws = make_cell(tmp_path)
    cell.finish(c, ws, KEY)
    monkeypatch.setattr(fingerprint, "_sources_digest", lambda: "another harness")
    cell.score_cell(c, ws, KEY)
    assert len(judging) == 2


def test_another_hypothesis_version_is_judged_again(tmp_path, judging, monkeypatch):
    c, ws = make_cell(tmp_path)
    first = cell.finish(c, ws, KEY).to_json()
    another_hypothesis(monkeypatch)
    again = cell.score_cell(c, ws, KEY).to_json()
    assert len(judging) == 2 and again["verdict_key"] != first["verdict_key"]
    cell.score_cell(c, ws, KEY)
    assert len(judging) == 2, "the verdicts judged under the new version were not kept"


def test_verdicts_kept_without_the_run_s_key_are_not_reused(tmp_path, judging):
    c, ws = make_cell(tmp_path)
    first = cell.finish(c, ws, KEY).to_json()
    forged = {"key": first["verdict_key"], "verdicts": {"correct": {"ok": True, "reason": "ok"}}}
    (ws / "mod.py").write_text("def f():\n    return 2\n")
    write_record(ws, cell.VERDICTS, {**forged, "key": cell.verdict_key(c.task, ws)}, None)  # unsealed
    assert cell.score_cell(c, ws, KEY).to_json()["correct"] == 0 and len(judging) == 2


def test_a_resume_judges_a_kept_cell_again_only_when_its_key_changed(tmp_path, judging, monkeypatch):
    c, ws = make_cell(tmp_path)
    run_dir = RunDir(tmp_path / "run", KEY)
    cell.finish(c, ws, KEY)
    kept = cell.kept_result(c, run_dir).to_json()
    assert kept["reused"] and len(judging) == 1
    another_hypothesis(monkeypatch)
    kept = cell.kept_result(c, run_dir).to_json()
    assert kept["reused"] and len(judging) == 2, "a resume reused verdicts judged under another Hypothesis"
    cell.kept_result(c, run_dir)
    assert len(judging) == 2, "the result judged again was not kept"


def test_a_verdict_of_a_check_that_timed_out_is_not_kept(tmp_path, judging):
    """A check of correct code can run out of its time on a loaded machine: a rescore judges
    such a cell again rather than keep what the load decided."""
    slow = {**TASK, "check_timeout": 1, "checks": {"correct": "while True:\n    pass\n"}}
    c, ws = make_cell(tmp_path, slow)
    first = cell.finish(c, ws, KEY).to_json()
    assert first["correct"] == 0 and "timed out" in first["correct_reason"]
    cell.score_cell(c, ws, KEY)
    assert len(judging) == 2, "a verdict the check's time limit decided was reused"


def test_a_copy_on_another_host_has_the_same_key(tmp_path):
    """A remote worker's workspace brought home, and the fixture it was judged against unpacked
    there, are copies: folders of another size, the write bits an extraction clears, whole
    seconds for modification times. The key is the same, so a rescore reuses the verdicts;
    a change of a file's content or of its execute bit still changes it."""
    import os
    import shutil

    fixture = tmp_path / "fixture"
    (fixture / "app").mkdir(parents=True)
    (fixture / "app" / "core.py").write_text("X = 1\n")
    task = {**TASK, "fixture": "fixture"}
    c, ws = make_cell(tmp_path, task)
    before = cell.verdict_key(c.task, ws)

    for _ in range(50):  # a folder that held many entries keeps its larger size
        (ws / "gone").mkdir(exist_ok=True)
    for n in range(200):
        (ws / "gone" / f"{n:040d}").write_text("")
    shutil.rmtree(ws / "gone")
    (ws / "mod.py").chmod(0o666)
    for path in fixture.rglob("*"):
        os.utime(path, ns=(0, 1_000_000_000))
    moved = retask(c, tmp_path, task)
    assert cell.verdict_key(moved.task, ws) == before

    (ws / "mod.py").chmod(0o755)
    assert cell.verdict_key(moved.task, ws) != before
    (ws / "mod.py").chmod(0o644)
    (fixture / "app" / "core.py").write_text("X = 2\n")
    assert cell.verdict_key(retask(c, tmp_path, task).task, ws) != before


# --------------------------------------------------------------------------- pinned deciding libraries


def pins() -> dict[str, str]:
    """{name: version} of pyproject.toml's dependencies pinned with '=='."""
    import tomllib

    project = tomllib.loads((Path(__file__).resolve().parents[1] / "pyproject.toml").read_text())["project"]
    return dict(dep.split("==", 1) for dep in project["dependencies"] if "==" in dep)


def test_every_deciding_library_is_pinned_and_installed_at_its_pin():
    """The red team's verdicts (test_redteam.py) hold under the installed libraries; with
    these equal to the pins, and the pins in every verdict key, a verdict depends only on
    pinned versions: another machine with another version judges afresh, never reuses."""
    pinned, installed = pins(), fingerprint.library_versions()
    for name in fingerprint.DECIDING_LIBRARIES:
        assert name in pinned, f"{name} decides verdicts but pyproject.toml does not pin it with =="
        assert installed[name] == pinned[name], (f"{name} {installed[name]} is installed, {pinned[name]} "
                                                 f"pinned: verdicts here may differ from CI's")


def test_a_differential_check_draws_the_same_inputs_every_time():
    """sql_lookup's red-team case that quotes SQL with repr() passed under one Hypothesis and
    failed under another, by what was drawn: within one version every input drawn, in order,
    is the same on every call (derandomized, no example database)."""
    from hypothesis import strategies as st

    from pytest_ponybench.scoring import checklib

    def drawn() -> list[str]:
        seen: list[str] = []

        def delivered(name):
            seen.append(name)
            return name.upper()

        checklib.differential(delivered, str.upper, st.text(alphabet="a'\" -", max_size=8), examples=50)
        return seen

    first = drawn()
    assert len(set(first)) > 10 and drawn() == first
