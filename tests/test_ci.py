"""CI as documented: the GitHub Actions workflow in docs/ runs the commands docs/running.md
states ("In CI"), .ci/run runs the README's benchmark command, and a run's summary.md lands in
$GITHUB_STEP_SUMMARY."""
from __future__ import annotations

from pathlib import Path

import yaml

from pytest_ponybench.reports import summary
from support.benchproc import ADD_TASK, GOOD_ADD, bench_args, fake_env, run, run_dirs, write_project

REPO = Path(__file__).resolve().parents[1]
README = (REPO / "README.md").read_text(encoding="utf-8")
RUNNING = (REPO / "docs" / "running.md").read_text(encoding="utf-8")
WORKFLOW = yaml.safe_load((REPO / "docs" / "github-actions.yml").read_text(encoding="utf-8"))
BENCHMARK = "pip install -e . && npm ci && pytest --ponybench --ponybench-rehearse -n 2"


def commands(job: str) -> list[str]:
    """Each command line of a job's `run:` steps."""
    lines = []
    for step in WORKFLOW["jobs"][job]["steps"]:
        for line in str(step.get("run") or "").splitlines():
            if line.strip() and not line.strip().startswith("#"):
                lines.append(line.strip())
    return lines


def test_the_workflow_rehearses_every_pull_request_and_runs_for_real_on_demand():
    triggers = WORKFLOW.get("on", WORKFLOW.get(True))  # YAML 1.1 reads a bare `on` as true
    assert set(triggers) == {"pull_request", "workflow_dispatch"}
    assert "budget_usd" in triggers["workflow_dispatch"]["inputs"]
    assert commands("rehearsal") == [BENCHMARK]
    assert WORKFLOW["jobs"]["real-run"]["if"] == "github.event_name == 'workflow_dispatch'"
    real = commands("real-run")
    assert all("--ponybench-max-cost \"$BUDGET\"" in c for c in real if c.startswith(("pytest", "cd ")))
    # The compare gate is the last command: its exit code is the job's.
    assert real[-1].startswith("ponybench-compare runs/reference/* runs/change/*")


def test_every_workflow_command_is_the_docs_word_for_word():
    ci = RUNNING[RUNNING.index("## In CI (GitHub Actions)"):]
    for job in WORKFLOW["jobs"]:
        missing = [c for c in commands(job) if c not in ci]
        assert missing == [], f"{job}: commands docs/running.md does not state: {missing}"


def test_ci_runs_the_readme_benchmark_command_after_the_tests():
    script = (REPO / ".ci" / "run").read_text()
    assert BENCHMARK in README
    assert script.index("python3 -m pytest -n 2") < script.index(BENCHMARK)


def test_the_step_summary_gets_summary_md_only_when_the_variable_is_set(tmp_path):
    md = tmp_path / "summary.md"
    md.write_text("| arm | n |\n|---|---|\n")
    target = tmp_path / "step.md"
    target.write_text("earlier step\n")
    assert summary.append_step_summary(md, {}) is False
    assert summary.append_step_summary(md, {"GITHUB_STEP_SUMMARY": str(target)}) is True
    assert target.read_text() == "earlier step\n| arm | n |\n|---|---|\n\n"


def test_a_run_appends_its_summary_md_to_the_github_step_summary(tmp_path):
    root = write_project(tmp_path / "p", {"add": ADD_TASK})
    step = tmp_path / "step-summary.md"
    env = {**fake_env(root, write=GOOD_ADD), "GITHUB_STEP_SUMMARY": str(step)}
    done = run(root, bench_args(root, "--runs=2"), env)
    assert done.returncode == 0, done.stdout[-3000:]
    (run_dir,) = run_dirs(root)
    written = (run_dir / "summary.md").read_text()
    assert written.strip() and step.read_text() == written.rstrip("\n") + "\n\n"
    without = run(root, bench_args(root, "--runs=1"), {**fake_env(root, write=GOOD_ADD), "GITHUB_STEP_SUMMARY": ""})
    assert without.returncode == 0 and step.read_text() == written.rstrip("\n") + "\n\n"


def test_no_marker_of_the_projects_own_tests_is_a_task_tag():
    """A task's tags are markers of its cells, so `-m "not X"` in this repository's addopts
    deselects every cell of a task tagged X from README's benchmark command, silently (the
    first name of the library-gate marker was `quality`, the tag of reuse_slug and
    trace_discount: their 8 cells vanished from the whole-library rehearsal)."""
    import pytest

    tomllib = pytest.importorskip("tomllib")  # Python 3.11+
    ini = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["pytest"]["ini_options"]
    markers = {line.split(":", 1)[0].strip() for line in ini.get("markers", [])}
    tags = {tag for path in (REPO / "tasks").glob("*.yaml")
            for tag in (yaml.safe_load(path.read_text()).get("tags") or [])}
    assert markers and tags
    assert markers & tags == set(), f"markers of the project's tests that are task tags: {sorted(markers & tags)}"
