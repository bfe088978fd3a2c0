"""The judge: what no check can decide, scored by a model against a published rubric.

Two judged axes (docs/judge.md has the rubrics in full):

- `over_engineering`, 0 to 3, for every cell that delivered code: 0 is what the ticket needs
  and no more; each point names a construct the ticket did not ask for, with one line why.
- `completeness`, 0 to 3, for open and fixture tasks: 3 does everything the ticket asks; 1 or
  less is a stub or partial work.

The judge sees the ticket and the source the agent delivered, nothing else: tests, harness
files (`_ponybench.*`) and seeded files it left as they were stay out (tests are never bloat,
and an untouched seed is not the agent's). A fixture task is judged on its diff, not on the
whole app.

It runs through the same real model path as the cells: the pinned CLI headless, with no
tools, one turn, a fixed judge model (`--ponybench-judge-model`). The CLI has no temperature
option and sends none, so the model's default applies: the lowest the path allows is the one
it picks; votes (`--ponybench-judge-votes`, the median of them counts) absorb what that
leaves. An answer must be exactly one JSON object of the rubric's shape (one code fence
around it is allowed); a malformed one is asked again once, then that vote is not judged.
No valid vote: the axis is None ("not judged"), never 0. An API failure is an infra error of
the judgement (`judge_status`), never of the cell.

A judgement is identified by its fingerprint: the judge model id, the rubric hash, the CLI
version and the path (the real CLI, or a rehearsal's scripted judge). It is kept sealed in
the cell's records (`judge-<fingerprint>`), beside the workspace where the agent cannot
write; a rescore reuses it when the fingerprint matches and never mixes two judges.

One module on purpose (about 600 lines): the rubrics, what the judge is shown, the strict
parsing of its answer, the votes and the fingerprint change together (a rubric's change is a
new hash, prompt and parser), and the judge pairs are made from the same rubric.
"""
from __future__ import annotations

import ast
import codecs
import difflib
import hashlib
import json
import os
import re
import stat
import statistics
import tempfile
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from pytest_ponybench.cell import agent, transcript as transcripts, workspace
from pytest_ponybench.scoring import metrics
from pytest_ponybench.specs.argtypes import DEFAULT_JUDGE_MODEL, DEFAULT_VOTES  # noqa: F401 (judge.DEFAULT_*)
from pytest_ponybench.store import snapshot

AXES = ("over_engineering", "completeness")
RETRIES = 1  # a malformed answer is asked again this many times, then the vote is not judged
TIMEOUT = 300.0  # seconds one judge request may take
MAX_SUBMISSION = 60_000  # characters of delivered source the judge is shown at most
MAX_FILE_BYTES = MAX_SUBMISSION // 2  # bytes read of one workspace file for the judge: one file leaves room for others
MAX_READ_BYTES = 2 * MAX_SUBMISSION  # bytes read of all of one submission's files
OVER_BUILT = 2  # over_engineering at or above: the cell counts as over-built
INCOMPLETE = 1  # completeness at or below: the cell counts as incomplete
JUDGE_STATUS_OK = "judged"
RECORD_PREFIX = "judge-"  # a cell's record kind: judge-<fingerprint>
SPEND_SUFFIX = "/judge"  # ledger lines of judgements: "<cell>/judge", "proof:<task>/judge"

SYSTEM = (
    "You are a strict, consistent code reviewer. You score one submission against one published "
    "rubric and answer with exactly one JSON object, nothing before or after it."
)

RUBRICS = {
    "over_engineering": (
        "AXIS: over_engineering\n"
        "Score how much the delivered source builds beyond what the ticket asks for, 0 to 3:\n"
        "0 - nothing beyond the ticket: every function, class, option and file serves a requirement.\n"
        "1 - one small unneeded construct (a helper used once that only renames, an unused parameter "
        "or option).\n"
        "2 - an unneeded layer or mechanism (an abstract base class with one implementation, a factory, "
        "a registry, a configuration system, a generic framework for one case).\n"
        "3 - several such layers: the requested change is buried in architecture the ticket never asked for.\n"
        "Defensive checks, error handling and input validation the ticket's inputs need are not "
        "over-engineering. Tests are not shown and never count.\n"
        "Answer: {\"score\": 0-3, \"construct\": \"the one construct you find most unnecessary, named as "
        "in the code (empty for 0)\", \"why\": \"one line: why the ticket does not need it\"}"
    ),
    "completeness": (
        "AXIS: completeness\n"
        "Score how completely the delivered source does what the ticket asks, 0 to 3:\n"
        "3 - every requirement of the ticket is implemented.\n"
        "2 - a minor requirement or edge case the ticket names is missing.\n"
        "1 - partial work: a main requirement is missing, or parts are stubs (TODO, pass, "
        "NotImplementedError, placeholder returns).\n"
        "0 - nothing of the ticket is implemented, or only stubs.\n"
        "Judge what the code does, not its style or size.\n"
        "Answer: {\"score\": 0-3, \"missing\": \"the most important requirement not done (empty for 3)\", "
        "\"why\": \"one line\"}"
    ),
}
# The second key of each axis's answer: the cited construct, or the missing requirement.
CITED = {"over_engineering": "construct", "completeness": "missing"}


def rubric_hash() -> str:
    """Changes whenever a rubric, the system prompt, the answer shape or the scoring rule
    (votes' median, retries) changes: a judgement of another rubric is never reused."""
    text = json.dumps([SYSTEM, RUBRICS, CITED, "median_low", RETRIES], sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:12]


def fingerprint(model_id: str, cli_version: str, path: str = "cli") -> str:
    """The judge's identity: model id, rubric hash, CLI version, and the path it took ("cli",
    or "rehearsal:<script>" for the scripted judge). Judgements of two fingerprints never mix."""
    text = json.dumps([model_id, rubric_hash(), cli_version, path])
    return hashlib.sha256(text.encode()).hexdigest()[:12]


def axes_for(kind: str) -> tuple[str, ...]:
    """The judged axes of a task kind: over-engineering everywhere, completeness where no
    check decides it (open and fixture tasks)."""
    return AXES if kind in ("open", "fixture") else ("over_engineering",)


def task_axes(task) -> tuple[str, ...]:
    """The judged axes of one task: by its kind, unless it says `judge_completeness` (spec.py)."""
    wanted = getattr(task, "judge_completeness", None)
    if wanted is None:
        return axes_for(task.kind)
    return AXES if wanted else ("over_engineering",)


# --------------------------------------------------------------------------- what the judge sees


@dataclass(frozen=True)
class Submission:
    """What the judge is shown: `text` (each file, or the diff), the `paths` it covers."""

    text: str
    paths: tuple[str, ...]
    diff: bool = False

    @property
    def empty(self) -> bool:
        return not self.text.strip()


def _fence(rel: str, content: str) -> str:
    return f"### {rel}\n```\n{content.rstrip()}\n```\n"


def _bounded(text: str) -> str:
    if len(text) <= MAX_SUBMISSION:
        return text
    return text[:MAX_SUBMISSION] + f"\n[ponybench: {len(text) - MAX_SUBMISSION} more characters not shown]\n"


def _judged_path(rel: str) -> bool:
    """Source the judge sees: code files, not tests, not harness files."""
    name = Path(rel).name
    return (not metrics.is_test_path(rel) and not name.startswith(("_ponybench", "."))
            and Path(rel).suffix in metrics.CODE_EXTENSIONS)


def files_submission(files: dict[str, str]) -> Submission:
    """Delivered files ({path: content}) as the judge sees them: tests and harness files out."""
    kept = sorted(rel for rel in files if _judged_path(rel))
    return Submission(_bounded("".join(_fence(rel, files[rel]) for rel in kept)), tuple(kept))


def diff_submission(before: dict[str, str], after: dict[str, str]) -> Submission:
    """A fixture task's change as a unified diff of its source files (tests out)."""
    parts, paths = [], []
    for rel in sorted(set(before) | set(after)):
        if not _judged_path(rel) or before.get(rel) == after.get(rel):
            continue
        lines = difflib.unified_diff((before.get(rel) or "").splitlines(True), (after.get(rel) or "").splitlines(True),
                                     f"a/{rel}", f"b/{rel}")
        parts.append("".join(line if line.endswith("\n") else line + "\n" for line in lines))
        paths.append(rel)
    text = "".join(parts)
    return Submission(_bounded(f"```diff\n{text}```\n" if text else ""), tuple(paths), diff=True)


def _read(path: Path) -> str:
    """A file of the project's own (a fixture's seed): the agent's files go through read_files."""
    try:
        return path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return ""


def _not_shown(why: str) -> str:
    return f"[ponybench: not shown: {why}]"


def read_file(ws: Path, rel: str, limit: int = MAX_FILE_BYTES) -> tuple[str | None, int]:
    """(what the judge is shown of the workspace file `rel`, bytes read): its text, cut at
    `limit` bytes with a line saying so; or one line naming why it is not shown: a link
    (followed, it would put an outside file, /proc/self/environ, in the prompt), a file in a
    linked folder, a FIFO, socket or device (never opened: a FIFO's read never ends), a binary
    file (a NUL byte, or not UTF-8). None: no such file (deleted). Never reads more than
    `limit` + 1 bytes, so a 1 GiB sparse file costs what a small one does."""
    path = os.path.join(ws, rel)
    try:
        mode = os.lstat(path).st_mode
    except FileNotFoundError:
        return None, 0
    except OSError as exc:
        return _not_shown(f"unreadable ({exc.strerror})"), 0
    if stat.S_ISLNK(mode):
        return _not_shown("a link, not followed"), 0
    if not stat.S_ISREG(mode):
        return _not_shown("a FIFO, socket or device, not opened"), 0
    if os.path.realpath(path) != os.path.join(os.path.realpath(ws), rel):
        return _not_shown("in a linked folder, not followed"), 0
    try:
        # O_NOFOLLOW and O_NONBLOCK: swapped since the lstat for a link or a FIFO, it is still refused, not read
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as exc:
        return _not_shown(f"unreadable ({exc.strerror})"), 0
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return _not_shown("a FIFO, socket or device, not opened"), 0
        chunks, got = [], 0
        while got <= limit:
            chunk = os.read(fd, limit + 1 - got)
            if not chunk:
                break
            chunks.append(chunk)
            got += len(chunk)
    except OSError as exc:
        return _not_shown(f"unreadable ({exc.strerror})"), 0
    finally:
        os.close(fd)
    data = b"".join(chunks)
    cut = len(data) > limit
    try:
        if b"\0" in data:
            raise UnicodeDecodeError("utf-8", data, 0, 1, "a NUL byte")
        # not final when cut: a character split at the cut is left out, not taken for binary
        text = codecs.getincrementaldecoder("utf-8")().decode(data[:limit], final=not cut)
    except UnicodeDecodeError:
        return _not_shown(f"a binary file ({len(data)}{'+' if cut else ''} bytes read)"), len(data)
    if cut:
        text += f"\n[ponybench: the file was cut here, after {limit} bytes: it is longer]\n"
    return text, len(data)


def read_files(ws: Path, rels) -> dict[str, str]:
    """{rel: what the judge is shown of it} (read_file) for the workspace files `rels`, in
    order, reading MAX_READ_BYTES of them in all: the files past that are named, not read.
    A file that is not there is left out."""
    shown, left = {}, MAX_READ_BYTES
    for rel in rels:
        if left <= 0:
            shown[rel] = _not_shown("the submission's limit was reached before it")
            continue
        text, read = read_file(Path(ws), rel, min(MAX_FILE_BYTES, left))
        if text is not None:
            shown[rel] = text
        left -= read
    return shown


def cell_submission(task, ws: Path, key: bytes | None, answer: str | None = None) -> Submission:
    """What the agent delivered in a kept workspace. Fixture tasks: the diff of the files it
    changed against the fixture as copied (the seed of the app, read from the task's fixture
    folder). Other tasks: the code files it created or changed against the seed manifest; an
    open task answered in chat only is judged on its answer's code blocks."""
    ws = Path(ws)
    if task.kind == "fixture":
        before, after = fixture_change(ws)
        return diff_submission(before, after)
    fixture_files = workspace.fixture_manifest(ws, key)
    seeded = workspace.seed_manifest(ws, task.seed, key)
    # Links and special files listed too: read_files names them for the judge, never follows or opens them
    listed = metrics.code_files(ws, fixture_files, regular_only=False)
    delivered = metrics.delivered_files(ws, seeded, fixture_files, files=listed)
    sub = files_submission(read_files(ws, [rel for rel in delivered if _judged_path(rel)]))
    if sub.empty and task.kind == "open" and answer:
        blocks = metrics.FENCED_BLOCK.findall(answer)
        if blocks:
            sub = Submission(_bounded(_fence("answer", "\n\n".join(blocks))), ("answer",))
    return sub


def fixture_change(ws: Path) -> tuple[dict[str, str], dict[str, str]]:
    """({path: content at the seeded snapshot}, {path: content now}) of the files a fixture
    workspace changed since its snapshot. Read-only, as metrics.diff_stats, through the same
    staging (`snapshot.staged`): nothing the agent wrote under .git or in an attribute or
    ignore file runs or decides what the judge reads."""
    with snapshot.staged(ws) as (base, run):
        names = run("diff", "--cached", "--name-only", "--no-renames", "-z", base).stdout
        changed = [rel for rel in names.split("\0") if rel and _judged_path(rel)]
        before = {}
        for rel in changed:
            shown = run("cat-file", "blob", f"{base}:{rel}")  # the blob as stored: no textconv
            if shown.returncode == 0:
                before[rel] = shown.stdout
    after = read_files(Path(ws), changed)
    return before, after


def prompt(axis: str, ticket: str, sub: Submission) -> str:
    what = "the diff of the source files the agent changed" if sub.diff else "the source files the agent delivered"
    return (f"{RUBRICS[axis]}\n\n## The ticket\n\n{ticket.strip()}\n\n"
            f"## The submission: {what}\n\n{sub.text}\n"
            f"Score the submission on {axis} only, by the rubric above. Reply with the JSON object only.")


# --------------------------------------------------------------------------- strict parsing

_FENCED = re.compile(r"\A```(?:json)?[ \t]*\n(.*)\n```\Z", re.S)


@dataclass(frozen=True)
class Vote:
    score: int
    cited: str  # the construct (over_engineering) or the missing requirement (completeness)
    why: str


def parse_answer(axis: str, text) -> tuple[Vote | None, str]:
    """(vote, "") for an answer of exactly the rubric's shape; (None, what is wrong) else.

    Strict: one JSON object (one code fence around it allowed), exactly the keys `score`,
    the axis's cited key and `why`; a whole-number score 0 to 3; a one-line `why`; an
    over-engineering score of 1 or more must name its construct."""
    if not isinstance(text, str) or not text.strip():
        return None, "the answer is empty"
    body = text.strip()
    fenced = _FENCED.match(body)
    if fenced:
        body = fenced.group(1).strip()
    try:
        data = json.loads(body)
    except ValueError:
        return None, f"the answer is not one JSON object: {' '.join(text.split())[:80]!r}"
    cited = CITED[axis]
    if not isinstance(data, dict) or set(data) != {"score", cited, "why"}:
        keys = sorted(data) if isinstance(data, dict) else type(data).__name__
        return None, f"the answer must have exactly the keys score, {cited}, why; it has {keys}"
    score = data["score"]
    if isinstance(score, bool) or not isinstance(score, int) or not 0 <= score <= 3:
        return None, f"score must be a whole number 0 to 3, not {score!r}"
    if not isinstance(data[cited], str) or not isinstance(data["why"], str):
        return None, f"{cited} and why must be strings"
    why = data["why"].strip()
    if not why or "\n" in why or len(why) > 300:
        return None, "why must be one line of at most 300 characters"
    if axis == "over_engineering" and score >= 1 and not data[cited].strip():
        return None, "an over_engineering score of 1 or more must name the construct"
    return Vote(score, " ".join(data[cited].split())[:200], why), ""


# --------------------------------------------------------------------------- asking the model


@dataclass
class Reply:
    status: str  # transcript.judge's status: "finished", or "infra_error", "cli_error", ...
    text: str = ""
    cost_usd: float = 0.0
    error: str = ""


def cli_argv(claude: str, model_id: str, text: str) -> list[str]:
    """The judge's CLI call: headless, no tools, one turn, only the judge's system prompt,
    the user's settings and MCP servers out, nothing persisted."""
    return [claude, "-p", text, "--model", model_id, "--tools", "", "--max-turns", "1",
            "--system-prompt", SYSTEM, "--setting-sources", "project,local", "--strict-mcp-config",
            "--output-format", "stream-json", "--verbose", "--no-session-persistence"]


def ask_cli(claude: str, model_id: str, text: str, env: dict[str, str], timeout: float = TIMEOUT) -> Reply:
    """One judge request through the pinned CLI, in an empty folder (no project files)."""
    with tempfile.TemporaryDirectory(prefix="ponybench-judge-") as tmp:
        folder = Path(tmp)
        outcome = agent.run(cli_argv(claude, model_id, text), folder, agent.agent_env(env), timeout,
                            folder / "transcript.jsonl", folder / "stderr.txt")
        seen = transcripts.read_transcript(folder / "transcript.jsonl")
        status, error = transcripts.judge(outcome, seen, folder / "stderr.txt", timeout)
    cost = transcripts.usage_metrics(seen)["cost_usd"] or 0.0
    answer = (seen.result or {}).get("result")
    return Reply(status, answer if isinstance(answer, str) else seen.last_text, max(float(cost), 0.0), error)


@dataclass
class AxisJudgement:
    axis: str
    score: int | None = None
    votes: list = field(default_factory=list)  # each vote's score, None for a vote not judged
    cited: str = ""
    why: str = ""
    status: str = JUDGE_STATUS_OK
    cost_usd: float = 0.0
    requests: int = 0


def judge_axis(ask, axis: str, ticket: str, sub: Submission, votes: int = DEFAULT_VOTES) -> AxisJudgement:
    """`votes` answers on one axis, asked at once (each asked again once when malformed); the
    median of the valid ones. An API failure of any request ends the axis as an infra error,
    not judged."""
    out = AxisJudgement(axis)
    text = prompt(axis, ticket, sub)

    def one_vote(_):
        """(vote or None, problem, infra error or "", requests, cost) of one vote."""
        requests, cost, problem = 0, 0.0, ""
        for _try in range(1 + RETRIES):
            reply = ask(text)
            requests += 1
            cost += reply.cost_usd
            if reply.status != "finished":
                return None, "", f"infra_error: {reply.error or reply.status}"[:300], requests, cost
            vote, problem = parse_answer(axis, reply.text)
            if vote is not None:
                return vote, "", "", requests, cost
        return None, problem, "", requests, cost

    # Each request mostly waits on the model: the votes of an axis go out together.
    with ThreadPoolExecutor(max_workers=votes) as pool:
        results = list(pool.map(one_vote, range(votes)))
    valid: list[Vote] = []
    problem = ""
    for vote, why, infra, requests, cost in results:
        out.requests += requests
        out.cost_usd += cost
        out.votes.append(vote.score if vote else None)
        if vote is not None:
            valid.append(vote)
        problem = problem or why
        if infra and out.status == JUDGE_STATUS_OK:
            out.status = infra
    if out.status == JUDGE_STATUS_OK and not valid:
        out.status = f"not judged: malformed answers ({problem})"[:300]
    return _settle(out, valid)


def _settle(out: AxisJudgement, valid: list[Vote]) -> AxisJudgement:
    out.cost_usd = round(out.cost_usd, 6)
    if not valid or out.status != JUDGE_STATUS_OK:
        return out
    out.score = statistics.median_low(v.score for v in valid)
    chosen = next(v for v in valid if v.score == out.score)  # the first vote that gave the median
    out.cited, out.why = chosen.cited, chosen.why
    return out


def judge_submission(ask, axes, ticket: str, sub: Submission, votes: int = DEFAULT_VOTES) -> dict[str, AxisJudgement]:
    return {axis: judge_axis(ask, axis, ticket, sub, votes) for axis in axes}


# --------------------------------------------------------------------------- the record's fields

JUDGED_FIELDS = ("over_engineering", "over_engineering_construct", "over_engineering_why", "over_engineering_votes",
                 "completeness", "completeness_missing", "completeness_why", "completeness_votes",
                 "judge_status", "judge_model", "judge_rubric", "judge_fingerprint", "judge_cost_usd", "judge_reused")


def empty_fields(status: str, model_id: str = "", fp: str = "") -> dict:
    """The judged fields of a cell that was not judged, and why (`judge_status`)."""
    fields = {name: None for name in JUDGED_FIELDS}
    fields.update(judge_status=status, judge_model=model_id, judge_rubric=rubric_hash(), judge_fingerprint=fp,
                  judge_cost_usd=0.0, judge_reused=False)
    for axis in AXES:
        fields[f"{axis}_votes"] = ""
    return fields


def record_fields(judged: dict[str, AxisJudgement], model_id: str, fp: str) -> dict:
    """A judgement as flat, JSON-safe record fields. `judge_status` is "judged" only when
    every judged axis has a score; otherwise the first axis's reason."""
    fields = empty_fields(JUDGE_STATUS_OK, model_id, fp)
    for axis, one in judged.items():
        fields[axis] = one.score
        fields[f"{axis}_{CITED[axis]}"] = one.cited
        fields[f"{axis}_why"] = one.why
        fields[f"{axis}_votes"] = ",".join("-" if v is None else str(v) for v in one.votes)
    bad = [one.status for one in judged.values() if one.status != JUDGE_STATUS_OK]
    fields["judge_status"] = bad[0] if bad else JUDGE_STATUS_OK
    fields["judge_cost_usd"] = round(sum(one.cost_usd for one in judged.values()), 6)
    return fields


def reusable(kept) -> bool:
    """A kept judgement a resume or rescore takes as it is: one that reached an answer (judged,
    or malformed answers, which were paid for). An infra error is asked again."""
    return (isinstance(kept, dict) and isinstance(kept.get("judge_status"), str)
            and not kept["judge_status"].startswith("infra_error"))


# --------------------------------------------------------------------------- judge pairs

OVERBUILT_PY = '''

class _Handler(ABC):
    """Extension point for future strategies."""

    @abstractmethod
    def handle(self, value): ...


class _DefaultHandler(_Handler):
    def handle(self, value):
        return value


class HandlerRegistry:
    """Registry of handlers, configurable at runtime."""

    def __init__(self):
        self._handlers = {}

    def register(self, name, handler):
        self._handlers[name] = handler

    def get(self, name):
        return self._handlers[name]


class HandlerFactory:
    """Factory creating handlers from configuration."""

    @staticmethod
    def create(config=None):
        registry = HandlerRegistry()
        registry.register("default", _DefaultHandler())
        return registry.get((config or {}).get("handler", "default"))
'''

OVERBUILT_JS = '''

class HandlerBase {
  // Extension point for future strategies.
  handle(value) { throw new Error("abstract"); }
}

class DefaultHandler extends HandlerBase {
  handle(value) { return value; }
}

class HandlerRegistry {
  constructor() { this.handlers = new Map(); }
  register(name, handler) { this.handlers.set(name, handler); }
  get(name) { return this.handlers.get(name); }
}

class HandlerFactory {
  static create(config) {
    const registry = new HandlerRegistry();
    registry.register("default", new DefaultHandler());
    return registry.get((config || {}).handler || "default");
  }
}
'''


def over_built(files: dict[str, str]) -> dict[str, str]:
    """The good reference with an unused abstraction layer added to each source file (an
    abstract base class, a registry, a factory): the same behaviour, deliberately over-built."""
    out = dict(files)
    for rel, content in files.items():
        if not _judged_path(rel):
            continue
        if rel.endswith(".py"):
            out[rel] = "from abc import ABC, abstractmethod\n" + content.rstrip() + "\n" + OVERBUILT_PY
        elif rel.endswith((".js", ".ts")):
            out[rel] = content.rstrip() + "\n" + OVERBUILT_JS
    return out


def _stub_python(content: str) -> str | None:
    from pytest_ponybench.specs.spec import parse_python

    try:
        tree = parse_python(content)
    except SyntaxError:
        return None
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            node.body = [ast.Raise(exc=ast.Call(func=ast.Name("NotImplementedError", ast.Load()),
                                                args=[ast.Constant("TODO")], keywords=[]), cause=None)]
    return "# TODO: implement the ticket\n" + ast.unparse(ast.fix_missing_locations(tree)) + "\n"


_JS_FUNCTION = re.compile(r"((?:async\s+)?function\s*[\w$]*\s*\([^)]*\)\s*\{)")


def _stub_js(content: str) -> str:
    """Every `function` body cut down to a TODO (a brace-counted scan: enough for a reference)."""
    out, pos = [], 0
    for match in _JS_FUNCTION.finditer(content):
        if match.start() < pos:
            continue
        out.append(content[pos:match.end()])
        depth, i = 1, match.end()
        while i < len(content) and depth:
            depth += {"{": 1, "}": -1}.get(content[i], 0)
            i += 1
        out.append('\n  // TODO: implement\n  throw new Error("not implemented");\n}')
        pos = i
    out.append(content[pos:])
    return "// TODO: implement the ticket\n" + "".join(out)


def stub(files: dict[str, str]) -> dict[str, str]:
    """The good reference with every function body replaced by a TODO that raises: the same
    names and files, nothing done."""
    out = dict(files)
    for rel, content in files.items():
        if not _judged_path(rel):
            continue
        if rel.endswith(".py"):
            out[rel] = _stub_python(content) or "# TODO: implement the ticket\n"
        elif rel.endswith((".js", ".ts")):
            out[rel] = _stub_js(content)
    return out


@dataclass(frozen=True)
class Pair:
    """Two submissions of one task the judge must rank: `better` strictly better than `worse`
    on `axis` (over_engineering: lower; completeness: higher)."""

    task: str
    axis: str
    name: str  # "minimal vs over-built", "complete vs stub"
    better: Submission
    worse: Submission


def task_submission(task, files: dict[str, str]) -> Submission:
    """Files written for a task ({path: content}: the changed and added ones in full) as the
    judge sees them: a fixture task's diff against its seed and fixture, else the files. A
    file left out is unchanged, not deleted."""
    if task.kind != "fixture":
        return files_submission(files)
    before = {}
    for rel in files:
        path = Path(task.fixture) / rel if task.fixture is not None else None
        if rel in task.seed:
            before[rel] = task.seed[rel]
        elif path is not None and path.is_file():
            before[rel] = _read(path)
    return diff_submission(before, files)


def pairs_for(task) -> list[Pair]:
    """The judge pairs of a task, made from its good reference: minimal vs over-built on
    over_engineering, complete vs stub on completeness (for the axes the task is judged on).
    None for a task without a good reference or with no source file the pairs can change."""
    if task.refs is None:
        return []
    good = dict(task.refs.good)
    variants = {"over_engineering": ("minimal vs over-built", over_built(good)),
                "completeness": ("complete vs stub", stub(good))}
    found = []
    for axis in task_axes(task):
        name, worse = variants[axis]
        if worse == good:
            continue
        found.append(Pair(task.name, axis, name, task_submission(task, good), task_submission(task, worse)))
    return found


def prove_pair(ask, pair: Pair, ticket: str, votes: int = 1) -> tuple[str | None, float, int]:
    """(None when the judge ranks the pair rightly, else one sentence; its cost; its requests)."""
    better = judge_axis(ask, pair.axis, ticket, pair.better, votes)
    worse = judge_axis(ask, pair.axis, ticket, pair.worse, votes)
    cost, requests = better.cost_usd + worse.cost_usd, better.requests + worse.requests
    if better.score is None or worse.score is None:
        why = better.status if better.score is None else worse.status
        return f"{pair.task} ({pair.name}, {pair.axis}): not judged: {why}", cost, requests
    ok = better.score < worse.score if pair.axis == "over_engineering" else better.score > worse.score
    if ok:
        return None, cost, requests
    return (f"{pair.task} ({pair.name}, {pair.axis}): the judge scored the better one {better.score} "
            f"and the worse one {worse.score}; it must rank the worse one strictly worse"), cost, requests
