"""Benchmark sessions as a user starts them: `python -m pytest --ponybench ...` in a child
process of the test, run to the end or killed on purpose in the middle.

Used by the fault, resume, budget and confinement tests. A project is a directory with
tasks/, arms/, a pytest.ini and optionally a conftest.py; the stand-in CLI
(tests/fakes/fake_claude.py) reads its behaviour from `fake.json` in the project and logs
every call to `calls.jsonl` there.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from contextlib import contextmanager
from pathlib import Path

import yaml

from support import proc_tree
from support.ponyproject import only_run_dir, run_dirs  # noqa: F401 - re-exported for the fault tests

REPO = Path(__file__).resolve().parents[2]
FAKE = REPO / "tests" / "fakes" / "fake_claude.py"
# Plugins of this machine that only slow a child pytest down; absent ones are ignored.
QUIET = ["-p", "no:cacheprovider", "-p", "no:hypothesispytest", "-p", "no:benchmark"]

ADD_TASK = {
    "description": "add two numbers",
    "file": "add.py",
    "prompt": "Write add(a, b) in add.py.",
    "checks": {"correct": 'add = find_function(load(FILE), "add")\nassert add(2, 3) == 5, "add(2, 3) is not 5"\n'},
    "refs": {"axis": "correct", "good": "def add(a, b):\n    return a + b\n",
             "bad": "def add(a, b):\n    return a - b\n"},
    "rehearsal": {"add.py": "def add(a, b):\n    return a + b\n"},
}
GOOD_ADD = {"add.py": "def add(a, b):\n    return a + b\n"}
BASELINE = {"baseline": {"description": "nothing added"}}


def write_project(root: Path, tasks: dict[str, dict], arms: dict[str, dict] | None = None,
                  conftest: str | None = None) -> Path:
    root = Path(root)
    for folder, specs in (("tasks", tasks), ("arms", arms or BASELINE)):
        (root / folder).mkdir(parents=True, exist_ok=True)
        for name, spec in specs.items():
            (root / folder / f"{name}.yaml").write_text(yaml.safe_dump(spec, sort_keys=False))
    (root / "pytest.ini").write_text("[pytest]\ntestpaths = tasks\n")
    if conftest is not None:
        (root / "conftest.py").write_text(conftest)
    return root


def fake_env(root: Path, **spec) -> dict[str, str]:
    """Environment of a run against the stand-in CLI: its behaviour file and call log, a
    credential the gate looks for (the fake calls nothing), and permission to run as root."""
    root = Path(root)
    spec.setdefault("calls", str(root / "calls.jsonl"))
    spec.setdefault("worker_pid_file", str(root / "worker.pid"))
    (root / "fake.json").write_text(json.dumps(spec))
    return {"PONYBENCH_FAKE": str(root / "fake.json"), "ANTHROPIC_API_KEY": "fake", "IS_SANDBOX": "1"}


def bench_args(root: Path, *extra: str, claude: str | Path = FAKE) -> list[str]:
    return ["--ponybench", f"--ponybench-claude={claude}", f"--ponybench-dir={Path(root) / 'runs'}",
            *QUIET, *stand_in_unconfined(claude), *extra]


REAL_CLI = REPO / "node_modules" / ".bin" / "claude"


def installed_cli(claude_bin: str | Path, folder: Path) -> Path:
    """The real CLI's binary installed in `folder` (a hard link where it can: the same file, no
    370 MB copy). A confined agent sees the CLI's own folder only: a wrapper there that runs
    the binary from elsewhere would find nothing, as on another machine."""
    folder.mkdir(parents=True, exist_ok=True)
    installed = folder / "claude.exe"
    try:
        os.link(os.path.realpath(claude_bin), installed)
    except OSError:
        import shutil
        shutil.copy2(os.path.realpath(claude_bin), installed)
    return installed


def stand_in_unconfined(claude: str | Path) -> list[str]:
    """The stand-in CLI and the tests' wrappers report to the test through files beside the
    project (a call log, counters, sync files, a write beside the workspace), which the
    sandbox refuses: their runs go unconfined unless a test passes --ponybench-confine after
    these. The real CLI's runs take the default (confined where bubblewrap works), as a user's do."""
    return [] if Path(claude).resolve() == REAL_CLI.resolve() else ["--ponybench-no-confine"]


def _env(env: dict[str, str] | None) -> dict[str, str]:
    full = {**os.environ, **(env or {})}
    for var in ("PYTEST_ADDOPTS", "PYTEST_XDIST_WORKER", "PYTEST_XDIST_WORKER_COUNT", "PYTEST_CURRENT_TEST"):
        full.pop(var, None)
    return full


def run(root: Path, args: list[str], env: dict[str, str] | None = None,
        timeout: float = 900) -> subprocess.CompletedProcess:
    """`python -m pytest ARGS` in `root`, to its end. Every process the child started dies at
    once if the call fails (its timeout, Ctrl-C), else when the test ends (proc_tree). The
    timeout only ends a hung session: far above what one takes on a loaded machine."""
    with proc_tree.call_tree(_env(env)) as marked:
        return subprocess.run([sys.executable, "-m", "pytest", *args], cwd=root, env=marked,
                              capture_output=True, text=True, timeout=timeout)


def _interruptible() -> None:
    """In the child, before exec: SIGINT back to its default. A shell starts a background job
    with SIGINT ignored (`cmd &` without job control: how CI scripts are often launched), and
    Python then installs no KeyboardInterrupt handler, so a test's Ctrl-C would never arrive."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


class Session:
    """`python -m pytest ARGS` started in its own session (so a test can signal its whole
    process group, as a terminal or a CI runner would), output kept in files.

    Everything it starts carries its own marker (proc_tree): leaving a `with` block by an
    exception, and the end of the test, kill the whole tree, the harness's fork server and
    supervisors (sessions of their own) and any setsid escapee too. `kill()` does not: tests
    assert that the harness cleans up after a SIGKILL of its controller."""

    def __init__(self, root: Path, args: list[str], env: dict[str, str] | None = None, name: str = "session"):
        self.root = Path(root)
        self.marker = proc_tree.new_marker()
        self.out_path, self.err_path = self.root / f"{name}.out", self.root / f"{name}.err"
        with open(self.out_path, "wb") as out, open(self.err_path, "wb") as err:
            self.proc = subprocess.Popen([sys.executable, "-m", "pytest", *args], cwd=root,
                                         env=proc_tree.marked_env(_env(env), self.marker), stdin=subprocess.DEVNULL,
                                         stdout=out, stderr=err, start_new_session=True,
                                         preexec_fn=_interruptible)

    @property
    def stdout(self) -> str:
        return self.out_path.read_text(errors="replace")

    def wait(self, timeout: float = 900) -> int:
        try:
            return self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            raise AssertionError(f"pytest did not end within {timeout} s:\n{self.stdout[-3000:]}") from None

    def signal(self, signum: int) -> None:
        os.kill(self.proc.pid, signum)

    def kill(self) -> None:
        """SIGKILL the whole process group (the controller and its xdist workers)."""
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.proc.wait(timeout=30)

    def __enter__(self) -> "Session":
        return self

    def __exit__(self, exc_type=None, *exc) -> None:
        if self.proc.poll() is None:
            self.kill()
        if exc_type is not None:  # the test fails or is interrupted: its tree goes now
            proc_tree.end_tree(self.marker)


def wait_for(predicate, timeout: float, what: str, session: Session | None = None):
    """Poll until `predicate()` is truthy; fail with `what` at the deadline."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        if session is not None and session.proc.poll() is not None:
            value = predicate()
            if value:
                return value
            raise AssertionError(f"pytest ended (exit {session.proc.returncode}) before {what}:\n"
                                 f"{session.stdout[-3000:]}")
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


def finished_cells(run_dir: Path) -> set[str]:
    """Cells whose workspace holds a finished record (what a resume reuses)."""
    return {p.parent.name for p in Path(run_dir).glob("_ponybench.records/*/result.json")}


def results(run_dir: Path) -> list[dict]:
    path = Path(run_dir) / "results.jsonl"
    # Each line carries its MAC (`mac`, rundir.seal_result): the tests read the record without it.
    return [{k: v for k, v in json.loads(line).items() if k != "mac"}
            for line in path.read_text().splitlines()] if path.exists() else []


def by_cell(records: list[dict]) -> dict[str, dict]:
    cells = {r["cell"]: r for r in records}
    assert len(cells) == len(records), f"a cell was recorded twice: {sorted(r['cell'] for r in records)}"
    return cells


def summary(run_dir: Path) -> dict:
    return json.loads((Path(run_dir) / "summary.json").read_text())


def calls(root: Path) -> list[dict]:
    path = Path(root) / "calls.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def cli_stderr(workspace: Path) -> str:
    """The CLI's stderr of a cell as it is now: in the cell's records folder while the CLI runs,
    in the workspace once its tree is gone ("" before it starts)."""
    from pytest_ponybench.cell.workspace import STDERR, cli_output

    for path in (cli_output(Path(workspace), STDERR), Path(workspace) / STDERR):  # the move is a rename
        try:
            return path.read_text(errors="replace")
        except FileNotFoundError:
            continue
    return ""


@contextmanager
def killing_named_workers(root: Path):
    """Stand in for a crashing xdist worker: while inside, whatever pid the fake's "kill_worker"
    mode names in the project's worker.pid (fake_env) is SIGKILLed from here. The CLI cannot
    kill it itself: the harness runs it in a PID namespace of its own, which is the point."""
    named = Path(root) / "worker.pid"
    stop = threading.Event()

    def watch():
        while not stop.wait(0.05):
            try:
                pid = int(named.read_text())
            except (OSError, ValueError):
                continue
            named.unlink()
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass

    watcher = threading.Thread(target=watch, name="worker-killer", daemon=True)
    watcher.start()
    try:
        yield
    finally:
        stop.set()
        watcher.join(timeout=10)


def fake_pids(workspace: Path) -> list[int]:
    """Pids the fake CLI printed on its stderr (`fake-pid: N`), wherever the harness has it."""
    return [int(line.split(":", 1)[1]) for line in cli_stderr(workspace).splitlines() if line.startswith("fake-pid:")]


def counting_claude(tmp: Path, real: str) -> tuple[Path, Path]:
    """A wrapper around the real CLI that logs one line per agent invocation (not the gate's
    `--version`) and then becomes the CLI: (wrapper path, log path)."""
    log = Path(tmp) / "cli-invocations.log"
    wrapper = Path(tmp) / "counting-claude"
    wrapper.write_text(f'#!/bin/sh\n[ "$1" = "--version" ] || echo "$$ $(pwd -P)" >> "{log}"\nexec "{real}" "$@"\n')
    wrapper.chmod(0o755)
    return wrapper, log


def invocations(log: Path) -> list[str]:
    """Workspace (cell id) of each logged CLI invocation."""
    if not log.exists():
        return []
    return [Path(line.split(" ", 1)[1]).name for line in log.read_text().splitlines() if " " in line]
