"""The contract with the `claude` CLI (agent.py): argv, transcript parsing, usage, verdicts,
arm verification; and the process-group plumbing under it (procs.py)."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from pytest_ponybench.cell import agent, transcript as transcripts
from pytest_ponybench.processes import procs
from pytest_ponybench.store import record as records
from support import proc_watch

FAKE = Path(__file__).resolve().parent / "fakes" / "fake_claude.py"

INIT = {"type": "system", "subtype": "init", "claude_code_version": "2.1.328", "model": "claude-haiku-4-5-20251001",
        "tools": ["Read", "Write", "Edit"], "cwd": "/w",
        "plugins": [{"name": "builtin-thing", "path": "builtin", "source": "builtin"}]}
USAGE = {"input_tokens": 11, "output_tokens": 22, "cache_read_input_tokens": 33, "cache_creation_input_tokens": 44}
RESULT = {"type": "result", "subtype": "success", "is_error": False, "result": "All done.", "num_turns": 3,
          "duration_ms": 4567, "total_cost_usd": 0.0421, "usage": USAGE,
          "modelUsage": {"claude-haiku-4-5-20251001": {"costUSD": 0.0421}},
          "permission_denials": [{"tool_name": "Write"}, {"tool_name": "Edit"}]}


def assistant(msg_id: str, text: str | None = None, usage: dict | None = None) -> dict:
    message = {"id": msg_id, "role": "assistant", "content": []}
    if text is not None:
        message["content"].append({"type": "text", "text": text})
    if usage is not None:
        message["usage"] = usage
    return {"type": "assistant", "message": message}


def write_lines(path: Path, *lines) -> Path:
    with open(path, "w", encoding="utf-8") as fh:
        for line in lines:
            fh.write((line if isinstance(line, str) else json.dumps(line)) + "\n")
    return path


# --- read_transcript ---------------------------------------------------------------------

def test_read_transcript_of_a_normal_stream(tmp_path):
    path = write_lines(tmp_path / "t.jsonl", INIT, assistant("m1", "Reading.", USAGE),
                       {"type": "user", "message": {"role": "user", "content": []}},
                       assistant("m2", "Finished the work."), RESULT)
    t = transcripts.read_transcript(path)
    assert t.init == INIT
    assert t.result == RESULT
    assert t.last_text == "Finished the work."
    assert (t.events, t.garbage, t.first_garbage) == (5, 0, "")


def test_hook_lines_before_init_are_not_taken_for_the_init_line(tmp_path):
    hooks = [{"type": "system", "subtype": "hook_started", "hook_name": "SessionStart:startup"},
             {"type": "system", "subtype": "hook_response", "hook_name": "SessionStart:startup", "output": "{}"}]
    path = write_lines(tmp_path / "t.jsonl", *hooks, INIT, RESULT)
    t = transcripts.read_transcript(path)
    assert t.init == INIT
    assert t.events == 4 and t.garbage == 0


def test_garbage_lines_are_counted_and_the_first_one_kept(tmp_path):
    path = write_lines(tmp_path / "t.jsonl", "Segmentation fault", INIT, "[1, 2]", "{half a line", "", RESULT)
    t = transcripts.read_transcript(path)
    assert t.garbage == 3  # non-JSON, JSON that is not an object, a torn object; blank lines are skipped
    assert t.first_garbage == "Segmentation fault"
    assert t.init == INIT and t.result == RESULT


def test_a_line_over_one_mib_is_bounded_and_counted_as_garbage(tmp_path):
    huge = json.dumps(assistant("m9", "x" * (transcripts.MAX_LINE + 10)))
    path = write_lines(tmp_path / "t.jsonl", INIT, huge, RESULT)
    t = transcripts.read_transcript(path)
    assert t.garbage == 1
    assert t.first_garbage == "<a line over 1 MiB>"
    assert t.last_text == ""  # the oversized message was never parsed
    assert t.init == INIT and t.result == RESULT  # the lines after it are read as usual


def test_a_line_of_exactly_the_cap_is_read(tmp_path):
    empty = json.dumps(assistant("m1", ""))
    line = json.dumps(assistant("m1", "y" * (transcripts.MAX_LINE - 1 - len(empty))))
    assert len(line) + 1 == transcripts.MAX_LINE  # with its newline, exactly the cap
    t = transcripts.read_transcript(write_lines(tmp_path / "t.jsonl", line, RESULT))
    assert t.garbage == 0 and t.last_text == "y" * (transcripts.MAX_LINE - 1 - len(empty))
    assert t.result == RESULT


def test_a_missing_transcript_reads_as_empty(tmp_path):
    t = transcripts.read_transcript(tmp_path / "never-written.jsonl")
    assert (t.init, t.result, t.events, t.garbage, t.usage_seen) == (None, None, 0, 0, {})


def test_a_killed_run_keeps_the_usage_seen_so_far(tmp_path):
    # No result line: usage comes from the assistant messages, the last usage of each message id.
    first = {"input_tokens": 10, "output_tokens": 1, "cache_read_input_tokens": 100, "cache_creation_input_tokens": 5}
    first_final = {**first, "output_tokens": 7}  # the same message, streamed again with its final count
    second = {"input_tokens": 20, "output_tokens": 3, "cache_read_input_tokens": 200, "cache_creation_input_tokens": 0}
    path = write_lines(tmp_path / "t.jsonl", INIT, assistant("a", "one", first), assistant("a", "one", first_final),
                       assistant("b", "two", second))
    t = transcripts.read_transcript(path)
    assert t.result is None
    assert t.usage_seen == {"input_tokens": 30, "output_tokens": 10, "cache_read_input_tokens": 300,
                            "cache_creation_input_tokens": 5}
    m = transcripts.usage_metrics(t)
    assert (m["in_tokens"], m["out_tokens"], m["cache_tokens"]) == (30, 10, 305)
    assert m["total_tokens"] == 30 + 10 + 305
    assert m["duration_ms"] is None and m["turns"] is None  # (its cost: the test below)
    assert m["served_model"] == "claude-haiku-4-5-20251001"  # from the init line, no modelUsage yet


def test_a_killed_run_s_cost_is_its_counted_tokens_at_list_price_marked_as_an_estimate(tmp_path):
    # Issue 36, item 3: with no result line the cost was None, recorded as $0 on the ledger,
    # and four stalling cells spent about 3.1x the run's budget.
    usage = {"input_tokens": 1000, "output_tokens": 2000, "cache_read_input_tokens": 10000,
             "cache_creation_input_tokens": 500}
    t = transcripts.read_transcript(write_lines(tmp_path / "t.jsonl", INIT, assistant("a", "one", usage)))
    m = transcripts.usage_metrics(t)
    # Haiku 4.5: $1 in, $5 out, $2 cache write (1 h), $0.10 cache read, per million tokens.
    assert m["cost_usd"] == pytest.approx((1000 * 1 + 2000 * 5 + 500 * 2 + 10000 * 0.1) / 1e6)
    assert m["cost_estimated"] is True and "claude-haiku-4-5 list price" in m["cost_note"]
    # A model with no known price is priced as the dearest known, and the note says so.
    unknown = transcripts.usage_metrics(transcripts.Transcript(init={"model": "claude-future-9"}, usage_seen=usage))
    assert unknown["cost_usd"] == pytest.approx((1000 * 5 + 2000 * 25 + 500 * 10 + 10000 * 0.5) / 1e6)
    assert "no known price for model 'claude-future-9'" in unknown["cost_note"]
    # No tokens counted: nothing to estimate, no cost (not $0).
    nothing = transcripts.usage_metrics(transcripts.Transcript(init=INIT))
    assert nothing["cost_usd"] is None and nothing["cost_estimated"] is False


def test_a_flooded_transcript_is_cut_to_head_and_tail_and_still_scores(tmp_path):
    fillers = [assistant(f"m{i}", "x" * 80) for i in range(400)]  # about 50 KiB
    path = write_lines(tmp_path / "t.jsonl", INIT, *fillers, assistant("last", "the final words"), RESULT)
    size = path.stat().st_size
    agent.bound_file(path, keep=4096)
    cut = path.read_bytes()
    assert len(cut) < 2 * 4096 + 200 < size
    assert f"cut from a {size}-byte output".encode() in cut
    t = transcripts.read_transcript(path)
    assert t.init == INIT and t.result == RESULT  # the head keeps the init line, the tail the result
    assert t.garbage == 0  # whole lines only, and the marker line is not counted as garbage
    assert t.last_text == "the final words"


def test_a_small_transcript_is_left_alone(tmp_path):
    path = write_lines(tmp_path / "t.jsonl", INIT, RESULT)
    before = path.read_bytes()
    agent.bound_file(path, keep=4096)
    assert path.read_bytes() == before


def tool_use(tool_id: str, name: str, **tool_input) -> dict:
    return {"type": "assistant", "message": {"id": f"m-{tool_id}", "role": "assistant", "content": [
        {"type": "tool_use", "id": tool_id, "name": name, "input": tool_input}]}}


def tool_result(tool_id: str, is_error: bool = False) -> dict:
    return {"type": "user", "message": {"role": "user", "content": [
        {"type": "tool_result", "tool_use_id": tool_id, "is_error": is_error, "content": "..."}]}}


def test_the_paths_the_agent_s_write_tools_wrote(tmp_path):
    path = write_lines(tmp_path / "t.jsonl", INIT,
                       tool_use("t1", "Write", file_path="/w/a.py", content="x"), tool_result("t1"),
                       tool_use("t2", "Edit", file_path="/w/b.py", old_string="a", new_string="b"),
                       tool_result("t2", is_error=True),  # refused: nothing was written
                       tool_use("t3", "Read", file_path="/w/c.py"), tool_result("t3"),  # not a write
                       tool_use("t4", "NotebookEdit", notebook_path="/w/n.ipynb", new_source="1"),
                       tool_result("t4"),
                       tool_use("t5", "Write", content="no path"), RESULT)
    assert transcripts.read_transcript(path).written == ["/w/a.py", "/w/n.ipynb"]


# --- usage_metrics -------------------------------------------------------------------------

def test_usage_metrics_maps_the_result_fields(tmp_path):
    init = {**INIT, "tools": ["Read", "Write"],
            "plugins": INIT["plugins"] + [{"name": "small-diff", "path": "/p/small-diff", "source": "inline"}]}
    t = transcripts.read_transcript(write_lines(tmp_path / "t.jsonl", init, assistant("m1", "x", {"output_tokens": 999}),
                                          RESULT))
    m = transcripts.usage_metrics(t)
    assert m == {
        "cost_usd": 0.0421, "cost_estimated": False, "cost_note": "", "duration_ms": 4567, "turns": 3, "denials": 2,
        "in_tokens": 11, "out_tokens": 22, "cache_tokens": 33 + 44, "total_tokens": 11 + 22 + 33 + 44,
        "served_model": "claude-haiku-4-5-20251001", "claude_version": "2.1.328",
        "plugins": "builtin-thing,small-diff", "tools": "Read,Write",
    }
    assert all(v is None or isinstance(v, (str, int, float, bool)) for v in m.values())


def test_usage_metrics_of_nothing_are_none_not_zero():
    m = transcripts.usage_metrics(transcripts.Transcript())
    assert m["cost_usd"] is None and m["in_tokens"] is None and m["out_tokens"] is None
    assert m["cache_tokens"] is None and m["total_tokens"] is None and m["denials"] is None
    assert m["served_model"] == "" and m["plugins"] == "" and m["tools"] == ""


def test_usage_metrics_ignore_values_of_the_wrong_type():
    t = transcripts.Transcript(result={"type": "result", "total_cost_usd": True, "num_turns": "3",
                                 "usage": {"input_tokens": 1.5, "output_tokens": 4}})
    m = transcripts.usage_metrics(t)
    assert m["cost_usd"] is None and m["turns"] is None and m["in_tokens"] is None
    assert m["out_tokens"] == 4 and m["total_tokens"] == 4


# --- judge ---------------------------------------------------------------------------------

def outcome(exit_code=0, timed_out=False):
    return agent.RunOutcome(exit_code=None if timed_out else exit_code, timed_out=timed_out, wall_s=0.1)


def stderr_file(tmp_path, text="") -> Path:
    path = tmp_path / "stderr.txt"
    path.write_text(text)
    return path


def test_judge_a_finished_run(tmp_path):
    t = transcripts.Transcript(init=INIT, result=RESULT)
    assert transcripts.judge(outcome(0), t, stderr_file(tmp_path), 300) == (records.FINISHED, "")


def test_judge_a_timeout_wins_over_everything(tmp_path):
    t = transcripts.Transcript(init=INIT, result=RESULT)
    status, error = transcripts.judge(outcome(timed_out=True), t, stderr_file(tmp_path), 42)
    assert status == records.TIMEOUT
    assert "42 s" in error and "killed" in error


def test_judge_the_root_refusal_says_what_to_do(tmp_path):
    err = stderr_file(tmp_path, "--dangerously-skip-permissions cannot be used with root/sudo privileges "
                                "for security reasons\n")
    status, error = transcripts.judge(outcome(1), transcripts.Transcript(), err, 300)
    assert status == records.CLI_ERROR
    assert "root" in error and "IS_SANDBOX=1" in error


def test_judge_an_error_result(tmp_path):
    t = transcripts.Transcript(init=INIT, result={**RESULT, "subtype": "error_max_turns", "is_error": True,
                                            "result": "Reached the turn limit"})
    status, error = transcripts.judge(outcome(0), t, stderr_file(tmp_path), 300)
    assert status == records.CLI_ERROR
    assert "error_max_turns" in error and "Reached the turn limit" in error


def test_judge_a_non_zero_exit_before_a_result(tmp_path):
    err = stderr_file(tmp_path, "starting\nSegmentation fault (core dumped)\n")
    status, error = transcripts.judge(outcome(139), transcripts.Transcript(init=INIT), err, 300)
    assert status == records.CLI_ERROR
    assert "139" in error and "Segmentation fault (core dumped)" in error


def test_judge_garbage_output(tmp_path):
    t = transcripts.Transcript(garbage=2, first_garbage="this is not json")
    status, error = transcripts.judge(outcome(0), t, stderr_file(tmp_path), 300)
    assert status == records.BAD_OUTPUT
    assert "2 unreadable lines" in error and "this is not json" in error


def test_judge_no_result_line(tmp_path):
    status, error = transcripts.judge(outcome(0), transcripts.Transcript(init=INIT, events=1), stderr_file(tmp_path), 300)
    assert status == records.BAD_OUTPUT
    assert "without printing a result line" in error


# --- verify_arm ----------------------------------------------------------------------------

def init_with(plugins=(), tools=("Read", "Write", "Edit", "Glob", "Grep")) -> dict:
    builtin = [{"name": "builtin-thing", "path": "builtin", "source": "builtin"}]
    return {**INIT, "tools": list(tools), "plugins": builtin + list(plugins)}


def test_verify_arm_baseline_with_only_builtin_plugins_passes():
    assert transcripts.verify_arm(init_with(), None) is None


def test_verify_arm_rejects_a_missing_init_line():
    assert "no init line" in transcripts.verify_arm(None, None)


def test_verify_arm_rejects_bash():
    problem = transcripts.verify_arm(init_with(tools=("Read", "Write", "Bash")), None)
    assert problem is not None and "Bash" in problem


def test_verify_arm_rejects_a_plugin_in_the_baseline():
    problem = transcripts.verify_arm(init_with([{"name": "caveman", "path": "/x/caveman", "source": "inline"}]), None)
    assert problem is not None and "caveman" in problem


def test_verify_arm_plugin_arm_with_its_plugin_passes(tmp_path):
    mine = tmp_path / "small-diff"
    mine.mkdir()
    link = tmp_path / "link-to-small-diff"
    link.symlink_to(mine)
    assert transcripts.verify_arm(init_with([{"name": "small-diff", "path": str(mine), "source": "inline"}]), str(mine)) is None
    # the same directory reached through a symlink is the same plugin
    assert transcripts.verify_arm(init_with([{"name": "small-diff", "path": str(link), "source": "inline"}]), str(mine)) is None


def test_verify_arm_plugin_arm_without_its_plugin_fails(tmp_path):
    problem = transcripts.verify_arm(init_with(), str(tmp_path / "small-diff"))
    assert problem is not None and "not among the plugins" in problem


def test_verify_arm_plugin_arm_with_another_plugin_fails(tmp_path):
    mine = str(tmp_path / "small-diff")
    plugins = [{"name": "small-diff", "path": mine, "source": "inline"},
               {"name": "caveman", "path": "/x/caveman", "source": "inline"}]
    problem = transcripts.verify_arm(init_with(plugins), mine)
    assert problem is not None and "caveman" in problem


def test_verify_arm_ignores_builtin_plugins_however_marked():
    plugins = [{"name": "a", "path": "builtin"}, {"name": "b", "path": "/opt/b", "source": "builtin"}]
    assert transcripts.verify_arm(init_with(plugins), None) is None


# --- build_argv, environment, the CLI lookup -------------------------------------------------

REQUIRED = {"-p": "PROMPT", "--model": "claude-x-1", "--permission-mode": "bypassPermissions",
            "--setting-sources": "project,local", "--disallowedTools": "Bash", "--output-format": "stream-json"}
# --include-hook-events: every hook's output, exit code and outcome, which prove a real arm (proof.py).
REQUIRED_SWITCHES = {"--strict-mcp-config", "--verbose", "--include-hook-events"}
# Beyond the list: keeps the CLI from writing a session transcript under ~/.claude.
ALLOWED_EXTRA = {"--no-session-persistence"}


def flags_of(argv: list[str]) -> dict[str, str | None]:
    """{flag: its value, or None for a switch}, asserting no flag is given twice."""
    flags: dict[str, str | None] = {}
    i = 1
    while i < len(argv):
        flag = argv[i]
        assert flag.startswith("-"), f"stray argument {flag!r} in {argv}"
        assert flag not in flags, f"{flag} given twice"
        takes_value = i + 1 < len(argv) and not argv[i + 1].startswith("--")
        flags[flag] = argv[i + 1] if takes_value else None
        i += 2 if takes_value else 1
    return flags


def test_build_argv_for_a_prompt_arm_has_exactly_the_required_flags():
    append = "Follow YAGNI principles.\n\n" + agent.WRITE_AND_STOP
    argv = agent.build_argv("/bin/claude", "PROMPT", "claude-x-1", append, None)
    assert argv[0] == "/bin/claude"
    flags = flags_of(argv)
    for flag, value in REQUIRED.items():
        assert flags.get(flag) == value, flag
    assert set(flags) == set(REQUIRED) | REQUIRED_SWITCHES | ALLOWED_EXTRA | {"--append-system-prompt"}
    assert flags["--append-system-prompt"] == append
    assert "--plugin-dir" not in flags


def test_build_argv_for_a_plugin_arm_adds_plugin_dir_only():
    argv = agent.build_argv("claude", "PROMPT", "claude-x-1", agent.WRITE_AND_STOP, "/plugins/small-diff")
    flags = flags_of(argv)
    assert flags["--plugin-dir"] == "/plugins/small-diff"
    assert set(flags) == set(REQUIRED) | REQUIRED_SWITCHES | ALLOWED_EXTRA | {"--append-system-prompt", "--plugin-dir"}


def test_the_append_text_of_every_arm_ends_with_write_and_stop():
    from pytest_ponybench.cell.lifecycle import append_text
    from pytest_ponybench.specs.spec import ArmSpec

    assert append_text(ArmSpec(name="baseline", path=None)) == agent.WRITE_AND_STOP
    yagni = append_text(ArmSpec(name="yagni", path=None, prompt="Follow YAGNI principles."))
    assert yagni.startswith("Follow YAGNI principles.") and yagni.endswith(agent.WRITE_AND_STOP)
    for phrase in ("Do not run servers", "install dependencies", "start databases", "open a browser",
                   "write the code and stop"):
        assert phrase in agent.WRITE_AND_STOP


def test_agent_env_drops_the_parent_session_markers(monkeypatch):
    monkeypatch.setenv("CLAUDECODE", "1")
    monkeypatch.setenv("CLAUDE_CODE_ENTRYPOINT", "cli")
    env = agent.agent_env({"ANTHROPIC_BASE_URL": "http://127.0.0.1:9"})
    assert "CLAUDECODE" not in env and "CLAUDE_CODE_ENTRYPOINT" not in env
    assert env["ANTHROPIC_BASE_URL"] == "http://127.0.0.1:9"
    assert env["DISABLE_TELEMETRY"] == "1"


def test_find_claude_missing_is_one_clear_error(tmp_path):
    with pytest.raises(agent.CliMissing, match="--ponybench-claude: /nonexistent/claude is not an executable"):
        agent.find_claude("/nonexistent/claude", tmp_path)


def test_no_cli_anywhere_says_how_to_install_one_where_it_will_be_found(tmp_path, monkeypatch):
    # A plugin's repository has no package.json of ours: `npm ci` alone would not help there.
    monkeypatch.setenv("PATH", str(tmp_path / "empty-bin"))
    with pytest.raises(agent.CliMissing) as caught:
        agent.find_claude(None, tmp_path)
    said = str(caught.value)
    assert "`npm install @anthropic-ai/claude-code` in this project" in said and "--ponybench-claude" in said
    # What that command makes is what the next session finds.
    pinned = tmp_path / "node_modules" / ".bin" / "claude"
    pinned.parent.mkdir(parents=True)
    pinned.write_text("#!/bin/sh\n")
    assert agent.find_claude(None, tmp_path) == str(pinned)


def test_find_claude_and_its_version_with_the_stand_in(tmp_path):
    found = agent.find_claude(str(FAKE), tmp_path)
    assert found == str(FAKE.resolve())
    assert agent.claude_version(found) == "2.1.328"


def test_claude_version_of_a_binary_that_fails_is_cli_missing(tmp_path):
    broken = tmp_path / "claude"
    broken.write_text("#!/bin/sh\necho 'no such thing' >&2\nexit 3\n")
    broken.chmod(0o755)
    with pytest.raises(agent.CliMissing, match="exited 3"):
        agent.claude_version(str(broken))


# --- agent.run and the process tree ----------------------------------------------------------

def test_run_kills_a_hanging_cli_with_its_child_and_keeps_the_transcript(tmp_path, monkeypatch):
    spec = tmp_path / "fake.json"
    spec.write_text(json.dumps({"mode": "hang"}))
    ws = tmp_path / "ws"
    ws.mkdir()
    env = agent.agent_env({"PONYBENCH_FAKE": str(spec)})
    argv = agent.build_argv(str(FAKE), "do it", "claude-x-1", agent.WRITE_AND_STOP, None)
    try:
        out = agent.run(argv, ws, env, 1.0, ws / "t.jsonl", ws / "err.txt")
        assert out.timed_out and out.exit_code is None
        survivors = proc_watch.wait_until_dead(proc_watch.working_in(ws), timeout=2)
        assert survivors == [], "processes of the killed agent survived"
    finally:
        proc_watch.kill(proc_watch.working_in(ws))
    t = transcripts.read_transcript(ws / "t.jsonl")
    assert t.init is not None and t.result is None  # written before the hang, kept after the kill
    assert transcripts.usage_metrics(t)["out_tokens"] == 20
    assert "killed with its process tree" in (ws / "err.txt").read_text()


def test_group_alive_does_not_count_a_zombie():
    # A killed, not yet reaped process is a zombie: it runs nothing, so its group is gone.
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], start_new_session=True,
                            stdin=subprocess.DEVNULL)
    try:
        assert procs.group_alive(proc.pid)
        os.kill(proc.pid, signal.SIGKILL)
        deadline = time.monotonic() + 5
        while proc_watch.alive(proc.pid) and time.monotonic() < deadline:
            time.sleep(0.01)
        assert not proc_watch.alive(proc.pid)
        assert Path(f"/proc/{proc.pid}").exists(), "the zombie was reaped too early for this test"
        assert not procs.group_alive(proc.pid)
        assert procs.wait_group_gone(proc.pid, timeout=0.5)
    finally:
        proc.kill()
        proc.wait()


def test_wait_or_kill_kills_a_child_left_behind_by_a_process_that_exited():
    script = ("import subprocess, sys; "
              "p = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)']); print(p.pid)")
    proc = procs.start([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    child = int(proc.stdout.readline())
    try:
        assert procs.wait_or_kill(proc, 10) is False  # it exited by itself
        assert proc_watch.wait_until_dead([child], timeout=2) == []
    finally:
        proc_watch.kill([child])
        proc.stdout.close()


def test_a_cut_on_a_line_boundary_keeps_every_whole_line(tmp_path):
    path = tmp_path / "t.jsonl"
    path.write_bytes(b"".join(f"line{i:07d}\n".encode() for i in range(10_000)))  # 12 bytes a line
    agent.bound_file(path, keep=12 * 100)  # both cuts fall exactly on line starts
    lines = path.read_bytes().decode().splitlines()
    assert lines[:100] == [f"line{i:07d}" for i in range(100)]
    assert lines[101:] == [f"line{i:07d}" for i in range(9_900, 10_000)]
    assert lines[100].startswith("[ponybench:")


# --- the CLI's output: no read follows a link, every read is capped ------------------------------

def test_no_read_of_the_cli_s_output_follows_a_link_planted_at_its_name(tmp_path):
    secret = write_lines(tmp_path / "secret.jsonl", INIT, RESULT, "the user's secret line")
    before = secret.read_bytes()
    transcript, stderr = tmp_path / "t.jsonl", tmp_path / "err.txt"
    transcript.symlink_to(secret)
    stderr.symlink_to(secret)
    t = transcripts.read_transcript(transcript)
    assert (t.init, t.result, t.events) == (None, None, 0)
    status, error = transcripts.judge(outcome(1), transcripts.Transcript(init=INIT), stderr, 300)
    assert status == records.CLI_ERROR and "secret" not in error, error
    agent.bound_file(transcript, keep=16)
    assert transcript.is_symlink() and secret.read_bytes() == before


def test_the_cli_s_output_is_never_opened_through_a_link_at_its_name_or_its_folder(tmp_path):
    target = tmp_path / "user-file"
    target.write_text("keep me\n")
    (tmp_path / "t.jsonl").symlink_to(target)
    with pytest.raises(OSError):
        agent.run([sys.executable, "-c", "print(1)"], tmp_path, dict(os.environ), 30, tmp_path / "t.jsonl",
                  tmp_path / "err.txt")
    (tmp_path / "real").mkdir()
    (tmp_path / "linked").symlink_to(tmp_path / "real")
    with pytest.raises(OSError):
        agent.run([sys.executable, "-c", "print(1)"], tmp_path, dict(os.environ), 30, tmp_path / "linked" / "t.jsonl",
                  tmp_path / "err.txt")
    assert target.read_text() == "keep me\n" and list((tmp_path / "real").iterdir()) == []


def test_a_transcript_never_bound_is_read_as_its_head_and_its_tail_within_the_cap(tmp_path, monkeypatch):
    monkeypatch.setattr(agent, "KEEP_BYTES", 4096)
    monkeypatch.setattr(transcripts, "READ_CAP", 2 * 4096 + 100)
    fillers = [assistant(f"m{i}", "x" * 80) for i in range(400)]  # about 50 KiB, never cut
    path = write_lines(tmp_path / "t.jsonl", INIT, *fillers, assistant("last", "the final words"), RESULT)
    t = transcripts.read_transcript(path)
    assert t.init == INIT and t.result == RESULT and t.last_text == "the final words"
    assert t.garbage == 0 and t.events < 2 * 4096 // 100 < len(fillers)  # what lies between is never read


def test_put_back_moves_the_cli_s_output_over_whatever_the_agent_left_and_follows_no_link(tmp_path):
    from pytest_ponybench.cell import workspace
    from pytest_ponybench.store.rundir import records_dir

    ws = tmp_path / "run" / "cell"
    ws.mkdir(parents=True)
    records_dir(ws).mkdir(parents=True)
    workspace.cli_output(ws, workspace.TRANSCRIPT).write_text("the CLI's transcript\n")
    workspace.cli_output(ws, workspace.STDERR).write_text("the CLI's stderr\n")
    target = tmp_path / "user-file"
    target.write_text("keep me\n")
    (ws / workspace.TRANSCRIPT).symlink_to(target)  # the agent's link
    (ws / workspace.STDERR).mkdir()  # and a folder of its own, with a link inside
    (ws / workspace.STDERR / "inside").symlink_to(target)
    assert workspace.put_back(ws) == [workspace.TRANSCRIPT, workspace.STDERR]
    assert (ws / workspace.TRANSCRIPT).read_text() == "the CLI's transcript\n"
    assert (ws / workspace.STDERR).read_text() == "the CLI's stderr\n"
    assert not (ws / workspace.TRANSCRIPT).is_symlink() and target.read_text() == "keep me\n"
    assert not workspace.cli_output(ws, workspace.TRANSCRIPT).exists()
