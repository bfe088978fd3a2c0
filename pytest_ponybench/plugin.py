"""pytest hooks: thin, each handing off to the module that owns the job.

Process roles under xdist: the controller (`controller.py`, registered only there) validates,
gates and gathers; workers collect and run cells. Without xdist one process plays both
parts. A rehearsal registers `rehearsal.RehearsalPlugin`, which reaches each cell through the
`pytest_ponybench_agent_env` and `pytest_ponybench_prove_arm` hooks; the defaults here are
those of a real run.
"""
from __future__ import annotations

import signal
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from . import fleet, options, pool, procs
from .cell import Cell, CellContext, read_identity
from .collect import TaskFile, TasksDir, arm_placeholder
from .rundir import RunDir
from .spec import ArmSpec, SpecError, TaskSpec, load_arms, model_ids, resolve_model

STATE = pytest.StashKey["PonybenchState"]()


@dataclass
class PonybenchState:
    """What every process of the session knows: the settings, the arms, the run directory."""

    settings: options.Settings
    arms: dict[str, ArmSpec] = field(default_factory=dict)
    model_ids: dict[str, str] = field(default_factory=dict)
    run_dir: RunDir | None = None
    claude: str | None = None
    claude_version: str = ""
    is_worker: bool = False  # an xdist worker: other cells run beside this process's
    fleet: fleet.WorkerFleet | None = None  # a remote worker: the run's spend comes from the controller

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
        for ws in self.run_dir.cell_dirs():
            ident = read_identity(ws)
            if ident.get("task") != task.name or ident.get("cell") != ws.name:
                continue  # another task's, or a stale copy kept aside by a resume
            arm = self.arms.get(ident.get("arm")) or arm_placeholder(str(ident.get("arm")))
            found.append((Cell(task, arm, str(ident["model"]), str(ident["model_id"]), int(ident["run"])), ws))
        return found

    def kept_result(self, cell: Cell) -> dict | None:
        """Under --ponybench-resume, this cell's finished record from the kept run (never paid
        twice); a remote worker has the controller's, sent with its shipment."""
        if self.fleet is not None:
            return self.fleet.kept_result(cell)
        if self.settings.resume is None:
            return None
        from .cell import kept_result

        return kept_result(cell, self.run_dir)

    def spent(self) -> float:
        """What the run has spent so far, as far as this process can know."""
        return self.fleet.spent() if self.fleet is not None else self.run_dir.spent()

    def cell_budget(self) -> float | None:
        """The CLI's --max-budget-usd for the next cell: the per-cell cap, and never more than
        what is left of the run's budget."""
        caps = [self.settings.max_cell_cost]
        if self.settings.max_cost is not None:
            caps.append(max(self.settings.max_cost - self.spent(), 0.0))
        caps = [c for c in caps if c is not None]
        return min(caps) if caps else None

    def cell_context(self, hook) -> CellContext:
        return CellContext(run_dir=self.run_dir, claude=self.claude, timeout=self.settings.timeout,
                           arms_dir=self.settings.arms_dir, hook=hook, rehearsal=self.settings.rehearse,
                           max_budget_usd=self.cell_budget(), confine=self.settings.confine,
                           exclusive=not self.is_worker and self.settings.at_once == 1,
                           retries=self.settings.retries, retry_wait=self.settings.retry_wait,
                           max_cost=self.settings.max_cost, spent=self.spent)


def state_of(config) -> PonybenchState:
    return config.stash[STATE]


def is_worker(config) -> bool:
    return hasattr(config, "workerinput")


def pytest_addhooks(pluginmanager):
    from . import hookspec

    pluginmanager.add_hookspecs(hookspec)


def pytest_addoption(parser):
    options.addoption(parser)


@pytest.hookimpl(tryfirst=True)
def pytest_load_initial_conftests(early_config, parser, args):
    """A benchmark run with no paths given collects the tasks folder only, not every
    testpath: importing the project's own tests cost each xdist worker seconds."""
    known = early_config.known_args_namespace
    if getattr(known, "file_or_dir", None) or not any(
            getattr(known, name, None) for name in ("ponybench", "ponybench_rescore", "ponybench_resume")):
        return
    tasks = Path(early_config.rootpath) / early_config.getini("ponybench_tasks")
    if tasks.is_dir():
        known.file_or_dir = [str(tasks)]  # the initial conftests are looked up from here
        args.append(str(tasks))  # and the session collects it


def pytest_configure(config):
    config.addinivalue_line("markers", "selftest: proves an instrument of the benchmark (no spend)")
    config.addinivalue_line("markers", "ponybench: a benchmark cell (task x arm x model x run)")
    settings = options.settings(config)
    unpacked = None
    if is_worker(config) and settings.enabled:
        try:  # a remote worker: the controller's tasks, arms, fixtures and settings (fleet.py)
            unpacked = fleet.unpack_on_worker(config, options.Settings)
        except fleet.WorkerCannotStart as exc:
            raise pytest.UsageError(str(exc)) from None
        settings = unpacked.settings if unpacked is not None else settings
    state = PonybenchState(settings=settings)
    config.stash[STATE] = state
    if not is_worker(config):
        from .strength import StrengthSection

        config.pluginmanager.register(StrengthSection(settings), "ponybench-check-strength")
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
        if unpacked is not None:
            state.run_dir, state.claude = unpacked.run_dir, unpacked.claude
            state.fleet = fleet.WorkerFleet(config, unpacked)
            config.pluginmanager.register(state.fleet, "ponybench-worker-fleet")
        else:
            state.run_dir = RunDir(Path(config.workerinput["ponybench_run_dir"]))
            state.claude = config.workerinput["ponybench_claude"]
    else:
        from .controller import Controller

        if settings.rescore is not None:
            state.run_dir = Controller.open_run(settings.rescore, "--ponybench-rescore")
            kept = {r.get("arm") for r in state.run_dir.read_results()}
            _validate_reference(state, kept | set((state.run_dir.read_options() or {}).get("arms") or []))
        config.pluginmanager.register(Controller(state, config), "ponybench-controller")
    if settings.rehearse and settings.rescore is None:
        from .rehearsal import RehearsalPlugin

        config.pluginmanager.register(RehearsalPlugin(config, state.arms, settings.arms_dir, settings.rehearse_ref,
                                                      settings.rehearse_fault),
                                      "ponybench-rehearsal")
    elif settings.rescore is None:
        from .proof import HookProof  # a real run proves each arm from its cells' hook events

        config.pluginmanager.register(HookProof(state.arms, settings.arms_dir), "ponybench-hook-proof")
    # pytest's default SIGTERM handling skips `finally` blocks; make SIGTERM an interrupt so
    # every agent process tree is killed on the way out.
    if signal.getsignal(signal.SIGTERM) in (signal.SIG_DFL, None):
        signal.signal(signal.SIGTERM, _terminate)


def _terminate(signum, frame):
    pool.stop()  # first: a cell killed by the stop must not leave a result that reads as its own
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
    if s.rescore is None:
        _validate_reference(state, set())


def _validate_reference(state: PonybenchState, kept_arms: set) -> None:
    """--ponybench-reference names an arm of the run (or of the arms folder): a typo is an
    option error, not a report that quietly compares nothing. The default, baseline, may be
    absent: the reports then say there is no reference to compare against."""
    known = set(state.arms) | {a for a in kept_arms if a}
    if state.settings.reference_given and state.settings.reference not in known:
        raise pytest.UsageError(
            f"--ponybench-reference {state.settings.reference}: no such arm; the arms are "
            f"{', '.join(sorted(known)) or '(none)'} (set it on the command line or as ponybench_reference in ini)")


# --------------------------------------------------------------------------- the cell hooks' defaults


@pytest.hookimpl(trylast=True)
def pytest_ponybench_agent_env(cell, workspace):
    return {}  # a real run: the CLI talks to the API with the user's own credentials


# pytest_ponybench_prove_arm: a real run's default is proof.HookProof (registered in
# pytest_configure: it needs the session's arms), a rehearsal's is RehearsalPlugin.


# --------------------------------------------------------------------------- collection


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
        return TaskFile.from_parent(parent, path=file_path, state=state)
    return None


def pytest_collection_modifyitems(session, config, items):
    """With --ponybench the session runs cells only: the project's other tests stay out."""
    state = state_of(config)
    if not state.settings.enabled:
        return
    from .collect import CellItem

    keep = [i for i in items if isinstance(i, CellItem)]
    dropped = [i for i in items if not isinstance(i, CellItem)]
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = keep
    grace = 120 + 2 * max((i.cell.task.check_timeout for i in keep), default=30)
    # pytest-timeout is the net above the cell's own timeout, never the first line. One mark
    # for every item: building it per item was a measurable share of collecting 10,000 cells.
    net = pytest.mark.timeout(state_of(config).settings.timeout + grace, method="signal")
    for item in keep:
        item.add_marker(net)


@pytest.hookimpl(trylast=True)
def pytest_collection_finish(session):
    """The collected items live as long as the session: take them out of the garbage
    collector's generations, so its full passes (pytest runs several at exit) stay cheap."""
    if state_of(session.config).settings.enabled:
        import gc

        gc.freeze()


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_protocol(item, nextitem):
    """Under xdist the pool may start the cell this worker runs next (pool.py)."""
    setattr(item, pool.NEXT_ITEM_ATTR, nextitem)


@pytest.hookimpl(tryfirst=True)
def pytest_sessionfinish(session, exitstatus):
    pool.stop()  # cells started ahead of an interrupted or stopped (-x) session


def pytest_unconfigure(config):
    pool.stop()
    procs.stop_server()  # this process's fork server: stopped and reaped here, not orphaned
