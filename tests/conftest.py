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
# a stub, whose "success" must not be remembered for the user's real runs (instruments.py).
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
