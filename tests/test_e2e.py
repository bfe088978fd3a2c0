"""End to end through the real, pinned `claude` binary against the scripted model.

Each test lays out a small benchmark project (tasks, arms) in a pytester directory and runs
`pytest --ponybench --ponybench-rehearse` in a subprocess, exactly as a user would. No model
API is reached: the CLI talks to the scripted server on 127.0.0.1.
"""
from __future__ import annotations

import fcntl
import json
import os
import shutil
import sys
import textwrap
from pathlib import Path
from types import SimpleNamespace

import pytest
from support import benchproc
from support.benchproc import installed_cli
from support.ponyproject import DOUBLE_TASK

REPO = Path(__file__).resolve().parents[1]
PLUGINS = REPO / "tests" / "plugins"

TASK = DOUBLE_TASK
# A check that only tries 2 cannot catch the bad reference (which gets 2 right).
BROKEN_INSTRUMENT_TASK = TASK.replace("for x in (2, 5, -1):", "for x in (2,):")


def records(run_root: Path) -> list[dict]:
    (run_dir,) = [p for p in run_root.iterdir() if p.is_dir()]
    lines = (run_dir / "results.jsonl").read_text().splitlines()
    return [json.loads(line) for line in lines]


class Project:
    """A benchmark project in a pytester directory: one task, the arms a test adds."""

    def __init__(self, pytester, claude_bin: str):
        self.pytester, self.claude_bin, self.path = pytester, claude_bin, pytester.path
        pytester.makefile(".toml", pyproject='[tool.pytest.ini_options]\ntestpaths = ["tasks"]\n')
        (self.path / "tasks").mkdir()
        (self.path / "arms").mkdir()
        (self.path / "tasks" / "double.yaml").write_text(TASK)

    def arm(self, name: str, text: str) -> None:
        (self.path / "arms" / f"{name}.yaml").write_text(textwrap.dedent(text))

    def run(self, *args: str):
        return self.pytester.runpytest_subprocess(
            "--ponybench", "--ponybench-rehearse", f"--ponybench-claude={self.claude_bin}",
            f"--ponybench-dir={self.path / 'runs'}", "-p", "no:cacheprovider", *args, timeout=900,
        )


@pytest.fixture
def project(pytester, claude_bin) -> Project:
    return Project(pytester, claude_bin)


# One rehearsal, shared by the tests below that only read its results: each of them ran a
# session of its own before (four sessions, eleven cells; now one, ten cells). Arms: the
# baseline and a prompt arm, a plugin arm whose context arrives (proven), a plugin whose hook
# prints nothing and one whose hook fails (neither proven); two runs each, on two workers.
SHARED_ARMS = {
    "baseline": "description: nothing added\n",
    "terse": "prompt: Answer tersely, PONYBENCH-TERSE-ARM.\n",
    "ctx": f"plugin: {PLUGINS / 'ctx-plugin'}\nproof: [\"PONYBENCH-CTX-MARKER-41d7\"]\n",
    "silent": f"plugin: {PLUGINS / 'silent-plugin'}\nproof: [\"PONYBENCH-SILENT-MARKER-0b6f\"]\n",
    "failing": f"plugin: {PLUGINS / 'failing-plugin'}\nproof: [\"failing-plugin is active\"]\n",
}
PROVEN = ("baseline", "terse", "ctx")


@pytest.fixture(scope="module")
def shared(tmp_path_factory, claude_bin):
    """The shared rehearsal: its output and exit code, and its records by arm. Run once per
    test session: under xdist the first worker to get here runs it in the session's common
    temporary folder while the other waits on the lock, then both read it."""
    base = tmp_path_factory.getbasetemp()
    root = (base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base) / "e2e-shared-rehearsal"
    with open(f"{root}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (root / "done.json").exists():
            shutil.rmtree(root, ignore_errors=True)  # a worker that died halfway
            (root / "tasks").mkdir(parents=True)
            (root / "pyproject.toml").write_text('[tool.pytest.ini_options]\ntestpaths = ["tasks"]\n')
            (root / "tasks" / "double.yaml").write_text(TASK)
            (root / "arms").mkdir()
            for name, text in SHARED_ARMS.items():
                (root / "arms" / f"{name}.yaml").write_text(text)
            # The timeout only ends a hung session; ten cells take about a minute on a quiet machine.
            done = benchproc.run(root, ["--ponybench", "--ponybench-rehearse", f"--ponybench-claude={claude_bin}",
                                        f"--ponybench-dir={root / 'runs'}", "-p", "no:cacheprovider", "-n", "2",
                                        "--runs", "2"], timeout=1200)
            (root / "done.json").write_text(json.dumps({"stdout": done.stdout, "returncode": done.returncode}))
        done = json.loads((root / "done.json").read_text())
    by_arm: dict[str, list[dict]] = {}
    for record in records(root / "runs"):
        by_arm.setdefault(record["arm"], []).append(record)
    return SimpleNamespace(**done), by_arm


def test_prompt_and_plugin_arms_reach_the_model_and_score(shared):
    done, by_arm = shared
    pytest.LineMatcher(done.stdout.splitlines()).fnmatch_lines([
        "arm baseline: proven*", "arm ctx: proven*", "arm terse: proven*",
        "REHEARSAL: a scripted model*",
    ])
    assert "6 passed" in done.stdout and "4 failed" in done.stdout, done.stdout[-3000:]
    for arm in PROVEN:
        for record in by_arm[arm]:
            # the task has a correct check and no safe check: safe is not measured (None), not 1
            assert (record["status"], record["correct"], record["safe"]) == ("finished", 1, None)
            assert record["claude_version"] == "2.1.328"
            assert record["cost_usd"] > 0 and record["out_tokens"] > 0 and record["turns"] >= 2
            assert "Bash" not in record["tools"].split(",")
            assert record["total_loc"] == 2 and record["rehearsal"] is True
    # The plugin is loaded in its own arm and nowhere else.
    assert all("ctx-plugin" in r["plugins"] for r in by_arm["ctx"])
    assert not any("ctx-plugin" in r["plugins"] for arm in by_arm if arm != "ctx" for r in by_arm[arm])


def test_an_arm_whose_text_never_arrives_is_not_proven(shared):
    # The silent plugin's SessionStart hook prints nothing: its promised context never arrives.
    done, by_arm = shared
    pytest.LineMatcher(done.stdout.splitlines()).fnmatch_lines([
        "*cell double__silent__haiku__0*", "agent never ran properly (arm_unproven)*"])
    pytest.LineMatcher(done.stdout.splitlines()).fnmatch_lines(["arm silent: NOT proven in 2 of 2 cells*"])
    for silent in by_arm["silent"]:
        assert silent["status"] == "arm_unproven" and not silent["passed"]
        assert "PONYBENCH-SILENT-MARKER-0b6f" in silent["error"]


def test_in_rehearsal_a_failing_hook_is_quoted_with_its_stderr(shared):
    _, by_arm = shared
    for failing in by_arm["failing"]:
        assert failing["status"] == "arm_unproven"
        # As in a real run: the hook, its exit code and its stderr, not only "the text is missing".
        assert failing["error"].startswith("the hook SessionStart:startup of the plugin of arm 'failing' failed "
                                           "(exit code 1"), failing["error"]
        assert failing["error"].endswith("so the arm was not applied: failing-plugin: cannot read its settings")


def test_parallel_cells_under_xdist(shared):
    # The shared rehearsal ran its ten cells on two xdist workers: each cell once, each kept.
    _, by_arm = shared
    assert sorted(r["cell"] for rs in by_arm.values() for r in rs) == sorted(
        f"double__{arm}__haiku__{run}" for arm in SHARED_ARMS for run in (0, 1))
    assert all(r["status"] == "finished" for arm in PROVEN for r in by_arm[arm])


def test_a_rescore_of_a_rehearsal_says_so_and_keeps_the_run_s_date(project):
    project.arm("baseline", "description: nothing added\n")
    assert project.run().ret == 0
    (run_dir,) = [p for p in (project.path / "runs").iterdir() if p.is_dir()]
    made = json.loads((run_dir / "summary.json").read_text())
    assert made["rehearsal"] is True and "updated" not in made
    result = project.pytester.runpytest_subprocess(f"--ponybench-rescore={run_dir}", "-p", "no:cacheprovider",
                                                   timeout=240)
    assert result.ret == 0
    result.stdout.fnmatch_lines(["rescored 1 cells*", "REHEARSAL: a scripted model*"])
    rescored = json.loads((run_dir / "summary.json").read_text())
    assert rescored["date"] == made["date"] and rescored["mode"] == "rescore"
    assert rescored["updated"] >= made["date"]


def test_an_arm_whose_prompt_is_swallowed_is_not_proven(project, tmp_path):
    """As if a CLI release ignored --append-system-prompt: a wrapper drops the flag before the
    real binary sees it. The cells still finish, but no arm's text reached the model."""
    # Installed beside the binary it runs: a confined CLI sees its own folder, nothing else of the project.
    real = str(installed_cli(project.claude_bin, tmp_path / "cli"))
    wrapper = tmp_path / "cli" / "claude-drops-append"
    wrapper.write_text(textwrap.dedent(f"""\
        #!{sys.executable}
        import os, sys
        argv = sys.argv[1:]
        if "--append-system-prompt" in argv:
            i = argv.index("--append-system-prompt")
            del argv[i:i + 2]
        os.execv({real!r}, [{real!r}] + argv)
    """))
    wrapper.chmod(0o755)
    project.claude_bin = str(wrapper)
    project.arm("terse", "prompt: Answer tersely, PONYBENCH-TERSE-ARM.\n")
    result = project.run()
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["arm terse: NOT proven in 1 of 1 cells*appended prompt*"])


def test_a_hook_firing_in_every_arm_is_caught(project):
    """The lie the original benchmark once published: a hook that fires in every arm. Here the
    workspace's own project settings carry a SessionStart hook that injects the ctx arm's
    marker, so the baseline's requests hold another arm's text and it must not pass."""
    project.arm("baseline", "description: nothing added\n")
    project.arm("ctx", f"plugin: {PLUGINS / 'ctx-plugin'}\nproof: [\"PONYBENCH-CTX-MARKER-41d7\"]\n")
    hook = {"hooks": {"SessionStart": [{"hooks": [{"type": "command", "command": (
        "printf '%s\\n' '{\"hookSpecificOutput\": {\"hookEventName\": \"SessionStart\", "
        "\"additionalContext\": \"PONYBENCH-CTX-MARKER-41d7 leaked\"}}'")}]}]}}
    task = TASK.replace("seed:\n", "seed:\n  .claude/settings.json: '" + json.dumps(hook).replace("'", "''") + "'\n")
    (project.path / "tasks" / "double.yaml").write_text(task)
    result = project.run()
    result.stdout.fnmatch_lines(["arm baseline: NOT proven*Foreign text*PONYBENCH-CTX-MARKER-41d7*"])
    (baseline,) = [r for r in records(project.path / "runs") if r["arm"] == "baseline"]
    assert baseline["status"] == "arm_unproven" and not baseline["passed"]


def test_broken_instrument_refuses_to_spend(project):
    project.arm("baseline", "description: nothing added\n")
    (project.path / "tasks" / "double.yaml").write_text(BROKEN_INSTRUMENT_TASK)
    result = project.run("-n", "2")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*instruments broken; refusing to spend*",
                                 "*the bad reference passes the correct check*"])
    runs = project.path / "runs"
    assert not runs.exists() or list(runs.rglob("*__*")) == [], "a cell started although an instrument is broken"


def _processes_under(root: Path) -> list[int]:
    """Live processes whose working directory is inside `root`."""
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            cwd = os.readlink(proc / "cwd")
        except OSError:
            continue
        if cwd.startswith(str(root)):
            found.append(int(proc.name))
    return found


def test_a_stalled_model_times_out_and_leaves_no_process(project):
    project.arm("baseline", "description: nothing added\n")
    (project.path / "conftest.py").write_text(textwrap.dedent("""\
        def pytest_ponybench_rehearsal_script(cell, script):
            script.stall_seconds = 120  # the model never answers within the cell timeout
    """))
    result = project.run("--ponybench-timeout", "4")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*agent never ran properly (timeout)*"])
    (record,) = records(project.path / "runs")
    assert record["status"] == "timeout" and record["ran"] is False
    assert _processes_under(project.path / "runs") == []


def test_readme_s_benchmark_command_collects_every_shipped_task_and_arm():
    """README's benchmark command, collected as README runs it in this repository (its
    pyproject's addopts apply): one cell per shipped task x arm. That every one of them
    passes through the pinned CLI, each arm proven, is .ci/run's last step, which runs the
    command itself on a fresh clone (a test here ran the same rehearsal again: about 3 min)."""
    import subprocess

    done = subprocess.run([sys.executable, "-m", "pytest", "--ponybench", "--ponybench-rehearse", "--co", "-q",
                           "-p", "no:cacheprovider"], cwd=REPO, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    cells = {line.split("::", 1)[1] for line in done.stdout.splitlines() if line.startswith("tasks/")}
    arms = {p.stem for p in (REPO / "arms").glob("*.yaml")}
    tasks = {p.stem for p in (REPO / "tasks").glob("*.yaml")}
    assert cells == {f"{t}__{a}__haiku__0" for t in tasks for a in arms}