"""The deterministic graders of `claude plugin eval`, over a cell's workspace and transcript.

Kinds (the grader's `type`):

- `regex`: `pattern` (a JavaScript-style regular expression; `flags` i, m, s, u, g), `match`
  `contains` (default), `not_contains` or `count:N` (at least N matches), `target`
  `last_message` (default: the agent's final answer), `trace` (the whole stream-json
  transcript), `files` (every file in the workspace) or `{source: file, path: P}`.
- `tool_used`: calls of `tool` whose JSON input matches `input_match` (optional) number
  between `min` and `max` (default unlimited). `min` defaults to 1 (the tool was used) when
  no `max` is given, else to 0: `max: 0` alone forbids the tool, `max: 2` alone allows up to 2.
- `tool_order`: the first call matching `before` (a tool name, or `{tool, input_match}`)
  comes before the first call matching `after`; both must happen.
- `file_exists`: a file the agent wrote (a Write, Edit, MultiEdit or NotebookEdit call) that
  is still in the workspace matches the glob `path`; `exists: false` inverts it.

Judged kinds (`llm`, `baseline`) need a second model: they are never run here, and the
import lists them as not run (plugin_evals.py).

`assert_graders` runs inside a check's child process (checks.py): it reads what the agent
wrote, never runs it, and the check's time limit bounds any pathological pattern. Such a check
runs no code of the agent's, so when its time runs out inside a grader's own search over a
text of at most `SHORT_TEXT` characters, the pattern is at fault, not the agent: even the
worst quadratic search takes well under a second over such a text, so only a pattern that
backtracks worse than that runs out the check's time there (`bench/grader_search.py` prints
the figures). Over a longer text an agent could make a sane pattern slow (an 8 MiB answer
meets a quadratic pattern), so there it stays a timeout of the cell. Before each search the
grader writes a `SEARCH_MARK` line to the check's output, after it a `DONE_MARK` line, and
`stuck_search` reads the output's tail of a check that timed out (`checks._verdict` makes
that an instrument error of the cell, never a timeout of the agent).
"""
from __future__ import annotations

import fnmatch
import functools
import json
import os
import re
from dataclasses import dataclass
from pathlib import Path

from pytest_ponybench.store import tree

DETERMINISTIC = ("regex", "tool_used", "tool_order", "file_exists")
JUDGED = ("llm", "baseline")
KINDS = DETERMINISTIC + JUDGED
TARGETS = ("last_message", "trace", "files")
MAX_READ = 8 * 1024 * 1024  # bytes of one file or of the transcript a grader reads
# A search that runs out a check's time over at most this many characters is the pattern's own
# fault (the worst quadratic search over it: about 0.5 s here, bench/grader_search.py).
SHORT_TEXT = 16 * 1024
TRANSCRIPT_ENV = "PONYBENCH_TRANSCRIPT"  # the kept transcript's path, set for every check
WRITE_TOOLS = {"Write": "file_path", "Edit": "file_path", "MultiEdit": "file_path", "NotebookEdit": "notebook_path"}


SEARCH_MARK = "ponybench-grader-search: "  # + JSON {name, pattern, chars, where}: a search begins
DONE_MARK = "ponybench-grader-done"  # the search ended


class GraderError(ValueError):
    """A grader definition that cannot be run: raised when a suite is imported."""


def js_regex(pattern: str, flags: str = "") -> re.Pattern:
    """A JavaScript regular expression as Python's: named groups `(?<n>...)` become
    `(?P<n>...)`; flags i, m, s map to theirs, g and u change nothing for a search."""
    unknown = set(flags) - set("imsgu")
    if unknown:
        raise GraderError(f"flags '{flags}': unknown flag '{sorted(unknown)[0]}' (use i, m, s, g, u)")
    value = 0
    for flag, bit in (("i", re.IGNORECASE), ("m", re.MULTILINE), ("s", re.DOTALL)):
        if flag in flags:
            value |= bit
    converted = re.sub(r"\(\?<(?![=!])", "(?P<", pattern)
    try:
        return re.compile(converted, value)
    except re.error as exc:
        raise GraderError(f"pattern {pattern!r} is not a valid regular expression: {exc}") from None


def _matcher(value, field: str) -> tuple[str, str | None]:
    """(tool name, input_match or None) of a tool_order side."""
    if isinstance(value, str) and value:
        return value, None
    if isinstance(value, dict) and isinstance(value.get("tool"), str):
        match = value.get("input_match")
        return value["tool"], match if isinstance(match, str) else None
    raise GraderError(f"'{field}' must be a tool name or {{tool, input_match}}")


def call_bounds(grader: dict) -> tuple[int, int | None]:
    """(min, max or None) of a tool_used grader's calls. Without `min`, a grader that gives a
    `max` sets only a ceiling (`max: 0` forbids the tool); one that gives neither asks that the
    tool was used at least once."""
    high = grader.get("max")
    return grader.get("min", 1 if high is None else 0), high


def validate(grader: dict) -> None:
    """Raise GraderError when a deterministic grader is malformed (judged ones are listed,
    not run, so only their type matters)."""
    kind = grader.get("type")
    if kind is None:
        hint = f" (it has 'kind: {grader['kind']}': the field is 'type')" if "kind" in grader else ""
        raise GraderError(f"no 'type'{hint}; the kinds are {', '.join(KINDS)}")
    if kind not in KINDS:
        raise GraderError(f"type {kind!r} is not a grader kind; the kinds are {', '.join(KINDS)}")
    if kind == "regex":
        if not isinstance(grader.get("pattern"), str) or not grader["pattern"]:
            raise GraderError("a regex grader needs a 'pattern'")
        js_regex(grader["pattern"], str(grader.get("flags") or ""))
        match = str(grader.get("match") or "contains")
        if match not in ("contains", "not_contains") and not re.fullmatch(r"count:\d+", match):
            raise GraderError(f"match '{match}' must be contains, not_contains or count:N")
        target = grader.get("target", "last_message")
        if isinstance(target, dict):
            if target.get("source") == "file" and isinstance(target.get("path"), str) and target["path"]:
                pass
            elif target.get("source") in TARGETS:
                pass
            else:
                raise GraderError("target must be last_message, trace, files or {source: file, path: ...}")
        elif target not in TARGETS:
            raise GraderError(f"target {target!r} must be last_message, trace, files or {{source: file, path: ...}}")
    elif kind == "tool_used":
        if not isinstance(grader.get("tool"), str) or not grader["tool"]:
            raise GraderError("a tool_used grader needs a 'tool'")
        for key in ("min", "max"):
            if key in grader and (isinstance(grader[key], bool) or not isinstance(grader[key], int) or grader[key] < 0):
                raise GraderError(f"'{key}' must be a whole number of calls")
        low, high = call_bounds(grader)
        if high is not None and low > high:
            raise GraderError(f"'min' {low} is more than 'max' {high}: no number of calls passes")
        if isinstance(grader.get("input_match"), str):
            js_regex(grader["input_match"])
    elif kind == "tool_order":
        for side in ("before", "after"):
            _, input_match = _matcher(grader.get(side), side)
            if input_match:
                js_regex(input_match)
    elif kind == "file_exists":
        if not isinstance(grader.get("path"), str) or not grader["path"]:
            raise GraderError("a file_exists grader needs a 'path' (a glob)")


# --------------------------------------------------------------------------- the evidence


@dataclass
class Evidence:
    """What graders look at: the workspace (as it was left), the transcript's text, the
    agent's final answer, its tool calls in order, and the files its write tools wrote."""

    workspace: Path
    trace: str
    last_message: str
    calls: list[tuple[str, str]]  # (tool name, compact JSON of its input)
    written: list[str]  # workspace-relative paths


def _read(path: Path) -> str:
    with open(path, "rb") as fh:
        return fh.read(MAX_READ).decode("utf-8", "replace")


def evidence(workspace: Path, transcript: Path | None) -> Evidence:
    trace = _read(transcript) if transcript is not None and transcript.is_file() else ""
    calls, written, last, result_text = [], [], "", None
    # The agent's paths are absolute in the kept workspace, where it ran (the init line's cwd;
    # the transcript sits there too), while graders read a disposable copy of it.
    original = transcript.parent if transcript is not None else workspace
    raw_paths = []
    for line in trace.splitlines():
        try:
            event = json.loads(line)
        except ValueError:
            continue
        if not isinstance(event, dict):
            continue
        if event.get("type") == "system" and event.get("subtype") == "init" and isinstance(event.get("cwd"), str):
            original = Path(event["cwd"])
        if event.get("type") == "result" and isinstance(event.get("result"), str):
            result_text = event["result"]
        message = event.get("message") if event.get("type") == "assistant" else None
        content = message.get("content") if isinstance(message, dict) else None
        texts = []
        for block in content if isinstance(content, list) else []:
            if not isinstance(block, dict):
                continue
            if block.get("type") == "text" and isinstance(block.get("text"), str):
                texts.append(block["text"])
            elif block.get("type") == "tool_use" and isinstance(block.get("name"), str):
                tool_input = block.get("input")
                if not isinstance(tool_input, dict):
                    tool_input = {}
                calls.append((block["name"], json.dumps(tool_input, separators=(",", ":"), ensure_ascii=False)))
                key = WRITE_TOOLS.get(block["name"])
                if key and isinstance(tool_input.get(key), str):
                    raw_paths.append(tool_input[key])
        if texts:
            last = "\n".join(texts)
    written = [_relative(p, original) for p in raw_paths]
    return Evidence(workspace=workspace, trace=trace, last_message=result_text if result_text is not None else last,
                    calls=calls, written=[w for w in written if w])


def _relative(path: str, original: Path) -> str:
    pure = Path(path)
    if not pure.is_absolute():
        return str(pure)
    try:
        return str(pure.relative_to(original))
    except ValueError:
        try:
            return str(Path(os.path.realpath(pure)).relative_to(os.path.realpath(original)))
        except ValueError:
            return ""  # written outside the workspace: no file of this case


def _workspace_files(workspace: Path) -> list[Path]:
    """The regular files a grader may read: no link (never followed), no harness file, nothing in a `.git`."""
    def skip(rel: str, name: str) -> bool:
        return name == ".git" or name.startswith("_ponybench")

    return sorted(workspace / rel for rel, entry in tree.walk(workspace, skip) if entry.is_file(follow_symlinks=False))


def _target_text(grader: dict, ev: Evidence) -> tuple[str, str]:
    """(text, what it is) a regex grader searches."""
    target = grader.get("target", "last_message")
    if isinstance(target, dict) and target.get("source") == "file":
        rel = target["path"]
        path = ev.workspace / rel
        if not path.is_file():
            return "", f"file {rel} (absent)"
        return _read(path), f"file {rel}"
    source = target.get("source") if isinstance(target, dict) else target
    if source == "trace":
        return ev.trace, "the trace"
    if source == "files":
        return "\n".join(_read(p) for p in _workspace_files(ev.workspace)), "the workspace's files"
    return ev.last_message, "the last message"


def _announce(grader: dict, pattern: str, chars: int, where: str) -> None:
    """One line in the check's output before a search (see the module's docstring). Written to
    fd 2 at once, unbuffered: a check killed at its deadline keeps it."""
    mark = json.dumps({"name": str(grader.get("name") or grader.get("type")), "pattern": pattern[:200],
                       "chars": chars, "where": where})
    os.write(2, f"\n{SEARCH_MARK}{mark}\n".encode("utf-8", "replace"))


def _done() -> None:
    os.write(2, f"\n{DONE_MARK}\n".encode())


def _count_calls(ev: Evidence, tool: str, match: str | None, grader: dict | None = None) -> list[int]:
    pattern = js_regex(match) if match else None
    if match:  # and so a pattern
        _announce(grader or {"name": tool}, match, sum(len(data) for name, data in ev.calls if name == tool),
                  f"the inputs of the {tool} calls")
    found = [i for i, (name, data) in enumerate(ev.calls) if name == tool and (pattern is None or pattern.search(data))]
    if pattern is not None:
        _done()
    return found


def stuck_search(tail: str) -> dict | None:
    """The search a grader had begun and not ended when its check's output stopped (the
    `SEARCH_MARK` line's data), or None. Read only for a check whose code is `check_code`'s:
    no agent code runs there to write such a line."""
    lines = [line.strip() for line in str(tail or "").splitlines() if line.strip()]
    if not lines or not lines[-1].startswith(SEARCH_MARK):
        return None
    try:
        data = json.loads(lines[-1][len(SEARCH_MARK):])
    except ValueError:  # cut by the tail's length
        return None
    if not isinstance(data, dict) or not isinstance(data.get("chars"), int):
        return None
    return data


def check_code(runnable: list[dict]) -> str:
    """The code of an imported case's `correct` check: the deterministic graders, as JSON."""
    spec = json.dumps(runnable, sort_keys=True)
    return f"from pytest_ponybench.graders import assert_graders\nassert_graders({spec!r})\n"


@functools.lru_cache(maxsize=256)
def is_check_code(code: str) -> bool:
    """Whether a check's code is exactly a graders check (an import of `assert_graders` and one
    call of it with a literal string): code that runs nothing of the agent's, whose output
    only the graders write. Cached: every call of a check asks, and parsing takes a lock."""
    import ast

    from pytest_ponybench.specs.spec import parse_python

    try:
        tree = parse_python(code)
    except (SyntaxError, ValueError):
        return False
    if len(tree.body) != 2:
        return False
    first, second = tree.body
    return (isinstance(first, ast.ImportFrom) and first.module == "pytest_ponybench.graders" and first.level == 0
            and [(a.name, a.asname) for a in first.names] == [("assert_graders", None)]
            and isinstance(second, ast.Expr) and isinstance(second.value, ast.Call)
            and isinstance(second.value.func, ast.Name) and second.value.func.id == "assert_graders"
            and not second.value.keywords and len(second.value.args) == 1
            and isinstance(second.value.args[0], ast.Constant) and isinstance(second.value.args[0].value, str))


def grade(grader: dict, ev: Evidence) -> tuple[bool, str]:
    """(passed, one sentence) for one deterministic grader."""
    kind = grader["type"]
    if kind == "regex":
        text, where = _target_text(grader, ev)
        compiled = js_regex(grader["pattern"], str(grader.get("flags") or ""))
        _announce(grader, grader["pattern"], len(text), where)
        found = len(compiled.findall(text))
        _done()
        match = str(grader.get("match") or "contains")
        if match == "not_contains":
            return found == 0, f"/{grader['pattern']}/ found {found} time(s) in {where}, where it must not be"
        need = int(match.split(":", 1)[1]) if match.startswith("count:") else 1
        return found >= need, f"/{grader['pattern']}/ found {found} time(s) in {where}, needed {need}"
    if kind == "tool_used":
        low, high = call_bounds(grader)
        n = len(_count_calls(ev, grader["tool"], grader.get("input_match"), grader))
        what = grader["tool"] + (f" matching /{grader['input_match']}/" if grader.get("input_match") else "")
        bounds = f"at least {low}" if high is None else f"{low} to {high}"
        return n >= low and (high is None or n <= high), f"{n} call(s) of {what}, expected {bounds}"
    if kind == "tool_order":
        sides = {}
        for side in ("before", "after"):
            tool, input_match = _matcher(grader[side], side)
            at = _count_calls(ev, tool, input_match, grader)
            sides[side] = (tool + (f" /{input_match}/" if input_match else ""), at[0] if at else None)
        (b_name, b_at), (a_name, a_at) = sides["before"], sides["after"]
        if b_at is None or a_at is None:
            missing = b_name if b_at is None else a_name
            return False, f"no call of {missing}, so {b_name} before {a_name} cannot hold"
        return b_at < a_at, f"first {b_name} is call {b_at + 1}, first {a_name} is call {a_at + 1}"
    if kind == "file_exists":
        glob = grader["path"]
        hits = sorted({w for w in ev.written if fnmatch.fnmatch(w, glob) and (ev.workspace / w).is_file()})
        if grader.get("exists", True) is False:
            return not hits, f"the agent wrote {', '.join(hits)}, matching {glob}, which must not exist"
        return bool(hits), f"the agent wrote no file matching {glob}" if not hits else f"the agent wrote {hits[0]}"
    raise GraderError(f"{kind} graders are not run here")


def results(graders: list[dict], workspace: Path, transcript: Path | None) -> list[dict]:
    """Every deterministic grader's verdict: {name, type, passed, reason}."""
    ev = evidence(workspace, transcript)
    out = []
    for grader in graders:
        if grader["type"] not in DETERMINISTIC:
            continue
        ok, reason = grade(grader, ev)
        out.append({"name": grader["name"], "type": grader["type"], "passed": ok, "reason": reason})
    return out


def assert_graders(spec_json: str) -> None:
    """The body of an imported case's `correct` check: every deterministic grader passes,
    or an AssertionError names each one that failed and why."""
    graders = json.loads(spec_json)
    transcript = os.environ.get(TRANSCRIPT_ENV)
    found = results(graders, Path.cwd(), Path(transcript) if transcript else None)
    failed = [f"grader {r['name']} ({r['type']}): {r['reason']}" for r in found if not r["passed"]]
    if failed:
        raise AssertionError(f"{len(failed)} of {len(found)} graders failed: " + "; ".join(failed))
