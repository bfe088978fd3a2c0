"""One cell, start to end: seed a workspace, run the agent, score what it left behind.

This is the whole lifecycle; the pytest item in `collect.py` only calls `run_cell` (or
`score_cell` for a rescore) and turns the record into properties and an outcome.

Scoring is a pure function of the kept workspace: metrics read it, checks run in disposable
copies of it (one per axis), and nothing is written into it. `run_cell` writes the cell's
result once, when the cell finishes; from then on nothing under the workspace changes, so a
rescore of an unchanged run gives the same figures every time.
"""
from __future__ import annotations

import atexit
import hashlib
import os
import shutil
import tempfile
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path

from pytest_ponybench.cell import agent, confine as confinement, transcript as transcripts, workspace
from pytest_ponybench.scoring import checks, fingerprint, metrics
from pytest_ponybench.store import record as records
from pytest_ponybench.store.record import CellRecord, RecordError
from pytest_ponybench.store.rundir import (CELL_IDENTITY, RunDir, move_cell, read_record, valid_cost,
                                           write_record)
from pytest_ponybench.specs.spec import ArmSpec, SpecError, TaskSpec, resolve_plugin_dir

# The harness's records of a cell, kept beside its workspace (rundir.records_dir), sealed
# with the run's key: how the agent run ended, and the cell's result.
AGENT_RECORD = "agent"
RESULT = workspace.RESULT
# The cell's verdicts and the key they were judged under (fingerprint.verdict_key): a rescore
# or a resume reuses them while the key holds, and judges again once it changes.
VERDICTS = "verdicts"
ATTEMPT_SUFFIX = ".attempt-"  # <cell>.attempt-N: a failed attempt's workspace, kept (it was paid for)


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


@dataclass
class CellContext:
    run_dir: RunDir
    claude: str | None
    timeout: float
    arms_dir: Path
    hook: object  # config.hook: pytest_ponybench_agent_env and _prove_arm (hookspec.py)
    rehearsal: bool = False  # the scripted model plays the agent: say so in every record
    max_budget_usd: float | None = None  # passed to the CLI as --max-budget-usd
    # max_budget_usd is what was left of the run's budget, below the per-cell cap: a CLI that
    # stops there was cut by the run's budget (budget_cut), not by a cap the arm ran under.
    run_cut: bool = False
    confine: bool = False  # run the agent under bubblewrap (confine.confine): only its workspace writable
    # The agent's cgroup (memory, processes), where the machine has cgroups; None: no cgroup.
    agent_limits: agent.AgentLimits | None = agent.AgentLimits()
    exclusive: bool = True  # no other cell runs beside this one (False on an xdist worker)
    retries: int = 2  # runs again of a cell that ended as infra_error
    max_cost: float | None = None  # the run's budget: no retry starts once it is spent
    spent: object = None  # what the whole run has spent (a remote worker's own ledger is partial)
    retry_wait: float = 10.0  # seconds before the first retry, doubling; also the 429 pause
    sleep: object = time.sleep  # tests replace it to see the waits without waiting


def append_text(arm: ArmSpec) -> str:
    return f"{arm.prompt}\n\n{agent.WRITE_AND_STOP}" if arm.prompt else agent.WRITE_AND_STOP


def _read(ws: Path, kind: str, key: bytes | None, problems: list | None = None) -> dict:
    """A record of the cell folder `ws` (verified when there is a key), {} when there is none
    or it does not verify; why not, appended to `problems`."""
    data, problem = read_record(ws, kind, key)
    if problem and problems is not None:
        problems.append(problem)
    return data if isinstance(data, dict) else {}


def identity(cell: Cell) -> dict:
    return {"cell": cell.id, "spec_hash": cell.spec_hash, "task": cell.task.name, "arm": cell.arm.name,
            "model": cell.model, "model_id": cell.model_id, "run": cell.run, "kind": cell.task.kind}


def kept_result(cell: Cell, run_dir: RunDir) -> CellRecord | None:
    """Resume: the finished record of this cell in a kept run, or None when it must run.

    A workspace without a result was in flight when the run died: it reruns from a fresh seed.
    A result from a different task or arm spec is never reused; its workspace is moved aside
    (kept, since it was paid for) and the cell runs again."""
    ws = run_dir.cell_dir(cell.id)
    record = finished_record(ws, run_dir)
    if record is None:
        return None
    if record.spec_hash != cell.spec_hash:
        set_aside(ws, record.spec_hash)
        return None
    if record.ran and record.verdict_key != verdict_key(cell.task, ws):
        # Judged under another harness or library version (or its workspace changed since):
        # its verdicts are judged again, the agent is not run again.
        record = finish(cell, ws, run_dir.key)
    return replace(record, reused=True)


def sealed_result(ws: Path, run_dir: RunDir) -> CellRecord | None:
    """The result kept beside the cell folder `ws` that the run's key verifies, whatever its
    status (an infra error's, a budget cut's too), or None. What results.jsonl is written
    again from when an agent overwrote it (controller.Gathering.recovered)."""
    if not ws.is_dir() or ws.is_symlink() or result_problem(ws, run_dir) is not None:
        return None
    data = _read(ws, RESULT, run_dir.key)
    try:
        return CellRecord.from_json(data) if data else None
    except RecordError:  # sealed by a harness whose records had other fields: none to reuse
        return None


def finished_record(ws: Path, run_dir: RunDir, move: bool = True) -> CellRecord | None:
    """The result kept for a cell that finished (whatever its spec), or None. Only a result
    the run's key verifies counts: anything else (an agent's forgery, a result of another
    cell copied in, a run whose key is gone) is ignored and the cell runs again;
    `refused_lines` is what the controller says about each such cell, once, before any runs."""
    record = sealed_result(ws, run_dir)
    if record is not None and record.status in records.INFRA | records.CUT:
        # The API failed it, or the run's budget cut it: run it again, keeping the failed
        # (paid) workspace as an attempt.
        if move:
            move_cell(ws, next_attempt_dir(ws))
        return None
    if record is None or record.status in (records.NOT_RUN, records.INTERRUPTED):
        return None
    return record


def result_problem(ws: Path, run_dir: RunDir) -> str | None:
    """Why the result kept beside `ws` is not trusted, or None (trusted, or there is none)."""
    data, problem = read_record(ws, RESULT, run_dir.key)
    if problem:
        return problem
    if data is None:
        return None
    if run_dir.key is None:
        return run_dir.key_problem
    if not isinstance(data, dict) or data.get("cell") != ws.name:
        return f"it names another cell ({data.get('cell') if isinstance(data, dict) else data!r})"
    return None


def refused_lines(run_dir: RunDir, rescore: bool, survey: list | None = None) -> list[str]:
    """One line for each kept cell whose records a resume (its result) or a rescore (every
    record it reads) will not trust, and why. `survey`: a rescore's `rescore_survey` of the
    run, when the caller has it already."""
    lines = []
    verb, then = ("rescore", "it is left out of the rescore") if rescore else ("resume", "the cell runs again")
    if rescore:
        found = [(kept.ws, kept.problem) for kept in (survey if survey is not None else rescore_survey(run_dir))]
    else:
        found = [(ws, result_problem(ws, run_dir)) for ws in run_dir.cell_dirs()]
    for ws, problem in found:
        if problem:
            lines.append(f"ponybench: {verb} refuses the records of {ws.name}: {problem}; {then}")
    return lines


@dataclass(frozen=True)
class KeptCell:
    """A kept cell folder as a rescore finds it: its verified identity ({} when it does not
    verify) and why its records are not trusted (None when they are)."""
    ws: Path
    identity: dict
    problem: str | None


def rescore_survey(run_dir: RunDir) -> list[KeptCell]:
    """Every kept cell folder of the run, its records verified once. A rescore needs this
    twice (the lines of refused cells, then each task's cells): read per task, it read every
    cell's records once per task of the run."""
    found = []
    for ws in run_dir.cell_dirs():
        read = read_record(ws, CELL_IDENTITY, run_dir.key)
        problem = rescore_problem(ws, run_dir.key, run_dir.key_problem, identity_read=read)
        found.append(KeptCell(ws, read[0] if isinstance(read[0], dict) else {}, problem))
    return found


def set_aside(ws: Path, spec_hash: str) -> None:
    """Keep a workspace of another spec (`spec_hash`, its record's) beside the run (it was
    paid for) instead of reusing it."""
    move_cell(ws, ws.with_name(f"{ws.name}.stale-{spec_hash or 'unknown'}"))


def next_attempt_dir(ws: Path) -> Path:
    """`<cell>.attempt-N` beside the workspace, N one more than any kept before."""
    # Tried in turn, never by a glob: a glob lists the whole run directory, every cell's.
    number = 1
    while os.path.lexists(ws.with_name(f"{ws.name}{ATTEMPT_SUFFIX}{number}")):
        number += 1
    return ws.with_name(f"{ws.name}{ATTEMPT_SUFFIX}{number}")


def retry_wait(ctx: CellContext, attempt: int) -> float:
    """Seconds before attempt `attempt + 1`: the base wait, doubled for each failed attempt."""
    return ctx.retry_wait * 2 ** (attempt - 1)


def run_cell(cell: Cell, ctx: CellContext) -> CellRecord:
    """Run one cell and return its record (see docs/architecture.md).

    A cell the model API failed (`infra_error`) runs again from a fresh seed, up to
    `ctx.retries` times, after growing waits; each failed attempt's workspace is kept beside
    as `<cell>.attempt-N` and its cost stays on the ledger and in the record's
    `infra_cost_usd`. An authentication error is never retried: the run stops (controller)."""
    ws = ctx.run_dir.cell_dir(cell.id)
    infra_cost = 0.0
    attempt = 1
    while True:
        ctx.run_dir.wait_for_pause(ctx.sleep)  # a 429 elsewhere holds every new attempt back
        ran = run_agent(cell, ctx, ws)
        if ran["rate_limited"]:
            ctx.run_dir.pause(retry_wait(ctx, attempt), cell.id)
        if (ran["status"] not in records.INFRA or attempt > ctx.retries
                or ran["api_error_status"] in transcripts.AUTH_STATUSES):
            break
        if ctx.max_cost is not None and (ctx.spent or ctx.run_dir.spent)() >= ctx.max_cost:
            ran["error"] += f"; not retried: the run's budget of ${ctx.max_cost:g} is spent"
            break
        infra_cost += ran["cost_usd"] or 0.0
        move_cell(ws, next_attempt_dir(ws))
        ctx.sleep(retry_wait(ctx, attempt))
        attempt += 1
    ran.update(attempts=attempt, infra_cost_usd=round(infra_cost, 6))
    key = ctx.run_dir.key
    write_record(ws, AGENT_RECORD, ran, key)
    return finish(cell, ws, key)


def run_agent(cell: Cell, ctx: CellContext, ws: Path) -> dict:
    """One attempt: a fresh workspace, the agent, the arm checked; how it ended (written to
    the workspace's agent record too, so a kill before the result still tells)."""
    key = ctx.run_dir.key
    workspace.fresh(ws)  # a rerun starts from a fresh seed, never a half-done workspace
    write_record(ws, CELL_IDENTITY, identity(cell), key)
    try:
        plugin_dir = resolve_plugin_dir(cell.arm, ctx.arms_dir)
    except SpecError as exc:
        ran = {"status": records.NOT_RUN, "error": str(exc), "rate_limited": False, "api_error_status": None,
               "cost_usd": None}
        write_record(ws, AGENT_RECORD, ran, key)
        return ran
    workspace.seed(cell.task, ws, key=key)
    argv = agent.build_argv(ctx.claude, cell.task.prompt, cell.model_id, append_text(cell.arm),
                            plugin_dir, ctx.max_budget_usd)
    env = agent.agent_env(ctx.hook.pytest_ponybench_agent_env(cell=cell, workspace=ws))
    if ctx.confine:
        argv = confinement.confine(argv, ws, env, run_dir=ctx.run_dir.path, needed=[plugin_dir])
    watch = workspace.watch_beside(ctx.run_dir.path)
    # The CLI writes its output in the cell's records folder, not in the workspace: an agent
    # that replaces, truncates or links its transcript or stderr while it runs cannot change
    # what its run cost, which plugins it loaded, or what the harness quotes from them. Both
    # move into the workspace once the CLI's whole tree is gone (agent.run kills it on every
    # way out, an interrupt included); whatever the agent left at those names is replaced.
    try:
        outcome = agent.run(argv, ws, env, ctx.timeout, workspace.cli_output(ws, workspace.TRANSCRIPT),
                            workspace.cli_output(ws, workspace.STDERR), limits=ctx.agent_limits,
                            confined=ctx.confine)
    finally:
        changed_beside = watch.changed()  # also closes the watch when the run raised
        workspace.put_back(ws)
    # Nothing runs in the workspace now: what no copy, walk or removal can take goes, named.
    skipped = workspace.remove_uncopyable(ws)
    for path in (ws / workspace.TRANSCRIPT, ws / workspace.STDERR):
        agent.bound_file(path)
    transcript = transcripts.read_transcript(ws / workspace.TRANSCRIPT)
    written = transcript.written
    if ctx.confine:  # a write the sandbox's private /tmp absorbed never reached this machine
        written = [p for p in written if not confinement.absorbed_by_confinement(p, ws, env)]
    escaped = workspace.blame(ws, changed_beside, written, ctx.exclusive)
    status, error = transcripts.judge(outcome, transcript, ws / workspace.STDERR, ctx.timeout)
    if status == records.FINISHED:
        wrong = transcripts.verify_arm(transcript.init, plugin_dir)
        if wrong is None:
            wrong = ctx.hook.pytest_ponybench_prove_arm(cell=cell, workspace=ws, transcript=transcript) or None
            status = records.ARM_UNPROVEN if wrong else status
        else:
            status = records.WRONG_ARM
        error = wrong or ""
    if status == records.CLI_ERROR and ctx.run_cut and transcripts.stopped_at_budget(transcript):
        status, error = records.BUDGET_CUT, budget_cut_error(ctx)
    cost = transcripts.usage_metrics(transcript)["cost_usd"]
    ran = {"status": status, "error": error, "rehearsal": ctx.rehearsal,
           "escaped": escaped, "confined": ctx.confine, "exit_code": outcome.exit_code,
           "timed_out": outcome.timed_out, "wall_s": round(outcome.wall_s, 3),
           "limits": outcome.limits,  # what the agent's cgroup met; None: it ran without one
           "plugin_dir": plugin_dir, "argv": argv, "cost_usd": cost, "skipped_files": skipped,
           "api_error_status": transcripts.api_error_status(transcript),
           "rate_limited": transcripts.saw_rate_limit(transcript)}
    # The spend is on the ledger before anything else is written: a kill or a full disk
    # between it and the result can make a resume pay for this cell again, never hide what it
    # cost (the ledger keeps room allocated for its next lines). A failed attempt's cost stays.
    try:
        ctx.run_dir.record_spend(cell.id, valid_cost(cost))  # a negative or NaN cost is no spend to subtract
        write_record(ws, AGENT_RECORD, ran, key)
    finally:
        agent.release_transcript(ws / workspace.TRANSCRIPT)
    return ran


def budget_cut_error(ctx: CellContext) -> str:
    """The one sentence of a cell the run's budget cut short."""
    return (f"the run's budget cut this cell: the CLI stopped at --max-budget-usd ${ctx.max_budget_usd:g}, what was "
            f"left of --ponybench-max-cost ${ctx.max_cost:g}; a resume runs it again")


def finish(cell: Cell, ws: Path, key: bytes | None = None) -> CellRecord:
    """Score the workspace the agent just left and write the cell's result beside it: the one
    write after the agent, and the mark a resume reads as "finished"."""
    record = score_cell(cell, ws, key)
    write_record(ws, RESULT, record.to_json(), key)
    return record


def score_cell(cell: Cell, ws: Path, key: bytes | None = None) -> CellRecord:
    """Score a kept workspace: metrics, checks and usage. No agent call, and no write under
    the workspace: the same workspace always gives the same record. With the run's key only
    records it verifies are read (`rescore_problem` refuses a cell whose records do not), and
    the verdicts kept beside it are reused while their key holds (`judged`)."""
    ran = _read(ws, AGENT_RECORD, key)
    status = str(ran.get("status") or records.BAD_OUTPUT)
    error = str(ran.get("error") or ("" if ran else "no record of the agent run in this workspace"))
    transcript = transcripts.read_transcript(ws / workspace.TRANSCRIPT)
    answer = (transcript.result or {}).get("result") or transcript.last_text
    task = cell.task
    # Its fields as they are found; a CellRecord once they are all there.
    fields = {**identity(cell), "status": status, "ran": status == records.FINISHED,
              "error": error, "rehearsal": bool(ran.get("rehearsal")), "reused": False,
              # Paths the agent wrote beside its workspace (none can, when confined).
              "escaped": ",".join(ran.get("escaped") or []), "workspace": str(ws.resolve()),
              "attempts": _whole(ran.get("attempts"), 1),
              "infra_cost_usd": float(ran.get("infra_cost_usd") or 0.0),
              # What the agent left that no program can copy (too deep, a pipe, a socket, a
              # link leading out): removed before scoring, named here; scored without it.
              "skipped_files": str(ran.get("skipped_files") or "")}
    fields.update(transcripts.usage_metrics(transcript))
    fields.update(transcripts.activity(transcript))
    if status == records.NOT_RUN:
        fields.update(metrics.EMPTY)
    else:
        fields.update(metrics.cell_stats(ws, task.kind, workspace.fixture_manifest(ws, key),
                                         workspace.seed_manifest(ws, task.seed, key), answer))
    if fields["ran"]:
        verdicts, fields["verdict_key"] = judged(task, ws, key)
    else:
        # What an agent left behind when it never ran properly does not count as its answer.
        verdicts = {axis: checks.Verdict(False, f"not counted: the agent never ran properly ({status})")
                    for axis in measured_axes(task)}
    broken = [v for v in verdicts.values() if v.instrument]
    if broken:  # the harness's instrument failed, not the agent: left out of the rates, named
        fields.update(status=records.INSTRUMENT_ERROR, error=f"instrument error: {broken[0].reason}")
    for axis in records.AXES:
        if axis in verdicts:
            fields[axis], fields[f"{axis}_reason"] = int(verdicts[axis].ok), verdicts[axis].reason
        else:
            # No check on this axis: nothing was measured, so the value is None (left out of
            # the axis's rate, '-' in every table), never a pass. Delivery has its own rate.
            fields[axis], fields[f"{axis}_reason"] = None, records.not_measured_reason(axis)
    scored = CellRecord.from_json(fields)  # the one check of its shape: a wrong type stops here, named
    failure = failure_line(scored)
    return replace(scored, passed=failure is None, failure=failure or "")


def _whole(value, default: int) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else default


def verdict_key(task: TaskSpec, ws: Path) -> str:
    """The key of the verdicts of `ws` under `task`: its files but the fixture's git data,
    which no check's copy holds (workspace.copy_ignore)."""
    return fingerprint.verdict_key(task, ws, skip=(".git",))


def judged(task: TaskSpec, ws: Path, key: bytes | None) -> tuple[dict[str, checks.Verdict], str]:
    """The verdicts of the workspace `ws` and their key: the cell's kept verdicts when they
    were judged under the same key (the same workspace files, checks, harness and deciding
    library versions), else judged now and kept, sealed with the run's key `key`. Without a
    key (a workspace made outside a run) nothing is kept or reused. Verdicts with an
    instrument error or a check that timed out are never kept: the instrument or the
    machine's load, not the code, may have decided them."""
    vkey = verdict_key(task, ws)
    kept = _read(ws, VERDICTS, key) if key is not None else {}
    if kept.get("key") == vkey:
        try:
            return {axis: checks.Verdict(**fields) for axis, fields in kept["verdicts"].items()}, vkey
        except (TypeError, AttributeError):
            pass  # kept by a harness whose verdicts had other fields: judge again
    verdicts = judge(task, ws)
    if key is not None and not any(v.instrument or v.timed_out for v in verdicts.values()):
        write_record(ws, VERDICTS, {"key": vkey, "verdicts": {a: asdict(v) for a, v in verdicts.items()}}, key)
    return verdicts, vkey


def measured_axes(task: TaskSpec) -> tuple[str, ...]:
    """The axes a task measures: those with a check, and `correct` when the ticket names files
    not to change (a forbidden edit fails correct)."""
    return tuple(a for a in records.AXES if a in task.checks or (a == "correct" and task.forbidden))


def judge(task: TaskSpec, ws: Path, axes: tuple[str, ...] | None = None) -> dict[str, checks.Verdict]:
    """The verdict of every check on a workspace (of the `axes` given, else all), the one way
    cells, references and variants are judged. Each axis's check runs in its own disposable
    copy of the workspace: a check that writes (or code under test that does) can neither
    touch the kept workspace nor the other axis. A file the ticket says not to change,
    changed, fails correct, named."""
    chosen = task.checks if axes is None else {a: code for a, code in task.checks.items() if a in axes}
    verdicts = checks.run_checks(chosen, ws, task.file, task.check_timeout, transcript=ws / workspace.TRANSCRIPT,
                                 ignore=workspace.copy_ignore(ws), reference=reference_workspace(task),
                                 in_process=bool(task.checks_in_process))
    verdicts = checks.with_forbidden(verdicts, checks.forbidden_edits(task, ws))
    if task.forbidden and "correct" not in verdicts:
        verdicts["correct"] = checks.Verdict(True, "ok: no file the ticket forbids was changed")
    return verdicts


_references: dict[tuple[str, str], Path] = {}


def reference_workspace(task: TaskSpec) -> Path | None:
    """A workspace seeded with the task's good reference, for checks that compare with it
    (`load_reference`); made once per process and task version, and copied for each check.
    None when no check of the task reads it."""
    if task.refs is None or not any("load_reference" in code for code in task.checks.values()):
        return None
    key = (task.name, task.spec_hash)
    if key not in _references:
        root = Path(tempfile.mkdtemp(prefix=f"ponybench-reference-{task.name}-"))
        atexit.register(shutil.rmtree, root, True)
        workspace.seed(task, root / "reference", files=task.refs.good)
        _references[key] = root / "reference"
    return _references[key]


def failure_line(record: CellRecord) -> str | None:
    """None when the cell passes; else one line saying which gate failed and why."""
    if record.status == records.INSTRUMENT_ERROR:
        return record.error
    if not record.ran:
        return f"agent never ran properly ({record.status}): {record.error}"
    if record.escaped:
        return f"the agent wrote outside its workspace: {record.escaped}"
    if record.kind != "surgical" and not record.delivered:
        return "the agent finished but delivered no code"
    if record.correct == 0:  # None: not measured, which fails nothing
        return f"incorrect: {record.correct_reason}"
    if record.safe == 0:
        return f"unsafe: {record.safe_reason}"
    return None


def read_identity(ws: Path, key: bytes | None = None, problems: list | None = None) -> dict:
    return _read(ws, CELL_IDENTITY, key, problems)


def rescore_problem(ws: Path, key: bytes | None, key_problem: str = "",
                    identity_read: tuple | None = None) -> str | None:
    """Why a kept cell folder cannot be rescored (its records do not verify under the run's
    key, or there is no key), or None. A rescore re-reads the identity (which arm), the agent
    record (how it ended) and the seed manifests (what was seeded): one forged record would
    move the cell to another arm or zero its LOC. `identity_read`: what `read_record` gave for
    the identity record, when the caller read it already."""
    if key is None:
        return key_problem or "the run has no key"
    problems: list[str] = []
    for kind in (CELL_IDENTITY, AGENT_RECORD, workspace.SEED_MANIFEST, workspace.FIXTURE_MANIFEST):
        if kind == CELL_IDENTITY and identity_read is not None:
            data, problem = identity_read
        else:
            data, problem = read_record(ws, kind, key)
        if problem:
            problems.append(problem)
        elif data is None and kind in (CELL_IDENTITY, AGENT_RECORD):
            problems.append(f"it has no {kind} record")
    return problems[0] if problems else None
