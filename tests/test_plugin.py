"""The plugin end to end, with the stand-in CLI (tests/fakes/fake_claude.py).

One benchmark project is run twice at module scope, with -n 0 and -n 2 side by side, and
several tests read those runs (records, JUnit XML, summary, argv); runs that test one fault
each are made per test with pytester, in process where a subprocess would only cost time.
"""
from __future__ import annotations

import fcntl
import json
import os
import re
import shutil
import signal
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import junitparser
import pytest
import yaml

from pytest_ponybench.cell import agent, lifecycle as cell, workspace
from pytest_ponybench.instruments import gate as instruments
from pytest_ponybench.reports import summary
from pytest_ponybench.scoring import checks
from pytest_ponybench.store import record as records
from pytest_ponybench.specs.spec import ArmSpec, load_task
from support import ponyproject as pp
from support import proc_watch
from pytest_ponybench.store.rundir import write_record
from support.records import record_data

MODEL_ID = "claude-haiku-test-1"  # configured for the alias haiku in the project's ini
ARMS = {
    "baseline": "# adds nothing\n{}\n",
    "brief": "prompt: Be brief.\n",
    # a plugin found relative to arms/, proven by what its SessionStart hook prints
    "plug": "plugin: plugins/plug\nproof: ['plug is active']\n",
    "ghost": "plugin: ghost-plugin-nowhere\n",  # a plugin found nowhere: its cells never run
}
TASKS = {"add": pp.ADD_TASK, "mul": pp.MUL_TASK}
INI = {"ponybench_model_ids": f"\n    haiku = {MODEL_ID}"}
# Differ between two runs of the same cells by design: where they are kept, and the key of
# their verdicts (a hash of the workspace's files, the transcript among them, whose init line
# names the workspace's folder).
VOLATILE = {"workspace", "verdict_key"}


def write_main_project(root: Path) -> Path:
    pp.write_project(root, TASKS, ARMS, ini=INI)
    plugin = root / "arms" / "plugins" / "plug" / ".claude-plugin"
    plugin.mkdir(parents=True)
    (plugin / "plugin.json").write_text('{"name": "plug", "version": "1.0.0"}')
    write_hook(plugin.parent, "echo 'plug is active'")
    return root


def write_hook(plugin_dir: Path, command: str) -> None:
    """A SessionStart command hook for a plugin (the fake CLI runs it, as the real one does)."""
    (plugin_dir / "hooks").mkdir(parents=True, exist_ok=True)
    (plugin_dir / "hooks" / "hooks.json").write_text(json.dumps(
        {"hooks": {"SessionStart": [{"hooks": [{"type": "command", "command": command}]}]}}))


def cells_of_main_project() -> list[str]:
    return sorted(f"{t}__{a}__haiku__0" for t in TASKS for a in ARMS)


class Run:
    def __init__(self, root: Path, returncode: int, stdout: str, stderr: str):
        self.root, self.returncode, self.stdout, self.stderr = Path(root), returncode, stdout, stderr
        self.run_dir = pp.only_run_dir(self.root)
        self.records = pp.by_cell(pp.results(self.run_dir))

    def __repr__(self):
        return f"<Run {self.root} exit {self.returncode}>\n{self.stdout[-3000:]}\n{self.stderr[-3000:]}"


def _shared_dir(tmp_path_factory) -> Path:
    """A directory every xdist worker of this session sees (the session's base temp), or this
    process's own base temp without xdist."""
    base = tmp_path_factory.getbasetemp()
    return (base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base) / "ponybench-main-runs"


@pytest.fixture(scope="module")
def main_runs(tmp_path_factory) -> dict[str, Run]:
    """The main project run with -n 0 (and --junitxml) and, at the same time, with -n 2.

    Made once per session: under xdist the first worker to get here runs them while holding a
    lock, and any other worker reads what it left (the runs take seconds of CPU each)."""
    shared = _shared_dir(tmp_path_factory)
    shared.mkdir(parents=True, exist_ok=True)
    done = shared / "done.json"
    with open(shared / "lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not done.exists():
            jobs = {}
            for name, extra in (("n0", ["--junitxml=report.xml"]), ("n2", ["-n", "2"])):
                root = write_main_project(shared / name)
                env = pp.fake_env(root, write=pp.GOOD_WRITES, answer="Done.")
                jobs[name] = (root, pp.bench_args(root, *extra), env)
            with ThreadPoolExecutor(max_workers=2) as pool:
                futures = {name: pool.submit(pp.run_pytest, *job) for name, job in jobs.items()}
                outcome = {name: {"root": str(jobs[name][0]), "returncode": f.result().returncode,
                                  "stdout": f.result().stdout, "stderr": f.result().stderr}
                           for name, f in futures.items()}
            done.write_text(json.dumps(outcome))
    return {name: Run(**run) for name, run in json.loads(done.read_text()).items()}


@pytest.fixture
def keep_sigterm():
    """An in-process benchmark run turns SIGTERM into an interrupt; give the handler back."""
    before = signal.getsignal(signal.SIGTERM)
    yield
    signal.signal(signal.SIGTERM, before)


@pytest.fixture
def project(pytester, monkeypatch, keep_sigterm):
    """A pytester project; `project(fake=..., tasks=..., arms=...)` writes it and points the
    environment at the fake CLI.

    In these in-process runs the gate's process-tree-kill proof is replaced by a no-op: it
    starts two interpreters per run, it is tested in test_proof_cache.py, and the module's
    main runs (subprocesses) keep the real one."""
    monkeypatch.setattr(instruments, "prove_tree_kill", lambda: None)

    def make(tasks=None, arms=None, ini=None, **fake):
        pp.write_project(pytester.path, tasks or {"add": pp.ADD_TASK}, arms or {"baseline": "{}\n"}, ini)
        for key, value in pp.fake_env(pytester.path, **fake).items():
            monkeypatch.setenv(key, value)
        return pytester.path

    return make


def strip(record: dict, root: Path) -> dict:
    """A record without its volatile fields, the project's directory written as <root>
    (a message may name a path in it, e.g. where a plugin was looked for)."""
    return {k: v.replace(str(root), "<root>") if isinstance(v, str) else v
            for k, v in record.items() if k not in VOLATILE}


# --- the main run: records, properties, JUnit, results, summary ---------------------------------

def test_the_run_records_every_cell(main_runs):
    run = main_runs["n0"]
    assert run.returncode == pytest.ExitCode.TESTS_FAILED, run  # the ghost arm's cells fail
    assert sorted(run.records) == cells_of_main_project()
    # results.jsonl: one line per cell, the same record the cell kept in its workspace
    lines = (run.run_dir / "results.jsonl").read_text().splitlines()
    assert len(lines) == len(cells_of_main_project())
    for cell_id, record in run.records.items():
        kept = record_data(run.run_dir / cell_id, workspace.RESULT)
        assert kept == record


def test_a_finished_cell_s_record(main_runs):
    r = main_runs["n0"].records["add__brief__haiku__0"]
    expected = {
        "cell": "add__brief__haiku__0", "task": "add", "arm": "brief", "model": "haiku", "model_id": MODEL_ID,
        "run": 0, "kind": "surgical", "status": "finished", "ran": True, "passed": True, "error": "", "failure": "",
        "correct": 1, "correct_reason": "ok", "safe": None, "safe_reason": "not measured: the task has no safe check",
        # add.py (3 lines, 1 a comment) and mul.py (2) are source; tests/test_it.py (2) a test
        "files": 3, "src_files": 2, "total_loc": 5, "src_loc": 4, "test_files": 1, "test_loc": 2,
        # the fake's usage: 100 in, 20 out, cache 5 read + 7 created
        "cost_usd": 0.0123, "duration_ms": 1500, "turns": 2, "denials": 0,
        "in_tokens": 100, "out_tokens": 20, "cache_tokens": 12, "total_tokens": 132,
        "claude_version": "2.1.328", "served_model": MODEL_ID, "plugins": "builtin-thing",
        "tools": "Read,Write,Edit,Glob,Grep",
    }
    assert {k: r.get(k) for k in expected} == expected
    assert r["workspace"] == str(main_runs["n0"].run_dir / "add__brief__haiku__0")
    assert len(r["spec_hash"]) == 12
    assert all(v is None or isinstance(v, (str, int, float, bool)) for v in r.values())


def test_the_plugin_arm_gets_its_plugin_and_the_others_none(main_runs):
    run = main_runs["n0"]
    calls = {Path(c["cwd"]).name: c["argv"] for c in pp.calls(run.root)}
    # the ghost arm's plugin is nowhere: its cells never call the CLI
    assert sorted(calls) == [c for c in cells_of_main_project() if "__ghost__" not in c]
    plugin_dir = str((run.root / "arms" / "plugins" / "plug").resolve())
    for cell_id, argv in calls.items():
        assert argv[argv.index("--model") + 1] == MODEL_ID  # the ini's alias, not the default id
        has_plugin = "--plugin-dir" in argv
        assert has_plugin == ("__plug__" in cell_id), cell_id
        if has_plugin:
            assert argv[argv.index("--plugin-dir") + 1] == plugin_dir
        append = argv[argv.index("--append-system-prompt") + 1]
        expected = ("Be brief.\n\n" + agent.WRITE_AND_STOP) if "__brief__" in cell_id else agent.WRITE_AND_STOP
        assert append == expected, cell_id
    assert run.records["mul__plug__haiku__0"]["plugins"] == "builtin-thing,plug"
    assert run.records["mul__plug__haiku__0"]["passed"] is True


def test_a_plugin_that_is_nowhere_fails_its_arm_s_cells_only(main_runs):
    run = main_runs["n0"]
    for task in TASKS:
        r = run.records[f"{task}__ghost__haiku__0"]
        # correct 0 (not counted: never ran); safe None: the task has no safe check
        assert (r["status"], r["ran"], r["passed"], r["correct"], r["safe"]) == ("not_run", False, False, 0, None)
        assert "plugin 'ghost-plugin-nowhere' not found" in r["error"]
        assert r["failure"].startswith("agent never ran properly (not_run)")
    assert sum(r["passed"] for r in run.records.values()) == len(TASKS) * 3


def test_every_record_field_is_a_junit_property(main_runs):
    run = main_runs["n0"]
    xml = junitparser.JUnitXml.fromfile(str(run.root / "report.xml"))
    cases = {case.name: case for suite in xml for case in suite}
    assert sorted(cases) == cells_of_main_project()
    for cell_id, record in run.records.items():
        case = cases[cell_id]
        props = {p.name: p.value for p in case.child(junitparser.Properties)}
        assert props == {k: str(v) for k, v in record.items()}, cell_id
        for key in ("task", "arm", "model", "correct", "safe", "robust", "robust_reason", "total_loc", "cost_usd", "status"):
            assert key in props
        assert case.is_passed == record["passed"]
    # An axis the task has no check on is not measured: JUnit says None, never 1.
    add = {p.name: p.value for p in cases["add__brief__haiku__0"].child(junitparser.Properties)}
    assert add["safe"] == add["robust"] == "None" and add["correct"] == "1"
    ghost = cases["add__ghost__haiku__0"]
    assert "agent never ran properly (not_run)" in ghost.result[0].message


def test_the_answer_per_arm_is_first_in_the_terminal_and_a_run_level_junit_property(main_runs):
    """At the default of 1 run the answer per arm says what is missing, once per arm, before
    any table, and travels in --junitxml as a property of the test suite (not of a cell)."""
    run = main_runs["n0"]
    after = run.stdout.split(" ponybench summary ", 1)[1].splitlines()[1:]
    assert after[0] == "The answer per arm (pooled over tasks, 95% intervals; the per-task figures are exploratory):"
    too_few = "too few runs: 1 of 3 needed per task on each side (--runs 3 or more)"
    arms = [arm for arm in sorted(ARMS) if arm != "baseline"]
    assert after[1:1 + len(arms)] == [
        f"  arm `{arm}` · haiku against `baseline`: "
        + (too_few if arm != "ghost" else too_few.replace("1 of 3", "0 of 3")) for arm in arms]
    assert sum("too few runs: " in line for line in after) == len(arms)
    xml = junitparser.JUnitXml.fromfile(str(run.root / "report.xml"))
    (suite,) = list(xml)
    props = {p.name: p.value for p in suite.properties()}
    assert props["ponybench_primary:brief:haiku"] == f"arm `brief` · haiku against `baseline`: {too_few}"
    assert pp.summary(run.run_dir)["primary"][0]["note"] == too_few


def test_summary_json_rows(main_runs):
    run = main_runs["n0"]
    data = pp.summary(run.run_dir)
    assert data["models"] == {"haiku": MODEL_ID} and data["claude_version"] == "2.1.328"
    assert data["date"] and data["cells"] == len(cells_of_main_project())
    rows = {(r["task"], r["arm"], r["model"]): r for r in data["rows"]}
    assert sorted(rows) == sorted((t, a, "haiku") for t in TASKS for a in ARMS)
    finished = rows[("add", "brief", "haiku")]
    assert finished == {
        "task": "add", "arm": "brief", "model": "haiku", "n": 1, "cells": 1, "left_out": {},
        "safe_rate": None, "correct_rate": 1.0,  # the task has no safe check: not measured
        "robust_rate": None,  # nor a robust one
        "wrote_file_rate": 1.0, "total_loc_median": 5, "total_loc_max": 5,
        "total_loc_median_all_cells": 5, "src_loc_median": 4,
        "src_files_median": 2, "wrote_tests_rate": 1.0, "cost_mean": 0.0123, "out_tokens_mean": 20,
        "total_tokens_mean": 132, "time_s_mean": 1.5,
    }
    # The ghost arm's plugin was never found: its cell is left out of every rate, and says why.
    ghost = rows[("add", "ghost", "haiku")]
    assert (ghost["n"], ghost["cells"], ghost["left_out"]) == (0, 1, {"not_run": 1})
    assert (ghost["correct_rate"], ghost["safe_rate"], ghost["wrote_file_rate"]) == (None, None, None)
    assert ghost["total_loc_median"] is None and ghost["cost_mean"] is None
    assert data["measured"] + sum(data["left_out"].values()) == data["cells"]
    # Why cells failed, per task x arm: only the ghost arm's, with its one reason.
    assert [(f["task"], f["arm"], f["failed"], f["cells"]) for f in data["failures"]] == [
        ("add", "ghost", 1, 1), ("mul", "ghost", 1, 1)]
    assert data["failures"][0]["reasons"][0]["reason"].startswith("agent never ran properly (not_run): arm 'ghost'")
    summary_md = (run.run_dir / "summary.md").read_text()
    assert "## Why cells failed" in summary_md and "### add · ghost: 1 of 1 cells failed" in summary_md


def test_the_terminal_summary_table(main_runs):
    out = main_runs["n0"].stdout
    assert re.search(r"=+ ponybench summary =+", out)
    assert re.search(r"^add · haiku$", out, re.M) and re.search(r"^mul · haiku$", out, re.M)
    assert re.search(r"^\s+arm\s+n\s+correct\s+safe\s+robust\s+wrote code\s+LOC median\s+LOC, all cells\s+tokens\s+cost/cell$", out, re.M)
    # safe and robust '-': the task has no check on them, so they are not measured (never 1/1)
    assert re.search(r"^\s+brief\s+1\s+1/1 \(100%\)\s+-\s+-\s+1/1 \(100%\)\s+5\s+5\s+132\s+\$0\.012$", out, re.M), out
    # Left out, as in summary.md and report.html: no rate, and the reason under the table.
    assert re.search(r"^\s+ghost\s+0 \(\+1\)\s+-\s+-\s+-\s+-\s+-\s+-\s+-\s+-$", out, re.M), out
    assert re.search(r"^\s+Left out of every rate .*ghost: \+1 left out: 1 not_run", out, re.M), out
    assert f"ran {len(cells_of_main_project())} cells; kept in {main_runs['n0'].run_dir}" in out


def test_xdist_gives_the_same_results_and_summary(main_runs):
    n0, n2 = main_runs["n0"], main_runs["n2"]
    assert n2.returncode == n0.returncode, n2
    assert "created: 2/2 workers" in n2.stdout
    assert {k: strip(r, n2.root) for k, r in n2.records.items()} == {k: strip(r, n0.root) for k, r in n0.records.items()}
    assert len((n2.run_dir / "results.jsonl").read_text().splitlines()) == len(cells_of_main_project())
    assert pp.summary(n2.run_dir)["rows"] == pp.summary(n0.run_dir)["rows"]
    assert len(pp.calls(n2.root)) == len(pp.calls(n0.root))


def test_rescore_gives_the_same_results_with_no_cli_call(main_runs, project, pytester, monkeypatch):
    source = main_runs["n0"]
    judged = []  # workspaces the check runner judged (this in-process session's rescore)
    real = checks.run_checks
    monkeypatch.setattr(checks, "run_checks", lambda *a, **kw: judged.append(Path(a[1]).name) or real(*a, **kw))
    root = project(tasks=TASKS, arms=ARMS, ini=INI)
    shutil.copytree(source.root / "arms" / "plugins", root / "arms" / "plugins")
    kept = root / "kept" / source.run_dir.name
    shutil.copytree(source.run_dir, kept)
    # One workspace changed since the run: its figures must be recomputed from the files.
    (kept / "add__brief__haiku__0" / "add.py").unlink()
    result = pytester.runpytest(f"--ponybench-rescore={kept}", *pp.QUIET)
    assert pp.calls(root) == [], "a rescore called the CLI"
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    # Verdicts are content-addressed: only the changed workspace is judged again.
    assert judged == ["add__brief__haiku__0"], judged
    rescored = pp.by_cell(pp.results(kept))
    assert sorted(rescored) == sorted(source.records)
    changed = rescored.pop("add__brief__haiku__0")
    before = source.records["add__brief__haiku__0"]
    assert (changed["correct"], changed["passed"]) == (0, False)
    assert changed["correct_reason"] == "add.py was not written"
    assert (changed["total_loc"], changed["files"]) == (before["total_loc"] - 3, before["files"] - 1)
    assert changed["cost_usd"] == before["cost_usd"]  # usage is read back from the kept transcript
    for cell_id, record in rescored.items():
        assert strip(record, source.root) == strip(source.records[cell_id], source.root), cell_id
        assert record["workspace"] == str(kept / cell_id)
    # No --ponybench-at-once: a rescore calls no model, so it runs twice the cores at once.
    assert f"rescored {len(source.records)} cells, {2 * os.cpu_count()} at once per process;" in result.stdout.str()


# --- without --ponybench, and selection ----------------------------------------------------------

def test_without_ponybench_no_cell_is_collected_or_run(project, pytester):
    root = project(tasks=TASKS, arms=ARMS, write=pp.GOOD_WRITES)
    result = pytester.runpytest("-v", *pp.QUIET)
    assert result.ret == pytest.ExitCode.NO_TESTS_COLLECTED  # inert until asked
    result = pytester.runpytest("-v", "-m", "selftest", *pp.QUIET)
    result.assert_outcomes(passed=2 * len(TASKS) + 2)  # each task's two references, two harness proofs
    assert "__haiku__" not in result.stdout.str()
    assert pp.calls(root) == []
    assert not (root / "runs").exists()


def collected(result) -> list[str]:
    return sorted(line.split("::")[-1] for line in result.stdout.lines if "::" in line)


@pytest.mark.parametrize("select, expected", [
    (["-k", "brief"], ["add__brief__haiku__0", "mul__brief__haiku__0"]),
    (["-k", "mul and not plug and not ghost"], ["mul__baseline__haiku__0", "mul__brief__haiku__0"]),
    (["-m", "mathy"], ["add__baseline__haiku__0", "add__brief__haiku__0", "add__ghost__haiku__0",
                       "add__plug__haiku__0"]),
])
def test_selection_by_task_arm_and_tag(project, pytester, select, expected):
    root = project(tasks=TASKS, arms=ARMS)
    result = pytester.runpytest(*pp.bench_args(root, "--co", "-q", *select))
    assert result.ret == pytest.ExitCode.OK
    assert collected(result) == expected


@pytest.mark.parametrize("select", [["-k", "ad and nosuch"], ["tasks/nosuch.yaml"]])
def test_a_typo_in_the_selection_leaves_no_run_directory(project, pytester, monkeypatch, select):
    # An empty run directory would stand among the kept runs (ponybench-history refused the
    # whole folder over it); its key goes with it.
    root = project()
    keys = pytester.path / "keys"
    monkeypatch.setenv("PONYBENCH_KEY_DIR", str(keys))
    result = pytester.runpytest(*pp.bench_args(root, *select))
    assert result.ret in (pytest.ExitCode.NO_TESTS_COLLECTED, pytest.ExitCode.USAGE_ERROR)
    assert pp.run_dirs(root) == [] and list(keys.iterdir()) == []
    result.stdout.fnmatch_lines(["no cell ran, so no run directory was kept*"])
    assert pp.calls(root) == []
    # A run that ran a cell (the fake writes nothing: it fails) keeps its directory and its key.
    assert pytester.runpytest(*pp.bench_args(root)).ret == pytest.ExitCode.TESTS_FAILED
    assert len(pp.run_dirs(root)) == 1 and len(list(keys.iterdir())) == 1


# --- faults: each one run ----------------------------------------------------------------------------

def test_a_cell_timeout_kills_the_agent_and_leaves_no_process(project, pytester):
    root = project(mode="hang", write={"add.py": "def add(a, b):\n    return a + b\n"})
    try:
        result = pytester.runpytest(*pp.bench_args(root, "--ponybench-timeout", "1"))
        survivors = proc_watch.wait_until_dead(proc_watch.working_in(root / "runs"), timeout=2)
    finally:
        proc_watch.kill(proc_watch.working_in(root / "runs"))
    assert survivors == [], "a process of the timed-out cell survived"
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    [record] = pp.results(pp.only_run_dir(root))
    assert (record["status"], record["ran"], record["passed"]) == ("timeout", False, False)
    assert "ran past the cell timeout of 1 s" in record["error"]
    assert record["out_tokens"] == 20  # usage seen before the kill, and its cost estimated from it:
    # 100 in, 20 out, 7 cache-write, 5 cache-read tokens of Haiku 4.5 at list price (issue 36, item 3)
    assert record["cost_usd"] == pytest.approx((100 * 1 + 20 * 5 + 7 * 2 + 5 * 0.1) / 1e6, abs=1e-6)
    assert record["cost_estimated"] is True
    result.stdout.fnmatch_lines(["agent never ran properly (timeout): the agent ran past the cell timeout of 1 s*"])


def test_garbage_output_is_bad_output_and_the_run_goes_on(project, pytester):
    root = project(arms={"baseline": "{}\n", "brief": "prompt: Be brief.\n"}, mode="garbage")
    result = pytester.runpytest(*pp.bench_args(root))
    result.assert_outcomes(failed=2, deselected=5)  # the two references, the mutation score, two harness proofs
    assert len(pp.calls(root)) == 2
    for record in pp.results(pp.only_run_dir(root)):
        assert (record["status"], record["ran"], record["correct"]) == ("bad_output", False, 0)
        assert "not stream-json" in record["error"] and "this is not json" in record["error"]


def test_a_cell_record_hook_that_breaks_the_record_fails_its_cell_naming_the_field(project, pytester):
    # A value that cannot travel to the xdist controller (a Path) used to end the run in an
    # INTERNALERROR; checked on the worker by CellRecord.from_json, it fails that cell in one
    # sentence and the harness's own record is kept.
    root = project(write=pp.GOOD_WRITES)
    (root / "conftest.py").write_text((root / "conftest.py").read_text() + (
        "from pathlib import Path\n\n\ndef pytest_ponybench_cell_record(cell, record):\n"
        "    record['mine'] = 'kept' if cell.run else Path('/x')\n"))
    result = pytester.runpytest(*pp.bench_args(root, "--runs=2"))
    result.assert_outcomes(passed=1, failed=1, deselected=5)
    result.stdout.fnmatch_lines(["*a pytest_ponybench_cell_record hook left a record that is not one: "
                                 "mine=PosixPath('/x') is not str or int or float or bool or NoneType*"])
    records = pp.by_cell(pp.results(pp.only_run_dir(root)))
    assert records["add__baseline__haiku__1"]["mine"] == "kept"
    assert "mine" not in records["add__baseline__haiku__0"] and records["add__baseline__haiku__0"]["passed"]


def test_a_missing_cli_is_one_usage_error(project, pytester):
    root = project()
    result = pytester.runpytest(*pp.bench_args(root, claude="/nonexistent/claude"))
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert result.stderr.str().count("--ponybench-claude: /nonexistent/claude is not an executable file") == 1
    assert "PASSED" not in result.stdout.str() and "FAILED" not in result.stdout.str()
    assert pp.run_dirs(root) == []


INTRUDER = {"name": "intruder", "path": "/opt/plugins/intruder", "source": "inline"}


@pytest.mark.parametrize("fake, problem", [
    ({"extra_plugins": [INTRUDER]}, "intruder"),
    ({"extra_tools": ["Bash"]}, "Bash was available"),
])
def test_a_wrong_arm_in_the_init_line_fails_the_cell(project, pytester, fake, problem):
    root = project(arms={"baseline": "{}\n", "plug": "plugin: plug\n"}, write=pp.GOOD_WRITES, **fake)
    (root / "arms" / "plug").mkdir()
    result = pytester.runpytest(*pp.bench_args(root))
    result.assert_outcomes(failed=2, deselected=5)
    records = pp.by_cell(pp.results(pp.only_run_dir(root)))
    assert sorted(records) == ["add__baseline__haiku__0", "add__plug__haiku__0"]
    for record in records.values():
        assert (record["status"], record["ran"], record["passed"]) == ("wrong_arm", False, False)
        assert problem in record["error"]
        assert record["failure"].startswith("agent never ran properly (wrong_arm)")


BROKEN_REF = {**pp.ADD_TASK, "refs": {**pp.ADD_TASK["refs"], "bad": pp.ADD_TASK["refs"]["good"]}}


@pytest.mark.parametrize("workers", ["0", "2"])
def test_a_broken_instrument_refuses_to_spend(project, pytester, workers):
    root = project(tasks={"add": BROKEN_REF, "mul": pp.MUL_TASK}, write=pp.GOOD_WRITES)
    args = pp.bench_args(root, "-n", workers)
    result = pytester.runpytest_subprocess(*args) if workers != "0" else pytester.runpytest(*args)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    err = result.stderr.str()
    assert "instruments broken; refusing to spend" in err
    assert "add.yaml: the bad reference passes the correct check" in err
    assert "mul.yaml" not in err
    assert pp.calls(root) == []
    assert pp.run_dirs(root) == []



@pytest.mark.parametrize("workers", ["0", "2"])
def test_the_gate_proves_the_tasks_of_the_paths_given_and_no_other(project, pytester, workers):
    """A session given one task file collects that file alone: a broken instrument of another
    task spends no proof and stops nothing; given the folder, the same broken task refuses."""
    root = project(tasks={"add": BROKEN_REF, "mul": pp.MUL_TASK}, write=pp.GOOD_WRITES)
    run = (lambda *a: pytester.runpytest_subprocess(*a)) if workers != "0" else pytester.runpytest
    result = run(*pp.bench_args(root, "-n", workers), str(root / "tasks" / "mul.yaml"))
    assert result.ret == pytest.ExitCode.OK, result.stderr.str()
    assert {r["task"] for r in pp.results(pp.only_run_dir(root))} == {"mul"}
    result = run(*pp.bench_args(root, "-n", workers), str(root / "tasks"))
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert "add.yaml: the bad reference passes the correct check" in result.stderr.str()

# A stand-in that makes two cells overlap for sure: the "escaper" arm's agent writes beside its
# workspace only once the "innocent" arm's agent has started, and the innocent one finishes only
# after that write. Synchronised through files outside the run directory; bounded waits.
OVERLAPPING_FAKE = """\
import os, runpy, sys, time
from pathlib import Path

fake, sync = os.environ["PONY_REAL_FAKE"], Path(os.environ["PONY_SYNC"])
escaper = sys.argv[1:] != ["--version"] and "__escaper__" in Path.cwd().name
if sys.argv[1:] != ["--version"]:
    deadline = time.monotonic() + 20
    if escaper:
        while not (sync / "innocent-started").exists() and time.monotonic() < deadline:
            time.sleep(0.02)
        os.environ["PONYBENCH_FAKE_MODE"] = "escape"  # writes ../escaped-by-agent.txt with a Write call
    else:
        (sync / "innocent-started").touch()
        while not (sync / "escaped").exists() and time.monotonic() < deadline:
            time.sleep(0.02)
sys.argv[0] = fake
try:
    runpy.run_path(fake, run_name="__main__")
finally:
    if escaper:
        (sync / "escaped").touch()  # the innocent cell's agent is still running at this point
"""


def test_under_xdist_an_escape_is_blamed_on_the_escaping_cell_only(project, pytester, monkeypatch):
    root = project(arms={"escaper": "{}\n", "innocent": "{}\n"}, write=pp.GOOD_WRITES)
    fake = root / "overlapping_fake.py"
    fake.write_text(OVERLAPPING_FAKE)
    (root / "sync").mkdir()
    monkeypatch.setenv("PONY_REAL_FAKE", str(pp.FAKE))
    monkeypatch.setenv("PONY_SYNC", str(root / "sync"))
    wrapper = root / "claude"
    wrapper.write_text(f"#!/bin/sh\nexec {sys.executable} {fake} \"$@\"\n")
    wrapper.chmod(0o755)
    result = pytester.runpytest_subprocess(*pp.bench_args(root, "-n", "2", claude=wrapper))
    records = pp.by_cell(pp.results(pp.only_run_dir(root)))
    assert (root / "sync" / "escaped").exists() and (root / "sync" / "innocent-started").exists()
    escaper, innocent = records["add__escaper__haiku__0"], records["add__innocent__haiku__0"]
    assert escaper["escaped"] == "escaped-by-agent.txt" and not escaper["passed"]
    assert innocent["escaped"] == "", "the innocent cell was blamed for the other cell's write"
    assert innocent["passed"], result.stdout.str()


# --- scoring a cell whose agent never ran properly ---------------------------------------------------

@pytest.mark.parametrize("status", [records.WRONG_ARM, records.TIMEOUT, records.BAD_OUTPUT])
def test_a_cell_that_never_ran_properly_scores_zero(tmp_path, status):
    task_path = tmp_path / "add.yaml"
    task_path.write_text(yaml.safe_dump(pp.ADD_TASK))
    task = load_task(task_path, tmp_path)
    c = cell.Cell(task, ArmSpec(name="baseline", path=None), "haiku", MODEL_ID, 0)
    ws = tmp_path / c.id
    ws.mkdir()
    (ws / "add.py").write_text(pp.GOOD_WRITES["add.py"])  # written before the agent was stopped
    write_record(ws, cell.AGENT_RECORD, {"status": status, "error": "it did not run properly"}, None)
    record = cell.score_cell(c, ws).to_json()
    assert record["ran"] is False and record["passed"] is False
    # safe: the add task has no safe check, so nothing was measured there, run or not
    assert (record["correct"], record["safe"]) == (0, None)
    rows = summary.aggregate([record])
    if status in records.MEASURED:  # the agent's own failure under its arm: it counts, as a fail
        assert rows[0]["correct_rate"] == 0.0 and rows[0]["safe_rate"] is None
    else:  # the arm never applied: no rate at all, and the row says why
        assert rows[0]["correct_rate"] is None and rows[0]["left_out"] == {status: 1}


def test_collect_only_lists_cells_without_the_gate_or_a_run_directory(project, pytester):
    root = project()
    result = pytester.runpytest(*pp.bench_args(root, "--collect-only"))
    result.stdout.fnmatch_lines(["*add__baseline__haiku__0*"])
    assert pp.run_dirs(root) == [] and pp.calls(root) == []


def test_the_controller_keeps_no_record_in_the_reports_and_items_it_holds(project, pytester):
    """pytest keeps every report and item to the session's end: a cell's record in them made
    the controller grow with the run. The record is in results.jsonl; the reports keep the
    outcome and the failure line the terminal prints."""
    root = project(write={"add.py": "def add(a, b):\n    return a - b\n"})
    reprec = pytester.inline_run(*pp.bench_args(root, "--runs=2"))
    cell_reports = [r for r in reprec.getreports("pytest_runtest_logreport") if "__baseline__" in r.nodeid]
    assert {r.when for r in cell_reports} == {"setup", "call", "teardown"}
    assert all(r.user_properties == [] and r.keywords == {} for r in cell_reports)
    failed = [r for r in cell_reports if r.failed]
    assert len(failed) == 2 and all("incorrect: add(2, 3) is not 5" in str(r.longrepr) for r in failed)
    items = [call.item for call in reprec.getcalls("pytest_runtest_protocol") if "__baseline__" in call.item.nodeid]
    assert len(items) == 2 and all(item.user_properties == [] for item in items)
    records = pp.results(pp.only_run_dir(root))
    assert len(records) == 2 and all(r["failure"].startswith("incorrect") for r in records)
    # The terminal keeps no passed setup or teardown report of a cell (it prints nothing for one).
    reporter = reprec._pluginmanager.get_plugin("terminalreporter")
    assert reporter.stats.get("failed") and not [r for r in reporter.stats.get("", []) if "__baseline__" in r.nodeid]
