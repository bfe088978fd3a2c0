"""One cell, start to end: seed a workspace, run the agent, score what it left behind.

This is the whole lifecycle; the pytest item in `collect.py` only calls `run_cell` (or
`rescore_cell`) and turns the record into properties and an outcome. Scoring reads only the
kept workspace, so a rescore recomputes every figure with no agent call.
"""
from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from . import agent, checks, metrics, session, workspace
from .spec import ArmSpec, SpecError, TaskSpec, resolve_plugin_dir

AGENT_RECORD = "_ponybench.agent.json"  # how the agent run ended, for rescoring
STATUS_ARM_UNPROVEN = "arm_unproven"  # rehearsal: the arm's text never reached the model


@dataclass(frozen=True)
class Cell:
    task: TaskSpec
    arm: ArmSpec
    model: str  # alias as selected, e.g. "haiku"
    model_id: str
    run: int

    @property
    def id(self) -> str:
        return f"{self.task.name}__{self.arm.name}__{self.model}__{self.run}"

    @property
    def spec_hash(self) -> str:
        """Changes whenever the task, the arm or the model id changes: old results of a changed
        spec are never silently reused."""
        key = f"{self.task.spec_hash}:{self.arm.spec_hash}:{self.model_id}"
        return hashlib.sha256(key.encode()).hexdigest()[:12]


class Rehearsal(Protocol):
    """What a cell needs from rehearsal mode (see rehearsal.py)."""

    def env_for(self, cell: Cell, workspace: Path) -> dict[str, str]: ...

    def prove(self, cell: Cell) -> str | None: ...


@dataclass
class CellContext:
    run_dir: Path
    claude: str | None
    timeout: float
    arms_dir: Path
    rehearsal: Rehearsal | None = None
    max_budget_usd: float | None = None  # passed to the CLI as --max-budget-usd
    confine: bool = False  # run the agent under bubblewrap: only its workspace writable
    exclusive: bool = True  # no other cell runs beside this one (False on an xdist worker)


def append_text(arm: ArmSpec) -> str:
    return f"{arm.prompt}\n\n{agent.WRITE_AND_STOP}" if arm.prompt else agent.WRITE_AND_STOP


def _write_json(path: Path, data: dict) -> None:
    session.write_atomic(path, json.dumps(data, indent=1))


def _read_json(path: Path) -> dict:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        return data if isinstance(data, dict) else {}
    except (OSError, ValueError):
        return {}


def identity(cell: Cell) -> dict:
    return {"cell": cell.id, "spec_hash": cell.spec_hash, "task": cell.task.name, "arm": cell.arm.name,
            "model": cell.model, "model_id": cell.model_id, "run": cell.run, "kind": cell.task.kind}


def kept_result(cell: Cell, run_dir: Path) -> dict | None:
    """Resume: the finished record of this cell in a kept run, or None when it must run.

    A workspace without a result was in flight when the run died: it reruns from a fresh seed.
    A result from a different task or arm spec is never reused; its workspace is moved aside
    (kept, since it was paid for) and the cell runs again."""
    ws = run_dir / cell.id
    record = _read_json(ws / workspace.RESULT)
    if not record or record.get("status") in (agent.STATUS_NOT_RUN, "interrupted"):
        return None
    if record.get("spec_hash") != cell.spec_hash:
        ws.rename(ws.with_name(f"{ws.name}.stale-{record.get('spec_hash') or 'unknown'}"))
        return None
    return {**record, "reused": True}


def run_cell(cell: Cell, ctx: CellContext) -> dict:
    """Run one cell and return its record (see docs/architecture.md)."""
    ws = ctx.run_dir / cell.id
    workspace.fresh(ws)  # a rerun starts from a fresh seed, never a half-done workspace
    _write_json(ws / workspace.IDENTITY, identity(cell))
    try:
        plugin_dir = resolve_plugin_dir(cell.arm, ctx.arms_dir)
    except SpecError as exc:
        _write_json(ws / AGENT_RECORD, {"status": agent.STATUS_NOT_RUN, "error": str(exc)})
        return score_cell(cell, ws)
    workspace.seed(cell.task, ws)
    argv = agent.build_argv(ctx.claude, cell.task.prompt, cell.model_id, append_text(cell.arm),
                            plugin_dir, ctx.max_budget_usd)
    env = agent.agent_env(ctx.rehearsal.env_for(cell, ws) if ctx.rehearsal is not None else {})
    if ctx.confine:
        argv = agent.confine(argv, ws, env)
    before = workspace.outside_snapshot(ctx.run_dir)
    outcome = agent.run(argv, ws, env, ctx.timeout, ws / workspace.TRANSCRIPT, ws / workspace.STDERR)
    changed_beside = workspace.changed_entries(before, workspace.outside_snapshot(ctx.run_dir))
    for path in (ws / workspace.TRANSCRIPT, ws / workspace.STDERR):
        agent.bound_file(path)
    transcript = agent.read_transcript(ws / workspace.TRANSCRIPT)
    written = transcript.written
    if ctx.confine:  # a write the sandbox's private /tmp absorbed never reached this machine
        written = [p for p in written if not agent.absorbed_by_confinement(p, ws, env)]
    escaped = workspace.blame(ws, changed_beside, written, ctx.exclusive)
    status, error = agent.judge(outcome, transcript, ws / workspace.STDERR, ctx.timeout)
    if status == agent.STATUS_FINISHED:
        wrong = agent.verify_arm(transcript.init, plugin_dir)
        if wrong is None and ctx.rehearsal is not None:
            wrong = ctx.rehearsal.prove(cell)
            status = STATUS_ARM_UNPROVEN if wrong else status
        elif wrong is not None:
            status = agent.STATUS_WRONG_ARM
        error = wrong or ""
    _write_json(ws / AGENT_RECORD, {"status": status, "error": error, "rehearsal": ctx.rehearsal is not None,
                                    "escaped": escaped, "confined": ctx.confine, "exit_code": outcome.exit_code,
                                    "timed_out": outcome.timed_out, "wall_s": round(outcome.wall_s, 3),
                                    "plugin_dir": plugin_dir, "argv": argv})
    # The spend is on the ledger before the result exists: a kill between the two can make a
    # resume pay for this cell again, never hide what it cost.
    session.record_spend(ctx.run_dir, cell.id, agent.usage_metrics(transcript)["cost_usd"])
    return score_cell(cell, ws)


def score_cell(cell: Cell, ws: Path) -> dict:
    """Score a kept workspace: metrics, checks and usage. No agent call; safe to repeat."""
    ran = _read_json(ws / AGENT_RECORD)
    status = str(ran.get("status") or agent.STATUS_BAD_OUTPUT)
    error = str(ran.get("error") or ("" if ran else "no record of the agent run in this workspace"))
    transcript = agent.read_transcript(ws / workspace.TRANSCRIPT)
    answer = (transcript.result or {}).get("result") or transcript.last_text
    task = cell.task
    record = {**identity(cell), "status": status, "ran": status == agent.STATUS_FINISHED,
              "error": error, "rehearsal": bool(ran.get("rehearsal")), "reused": False,
              # Paths the agent wrote beside its workspace (none can, when confined).
              "escaped": ",".join(ran.get("escaped") or []), "workspace": str(ws.resolve())}
    record.update(agent.usage_metrics(transcript))
    if status == agent.STATUS_NOT_RUN:
        record.update(metrics.EMPTY)
    else:
        record.update(metrics.cell_stats(ws, task.kind, workspace.fixture_manifest(ws), answer))
    if record["ran"]:
        verdicts = checks.run_checks(task.checks, ws, task.file, task.check_timeout)
        # Files the ticket says not to change: touching one fails correct, with the file named.
        verdicts = checks.with_forbidden(verdicts, checks.forbidden_edits(task, ws))
    else:
        # What an agent left behind when it never ran properly does not count as its answer.
        verdicts = {axis: checks.Verdict(False, f"not counted: the agent never ran properly ({status})")
                    for axis in ("correct", "safe")}
    delivered = record["total_loc"] > 0
    for axis in ("correct", "safe"):
        if axis in verdicts:
            ok, reason = verdicts[axis].ok, verdicts[axis].reason
        elif axis == "correct" and task.kind != "surgical":
            ok, reason = delivered, "ok" if delivered else "the agent delivered no code"
        else:
            ok, reason = True, "no check on this axis"
        record[axis], record[f"{axis}_reason"] = int(ok), reason
    failure = failure_line(record)
    record["passed"] = failure is None
    record["failure"] = failure or ""
    _write_json(ws / workspace.RESULT, record)
    return record


def failure_line(record: dict) -> str | None:
    """None when the cell passes; else one line saying which gate failed and why."""
    if not record["ran"]:
        return f"agent never ran properly ({record['status']}): {record['error']}"
    if record.get("escaped"):
        return f"the agent wrote outside its workspace: {record['escaped']}"
    if record["kind"] != "surgical" and record["total_loc"] == 0:
        return "the agent finished but delivered no code"
    if not record["correct"]:
        return f"incorrect: {record['correct_reason']}"
    if not record["safe"]:
        return f"unsafe: {record['safe_reason']}"
    return None


def read_identity(ws: Path) -> dict:
    return _read_json(ws / workspace.IDENTITY)
