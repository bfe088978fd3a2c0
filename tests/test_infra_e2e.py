"""Infra errors, retries and arm proof by hooks, end to end through the real, pinned CLI.

The scripted model (rehearsal.py) plays API faults: a 529 on every request, a 529 that
clears, a stream cut mid-message, a 401. A real-mode run (no --ponybench-rehearse) points
the CLI at a scripted server the project's conftest starts, with a dummy key, to prove plugin
arms from their hook events. No model API is reached.
"""
from __future__ import annotations

import textwrap
from pathlib import Path

import junitparser
import pytest

from support.ponyproject import DOUBLE_TASK, QUIET, only_run_dir, results, run_pytest, summary

REPO = Path(__file__).resolve().parents[1]
PLUGINS = REPO / "tests" / "plugins"

TASK = DOUBLE_TASK  # the fault tests append rehearsal_fault to it


def write_project(root: Path, tasks: dict[str, str], arms: dict[str, str], ini: str = "",
                  conftest: str = "") -> Path:
    for folder, files in (("tasks", tasks), ("arms", arms)):
        (root / folder).mkdir(parents=True, exist_ok=True)
        for name, text in files.items():
            (root / folder / f"{name}.yaml").write_text(textwrap.dedent(text))
    (root / "pytest.ini").write_text("[pytest]\ntestpaths = tasks\nponybench_retry_wait = 0\n" + ini)
    (root / "conftest.py").write_text('import sys\nsys.modules["matplotlib"] = None\n' + textwrap.dedent(conftest))
    return root


def bench(root: Path, claude_bin: str, *extra: str, env: dict | None = None, timeout: float = 240):
    args = ["--ponybench", f"--ponybench-claude={claude_bin}", f"--ponybench-dir={root / 'runs'}",
            f"--junitxml={root / 'junit.xml'}", "-rs", *QUIET, *extra]
    return run_pytest(root, args, {"PONYBENCH_CACHE_DIR": "off", **(env or {})}, timeout=timeout)


def junit_properties(root: Path) -> dict[str, dict[str, str]]:
    xml = junitparser.JUnitXml.fromfile(str(root / "junit.xml"))
    cases = {}
    for suite in xml:
        for case in suite:
            props = case._elem.find("properties")
            cases[case.name] = {p.get("name"): p.get("value") for p in (props if props is not None else [])}
    return cases


@pytest.fixture(scope="module")
def fault_run(claude_bin, tmp_path_factory):
    """One rehearsal, one cell per fault: 529 on every request, one 529 that clears, a cut
    stream on every request; one retry each."""
    root = write_project(tmp_path_factory.mktemp("faults"), {
        "always529": TASK + "rehearsal_fault: '529'\n",
        "once529": TASK + "rehearsal_fault: '529:1'\n",
        "cutstream": TASK + "rehearsal_fault: cut\n",
    }, {"baseline": "description: nothing added\n"})
    done = bench(root, claude_bin, "--ponybench-rehearse", "--ponybench-retries=1")
    run_dir = only_run_dir(root)
    return dict(root=root, done=done, run_dir=run_dir,
                records={r["task"]: r for r in results(run_dir)}, summary=summary(run_dir))


def test_a_529_on_every_request_is_an_infra_error_retried_and_left_out(fault_run):
    record = fault_run["records"]["always529"]
    assert record["status"] == "infra_error", record["error"]
    assert record["api_error_status"] == 529 and "529" in record["error"]
    assert record["attempts"] == 2  # the first try and one retry
    # The failed attempt's workspace is kept beside the final one, never counted as a cell.
    kept = fault_run["run_dir"] / (record["cell"] + ".attempt-1")
    assert (kept / "_ponybench.transcript.jsonl").is_file()
    assert len(fault_run["records"]) == 3
    row = next(r for r in fault_run["summary"]["rows"] if r["task"] == "always529")
    assert row["n"] == 0 and row["correct_rate"] is None and row["left_out"] == {"infra_error": 1}
    infra = {r["arm"]: r for r in fault_run["summary"]["infra"]}
    assert infra["baseline"]["infra_errors"] == 2 and fault_run["summary"]["infra_errors"] == 2


def test_a_529_that_clears_within_the_clis_retries_finishes(fault_run):
    record = fault_run["records"]["once529"]
    assert (record["status"], record["correct"], record["attempts"]) == ("finished", 1, 1)
    assert record["api_error_status"] == 529  # seen and survived by the CLI itself


def test_a_stream_cut_mid_message_is_an_infra_error(fault_run):
    record = fault_run["records"]["cutstream"]
    assert record["status"] == "infra_error" and record["attempts"] == 2, record["error"]
    assert record["correct"] == 0 and record["passed"] is False


def test_infra_cells_are_skipped_not_failed_and_said_loudly(fault_run):
    out = fault_run["done"].stdout
    assert "1 passed, 2 skipped" in out, out[-3000:]
    assert "SKIPPED" in out and "infra_error: the model API failed" in out
    assert "infra errors: arm `baseline` · haiku: 2 of 3 cells left out of every rate" in out
    assert "WARNING: 2 of 3 cells (67%) ended as infra errors" in out
    md = (fault_run["run_dir"] / "summary.md").read_text()
    assert "## Infra errors" in md and "2 of 3 cells" in md
    html = (fault_run["run_dir"] / "report.html").read_text()
    assert 'id="infra"' in html and "2 of 3 cells" in html


def test_a_401_stops_the_run_before_the_next_cell(claude_bin, tmp_path):
    root = write_project(tmp_path, {"double": TASK}, {"a-first": "description: one\n",
                                                      "b-second": "description: two\n"})
    done = bench(root, claude_bin, "--ponybench-rehearse", "--ponybench-rehearse-fault=401")
    out = done.stdout + done.stderr
    assert done.returncode == pytest.ExitCode.INTERRUPTED, out[-3000:]
    assert "the model API refused the credentials (401)" in out
    (record,) = results(only_run_dir(root))  # the second cell never started
    assert record["arm"] == "a-first" and record["status"] == "infra_error" and record["attempts"] == 1
    assert not (only_run_dir(root) / "double__b-second__haiku__0").exists()


# --- a real-mode run against a scripted server started by the project's conftest -----------------

REAL_CONFTEST = """
import os
from pytest_ponybench.rehearsal.server import CellScript, ScriptedModel

MODEL = ScriptedModel()


def pytest_ponybench_agent_env(cell, workspace):
    MODEL.start()
    calls = [("Skill", {"skill": "ctx-plugin:pony-probe"}), ("Glob", {"pattern": "*.py"})] \\
        if cell.arm.name == "ctx" else []
    script = CellScript(writes=[(os.path.join(workspace, "calc.py"), "def double(x):\\n    return 2 * x\\n")],
                        tool_calls=calls, answer="Done.")
    url = MODEL.register(cell.id, script)
    return {"ANTHROPIC_BASE_URL": url, "ANTHROPIC_API_KEY": "dummy-not-a-key", "IS_SANDBOX": "1",
            "HOME": HOME_DIR, "CLAUDE_CONFIG_DIR": os.path.join(HOME_DIR, ".claude")}


def pytest_unconfigure(config):
    MODEL.stop()
"""


@pytest.fixture(scope="module")
def real_run(claude_bin, tmp_path_factory):
    root = tmp_path_factory.mktemp("real")
    home = root / "home"
    home.mkdir()
    conftest = REAL_CONFTEST.replace("HOME_DIR", repr(str(home)))
    write_project(root, {"double": TASK}, {
        "baseline": "description: nothing added\n",
        "ctx": f"plugin: {PLUGINS / 'ctx-plugin'}\nproof: ['PONYBENCH-CTX-MARKER-41d7']\n",
        "failing": f"plugin: {PLUGINS / 'failing-plugin'}\nproof: ['failing-plugin is active']\n",
        "silent": f"plugin: {PLUGINS / 'silent-plugin'}\nproof: ['PONYBENCH-SILENT-MARKER-0b6f']\n",
    }, conftest=conftest)
    # No --ponybench-rehearse: a real run, with a dummy key the scripted server accepts.
    done = bench(root, claude_bin, env={"ANTHROPIC_API_KEY": "dummy-not-a-key", "IS_SANDBOX": "1"})
    run_dir = only_run_dir(root)
    return dict(root=root, done=done, records={r["arm"]: r for r in results(run_dir)}, run_dir=run_dir)


def test_real_run_catches_a_failing_hook_and_a_proof_never_printed(real_run):
    records, out = real_run["records"], real_run["done"].stdout
    assert set(records) == {"baseline", "ctx", "failing", "silent"}, out[-3000:]
    failing = records["failing"]
    assert failing["status"] == "arm_unproven" and not failing["passed"]
    assert "failing-plugin: cannot read its settings" in failing["error"]  # the hook's stderr
    assert "exit code 1" in failing["error"]
    silent = records["silent"]
    assert silent["status"] == "arm_unproven" and "PONYBENCH-SILENT-MARKER-0b6f" in silent["error"]
    assert "arm failing: NOT proven in 1 of 1 cells" in out
    assert "arm silent: NOT proven in 1 of 1 cells" in out


def test_real_run_counts_a_working_plugin_arm_and_the_baseline(real_run):
    records, out = real_run["records"], real_run["done"].stdout
    for arm in ("baseline", "ctx"):
        assert (records[arm]["status"], records[arm]["passed"]) == ("finished", True), records[arm]["error"]
        assert records[arm]["rehearsal"] is False
    assert "arm ctx: proven in 1 of 1 cells" in out and "arm baseline: proven in 1 of 1 cells" in out
    rows = {r["arm"]: r for r in summary(real_run["run_dir"])["rows"]}
    assert rows["ctx"]["n"] == 1 and rows["baseline"]["n"] == 1
    assert rows["failing"]["n"] == 0 and rows["silent"]["n"] == 0


def test_tool_and_skill_counts_are_exact_in_the_record_and_junit(real_run):
    ctx = real_run["records"]["ctx"]
    # The script: a Skill call, a Glob, then the seeded calc.py is Read and written.
    assert ctx["tool_calls"] == "Glob:1,Read:1,Skill:1,Write:1"
    assert ctx["skills_used"] == "ctx-plugin:pony-probe"
    assert (ctx["files_read"], ctx["files_written"], ctx["edits"]) == (1, 1, 1)
    baseline = real_run["records"]["baseline"]
    assert baseline["tool_calls"] == "Read:1,Write:1" and baseline["skills_used"] == ""
    props = junit_properties(real_run["root"])["double__ctx__haiku__0"]
    assert props["tool_calls"] == "Glob:1,Read:1,Skill:1,Write:1"
    assert props["skills_used"] == "ctx-plugin:pony-probe"
    assert (props["files_read"], props["files_written"], props["attempts"]) == ("1", "1", "1")
    out = real_run["done"].stdout
    assert "arm `ctx` · haiku: skill `ctx-plugin:pony-probe` fired in 1 of 1 cells; reads per cell 1; edits per cell 1" in out
