"""No run that starts half-broken: the guards on the controller before the first cell.

Each runs a small project with the stand-in CLI, which logs every call: a guard that holds
starts no CLI and writes nothing where it refuses.
"""
from __future__ import annotations

import json

import pytest

from support import ponyproject as pp

BROKEN = {"prompt": "p", "open": True, "seed": {"../escape.py": "x"}}


def project(root, tasks=None, arms=None):
    pp.write_project(root, tasks or {"add": pp.ADD_TASK}, arms or {"baseline": "{}\n", "terse": {"prompt": "Be terse."}})
    return root, pp.fake_env(root, write=pp.GOOD_WRITES)


def tree(path):
    return sorted(str(p.relative_to(path)) for p in path.rglob("*"))


def test_one_broken_task_file_under_xdist_starts_no_cli(tmp_path):
    root, env = project(tmp_path, tasks={"add": pp.ADD_TASK, "broken": BROKEN, "mul": pp.MUL_TASK})
    done = pp.run_pytest(root, pp.bench_args(root, "-n", "2"), env)
    assert done.returncode == pytest.ExitCode.USAGE_ERROR, done.stdout[-2000:]
    assert "broken.yaml" in done.stderr and "field 'seed'" in done.stderr
    assert "no cell was started" in done.stderr
    assert pp.calls(root) == [], "the CLI was started although a task file is broken"
    assert pp.run_dirs(root) == []


def test_a_resume_with_other_options_is_refused_and_names_each_difference(tmp_path):
    root, env = project(tmp_path)
    first = pp.run_pytest(root, pp.bench_args(root), env)
    assert first.returncode == 0, first.stdout[-2000:]
    run_dir = pp.only_run_dir(root)
    options = json.loads((run_dir / "run.json").read_text())
    assert options["arms"] == ["baseline", "terse"] and options["runs"] == 1 and options["rehearsal"] is False
    calls = len(pp.calls(root))
    before = tree(run_dir)
    again = pp.run_pytest(root, pp.bench_args(root, f"--ponybench-resume={run_dir}", "--runs", "2",
                                              "--arms", "terse"), env)
    assert again.returncode == pytest.ExitCode.USAGE_ERROR, again.stdout[-2000:]
    assert "this run was made with other options" in again.stderr
    assert "arms: the run has ['baseline', 'terse'], this resume ['terse']" in again.stderr
    assert "runs: the run has 1, this resume 2" in again.stderr
    assert len(pp.calls(root)) == calls and tree(run_dir) == before
    same = pp.run_pytest(root, pp.bench_args(root, f"--ponybench-resume={run_dir}"), env)
    assert same.returncode == 0, same.stderr[-2000:]
    assert len(pp.calls(root)) == calls  # every cell finished: nothing paid twice


@pytest.mark.parametrize("flag", ["--ponybench-rescore", "--ponybench-resume"])
def test_a_folder_that_is_not_a_run_is_refused_and_nothing_is_written_into_it(tmp_path, flag):
    root, env = project(tmp_path / "project")
    target = tmp_path / "project" / "notes"
    target.mkdir()
    (target / "todo.txt").write_text("not a run\n")
    done = pp.run_pytest(root, pp.bench_args(root, f"{flag}={target}"), env)
    assert done.returncode == pytest.ExitCode.USAGE_ERROR, done.stdout[-2000:]
    assert f"{flag}: {target} is not a ponybench run directory" in done.stderr
    assert tree(target) == ["todo.txt"]
    assert pp.calls(root) == []


def test_an_unknown_reference_arm_is_an_option_error(tmp_path):
    root, env = project(tmp_path)
    done = pp.run_pytest(root, pp.bench_args(root, "--ponybench-reference", "nosuch"), env)
    assert done.returncode == pytest.ExitCode.USAGE_ERROR
    assert "--ponybench-reference nosuch: no such arm; the arms are baseline, terse" in done.stderr
    assert pp.calls(root) == [] and pp.run_dirs(root) == []


def test_a_fixture_that_climbs_out_of_fixtures_is_refused(tmp_path):
    (tmp_path / "fixtures").mkdir()
    task = {"prompt": "p", "open": True, "fixture": "../../"}
    root, env = project(tmp_path, tasks={"climb": task})
    done = pp.run_pytest(root, pp.bench_args(root), env)
    assert done.returncode == pytest.ExitCode.USAGE_ERROR
    assert "climb.yaml: field 'fixture': '../../' leaves" in done.stderr
    assert "$VARIABLE" in done.stderr
    assert pp.calls(root) == []


def test_run_json_and_the_header_say_what_the_sandbox_lacks(tmp_path):
    from pytest_ponybench.processes import sandbox

    root, env = project(tmp_path / "with")
    done = pp.run_pytest(root, pp.bench_args(root), env)
    assert done.returncode == 0, done.stdout[-2000:]
    here = sandbox.support()
    assert json.loads((pp.only_run_dir(root) / "run.json").read_text())["sandbox"] == here.as_record()
    assert ("ponybench: sandbox:" in done.stdout) == bool(here.missing()), done.stdout[-2000:]
    # Where nothing is available (forced here): one line, and run.json names what is missing.
    root, env = project(tmp_path / "without")
    done = pp.run_pytest(root, pp.bench_args(root), {**env, sandbox.FORCE_OFF_ENV: "1"})
    assert done.returncode == 0, done.stdout[-2000:]
    stored = json.loads((pp.only_run_dir(root) / "run.json").read_text())["sandbox"]
    assert stored["active"] is False and stored["missing"] and "no sandbox for checks" in stored["missing"][0]
    lines = [line for line in done.stdout.splitlines() if line.startswith("ponybench: sandbox:")]
    assert len(lines) == 1 and "no sandbox for checks" in lines[0], done.stdout[-2000:]
