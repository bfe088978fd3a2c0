"""pytest hooks: thin, each handing off to the module that owns the job.

Process roles under xdist: the controller validates, gates and gathers (it replays every
worker's report through `pytest_runtest_logreport`, so results are written once, in one
process); workers collect and run cells. Without xdist one process plays both parts.
"""
from __future__ import annotations

import shutil
import signal
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from . import agent, instruments, options, procs, strength, summary
from .cell import STATUS_ARM_UNPROVEN, Cell, CellContext, read_identity
from .cell import identity as cell_identity
from .collect import TaskFile, TasksDir, arm_placeholder, never_ran
from .session import RunSession, cost_history, new_run_dir, spent, usd
from .spec import ArmSpec, SpecError, TaskSpec, load_arms, load_task, model_ids, resolve_model

STATE = pytest.StashKey["PonybenchState"]()
SELFTESTS = pytest.StashKey["SelftestTally"]()
BUDGET_REACHED = "budget reached"


@dataclass(eq=False)  # registered as a plugin object, which must be hashable
class SelftestTally:
    """What the session ran, for the check-strength section of a `-m selftest` session
    (a plugin object: the controller sees every worker's reports too)."""
    tasks: set[str] = field(default_factory=set)  # tasks whose references were proven
    other: bool = False  # anything but a selftest ran: not a selftest session

    def pytest_runtest_logreport(self, report):
        if report.when != "call":
            return
        if "selftest" not in report.keywords:
            self.other = True
        elif report.nodeid.split("::")[-1].startswith("selftest-"):
            self.tasks.add(Path(report.nodeid.split("::")[0]).stem)


@dataclass
class PonybenchState:
    settings: options.Settings
    arms: dict[str, ArmSpec] = field(default_factory=dict)
    model_ids: dict[str, str] = field(default_factory=dict)
    run_dir: Path | None = None
    claude: str | None = None
    claude_version: str = ""
    session: RunSession | None = None  # the controller's
    rehearsal: object | None = None  # this process's rehearsal.Rehearsal, started lazily
    written: list[Path] = field(default_factory=list)  # files the session wrote at its end
    is_worker: bool = False  # an xdist worker: other cells run beside this process's

    def selected_arms(self) -> list[ArmSpec]:
        names = self.settings.arms or sorted(self.arms)
        return [self.arms[name] for name in names]

    def cells_for(self, task: TaskSpec) -> list[Cell]:
        return [Cell(task, arm, model, self.model_ids.get(model, model), run)
                for arm in self.selected_arms()
                for model in self.settings.models
                for run in range(self.settings.runs)]

    def rescore_cells(self, task: TaskSpec) -> list[tuple[Cell, Path]]:
        found = []
        for ws in sorted(p for p in self.settings.rescore.iterdir() if p.is_dir()):
            ident = read_identity(ws)
            if ident.get("task") != task.name or ident.get("cell") != ws.name:
                continue  # another task's, or a stale copy kept aside by a resume
            arm = self.arms.get(ident.get("arm")) or arm_placeholder(str(ident.get("arm")))
            found.append((Cell(task, arm, str(ident["model"]), str(ident["model_id"]), int(ident["run"])), ws))
        return found

    def cell_budget(self) -> float | None:
        """The CLI's --max-budget-usd for the next cell: the per-cell cap, and never more than
        what is left of the run's budget."""
        caps = [self.settings.max_cell_cost]
        if self.settings.max_cost is not None:
            caps.append(max(self.settings.max_cost - spent(self.run_dir), 0.0))
        caps = [c for c in caps if c is not None]
        return min(caps) if caps else None

    def cell_context(self, hook=None) -> CellContext:
        if self.settings.rehearse and self.rehearsal is None:
            from .rehearsal import Rehearsal

            home = tempfile.mkdtemp(prefix="ponybench-rehearsal-home-")
            self.rehearsal = Rehearsal(self.arms, self.settings.arms_dir, self.settings.rehearse_ref, home, hook)
        return CellContext(run_dir=self.run_dir, claude=self.claude, timeout=self.settings.timeout,
                           arms_dir=self.settings.arms_dir, rehearsal=self.rehearsal,
                           max_budget_usd=self.cell_budget(), confine=self.settings.confine,
                           exclusive=not self.is_worker)

    def stop_rehearsal(self) -> None:
        if self.rehearsal is not None:
            self.rehearsal.stop()
            shutil.rmtree(self.rehearsal.home, ignore_errors=True)
            self.rehearsal = None


def state_of(config) -> PonybenchState:
    return config.stash[STATE]


def is_worker(config) -> bool:
    return hasattr(config, "workerinput")


def pytest_addhooks(pluginmanager):
    from . import hookspec

    pluginmanager.add_hookspecs(hookspec)


def pytest_addoption(parser):
    options.addoption(parser)


def pytest_configure(config):
    config.addinivalue_line("markers", "selftest: proves an instrument of the benchmark (no spend)")
    config.addinivalue_line("markers", "ponybench: a benchmark cell (task x arm x model x run)")
    settings = options.settings(config)
    state = PonybenchState(settings=settings)
    config.stash[STATE] = state
    config.stash[SELFTESTS] = tally = SelftestTally()
    config.pluginmanager.register(tally, "ponybench-selftest-tally")
    try:
        state.model_ids = model_ids(settings.model_ids)
        if settings.enabled:
            state.arms = load_arms(settings.arms_dir)
            _validate_selection(state)
    except SpecError as exc:
        raise pytest.UsageError(str(exc)) from None
    if not settings.enabled:
        return
    if is_worker(config):
        state.is_worker = True
        state.run_dir = Path(config.workerinput["ponybench_run_dir"])
        state.claude = config.workerinput["ponybench_claude"]
    else:
        config.pluginmanager.register(Controller(state, config), "ponybench-controller")
        if settings.rescore is not None:
            state.run_dir = settings.rescore
            state.session = RunSession(state.run_dir, mode="rescore")
    # pytest's default SIGTERM handling skips `finally` blocks; make SIGTERM an interrupt so
    # every agent process tree is killed on the way out.
    if signal.getsignal(signal.SIGTERM) in (signal.SIG_DFL, None):
        signal.signal(signal.SIGTERM, _terminate)


def _terminate(signum, frame):
    procs.kill_all_live()
    raise KeyboardInterrupt(f"signal {signum}")


def _validate_selection(state: PonybenchState) -> None:
    s = state.settings
    if not state.arms and s.rescore is None:
        raise SpecError(f"no arms: {s.arms_dir} has no *.yaml arm files")
    for name in s.arms or []:
        if name not in state.arms:
            raise SpecError(f"--arms: unknown arm '{name}'; the arms in {s.arms_dir} are {', '.join(sorted(state.arms))}")
    for model in s.models:
        resolve_model(model, state.model_ids)


class Controller:
    """Registered on the controller only (the one process under -n 0)."""

    def __init__(self, state: PonybenchState, config):
        self.state = state
        self.config = config
        self.announced = False

    @pytest.hookimpl(optionalhook=True)
    def pytest_configure_node(self, node):
        """xdist: hand the run directory and the CLI to every worker."""
        node.workerinput["ponybench_run_dir"] = str(self.state.run_dir)
        node.workerinput["ponybench_claude"] = self.state.claude

    @pytest.hookimpl(optionalhook=True)
    def pytest_xdist_node_collection_finished(self, node, ids):
        self.announce([_identity_from_nodeid(i) for i in ids])

    def pytest_collection_finish(self, session):
        from .collect import CellItem

        if not is_worker(session.config):
            self.announce([cell_identity(i.cell) for i in session.items if isinstance(i, CellItem)])

    def announce(self, cells: list[dict | None]) -> None:
        """Before the first cell: how many cells, and what they may cost going by earlier runs."""
        cells = [c for c in cells if c is not None]
        if self.announced or not cells or self.state.session is None:
            return
        self.announced = True
        history = cost_history(self.state.settings.dir, self.state.run_dir, self.state.settings.rehearse)
        known = [history[(c["task"], c["model"])] for c in cells if (c["task"], c["model"]) in history]
        line = f"ponybench: {len(cells)} cells in {self.state.run_dir}"
        if known:
            estimate = sum(known) / len(known) * len(cells)
            line += (f"; estimated cost {usd(estimate)} from earlier runs of these tasks and models"
                     f" ({len(cells) - len(known)} of {len(cells)} cells have no history)")
        else:
            line += "; no earlier run of these tasks and models to estimate the cost from"
        if self.state.settings.max_cost is not None:
            line += f"; budget {usd(self.state.settings.max_cost)} ({usd(spent(self.state.run_dir))} spent so far)"
        self.write(line)

    def write(self, line: str) -> None:
        reporter = self.config.pluginmanager.get_plugin("terminalreporter")
        if reporter is not None:
            if reporter._tw.width_of_current_line:  # after progress dots: start a line of our own
                reporter.write("\n")
            reporter.write_line(line)

    def pytest_runtest_logreport(self, report):
        """Every report, the controller's own or a worker's replayed: gather here, once."""
        props = dict(report.user_properties)
        if report.when == "call" and "cell" in props:
            self.state.session.add(props)
            if not props.get("reused"):
                cost = props.get("cost_usd")
                self.write(f"ponybench: {props['cell']} {props.get('status')}"
                           f"{'' if cost is None else ' ' + usd(cost)}; {usd(spent(self.state.run_dir))} spent so far")
        elif report.skipped and BUDGET_REACHED in str(report.longrepr):
            self.state.session.budget_skipped += 1
        elif report.when == "???":  # xdist: the worker died while running this item
            ident = _identity_from_nodeid(report.nodeid)
            if ident is not None:
                self.state.session.add(never_ran(None, "the xdist worker running this cell crashed", ident))


@pytest.hookimpl(tryfirst=True)
def pytest_collect_directory(path, parent):
    state = parent.config.stash.get(STATE, None)
    if state is not None and Path(path).resolve() == state.settings.tasks_dir:
        return TasksDir.from_parent(parent, path=path)
    return None


def pytest_collect_file(file_path, parent):
    state = parent.config.stash.get(STATE, None)
    if (state is not None and file_path.suffix in (".yaml", ".yml")
            and file_path.parent.resolve() == state.settings.tasks_dir):
        return TaskFile.from_parent(parent, path=file_path)
    return None


def pytest_collection_modifyitems(session, config, items):
    """With --ponybench the session runs cells only: the project's other tests stay out."""
    if not state_of(config).settings.enabled:
        return
    from .collect import CellItem

    keep = [i for i in items if isinstance(i, CellItem)]
    dropped = [i for i in items if not isinstance(i, CellItem)]
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = keep
    grace = 120 + 2 * max((i.cell.task.check_timeout for i in keep), default=30)
    for item in keep:
        # pytest-timeout is the net above the cell's own timeout, never the first line.
        item.add_marker(pytest.mark.timeout(state_of(config).settings.timeout + grace, method="signal"))


@pytest.hookimpl(tryfirst=True)
def pytest_sessionstart(session):
    """The gate, on the controller, before any worker starts: a usable CLI and proven
    instruments, or no cell runs at all."""
    config = session.config
    state = state_of(config)
    if (is_worker(config) or not state.settings.enabled or state.settings.rescore is not None
            or config.option.collectonly):  # --co only lists cells: no gate, no run directory
        return
    try:
        state.claude = agent.find_claude(state.settings.claude, config.rootpath)
        state.claude_version = agent.claude_version(state.claude)
    except agent.CliMissing as exc:
        raise pytest.UsageError(str(exc)) from None
    if not state.settings.rehearse:
        problem = agent.real_run_problem()
        if problem:
            raise pytest.UsageError(problem)
    tasks = _loadable_tasks(state)
    broken = instruments.prove_all(tasks)
    if broken:
        raise pytest.UsageError("instruments broken; refusing to spend:\n  " + "\n  ".join(broken)
                                + "\nrun `pytest -m selftest` to see each instrument")
    if state.settings.confine and shutil.which("bwrap") is None:
        raise pytest.UsageError("--ponybench-confine needs bubblewrap: apt-get install bubblewrap")
    # Only a run that passed the gate gets a directory; a resume continues its own.
    if state.settings.resume is not None:
        state.run_dir = state.settings.resume
        state.session = RunSession(state.run_dir, mode="resume")
    else:
        state.run_dir = new_run_dir(state.settings.dir)
        state.session = RunSession(state.run_dir)


def _loadable_tasks(state: PonybenchState) -> list[TaskSpec]:
    tasks = []
    for path in sorted(state.settings.tasks_dir.glob("*.y*ml")):
        try:
            tasks.append(load_task(path, state.settings.fixtures_dir))
        except SpecError:
            continue  # reported as that file's collection error
    return tasks


def _identity_from_nodeid(nodeid: str) -> dict | None:
    name = nodeid.rsplit("::", 1)[-1]
    parts = name.split("__")
    if len(parts) != 4 or not parts[3].isdigit():
        return None
    task, arm, model, run = parts
    return {"cell": name, "task": task, "arm": arm, "model": model, "model_id": model, "run": int(run),
            "kind": "", "spec_hash": ""}


def pytest_sessionfinish(session, exitstatus):
    state = state_of(session.config)
    state.stop_rehearsal()
    if state.session is not None:
        state.written = state.session.finish(state.model_ids, state.claude_version,
                                             rehearsal=state.settings.rehearse, reference=state.settings.reference)


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    _strength_section(terminalreporter, config)
    state = state_of(config)
    if state.session is None:
        return
    tr = terminalreporter
    rows = summary.aggregate(state.session.records)
    tr.write_sep("=", "ponybench summary")
    for line in summary.table_lines(rows):
        tr.write_line(line)
    verb = "rescored" if state.settings.rescore is not None else "ran"
    tr.write_line(f"{verb} {len(state.session.records)} cells; kept in {state.run_dir}")
    if state.written:
        tr.write_line("wrote " + ", ".join(p.name for p in state.written))
    if state.session.budget_skipped:
        tr.write_line(f"{state.session.budget_skipped} cells skipped: {BUDGET_REACHED} "
                      f"({usd(spent(state.run_dir))} of {usd(state.settings.max_cost)}); "
                      f"finish them later with --ponybench-resume={state.run_dir}", yellow=True)
    if state.settings.rehearse:
        for line in arm_proof_lines(state.session.records):
            tr.write_line(line)
        tr.write_line("REHEARSAL: a scripted model on 127.0.0.1 wrote these files through the real CLI; "
                      "cost, tokens, LOC and rates above say nothing about any real model.", yellow=True, bold=True)


def _strength_section(tr, config) -> None:
    """After a `-m selftest` session: per task, how many variants under tests/variants/ the
    checks catch and accept (see strength.py)."""
    tally = config.stash.get(SELFTESTS, None)
    variants_dir = Path(config.rootpath) / strength.VARIANTS_DIR
    if tally is None or not tally.tasks or tally.other or is_worker(config) or not variants_dir.is_dir():
        return
    settings = state_of(config).settings
    tasks = strength.load_tasks(settings.tasks_dir, settings.fixtures_dir, tally.tasks)
    try:
        strengths = strength.measure(tasks, variants_dir)
    except SpecError as exc:
        tr.write_sep("=", "check strength")
        tr.write_line(f"variants not loaded: {exc}", red=True)
        return
    if not strengths:
        return
    tr.write_sep("=", "check strength (tests/variants)")
    for line in strength.table_lines(strengths):
        tr.write_line(line, red=line.startswith("  "))


def arm_proof_lines(records: list[dict]) -> list[str]:
    """One line per arm: did its text reach the (scripted) model in every cell that ran?"""
    lines = []
    for arm in sorted({r["arm"] for r in records}):
        cells = [r for r in records if r["arm"] == arm]
        unproven = [r for r in cells if r.get("status") == STATUS_ARM_UNPROVEN]
        checked = [r for r in cells if r.get("status") in (agent.STATUS_FINISHED, STATUS_ARM_UNPROVEN)]
        if unproven:
            lines.append(f"arm {arm}: NOT proven in {len(unproven)} of {len(cells)} cells: {unproven[0]['error']}")
        elif checked:
            lines.append(f"arm {arm}: proven ({len(checked)} of {len(cells)} cells reached the model with this arm only)")
        else:
            lines.append(f"arm {arm}: not proven (no cell of this arm finished)")
    return lines
