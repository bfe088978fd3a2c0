"""The entry point (pytest11): inert until a session asks for the plugin.

A session asks with `--ponybench`, a rescore, a resume, a plan, or `-m selftest` (or the
library's quality marker, `-m ponybench_quality`): then `run/hooks.py` is registered and does
the work. Any other session, a project that only has the plugin installed, gets its options,
markers and nothing else: no collection (an Ansible `tasks/main.yml` stays pytest's business),
no report section, and none of the plugin's heavier modules imported. Keep the imports here
to what options and configure need.
"""
from __future__ import annotations

from pathlib import Path

import pytest

from pytest_ponybench.run import options


def pytest_addhooks(pluginmanager):
    from pytest_ponybench import hookspec

    pluginmanager.add_hookspecs(hookspec)


def pytest_addoption(parser):
    options.addoption(parser)


AGAIN = pytest.StashKey[list]()  # the command line to run instead (options.equals_form)


@pytest.hookimpl(tryfirst=True)
def pytest_load_initial_conftests(early_config, parser, args):
    """A benchmark run with no paths given collects the tasks folder only, not every
    testpath: importing the project's own tests cost each xdist worker seconds."""
    known = early_config.known_args_namespace
    again = options.equals_form(early_config.invocation_params.args, Path(early_config.invocation_params.dir))
    if again is not None:
        # This session's rootdir and ini were chosen from one of our option values taken for a
        # test path: load no conftest of that wrong root; pytest_cmdline_main runs it again.
        early_config.stash[AGAIN] = again
        known.noconftest = True
        return
    if getattr(known, "file_or_dir", None):
        return
    if not any(getattr(known, name, None) for name in ("ponybench", "ponybench_rescore", "ponybench_resume")):
        selftest = _selftest_paths(early_config, known)
        if selftest:
            known.file_or_dir = selftest
            args.extend(selftest)
        return
    from pytest_ponybench.specs import library

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
        # The initial conftests are looked up from these paths. The tasks folder may lie
        # outside the project (the shipped library, a plugin's evals/), so the rootdir's own
        # conftest.py is named too: its ponybench hooks load in every layout, as they do when
        # the project's tasks/ is collected. Named as a file, no test* folder beside it is read.
        conftest = root / "conftest.py"
        known.file_or_dir = folders + ([str(conftest)] if conftest.is_file() else [])
        args.extend(folders)  # the session collects the tasks alone


@pytest.hookimpl(tryfirst=True)
def pytest_cmdline_main(config):
    """The session again from the '=' form of its command line, with its rootdir and ini
    decided as the user meant (options.equals_form); this one configures nothing."""
    again = config.stash.get(AGAIN, None)
    if again is None:
        return None
    return pytest.main(again, plugins=list(config.invocation_params.plugins or ()))


def _selftest_paths(early_config, known) -> list[str]:
    """`pytest -m selftest` with no paths: the usual collection (testpaths, else the current
    folder) plus every task folder of the run's library outside it, so a plugin repository
    without tasks proves the shipped library its runs use. Empty when nothing is added."""
    if not options.names_selftest(getattr(known, "markexpr", "")):
        return []
    from pytest_ponybench.specs import library

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
    from pytest_ponybench.store import rundir

    if collection_path.is_dir() and rundir.is_kept_run(collection_path):
        return True
    return None


def pytest_configure(config):
    config.addinivalue_line("markers", "selftest: proves an instrument of the benchmark (no spend)")
    config.addinivalue_line("markers", f"{options.QUALITY}: the shipped library's quality gates: mutation "
                                       "score, review lines, check strength (no spend)")
    config.addinivalue_line("markers", "ponybench: a benchmark cell (task x arm x model x run)")
    if not options.asked(config):
        return  # inert: nothing collected, registered or reported
    from pytest_ponybench.run import hooks

    config.pluginmanager.register(hooks, "ponybench-session")
    hooks.configure(config)


# --------------------------------------------------------------------------- the cell hooks' defaults


@pytest.hookimpl(trylast=True)
def pytest_ponybench_agent_env(cell, workspace):
    return {}  # a real run: the CLI talks to the API with the user's own credentials


# pytest_ponybench_prove_arm: a real run's default is proof.HookProof (registered in
# hooks.configure: it needs the session's arms), a rehearsal's is RehearsalPlugin.
