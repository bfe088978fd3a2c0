"""The judged graders of `claude plugin eval` suites (`llm` and `baseline`), run by the judge.

Under `--ponybench-judge` an imported case's judged graders run through the same path as the
judged axes (judging.py): the pinned CLI against the judge model (in rehearsal, the scripted
judge), strict answers, each malformed answer asked again once, cost on the spend ledger as
judge cost, kept sealed in the cell's records and reused by a rescore.

- `llm`: the grader's rubric (its `rubric`, `prompt`, `criteria` or `instructions` field, or
  the body of its graders/<name>.md) against the agent's work: its final answer and the files
  it wrote. It passes on 2 of 3 votes, as in `claude plugin eval`.
- `baseline`: the agent's work against a reference transcript (`reference`, `baseline_file`
  or `transcript`: a file in the case folder, a stream-json transcript or plain text): it
  passes when 2 of 3 votes find the work at least as good as the reference at what the
  ticket asks (and by the grader's rubric, when it has one).

Each vote is one JSON object, `{"pass": true|false, "why": "one line"}`. A verdict needs 2
votes that agree; fewer (malformed answers, retried once each) is "not judged", never a pass
or a fail. An API failure is an infra error of the verdict, never of the cell.

Proven before it counts, like the axes: each grader's pair is a pass example (the case's
`ponybench: {judge_pair: {pass: ...}}`, else its `ponybench: rehearsal:` block, else, for a
`baseline` grader, the reference transcript itself) and a fail example (`judge_pair.fail`,
else an agent that did nothing and says so). The judge must pass the first and fail the second.
A case written for `claude plugin eval` alone has no pass example for an `llm` grader, and no
work can be made up that surely meets any rubric: its judge is proven on the fail example
alone (it must not pass an agent that did nothing), and the proof line says how many pairs
had no pass side.
"""
from __future__ import annotations

import hashlib
import json
import os
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from pytest_ponybench.judge import judge
from pytest_ponybench.store import tree

KINDS = ("llm", "baseline")
VOTES = 3  # `claude plugin eval`'s rule: a judged grader passes on 2 of 3 votes
NEEDED = 2  # votes that must agree for a verdict
RUBRIC_KEYS = ("rubric", "prompt", "criteria", "instructions")
REFERENCE_KEYS = ("reference", "baseline_file", "transcript")
MAX_REFERENCE = 20_000  # characters of a reference transcript the judge is shown
RECORD_PREFIX = "graders-"  # a cell's record kind: graders-<fingerprint>
SPEND_NAME = "/graders" + judge.SPEND_SUFFIX  # ledger lines "<cell>/graders/judge": judge cost
# What an agent that did nothing answers: the fail side of every grader's default pair.
REFUSAL = "I could not do this task, so I changed nothing and wrote no file."

FRAMES = {
    "llm": (
        "GRADER: llm\n"
        "Decide whether the agent's work meets the rubric below. Judge only what the rubric asks; "
        "the agent's work is its final answer and the files it wrote.\n"
        "Answer: {\"pass\": true or false, \"why\": \"one line\"}"
    ),
    "baseline": (
        "GRADER: baseline\n"
        "Decide whether the agent's work is at least as good as the reference transcript's at what "
        "the ticket asks (and by the rubric below, when there is one). Pass when it is as good or "
        "better; fail when it is worse.\n"
        "Answer: {\"pass\": true or false, \"why\": \"one line\"}"
    ),
}


def frame_hash() -> str:
    """Changes whenever the graders' framing, answer shape or voting rule changes."""
    text = json.dumps([judge.SYSTEM, FRAMES, VOTES, NEEDED, judge.RETRIES], sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:12]


def fingerprint(model_id: str, cli_version: str, path: str = "cli") -> str:
    """The graders' judge: model id, the framing's hash, CLI version and path. A grader's own
    rubric and reference are in its `key`, checked per grader on reuse."""
    text = json.dumps([model_id, frame_hash(), cli_version, path, "graders"])
    return hashlib.sha256(text.encode()).hexdigest()[:12]


@dataclass(frozen=True)
class Work:
    """What the judge is shown of one run: its final answer and the files it wrote."""

    answer: str
    files: tuple = ()  # ((path, content), ...)

    def text(self) -> str:
        parts = [f"### Final answer\n```\n{self.answer.strip() or '(no final answer)'}\n```\n"]
        if self.files:
            parts += [f"### {rel}\n```\n{content.rstrip()}\n```\n" for rel, content in self.files]
        else:
            parts.append("(no file written)\n")
        return judge._bounded("".join(parts))


def work_of(block) -> Work | None:
    """A {answer, files} block of case.yaml as Work; None when it is no such mapping."""
    if not isinstance(block, dict):
        return None
    files = block.get("files") or {}
    if not isinstance(files, dict):
        return None
    return Work(str(block.get("answer") or ""), tuple(sorted((str(k), str(v)) for k, v in files.items())))


@dataclass(frozen=True)
class JudgedGrader:
    name: str
    kind: str
    rubric: str = ""
    reference: str = ""  # the reference transcript, as text (baseline)
    problem: str = ""  # why it cannot run (no rubric, no reference): one sentence
    pass_example: Work | None = None
    fail_example: Work = Work(REFUSAL)

    @property
    def label(self) -> str:
        return f"{self.name} ({self.kind})"

    @property
    def key(self) -> str:
        """Identifies what this grader asks: reuse a kept verdict only under the same key."""
        text = json.dumps([frame_hash(), self.kind, self.rubric, self.reference])
        return hashlib.sha256(text.encode()).hexdigest()[:12]


def transcript_text(raw: str) -> str:
    """A reference transcript as the judge reads it: the assistant's text and tool calls of a
    stream-json transcript, then its result; any other text as it is."""
    lines, parsed = [], 0
    for line in raw.splitlines():
        try:
            event = json.loads(line)
        except ValueError:
            continue
        if not isinstance(event, dict):
            continue
        parsed += 1
        if event.get("type") == "assistant":
            for block in ((event.get("message") or {}).get("content") or []):
                if not isinstance(block, dict):
                    continue
                if block.get("type") == "text":
                    lines.append(str(block.get("text", "")))
                elif block.get("type") == "tool_use":
                    lines.append(f"[tool {block.get('name')}: {json.dumps(block.get('input'), sort_keys=True)[:2000]}]")
        elif event.get("type") == "result" and isinstance(event.get("result"), str):
            lines.append(f"[final answer] {event['result']}")
    text = "\n".join(lines) if parsed else raw
    return text if len(text) <= MAX_REFERENCE else text[:MAX_REFERENCE] + "\n[ponybench: reference cut]\n"


def from_grader(grader: dict, case_dir: Path, raw_case: dict) -> JudgedGrader:
    """One `llm` or `baseline` grader of a case, with what it needs to run (or why it cannot)."""
    name, kind = str(grader["name"]), grader["type"]
    rubric = next((str(grader[k]).strip() for k in RUBRIC_KEYS if isinstance(grader.get(k), str) and grader[k].strip()), "")
    block = raw_case.get("ponybench")
    if not isinstance(block, dict):
        block = {}
    pair = block.get("judge_pair")
    if not isinstance(pair, dict):
        pair = {}
    pass_example = work_of(pair.get("pass")) or work_of(block.get("rehearsal"))
    fail_example = work_of(pair.get("fail")) or Work(REFUSAL)
    reference, problem = "", ""
    if kind == "llm" and not rubric:
        problem = (f"grader {name} (llm) has no rubric: give it a `rubric` field or write the rubric as "
                   f"the body of graders/{name}.md")
    if kind == "baseline":
        rel = next((grader[k] for k in REFERENCE_KEYS if isinstance(grader.get(k), str) and grader[k]), None)
        if rel is None:
            problem = (f"grader {name} (baseline) names no reference transcript: give it `reference: <file in "
                       f"the case folder>`")
        else:
            path = (Path(case_dir) / rel)
            inside = os.path.realpath(path).startswith(os.path.realpath(case_dir) + os.sep)
            if not inside or not path.is_file():
                problem = f"grader {name} (baseline): its reference {rel!r} is not a file in {case_dir}"
            else:
                reference = transcript_text(path.read_text(encoding="utf-8", errors="replace"))
                # The reference itself is as good as the reference: the default pass example.
                pass_example = pass_example or Work(reference)
    return JudgedGrader(name, kind, rubric, reference, problem, pass_example, fail_example)


def prompt(grader: JudgedGrader, ticket: str, work: Work) -> str:
    parts = [FRAMES[grader.kind], f"## The ticket\n\n{ticket.strip()}"]
    if grader.rubric:
        parts.append(f"## The rubric\n\n{grader.rubric}")
    if grader.kind == "baseline":
        parts.append(f"## The reference transcript\n\n```\n{grader.reference.strip()}\n```")
    parts.append(f"## The agent's work\n\n{work.text()}")
    parts.append(f"Decide by the {grader.kind} grader above. Reply with the JSON object only.")
    return "\n\n".join(parts) + "\n"


def parse_verdict(text) -> tuple[bool | None, str, str]:
    """(pass, why, "") for an answer of exactly the shape; (None, "", what is wrong) else."""
    if not isinstance(text, str) or not text.strip():
        return None, "", "the answer is empty"
    body = text.strip()
    fenced = judge._FENCED.match(body)
    if fenced:
        body = fenced.group(1).strip()
    try:
        data = json.loads(body)
    except ValueError:
        return None, "", f"the answer is not one JSON object: {' '.join(text.split())[:80]!r}"
    if not isinstance(data, dict) or set(data) != {"pass", "why"}:
        keys = sorted(data) if isinstance(data, dict) else type(data).__name__
        return None, "", f"the answer must have exactly the keys pass, why; it has {keys}"
    if not isinstance(data["pass"], bool):
        return None, "", f"pass must be true or false, not {data['pass']!r}"
    why = data["why"].strip() if isinstance(data["why"], str) else ""
    if not why or "\n" in why or len(why) > 300:
        return None, "", "why must be one line of at most 300 characters"
    return data["pass"], why, ""


@dataclass
class Verdict:
    name: str
    kind: str
    key: str = ""
    passed: bool | None = None
    votes: list = field(default_factory=list)  # True, False, or None (not judged) per vote
    why: str = ""
    status: str = judge.JUDGE_STATUS_OK
    cost_usd: float = 0.0
    requests: int = 0

    @property
    def label(self) -> str:
        return f"{self.name} ({self.kind})"

    def line(self) -> str:
        """'tone (llm): pass 3/3: why', or 'tone (llm): not judged: why'."""
        if self.passed is None:
            return f"{self.label}: {self.status}"
        yes = sum(1 for v in self.votes if v is True)
        return f"{self.label}: {'pass' if self.passed else 'fail'} {yes}/{len(self.votes)}: {self.why}"


def judge_grader(ask, grader: JudgedGrader, ticket: str, work: Work, votes: int = VOTES) -> Verdict:
    """`votes` answers at once, each asked again once when malformed; passes on NEEDED passing
    votes, fails on NEEDED failing ones, else not judged."""
    out = Verdict(grader.name, grader.kind, grader.key)
    text = prompt(grader, ticket, work)

    def one_vote(_):
        requests, cost, problem = 0, 0.0, ""
        for _try in range(1 + judge.RETRIES):
            reply = ask(text)
            requests += 1
            cost += reply.cost_usd
            if reply.status != "finished":
                return None, "", "", f"infra_error: {reply.error or reply.status}"[:300], requests, cost
            passed, why, problem = parse_verdict(reply.text)
            if passed is not None:
                return passed, why, "", "", requests, cost
        return None, "", problem, "", requests, cost

    with ThreadPoolExecutor(max_workers=votes) as pool:
        results = list(pool.map(one_vote, range(votes)))
    problem, whys = "", {True: "", False: ""}
    for passed, why, bad, infra, requests, cost in results:
        out.requests += requests
        out.cost_usd += cost
        out.votes.append(passed)
        if passed is not None and not whys[passed]:
            whys[passed] = why
        problem = problem or bad
        if infra and out.status == judge.JUDGE_STATUS_OK:
            out.status = infra
    out.cost_usd = round(out.cost_usd, 6)
    if out.status != judge.JUDGE_STATUS_OK:
        return out
    needed = min(NEEDED, votes // 2 + 1)  # a proof asks one vote: that one decides
    for side in (True, False):
        if sum(1 for v in out.votes if v is side) >= needed:
            out.passed, out.why = side, whys[side]
            return out
    valid = sum(1 for v in out.votes if v is not None)
    out.status = (f"not judged: {valid} valid vote(s), {needed} must agree"
                  + (f" (malformed answers: {problem})" if problem else ""))[:300]
    return out


def prove(ask, grader: JudgedGrader, ticket: str, task_name: str) -> tuple[str | None, float, int]:
    """(None when the judge passes the grader's pass example and fails its fail example, else
    one sentence; the cost; the requests). One vote each, as the axes' pairs. Without a pass
    example, only the fail example is asked (see the module's docstring)."""
    good = judge_grader(ask, grader, ticket, grader.pass_example, 1) if grader.pass_example is not None else None
    bad = judge_grader(ask, grader, ticket, grader.fail_example, 1)
    cost, requests = bad.cost_usd + (good.cost_usd if good else 0.0), bad.requests + (good.requests if good else 0)
    where = f"{task_name} (grader {grader.label}, " + ("pass example vs fail example)" if good else "fail example)")
    for verdict in (good, bad) if good else (bad,):
        if verdict.status != judge.JUDGE_STATUS_OK or not verdict.votes or verdict.votes[0] is None:
            status = verdict.status if verdict.status != judge.JUDGE_STATUS_OK else "not judged: a malformed answer"
            return f"{where}: {status}", cost, requests
    if (good is None or good.votes[0] is True) and bad.votes[0] is False:
        return None, cost, requests
    if good is None:
        return f"{where}: the judge said pass of the fail example (an agent that did nothing); it must fail it", \
            cost, requests
    return (f"{where}: the judge said {'pass' if good.votes[0] else 'fail'} of the pass example and "
            f"{'pass' if bad.votes[0] else 'fail'} of the fail example; it must pass the first and fail the second"), \
        cost, requests


# --------------------------------------------------------------------------- a cell's work


def cell_work(task, ws: Path, key: bytes | None, answer: str | None) -> Work:
    """The agent's final answer and the files it created or changed against the seed (every
    text file, not only code: a grader may ask about any), harness files and .git out."""
    from pytest_ponybench.cell import workspace
    from pytest_ponybench.scoring import metrics

    ws = Path(ws)
    seeded = workspace.seed_manifest(ws, task.seed, key)
    listed = []
    for rel, entry in tree.walk(ws, lambda rel, name: name.startswith((".", "_ponybench"))):
        if entry.is_dir(follow_symlinks=False):
            continue
        if seeded.get(rel) is not None and seeded[rel] == metrics._digest_file(Path(entry.path)):
            continue
        listed.append(rel)  # links and special files too: read_files names them, never follows or opens them
    files = list(judge.read_files(ws, listed).items())
    return Work(answer if isinstance(answer, str) else "", tuple(files))


# --------------------------------------------------------------------------- the record's fields

FIELDS = ("judged_graders", "judged_graders_passed", "graders_judge_status", "graders_judge_fingerprint",
          "graders_judge_cost_usd", "graders_judge_reused")


def record_fields(verdicts: list[Verdict], not_run: list[str], fp: str, status: str = judge.JUDGE_STATUS_OK,
                  reused: bool = False) -> dict:
    """A cell's judged graders as flat, JSON-safe fields: each verdict's line; whether every
    judged grader passed (None when one was not judged); the graders still not run."""
    passed = None
    if verdicts and all(v.passed is not None for v in verdicts) and not not_run:
        passed = all(v.passed for v in verdicts)
    bad = [v.status for v in verdicts if v.status != judge.JUDGE_STATUS_OK]
    return {"judged_graders": "; ".join(v.line() for v in verdicts), "judged_graders_passed": passed,
            "graders_not_run": ", ".join(not_run),
            "graders_judge_status": status if status != judge.JUDGE_STATUS_OK else (bad[0] if bad else status),
            "graders_judge_fingerprint": fp, "graders_judge_cost_usd": round(sum(v.cost_usd for v in verdicts), 6),
            "graders_judge_reused": reused}


def verdict_data(v: Verdict) -> dict:
    return {"name": v.name, "kind": v.kind, "key": v.key, "passed": v.passed, "votes": list(v.votes),
            "why": v.why, "status": v.status, "cost_usd": v.cost_usd}


def verdict_from(data) -> Verdict | None:
    """A kept verdict (verdict_data) as a Verdict; None for anything else."""
    if not isinstance(data, dict) or not isinstance(data.get("name"), str) or data.get("kind") not in KINDS:
        return None
    votes = data.get("votes")
    if not isinstance(votes, list):
        votes = []
    return Verdict(data["name"], data["kind"], str(data.get("key") or ""),
                   data.get("passed") if isinstance(data.get("passed"), bool) else None,
                   [v if isinstance(v, bool) else None for v in votes], str(data.get("why") or ""),
                   str(data.get("status") or ""), float(data.get("cost_usd") or 0.0))


# --------------------------------------------------------------------------- the rehearsal's judge
