"""No user setup in any arm: measured through the real, pinned CLI against the scripted model.

Each test lays out a user's setup around a cell's workspace (a home with ~/.claude, a project
repository above the run directory) with a unique marker in every source, runs the CLI with
exactly the argv and environment a cell gets (`agent.build_argv`, `agent.agent_env`), and
reads the requests the scripted model received. A marker in a request is a source that
reached the model. When a new CLI version lets one of these sources through, or stops
reading one the harness still warns about, a test here fails.
"""
from __future__ import annotations

import json
import re
import subprocess
import uuid
from pathlib import Path

import pytest


from pytest_ponybench.cell import agent
from pytest_ponybench.rehearsal import server as rehearsal, plugin as rehearsal_plugin
from pytest_ponybench.store.rundir import HISTORY_STOP

MODEL_ID = "claude-haiku-4-5-20251001"
# Sources that must never reach the model: marker -> path relative to the layout's root.
OFF = {
    "ABOVE-CLAUDE-MD": "home/project/CLAUDE.md",
    "ABOVE-CLAUDE-LOCAL": "home/project/CLAUDE.local.md",
    "ABOVE-DOT-CLAUDE-MD": "home/project/.claude/CLAUDE.md",
    "ABOVE-RULES": "home/project/.claude/rules/style.md",
    "USER-CLAUDE-MD": "home/.claude/CLAUDE.md",
    "USER-RULES": "home/.claude/rules/mine.md",
    "USER-SKILL": "home/.claude/skills/mine/SKILL.md",
    "HOME-CLAUDE-MD": "home/CLAUDE.md",
}
# Still read with the isolation variables set: the project's own skills above the run
# directory (agent.SETUP_ABOVE), which the run warns about.
STILL_READ = {"ABOVE-SKILL": "home/project/.claude/skills/theirs/SKILL.md"}


def slug(path: Path) -> str:
    """The CLI's folder name for a project under ~/.claude/projects/."""
    return re.sub(r"[^A-Za-z0-9]", "-", str(path.resolve()))


def layout(root: Path, stop_file: bool = False) -> Path:
    """A user's home holding a project repository with runs inside it; returns a cell's workspace.
    `stop_file`: the run directory holds the `.git` file a run made today writes
    (RunDir.stop_repository_history)."""
    for marker, rel in {**OFF, **STILL_READ}.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        if path.name == "SKILL.md":
            path.write_text(f"---\nname: {path.parent.name}\ndescription: MARKER-{marker}\n---\nMARKER-{marker}\n")
        else:
            path.write_text(f"MARKER-{marker}\n")
    project = root / "home" / "project"
    subprocess.run(["git", "init", "-q", str(project)], check=True)
    # The CLI's auto-memory of that repository: keyed by the git root's path.
    memory = root / "home" / ".claude" / "projects" / slug(project) / "memory"
    memory.mkdir(parents=True)
    (memory / "MEMORY.md").write_text("- [habit](habit.md): MARKER-AUTO-MEMORY\n")
    (memory / "habit.md").write_text("---\nname: habit\ndescription: MARKER-AUTO-MEMORY-FILE\ntype: user\n---\nbody\n")
    workspace = project / "runs" / "20260101-000000" / "t__baseline__haiku__0"
    workspace.mkdir(parents=True)
    if stop_file:
        (workspace.parent / ".git").write_text(HISTORY_STOP)
    return workspace


def markers_reaching_the_model(claude: str, root: Path, isolated: bool, stop_file: bool = False) -> set[str]:
    workspace = layout(root, stop_file)
    with rehearsal.ScriptedModel() as model:
        url = model.register("cell", rehearsal.CellScript(answer="Done."))
        env = agent.agent_env({"ANTHROPIC_BASE_URL": url, "ANTHROPIC_API_KEY": rehearsal_plugin.REHEARSAL_KEY,
                               "IS_SANDBOX": "1", "HOME": str(root / "home"), "CLAUDE_CODE_MAX_RETRIES": "0"})
        env.pop("CLAUDE_CONFIG_DIR", None)  # the user's config folder: ~/.claude of that home
        if not isolated:  # the control: the same cell without the two variables
            for name in agent.ISOLATION_ENV:
                env.pop(name)
        argv = agent.build_argv(claude, "Say done.", MODEL_ID, agent.WRITE_AND_STOP, None)
        done = subprocess.run(argv, cwd=workspace, env=env, capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
        requests = model.requests("cell")
    assert requests, "the CLI made no request to the scripted model"
    return set(re.findall(r"MARKER-([A-Z-]+?)(?=[^A-Z-]|$)", json.dumps(requests)))


def test_every_cell_runs_with_claude_md_files_and_auto_memory_off():
    env = agent.agent_env({"CLAUDE_CODE_DISABLE_CLAUDE_MDS": "0"})  # no hook can turn it back on
    assert env["CLAUDE_CODE_DISABLE_CLAUDE_MDS"] == "1" and env["CLAUDE_CODE_DISABLE_AUTO_MEMORY"] == "1"


def test_without_the_isolation_variables_the_user_s_setup_reaches_the_model(tmp_path, claude_bin):
    """The control: every source laid out here is one the CLI really reads, so the isolated
    run below proves something."""
    found = markers_reaching_the_model(claude_bin, tmp_path, isolated=False)
    expected = {"ABOVE-CLAUDE-MD", "ABOVE-CLAUDE-LOCAL", "ABOVE-DOT-CLAUDE-MD", "ABOVE-RULES",
                "USER-CLAUDE-MD", "USER-RULES", "AUTO-MEMORY", "ABOVE-SKILL"}
    assert expected <= found, f"not read even without isolation: {sorted(expected - found)}"


def test_with_a_cell_s_environment_no_claude_md_nor_memory_reaches_the_model(tmp_path, claude_bin):
    found = markers_reaching_the_model(claude_bin, tmp_path, isolated=True)
    leaked = sorted(found - set(STILL_READ))
    assert leaked == [], f"this CLI lets the user's setup reach every cell: {leaked}"
    # What still reaches the model is exactly what the run warns about before the first cell.
    assert found == set(STILL_READ), (f"the CLI no longer reads {sorted(set(STILL_READ) - found)}: "
                                      f"drop it from agent.SETUP_ABOVE and the warning")
    run_dir = tmp_path / "home" / "project" / "runs" / "20260101-000000"
    environ = {"HOME": str(tmp_path / "home")}
    assert agent.setup_above(run_dir, environ) == [tmp_path / "home" / "project" / ".claude" / "skills"]


def test_a_run_directory_s_history_stop_also_keeps_the_project_s_skills_from_the_model(tmp_path, claude_bin):
    """The `.git` file every new run directory holds is where the CLI stops looking for the
    project around a workspace: the project's skills above it no longer reach the model
    (measured with the pinned CLI), and setup_above, which stops at a `.git`, finds nothing
    to warn about."""
    found = markers_reaching_the_model(claude_bin, tmp_path, isolated=True, stop_file=True)
    assert found == set(), f"reached the model through the run directory's stop file: {sorted(found)}"
    run_dir = tmp_path / "home" / "project" / "runs" / "20260101-000000"
    assert agent.setup_above(run_dir, {"HOME": str(tmp_path / "home")}) == []


def test_the_walk_for_setup_above_stops_at_the_git_root(tmp_path):
    (tmp_path / ".claude" / "agents").mkdir(parents=True)
    (tmp_path / ".claude" / "agents" / "a.md").write_text("x")
    repo = tmp_path / "repo"
    (repo / ".git").mkdir(parents=True)
    (repo / ".claude" / "commands").mkdir(parents=True)
    (repo / ".claude" / "commands" / "c.md").write_text("x")
    (repo / ".claude" / "skills").mkdir()  # empty: nothing to read
    runs = repo / "runs"
    runs.mkdir()
    environ = {"HOME": str(tmp_path / "elsewhere")}
    assert agent.setup_above(runs, environ) == [repo / ".claude" / "commands"]
    assert agent.setup_above(tmp_path, environ) == [tmp_path / ".claude" / "agents"]


# --------------------------------------------------------------------------- repository history (issue 36, item 8)

# Inside a git repository the CLI puts the repository's status and recent commit messages in
# front of the model (its "gitStatus" context). A run directory inside the user's repository
# (the default runs/) must not pass that history to any cell: an answer may be in it.
DUMP_REQUESTS = """\
import json, os
import pytest

CONFIG = []


def pytest_configure(config):
    CONFIG.append(config)


@pytest.hookimpl(tryfirst=True)
def pytest_ponybench_prove_arm(cell, workspace, transcript):
    model = CONFIG[0].pluginmanager.get_plugin("ponybench-rehearsal").model
    with open(os.environ["PONYBENCH_REQUESTS_OUT"], "a", encoding="utf-8") as out:
        out.write(json.dumps(model.requests(cell.id)) + "\\n")
"""


@pytest.mark.parametrize("mode", ["confined", "unconfined"])
def test_no_repository_history_reaches_a_cell_whose_run_lies_in_a_repository(tmp_path, claude_bin, mode):
    from support.benchproc import ADD_TASK, bench_args, results, run, write_project

    if mode == "confined":
        from pytest_ponybench.cell import confine as confinement
        if not confinement.sandbox().works:
            pytest.skip(confinement.sandbox().problem)
    root = write_project(tmp_path / "project", {"add": ADD_TASK}, conftest=DUMP_REQUESTS)
    marker = f"MARKER-GIT-HISTORY-{uuid.uuid4().hex[:10]}"
    git = ["git", "-C", str(root), "-c", "user.name=u", "-c", "user.email=u@example.com"]
    subprocess.run(["git", "init", "-q", str(root)], check=True)
    subprocess.run([*git, "add", "-A"], check=True)
    subprocess.run([*git, "commit", "-q", "-m", f"{marker}: add is return a + b"], check=True)
    out = tmp_path / "requests.jsonl"
    flag = "--ponybench-confine" if mode == "confined" else "--ponybench-no-confine"
    done = run(root, [a for a in bench_args(root, "--ponybench-rehearse", claude=claude_bin)
                      if a != "--ponybench-no-confine"] + [flag], env={"PONYBENCH_REQUESTS_OUT": str(out)})
    assert done.returncode == 0, done.stdout[-3000:]
    (record,) = results((root / "runs").iterdir().__next__())
    assert record["passed"], record
    seen = out.read_text()
    assert '"messages"' in seen, "no request was recorded"  # the dump itself worked
    assert marker not in seen, f"the repository's history reached the model ({mode})"
