"""What the `claude` CLI's output means: its stream-json transcript read into a `Transcript`,
the usage and cost in it, the arm verified by its init line, the session judged (finished,
timed out, an API failure, a CLI error), and what the agent did (tool calls, skills, files).

Every read of a transcript refuses a link (agent.open_kept) and is capped: line by line,
with a cap on each line and on the whole, so a CLI that printed hundreds of megabytes costs
bounded memory. May import `agent` (how the output was written and kept, the limits of the
agent's cgroup), `processes` and `store`; `agent` never imports this module.
"""
from __future__ import annotations

import json
import os
import stat
from dataclasses import dataclass, field
from pathlib import Path

from pytest_ponybench.cell import agent
from pytest_ponybench.processes import procs
from pytest_ponybench.specs.spec import LIST_PRICES
from pytest_ponybench.store import record as records
from pytest_ponybench.store.rundir import valid_cost

MAX_LINE = 1024 * 1024  # a transcript line longer than this is garbage, not an event
EXCERPT = 2000
ROOT_REFUSAL = "cannot be used with root/sudo"


@dataclass
class Transcript:
    init: dict | None = None
    result: dict | None = None
    last_text: str = ""
    events: int = 0
    garbage: int = 0
    first_garbage: str = ""
    usage_seen: dict = field(default_factory=dict)  # summed per assistant message, for killed cells
    written: list[str] = field(default_factory=list)  # paths the agent's write tools wrote (no error)
    hooks: list[dict] = field(default_factory=list)  # hook_response lines (--include-hook-events)
    api_retries: list[dict] = field(default_factory=list)  # api_retry lines: the CLI retrying an API error
    api_error: dict | None = None  # the last assistant line marked is_api_error_message
    answered: bool = False  # the model answered at least once (an assistant message of its own)
    tool_uses: list[tuple[str, dict]] = field(default_factory=list)  # (tool name, input), in order
    read_paths: list[str] = field(default_factory=list)  # paths the Read tool read (no error)


# The agent has no Bash: these tools are how it writes files. The path is in their input.
WRITE_TOOLS = {"Write": "file_path", "Edit": "file_path", "MultiEdit": "file_path", "NotebookEdit": "notebook_path"}


def _blocks(event: dict) -> list[dict]:
    message = event.get("message")
    content = message.get("content") if isinstance(message, dict) else None
    return [b for b in content if isinstance(b, dict)] if isinstance(content, list) else []


# Bytes of a transcript the harness reads: what `agent.bound_file` leaves and its marker line. A
# larger one (never bound: a run killed before, a file put there) is read as its head and
# its tail, as `bound_file` would have cut it.
READ_CAP = 2 * agent.KEEP_BYTES + 4096


def _lines(path: Path):
    """Yield transcript lines of at most MAX_LINE bytes; longer ones yield None (garbage).
    Nothing when the file is missing, is not a regular file, or is a link (never followed)."""
    try:
        fh = agent.open_kept(path)
    except OSError:
        return
    with fh:
        st = os.fstat(fh.fileno())
        if not stat.S_ISREG(st.st_mode):
            return
        if st.st_size <= READ_CAP:
            yield from _lines_of(fh, st.st_size)
            return
        yield from _lines_of(fh, agent.KEEP_BYTES, whole_only=True)
        fh.seek(st.st_size - agent.KEEP_BYTES - 1)
        if fh.read(1) != b"\n":
            fh.readline(agent.KEEP_BYTES)  # the tail starts at a line's start
        yield from _lines_of(fh, st.st_size - fh.tell())


def _lines_of(fh, limit: int, whole_only: bool = False):
    """The lines in the next `limit` bytes of `fh`; a last one cut there too, unless
    `whole_only` (the head of a transcript read as head and tail)."""
    while limit > 0:
        chunk = fh.readline(min(MAX_LINE, limit))
        if not chunk:
            return
        limit -= len(chunk)
        if whole_only and limit <= 0 and not chunk.endswith(b"\n"):
            return
        if chunk.endswith(b"\n") or len(chunk) < MAX_LINE:
            yield chunk
            continue
        while chunk and not chunk.endswith(b"\n") and limit > 0:  # skip the rest of an oversized line
            chunk = fh.readline(min(MAX_LINE, limit))
            limit -= len(chunk)
        yield None


def read_transcript(path: Path) -> Transcript:
    seen = Transcript()
    usage_by_message: dict[str, dict] = {}
    writes: dict[str, str] = {}  # tool_use id -> path, for the agent's write tools
    reads: dict[str, str] = {}  # tool_use id -> path, for its Read tool
    failed: set[str] = set()  # tool_use ids whose result was an error (e.g. a read-only file system)
    for raw in _lines(path):
        text = raw.decode("utf-8", "replace").strip() if raw is not None else None
        if text == "" or (text or "").startswith("[ponybench:"):  # blank, or the harness's cut marker
            continue
        try:
            event = json.loads(text) if text is not None else None
        except ValueError:
            event = None
        if not isinstance(event, dict):
            seen.garbage += 1
            if not seen.first_garbage:
                seen.first_garbage = (text or "<a line over 1 MiB>")[:200]
            continue
        seen.events += 1
        kind = event.get("type")
        if kind == "system" and event.get("subtype") == "init":
            seen.init = event
        elif kind == "system" and event.get("subtype") == "hook_response":
            seen.hooks.append(event)
        elif kind == "system" and event.get("subtype") == "api_retry":
            seen.api_retries.append(event)
        elif kind == "result":
            seen.result = event
        elif kind == "assistant" and isinstance(event.get("message"), dict) and _is_api_error(event):
            seen.api_error = event  # the CLI's own "API Error: ..." line, not a model answer
        elif kind == "assistant" and isinstance(event.get("message"), dict):
            seen.answered = True
            message = event["message"]
            if isinstance(message.get("usage"), dict):
                usage_by_message[str(message.get("id", seen.events))] = message["usage"]
            texts = [b.get("text", "") for b in _blocks(event) if b.get("type") == "text"]
            if texts:
                seen.last_text = "\n".join(texts)
            for block in _blocks(event):
                if block.get("type") != "tool_use":
                    continue
                tool_input = block.get("input") if isinstance(block.get("input"), dict) else {}
                seen.tool_uses.append((str(block.get("name") or "?"), tool_input))
                key = WRITE_TOOLS.get(block.get("name"))
                if key and isinstance(tool_input.get(key), str):
                    writes[str(block.get("id"))] = tool_input[key]
                if block.get("name") == "Read" and isinstance(tool_input.get("file_path"), str):
                    reads[str(block.get("id"))] = tool_input["file_path"]
        elif kind == "user":
            failed.update(str(b.get("tool_use_id")) for b in _blocks(event)
                          if b.get("type") == "tool_result" and b.get("is_error"))
    seen.written = [p for tool_id, p in writes.items() if tool_id not in failed]
    seen.read_paths = [p for tool_id, p in reads.items() if tool_id not in failed]
    for usage in usage_by_message.values():
        for key, value in usage.items():
            if isinstance(value, int):
                seen.usage_seen[key] = seen.usage_seen.get(key, 0) + value
    return seen


def _is_api_error(event: dict) -> bool:
    message = event.get("message") or {}
    return bool(event.get("is_api_error_message") or message.get("is_api_error_message"))


def _int(value) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def list_price(model: str) -> tuple[tuple[float, float, float, float], str]:
    """(the model's list prices per million tokens, a note): a model with no known price is
    priced as the most expensive known one, and the note says so."""
    for prefix, prices in LIST_PRICES.items():
        if model.startswith(prefix):
            return prices, f"{prefix} list price"
    dearest = max(LIST_PRICES, key=lambda prefix: LIST_PRICES[prefix][1])
    return LIST_PRICES[dearest], f"no known price for model {model or '(not named)'!r}: priced as {dearest}, the dearest known"


def estimated_cost(usage: dict, model: str) -> tuple[float | None, str]:
    """(US dollars, how they were estimated) of the tokens counted in a session that printed
    no result line (killed at its timeout, cut off): the CLI never reported their cost, and
    $0 would let stalling cells spend past the run's budget. (None, "") with no tokens."""
    counts = [_int(usage.get(key)) or 0 for key in
              ("input_tokens", "output_tokens", "cache_creation_input_tokens", "cache_read_input_tokens")]
    if not any(counts):
        return None, ""
    prices, how = list_price(model)
    cost = sum(n * price for n, price in zip(counts, prices)) / 1e6
    return round(cost, 6), f"estimated: no result line; {sum(counts)} tokens counted at the {how}"


def usage_metrics(t: Transcript) -> dict:
    """Cost, time, turns and tokens: from the result line, or the usage seen before a kill
    (its cost then estimated at list price, `cost_estimated` true and `cost_note` saying how)."""
    result = t.result or {}
    usage = result.get("usage") if isinstance(result.get("usage"), dict) else t.usage_seen
    cost = result.get("total_cost_usd")
    note = ""
    if t.result is None:
        cost, note = estimated_cost(usage, str((t.init or {}).get("model") or ""))
    in_tokens = _int(usage.get("input_tokens"))
    out_tokens = _int(usage.get("output_tokens"))
    cache = None
    if usage:
        cache = (_int(usage.get("cache_read_input_tokens")) or 0) + (_int(usage.get("cache_creation_input_tokens")) or 0)
    total = None if out_tokens is None else (in_tokens or 0) + out_tokens + (cache or 0)
    model_usage = result.get("modelUsage") if isinstance(result.get("modelUsage"), dict) else {}
    return {
        # A negative or non-finite cost is no cost: never shown, summed or subtracted.
        "cost_usd": valid_cost(cost), "cost_estimated": bool(note), "cost_note": note,
        "duration_ms": _int(result.get("duration_ms")),
        "turns": _int(result.get("num_turns")),
        "denials": len(result["permission_denials"]) if isinstance(result.get("permission_denials"), list) else None,
        "in_tokens": in_tokens, "out_tokens": out_tokens, "cache_tokens": cache, "total_tokens": total,
        "served_model": ",".join(sorted(model_usage)) or str((t.init or {}).get("model") or ""),
        "claude_version": str((t.init or {}).get("claude_code_version") or ""),
        "plugins": ",".join(_plugin_label(p) for p in _plugins(t.init)),
        "tools": ",".join(str(x) for x in (t.init or {}).get("tools") or []),
    }


def _plugins(init: dict | None) -> list[dict]:
    return [p for p in (init or {}).get("plugins") or [] if isinstance(p, dict)]


def _plugin_label(plugin: dict) -> str:
    return str(plugin.get("name") or plugin.get("path") or "?")


def _is_builtin(plugin: dict) -> bool:
    return plugin.get("path") == "builtin" or plugin.get("source") == "builtin"


def verify_arm(init: dict | None, plugin_dir: str | None) -> str | None:
    """None when the init line shows exactly this arm; else why not, in one sentence.

    The original benchmark once published a baseline in which a plugin's hook fired in every
    arm. The init line lists what the agent really had, so a contaminated cell cannot pass.
    """
    if init is None:
        return "the CLI printed no init line, so the arm it ran cannot be verified"
    tools = [str(t) for t in init.get("tools") or []]
    if "Bash" in tools:
        return "Bash was available to the agent although it is disallowed for every arm"
    loaded = [p for p in _plugins(init) if not _is_builtin(p)]
    if plugin_dir is None:
        if loaded:
            return f"a plugin of another arm or of the user was loaded: {', '.join(_plugin_label(p) for p in loaded)}"
        return None
    want = os.path.realpath(plugin_dir)
    mine = [p for p in loaded if os.path.realpath(str(p.get("path", ""))) == want]
    if not mine:
        return f"the arm's plugin ({plugin_dir}) is not among the plugins the CLI loaded"
    others = [p for p in loaded if p not in mine]
    if others:
        return f"plugins besides the arm's were loaded: {', '.join(_plugin_label(p) for p in others)}"
    return None


# API statuses after which every later cell would fail the same way: the run stops.
AUTH_STATUSES = (401, 403)
RATE_LIMITED = 429


def api_error_status(t: Transcript) -> int | None:
    """The HTTP status of the API error that ended (or was last retried in) the session, from
    the result line, the CLI's API error line or its last api_retry line; None when none."""
    for source in (t.result or {}, t.api_error or {}, (t.api_retries or [{}])[-1]):
        status = _int(source.get("api_error_status", source.get("error_status")))
        if status is not None:
            return status
    return None


def saw_rate_limit(t: Transcript) -> bool:
    """Did the API answer 429 anywhere in this session (retried or final)?"""
    return api_error_status(t) == RATE_LIMITED or any(
        _int(r.get("error_status")) == RATE_LIMITED for r in t.api_retries)


def _api_error_text(t: Transcript) -> str:
    status = api_error_status(t)
    kind = ((t.result or {}).get("api_error_type") or (t.api_error or {}).get("error")
            or (t.api_retries[-1].get("error") if t.api_retries else None))
    return " ".join(str(x) for x in (status, kind) if x) or "no status"


def auth_failure(record: dict) -> str | None:
    """One sentence stopping the run when a cell's API error was an authentication or
    permission error (every later cell would fail the same way); None otherwise."""
    status = record.get("api_error_status")
    if record.get("status") != records.INFRA_ERROR or status not in AUTH_STATUSES:
        return None
    what = "refused the credentials" if status == 401 else "refused this key access to the model"
    return (f"the model API {what} ({status}) in cell {record.get('cell')}, so every later cell would fail "
            f"the same way: check ANTHROPIC_API_KEY (or log in again with `claude`) and resume the run")


def judge(outcome: agent.RunOutcome, t: Transcript, stderr: Path, timeout: float) -> tuple[str, str]:
    """(status, error sentence) of one agent run, before the arm is verified.

    An API that failed (after the CLI's own retries, or while the CLI was still retrying when
    the cell timed out, or a stream that ended mid-message) is `infra_error`: the session says
    nothing about the agent or its arm. An agent that ran into a limit of its cgroup failed on
    its own (`cli_error`, the limit named), whatever its CLI printed after."""
    hit = agent.limit_hit(outcome.limits)
    if hit:
        return records.CLI_ERROR, hit
    if outcome.timed_out:
        if t.api_retries and not t.answered:
            return records.INFRA_ERROR, (
                f"the model API never answered: the cell timed out after {timeout:g} s while the CLI was "
                f"still retrying ({len(t.api_retries)} api_retry lines, last {_api_error_text(t)})")
        return records.TIMEOUT, f"the agent ran past the cell timeout of {timeout:g} s and was killed with its process tree"
    err = procs.output_tail(stderr, EXCERPT)
    if ROOT_REFUSAL in err:
        return records.CLI_ERROR, ("the CLI refuses --permission-mode bypassPermissions when run as root; "
                                  "run as another user, or set IS_SANDBOX=1 if this machine is a disposable sandbox")
    if t.result is not None:
        if t.result.get("terminal_reason") == "api_error" or _int(t.result.get("api_error_status")) is not None:
            detail = " ".join(str(t.result.get("result") or "").split())[:300]
            return records.INFRA_ERROR, f"the model API failed after the CLI's retries ({_api_error_text(t)}): {detail}"
        if t.result.get("is_error") or t.result.get("subtype") not in (None, "success"):
            detail = str(t.result.get("result") or t.result.get("subtype") or "error")[:300]
            return records.CLI_ERROR, f"the CLI ended with an error ({t.result.get('subtype')}): {detail}"
        return records.FINISHED, ""
    if t.api_error is not None or (t.api_retries and not t.answered):
        # No result line, and the last the stream said was about the API: it was cut off.
        return records.INFRA_ERROR, (f"the session ended without a result while the model API was failing "
                                     f"({_api_error_text(t)}): the stream was cut")
    if outcome.exit_code not in (0, None):
        last = err.splitlines()[-1][:300] if err else "no output on stderr"
        return records.CLI_ERROR, f"the CLI exited with code {outcome.exit_code} before a result: {last}"
    if t.garbage:
        return records.BAD_OUTPUT, f"the CLI's output was not stream-json ({t.garbage} unreadable lines, first: {t.first_garbage!r})"
    return records.BAD_OUTPUT, "the CLI exited without printing a result line"


BUDGET_SUBTYPE = "error_max_budget_usd"  # the result line's subtype when --max-budget-usd stopped the CLI


def stopped_at_budget(t: Transcript) -> bool:
    """Whether the CLI ended because it reached its --max-budget-usd (measured with 2.1.328:
    `subtype: error_max_budget_usd`, `terminal_reason: budget_exhausted`, `is_error: true`)."""
    result = t.result or {}
    return result.get("subtype") == BUDGET_SUBTYPE or result.get("terminal_reason") == "budget_exhausted"


# --------------------------------------------------------------------------- what the agent did

EDIT_TOOLS = tuple(WRITE_TOOLS)


def activity(t: Transcript) -> dict:
    """What the agent did, from its transcript: record fields (flat, JSON-safe).

    `tool_calls`: 'Name:count' pairs by tool name, comma-separated and sorted; `skills_used`:
    the skills the Skill tool invoked, in order of first use, comma-separated; `files_read`
    and `files_written`: distinct paths its Read tool read and its write tools wrote or edited;
    `edits`: calls of its write tools (Write, Edit, MultiEdit, NotebookEdit)."""
    counts: dict[str, int] = {}
    skills: list[str] = []
    for name, tool_input in t.tool_uses:
        counts[name] = counts.get(name, 0) + 1
        skill = tool_input.get("skill") if name == "Skill" else None
        if isinstance(skill, str) and skill and skill not in skills:
            skills.append(skill)
    return {
        "tool_calls": format_counts(counts),
        "skills_used": ",".join(skills),
        "files_read": len(set(t.read_paths)),
        "files_written": len(set(t.written)),
        "edits": sum(n for name, n in counts.items() if name in EDIT_TOOLS),
        "api_error_status": api_error_status(t),
    }


def format_counts(counts: dict[str, int]) -> str:
    """{'Write': 2, 'Read': 1} as 'Read:1,Write:2' (a flat value for JUnit)."""
    return ",".join(f"{name}:{n}" for name, n in sorted(counts.items()))


def parse_counts(text) -> dict[str, int]:
    """The inverse of format_counts; anything malformed is skipped."""
    counts: dict[str, int] = {}
    for part in str(text or "").split(","):
        name, _, n = part.rpartition(":")
        if name and n.isdigit():
            counts[name] = int(n)
    return counts
