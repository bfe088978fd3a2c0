"""Attacks through git, as a confined agent (or the harness's environment) could plant them.

Git runs as the harness, outside any sandbox, on the agent's workspace: at seeding, at scoring
(metrics.diff_stats), at judging (judge.fixture_change) and at every rescore. Whatever git
finds there that could run a command or decide what it reads is planted below, each command a
script that leaves a marker: a filter in .git/config and .gitattributes, hooks, an fsmonitor
command, a pager, a diff driver and an external diff, an include, an ignore and attribute file
hiding the agent's lines, a nested repository, a `.git` file pointing elsewhere, and GIT_*
variables and user config in the harness's environment. Promise (store/snapshot.py): none of
it runs, and none of it changes a count. Each test failed before the harness kept its own
snapshot and ran git one way.
"""
from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from pytest_ponybench.cell import workspace
from pytest_ponybench.judge import judge
from pytest_ponybench.scoring import metrics
from pytest_ponybench.specs.spec import TaskSpec

MAIN = "def main():\n    return 0\n"
IMPL = "".join(f"VALUE_{i} = {i}\n" for i in range(201))  # the agent's 201 lines


@pytest.fixture
def marks(tmp_path) -> Path:
    """The folder a planted command leaves its marker in; `tmp_path / "evil" NAME` leaves NAME."""
    folder = tmp_path / "marks"
    folder.mkdir()
    evil = tmp_path / "evil"
    evil.write_text(f'#!/bin/sh\ntouch "{folder}/$1"\nexec cat\n')
    evil.chmod(0o755)
    return folder


def plant_environment(monkeypatch, tmp_path: Path) -> None:
    """The harness's own environment planted: GIT_* variables (a config, a GIT_DIR, as under
    a git hook) and a user's git config, attribute and ignore files."""
    evil = tmp_path / "evil"
    home = tmp_path / "home"
    (home / ".config" / "git").mkdir(parents=True)
    (home / ".gitconfig").write_text(f'[filter "evil"]\n\tclean = {evil} home-filter\n\tsmudge = {evil} home-filter\n')
    (home / ".config" / "git" / "attributes").write_text("* filter=evil\n")
    (home / ".config" / "git" / "ignore").write_text("*.py\n")
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(home / ".config"))
    monkeypatch.setenv("GIT_CONFIG_COUNT", "1")
    monkeypatch.setenv("GIT_CONFIG_KEY_0", "filter.evil.clean")
    monkeypatch.setenv("GIT_CONFIG_VALUE_0", f"{evil} env-filter")
    monkeypatch.setenv("GIT_CONFIG_PARAMETERS", f"'core.fsmonitor'='{evil} env-fsmonitor'")
    monkeypatch.setenv("GIT_DIR", str(tmp_path / "nowhere"))


def plant_repository(git_dir: Path, evil: Path) -> None:
    """Config, hooks, exclude and alternates of a repository the agent wrote."""
    (git_dir / "hooks").mkdir(parents=True, exist_ok=True)
    (git_dir / "info").mkdir(exist_ok=True)
    included = git_dir.parent / "included.cfg"
    included.write_text(f'[filter "inc"]\n\tclean = {evil} include-filter\n')
    with open(git_dir / "config", "a") as fh:
        fh.write(f'[filter "evil"]\n\tclean = {evil} clean-filter\n\tsmudge = {evil} smudge-filter\n\trequired = true\n'
                 f'[core]\n\tfsmonitor = {evil} fsmonitor\n\tpager = {evil} pager\n\thooksPath = {git_dir / "hooks"}\n'
                 f'[diff "evil"]\n\ttextconv = {evil} textconv\n[diff]\n\texternal = {evil} external-diff\n'
                 f'[include]\n\tpath = {included}\n[includeIf "gitdir:/"]\n\tpath = {included}\n')
    for hook in ("pre-commit", "post-commit", "post-checkout", "post-index-change", "reference-transaction",
                 "fsmonitor-watchman"):
        (git_dir / "hooks" / hook).write_text(f"#!/bin/sh\n{evil} hook-{hook} </dev/null\n")
        (git_dir / "hooks" / hook).chmod(0o755)
    (git_dir / "info" / "exclude").write_text("*.py\n")
    (git_dir / "info" / "attributes").write_text("*.py -diff filter=inc\n")


def plant_workspace(ws: Path, evil: Path, dot_git: str) -> None:
    """The agent's work (3 lines into app/main.py, a 201-line lib/impl.py, a 2-line test, a
    build output the fixture's .gitignore ignores) and every git trap around it."""
    (ws / "app" / "main.py").write_text(MAIN + "\ndef helper():\n    return 1\n")
    (ws / "lib").mkdir()
    (ws / "lib" / "impl.py").write_text(IMPL)
    (ws / "tests" / "test_impl.py").write_text("def test_impl():\n    assert True\n")
    (ws / "dist").mkdir()
    (ws / "dist" / "bundle.js").write_text("var a = 1;\nvar b = 2;\n")  # the fixture's .gitignore: dist/
    (ws / ".gitattributes").write_text("[attr]hide -diff\n* filter=evil diff=evil\n*.py hide binary\n")
    (ws / "lib" / ".gitattributes").write_text("*.py -diff filter=inc\n")
    (ws / "lib" / ".gitignore").write_text("impl.py\n")  # hid a 202-line implementation
    with open(ws / ".gitignore", "a") as fh:
        fh.write("app/\ntests/\n")  # the seeded ignore file, rewritten
    if dot_git == "file":  # a .git file sending git to a repository elsewhere
        elsewhere = ws.parent / "elsewhere.git"
        subprocess.run(["git", "init", "-q", "--bare", str(elsewhere)], check=True, env={"PATH": "/usr/bin:/bin"})
        plant_repository(elsewhere, evil)
        subprocess.run(["rm", "-rf", str(ws / ".git")], check=True)
        (ws / ".git").write_text(f"gitdir: {elsewhere}\n")
    else:
        plant_repository(ws / ".git", evil)
    nested = ws / "nested" / ".git"  # a repository inside the workspace, planted the same way
    (nested / "objects").mkdir(parents=True)
    (nested / "refs" / "heads").mkdir(parents=True)
    (nested / "HEAD").write_text("ref: refs/heads/main\n")
    plant_repository(nested, evil)
    (ws / "nested" / "n.py").write_text("n = 1\n")


@pytest.fixture
def seeded(tmp_path, marks) -> Path:
    source = tmp_path / "fixture"
    (source / "app").mkdir(parents=True)
    (source / "tests").mkdir()
    (source / "app" / "main.py").write_text(MAIN)
    (source / "tests" / "test_main.py").write_text("def test(): pass\n")
    (source / ".gitignore").write_text("dist/\n")
    task = TaskSpec(name="fx", path=tmp_path / "fx.yaml", prompt="p", fixture=source)
    ws = tmp_path / "ws"
    workspace.seed(task, ws)
    return ws


def planted(marks: Path) -> list[str]:
    return sorted(p.name for p in marks.iterdir())


@pytest.mark.parametrize("dot_git", ["folder", "file"])
def test_scoring_runs_nothing_planted_and_counts_every_line(seeded, marks, tmp_path, dot_git, monkeypatch):
    plant_workspace(seeded, tmp_path / "evil", dot_git)
    plant_environment(monkeypatch, tmp_path)
    stats = metrics.diff_stats(seeded)
    assert planted(marks) == [], "a command the agent planted ran in the harness"
    # app/main.py +3 (the blank line counts in a diff), lib/impl.py +201, the test +2;
    # nested/n.py +1 (files beside a repository the agent made are its files); dist/ is
    # ignored by the fixture's own .gitignore, as seeded.
    assert stats == {"files": 3, "src_files": 3, "total_loc": 3 + 201 + 1, "src_loc": 3 + 201 + 1,
                     "test_files": 1, "test_loc": 2, "delivered": True}


@pytest.mark.parametrize("dot_git", ["folder", "file"])
def test_the_judge_reads_a_fixture_change_running_nothing_planted(seeded, marks, tmp_path, dot_git, monkeypatch):
    plant_workspace(seeded, tmp_path / "evil", dot_git)
    plant_environment(monkeypatch, tmp_path)
    before, after = judge.fixture_change(seeded)
    assert planted(marks) == [], "a command the agent planted ran in the harness"
    assert before == {"app/main.py": MAIN}
    assert sorted(after) == ["app/main.py", "lib/impl.py", "nested/n.py"] and after["lib/impl.py"] == IMPL


def test_seeding_runs_nothing_of_the_fixture_or_the_environment_and_keeps_every_file(tmp_path, marks, monkeypatch):
    """A fixture's own attribute and ignore files, and the harness's environment, decide
    nothing at seeding: every file is in the snapshot, so the agent's change to an ignored or
    '-diff' file counts in full. The agent still sees the repository it always saw."""
    source = tmp_path / "fixture"
    (source / "app").mkdir(parents=True)
    (source / "app" / "main.py").write_text(MAIN)
    (source / "app" / "cache.py").write_text("a = 1\n")
    (source / ".gitignore").write_text("cache.py\n")
    (source / ".gitattributes").write_text("* filter=evil\n*.py -diff\n")
    ws = tmp_path / "ws"
    plant_environment(monkeypatch, tmp_path)
    workspace.seed(TaskSpec(name="fx", path=tmp_path / "fx.yaml", prompt="p", fixture=source), ws)
    assert planted(marks) == [], "a command of the harness's environment ran at seeding"
    (ws / "app" / "cache.py").write_text("a = 1\nb = 2\n")
    assert metrics.diff_stats(ws)["total_loc"] == 1  # a change to the fixture, not a new file
    assert planted(marks) == []
    plain = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path / "agent-home")}
    status = subprocess.run(["git", "status", "--porcelain"], cwd=ws, capture_output=True, text=True, env=plain)
    log = subprocess.run(["git", "log", "--format=%s"], cwd=ws, capture_output=True, text=True, env=plain)
    assert (status.stdout, log.stdout) == (" M app/cache.py\n", "ponybench: seeded workspace\n")


@pytest.mark.parametrize("rel, text", [
    (".gitattributes", "*.py -diff\n"),  # counted 201 added lines as 0 (issue 36, item 4)
    ("lib/.gitattributes", "* binary\n"),
    ("lib/.gitignore", "impl.py\n"),  # hid a 202-line implementation
    (".gitignore", "dist/\nlib/\n"),  # the fixture's own ignore file, rewritten
    (".git/info/exclude", "*.py\n"),
])
def test_no_ignore_or_attribute_file_of_the_agent_s_changes_the_count(seeded, rel, text):
    (seeded / "lib").mkdir()
    (seeded / "lib" / "impl.py").write_text(IMPL)
    (seeded / rel).write_text(text)
    stats = metrics.diff_stats(seeded)
    assert (stats["files"], stats["total_loc"]) == (1, 201)
    assert "lib/impl.py" in judge.fixture_change(seeded)[1]
