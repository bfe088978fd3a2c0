"""--ponybench-confine: the real CLI under bubblewrap, in rehearsal.

The scripted model writes the task's file in the workspace, then two files outside it: one
beside the workspace in the run directory (which escape detection watches) and one in the
project root above the run directory. The project lives under /var/tmp, not /tmp: the
sandbox gives the agent a private /tmp, and here the read-only view of the system is what
must stop the writes. Confined, the workspace file is written, neither outside file reaches
the host and the cell scores and passes; unconfined, both land and the cell fails as escaped.
"""
from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path

import pytest

from support import proc_watch
from support.benchproc import ADD_TASK, bench_args, only_run_dir, results, run, write_project
from support.records import record_data

OUTSIDE_CONFTEST = """\
from pathlib import Path

def pytest_ponybench_rehearsal_script(cell, script):
    workspace = Path(script.writes[0][0]).parent
    script.writes.append((str(workspace.parent / f"beside-{cell.run}.txt"), "written beside the workspace"))
    script.writes.append((str(workspace.parent.parent.parent / f"above-{cell.run}.txt"), "written above the run"))
"""


@pytest.fixture
def outside_project(claude_bin):
    # Like the pinned CLI: skipped on a developer machine without it, a failure in CI,
    # where .ci/run installs it.
    if shutil.which("bwrap") is None:
        message = "bubblewrap is not installed: apt-get install bubblewrap"
        if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
            pytest.fail(message)
        pytest.skip(message)
    root = Path(tempfile.mkdtemp(prefix="ponybench-confine-", dir="/var/tmp"))
    try:
        yield write_project(root, {"add": ADD_TASK}, conftest=OUTSIDE_CONFTEST), claude_bin
    finally:
        shutil.rmtree(root, ignore_errors=True)


def cell_dir(root: Path) -> Path:
    return only_run_dir(root) / "add__baseline__haiku__0"


def test_a_confined_agent_writes_its_workspace_and_nothing_else(outside_project):
    root, claude_bin = outside_project
    done = run(root, bench_args(root, "--ponybench-rehearse", "--ponybench-confine", claude=claude_bin))
    assert done.returncode == 0, done.stdout[-3000:]
    ws = cell_dir(root)
    assert (ws / "add.py").read_text() == ADD_TASK["rehearsal"]["add.py"]
    assert not (ws.parent / "beside-0.txt").exists() and not (root / "above-0.txt").exists()
    (record,) = results(ws.parent)
    assert (record["status"], record["correct"], record["passed"], record["escaped"]) == ("finished", 1, True, "")
    agent_record = record_data(ws, "agent")
    assert agent_record["confined"] is True and agent_record["argv"][0].endswith("bwrap")
    # The CLI did try: both writes came back as read-only errors.
    refused = [line for line in (ws / "_ponybench.transcript.jsonl").read_text().splitlines()
               if "EROFS: read-only file system" in line]
    for outside in (ws.parent / "beside-0.txt", root / "above-0.txt"):
        assert any(str(outside) in line for line in refused), f"no refused write of {outside}"
    assert proc_watch.working_in(ws.parent) == []


def test_unconfined_the_same_writes_land_and_the_cell_fails_as_escaped(outside_project):
    root, claude_bin = outside_project
    done = run(root, bench_args(root, "--ponybench-rehearse", "--ponybench-no-confine", claude=claude_bin))
    assert done.returncode == pytest.ExitCode.TESTS_FAILED, done.stdout[-3000:]
    ws = cell_dir(root)
    assert (ws / "add.py").is_file()
    assert (ws.parent / "beside-0.txt").is_file() and (root / "above-0.txt").is_file()
    (record,) = results(ws.parent)
    assert record["status"] == "finished" and record["correct"] == 1 and not record["passed"]
    assert "beside-0.txt" in record["escaped"].split(",")
    assert record["failure"] == f"the agent wrote outside its workspace: {record['escaped']}"
    assert f"the agent wrote outside its workspace: {record['escaped']}" in done.stdout


def test_a_cli_installed_under_tmp_still_runs_confined(outside_project, tmp_path):
    """The sandbox's /tmp is private: a CLI installed under /tmp (a checkout there, as CI's
    may be; here a wrapper script that lives in /tmp) must still be visible inside it."""
    root, claude_bin = outside_project
    assert Path("/tmp") in tmp_path.parents, "pytest's tmp_path is expected under /tmp here"
    wrapper = tmp_path / "claude"
    wrapper.write_text(f'#!/bin/sh\nexec "{claude_bin}" "$@"\n')
    wrapper.chmod(0o755)
    done = run(root, bench_args(root, "--ponybench-rehearse", "--ponybench-confine", claude=wrapper))
    assert done.returncode == 0, done.stdout[-3000:]
    (record,) = results(cell_dir(root).parent)
    assert (record["status"], record["passed"]) == ("finished", True)
