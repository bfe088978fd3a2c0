"""The controller: the gate before any cell, and the gathering of every cell's record.

Registered only in the process that controls the session (the one process without xdist, the
xdist controller with it; see xdist's own `dsession.py`). It validates every task and arm
file and proves the instruments before any worker starts, owns the run directory, replays
every worker's report through `pytest_runtest_logreport` (so results are written once, in one
process), and writes summary.json and the reports at the end.

One module on purpose (about 660 lines): the controller's plugin. The gate and the gathering
share the run directory, the session's records and the terminal's summary; split, each would
reach into the other's state.
"""
from __future__ import annotations

import datetime
import hashlib
import json
import re
import signal
from pathlib import Path

import pytest

from pytest_ponybench.cell import agent, confine as confinement, lifecycle as cells
from pytest_ponybench.instruments import gate as instruments
from pytest_ponybench.processes import sandbox
from pytest_ponybench.reports import summary, tables
from pytest_ponybench.run import fleet, pool, progress
from pytest_ponybench.specs import library
from pytest_ponybench.store import record as records
from pytest_ponybench.store.record import CellRecord
from pytest_ponybench.store.rundir import (KEY_INPUT, LEDGER_ROOM, RESULTS_ROOM, NotARunDir, RunDir,
                                           append_line, cost_history, disk_full, disk_full_sentence,
                                           make_room, max_pause, seal_result, usd, write_atomic)
from pytest_ponybench.specs.spec import SpecError, load_task

# A cell folder kept aside (a retried cell's earlier attempt, a workspace of an older spec):
# its result is no line of results.jsonl.
KEPT_ASIDE = re.compile(r"\.(attempt-\d+|stale-[\w-]+)$")

BUDGET_REACHED = "budget reached"


class Gathering:
    """The records of this session, held as they arrive and appended to the run's results file.

    A resume or rescore writes beside the old results (`results.jsonl.resume`/`.rescore`) and
    merges at the end: interrupted, it loses nothing, and every workspace keeps its own result
    anyway. `mode` is "run", "resume" or "rescore".

    What this session reported is never read back from a file: the summary and the reports are
    made from the records held here (the reports hold every record at the end anyway). Only
    what an earlier session left (a resume's or rescore's other cells) is read, through
    `CellRecord.from_json`."""

    def __init__(self, run_dir: RunDir, mode: str = "run"):
        self.run_dir = run_dir
        self.mode = mode
        # This session's records by cell, in the order cells first reported; a cell reported
        # again (a crashed worker's cell, then its record) keeps its place and its last record.
        # Made into their JSON forms once, at the end (`final`), and let go then.
        self.records: dict[str, CellRecord] = {}
        self.cells: set[str] = set()  # the cells this session reported
        self.shared: dict[str, str] = {}  # one copy of each short value that repeats (CellRecord.from_json)
        self.budget_skipped = 0
        self.reused = 0  # cells of this session reported from an earlier one's results
        self.results_path = run_dir.results_path if mode == "run" else \
            run_dir.results_path.with_name(f"{run_dir.results_path.name}.{mode}")
        if self.results_path.exists() and mode != "run":
            self.results_path.unlink()
        self.started = datetime.datetime.now().isoformat(timespec="seconds")
        # A full disk: records that could not be appended stay held (and in JUnit), and the
        # one sentence that says so; every line kept room for beforehand still lands.
        self.lines_lost = 0
        self.disk_problem = ""
        # What this session appended to its results file: at the end the file is compared with
        # it, and written again from the records held when someone changed it meanwhile.
        self.appended = hashlib.sha256()
        self.final: list[dict] | None = None  # every record of the run, once `finish` merged them
        self.primary: list | None = None  # the answer per arm (primary.PrimaryAnswer), once finished
        if mode != "rescore":  # room beyond the ends of the ledger and the results, before any cell
            make_room(run_dir.spend_path, LEDGER_ROOM)
            make_room(self.results_path, RESULTS_ROOM)

    def add(self, record: CellRecord) -> None:
        if record.reused and record.cell not in self.cells:
            self.reused += 1  # a resume reported it from its kept result: not run again
        self.cells.add(record.cell)
        self.records[record.cell] = record
        # Sealed with the run's key: a line an agent appends or rewrites does not verify.
        line = json.dumps(seal_result(record.to_json(), self.run_dir.key), sort_keys=True) + "\n"
        # A Ctrl-C or SIGTERM waits until the line is whole: a torn line would swallow the next.
        blocked = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT, signal.SIGTERM})
        try:
            append_line(self.results_path, line, room=RESULTS_ROOM)
            self.appended.update(line.encode())
        except OSError as exc:
            if not disk_full(exc):
                raise
            self.lines_lost += 1
            self.disk_problem = self.disk_problem or disk_full_sentence(self.run_dir.path, exc)
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, blocked)

    def all_records(self) -> list[dict]:
        """Every record of the run in its JSON form: this session's, plus earlier ones of cells
        it did not report (a resume or rescore narrowed with -k keeps the rest of the run). An
        earlier line that is no record or does not verify is skipped (`run_dir.refused_lines`
        says which); a resume's earlier cell whose line is gone (results.jsonl overwritten) is
        read from its sealed result."""
        if self.final is not None:
            return self.final
        mine = [r.to_json() for r in self.records.values()]
        if self.mode == "run":
            return mine
        earlier = [r for r in self.run_dir.read_results() if r["cell"] not in self.cells]
        earlier = list({r["cell"]: r for r in earlier}.values())  # the last line of a cell wins
        if self.mode == "resume":
            earlier += self.recovered({r["cell"] for r in earlier})
        return earlier + mine

    def recovered(self, listed: set[str]) -> list[dict]:
        """The kept cells of a resumed run that neither this session nor a line of results.jsonl
        names, from their sealed results: earlier ones it did not report (narrowed with -k, or
        run by another session) whose lines an agent that overwrote results.jsonl took away.
        Any verified result counts, an infra error's or a budget cut's included: it is what
        the cell's line said."""
        found = []
        for ws in self.run_dir.cell_dirs():
            if ws.name in listed or ws.name in self.cells or KEPT_ASIDE.search(ws.name):
                continue
            record = cells.sealed_result(ws, self.run_dir)
            if record is not None:
                found.append(record.to_json())
        return found

    def results_changed(self) -> bool:
        """Whether this session's results file is not what it appended (someone wrote into it,
        overwrote it, or a full disk kept lines from it). Its bytes are compared, not read as
        records."""
        digest = hashlib.sha256()
        try:
            with open(self.results_path, "rb") as fh:
                while chunk := fh.read(1 << 20):
                    digest.update(chunk)
        except OSError:
            return True
        return self.lines_lost > 0 or digest.digest() != self.appended.digest()

    def finish(self, model_ids: dict[str, str], claude_version: str, rehearsal: bool,
               reference: str, plots: bool = True) -> list:
        """Write summary.json, then the reports. Results are on disk already, line by line."""
        every = self.final = self.all_records()
        self.records.clear()  # every one is in `final` now, as its JSON form: the reports' peak holds one copy
        changed = self.results_changed()
        if changed and self.lines_lost == 0:
            self.run_dir.refused_lines.append(
                f"{self.results_path} was changed by something other than the harness during this session; "
                f"written again from the records the session holds")
        if self.mode != "run" or changed or self.run_dir.refused_lines:
            # A resume or rescore merges; a run whose results file someone overwrote, filled
            # with garbage, or a full disk kept lines from, gets it whole again: every later
            # rescore, resume and ponybench-compare reads that file.
            write_atomic(self.run_dir.results_path, (
                json.dumps(seal_result(r, self.run_dir.key), sort_keys=True) + "\n" for r in every))
            if self.results_path != self.run_dir.results_path:  # a resume's or rescore's own file
                self.results_path.unlink(missing_ok=True)
        versions = sorted({version for r in every if (version := r.get("claude_version"))})
        try:  # a rescore or resume keeps the date the run was made; its own is `updated`
            before = json.loads(self.run_dir.summary_path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            before = {}
        date = before.get("date") if self.mode != "run" and isinstance(before, dict) else None
        data = {
            "date": date or self.started,
            **({"updated": self.started} if date else {}),
            "mode": self.mode,
            # A rehearsal's figures come from a scripted model: say so wherever they travel.
            "rehearsal": rehearsal or any(r.get("rehearsal") for r in every),
            "models": {m: model_ids.get(m, m) for m in sorted({r["model"] for r in every})},
            "claude_version": claude_version or ", ".join(versions),
            "cells": len(every),
            "measured": sum(1 for r in every if records.is_measured(r)),
            "left_out": records.left_out(every),
            "budget_skipped": self.budget_skipped,
            "spent_usd": round(self.run_dir.spent(), 6),
            "reference": reference,
            "statuses": {"measured": sorted(records.MEASURED), "never_ran": sorted(records.NEVER_RAN),
                         "infra": sorted(records.INFRA), "budget_cut": sorted(records.CUT),
                         "instrument": sorted(records.INSTRUMENT)},
            "rows": summary.aggregate(every),
            # Per arm x model: infra errors (left out of every rate) and retries; what the arms
            # made the agent do. The same builders as the terminal, summary.md and report.html.
            "infra_errors": records.infra_share(every)[0],
            "infra": tables.infra_rows(every),
            # Cells the run's budget cut or an instrument failed: named, left out of every rate.
            "budget_cut": sum(1 for r in every if records.is_budget_cut(r)),
            "apart": tables.apart_rows(every),
            "activity": tables.activity_rows(every),
            # Per task x arm: each failed cell's one-line reason, the most frequent first.
            "failures": tables.failure_rows(every),
            # Per axis that fails no cell (robust): the cells that failed it, with its reasons.
            **{f"{axis}_failures": tables.failure_rows(every, axis) for axis in tables.APART_AXES},
        }
        from pytest_ponybench.reports import judge_report  # the judged columns, when the run was judged (--ponybench-judge)

        judged = judge_report.summary(every, reference, self.run_dir)
        if judged is not None:
            data["judged"] = judged
        # numpy: only when a report is written, never when pytest loads the plugin
        from pytest_ponybench.reports import primary, report, stats

        arm_stats = stats.arm_stats(every, reference)
        # The answer per arm, pooled over tasks: first in summary.json as in every output.
        self.primary = primary.answers(every, reference, arm_stats)
        data = {"primary": primary.to_json(self.primary), **data}
        write_atomic(self.run_dir.summary_path, json.dumps(data, indent=2))
        return [self.run_dir.summary_path] + report.write_reports(self.run_dir.path, every, reference, plots=plots,
                                                                  arm_stats=arm_stats, answers=self.primary)


def finished_on_disk(ws: Path, run_dir: RunDir) -> bool:
    """Whether a resume will report this workspace's cell from its kept, sealed result rather
    than run it (cell.finished_record's rule, read without moving anything)."""
    return cells.finished_record(ws, run_dir, move=False) is not None


def plugin_problems(state) -> list[str]:
    """Every plugin the run will load, checked before any cell (plugin_arm.plugin_problems):
    a manifest the CLI would not load or a hook script that cannot run would make every cell
    of its arm fail after paying for it. A plugin that is not found at all stays a `not_run`
    of its arm's cells, as before: that costs nothing."""
    from pytest_ponybench.specs import plugin_arm
    from pytest_ponybench.specs.spec import resolve_plugin_dir

    found, seen = [], set()
    for arm in state.selected_arms():
        if not arm.plugin:
            continue
        try:
            folder = resolve_plugin_dir(arm, state.settings.arms_dir)
        except SpecError:
            continue
        if folder is None or folder in seen:  # None: not a plugin arm, which the loop skipped already
            continue
        seen.add(folder)
        found += [f"arm '{arm.name}': {problem}" for problem in plugin_arm.plugin_problems(Path(folder))]
    return found


def run_options(state, tasks: list) -> dict:
    """What a run is made of, stored in run.json: a resume must make the same kind of cells."""
    s = state.settings
    return {
        "tasks": sorted(t.name for t in tasks),
        "arms": [a.name for a in state.selected_arms()],
        "models": {m: state.model_ids.get(m, m) for m in s.models},
        "runs": s.runs,
        "rehearsal": s.rehearse,
        "rehearse_ref": s.rehearse_ref if s.rehearse else None,
        "timeout": s.timeout,
    }


# run.json: {"confined": bool, "why": why not, "own_pids": whether the agent's CLI has a PID
# namespace of its own, so it can signal no other cell's process nor the harness (bubblewrap's,
# where it sees none either; unconfined, agent.run's where the machine has namespaces),
# "limits": the agent's cgroup (agent.limits_record), or why it has none}
CONFINEMENT = "confinement"
# Stored in run.json to say how the run was made, not what it is made of: a resume on a
# machine without the sandbox, or where the agent cannot be confined, is still the same run.
NOT_COMPARED = {"sandbox", CONFINEMENT}


def option_differences(stored: dict, wanted: dict) -> list[str]:
    return [f"{key}: the run has {stored.get(key)!r}, this resume {wanted.get(key)!r}"
            for key in sorted((set(stored) | set(wanted)) - NOT_COMPARED) if stored.get(key) != wanted.get(key)]


def collectable_tasks(tasks: list, config, always: tuple = ()) -> list:
    """The tasks this session can collect cells of: each task file at or under a path the
    session was given (`pytest tasks/csv_total.yaml --ponybench` collects that file alone),
    every task when any given path is not one (a `--pyargs` name, a path that is not there).
    The gate runs before collection (and, under xdist, the controller never collects), so -k
    and -m deselect too late to spare a proof; the paths are known now, and only narrow what
    is collected: a task left out here has no cell in this session. `always`: tasks kept
    whatever the paths (imported eval cases)."""
    base = Path(config.invocation_params.dir)
    given = []
    for arg in config.args:
        path = (base / str(arg).split("::")[0]).resolve()
        if not path.exists():
            return tasks
        given.append(path)
    if not given:
        return tasks

    def collected(task) -> bool:
        path = Path(task.path).resolve()
        return any(path == g or path.is_relative_to(g) for g in given)

    return [t for t in tasks if collected(t) or any(t is a for a in always)]


class Controller:
    """pytest hooks of the controlling process only."""

    def __init__(self, state, config):
        self.state = state
        self.config = config
        self.gathering: Gathering | None = None
        self.announced = False
        self.written: list = []
        self.tasks: list = []
        # Workers on other hosts: shipments out, workspaces home, one budget (fleet.py).
        self.fleet = fleet.ControllerFleet(state, state.settings.remote_workers)
        config.pluginmanager.register(self.fleet, "ponybench-fleet")
        self.progress: progress.ProgressPrinter | None = None
        self.interrupted = False
        self.nothing_ran = False  # no cell left anything: the run directory is removed at the end
        self.confinement_line = ""  # said in the header: whether the agent runs in the sandbox

    # ---------------------------------------------------------------- the gate

    @pytest.hookimpl(tryfirst=True)
    def pytest_sessionstart(self, session):
        """Before any worker starts: every task file valid, a usable CLI and proven
        instruments, or no cell runs at all."""
        state, config = self.state, self.config
        if config.option.collectonly:  # --co only lists cells: no gate, no run directory
            return
        tasks = self.tasks = self.validated_tasks()
        remote = fleet.remote_gateways(config)
        if state.settings.rescore is not None and remote:
            raise pytest.UsageError(
                f"--ponybench-rescore reads every workspace of the run directory on this machine, which remote "
                f"workers ({', '.join(remote)}) do not have; rescore here without -d/--tx (or with -n N)")
        if state.settings.rescore is not None:
            self.gathering = Gathering(state.run_dir, mode="rescore")
            for line in cells.refused_lines(state.run_dir, rescore=True, survey=state.rescore_survey()):
                self.write(line)
            return
        if remote:
            try:  # the library's folders this run uses, as the one set a remote worker gets
                self.fleet.settings = fleet.remote_settings(
                    state.settings, state.task_folders, library.arm_folders(state.settings.arms_dir, state.settings.library),
                    state.evals is not None)
            except ValueError as exc:
                raise pytest.UsageError(f"{', '.join(remote)}: {exc}") from None
        broken = plugin_problems(state)
        if broken:
            raise pytest.UsageError("a plugin of this run is broken; no cell was started:\n  " + "\n  ".join(broken))
        try:
            state.claude = agent.find_claude(state.settings.claude, config.rootpath)
            state.claude_version = agent.claude_version(state.claude)
        except agent.CliMissing as exc:
            raise pytest.UsageError(str(exc)) from None
        confined = self.settled_confinement()
        if not state.settings.rehearse:
            problem = agent.real_run_problem(own_user=confined and confinement.sandbox().own_user)
            if problem:
                raise pytest.UsageError(problem)
        # Remote workers collect from folders of their own (fleet.py): every task is proven for them.
        cases = tuple(c.task for c in state.evals.cases.values()) if state.evals is not None else ()
        proven = tasks if remote else collectable_tasks(tasks, config, always=cases)
        broken = instruments.prove_all(proven, state.claude_version)  # proofs that held before are cached
        if broken:
            raise pytest.UsageError("instruments broken; refusing to spend:\n  " + "\n  ".join(broken)
                                    + "\nrun `pytest -m selftest` to see each instrument")
        # Only a run that passed the gate gets a directory; a resume continues its own.
        options = run_options(state, tasks)
        if state.settings.resume is not None:
            state.run_dir = self.open_run(state.settings.resume, "--ponybench-resume")
            stored = state.run_dir.read_options()
            if stored is not None and option_differences(stored, options):
                raise pytest.UsageError(
                    f"--ponybench-resume={state.run_dir.path}: this run was made with other options; "
                    f"resume it with the same ones, or start a new run:\n  "
                    + "\n  ".join(option_differences(stored, options)))
            self.gathering = Gathering(state.run_dir, mode="resume")
            for line in cells.refused_lines(state.run_dir, rescore=False):
                self.write(line)
        else:
            state.run_dir = RunDir.create(state.settings.dir)
            self.gathering = Gathering(state.run_dir)
        state.run_dir.max_pause = max_pause(state.settings)
        box = confinement.sandbox() if state.settings.confine is not False else None
        # Where the agent ran, and what the checks of this run ran in (sandbox.py) with what
        # this machine lacked: kept with the run, never compared on resume (a host may differ).
        own_pids = confined or not sandbox.support().namespaces  # bubblewrap's, or agent.run's
        options[CONFINEMENT] = {"confined": confined, "why": "" if confined else (
            "--ponybench-no-confine" if box is None else box.problem), "own_pids": own_pids,
            "limits": agent.limits_record(state.agent_limits(), sandbox.support().cgroup, sandbox.support().cgroup_kind)}
        state.run_dir.write_options({**options, "sandbox": sandbox.support().as_record()})

    def settled_confinement(self) -> bool:
        """Whether this session's agents run in the sandbox (session.PonybenchState.confined),
        with its one line for the header; --ponybench-confine where it cannot be stops here."""
        try:
            confined = self.state.confined()
        except agent.CliMissing as exc:
            raise pytest.UsageError(str(exc)) from None
        limits = agent.limits_phrase(self.state.agent_limits(), sandbox.support().cgroup)
        wanted = self.state.settings.confine is not False
        # No sandbox is looked for when confinement is off: confinement_line reads it only when
        # wanted (cell/confine.py types it Sandbox, not Optional; typed in a later change).
        box = confinement.sandbox() if wanted else None
        self.confinement_line = confinement.confinement_line(box, wanted, limits,  # type: ignore[arg-type]
                                                             own_pid_namespace=not sandbox.support().namespaces)
        return confined

    def pytest_report_header(self, config):
        return [self.confinement_line] if self.confinement_line else []

    @staticmethod
    def open_run(path, flag: str) -> RunDir:
        try:
            return RunDir.open(path, flag)
        except NotARunDir as exc:
            raise pytest.UsageError(str(exc)) from None

    def validated_tasks(self) -> list:
        """Every task file, validated here on the controller: under xdist a broken file is
        only a collection error in each worker while the other cells run (and spend), so one
        broken file stops the run before its first cell. --continue-on-collection-errors
        still runs the valid ones."""
        tasks, broken = [], []
        try:
            files = self.state.all_tasks()  # the project's and the shipped library's (library.py)
        except SpecError as exc:
            raise pytest.UsageError(str(exc)) from None
        cases = self.state.evals.cases if self.state.evals is not None else {}
        for path, fixtures in files:
            if fixtures is None:  # an imported eval case, validated when it was imported
                tasks.append(cases[Path(path).parent.name].task)
                continue
            try:
                tasks.append(load_task(path, fixtures))
            except SpecError as exc:
                broken.append(str(exc))
        if broken and not self.config.option.continue_on_collection_errors:
            raise pytest.UsageError("invalid task files; no cell was started:\n  " + "\n  ".join(broken)
                                    + "\nfix them, or pass --continue-on-collection-errors to run the valid ones")
        return tasks

    # ---------------------------------------------------------------- xdist

    @pytest.hookimpl(optionalhook=True)
    def pytest_configure_node(self, node):
        """Hand the run directory and the CLI to every worker; a remote one also gets the tasks,
        arms, fixtures and settings it needs (fleet.py)."""
        node.workerinput["ponybench_run_dir"] = str(self.state.run_dir.path)
        # The run's key, so a worker seals and verifies records as this process does; it
        # never lands in the run directory or a workspace.
        node.workerinput[KEY_INPUT] = self.state.run_dir.key.hex() if self.state.run_dir.key else ""
        node.workerinput["ponybench_claude"] = self.state.claude
        self.fleet.configure_node(node, self.tasks, self.config.rootpath)

    @pytest.hookimpl(optionalhook=True)
    def pytest_xdist_node_collection_finished(self, node, ids):
        self.announce([identity_from_nodeid(i) for i in ids])

    @pytest.hookimpl(optionalhook=True)
    def pytest_handlecrashitem(self, crashitem, report, sched):
        """A worker died while running this cell: record that it never finished."""
        ident = identity_from_nodeid(crashitem)
        if ident is not None and self.gathering is not None:
            self.gathering.add(never_ran_record(ident, "the xdist worker running this cell crashed"))

    # ---------------------------------------------------------------- gathering

    def pytest_collection_finish(self, session):
        if not hasattr(session.config, "workerinput"):  # without xdist: this process collected
            self.announce([getattr(i, "identity", None) for i in session.items])

    def announce(self, cells: list) -> None:
        """Before the first cell: how many cells, and what they may cost going by earlier runs."""
        cells = [c for c in cells if c is not None]
        if self.announced or not cells or self.gathering is None or self.gathering.mode == "rescore":
            return
        self.announced = True
        run_dir, settings = self.state.run_dir, self.state.settings
        total = len(cells)
        kept = 0
        if self.gathering.mode == "resume":  # what is left to run (and to pay for), not the whole run
            cells = [c for c in cells if not finished_on_disk(run_dir.path / str(c.get("cell")), run_dir)]
            kept = total - len(cells)
        history = cost_history(settings.dir, run_dir.path, settings.rehearse)
        known = [history[(c["task"], c["model"])] for c in cells if (c["task"], c["model"]) in history]
        line = f"ponybench: {len(cells)} cells in {run_dir.path}"
        if kept:
            line = (f"ponybench: {len(cells)} cells to run in {run_dir.path} ({kept} of {total} finished "
                    f"earlier: reported from the kept run, not paid again)")
        if known:
            estimate = sum(known) / len(known) * len(cells)
            line += (f"; estimated cost {usd(estimate)} from earlier runs of these tasks and models"
                     f" ({len(cells) - len(known)} of {len(cells)} cells have no history)")
        else:
            line += "; no earlier run of these tasks and models to estimate the cost from"
        if settings.max_cost is not None:
            line += f"; budget {usd(settings.max_cost)} ({usd(run_dir.spent())} spent so far)"
        if settings.rehearse:
            line += "; every dollar figure of a rehearsal is simulated"
        self.write(line)
        if sandbox.support().missing():  # once, before the first cell: what checks run without here
            self.write(f"ponybench: {sandbox.support().describe()}")
        # CLAUDE.md files and auto-memory are off in every cell (agent.ISOLATION_ENV); a
        # project's skills, agents and commands above the run directory are not.
        for setup in agent.setup_above(run_dir.path):
            self.write(f"ponybench: warning: {setup} is above the run directory, so the CLI puts what it holds "
                       f"in front of the model in every cell of every arm; keep runs elsewhere "
                       f"(--ponybench-dir=/tmp/ponybench-runs)")
        self.progress = self.make_progress(len(cells))

    def make_progress(self, total: int) -> progress.ProgressPrinter:
        reporter = self.config.pluginmanager.get_plugin("terminalreporter")
        tty = bool(reporter is not None and getattr(reporter, "isatty", False))
        count = progress.Progress(total=total, rehearsal=self.state.settings.rehearse,
                                  spent=self.state.run_dir.spent)
        # A rewritten line must fit the terminal: a wrapped one cannot be rewritten in place.
        rewrite = (lambda line: reporter.rewrite(line[:max(reporter._tw.fullwidth - 1, 20)], erase=True)) if tty else None
        return progress.ProgressPrinter(count, self.write_plain if tty else self.write, rewrite, tty)

    def write_plain(self, line: str) -> None:
        reporter = self.config.pluginmanager.get_plugin("terminalreporter")
        if reporter is not None:
            reporter.write_line(line)

    def write(self, line: str) -> None:
        reporter = self.config.pluginmanager.get_plugin("terminalreporter")
        if reporter is not None:
            if reporter._tw.width_of_current_line:  # after progress dots: start a line of our own
                reporter.write("\n")
            reporter.write_line(line)

    def pytest_runtest_logreport(self, report):
        """Every report, the controller's own or a worker's replayed: gather here, once."""
        if self.gathering is None:
            return
        props = dict(report.user_properties)
        if report.when == "call" and "cell" in props:
            # The record's JSON form, as the worker checked it (collect.CellItem), made a record
            # again here once; a worker that sent a broken one is a harness bug, raised as one.
            self.gathering.add(CellRecord.from_json(props, self.gathering.shared))
            if self.progress is not None:
                self.progress.progress.add(props)
                self.progress.update()
        elif report.skipped and BUDGET_REACHED in str(report.longrepr):
            self.gathering.budget_skipped += 1
            if self.progress is not None:
                self.progress.progress.skip()
                self.progress.update()

    @pytest.hookimpl(wrapper=True, specname="pytest_runtest_logreport")
    def pytest_runtest_logreport_slimmed(self, report):
        """After every plugin has read a cell's report (the results file above, --junitxml,
        xdist), keep only what the terminal prints at the end: pytest keeps every report until
        the session ends, and a record in each (twice: call and teardown) made the controller
        grow with the run."""
        try:
            return (yield)
        finally:
            if identity_from_nodeid(report.nodeid) is not None:
                slim_report(report)
                self.forget_quiet_report(report)

    def forget_quiet_report(self, report) -> None:
        """The terminal keeps a passed setup or teardown report (category "") only to count
        nothing: it prints no line for one. Two of them a cell, 20,000 at 10,000 cells."""
        reporter = self.config.pluginmanager.get_plugin("terminalreporter")
        quiet = getattr(reporter, "stats", {}).get("") if reporter is not None else None
        if report.when != "call" and report.passed and quiet and quiet[-1] is report:
            quiet.pop()

    # ---------------------------------------------------------------- the end

    def pytest_keyboard_interrupt(self, excinfo):
        self.interrupted = True
        if self.progress is not None:
            self.progress.close()

    def pytest_unconfigure(self, config):
        """Last of all: the run's summary.md into a GitHub Actions job summary, and after an
        interrupt, as the very last line, the command that finishes the run."""
        if self.gathering is None or self.gathering.mode == "rescore":
            return
        if self.nothing_ran:  # last, after every plugin's sessionfinish wrote what it writes
            self.state.run_dir.discard()
            return
        summary.append_step_summary(self.state.run_dir.path / "summary.md")
        if self.interrupted:
            self.write_plain("interrupted; finish this run (finished cells are kept, never paid twice) with: "
                             + progress.resume_command(config.invocation_params.args, self.state.run_dir.path))

    @pytest.hookimpl(tryfirst=True)  # before junitxml writes its file: the answer is a property of it
    def pytest_sessionfinish(self, session, exitstatus):
        pool.stop()  # hooks.pytest_sessionfinish's first step, which now runs after this one
        if self.progress is not None:
            self.progress.close()
        if self.gathering is not None:
            s = self.state
            # No cell selected (a typo in a task path or in -k): keep no empty run directory,
            # which would stand among the kept runs for ponybench-history and compare.
            self.nothing_ran = self.gathering.mode == "run" and s.run_dir.holds_nothing()
            if self.nothing_ran:
                return
            try:
                self.written = self.gathering.finish(s.model_ids, s.claude_version, rehearsal=s.settings.rehearse,
                                                     reference=s.settings.reference, plots=s.settings.plots)
                self.primary_to_junit(session.config)
            except OSError as exc:
                if not disk_full(exc):
                    raise
                # The summaries cannot be written: the terminal summary still says everything.
                self.gathering.disk_problem = (f"{disk_full_sentence(s.run_dir.path, exc)}; the summaries were not "
                                               f"written (a --ponybench-rescore of the run writes them)")

    def primary_to_junit(self, config) -> None:
        """The answer per arm as run-level properties of --junitxml (its <testsuite>'s): the
        per-cell ones travel as user_properties, a run's answer has no cell. Before junitxml's
        own pytest_sessionfinish writes the file (the hookimpl above runs first)."""
        from _pytest.junitxml import xml_key

        xml = config.stash.get(xml_key, None)
        if xml is None or self.gathering is None or not self.gathering.primary:
            return
        from pytest_ponybench.reports import primary

        for name, value in primary.junit_properties(self.gathering.primary):
            xml.add_global_property(name, value)

    def pytest_terminal_summary(self, terminalreporter, exitstatus, config):
        if self.gathering is None:
            return
        tr, state = terminalreporter, self.state
        tr.write_sep("=", "ponybench summary")
        if self.nothing_ran:
            tr.write_line("no cell ran, so no run directory was kept (was a task path, -k or -m mistyped?)",
                          yellow=True)
            return
        every = self.gathering.all_records()
        for line in state.run_dir.refused_lines:  # garbage or forged lines of results.jsonl
            tr.write_line(f"ponybench: warning: {line}", yellow=True)
        if self.gathering.disk_problem:
            tr.write_line(f"ponybench: {self.gathering.disk_problem}", red=True, bold=True)
        for line in summary.terminal_lines(every, state.settings.reference, self.gathering.primary):
            tr.write_line(line)
        verb = "rescored" if self.gathering.mode == "rescore" else "ran"
        at_once = f", {state.settings.at_once} at once per process" if state.settings.at_once > 1 else ""
        reused = self.gathering.reused
        earlier = f"; {reused} more finished earlier (reported from the kept run)" if reused else ""
        tr.write_line(f"{verb} {len(self.gathering.cells) - reused} cells{at_once}{earlier}; "
                      f"kept in {state.run_dir.path}")
        if self.written:
            tr.write_line("wrote " + ", ".join(p.name for p in self.written))
        if self.gathering.budget_skipped:
            tr.write_line(f"{self.gathering.budget_skipped} cells skipped: {BUDGET_REACHED} "
                          f"({usd(state.run_dir.spent())} of {usd(state.settings.max_cost)}); "
                          f"finish them later with --ponybench-resume={state.run_dir.path}", yellow=True)
        for line in tables.infra_lines(every):
            loud = line.startswith("WARNING")
            tr.write_line(line, red=loud, bold=loud, yellow=not loud)
        for line in tables.apart_lines(every):
            tr.write_line(line, yellow=True)
        for line in tables.activity_lines(every):
            tr.write_line(line)
        if self.gathering.mode != "rescore":  # a rescore proves nothing anew
            for line in arm_proof_lines(every):
                tr.write_line(line)
        # A rescore of a rehearsal is still a rehearsal's figures, whatever its options say.
        if state.settings.rehearse or any(r.get("rehearsal") for r in every):
            tr.write_line("REHEARSAL: a scripted model on 127.0.0.1 wrote these files through the real CLI; "
                          "cost, tokens, LOC and rates above say nothing about any real model.",
                          yellow=True, bold=True)


def arm_proof_lines(every: list[dict]) -> list[str]:
    """One line per arm: was it proven in every cell that finished? In rehearsal by the
    scripted model's records (its text reached the model, no other arm's did), in a real run
    by the cells' hook events (proof.py). Cells the API failed are not counted either way."""
    lines = []
    for arm in sorted({r["arm"] for r in every}):
        cells = [r for r in every if r["arm"] == arm and not records.skipped_apart(r)]
        unproven = [r for r in cells if r.get("status") == records.ARM_UNPROVEN]
        checked = [r for r in cells if r.get("status") in (records.FINISHED, records.ARM_UNPROVEN)]
        if unproven:
            lines.append(f"arm {arm}: NOT proven in {len(unproven)} of {len(cells)} cells: {unproven[0]['error']}")
        elif checked:
            lines.append(f"arm {arm}: proven in {len(checked)} of {len(cells)} cells (with this arm only)")
        else:
            lines.append(f"arm {arm}: not proven (no cell of this arm finished)")
    return lines


SECTION_KEEP = 2000  # characters of each captured-output section a failed cell's report keeps (its end)


def slim_report(report) -> None:
    """A cell's report as the terminal needs it at the session's end: the outcome, the
    failure line (CellFailed's one line; a harness error's traceback is kept whole) and the
    end of what was captured, for a failure only. The record is in results.jsonl."""
    report.user_properties = []
    report.keywords = {}  # the item's keywords (its node names, marks): read by -k at collection, not here
    if report.passed or report.skipped:
        report.sections = []
    else:
        report.sections = [(title, text[-SECTION_KEEP:]) for title, text in report.sections]


def identity_from_nodeid(nodeid: str) -> dict | None:
    """A cell's identity from its pytest node id (`<task>__<arm>__<model>__<run>`), for
    reports that come without a record (a crashed worker, xdist's collection list)."""
    name = nodeid.rsplit("::", 1)[-1]
    parts = name.split("__")
    if len(parts) != 4 or not parts[3].isdigit():
        return None
    task, arm, model, run = parts
    return {"cell": name, "task": task, "arm": arm, "model": model, "model_id": model, "run": int(run),
            "kind": "", "spec_hash": ""}


def never_ran_record(identity: dict, error: str) -> CellRecord:
    """The record of a cell that produced none of its own (interrupted, or its worker died)."""
    record = dict(identity)
    record.update(status=records.INTERRUPTED, ran=False, passed=False, error=error,
                  failure=f"agent never ran properly ({records.INTERRUPTED}): {error}")
    record.update({axis: 0 for axis in records.AXES})
    record.update({f"{axis}_reason": "not scored" for axis in records.AXES})
    return CellRecord.from_json(record)
