"""The agent's sandbox (on by default where bubblewrap works): the real CLI under bubblewrap,
in rehearsal; and where the sandbox cannot be made, the one line that says so.

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
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from pytest_ponybench.cell import confine as confinement
from pytest_ponybench.processes import sandbox
from support import proc_watch
from support.benchproc import (ADD_TASK, GOOD_ADD, bench_args, fake_env, installed_cli, only_run_dir, results, run,
                               write_project)
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
    may be) must still be visible inside it."""
    root, claude_bin = outside_project
    assert Path("/tmp") in tmp_path.parents, "pytest's tmp_path is expected under /tmp here"
    installed = installed_cli(claude_bin, tmp_path / "cli")
    done = run(root, bench_args(root, "--ponybench-rehearse", "--ponybench-confine", claude=installed))
    assert done.returncode == 0, done.stdout[-3000:]
    (record,) = results(cell_dir(root).parent)
    assert (record["status"], record["passed"]) == ("finished", True)


# --------------------------------------------------------------------------- the default, and where it cannot be

def session_without_bwrap(root: Path, tmp_path: Path, *extra: str, ini: str = ""):
    """A run with the stand-in CLI on a PATH that has python3 and no bubblewrap."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "python3").symlink_to(sys.executable)
    write_project(root, {"add": ADD_TASK})
    (root / "pytest.ini").write_text(f"[pytest]\ntestpaths = tasks\n{ini}")
    env = {**fake_env(root, write=GOOD_ADD), "PATH": str(bin_dir)}
    args = [a for a in bench_args(root) if a != "--ponybench-no-confine"]  # the default path
    return run(root, [*args, *extra], env)


def test_without_bubblewrap_the_run_goes_unconfined_and_says_so_in_the_header_and_run_json(tmp_path):
    root = tmp_path / "project"
    done = session_without_bwrap(root, tmp_path)
    assert done.returncode == 0, done.stdout[-3000:]
    why = "bubblewrap is not installed (apt-get install bubblewrap)"
    header = done.stdout.split("collected")[0]
    assert f"ponybench: the agent runs unconfined: {why}; it can read and write whatever this user can" in header
    run_dir = only_run_dir(root)
    confinement = json.loads((run_dir / "run.json").read_text())["confinement"]
    # own_pids: unconfined, the CLI still has a PID namespace of its own where the machine has
    # namespaces (agent.run); its "limits": test_agent_limits.py
    own_pids = not sandbox.support().namespaces
    assert (confinement["confined"], confinement["why"], confinement["own_pids"]) == (False, why, own_pids)
    assert record_data(run_dir / "add__baseline__haiku__0", "agent")["confined"] is False


def test_forced_confinement_without_bubblewrap_stops_before_any_cell(tmp_path):
    root = tmp_path / "project"
    done = session_without_bwrap(root, tmp_path, "--ponybench-confine")
    assert done.returncode == pytest.ExitCode.USAGE_ERROR, done.stdout[-3000:]
    assert "--ponybench-confine: bubblewrap is not installed (apt-get install bubblewrap)" in done.stderr
    assert not (root / "calls.jsonl").exists() and not (root / "runs").exists()


def test_ini_turns_confinement_off_and_a_bad_value_is_named(tmp_path):
    root = tmp_path / "off"
    write_project(root, {"add": ADD_TASK})
    (root / "pytest.ini").write_text("[pytest]\ntestpaths = tasks\nponybench_confine = false\n")
    args = [a for a in bench_args(root) if a != "--ponybench-no-confine"]
    done = run(root, args, fake_env(root, write=GOOD_ADD))
    assert done.returncode == 0, done.stdout[-3000:]
    assert "ponybench: the agent runs unconfined (--ponybench-no-confine)" in done.stdout
    confinement = json.loads((only_run_dir(root) / "run.json").read_text())["confinement"]
    own_pids = not sandbox.support().namespaces  # agent.run's PID namespace, unconfined
    assert (confinement["confined"], confinement["why"], confinement["own_pids"]) == (False, "--ponybench-no-confine",
                                                                                      own_pids)
    bad = tmp_path / "bad"
    write_project(bad, {"add": ADD_TASK})
    (bad / "pytest.ini").write_text("[pytest]\ntestpaths = tasks\nponybench_confine = maybe\n")
    done = run(bad, [a for a in bench_args(bad) if a != "--ponybench-no-confine"], fake_env(bad, write=GOOD_ADD))
    assert "ini option ponybench_confine = 'maybe': 'maybe' is not auto, true or false" in done.stderr


@pytest.fixture
def installed_package():
    """A venv-like folder outside /tmp holding an installed package with its task library as
    package data, beside another package; its folder goes on the sandbox's PATH."""
    if not confinement.sandbox().works:
        pytest.skip(confinement.sandbox().problem)
    venv = Path(tempfile.mkdtemp(prefix="ponybench-venv-", dir="/var/tmp"))
    try:
        package = venv / "lib" / "site-packages" / "pytest_ponybench"
        (package / "library" / "tasks").mkdir(parents=True)
        (package / "library" / "tasks" / "add.yaml").write_text("good: THE-ANSWER-KEY\n")
        (venv / "lib" / "site-packages" / "other.txt").write_text("another package\n")
        yield venv, package
    finally:
        shutil.rmtree(venv, ignore_errors=True)


def cat_confined(venv: Path, ws: Path, paths: list, needed: list | None = None) -> subprocess.CompletedProcess:
    """`cat` each path inside the agent's sandbox of workspace `ws`, with `venv` on PATH."""
    ws.mkdir(parents=True)
    env = {**os.environ, "PATH": f"{venv}{os.pathsep}{os.environ['PATH']}"}
    argv = confinement.confine(["/bin/sh", "-c", "; ".join(f"cat {p}" for p in paths)], ws, env,
                               run_dir=ws.parent, needed=needed)
    return subprocess.run(argv, cwd=ws, capture_output=True, text=True, timeout=60)


def test_a_non_editable_install_s_task_library_is_not_in_the_agents_view(tmp_path, monkeypatch, installed_package):
    """An installed wheel carries the task library as package data in site-packages, under a
    folder the sandbox binds (the interpreter's, on PATH): that folder is there, the library not."""
    from pytest_ponybench.specs import library

    venv, package = installed_package
    monkeypatch.setattr(library, "PACKAGE_LIBRARY", package / "library")
    done = cat_confined(venv, tmp_path / "runs" / "run" / "cell",
                        [venv / "lib" / "site-packages" / "other.txt", package / "library" / "tasks" / "add.yaml"])
    assert "another package" in done.stdout, done.stderr  # the tool folder is in view
    assert "THE-ANSWER-KEY" not in done.stdout and "No such file" in done.stderr


def test_an_installed_package_and_its_library_inside_it_are_covered_once(tmp_path, monkeypatch, installed_package):
    """From a wheel, the task library is a folder inside the harness's package: covering the
    package covers it, and covering it again would ask bubblewrap for a mount point inside the
    read-only cover (the sandbox did not start: "Can't mkdir .../library: Read-only file
    system", a fresh clone's test_distribution). A shipped arm's plugin lies in that library:
    it is bound into the cover, and only it."""
    venv, package = installed_package
    (package / "plugin.py").write_text("HARNESS-SOURCE\n")
    plugin = package / "library" / "arms" / "plugins" / "small"  # a shipped arm's plugin
    plugin.mkdir(parents=True)
    (plugin / "plugin.json").write_text("THE-ARM-S-PLUGIN\n")
    monkeypatch.setattr(confinement, "harness_paths", lambda run_dir: [str(package), str(package / "library")])
    done = cat_confined(venv, tmp_path / "runs" / "run" / "cell",
                        [venv / "lib" / "site-packages" / "other.txt", package / "plugin.py",
                         package / "library" / "tasks" / "add.yaml", plugin / "plugin.json"], needed=[plugin])
    assert "another package" in done.stdout, done.stderr  # the sandbox started, the tool folder in view
    assert "THE-ARM-S-PLUGIN" in done.stdout, done.stderr  # its arm's plugin, inside the cover
    assert "HARNESS-SOURCE" not in done.stdout and "THE-ANSWER-KEY" not in done.stdout, done.stdout
