"""Infra errors, retries, the shared 429 pause, arm proof by hook events and the agent's
activity: fast tests with hand-written transcripts and the stand-in CLI
(tests/fakes/fake_claude.py). The real CLI's side is tests/test_infra_e2e.py."""
from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import pytest

from pytest_ponybench.cell import agent, proof, transcript as transcripts
from pytest_ponybench.reports import tables
from pytest_ponybench.run import options
from pytest_ponybench.store import record as records
from pytest_ponybench.specs.faults import Fault, parse_fault
from pytest_ponybench.store.rundir import PAUSE_FILE, RunDir
from pytest_ponybench.specs.spec import SpecError, load_task
from support import ponyproject as pp

PLUGINS = Path(__file__).resolve().parent / "plugins"
INIT = {"type": "system", "subtype": "init", "model": "m", "tools": ["Read", "Write"], "plugins": []}


def transcript(tmp_path: Path, *events) -> transcripts.Transcript:
    path = tmp_path / "t.jsonl"
    path.write_text("".join(json.dumps(e) + "\n" for e in events))
    return transcripts.read_transcript(path)


def judged(tmp_path: Path, *events, timed_out=False, exit_code=1):
    stderr = tmp_path / "err.txt"
    stderr.write_text("")
    outcome = agent.RunOutcome(None if timed_out else exit_code, timed_out, 1.0)
    return transcripts.judge(outcome, transcript(tmp_path, *events), stderr, 30)


def retry(status=529, error="overloaded"):
    return {"type": "system", "subtype": "api_retry", "attempt": 1, "max_retries": 2, "error_status": status,
            "error": error}


def answer(text="Working."):
    return {"type": "assistant", "message": {"id": "m1", "role": "assistant", "content": [{"type": "text", "text": text}]}}


API_ERROR_RESULT = {"type": "result", "subtype": "success", "is_error": True, "terminal_reason": "api_error",
                    "api_error_status": 529, "api_error_type": "overloaded_error",
                    "result": "API Error: Repeated 529 Overloaded errors"}


# --- judging a session -------------------------------------------------------------------------

def test_an_api_error_result_is_an_infra_error_naming_the_status(tmp_path):
    status, error = judged(tmp_path, INIT, retry(), retry(), API_ERROR_RESULT)
    assert status == records.INFRA_ERROR
    assert "529 overloaded_error" in error and "Repeated 529" in error


def test_a_plain_error_result_stays_a_cli_error(tmp_path):
    status, _ = judged(tmp_path, INIT, {"type": "result", "subtype": "error_max_turns", "is_error": True})
    assert status == records.CLI_ERROR


def test_a_timeout_with_only_api_retries_is_an_infra_error(tmp_path):
    status, error = judged(tmp_path, INIT, retry(429, "rate_limit"), retry(429, "rate_limit"), timed_out=True)
    assert status == records.INFRA_ERROR
    assert "2 api_retry lines" in error and "429 rate_limit" in error


def test_a_timeout_after_a_model_answer_is_the_agents(tmp_path):
    assert judged(tmp_path, INIT, answer(), retry(), timed_out=True)[0] == records.TIMEOUT
    assert judged(tmp_path, INIT, timed_out=True)[0] == records.TIMEOUT  # a stall, no retry: the agent's timeout


def test_a_stream_that_ends_while_the_api_fails_is_an_infra_error(tmp_path):
    status, error = judged(tmp_path, INIT, retry(None, "unknown"))
    assert status == records.INFRA_ERROR and "stream was cut" in error
    # The same exit without any API trouble is the CLI's own failure.
    assert judged(tmp_path, INIT, answer())[0] == records.CLI_ERROR


def test_a_401_stops_the_run_with_one_sentence(tmp_path):
    t = transcript(tmp_path, INIT, {**API_ERROR_RESULT, "api_error_status": 401,
                                    "api_error_type": "authentication_error"})
    assert transcripts.api_error_status(t) == 401
    record = {"status": records.INFRA_ERROR, "api_error_status": 401, "cell": "c__a__m__0"}
    sentence = transcripts.auth_failure(record)
    assert "refused the credentials (401)" in sentence and "ANTHROPIC_API_KEY" in sentence
    assert sentence.count(". ") == 0  # one sentence
    assert transcripts.auth_failure({**record, "api_error_status": 529}) is None
    assert transcripts.auth_failure({**record, "status": records.FINISHED}) is None


def test_a_429_anywhere_in_the_session_counts_as_rate_limited(tmp_path):
    assert transcripts.saw_rate_limit(transcript(tmp_path, INIT, retry(429), answer()))
    assert not transcripts.saw_rate_limit(transcript(tmp_path, INIT, retry(529), answer()))


# --- activity --------------------------------------------------------------------------------------

def tool_use(n, name, tool_input):
    return {"type": "assistant", "message": {"id": f"m{n}", "role": "assistant", "content": [
        {"type": "tool_use", "id": f"t{n}", "name": name, "input": tool_input}]}}


def tool_result(n, error=False):
    return {"type": "user", "message": {"role": "user", "content": [
        {"type": "tool_result", "tool_use_id": f"t{n}", "content": "x", "is_error": error}]}}


def test_activity_counts_tools_skills_reads_and_writes_exactly(tmp_path):
    t = transcript(tmp_path, INIT,
                   tool_use(1, "Skill", {"skill": "tidy:small"}), tool_result(1),
                   tool_use(2, "Read", {"file_path": "/w/a.py"}), tool_result(2),
                   tool_use(3, "Read", {"file_path": "/w/a.py"}), tool_result(3),
                   tool_use(4, "Read", {"file_path": "/w/missing.py"}), tool_result(4, error=True),
                   tool_use(5, "Edit", {"file_path": "/w/a.py", "old_string": "a", "new_string": "b"}), tool_result(5),
                   tool_use(6, "Write", {"file_path": "/w/b.py", "content": "b"}), tool_result(6),
                   tool_use(7, "Skill", {"skill": "tidy:small"}), tool_result(7),
                   tool_use(8, "Task", {"prompt": "p"}), tool_result(8))
    got = transcripts.activity(t)
    assert got["tool_calls"] == "Edit:1,Read:3,Skill:2,Task:1,Write:1"
    assert got["skills_used"] == "tidy:small"
    assert (got["files_read"], got["files_written"], got["edits"]) == (1, 2, 2)
    assert transcripts.parse_counts(got["tool_calls"]) == {"Edit": 1, "Read": 3, "Skill": 2, "Task": 1, "Write": 1}
    identity = {"cell": "t__a__haiku__0", "task": "t", "arm": "a", "model": "haiku", "status": "finished"}
    assert records.CellRecord.from_json({**identity, **got}).to_json() == {**identity, **got}


def test_activity_lines_say_how_often_each_skill_fired(tmp_path):
    def rec(arm, skills, tools, reads, edits, status="finished"):
        return {"task": "t", "arm": arm, "model": "haiku", "status": status, "skills_used": skills,
                "tool_calls": tools, "files_read": reads, "edits": edits}
    every = [rec("tidy", "tidy:small", "Read:1,Skill:1,Write:1", 1, 1),
             rec("tidy", "", "Write:2", 0, 2),
             rec("tidy", "tidy:small", "Skill:1,Write:1", 0, 1, status="infra_error"),  # not counted
             rec("baseline", "", "Read:2,Write:1", 2, 1)]
    lines = tables.activity_lines(every)
    assert lines == [
        "arm `baseline` · haiku: no skill fired in 1 cells; reads per cell 2; edits per cell 1; "
        "tool calls per cell: Read 2, Write 1",
        "arm `tidy` · haiku: skill `tidy:small` fired in 1 of 2 cells; reads per cell 0.5; edits per cell 1.5; "
        "tool calls per cell: Read 0.5, Skill 0.5, Write 1.5",
    ]


def test_infra_lines_count_per_arm_and_model_and_say_so_loudly_past_a_fifth():
    def rec(arm, status, attempts=1, cost=0.0):
        return {"task": "t", "arm": arm, "model": "haiku", "status": status, "attempts": attempts,
                "infra_cost_usd": cost}
    every = [rec("a", "infra_error", 3, 0.02), rec("a", "finished", 2, 0.01)] + [rec("b", "finished")] * 8
    assert tables.infra_lines(every) == [
        "infra errors: arm `a` · haiku: 1 of 2 cells left out of every rate; 2 cells retried; "
        "failed attempts cost $0.030"]
    every.append(rec("b", "infra_error"))
    every.append(rec("b", "infra_error"))
    assert tables.infra_loud_line(every).startswith("WARNING: 3 of 12 cells (25%) ended as infra errors")
    t = records.tally(every)
    assert (t.infra, t.measured) == (3, 9)


# --- arm proof from hook events -------------------------------------------------------------------

def hook(stdout="", stderr="", exit_code=0, outcome="success", event="SessionStart"):
    return {"type": "system", "subtype": "hook_response", "hook_name": f"{event}:startup", "hook_event": event,
            "stdout": stdout, "stderr": stderr, "output": stdout + stderr, "exit_code": exit_code, "outcome": outcome}


CTX = str(PLUGINS / "ctx-plugin")
CTX_PROOF = "PONYBENCH-CTX-MARKER-41d7"


def test_a_working_plugin_arm_is_proven_by_its_hook_output():
    hooks = [hook(f"{{\"additionalContext\": \"{CTX_PROOF}: on\"}}")]
    assert proof.prove_by_hooks("ctx", CTX, [CTX_PROOF], hooks, ["ctx-plugin:pony-probe"], ["OTHER"]) == ""


def test_a_failed_hook_of_the_arms_plugin_means_the_arm_was_not_applied():
    hooks = [hook(CTX_PROOF, stderr="cannot read config.toml\n", exit_code=2, outcome="error")]
    why = proof.prove_by_hooks("ctx", CTX, [CTX_PROOF], hooks, ["ctx-plugin:pony-probe"], [])
    assert "failed (exit code 2, outcome error)" in why and "cannot read config.toml" in why


def test_a_proof_text_the_plugin_never_prints_is_caught():
    why = proof.prove_by_hooks("ctx", CTX, [CTX_PROOF], [hook("something else")], ["ctx-plugin:pony-probe"], [])
    assert repr(CTX_PROOF) in why and "never printed it" in why


def test_a_skill_missing_from_the_init_line_is_caught():
    why = proof.prove_by_hooks("ctx", CTX, [CTX_PROOF], [hook(CTX_PROOF)], [], [])
    assert "ctx-plugin:pony-probe" in why


def test_another_arms_proof_in_any_hook_output_is_caught_even_for_the_baseline():
    leak = [hook("OTHER-ARM-TEXT leaked by a project hook")]
    why = proof.prove_by_hooks("baseline", None, [], leak, [], ["OTHER-ARM-TEXT"])
    assert "another arm's proof text 'OTHER-ARM-TEXT'" in why
    assert proof.prove_by_hooks("baseline", None, [], [hook("fine")], [], ["OTHER-ARM-TEXT"]) == ""


def test_a_plugin_arm_with_nothing_to_prove_is_not_proven(tmp_path):
    (tmp_path / ".claude-plugin").mkdir()
    why = proof.prove_by_hooks("bare", str(tmp_path), [], [], [], [])
    assert "nothing that can prove it" in why


def test_the_plugins_hook_events_come_from_its_hooks_file():
    assert proof.plugin_hook_events(CTX) == {"SessionStart"}
    assert proof.plugin_hook_events(None) == set()


# --- the shared pause ------------------------------------------------------------------------------

def test_the_pause_holds_new_cells_until_it_ends(tmp_path):
    run = RunDir(tmp_path)
    assert run.wait_for_pause(sleep=lambda s: pytest.fail("no pause, no wait")) == 0
    run.pause(12, "c1")
    assert (tmp_path / PAUSE_FILE).is_file()
    run.pause(3, "c2")  # a shorter pause never cuts a longer one short
    assert run.paused_until() > time.time() + 10
    slept = []
    clock = [time.time()]
    # A fake clock: each sleep moves time forward, so the wait ends without waiting.
    real_time = time.time
    try:
        time.time = lambda: clock[0]
        waited = run.wait_for_pause(sleep=lambda s: (slept.append(s), clock.__setitem__(0, clock[0] + s)))
    finally:
        time.time = real_time
    assert 11 < waited <= 12.5 and all(s <= 5 for s in slept)


def test_a_corrupt_pause_file_holds_nothing_back_for_long(tmp_path):
    run = RunDir(tmp_path)
    (tmp_path / PAUSE_FILE).write_text("not json")
    assert run.paused_until() == 0
    (tmp_path / PAUSE_FILE).write_text(json.dumps({"until": 1e15}))
    assert run.paused_until() <= time.time() + 3600 + 1


# --- options and specs -----------------------------------------------------------------------------

@pytest.mark.parametrize("text, fault", [("529", Fault("529")), ("429:2", Fault("429", 2)), ("cut", Fault("cut")),
                                         ("stall", Fault("stall")), ("401", Fault("401"))])
def test_faults_parse(text, fault):
    assert parse_fault(text) == fault and str(parse_fault(text)) == text


@pytest.mark.parametrize("text", ["404", "529:0", "529:x", "slow", ""])
def test_bad_faults_are_refused_with_what_is_allowed(text):
    with pytest.raises(argparse.ArgumentTypeError, match="429, 529, 500, 401 or 403|whole number"):
        options.rehearsal_fault(text)


@pytest.mark.parametrize("text", ["-1", "21", "two"])
def test_bad_retry_counts_are_refused(text):
    with pytest.raises(argparse.ArgumentTypeError):
        options.retry_count(text)


def test_a_bad_rehearsal_fault_in_a_task_names_the_file_and_field(tmp_path):
    path = tmp_path / "t.yaml"
    path.write_text("prompt: p\nopen: true\nrehearsal_fault: 418\n")
    with pytest.raises(SpecError, match=r"t\.yaml: field 'rehearsal_fault': '418' is not a fault"):
        load_task(path, tmp_path)
    path.write_text("prompt: p\nopen: true\nrehearsal_fault: '529:1'\n")
    assert load_task(path, tmp_path).rehearsal_fault == "529:1"


def test_a_bad_retries_option_is_a_usage_error(pytester):
    root = pp.write_project(pytester.path, {"add": pp.ADD_TASK}, {"baseline": "{}\n"})
    result = pytester.runpytest(*pp.bench_args(root, "--ponybench-retries=-1"))
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--ponybench-retries: must be from 0 to 20, got -1*"])


# --- retries through the plugin, with the stand-in CLI -------------------------------------------

@pytest.fixture
def project(pytester, monkeypatch):
    def make(arms=None, ini=None, **fake):
        root = pp.write_project(pytester.path, {"add": pp.ADD_TASK}, arms or {"baseline": "{}\n"},
                                ini={"ponybench_retry_wait": "0", **(ini or {})})
        for key, value in pp.fake_env(root, **fake).items():
            monkeypatch.setenv(key, value)
        return root
    return make


def test_an_infra_error_that_clears_on_retry_finishes_and_keeps_its_failed_attempt(project, pytester):
    root = project(write=pp.GOOD_WRITES, api_error_times=1, api_error_cost=0.25)
    result = pytester.runpytest(*pp.bench_args(root, "-k", "add"))
    result.assert_outcomes(passed=1)
    run_dir = pp.only_run_dir(root)
    (record,) = pp.results(run_dir)
    assert (record["status"], record["attempts"], record["infra_cost_usd"]) == ("finished", 2, 0.25)
    assert (run_dir / "add__baseline__haiku__0.attempt-1" / "_ponybench.transcript.jsonl").is_file()
    assert RunDir(run_dir).spent() == pytest.approx(0.25 + 0.0123)  # both attempts on the ledger
    assert len(pp.calls(root)) == 2


def test_an_infra_error_that_never_clears_is_skipped_and_left_out(project, pytester):
    root = project(write=pp.GOOD_WRITES, mode="api_error", api_status=529)
    result = pytester.runpytest(*pp.bench_args(root, "-k", "add", "--ponybench-retries=2", "-rs"))
    result.assert_outcomes(skipped=1)
    result.stdout.fnmatch_lines(["*SKIPPED*infra_error: the model API failed after the CLI's retries (529*"])
    run_dir = pp.only_run_dir(root)
    (record,) = pp.results(run_dir)
    assert (record["status"], record["attempts"], record["api_error_status"]) == ("infra_error", 3, 529)
    assert sorted(p.name for p in run_dir.iterdir() if p.name.startswith("add__")) == [
        "add__baseline__haiku__0", "add__baseline__haiku__0.attempt-1", "add__baseline__haiku__0.attempt-2"]
    data = pp.summary(run_dir)
    assert data["infra_errors"] == 1 and data["measured"] == 0 and data["left_out"] == {"infra_error": 1}
    # A rescore sees one cell, not three: the attempts are kept, never counted.
    rescore = pytester.runpytest(f"--ponybench-rescore={run_dir}", *pp.QUIET, "-k", "add")
    rescore.assert_outcomes(skipped=1)
    assert len(pp.results(run_dir)) == 1


def test_a_429_pauses_the_run_for_every_worker(project, pytester):
    root = project(write=pp.GOOD_WRITES, api_error_times=1, api_status=429, api_type="rate_limit_error",
                   ini={"ponybench_retry_wait": "0.01"})
    result = pytester.runpytest(*pp.bench_args(root, "-k", "add"))
    result.assert_outcomes(passed=1)
    pause = json.loads((pp.only_run_dir(root) / PAUSE_FILE).read_text())
    assert pause["cell"] == "add__baseline__haiku__0" and pause["until"] > 0


def test_a_401_stops_the_run_before_the_next_cell(project, pytester):
    root = project(arms={"a1": "{}\n", "a2": "{}\n"}, write=pp.GOOD_WRITES, mode="api_error", api_status=401,
                   api_type="authentication_error")
    result = pytester.runpytest(*pp.bench_args(root, "-k", "add"))
    assert result.ret == pytest.ExitCode.INTERRUPTED
    result.stdout.fnmatch_lines(["*Interrupted: the model API refused the credentials (401) in cell add__a1__haiku__0*"])
    assert len(pp.calls(root)) == 1  # never retried, and the second cell never started
    (record,) = pp.results(pp.only_run_dir(root))
    assert (record["status"], record["attempts"]) == ("infra_error", 1)


def test_resume_runs_an_infra_cell_again_and_keeps_its_old_workspace(project, pytester):
    root = project(write=pp.GOOD_WRITES, mode="api_error")
    pytester.runpytest(*pp.bench_args(root, "-k", "add", "--ponybench-retries=0")).assert_outcomes(skipped=1)
    run_dir = pp.only_run_dir(root)
    (root / "fake.json").write_text(json.dumps({**json.loads((root / "fake.json").read_text()), "mode": "ok"}))
    resumed = pytester.runpytest(*pp.bench_args(root, "-k", "add", f"--ponybench-resume={run_dir}"))
    resumed.assert_outcomes(passed=1)
    assert (run_dir / "add__baseline__haiku__0.attempt-1").is_dir()
    (record,) = pp.results(run_dir)
    assert record["status"] == "finished"


def test_no_retry_starts_once_the_budget_is_spent(project, pytester):
    root = project(write=pp.GOOD_WRITES, mode="api_error", api_error_cost=0.5)
    result = pytester.runpytest(*pp.bench_args(root, "-k", "add", "--ponybench-max-cost=0.4", "-rs"))
    result.assert_outcomes(skipped=1)
    (record,) = pp.results(pp.only_run_dir(root))
    assert record["attempts"] == 1 and "not retried: the run's budget of $0.4 is spent" in record["error"]
    assert len(pp.calls(root)) == 1


def test_a_401_under_xdist_stops_each_worker_before_its_next_cell(project, pytester):
    root = project(arms={f"a{i}": "{}\n" for i in range(6)}, write=pp.GOOD_WRITES, mode="api_error",
                   api_status=401, api_type="authentication_error")
    result = pytester.runpytest_subprocess(*pp.bench_args(root, "-k", "add", "-n", "2"))
    assert result.ret == pytest.ExitCode.INTERRUPTED
    result.stdout.fnmatch_lines(["*the model API refused the credentials (401)*"])
    assert 1 <= len(pp.calls(root)) <= 2  # at most the one cell each worker had started
