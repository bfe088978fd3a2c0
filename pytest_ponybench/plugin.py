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

from . import fleet, library, options, pool, procs, rounds, rundir
from .cell import Cell, CellContext
from .collect import CellItem, EvalsDir, TaskFile, TasksDir, arm_placeholder
from .rundir import KEY_INPUT, RunDir, max_pause
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
    task_folders: list = field(default_factory=list)  # library.TaskFolder: the project's, the shipped
    default_arms: list[str] | None = None  # with --ponybench-plugin: the reference arm and the plugins'
    evals: object = None  # plugin_evals.EvalSuites: the imported claude plugin eval cases
    rescore_kept: list | None = None  # a rescore's cell.rescore_survey of the run, made once

    def selected_arms(self) -> list[ArmSpec]:
        names = self.settings.arms or self.default_arms or sorted(self.arms)
        return [self.arms[name] for name in names]

    def arms_for(self, task: TaskSpec) -> list[ArmSpec]:
        """An imported eval case runs with its plugin's arm and the reference arm only (those
        of them --arms selects); a task with every selected arm."""
        selected = self.selected_arms()
        own = self.evals.arms_for(task.name, self.settings.reference) if self.evals is not None else None
        return selected if own is None else [a for a in selected if a.name in own]

    def cells_for(self, task: TaskSpec) -> list[Cell]:
        return [Cell(task, arm, model, self.model_ids.get(model, model), run)
                for arm in self.arms_for(task)
                for model in self.settings.models
                for run in range(self.settings.runs)]

    def all_tasks(self) -> list[tuple[Path, Path | None]]:
        """Every task file of the run with its fixtures folder, then every imported case
        (fixtures None): what the controller validates and the run is made of."""
        found = library.all_task_files(self.task_folders)
        if self.evals is not None:
            found += [(case.task.path, None) for case in self.evals.cases.values()]
        return found

    def rescore_cells(self, task: TaskSpec) -> list[tuple[Cell, Path]]:
        """The kept cells of `task` whose records verify under the run's key (the controller
        names the others, once: cell.refused_lines)."""
        found = []
        for kept in self.rescore_survey():
            ident, ws = kept.identity, kept.ws
            if ident.get("task") != task.name or ident.get("cell") != ws.name:
                continue  # another task's, or a stale copy kept aside by a resume
            if kept.problem is not None:
                continue
            arm = self.arms.get(ident.get("arm")) or arm_placeholder(str(ident.get("arm")))
            found.append((Cell(task, arm, str(ident["model"]), str(ident["model_id"]), int(ident["run"])), ws))
        return found

    def rescore_survey(self) -> list:
        """The run's kept cells with their records verified (cell.rescore_survey), once per
        process: the controller's refused lines and every task's collection read it."""
        if self.rescore_kept is None:
            from .cell import rescore_survey

            self.rescore_kept = rescore_survey(self.run_dir)
        return self.rescore_kept

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
        return self.cell_caps()[0]

    def cell_caps(self) -> tuple[float | None, bool]:
        """(the CLI's --max-budget-usd for the next cell, whether it is the run's remainder).

        The remainder binds when it is below the per-cell cap (or there is none): a cell the CLI
        then stops is cut by the run's budget, an accident of the order cells ran in
        (`budget_cut`, left out of the rates). A cell stopped by the per-cell cap, which every
        cell of the run ran under alike, stays a failed run of its arm (`cli_error`)."""
        cell_cap = self.settings.max_cell_cost
        if self.settings.max_cost is None:
            return cell_cap, False
        left = max(self.settings.max_cost - self.spent(), 0.0)
        if cell_cap is not None and cell_cap <= left:
            return cell_cap, False
        return left, True

    def confined(self) -> bool:
        """Whether this process's cells run the agent in the sandbox: always with
        --ponybench-confine (which stops where bubblewrap cannot), never with
        --ponybench-no-confine, else where the trial sandbox of this host worked."""
        if self.settings.confine is False:
            return False
        from . import agent

        box = agent.sandbox()
        if self.settings.confine is True and not box.works:
            raise agent.CliMissing(f"--ponybench-confine: {box.problem}")
        return box.works

    def agent_limits(self):
        """The cgroup limits of each cell's agent (agent.AgentLimits)."""
        from . import agent

        return agent.AgentLimits(memory=self.settings.agent_memory, pids=self.settings.agent_pids)

    def cell_context(self, hook) -> CellContext:
        budget, run_cut = self.cell_caps()
        return CellContext(run_dir=self.run_dir, claude=self.claude, timeout=self.settings.timeout,
                           arms_dir=self.settings.arms_dir, hook=hook, rehearsal=self.settings.rehearse,
                           max_budget_usd=budget, run_cut=run_cut, confine=self.confined(),
                           agent_limits=self.agent_limits(),
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
    rounds.addoption(parser)


@pytest.hookimpl(tryfirst=True)
def pytest_load_initial_conftests(early_config, parser, args):
    """A benchmark run with no paths given collects the tasks folder only, not every
    testpath: importing the project's own tests cost each xdist worker seconds."""
    known = early_config.known_args_namespace
    if getattr(known, "file_or_dir", None):
        return
    if not any(getattr(known, name, None) for name in ("ponybench", "ponybench_rescore", "ponybench_resume")):
        selftest = _selftest_paths(early_config, known)
        if selftest:
            known.file_or_dir = selftest
            args.extend(selftest)
        return
    # The project's tasks folder and/or the shipped library (library.py), and the evals/ of
    # every --ponybench-plugin: collected from any directory, an empty one included.
    root = Path(early_config.rootpath)
    mode = getattr(known, "ponybench_library", None) or early_config.getini("ponybench_library")
    if mode not in library.MODES:
        return  # pytest_configure reports the bad ini value
    folders = [str(f.tasks) for f in library.task_folders(
        root / early_config.getini("ponybench_tasks"), root / early_config.getini("ponybench_fixtures"), mode)]
    folders += [str(p / "evals") for p in getattr(known, "ponybench_plugin", None) or [] if (p / "evals").is_dir()]
    if folders:
        known.file_or_dir = folders  # the initial conftests are looked up from here
        args.extend(folders)  # and the session collects them


def _selftest_paths(early_config, known) -> list[str]:
    """`pytest -m selftest` with no paths: the usual collection (testpaths, else the current
    folder) plus every task folder of the run's library outside it, so a plugin repository
    without tasks proves the shipped library its runs use. Empty when nothing is added."""
    if "selftest" not in (getattr(known, "markexpr", "") or ""):
        return []
    root = Path(early_config.rootpath)
    mode = getattr(known, "ponybench_library", None) or early_config.getini("ponybench_library")
    if mode not in library.MODES:
        return []
    base = [root / p for p in early_config.getini("testpaths") if (root / p).exists()] or [
        Path(early_config.invocation_params.dir)]
    folders = [f.tasks for f in library.task_folders(
        root / early_config.getini("ponybench_tasks"), root / early_config.getini("ponybench_fixtures"), mode)]
    extra = [f for f in folders if not any(f.resolve().is_relative_to(b.resolve()) for b in base)]
    return [str(p) for p in base + extra] if extra else []


def pytest_ignore_collect(collection_path, config):
    """Kept runs are never collected: a run directory or a cell's workspace holds the code and
    tests the agent wrote, which are not the project's tests (rundir.is_kept_run)."""
    if collection_path.is_dir() and rundir.is_kept_run(collection_path):
        return True
    return None


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
        state.task_folders = library.task_folders(settings.tasks_dir, settings.fixtures_dir, settings.library)
        if settings.enabled:
            library.all_task_files(state.task_folders)  # a task name in two folders: stop here, naming both
            _load_arms_and_suites(state, config)
            _validate_selection(state)
    except SpecError as exc:
        raise pytest.UsageError(str(exc)) from None
    if not settings.enabled:
        return
    if is_worker(config):
        state.is_worker = True
        if unpacked is not None:
            state.run_dir, state.claude = unpacked.run_dir, unpacked.claude
            state.run_dir.key = _key_from(config.workerinput)  # its records come home sealed
            state.fleet = fleet.WorkerFleet(config, unpacked)
            config.pluginmanager.register(state.fleet, "ponybench-worker-fleet")
        else:
            state.run_dir = RunDir(Path(config.workerinput["ponybench_run_dir"]),
                                   key=_key_from(config.workerinput))
            state.claude = config.workerinput["ponybench_claude"]
        state.run_dir.max_pause = max_pause(settings)
    else:
        from .controller import Controller

        if settings.rescore is not None:
            state.run_dir = Controller.open_run(settings.rescore, "--ponybench-rescore")
            state.run_dir.max_pause = max_pause(settings)
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
    rounds.register(state, config)  # --ponybench-plan, --ponybench-until-decided (after the controller: its gate comes later)
    from . import judging  # --ponybench-judge: judged axes on every cell (judging.py)

    judging.register(config, state)
    # pytest's default SIGTERM handling skips `finally` blocks; make SIGTERM an interrupt so
    # every agent process tree is killed on the way out.
    if signal.getsignal(signal.SIGTERM) in (signal.SIG_DFL, None):
        signal.signal(signal.SIGTERM, _terminate)


def _key_from(workerinput: dict) -> bytes | None:
    """The run's key as the controller handed it to this worker (rundir.py)."""
    value = workerinput.get(KEY_INPUT)
    return bytes.fromhex(value) if isinstance(value, str) and value else None


def _terminate(signum, frame):
    pool.stop()  # first: a cell killed by the stop must not leave a result that reads as its own
    procs.kill_all_live()
    raise KeyboardInterrupt(f"signal {signum}")


def _load_arms_and_suites(state: PonybenchState, config) -> None:
    """The arms of every arm folder (library.py), one per --ponybench-plugin folder, and the
    plugins' claude plugin eval cases (registered as a plugin: they add to cell records)."""
    from . import plugin_arm, plugin_evals

    s = state.settings
    folders = library.arm_folders(s.arms_dir, s.library)
    paths = [p for folder in folders for p in sorted(folder.glob("*.yaml"))]
    library.check_clashes("arm", paths)
    for folder in folders:
        state.arms.update(load_arms(folder))
    plugged = plugin_arm.plugin_arms(s.plugins, state.arms)
    state.arms.update(plugged)
    if not plugged:
        return
    # Pointed at plugins, a run compares them with the reference arm unless --arms says otherwise.
    state.default_arms = [n for n in [s.reference] if n in state.arms] + list(plugged)
    suites = plugin_evals.EvalSuites()
    taken = {p.stem: p for p, _ in library.all_task_files(state.task_folders)}
    for folder, arm in zip(s.plugins, plugged.values()):
        suites.add(plugin_evals.load_suite(folder, arm.name), taken)
    if suites.cases:
        state.evals = suites
        config.pluginmanager.register(suites, "ponybench-plugin-evals")


def _validate_selection(state: PonybenchState) -> None:
    s = state.settings
    if not state.arms and s.rescore is None:
        raise SpecError(f"no arms: {s.arms_dir} has no *.yaml arm files and no --ponybench-plugin was given")
    for name in s.arms or []:
        if name not in state.arms:
            raise SpecError(f"--arms: unknown arm '{name}'; the arms are {', '.join(sorted(state.arms))}")
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


def _task_folder(state, path) -> object:
    resolved = Path(path).resolve()
    return next((f for f in state.task_folders if f.tasks == resolved), None)


@pytest.hookimpl(tryfirst=True)
def pytest_collect_directory(path, parent):
    state = parent.config.stash.get(STATE, None)
    if state is None:
        return None
    folder = _task_folder(state, path)
    if folder is not None:
        # The harness's own proofs belong to the first task folder only: once per session.
        return TasksDir.from_parent(parent, path=path, harness=folder is state.task_folders[0])
    if state.evals is not None and Path(path).name == "evals" and any(
            Path(path).resolve() == p / "evals" for p in state.settings.plugins):
        return EvalsDir.from_parent(parent, path=path, state=state)
    return None


def pytest_collect_file(file_path, parent):
    state = parent.config.stash.get(STATE, None)
    if state is None or file_path.suffix not in (".yaml", ".yml"):
        return None
    folder = _task_folder(state, file_path.parent)
    if folder is not None:
        return TaskFile.from_parent(parent, path=file_path, state=state, fixtures_dir=folder.fixtures)
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
    # Tasks whose checks still run the agent's code in their own process: said once, by name.
    in_process = sorted({i.cell.task.name for i in keep if i.cell.task.checks_in_process})
    reporter = config.pluginmanager.get_plugin("terminalreporter")
    if in_process and reporter is not None:
        reporter.write_line(f"ponybench: the checks of {', '.join(in_process)} are not yet behind the trust boundary "
                            f"(checks_in_process): the agent's code runs in the process that writes their verdict")
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
    """Under xdist the pool may start the cell this worker runs next (pool.py). Set only
    there: elsewhere the pool reads the session's items, and one more attribute on each of
    10,000 items grows every item's attribute table (about 0.2 MB a thousand cells)."""
    if hasattr(item.config, "workerinput"):
        setattr(item, pool.NEXT_ITEM_ATTR, nextitem)


@pytest.hookimpl(wrapper=True, specname="pytest_runtest_protocol")
def pytest_runtest_protocol_forget(item, nextitem):
    """Once a cell's reports are made, its item forgets the record (its user_properties): the
    session keeps every item to its end, and the record is in results.jsonl by then."""
    try:
        return (yield)
    finally:
        if isinstance(item, CellItem):
            item.user_properties.clear()


@pytest.hookimpl(tryfirst=True)
def pytest_sessionfinish(session, exitstatus):
    pool.stop()  # cells started ahead of an interrupted or stopped (-x) session


def pytest_unconfigure(config):
    pool.stop()
    procs.stop_server()  # this process's fork server: stopped and reaped here, not orphaned
