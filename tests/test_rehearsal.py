"""The scripted Messages API (rehearsal mode) and the arm proof.

Protocol tests talk to the server with urllib. The end-to-end tests run the pinned real
`claude` binary against it (the `claude_bin` fixture skips them locally without
node_modules, and fails them in CI).

What the CLI 2.1.328 really sends, measured with these tests (-p, stream-json, the
environment of `_cli_env`):
- only `POST <base>/v1/messages?beta=true`, one per main-loop turn, `stream: true`, each with
  `tools` (Write, Edit, Read, Glob, Grep, Skill, ... and no Bash when disallowed); no side
  request, no count_tokens call, no GET or HEAD probe. Headers: `x-api-key`,
  `anthropic-version: 2023-06-01`, `anthropic-beta`, `x-app: cli`,
  `user-agent: claude-cli/2.1.328 ...`, `x-claude-code-session-id`.
- `system` is a list of text blocks (a billing line, "You are Claude Code...", the long
  prompt); the `--append-system-prompt` text closes the last block.
- A plugin's SessionStart `additionalContext` arrives as the first block of the first user
  message: `<system-reminder>\\nSessionStart hook additional context: <text>\\n</system-reminder>`.
  Its skills are listed in a later `<system-reminder>` block of that same message,
  "The following skills are available for use with the Skill tool", as
  `- <plugin>:<skill>: <description>`. Both are repeated on every request, since each request
  carries the whole conversation.
- In stream-json output the plugin's SessionStart hook yields `hook_started` and
  `hook_response` lines before the `init` line, so the init line is not always the first.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from pytest_ponybench.rehearsal.server import CellScript, ScriptedModel, prove_arm

PLUGINS = Path(__file__).resolve().parent / "plugins"
MODEL = "claude-haiku-4-5-20251001"
MARKER = "PONYBENCH APPENDED MARKER 5e1b: prefer small functions."
CTX_MARKER = "PONYBENCH-CTX-MARKER-41d7"  # printed by ctx-plugin's SessionStart hook
SKILL_MARKER = "PONYBENCH-SKILL-MARKER-9c2e"  # in ctx-plugin's skill description
SILENT_MARKER = "PONYBENCH-SILENT-MARKER-0b6f"  # what silent-plugin would add, if it worked
TOOLS = [{"name": "Write", "description": "Write a file", "input_schema": {"type": "object"}}]


# helpers ------------------------------------------------------------------------------------

def _post(url: str, body, *, raw: bytes | None = None, method: str = "POST", timeout: float = 5):
    """(status, headers, bytes) of one request; errors are returned, not raised."""
    data = raw if raw is not None else (None if body is None else json.dumps(body).encode())
    req = urllib.request.Request(url, data=data, method=method,
                                 headers={"content-type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            return resp.status, resp.headers, resp.read()
    except urllib.error.HTTPError as err:
        return err.code, err.headers, err.read()


def _messages_url(base: str) -> str:
    return base + "/v1/messages?beta=true"


def _parse_sse(payload: bytes) -> list[tuple[str, dict]]:
    events = []
    for chunk in payload.decode().split("\n\n"):
        if not chunk.strip():
            continue
        lines = chunk.split("\n")
        assert lines[0].startswith("event: ") and lines[1].startswith("data: "), chunk
        events.append((lines[0][len("event: "):], json.loads(lines[1][len("data: "):])))
    return events


def _body(n_assistant: int, *, tools=TOOLS, stream=True, system="sys") -> dict:
    messages = [{"role": "user", "content": "go"}]
    for i in range(n_assistant):
        messages.append({"role": "assistant", "content": [{"type": "text", "text": f"a{i}"}]})
        messages.append({"role": "user", "content": [{"type": "text", "text": f"u{i}"}]})
    body = {"model": MODEL, "max_tokens": 100, "system": system, "messages": messages,
            "stream": stream}
    if tools is not None:
        body["tools"] = tools
    return body


def _reassemble(events: list[tuple[str, dict]]) -> dict:
    """A Message rebuilt from its events, as a client would."""
    message = events[0][1]["message"]
    blocks: dict[int, dict] = {}
    partial: dict[int, str] = {}
    for name, data in events[1:]:
        if name == "content_block_start":
            blocks[data["index"]] = dict(data["content_block"])
        elif name == "content_block_delta":
            delta = data["delta"]
            if delta["type"] == "text_delta":
                blocks[data["index"]]["text"] += delta["text"]
            else:
                partial[data["index"]] = partial.get(data["index"], "") + delta["partial_json"]
        elif name == "content_block_stop" and data["index"] in partial:
            blocks[data["index"]]["input"] = json.loads(partial[data["index"]])
        elif name == "message_delta":
            message["stop_reason"] = data["delta"]["stop_reason"]
            message["usage"]["output_tokens"] = data["usage"]["output_tokens"]
    message["content"] = [blocks[i] for i in sorted(blocks)]
    return message


@pytest.fixture
def server():
    with ScriptedModel() as model:
        yield model


# protocol -----------------------------------------------------------------------------------

EVENT_ORDER = ["message_start", "content_block_start", "content_block_delta",
               "content_block_stop", "message_delta", "message_stop"]


def test_streamed_write_turn(server, tmp_path):
    target = str(tmp_path / "pkg" / "a.py")
    base = server.register("c", CellScript(writes=[(target, "x = 1\n")], input_tokens=321,
                                            output_tokens=45, cache_read_input_tokens=7))
    status, headers, payload = _post(_messages_url(base), _body(0))
    assert status == 200
    assert headers["Content-Type"] == "text/event-stream"
    events = _parse_sse(payload)
    assert [name for name, _ in events] == EVENT_ORDER
    assert all(data["type"] == name for name, data in events)
    start = events[0][1]["message"]
    assert start["content"] == [] and start["stop_reason"] is None and start["model"] == MODEL
    assert start["usage"]["input_tokens"] == 321
    assert start["usage"]["cache_read_input_tokens"] == 7
    opened = events[1][1]["content_block"]
    assert opened["type"] == "tool_use" and opened["name"] == "Write" and opened["input"] == {}
    assert opened["id"].startswith("toolu_")
    assert events[2][1]["delta"]["type"] == "input_json_delta"
    assert json.loads(events[2][1]["delta"]["partial_json"]) == {"file_path": target,
                                                                 "content": "x = 1\n"}
    assert events[4][1]["delta"]["stop_reason"] == "tool_use"
    assert events[4][1]["usage"]["output_tokens"] == 45


def test_turns_follow_the_assistant_messages(server, tmp_path):
    writes = [(str(tmp_path / f"f{i}.txt"), f"content {i}") for i in range(2)]
    base = server.register("c", CellScript(writes=writes, answer="All written."))
    url = _messages_url(base)
    got = [_reassemble(_parse_sse(_post(url, _body(n))[2])) for n in (0, 1, 2, 3)]
    assert [m["stop_reason"] for m in got] == ["tool_use", "tool_use", "end_turn", "end_turn"]
    assert [m["content"][0]["input"] for m in got[:2]] == [
        {"file_path": p, "content": c} for p, c in writes]
    assert got[2]["content"] == [{"type": "text", "text": "All written."}]
    assert len({m["content"][0]["id"] for m in got[:2]}) == 2  # tool_use ids are unique
    assert len(server.requests("c")) == 4


def test_an_existing_file_is_read_before_it_is_written(server, tmp_path):
    seeded, fresh = tmp_path / "seeded.py", tmp_path / "fresh.py"
    seeded.write_text("OLD = 1\n")
    base = server.register("c", CellScript(writes=[(str(seeded), "NEW\n"), (str(fresh), "F\n")]))
    events = _parse_sse(_post(_messages_url(base), _body(0))[2])
    assert [name for name, _ in events] == EVENT_ORDER[:1] + EVENT_ORDER[1:4] * 2 + EVENT_ORDER[4:]
    message = _reassemble(events)
    assert [(b["name"], b["input"]) for b in message["content"]] == [
        ("Read", {"file_path": str(seeded)}),
        ("Write", {"file_path": str(seeded), "content": "NEW\n"})]
    assert message["stop_reason"] == "tool_use"
    message = _reassemble(_parse_sse(_post(_messages_url(base), _body(1))[2]))
    assert [b["name"] for b in message["content"]] == ["Write"]


def test_final_turn_events(server):
    base = server.register("c", CellScript(writes=[], answer="Nothing to do."))
    events = _parse_sse(_post(_messages_url(base), _body(0))[2])
    assert [name for name, _ in events] == EVENT_ORDER
    assert events[1][1]["content_block"] == {"type": "text", "text": ""}
    assert events[2][1]["delta"] == {"type": "text_delta", "text": "Nothing to do."}
    assert events[4][1]["delta"]["stop_reason"] == "end_turn"


def test_plain_json_when_not_streamed(server, tmp_path):
    target = str(tmp_path / "b.py")
    base = server.register("c", CellScript(writes=[(target, "y = 2\n")], output_tokens=9))
    for stream in (False, None):
        body = _body(0, stream=stream)
        if stream is None:
            del body["stream"]
        status, headers, payload = _post(_messages_url(base), body)
        assert status == 200 and headers["Content-Type"] == "application/json"
        message = json.loads(payload)
        assert message["type"] == "message" and message["role"] == "assistant"
        assert message["stop_reason"] == "tool_use"
        assert message["content"][0]["input"] == {"file_path": target, "content": "y = 2\n"}
        assert message["usage"]["output_tokens"] == 9
    message = json.loads(_post(_messages_url(base), _body(1, stream=False))[2])
    assert message["stop_reason"] == "end_turn" and message["content"][0]["text"] == "Done."


def test_side_request_gets_a_short_answer_and_no_turn(server, tmp_path):
    base = server.register("c", CellScript(writes=[(str(tmp_path / "c.py"), "z\n")]))
    side = _reassemble(_parse_sse(_post(_messages_url(base), _body(0, tools=None))[2]))
    assert side["stop_reason"] == "end_turn" and side["content"][0]["type"] == "text"
    assert side["usage"]["input_tokens"] == 0 and side["usage"]["output_tokens"] == 0
    main = _reassemble(_parse_sse(_post(_messages_url(base), _body(0))[2]))
    assert main["stop_reason"] == "tool_use"  # the side request did not use up the Write
    assert [bool(r.get("tools")) for r in server.requests("c")] == [False, True]


def test_count_tokens(server):
    base = server.register("c", CellScript(writes=[], input_tokens=77))
    status, _, payload = _post(base + "/v1/messages/count_tokens?beta=true", _body(0))
    assert status == 200 and json.loads(payload) == {"input_tokens": 77}
    assert server.requests("c") == []  # not a Messages request


def _assert_api_error(status: int, payload: bytes, code: int) -> str:
    assert status == code
    error = json.loads(payload)
    assert error["type"] == "error" and error["error"]["type"] == "invalid_request_error"
    assert error["error"]["message"]
    return error["error"]["message"]


def test_unknown_things_get_a_4xx_at_once(server):
    base = server.register("known", CellScript(writes=[]))
    root = f"http://127.0.0.1:{server.port}"
    # "At once": each request below has a short client timeout, so a hang fails the test.
    _assert_api_error(*_post(root + "/v1/messages", _body(0))[::2], 404)
    _assert_api_error(*_post(root + "/", None, method="GET")[::2], 404)
    _assert_api_error(*_post(base + "/v1/models", None, method="GET")[::2], 404)
    _assert_api_error(*_post(_messages_url(root + "/cell/nobody"), _body(0))[::2], 404)
    _assert_api_error(*_post(_messages_url(base), None, raw=b"{not json")[::2], 400)
    _assert_api_error(*_post(_messages_url(base), None, raw=b"[1, 2]")[::2], 400)
    _assert_api_error(*_post(_messages_url(base), None, raw=b"\xff\xfe")[::2], 400)
    _assert_api_error(*_post(_messages_url(base), None, method="GET")[::2], 405)
    status, headers, _ = _post(_messages_url(base), None, method="HEAD")
    assert status == 405 and headers["x-should-retry"] == "false"
    assert server.requests("known") == []
    assert [c["status"] for c in server.calls("known")] == [404, 400, 400, 400, 405, 405]


def test_a_guessed_path_or_another_cell_s_path_without_its_token_changes_no_cell(server, tmp_path):
    """Issue 36, item 6: delivered code found the scripted model on 127.0.0.1 and posted to
    other cells' paths, guessed from their cell ids (`/cell/<cell id>`): their scripts advanced
    and their records took its requests, so their arms went unproven."""
    victim, attacker = "add__baseline__haiku__0", "add__baseline__haiku__1"
    own = server.register(victim, CellScript(writes=[(str(tmp_path / "a.py"), "x = 1\n")]))
    mine = server.register(attacker, CellScript(writes=[]))
    root = f"http://127.0.0.1:{server.port}"
    guesses = [root + "/cell/" + victim, root + "/cell/" + urllib.parse.quote(victim, safe=""),
               root + "/cell/" + victim.replace("__0", "__1"),  # the attacker's own cell, by id
               mine.rsplit("/", 1)[0] + "/" + victim,  # the attacker's URL with the victim's id
               own.rsplit("/", 1)[0] + "/" + own.rsplit("/", 1)[1][:-1]]  # the token, one letter short
    for url in guesses:
        status, _, _ = _post(_messages_url(url), _body(0))
        assert status == 404, url
    assert server.requests(victim) == [] and server.calls(victim) == []
    assert server.requests(attacker) == [] and server.calls(attacker) == []
    # The victim's own CLI still gets the first turn of its script, untouched.
    message = json.loads(_post(_messages_url(own), _body(0, stream=False))[2])
    assert message["content"][0]["name"] == "Write"
    assert len(server.requests(victim)) == 1


def test_two_servers_at_once(tmp_path):
    with ScriptedModel() as one, ScriptedModel() as two:
        assert one.port != two.port and one.port > 0 and two.port > 0
        url_one = one.register("same", CellScript(writes=[(str(tmp_path / "1"), "one")]))
        url_two = two.register("same", CellScript(writes=[(str(tmp_path / "2"), "two")]))
        assert url_one.startswith(f"http://127.0.0.1:{one.port}/cell/") and url_one != url_two
        for url, content in ((url_one, "one"), (url_two, "two")):
            message = json.loads(_post(_messages_url(url), _body(0, stream=False))[2])
            assert message["content"][0]["input"]["content"] == content
        assert len(one.requests("same")) == 1 and len(two.requests("same")) == 1
        only_on_two = two.register("other", CellScript(writes=[]))
        wrong = only_on_two.replace(f":{two.port}/", f":{one.port}/")
        _assert_api_error(*_post(_messages_url(wrong), _body(0))[::2], 404)


def test_lifecycle_keys_and_forget():
    model = ScriptedModel()
    with pytest.raises(RuntimeError):
        model.port
    model.start()
    port = model.port
    assert model.start() is model and model.port == port  # starting twice is harmless
    url = model.register("task a/arm b__haiku__0", CellScript(writes=[]))
    assert url.startswith(f"http://127.0.0.1:{port}/cell/") and "arm" not in url
    assert _post(_messages_url(url), _body(0))[0] == 200
    assert len(model.requests("task a/arm b__haiku__0")) == 1
    # Re-register (a retried attempt): a clean slate and a new URL; the old one reaches nothing.
    again = model.register("task a/arm b__haiku__0", CellScript(writes=[]))
    assert model.requests("task a/arm b__haiku__0") == []
    assert _post(_messages_url(url), _body(0))[0] == 404
    assert model.requests("task a/arm b__haiku__0") == []
    url = again
    assert _post(_messages_url(url), _body(0))[0] == 200
    model.forget("task a/arm b__haiku__0")
    model.forget("never registered")
    assert model.requests("task a/arm b__haiku__0") == []
    assert _post(_messages_url(url), _body(0))[0] == 404
    with pytest.raises(ValueError):
        model.register("", CellScript(writes=[]))
    model.stop()
    model.stop()  # idempotent
    with pytest.raises(urllib.error.URLError):
        urllib.request.urlopen(_messages_url(url), data=b"{}", timeout=2)


def test_recording_is_thread_safe(server):
    keys = [f"cell{i}" for i in range(4)]
    urls = {k: _messages_url(server.register(k, CellScript(writes=[]))) for k in keys}

    def hit(i: int) -> int:
        key = keys[i % len(keys)]
        body = _body(0, stream=False)
        body["messages"][0]["content"] = f"{key} #{i}"
        return _post(urls[key], body)[0]

    with ThreadPoolExecutor(max_workers=16) as pool:
        statuses = list(pool.map(hit, range(80)))
    assert statuses == [200] * 80
    for key in keys:
        seen = [r["messages"][0]["content"] for r in server.requests(key)]
        assert len(seen) == 20 and all(s.startswith(f"{key} #") for s in seen)


# prove_arm on synthetic bodies ----------------------------------------------------------

def _cli_like(append: str | None = None, reminders=(), turns: int = 0, tools=TOOLS) -> dict:
    system = [{"type": "text", "text": "x-anthropic-billing-header: cc"},
              {"type": "text", "text": "You are Claude Code."},
              {"type": "text", "text": "Long prompt." + (f"\n\n{append}" if append else "")}]
    first = [{"type": "text", "text": f"<system-reminder>\n{r}\n</system-reminder>"}
             for r in reminders] + [{"type": "text", "text": "write the code"}]
    body = _body(turns, tools=tools)
    body["system"] = system
    body["messages"][0]["content"] = first
    return body


def test_prove_arm_appended():
    ok, why = prove_arm([_cli_like(MARKER), _cli_like(MARKER, turns=1)], MARKER, [], [])
    assert ok and why.startswith("arm proven:") and "2 main-loop" in why
    ok, why = prove_arm([_cli_like(MARKER), _cli_like("other", turns=1)], MARKER, [], [])
    assert not ok and "main-loop request 2 of 2" in why and "not at the end" in why
    moved = _cli_like(MARKER)
    moved["system"][-1]["text"] += "\n\nmore text after it"
    ok, why = prove_arm([moved], MARKER, [], [])
    assert not ok and "elsewhere in" in why
    ok, why = prove_arm([_cli_like(None)], None, [], [])  # no appended prompt: nothing to check
    assert ok
    string_system = _cli_like()
    string_system["system"] = f"plain string system\n{MARKER}\n"
    assert prove_arm([string_system], MARKER, [], [])[0]


def test_prove_arm_ignores_side_requests_but_needs_a_main_loop():
    side = _cli_like(None, tools=None)
    assert prove_arm([side, _cli_like(MARKER)], MARKER, [], [])[0]
    ok, why = prove_arm([side], MARKER, [], [])
    assert not ok and "No main-loop request" in why
    ok, why = prove_arm([], None, [], [])
    assert not ok and "No main-loop request" in why


def test_prove_arm_context():
    ctx = f"SessionStart hook additional context: {CTX_MARKER} here"
    bodies = [_cli_like(reminders=[ctx]), _cli_like(reminders=[ctx], turns=1)]
    ok, why = prove_arm(bodies, None, [CTX_MARKER], [])
    assert ok and "1 context string" in why
    ok, why = prove_arm(bodies + [_cli_like(turns=2)], None, [CTX_MARKER], [])
    assert not ok and CTX_MARKER in why and "missing from the messages" in why
    assert "request 3 of 3" in why
    in_system_only = _cli_like(append=CTX_MARKER)
    assert not prove_arm([in_system_only], None, [CTX_MARKER], [])[0]  # messages, not system


def test_prove_arm_foreign():
    body = _cli_like(MARKER, reminders=["skill other-arm:helper: OTHER-ARM-SKILL"])
    ok, why = prove_arm([body], MARKER, [], ["OTHER-ARM-SKILL"])
    assert not ok and "Foreign text" in why and "messages" in why
    ok, why = prove_arm([body], MARKER, [], [MARKER])
    assert not ok and "system" in why
    side = _cli_like(tools=None, reminders=["OTHER-ARM-CTX"])
    ok, why = prove_arm([body, side], MARKER, [], ["OTHER-ARM-CTX"])
    assert not ok and "request 2 of 2" in why  # side requests are searched too
    leaky_tools = _cli_like(MARKER)
    leaky_tools["tools"] = [{"name": "Skill", "description": "skills: OTHER-ARM-SKILL"}]
    ok, why = prove_arm([leaky_tools], MARKER, [], ["OTHER-ARM-SKILL"])
    assert not ok and "tool descriptions" in why
    assert prove_arm([body], MARKER, [], ["NOT-THERE", "", "  "])[0]  # blanks are ignored


# the real CLI ---------------------------------------------------------------------------

def _cli_env(base_url: str, home: Path) -> dict:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("ANTHROPIC_", "CLAUDE")) and not k.lower().endswith("_proxy")}
    env.update(ANTHROPIC_BASE_URL=base_url, ANTHROPIC_API_KEY="dummy", IS_SANDBOX="1",
               CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC="1", DISABLE_TELEMETRY="1",
               HOME=str(home))
    return env


def _run_claude(claude_bin: str, base_url: str, root: Path, *extra: str,
                workspace_exists: bool = False) -> dict:
    """One headless session in root/ws; returns its stream-json lines, init, result, wall."""
    ws, home = root / "ws", root / "home"
    ws.mkdir(parents=True, exist_ok=workspace_exists)
    home.mkdir()
    argv = [claude_bin, "-p", "Write the files you are asked for.", "--model", MODEL,
            "--permission-mode", "bypassPermissions", "--setting-sources", "project,local",
            "--strict-mcp-config", "--disallowedTools", "Bash",
            "--append-system-prompt", MARKER, "--output-format", "stream-json", "--verbose",
            "--no-session-persistence", *extra]
    out_path, err_path = root / "stdout.jsonl", root / "stderr.txt"
    started = time.monotonic()
    with open(out_path, "wb") as out, open(err_path, "wb") as err:
        proc = subprocess.Popen(argv, cwd=ws, env=_cli_env(base_url, home), stdout=out,
                                stderr=err, stdin=subprocess.DEVNULL, start_new_session=True)
        try:
            code = proc.wait(timeout=90)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            pytest.fail(f"claude did not finish in 90 s; stderr: {err_path.read_text()[-2000:]}")
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
    wall = time.monotonic() - started
    text = out_path.read_text()
    assert code == 0, f"claude exited {code}: {err_path.read_text()[-2000:]}\n{text[-2000:]}"
    lines = [json.loads(line) for line in text.splitlines() if line.strip()]
    inits = [line for line in lines if line.get("type") == "system" and line.get("subtype") == "init"]
    assert len(inits) == 1, text[:2000]
    return {"lines": lines, "init": inits[0], "result": lines[-1], "wall": wall, "ws": ws}


@pytest.fixture(scope="module")
def module_server():
    with ScriptedModel() as model:
        yield model


@pytest.fixture(scope="module")
def plain_session(claude_bin, module_server, tmp_path_factory):
    root = tmp_path_factory.mktemp("plain")
    ws = root / "ws"
    script = CellScript(
        writes=[(str(ws / "pkg" / "calc.py"), "def add(a, b):\n    return a + b\n"),
                (str(ws / "README.md"), "# calc\n")],
        answer="Both files are written.", input_tokens=1000, output_tokens=77,
        cache_read_input_tokens=300, cache_creation_input_tokens=50)
    url = module_server.register("plain", script)
    run = _run_claude(claude_bin, url, root)
    return dict(run, script=script, requests=module_server.requests("plain"),
                calls=module_server.calls("plain"), path=urllib.parse.urlsplit(url).path)


def test_real_cli_writes_the_scripted_files(plain_session):
    for path, content in plain_session["script"].writes:
        assert Path(path).read_text() == content


def test_real_cli_result_reports_the_scripted_usage(plain_session):
    script, result = plain_session["script"], plain_session["result"]
    turns = len(script.writes) + 1
    assert result["type"] == "result" and result["subtype"] == "success"
    assert result["is_error"] is False and result["result"] == "Both files are written."
    assert result["num_turns"] == turns
    usage = result["usage"]  # the CLI adds up every turn's usage
    assert usage["input_tokens"] == turns * script.input_tokens
    assert usage["output_tokens"] == turns * script.output_tokens
    assert usage["cache_read_input_tokens"] == turns * script.cache_read_input_tokens
    assert usage["cache_creation_input_tokens"] == turns * script.cache_creation_input_tokens
    assert result["total_cost_usd"] > 0
    assert list(result["modelUsage"]) == [MODEL]


def test_real_cli_init_and_traffic(plain_session):
    init = plain_session["init"]
    assert init["claude_code_version"] == "2.1.328"
    assert init["model"] == MODEL and init["permissionMode"] == "bypassPermissions"
    assert "Write" in init["tools"] and "Bash" not in init["tools"]
    requests, calls = plain_session["requests"], plain_session["calls"]
    assert len(requests) == plain_session["result"]["num_turns"]
    assert all(r.get("tools") and r.get("stream") is True and r["model"] == MODEL
               for r in requests)
    assert all(t["name"] != "Bash" for r in requests for t in r["tools"])
    assert {(c["method"], c["path"], c["status"]) for c in calls} == {
        ("POST", plain_session["path"] + "/v1/messages?beta=true", 200)}
    headers = calls[0]["headers"]
    assert headers["x-api-key"] == "dummy" and headers["anthropic-version"] == "2023-06-01"


def test_real_cli_proves_the_appended_arm(plain_session):
    requests = plain_session["requests"]
    ok, why = prove_arm(requests, MARKER, [], ["PONYBENCH APPENDED MARKER of another arm"])
    assert ok, why
    ok, why = prove_arm(requests, "PONYBENCH a different arm's marker", [], [])
    assert not ok and "not at the end" in why
    ok, why = prove_arm(requests, None, [], [MARKER])
    assert not ok and "Foreign text" in why and "system" in why


def test_real_cli_overwrites_a_seeded_file(claude_bin, module_server, tmp_path):
    seeded = tmp_path / "ws" / "seeded.py"
    script = CellScript(writes=[(str(seeded), "NEW = 2\n"), (str(tmp_path / "ws" / "n.py"), "N\n")])
    url = module_server.register("seeded", script)
    seeded.parent.mkdir()
    seeded.write_text("OLD = 1\n")
    run = _run_claude(claude_bin, url, tmp_path, workspace_exists=True)
    assert seeded.read_text() == "NEW = 2\n" and (tmp_path / "ws" / "n.py").read_text() == "N\n"
    requests = module_server.requests("seeded")
    assert len(requests) == 3  # two Write turns and the answer: the Read shares the first turn
    assert run["result"]["usage"]["input_tokens"] == 3 * script.input_tokens
    assert run["result"]["num_turns"] == 4  # the CLI counts the Read as a turn of its own
    results = [b for b in requests[1]["messages"][-1]["content"] if b["type"] == "tool_result"]
    assert len(results) == 2 and not any(b.get("is_error") for b in results)


@pytest.fixture(scope="module")
def ctx_session(claude_bin, module_server, tmp_path_factory):
    root = tmp_path_factory.mktemp("ctx")
    url = module_server.register("ctx", CellScript(writes=[(str(root / "ws" / "a.txt"), "a")]))
    run = _run_claude(claude_bin, url, root, "--plugin-dir", str(PLUGINS / "ctx-plugin"))
    return dict(run, requests=module_server.requests("ctx"))


def test_real_cli_plugin_is_loaded(ctx_session):
    plugins = {p["name"]: p for p in ctx_session["init"]["plugins"]}
    assert plugins["ctx-plugin"]["path"] == str(PLUGINS / "ctx-plugin")
    assert "ctx-plugin:pony-probe" in ctx_session["init"]["skills"]
    assert (ctx_session["ws"] / "a.txt").read_text() == "a"


def test_real_cli_plugin_context_is_proven(ctx_session):
    requests = ctx_session["requests"]
    ok, why = prove_arm(requests, MARKER, [CTX_MARKER, SKILL_MARKER, "ctx-plugin:pony-probe"],
                        [SILENT_MARKER])
    assert ok, why
    first_user = requests[0]["messages"][0]["content"]
    hook_blocks = [b["text"] for b in first_user if CTX_MARKER in b.get("text", "")]
    assert hook_blocks and hook_blocks[0].startswith("<system-reminder>")
    ok, why = prove_arm(requests, MARKER, [], [CTX_MARKER])  # another arm must not see it
    assert not ok and "messages" in why


def test_real_cli_silent_plugin_is_not_proven(claude_bin, module_server, tmp_path):
    url = module_server.register("silent", CellScript(writes=[(str(tmp_path / "ws" / "s"), "s")]))
    run = _run_claude(claude_bin, url, tmp_path, "--plugin-dir", str(PLUGINS / "silent-plugin"))
    assert "silent-plugin" in {p["name"] for p in run["init"]["plugins"]}
    requests = module_server.requests("silent")
    ok, why = prove_arm(requests, MARKER, [SILENT_MARKER], [CTX_MARKER, SKILL_MARKER])
    assert not ok
    assert why == (f"The context {SILENT_MARKER!r} is missing from the messages of main-loop "
                   f"request 1 of {len(requests)}.")
    assert prove_arm(requests, MARKER, [], [CTX_MARKER, SKILL_MARKER])[0]  # nothing leaked


def test_the_listen_backlog_takes_a_burst_of_parallel_cells(server):
    # Python's default backlog of 5 drops a burst of connects; a dropped SYN is retried only
    # after a second, which is how parallel cells would stall. (Timings live in bench/.)
    assert type(server._server).request_queue_size >= 128


# faults ---------------------------------------------------------------------------------------

def _tool_body():
    return {"model": MODEL, "stream": True, "tools": TOOLS, "system": "s",
            "messages": [{"role": "user", "content": "go"}]}


def test_a_fault_for_the_first_requests_then_answers(server, tmp_path):
    from pytest_ponybench.specs.faults import parse_fault

    url = _messages_url(server.register("f529", CellScript(writes=[(str(tmp_path / "a"), "a")],
                                                           fault=parse_fault("529:2"))))
    for _ in range(2):
        status, headers, payload = _post(url, _tool_body())
        error = json.loads(payload)["error"]
        assert (status, error["type"]) == (529, "overloaded_error")
        assert headers.get("x-should-retry") is None  # the CLI retries it, as it would the real API's
    status, _, payload = _post(url, _tool_body())
    assert status == 200 and _parse_sse(payload)[-1][0] == "message_stop"


def test_a_429_asks_for_a_short_wait_and_a_401_is_final(server):
    from pytest_ponybench.specs.faults import parse_fault

    status, headers, payload = _post(_messages_url(server.register("f429", CellScript(fault=parse_fault("429")))),
                                     _tool_body())
    assert (status, headers.get("retry-after")) == (429, "1")
    assert json.loads(payload)["error"]["type"] == "rate_limit_error"
    status, headers, payload = _post(_messages_url(server.register("f401", CellScript(fault=parse_fault("401")))),
                                     _tool_body())
    assert (status, headers.get("x-should-retry")) == (401, "false")
    assert json.loads(payload)["error"]["type"] == "authentication_error"


def test_a_cut_stream_ends_mid_message(server):
    from pytest_ponybench.specs.faults import parse_fault

    url = _messages_url(server.register("fcut", CellScript(answer="never whole", fault=parse_fault("cut"))))
    status, _, payload = _post(url, _tool_body())
    names = [name for name, _ in _parse_sse(payload)]
    assert status == 200 and names == ["message_start", "content_block_start"]
    assert b"never whole" not in payload
