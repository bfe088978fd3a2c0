"""The hooks of a session that asked for the plugin (plugin.py registers this module then):
a benchmark run, a rescore, a resume, or a selftest. A session that did not ask never imports
it, so the plugin collects nothing and costs next to nothing there.

Process roles under xdist: the controller (`controller.py`, registered only there) validates,
gates and gathers; workers collect and run cells. Without xdist one process plays both
parts. A rehearsal registers `rehearsal_plugin.RehearsalPlugin`, which reaches each cell through the
`pytest_ponybench_agent_env` and `pytest_ponybench_prove_arm` hooks.
"""
from __future__ import annotations

import signal
from pathlib import Path

import pytest

from pytest_ponybench.processes import procs
from pytest_ponybench.run import fleet, options, pool, rounds
from pytest_ponybench.run.collect import CellItem, EvalsDir, TaskFile, TasksDir
from pytest_ponybench.run.session import STATE, PonybenchState, state_of
from pytest_ponybench.specs import library
from pytest_ponybench.specs.spec import SpecError, load_arms, model_ids, resolve_model
from pytest_ponybench.store.rundir import KEY_INPUT, RunDir, max_pause


def is_worker(config) -> bool:
    return hasattr(config, "workerinput")


def configure(config) -> None:
    """plugin.pytest_configure hands over here once the session asked for the plugin."""
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
    if not is_worker(config) and options.quality_asked(config):
        from pytest_ponybench.instruments.strength import StrengthSection

        config.pluginmanager.register(StrengthSection(settings, options.SELFTEST_MARKERS), "ponybench-check-strength")
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
        from pytest_ponybench.run.controller import Controller

        if settings.rescore is not None:
            state.run_dir = Controller.open_run(settings.rescore, "--ponybench-rescore")
            state.run_dir.max_pause = max_pause(settings)
            kept = {r.get("arm") for r in state.run_dir.read_results()}
            _validate_reference(state, kept | set((state.run_dir.read_options() or {}).get("arms") or []))
        config.pluginmanager.register(Controller(state, config), "ponybench-controller")
    if settings.rehearse and settings.rescore is None:
        from pytest_ponybench.rehearsal.plugin import RehearsalPlugin

        config.pluginmanager.register(RehearsalPlugin(config, state.arms, settings.arms_dir, settings.rehearse_ref,
                                                      settings.rehearse_fault),
                                      "ponybench-rehearsal")
    elif settings.rescore is None:
        from pytest_ponybench.cell.proof import HookProof  # a real run proves each arm from its cells' hook events

        config.pluginmanager.register(HookProof(state.arms, settings.arms_dir), "ponybench-hook-proof")
    rounds.register(state, config)  # --ponybench-plan, --ponybench-until-decided (after the controller: its gate comes later)
    from pytest_ponybench.run import judging  # --ponybench-judge: judged axes on every cell (judging.py)

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
    from pytest_ponybench.run import plugin_evals
    from pytest_ponybench.specs import plugin_arm

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


# --------------------------------------------------------------------------- collection


def _task_folder(state, path) -> object:
    resolved = Path(path).resolve()
    return next((f for f in state.task_folders if f.tasks == resolved), None)


@pytest.hookimpl(tryfirst=True)
def pytest_collect_directory(path, parent):
    state = parent.config.stash[STATE]
    folder = _task_folder(state, path)
    if folder is not None:
        # The harness's own proofs belong to the first task folder only: once per session.
        return TasksDir.from_parent(parent, path=path, harness=folder is state.task_folders[0])
    if state.evals is not None and Path(path).name == "evals" and any(
            Path(path).resolve() == p / "evals" for p in state.settings.plugins):
        return EvalsDir.from_parent(parent, path=path, state=state)
    return None


def pytest_collect_file(file_path, parent):
    if file_path.suffix not in (".yaml", ".yml"):
        return None
    state = parent.config.stash[STATE]
    folder = _task_folder(state, file_path.parent)
    if folder is not None:
        return TaskFile.from_parent(parent, path=file_path, state=state, fixtures_dir=folder.fixtures)
    return None


def pytest_collection_modifyitems(session, config, items):
    """With --ponybench the session runs cells only: the project's other tests stay out."""
    state = state_of(config)
    if not state.settings.enabled:
        return
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
