"""Fixtures shared by the project's own tests."""
import os
import tempfile
from pathlib import Path

import numpy  # noqa: F401  (see below)
import pytest

pytest_plugins = ["pytester"]

# numpy (imported by the plugin's stats when a session writes its reports) cannot be imported
# twice in one process. pytester's in-process runs forget every module first imported during
# the run, so the second such run in a worker would import numpy again and fail with
# "cannot load module more than once per process", depending on which tests a worker got
# first. Imported here, it is loaded before any run and never forgotten.

REPO = Path(__file__).resolve().parents[1]

# Every gate in these tests proves its instruments afresh: several tests replace a proof with
# a stub, whose "success" must not be remembered for the user's real runs (instruments/gate.py).
os.environ.setdefault("PONYBENCH_CACHE_DIR", "off")

# Run keys (rundir.key_dir) of every run these tests make, in one folder for the whole session,
# as one user's cache would be: pytester gives each test its own HOME, and a rescore test reads
# a run another test made. Outside every run directory, as the harness requires.
os.environ.setdefault("PONYBENCH_KEY_DIR", os.path.join(tempfile.gettempdir(), f"ponybench-test-keys-{os.getuid()}"))


@pytest.fixture(scope="session")
def claude_bin() -> str:
    """The pinned real Claude Code CLI (`npm ci` puts it in node_modules/.bin).

    Tests that need the real binary are skipped on a developer machine without it, but in CI
    (CI=true) a missing binary fails them: .ci/run installs it, so its absence is a CI bug.
    """
    local = REPO / "node_modules" / ".bin" / "claude"
    if local.exists():
        return str(local)
    message = "the pinned Claude Code CLI is not installed: run `npm ci` in the repository root"
    if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
        pytest.fail(message)
    pytest.skip(message)


# --- nothing a test starts outlives it -------------------------------------------------------
# The helpers that start a pytest session (support/benchproc.run and Session,
# ponyproject.run_pytest, pytester's runpytest_subprocess) mark everything it starts
# (support/proc_tree.py says why a marker in the environment). A call that fails kills its
# tree at once; these fixtures kill the trees left by calls that ended well, once the test's
# own assertions (some are about what the harness left behind) have run. Module-scoped
# fixtures start sessions too: the module's fixture sweeps those.

from support import proc_tree  # noqa: E402 - after the environment set above


@pytest.fixture(autouse=True)
def _test_trees_die_with_the_test():
    with proc_tree.sweeping():
        yield


@pytest.fixture(autouse=True, scope="module")
def _module_trees_die_with_the_module():
    with proc_tree.sweeping():
        yield


def _run_with_marked_tree(run):
    """Pytester.run (behind runpytest_subprocess) with its child's tree marked: pytester's
    popen builds the child's environment from os.environ, and kills only the child itself on
    its timeout (and nothing on Ctrl-C)."""
    import functools

    @functools.wraps(run)
    def marked_run(self, *cmdargs, **kwargs):
        with proc_tree.marked_os_environ():
            return run(self, *cmdargs, **kwargs)

    return marked_run


pytest.Pytester.run = _run_with_marked_tree(pytest.Pytester.run)
