"""Rehearsal mode: a scripted stand-in for the Anthropic Messages API on 127.0.0.1.

The real ``claude`` CLI runs every cell as usual, but ``ANTHROPIC_BASE_URL`` points at a
:class:`ScriptedModel`, which answers the main loop from a :class:`CellScript`: one ``Write``
tool call per turn, then a final text answer. The CLI really writes the files, so the whole
pipeline (seeding, agent, checks, metrics, reports) runs end to end without any model.

Each cell gets its own URL, ``http://127.0.0.1:PORT/cell/<token>``, where the token is a
random secret made when the cell registers and handed only to that cell's CLI (through its
``ANTHROPIC_BASE_URL``): code a cell delivered can find the server on loopback, but not
another cell's path, so it cannot play or spoil another cell's script. A path holding no
registered token is answered 404 and changes nothing. The CLI appends
``/v1/messages?beta=true``. Every request body is recorded per cell, and :func:`prove_arm`
reads those bodies to prove that the arm's text (``--append-system-prompt``, a plugin's
SessionStart context and skills) reached the model and no other arm's text did.

Side requests (no ``tools`` in the body, e.g. a title or a quick classification) get a
short ``end_turn`` text with zero usage and do not advance the script; ``count_tokens`` is
answered too. Measured with CLI 2.1.328 in ``-p`` mode with
``CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1``, the CLI makes neither: only one
``POST /v1/messages?beta=true`` (streamed, with tools) per turn. Everything the server does
not know gets a 4xx JSON error at once (with ``x-should-retry: false``): never a 5xx, which
the CLI retries with backoff.

Stdlib only.

One module on purpose (about 540 lines): one HTTP server. The script a cell plays, the handler
that answers the Messages API (streamed events, faults) and the records `prove_arm` reads
describe the same requests; stdlib only, so the stand-in reads without the plugin.
"""
from __future__ import annotations

import itertools
import json
import os
import secrets
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import urlsplit

from pytest_ponybench.specs.faults import FAULT_STATUSES, Fault

__all__ = ["CellScript", "JudgeScript", "ScriptedModel", "prove_arm"]

MESSAGES_PATH = "/v1/messages"
COUNT_TOKENS_PATH = "/v1/messages/count_tokens"
SIDE_ANSWER = "OK"
MAX_BODY = 64 * 1024 * 1024


@dataclass
class CellScript:
    """What the stand-in model does in one cell.

    ``writes``: ``(absolute file path, content)`` pairs, one ``Write`` tool call per turn in
    order; then ``answer`` ends the session with ``stop_reason`` ``end_turn``. When the path
    already exists as the turn is answered (a seeded file), that turn holds a ``Read`` of it
    before the ``Write``, since the CLI refuses to overwrite a file the session has not read;
    the CLI's ``num_turns`` then counts one more, the API turns and usage stay the same.
    The usage numbers are reported on every scripted turn (the CLI adds them up).
    ``stall_seconds``: hold every main-loop answer that long first (or until the server
    stops): a model that stops answering, to exercise the cell timeout.
    ``tool_calls``: ``(tool name, input)`` pairs played one per turn before the writes (a ``Skill``,
    a ``Glob``, a ``Read``), so a session's tool counts are known exactly.
    ``fault``: a :class:`Fault` the stand-in plays instead of answering (an API error, a
    stall, a stream cut mid-message), to exercise the harness's infra-error paths.
    """

    writes: list[tuple[str, str]] = field(default_factory=list)
    answer: str = "Done."
    stall_seconds: float = 0.0
    tool_calls: list[tuple[str, dict]] = field(default_factory=list)
    fault: "Fault | None" = None
    input_tokens: int = 1200
    output_tokens: int = 150
    cache_read_input_tokens: int = 0
    cache_creation_input_tokens: int = 0

    def usage(self) -> dict:
        return {
            "input_tokens": self.input_tokens,
            "output_tokens": self.output_tokens,
            "cache_read_input_tokens": self.cache_read_input_tokens,
            "cache_creation_input_tokens": self.cache_creation_input_tokens,
        }


@dataclass
class JudgeScript(CellScript):
    """The scripted judge (judge.py): every /v1/messages request under its key is answered
    with ``scripted_judge.scripted_answer`` of the request's text, whatever its tools. ``script`` is
    "agree", "disagree" or "malformed"; ``malformed_first`` answers the first N requests
    with prose before following ``script`` (a malformed answer the judge asks again);
    ``fault`` plays an API fault as for a cell."""

    script: str = "agree"
    malformed_first: int = 0

    def reply(self, body: dict, number: int) -> str:
        from pytest_ponybench.rehearsal.scripted_judge import scripted_answer  # only a judge script needs it: the server stays stdlib only

        if number <= self.malformed_first:
            return scripted_answer("", "malformed")
        return scripted_answer("\n".join(_message_texts(body)), self.script)


FAULT_STALL_SECONDS = 3600.0  # "stall": longer than any cell timeout; the server's stop wakes it


@dataclass
class _Cell:
    script: CellScript
    token: str  # the secret in this cell's URL path
    messages: int = 0  # /v1/messages requests seen, the count a fault's `first` limits
    bodies: list[dict] = field(default_factory=list)  # every /v1/messages body, in order
    calls: list[dict] = field(default_factory=list)  # every HTTP call: method, path, headers, status


class _ApiError(Exception):
    """An error answer. The stand-in's own errors say "do not retry"; a played fault does not,
    so the CLI retries it as it would the real API's (a 429 asks for a short wait)."""

    def __init__(self, status: int, message: str, error_type: str = "invalid_request_error",
                 retryable: bool = False):
        super().__init__(message)
        self.status = status
        self.message = message
        self.error_type = error_type
        self.retryable = retryable


class _CutStream(Exception):
    """A played fault: the answer's stream ends in the middle of the message."""

    def __init__(self, message: dict):
        super().__init__("stream cut")
        self.message = message


def _error_body(message: str, error_type: str = "invalid_request_error") -> bytes:
    return json.dumps({"type": "error", "error": {"type": error_type, "message": message}}).encode()


def _sse(events: list[tuple[str, dict]]) -> bytes:
    return "".join(
        f"event: {name}\ndata: {json.dumps(data, separators=(',', ':'))}\n\n"
        for name, data in events
    ).encode()


def _message_events(message: dict) -> list[tuple[str, dict]]:
    """A complete Message as the stream of events the Messages API sends for it."""
    usage = message["usage"]
    start = dict(message, content=[], stop_reason=None, stop_sequence=None)
    events: list[tuple[str, dict]] = [("message_start", {"type": "message_start", "message": start})]
    for index, block in enumerate(message["content"]):
        if block["type"] == "text":
            opened = {"type": "text", "text": ""}
            delta = {"type": "text_delta", "text": block["text"]}
        else:  # tool_use
            opened = {"type": "tool_use", "id": block["id"], "name": block["name"], "input": {}}
            delta = {"type": "input_json_delta", "partial_json": json.dumps(block["input"])}
        events.append(("content_block_start",
                       {"type": "content_block_start", "index": index, "content_block": opened}))
        events.append(("content_block_delta",
                       {"type": "content_block_delta", "index": index, "delta": delta}))
        events.append(("content_block_stop", {"type": "content_block_stop", "index": index}))
    events.append(("message_delta", {
        "type": "message_delta",
        "delta": {"stop_reason": message["stop_reason"], "stop_sequence": None},
        "usage": {"output_tokens": usage["output_tokens"]},
    }))
    events.append(("message_stop", {"type": "message_stop"}))
    return events


def _count_assistant_turns(body: dict) -> int:
    messages = body.get("messages")
    if not isinstance(messages, list):
        return 0
    return sum(1 for m in messages if isinstance(m, dict) and m.get("role") == "assistant")


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 128  # the default 5 drops bursts of connects into a 1 s SYN retry


class ScriptedModel:
    """A scripted Messages API on ``host`` (loopback), serving any number of cells at once."""

    def __init__(self, host: str = "127.0.0.1", port: int = 0):
        self._host = host
        self._requested_port = port
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        self._cells: dict[str, _Cell] = {}  # by cell key
        self._keys: dict[str, str] = {}  # the token of each registered cell's URL -> its key
        self._ids = itertools.count(1)
        self._stopping = threading.Event()  # wakes stalled answers when the server stops

    # lifecycle --------------------------------------------------------------------------

    def start(self) -> "ScriptedModel":
        if self._server is not None:
            return self
        self._stopping.clear()
        handler = type("_BoundHandler", (_Handler,), {"model": self})
        server = _Server((self._host, self._requested_port), handler)
        thread = threading.Thread(
            target=server.serve_forever, kwargs={"poll_interval": 0.05},
            name=f"ponybench-rehearsal-{server.server_address[1]}", daemon=True,
        )
        thread.start()
        self._server, self._thread = server, thread
        return self

    def stop(self) -> None:
        server, thread = self._server, self._thread
        self._server = self._thread = None
        if server is None:
            return
        self._stopping.set()
        server.shutdown()
        server.server_close()
        if thread is not None:
            thread.join(timeout=5)

    def __enter__(self) -> "ScriptedModel":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    @property
    def port(self) -> int:
        if self._server is None:
            raise RuntimeError("ScriptedModel is not started")
        return self._server.server_address[1]

    # cells ------------------------------------------------------------------------------

    def register(self, key: str, script: CellScript) -> str:
        """Serve ``script`` to the cell ``key``; returns its ``ANTHROPIC_BASE_URL``.

        The URL's path holds a random token, not the key: a cell key is guessable from the
        run (task, arm, model, run number); the token is known only to whoever gets this URL.
        Registering a key again replaces its script, clears what it recorded and gives it a
        new token (an earlier attempt's URL then answers 404).
        """
        if not key:
            raise ValueError("a cell key must not be empty")
        token = secrets.token_urlsafe(24)
        with self._lock:
            self._drop(key)
            self._cells[key] = _Cell(script, token)
            self._keys[token] = key
        return f"http://{self._host}:{self.port}/cell/{token}"

    def _drop(self, key: str) -> None:
        old = self._cells.pop(key, None)
        if old is not None:
            self._keys.pop(old.token, None)

    def _known(self, token: str | None) -> bool:
        """Whether `token` is in a registered cell's URL."""
        with self._lock:
            return token in self._keys

    def requests(self, key: str) -> list[dict]:
        """The JSON bodies of every ``/v1/messages`` request cell ``key`` made, in order."""
        with self._lock:
            cell = self._cells.get(key)
            return list(cell.bodies) if cell else []

    def calls(self, key: str) -> list[dict]:
        """Every HTTP call cell ``key`` made: ``method``, ``path``, ``headers``, ``status``."""
        with self._lock:
            cell = self._cells.get(key)
            return [dict(c) for c in cell.calls] if cell else []

    def forget(self, key: str) -> None:
        with self._lock:
            self._drop(key)

    # answering --------------------------------------------------------------------------

    def _next_id(self, prefix: str) -> str:
        return f"{prefix}_ponybench{next(self._ids):08d}"

    def _answer(self, token: str, endpoint: str, body: dict) -> dict:
        """The response object for one parsed request body (a Message or a token count), to
        the cell whose URL holds `token` (resolved under the lock: a cell registered again
        meanwhile has a new token, and this one reaches nothing)."""
        with self._lock:
            cell = self._cells.get(self._keys.get(token, ""))
            if cell is None:
                raise _ApiError(404, "no cell is registered under this path")
            if endpoint == COUNT_TOKENS_PATH:
                return {"input_tokens": cell.script.input_tokens}
            cell.bodies.append(body)
            cell.messages += 1
            number = cell.messages
            script = cell.script
            fault = script.fault if script.fault is not None and script.fault.applies(cell.messages) else None
        model = body.get("model") if isinstance(body.get("model"), str) else "unknown"
        if fault is not None and fault.status is not None:
            # Authentication and permission errors are final, as the real API says of them.
            raise _ApiError(fault.status, f"rehearsal fault {fault}: scripted {FAULT_STATUSES[fault.status]}",
                            FAULT_STATUSES[fault.status], retryable=fault.status not in (401, 403))
        stall = FAULT_STALL_SECONDS if fault is not None and fault.kind == "stall" else script.stall_seconds
        if body.get("tools") and stall > 0:
            self._stopping.wait(stall)
        if isinstance(script, JudgeScript):  # a judge request: no tools, one answer
            blocks = [{"type": "text", "text": script.reply(body, number)}]
            stop = "end_turn"
            usage = script.usage()
        elif body.get("tools"):
            turn = _count_assistant_turns(body)
            if turn < len(script.tool_calls):
                name, tool_input = script.tool_calls[turn]
                blocks = [{"type": "tool_use", "id": self._next_id("toolu"), "name": name,
                           "input": dict(tool_input)}]
                stop = "tool_use"
            elif turn - len(script.tool_calls) < len(script.writes):
                path, content = script.writes[turn - len(script.tool_calls)]
                blocks = []
                if os.path.isfile(path):
                    # The CLI refuses to Write over a file the session has not Read ("File has
                    # not been read yet"), so a seeded file is Read first, in the same turn.
                    blocks.append({"type": "tool_use", "id": self._next_id("toolu"),
                                   "name": "Read", "input": {"file_path": path}})
                blocks.append({"type": "tool_use", "id": self._next_id("toolu"), "name": "Write",
                               "input": {"file_path": path, "content": content}})
                stop = "tool_use"
            else:
                blocks = [{"type": "text", "text": script.answer}]
                stop = "end_turn"
            usage = script.usage()
        else:  # a side request: answer briefly, report nothing spent
            blocks = [{"type": "text", "text": SIDE_ANSWER}]
            stop = "end_turn"
            usage = {"input_tokens": 0, "output_tokens": 0,
                     "cache_read_input_tokens": 0, "cache_creation_input_tokens": 0}
        message = {"id": self._next_id("msg"), "type": "message", "role": "assistant",
                   "model": model, "content": blocks, "stop_reason": stop,
                   "stop_sequence": None, "usage": usage}
        if fault is not None and fault.kind == "cut":
            raise _CutStream(message)
        return message

    def _record_call(self, token: str | None, call: dict) -> None:
        if token is None:
            return
        with self._lock:
            cell = self._cells.get(self._keys.get(token, ""))
            if cell is not None:
                cell.calls.append(call)


class _Handler(BaseHTTPRequestHandler):
    model: ScriptedModel  # bound per server by ScriptedModel.start
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True  # headers and body go out as separate writes
    timeout = 30  # an idle keep-alive connection frees its thread after this

    def log_message(self, format, *args):  # noqa: A002 - the base class's name
        pass

    def _route(self) -> tuple[str | None, str | None]:
        """(token, endpoint) from ``/cell/<token><endpoint>``; (None, None) if not a cell path."""
        path = urlsplit(self.path).path
        parts = path.split("/", 3)  # "", "cell", key, rest
        if len(parts) < 3 or parts[0] != "" or parts[1] != "cell" or not parts[2]:
            return None, None
        rest = "/" + parts[3] if len(parts) == 4 else ""
        return parts[2], rest.rstrip("/") or "/"

    def _read_body(self) -> bytes:
        if "chunked" in self.headers.get("Transfer-Encoding", "").lower():
            chunks, total = [], 0
            while True:
                size = int(self.rfile.readline().split(b";")[0].strip() or b"0", 16)
                if size == 0:
                    while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                        pass
                    return b"".join(chunks)
                total += size
                if total > MAX_BODY:
                    raise _ApiError(413, "the request body is too large")
                chunks.append(self.rfile.read(size))
                self.rfile.readline()
        length = int(self.headers.get("Content-Length") or 0)
        if length > MAX_BODY:
            raise _ApiError(413, "the request body is too large")
        return self.rfile.read(length) if length > 0 else b""

    def _send(self, status: int, content_type: str, payload: bytes, retryable: bool = False,
              cut: bool = False) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        if cut:  # no length: the connection's close is the end, half way through the message
            self.send_header("Connection", "close")
            self.close_connection = True
        else:
            self.send_header("Content-Length", str(len(payload)))
        self.send_header("request-id", self.model._next_id("req"))
        if status >= 400 and not retryable:
            self.send_header("x-should-retry", "false")  # the SDK's own "do not retry" signal
        if status == 429:
            self.send_header("retry-after", "1")  # the shortest wait the header can ask for
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(payload)

    def _respond(self, token: str | None, endpoint: str | None) -> tuple[int, str, bytes]:
        """(status, content type, payload) for this request; never raises, never a 5xx
        unless a fault of the cell's script asks for one. Sets ``self._retryable`` (a played
        error the CLI may retry) and ``self._cut`` (a stream to end mid-message)."""
        self._retryable = self._cut = False
        try:
            try:
                raw = self._read_body()
            except ValueError:
                self.close_connection = True
                raise _ApiError(400, "the request body could not be read")
            if not self.model._known(token):  # the path's own text is not echoed: it may be another cell's guess
                raise _ApiError(404, "unknown path: use the ANTHROPIC_BASE_URL given to the cell, "
                                     "then /v1/messages")
            if endpoint not in (MESSAGES_PATH, COUNT_TOKENS_PATH):
                raise _ApiError(404, f"unknown endpoint {endpoint!r}")
            if self.command != "POST":
                raise _ApiError(405, f"{self.command} is not supported on {endpoint}: use POST")
            try:
                body = json.loads(raw)
            except (UnicodeDecodeError, json.JSONDecodeError) as exc:
                raise _ApiError(400, f"the request body is not valid JSON: {exc}")
            if not isinstance(body, dict):
                raise _ApiError(400, "the request body must be a JSON object")
            answer = self.model._answer(token, endpoint, body)
            if endpoint == MESSAGES_PATH and body.get("stream") is True:
                return 200, "text/event-stream", _sse(_message_events(answer))
            return 200, "application/json", json.dumps(answer).encode()
        except _CutStream as cut:
            self._cut = True
            if body.get("stream") is True:  # message_start, the first block's start: then nothing
                return 200, "text/event-stream", _sse(_message_events(cut.message)[:2])
            whole = json.dumps(cut.message).encode()
            return 200, "application/json", whole[: len(whole) // 2]
        except _ApiError as exc:
            self._retryable = exc.retryable
            return exc.status, "application/json", _error_body(exc.message, exc.error_type)
        except Exception as exc:  # never a 5xx: the CLI would retry it with backoff
            self.close_connection = True
            return 400, "application/json", _error_body(f"the stand-in failed: {exc!r}")

    def _handle(self) -> None:
        token, endpoint = self._route()
        status, content_type, payload = self._respond(token, endpoint)
        # recorded before the answer leaves, so a client that has its answer sees the record
        self.model._record_call(token, {
            "method": self.command, "path": self.path, "status": status,
            "headers": {k.lower(): v for k, v in self.headers.items()},
        })
        self._send(status, content_type, payload, self._retryable, self._cut)

    do_POST = do_GET = do_HEAD = do_PUT = do_DELETE = do_PATCH = do_OPTIONS = _handle
    do_CONNECT = do_TRACE = _handle  # e.g. a proxy pointed here by mistake: 404, not 501


# the arm proof ----------------------------------------------------------------------------

def _texts(content) -> list[str]:
    """The text of a ``system`` value or a message's ``content`` (str or list of blocks)."""
    if isinstance(content, str):
        return [content]
    out: list[str] = []
    if isinstance(content, list):
        for block in content:
            if isinstance(block, str):
                out.append(block)
            elif isinstance(block, dict):
                if isinstance(block.get("text"), str):
                    out.append(block["text"])
                if block.get("type") == "tool_result":
                    out.extend(_texts(block.get("content")))
    return out


def _message_texts(body: dict) -> list[str]:
    out: list[str] = []
    for message in body.get("messages") or []:
        if isinstance(message, dict):
            out.extend(_texts(message.get("content")))
    return out


def _tool_texts(body: dict) -> list[str]:
    out: list[str] = []
    for tool in body.get("tools") or []:
        if isinstance(tool, dict):
            out.extend(v for k in ("name", "description") if isinstance(v := tool.get(k), str))
    return out


def _last_system_text(body: dict) -> str | None:
    system = body.get("system")
    if isinstance(system, str):
        return system
    texts = [b["text"] for b in system or [] if isinstance(b, dict) and isinstance(b.get("text"), str)]
    return texts[-1] if texts else None


def _short(text: str, limit: int = 60) -> str:
    text = " ".join(text.split())
    return repr(text if len(text) <= limit else text[: limit - 3] + "...")


def prove_arm(requests: list[dict], appended: str | None, context: list[str],
              foreign: list[str]) -> tuple[bool, str]:
    """Did this arm reach the model, and nothing of another arm?

    ``requests`` are the recorded bodies of one session; main-loop requests are those that
    carry ``tools``. ``appended`` (the ``--append-system-prompt`` text, or None) must end the
    last text block of ``system`` in every main-loop request; each ``context`` string must be
    in the messages of every main-loop request; no ``foreign`` string may be anywhere (system,
    messages or tool descriptions) of any request. Blank strings are ignored.
    Returns ``(True, "arm proven: ...")`` or ``(False, one sentence saying what failed)``.
    """
    context = [c for c in context if c and c.strip()]
    foreign = [f for f in foreign if f and f.strip()]
    want_appended = appended.strip() if appended and appended.strip() else None
    main = [(i, r) for i, r in enumerate(requests) if isinstance(r, dict) and r.get("tools")]
    if not main:
        return False, (f"No main-loop request (one carrying tools) reached the model "
                       f"among {len(requests)} recorded requests.")
    for n, (i, body) in enumerate(main, 1):
        if want_appended is not None:
            last = _last_system_text(body)
            if last is None:
                return False, (f"Main-loop request {n} of {len(main)} has no system text, "
                               f"so the appended prompt {_short(want_appended)} is missing.")
            if not last.rstrip().endswith(want_appended):
                where = "elsewhere in" if want_appended in last else "not at the end of"
                return False, (f"The appended prompt {_short(want_appended)} is {where} the "
                               f"system prompt of main-loop request {n} of {len(main)}.")
        if context:
            joined = "\n".join(_message_texts(body))
            for text in context:
                if text not in joined:
                    return False, (f"The context {_short(text)} is missing from the messages "
                                   f"of main-loop request {n} of {len(main)}.")
    for i, body in enumerate(requests):
        if not isinstance(body, dict):
            continue
        places = (("system", _texts(body.get("system"))), ("messages", _message_texts(body)),
                  ("tool descriptions", _tool_texts(body)))
        for where, texts in places:
            joined = "\n".join(texts)
            for text in foreign:
                if text in joined:
                    return False, (f"Foreign text {_short(text)} of another arm was found in "
                                   f"the {where} of request {i + 1} of {len(requests)}.")
    parts = [f"{len(main)} main-loop request(s) of {len(requests)}"]
    if want_appended is not None:
        parts.append("appended prompt at the end of every system prompt")
    if context:
        parts.append(f"{len(context)} context string(s) in every main-loop request")
    parts.append(f"none of {len(foreign)} foreign string(s) anywhere")
    return True, "arm proven: " + "; ".join(parts)
