"""Judged axes in a run (`--ponybench-judge`): options, the proof in the gate, each cell's
judgement kept in its records, reused by a rescore (judge.py holds the judge itself).

`JudgePlugin` is registered in every process that runs cells (and on the controller, which
proves the judge after the instruments). It adds the judged fields to each cell's record
through `pytest_ponybench_cell_record`:

- a cell that delivered no code, or whose agent never ran properly, is not judged (the
  fields are None, `judge_status` says why);
- a judgement kept in the cell's records under this judge's fingerprint is reused (no judge
  request: a rescore or resume never pays twice and never mixes two judges);
- otherwise, if the judge was proven on every judge pair of the run and the run's budget is
  not spent, the judge is asked; its cost goes on the spend ledger as `<cell>/judge`.

In rehearsal the judge is a `rehearsal.JudgeScript` on a scripted model of this plugin's own
(`--ponybench-rehearse-judge`), reached through the real pinned CLI; it counts its requests.

One module on purpose (about 520 lines): judging in a run is one feature threaded through the
options, the gate, each cell and the terminal; its parts share the judge's settings and the
judged records it keeps sealed.
"""
from __future__ import annotations

import json
import os
import shutil
import tempfile
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from functools import partial
from pathlib import Path

import pytest

from pytest_ponybench.cell import agent, transcript as transcripts
from pytest_ponybench.instruments import gate as instruments
from pytest_ponybench.judge import calibration, judge, judged_graders
from pytest_ponybench.run import options
from pytest_ponybench.run.progress import money
from pytest_ponybench.store import record as records
from pytest_ponybench.store.rundir import (HARNESS_PREFIX, canonical, mac, read_record, write_atomic,
                                           write_record)

PROOF_AT_ONCE = 4  # judge pairs proven at once
PROOF_FILE = f"{HARNESS_PREFIX}.judge-proof.json"  # the run's judge proof, sealed, for every worker
@dataclass(frozen=True)
class JudgeSettings:
    on: bool
    model: str
    votes: int
    script: tuple  # rehearsal_judge's (script, malformed first N, fault)


def settings(config) -> JudgeSettings:
    value = partial(options.resolved, config)
    return JudgeSettings(on=value("ponybench_judge"),
                         model=value("ponybench_judge_model") or judge.DEFAULT_JUDGE_MODEL,
                         votes=value("ponybench_judge_votes"),
                         script=value("ponybench_rehearse_judge") or ("agree", 0, None))


class RehearsalJudge:
    """A scripted model serving one `rehearsal.JudgeScript` (`script`: rehearsal_judge's
    tuple), with a private HOME for the CLI; `env` points the judge's CLI at it."""

    def __init__(self, script: tuple):
        from pytest_ponybench.rehearsal.server import JudgeScript, ScriptedModel
        from pytest_ponybench.rehearsal.plugin import CREDENTIAL_VARS, REHEARSAL_KEY

        name, first, fault = script
        self.home = tempfile.mkdtemp(prefix="ponybench-judge-home-")
        self.model = ScriptedModel().start()
        url = self.model.register("judge", JudgeScript(script=name, malformed_first=first, fault=fault))
        self.env = {"ANTHROPIC_BASE_URL": url, "ANTHROPIC_API_KEY": REHEARSAL_KEY, "IS_SANDBOX": "1",
                    # a played API error ends at once: the judgement's infra error, not minutes of retries
                    "CLAUDE_CODE_MAX_RETRIES": "0", "HOME": self.home,
                    "CLAUDE_CONFIG_DIR": os.path.join(self.home, ".claude"), **{var: "" for var in CREDENTIAL_VARS}}

    @property
    def requests(self) -> int:
        return len(self.model.requests("judge"))

    def stop(self) -> None:
        self.model.stop()
        shutil.rmtree(self.home, ignore_errors=True)


def path_name(script: tuple, rehearsal: bool) -> str:
    """The judge's path in its fingerprint: "cli", or "rehearsal:<script>..."."""
    name, first, fault = script
    if not rehearsal:
        return "cli"
    return f"rehearsal:{name}" + (f":malformed-first-{first}" if first else "") + (f":fault-{fault}" if fault else "")


class JudgePlugin:
    def __init__(self, state, config, js: JudgeSettings):
        self.state = state
        self.config = config
        self.js = js
        self.model_id = self._model_id()
        self.stopped: str | None = None  # why the judged axes of this run are off
        self.proven: bool = False
        self.proof_lines: list[str] = []
        self.selection_proven = False  # the controller proved the judge on this session's selection
        self._fp: str | None = None
        self._server: RehearsalJudge | None = None
        self._lock = threading.Lock()

    def _model_id(self) -> str:
        from pytest_ponybench.specs.spec import SpecError, resolve_model

        try:
            return resolve_model(self.js.model, self.state.model_ids)
        except SpecError as exc:
            raise pytest.UsageError(str(exc).replace("--models", "--ponybench-judge-model")) from None

    # ------------------------------------------------------------ the judge's path

    @property
    def rehearsal(self) -> bool:
        """A rehearsal's judge: under --ponybench-rehearse, or rescoring a rehearsal run (its
        judge must never be a real, paid model)."""
        if self.state.settings.rehearse:
            return True
        stored = self.state.run_dir.read_options() if self.state.run_dir is not None else None
        return bool((stored or {}).get("rehearsal"))

    @property
    def path(self) -> str:
        return path_name(self.js.script, self.rehearsal)

    def claude(self) -> str:
        if not self.state.claude:
            self.state.claude = agent.find_claude(self.state.settings.claude, self.config.rootpath)
        return self.state.claude

    def fingerprint(self, fallback_version: str = "") -> str:
        """This judge's fingerprint. The CLI version is the one this session runs; a rescore
        on a machine without the CLI takes the version the run's cells recorded (`fallback_version`),
        which is the one their judgements were made with."""
        if self._fp is None:
            if not self.state.claude_version:
                try:
                    self.state.claude_version = agent.claude_version(self.claude())
                except agent.CliMissing:
                    if not fallback_version:
                        raise
                    return judge.fingerprint(self.model_id, fallback_version, self.path)
            self._fp = judge.fingerprint(self.model_id, self.state.claude_version, self.path)
        return self._fp

    def env(self) -> dict[str, str]:
        if not self.rehearsal:
            return {}
        with self._lock:  # the proof's pairs and a cell's votes ask from several threads
            if self._server is None:
                self._server = RehearsalJudge(self.js.script)
        return self._server.env

    @property
    def requests(self) -> int:
        """Judge requests the scripted judge answered in this process (rehearsal only)."""
        return self._server.requests if self._server is not None else 0

    def ask(self, text: str) -> judge.Reply:
        return judge.ask_cli(self.claude(), self.model_id, text, self.env())

    # ------------------------------------------------------------ the proof

    def prove(self, tasks) -> None:
        """Every judge pair of the run's tasks, ranked rightly, or the judged axes are off
        (`stopped`, naming the first pair it got wrong). A pair proven before by this judge
        fingerprint is remembered (instruments' cache), as instrument proofs are."""
        directory = instruments.cache_dir()
        jobs, remembered, total, one_sided = [], 0, 0, 0
        for task in tasks:
            for pair in [*judge.pairs_for(task), *self._grader_pairs(task)]:
                total += 1
                if isinstance(pair, judged_graders.JudgedGrader):  # a plugin eval grader's pass/fail examples
                    passing = pair.pass_example.text() if pair.pass_example is not None else ""  # fail side only
                    one_sided += pair.pass_example is None
                    key = instruments.proof_key("judge-grader", self.graders_fingerprint(), task.prompt, pair.key,
                                                passing, pair.fail_example.text())
                else:
                    key = instruments.proof_key("judge", self.fingerprint(), task.prompt, pair.axis,
                                                pair.better.text, pair.worse.text)
                if instruments._remembered(directory, key):
                    remembered += 1
                else:
                    jobs.append((task, pair, key))

        def prove_one(job):
            task, pair, key = job
            if isinstance(pair, judged_graders.JudgedGrader):
                problem, spent, n = judged_graders.prove(self.ask, pair, task.prompt, task.name)
            else:
                problem, spent, n = judge.prove_pair(self.ask, pair, task.prompt)
            if self.state.run_dir is not None:
                self.state.run_dir.record_spend(f"proof:{task.name}{judge.SPEND_SUFFIX}", spent)
            if problem is None:
                instruments._remember(directory, key)
            return problem, spent, n

        # Each request mostly waits on the model: a few at once, as the instruments' proofs do.
        with ThreadPoolExecutor(max_workers=PROOF_AT_ONCE) as pool:
            done = list(pool.map(prove_one, jobs))
        problems = [problem for problem, _, _ in done if problem]
        asked = sum(n for _, _, n in done)
        cost = sum(spent for _, spent, _ in done)
        self.proven = not problems
        self.stopped = None if not problems else f"judge unproven: {problems[0]}"
        head = (f"judge {self.model_id} (rubric {judge.rubric_hash()}, fingerprint {self.fingerprint()}, {self.path})")
        if problems:
            self.proof_lines = [f"{head}: NOT proven: it ranked {len(problems)} of {total} judge pairs wrongly; "
                                f"the judged axes of this run are off", *[f"  {p}" for p in problems[:10]]]
        else:
            alone = (f"; {one_sided} on the fail example alone: the case has no pass example (a "
                     f"`ponybench: {{judge_pair: {{pass: ...}}}}` block adds one)") if one_sided else ""
            self.proof_lines = [f"{head}: proven on {total} judge pairs ({remembered} remembered, "
                                f"{asked} requests, {money(cost, self.rehearsal)}{alone})"]
        self._seal_proof()

    def _grader_pairs(self, task) -> list:
        """The judged graders of an imported claude plugin eval case that can run (each is
        proven on its pass and fail examples); none for any other task."""
        case = self._case(task.name)
        return [g for g in case.judged if not g.problem] if case is not None else []

    def _case(self, task_name: str):
        evals = getattr(self.state, "evals", None)
        return evals.cases.get(task_name) if evals is not None else None

    def graders_fingerprint(self, fallback_version: str = "") -> str:
        """The judge of the plugin eval graders: model, their framing's hash, CLI version, path."""
        self.fingerprint(fallback_version)
        return judged_graders.fingerprint(self.model_id, self.state.claude_version or fallback_version, self.path)

    def _seal_proof(self) -> None:
        run_dir = self.state.run_dir
        if run_dir is None or run_dir.key is None:
            return
        data = {"fingerprint": self.fingerprint(), "proven": self.proven, "stopped": self.stopped}
        write_atomic(run_dir.path / PROOF_FILE, json.dumps(
            {"data": data, "mac": mac(run_dir.key, "judge-proof", run_dir.name, canonical(data))}))

    def _load_proof(self) -> None:
        """A worker: the controller's proof from the run directory (verified with the run's key)."""
        run_dir = self.state.run_dir
        try:
            raw = json.loads((run_dir.path / PROOF_FILE).read_text(encoding="utf-8"))
            data = raw["data"]
            ok = run_dir.key is not None and raw.get("mac") == mac(run_dir.key, "judge-proof", run_dir.name,
                                                                     canonical(data))
        except (OSError, ValueError, KeyError, TypeError):
            ok, data = False, {}
        if ok and data.get("fingerprint") == self.fingerprint():
            self.proven, self.stopped = bool(data.get("proven")), data.get("stopped")
        else:
            self.proven, self.stopped = False, "judge unproven: no proof of this judge for this run"

    def ready(self) -> str | None:
        """None when this process may ask the judge; else why the judged axes are off."""
        if self.proven or self.stopped:
            return self.stopped
        if self.state.settings.rescore is not None:
            # A rescore proves lazily: only when a cell needs a judgement it does not keep.
            from pytest_ponybench.specs.spec import load_task

            self.prove([load_task(p, f) if f is not None else self.state.evals.cases[Path(p).parent.name].task
                        for p, f in self.state.all_tasks()])
        else:
            self._load_proof()
        return self.stopped

    # ------------------------------------------------------------ hooks

    @pytest.hookimpl(trylast=True)
    def pytest_sessionstart(self, session):
        """Remote workers get the proof in their shipment, made before any node starts, and
        collect from folders of their own: for them the judge is proven on every task of the
        run here, as the instruments are (controller.py). Local sessions prove on their
        selection once it is known (prove_selected)."""
        from pytest_ponybench.run.fleet import remote_gateways

        if not hasattr(self.config, "workerinput") and remote_gateways(self.config):
            controller = self.config.pluginmanager.get_plugin("ponybench-controller")
            self.prove_selected([{"task": t.name} for t in getattr(controller, "tasks", []) or []])

    def pytest_collection_finish(self, session):
        """Without xdist this process collected: the selection is its items."""
        if not hasattr(self.config, "workerinput"):
            self.prove_selected([getattr(item, "identity", None) for item in session.items])

    @pytest.hookimpl(optionalhook=True)
    def pytest_xdist_node_collection_finished(self, node, ids):
        """Under xdist, the first worker's selection; xdist schedules no cell before this hook
        returns, so every cell finds the proof sealed."""
        from pytest_ponybench.run.controller import identity_from_nodeid

        self.prove_selected([identity_from_nodeid(i) for i in ids])

    def prove_selected(self, cells: list) -> None:
        """The controller proves the judge once, after the instruments and the run directory
        (its cost goes on the ledger), before any cell, on the tasks of the cells the session
        selected (paths, -k, -m): a judge pair of a task with no cell here is not asked. A
        rescore proves lazily (ready)."""
        if self.selection_proven or self.config.option.collectonly:
            return
        if self.state.settings.rescore is not None or self.state.run_dir is None:
            return
        self.selection_proven = True
        names = {cell["task"] for cell in cells if cell}
        controller = self.config.pluginmanager.get_plugin("ponybench-controller")
        self.prove([t for t in getattr(controller, "tasks", []) or [] if t.name in names])
        reporter = self.config.pluginmanager.get_plugin("terminalreporter")
        for line in self.proof_lines:
            if reporter is not None:
                reporter.write_line(f"ponybench: {line}")

    def pytest_ponybench_cell_record(self, cell, record):
        record.update(self.judged(cell, record))
        if self._case(cell.task.name) is not None:
            record.update(self.graded(cell, record))

    def graded(self, cell, record) -> dict:
        """The judged graders (llm, baseline) of a claude plugin eval case: kept verdicts of
        this judge reused one by one (same grader key), the others asked, 3 votes each."""
        case = self._case(cell.task.name)
        runnable = [g for g in case.judged if not g.problem]
        not_run = [g.label for g in case.judged if g.problem]
        try:
            fp = self.graders_fingerprint(str(record.get("claude_version") or ""))
        except agent.CliMissing as exc:
            return judged_graders.record_fields([], [g.label for g in case.judged], "", f"not judged: {exc}")
        if not runnable:
            return judged_graders.record_fields([], not_run, fp)
        if not records.is_measured(record) or not record.get("ran") or not record.get("workspace"):
            return judged_graders.record_fields([], [g.label for g in case.judged], fp,
                                                f"not judged: the agent never ran properly ({record.get('status')})")
        ws = Path(record["workspace"])
        key = self.state.run_dir.key
        kind = judged_graders.RECORD_PREFIX + fp
        by_name = kept_verdicts(ws, fp, key)
        verdicts, wanted = {}, []
        for grader in runnable:
            if (grader.name, grader.key) in by_name:
                verdicts[grader.name] = by_name[(grader.name, grader.key)]
            else:
                wanted.append(grader)
        reused = bool(verdicts) and not wanted
        status = judge.JUDGE_STATUS_OK
        if wanted:
            try:
                stopped = self.ready()
            except agent.CliMissing as exc:
                stopped = f"not judged: {exc}"
            cap = self.state.settings.max_cost
            if not stopped and cap is not None and self.state.spent() >= cap:
                stopped = f"not judged: the run's budget of ${cap:g} is spent"
            if stopped:
                status = stopped
                not_run += [g.label for g in wanted]
            else:
                from pytest_ponybench.cell.workspace import TRANSCRIPT

                answer = (transcripts.read_transcript(ws / TRANSCRIPT).result or {}).get("result")
                work = judged_graders.cell_work(cell.task, ws, key, answer)
                fresh = [judged_graders.judge_grader(self.ask, g, cell.task.prompt, work) for g in wanted]
                verdicts.update((v.name, v) for v in fresh)
                self.state.run_dir.record_spend(f"{cell.id}{judged_graders.SPEND_NAME}",
                                                round(sum(v.cost_usd for v in fresh), 6))
                write_record(ws, kind, {"verdicts": [judged_graders.verdict_data(v) for v in verdicts.values()]}, key)
        ordered = [verdicts[g.name] for g in runnable if g.name in verdicts]
        return judged_graders.record_fields(ordered, not_run, fp, status, reused)

    def judged(self, cell, record) -> dict:
        try:
            fp = self.fingerprint(str(record.get("claude_version") or ""))
        except agent.CliMissing as exc:
            return judge.empty_fields(f"not judged: {exc}", self.model_id, "")
        if not records.is_measured(record) or not record.get("ran"):
            return judge.empty_fields(f"not judged: the agent never ran properly ({record.get('status')})", self.model_id, fp)
        if not record.get("delivered"):
            return judge.empty_fields("not judged: no code delivered", self.model_id, fp)
        ws = Path(record["workspace"])
        key = self.state.run_dir.key
        kind = judge.RECORD_PREFIX + fp
        kept = kept_judgement(ws, fp, key)
        if kept is not None:
            return kept
        try:
            stopped = self.ready()
        except agent.CliMissing as exc:
            stopped = f"not judged: {exc}"
        if stopped:
            return judge.empty_fields(stopped, self.model_id, fp)
        cap = self.state.settings.max_cost
        if cap is not None and self.state.spent() >= cap:
            return judge.empty_fields(f"not judged: the run's budget of ${cap:g} is spent", self.model_id, fp)
        from pytest_ponybench.cell.workspace import TRANSCRIPT

        answer = (transcripts.read_transcript(ws / TRANSCRIPT).result or {}).get("result")
        sub = judge.cell_submission(cell.task, ws, key, answer if isinstance(answer, str) else None)
        if sub.empty:
            return judge.empty_fields("not judged: no source file to judge (tests only)", self.model_id, fp)
        judged = judge.judge_submission(self.ask, judge.task_axes(cell.task), cell.task.prompt, sub, self.js.votes)
        fields = judge.record_fields(judged, self.model_id, fp)
        self.state.run_dir.record_spend(f"{cell.id}{judge.SPEND_SUFFIX}", fields["judge_cost_usd"])
        write_record(ws, kind, fields, key)
        return fields

    @pytest.hookimpl(trylast=True)  # after the controller's summary: the judged axes are their own section
    def pytest_terminal_summary(self, terminalreporter, exitstatus, config):
        if hasattr(config, "workerinput") or self.state.run_dir is None:
            return
        from pytest_ponybench.reports import judge_report
        from pytest_ponybench.reports.tables import text_table

        gathering = getattr(config.pluginmanager.get_plugin("ponybench-controller"), "gathering", None)
        every = gathering.all_records() if gathering is not None else []
        table = judge_report.table(every, self.state.settings.reference)
        tr = terminalreporter
        if table is not None:
            tr.write_sep("-", "ponybench judged axes")
            for line in self.proof_lines:
                tr.write_line(line, red=line.startswith("judge") and "NOT proven" in line)
            for line in text_table(table, indent=""):
                tr.write_line(line)
            for line in self.calibration_lines(every):
                tr.write_line(line)
            spent = judge_report.judge_spent(self.state.run_dir)
            agents = max(self.state.run_dir.spent() - spent, 0.0)
            tr.write_line(f"judge cost {money(spent, self.rehearsal)}, apart from the agents' {money(agents, self.rehearsal)}")
        graded = grader_lines(every)
        if graded:
            tr.write_sep("-", "ponybench judged graders (claude plugin eval)")
            if table is None:
                for line in self.proof_lines:
                    tr.write_line(line, red="NOT proven" in line)
            for line in graded:
                tr.write_line(line)
        if self.rehearsal:
            terminalreporter.write_line(f"ponybench: the scripted judge answered {self.requests} judge "
                                        f"requests in this process")

    def calibration_lines(self, every) -> list[str]:
        """What is on record of this run's judge's calibration: may a gate use it?"""

        out = []
        fps = {str(r["judge_fingerprint"]) for r in every if r.get("judge_fingerprint")}
        fps |= {str(r["graders_judge_fingerprint"]) for r in every if r.get("graders_judge_fingerprint")}
        for fp in sorted(fps):
            record = calibration.load_calibration(fp)
            if record is None:
                out.append(f"calibration: none on record for judge {fp}: its judged axes cannot gate "
                           f"(ponybench-calibrate)")
                continue
            for axis, f in sorted((record.get("axes") or {}).items()):
                verdict = "may gate" if calibration.gate_problem(axis, record) is None else "may NOT gate"
                out.append(f"calibration of judge {fp} on {axis}: agreement {f.get('agreement')}, Cohen's kappa "
                           f"{f.get('kappa')}, of the gate's decision {f.get('decision_kappa')} over "
                           f"{f.get('labels')} labels (floor {calibration.FLOOR}): {verdict}")
        return out

    def pytest_unconfigure(self, config):
        if self._server is not None:
            self._server.stop()
            self._server = None


def kept_judgement(ws: Path, fp: str, key: bytes | None) -> dict | None:
    """The judged axes' fields kept sealed beside the workspace by judge `fp`, marked reused;
    None when there is none to take as it is (judge.reusable)."""
    kept, problem = read_record(ws, judge.RECORD_PREFIX + fp, key)
    return {**kept, "judge_reused": True} if problem is None and judge.reusable(kept) else None


def kept_verdicts(ws: Path, fp: str, key: bytes | None) -> dict:
    """(grader name, grader key) -> the verdict kept sealed beside the workspace by the graders'
    judge `fp` (an infra error is left out: it is asked again)."""
    kept, problem = read_record(ws, judged_graders.RECORD_PREFIX + fp, key)
    found = {}
    if problem is None and isinstance(kept, dict):
        for data in kept.get("verdicts") or []:
            verdict = judged_graders.verdict_from(data)
            if verdict is not None and not verdict.status.startswith("infra_error"):
                found[(verdict.name, verdict.key)] = verdict
    return found


def kept_fields(ws: Path, old: dict, key: bytes | None, graders: tuple = ()) -> dict:
    """What a plain rescore keeps of a cell's judgements: the judged axes and the verdicts of
    its judged graders (`graders`, JudgedGrader) that the judges its old record names (`old`,
    its line in results.jsonl) left sealed beside the workspace. A verdict counts only while its
    grader asks the same (its key); a grader without one (or that cannot run) is named as not run."""
    fields: dict = {}
    fp = str(old.get("judge_fingerprint") or "")
    kept = kept_judgement(ws, fp, key) if fp else None
    if kept is not None:
        fields.update(kept)
    fp = str(old.get("graders_judge_fingerprint") or "")
    found = kept_verdicts(ws, fp, key) if fp and graders else {}
    verdicts = [found[(g.name, g.key)] for g in graders if (g.name, g.key) in found]
    if verdicts:
        not_run = [g.label for g in graders if g.problem or (g.name, g.key) not in found]
        fields.update(judged_graders.record_fields(verdicts, not_run, fp, reused=True))
    return fields


class KeptJudgements:
    """A rescore without --ponybench-judge asks no judge, and keeps what judges left: each
    rescored cell's record carries the judgements its old record had (kept_fields), so
    results.jsonl and the summaries keep their judged figures. --ponybench-rescore-drop-judged
    registers none of this, and the rescore's figures have no judged column."""

    def __init__(self, state):
        self.state = state
        self._old: dict | None = None

    def old_record(self, cell_id: str) -> dict:
        if self._old is None:  # the run's results before this rescore merges its own
            self._old = {str(r.get("cell")): r for r in self.state.run_dir.read_results()}
        return self._old.get(cell_id) or {}

    def pytest_ponybench_cell_record(self, cell, record):
        if not record.get("workspace"):
            return
        case = self.state.evals.cases.get(cell.task.name) if getattr(self.state, "evals", None) else None
        graders = case.judged if case is not None else ()
        record.update(kept_fields(Path(record["workspace"]), self.old_record(cell.id), self.state.run_dir.key, graders))

    def pytest_terminal_summary(self, terminalreporter, config):
        gathering = getattr(config.pluginmanager.get_plugin("ponybench-controller"), "gathering", None)
        every = gathering.all_records() if gathering is not None else []
        kept = sum(1 for r in every if r.get("judge_reused") or r.get("graders_judge_reused"))
        if kept and not hasattr(config, "workerinput"):
            terminalreporter.write_line(f"ponybench: kept the judgements of {kept} cell(s) as the run's judges left "
                                        f"them; no judge was asked (--ponybench-rescore-drop-judged leaves them out)")


def grader_lines(every) -> list[str]:
    """Per arm, how many judged graders passed; then each cell's verdicts."""
    counts: dict[str, list[int]] = {}
    cells = []
    for r in sorted(every, key=lambda r: str(r.get("cell"))):
        text = r.get("judged_graders")
        if not text and not r.get("graders_judge_fingerprint"):
            continue
        passed = str(text or "").count("): pass ")
        failed = str(text or "").count("): fail ")
        mine = counts.setdefault(str(r.get("arm")), [0, 0, 0])
        mine[0] += passed
        mine[1] += failed
        mine[2] += len([p for p in str(r.get("graders_not_run") or "").split(", ") if p]) + \
            str(text or "").count("): not judged") + str(text or "").count("): infra_error")
        cells.append(f"  {r.get('cell')}: {text or '-'}" + (f" (not run: {r['graders_not_run']})"
                                                             if r.get("graders_not_run") else ""))
    out = [f"{arm}: {p} passed, {f} failed, {n} not judged" for arm, (p, f, n) in sorted(counts.items())]
    return out + cells


def register(config, state) -> None:
    """Register the judge when --ponybench-judge (or the ini) asks for it (plugin.py)."""
    js = settings(config)
    if js.on and state.settings.enabled:
        config.pluginmanager.register(JudgePlugin(state, config, js), "ponybench-judge")
        if getattr(state, "evals", None) is not None:
            state.evals.judging = True  # the judged graders run: off the "not run" list
    elif (state.settings.enabled and state.settings.rescore is not None and state.run_dir is not None
          and not config.getoption("ponybench_rescore_drop_judged", False)):
        config.pluginmanager.register(KeptJudgements(state), "ponybench-kept-judgements")
        if not hasattr(config, "workerinput") and getattr(state, "evals", None) is not None and any(
                r.get("judged_graders") for r in state.run_dir.read_results()):
            state.evals.judging = True  # their kept verdicts are reported, not "not run"
