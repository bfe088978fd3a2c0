"""Same workspace, same numbers: scoring never touches what it scores.

The end-to-end test rehearses every shipped task through the real CLI, rescores the run twice
and finds every figure identical and every file under every workspace byte for byte as it was.
The others pin the pieces: checks run in disposable copies, the fixture diff writes nothing
under .git, a rescore never rewrites a cell's result.
"""
from __future__ import annotations

import hashlib
from pathlib import Path

import pytest
import yaml

from pytest_ponybench.cell import lifecycle as cell, workspace
from pytest_ponybench.specs.spec import ArmSpec, load_task
from support import ponyproject as pp
from pytest_ponybench.store.rundir import write_record
from support.records import record_path

REPO = Path(__file__).resolve().parents[1]
# What a rescore may legitimately recompute differently: where the record was produced.
VOLATILE = {"reused"}


def tree_digest(root: Path) -> dict[str, str]:
    """Every file under every workspace of a run, by path: its sha256 (links by their target)."""
    found = {}
    for path in sorted(Path(root).rglob("*")):
        rel = path.relative_to(root).as_posix()
        if path.is_symlink():
            found[rel] = "link:" + str(path.readlink())
        elif path.is_file():
            found[rel] = hashlib.sha256(path.read_bytes()).hexdigest()
    return found


def workspaces_digest(run_dir: Path) -> dict[str, str]:
    return {k: v for k, v in tree_digest(run_dir).items() if "/" in k}  # files inside cell folders


def figures(run_dir: Path) -> dict[str, dict]:
    return {r["cell"]: {k: v for k, v in r.items() if k not in VOLATILE} for r in pp.results(run_dir)}


# A gate of the shipped library (every task's checks leave the workspace they score as it
# was), so CI's quality step runs it: the harness's part, that each check runs in a
# disposable copy, is the unit test below, in every run of README's test command.
@pytest.mark.library_gate
def test_rescoring_a_rehearsal_twice_changes_no_figure_and_no_file(tmp_path, claude_bin):
    root = tmp_path / "bench"
    root.mkdir()
    for name in ("tasks", "arms", "fixtures"):
        (root / name).symlink_to(REPO / name)
    (root / "pytest.ini").write_text("[pytest]\ntestpaths = tasks\n")
    (root / "conftest.py").write_text(pp.CONFTEST)
    env = {"HOME": str(tmp_path / "home")}
    run = pp.run_pytest(root, pp.bench_args(root, "--ponybench-rehearse", "--arms", "baseline", "-n", "2",
                                            claude=claude_bin), env, timeout=900)
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-2000:]
    run_dir = pp.only_run_dir(root)
    first = figures(run_dir)
    assert len(first) == len(list((REPO / "tasks").glob("*.yaml")))
    assert all(r["passed"] for r in first.values()), {c: r["failure"] for c, r in first.items() if not r["passed"]}
    files = workspaces_digest(run_dir)
    for _ in range(2):
        again = pp.run_pytest(root, [f"--ponybench-rescore={run_dir}", *pp.QUIET, "-n", "2"], env, timeout=600)
        assert again.returncode == 0, again.stdout[-4000:] + again.stderr[-2000:]
        assert figures(run_dir) == first
        assert workspaces_digest(run_dir) == files, "a rescore changed a file under a workspace"


def scored(tmp_path, task: dict, files: dict[str, str]) -> tuple[cell.Cell, Path]:
    path = tmp_path / "t.yaml"
    path.write_text(yaml.safe_dump(task))
    spec = load_task(path, tmp_path)
    c = cell.Cell(spec, ArmSpec(name="baseline", path=None), "haiku", "claude-haiku-4-5-20251001", 0)
    ws = tmp_path / c.id
    workspace.seed(spec, ws)
    workspace.write_files(ws, files)
    write_record(ws, cell.AGENT_RECORD, {"status": "finished", "error": ""}, None)
    return c, ws


# A check that writes where it runs, as tar_extract's did: on the first scoring the leftovers
# landed in the kept workspace and broke the second, and counted as the agent's code.
WRITING_TASK = {
    "file": "mod.py", "prompt": "Write f() in mod.py.",
    "checks": {"correct": "import os\n"
                          "assert not os.path.exists('leftover.py'), 'a leftover of an earlier scoring'\n"
                          "os.mkdir('out')\nPath('leftover.py').write_text('x = 1\\n')\n"
                          "assert load(FILE).f() == 1\n",
               "safe": "assert not Path('leftover.py').exists(), 'the other axis left a file here'\n"},
    "refs": {"axis": "correct", "good": "def f():\n    return 1\n", "bad": "def f():\n    return 2\n"},
}


def test_checks_run_in_disposable_copies_one_per_axis(tmp_path):
    c, ws = scored(tmp_path, WRITING_TASK, {"mod.py": "def f():\n    return 1\n"})
    before = tree_digest(ws)
    first = cell.score_cell(c, ws).to_json()
    assert (first["correct"], first["safe"]) == (1, 1), first
    assert tree_digest(ws) == before, "scoring wrote into the kept workspace"
    assert cell.score_cell(c, ws).to_json() == first
    assert first["total_loc"] == 2 and first["src_files"] == 1  # the check's leftovers never count


def test_a_rescore_never_rewrites_the_cells_result(tmp_path):
    c, ws = scored(tmp_path, WRITING_TASK, {"mod.py": "def f():\n    return 1\n"})
    record = cell.finish(c, ws).to_json()  # the one write, when the cell finishes
    result = record_path(ws, workspace.RESULT).read_bytes()
    (ws / "mod.py").write_text("def f():\n    return 2\n")  # as if a scorer fix changed a verdict
    assert cell.score_cell(c, ws).to_json()["correct"] == 0 and record["correct"] == 1
    assert record_path(ws, workspace.RESULT).read_bytes() == result
