"""Attacks by the agent itself on the run around it, unconfined and in the sandbox (issue 20).

A hostile agent (tests/fakes/attacker_claude.py, a stand-in CLI that attacks before it writes
its answer) reads and rewrites what lies beside its workspace: `results.jsonl`, another
cell's code and sealed result, the spend ledger, the 429 pause, the run's key, and it plants
links at temporary names and leaves a daemon behind. Unconfined (`--ponybench-no-confine`)
each attack reaches the host, as the tests show; confined (the default where bubblewrap works)
each one is refused inside the sandbox and the host is untouched. The last tests make the
same attacks through the real CLI, its Write and Read tools driven by the scripted model.
"""
from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import pytest

from pytest_ponybench.cell import confine as confinement
from pytest_ponybench.store.rundir import key_dir
from support import proc_watch
from support.benchproc import ADD_TASK, GOOD_ADD, bench_args, only_run_dir, results, run, write_project

REPO = Path(__file__).resolve().parents[1]
ATTACKER = REPO / "tests" / "fakes" / "attacker_claude.py"
FILE_ATTACKS = ("results", "other_cell", "ledger", "pause", "key", "link", "read")
PACKAGE = Path(confinement.__file__).resolve().parents[1]  # the harness, as the session imports it
SHIPPED_TASK = REPO / "tasks" / "csv_total.yaml"  # the checkout's library: an editable install's
CELL0, CELL1 = "add__baseline__haiku__0", "add__baseline__haiku__1"


def needs_sandbox():
    """Like the pinned CLI: skipped on a developer machine without bubblewrap, a failure in CI."""
    box = confinement.sandbox()
    if not box.works:
        if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
            pytest.fail(box.problem)
        pytest.skip(box.problem)


def mine(mark: str, seconds: float = 1.5) -> set[int]:
    """Live processes whose command line carries `mark`, seen in any scan of /proc over
    `seconds`: a hopper changes its pid all the time, so one scan can fall between two."""
    seen: set[int] = set()
    deadline = time.monotonic() + seconds
    while True:
        for entry in os.listdir("/proc"):
            if not entry.isdigit():
                continue
            try:
                cmdline = Path(f"/proc/{entry}/cmdline").read_bytes()
            except OSError:
                continue
            if mark.encode() in cmdline and proc_watch.alive(int(entry)):
                seen.add(int(entry))
        if seen or time.monotonic() >= deadline:
            return seen
        time.sleep(0.05)


def planted_check_copy() -> Path:
    """A file where the harness keeps its check and reference copies (its temporary folder,
    in a 0700 folder as tempfile makes them): another cell's code or a good reference."""
    folder = Path(tempfile.mkdtemp(prefix="ponybench-check-"))
    copy = folder / "0" / "reference" / "add__baseline__haiku__7" / "add.py"
    copy.parent.mkdir(parents=True)
    copy.write_text("# PLANTED-REFERENCE-COPY\n" + GOOD_ADD["add.py"])
    return copy


def answer_key(root: Path, copy: Path) -> list[Path]:
    """What the attacker's `read` tries: the task file in the project and in the shipped
    library, the harness's package, a check copy in the harness's temporary folder."""
    return [root / "tasks" / "add.yaml", SHIPPED_TASK, PACKAGE / "__init__.py", copy]


def attacked_session(root: Path, *extra: str, attacks=FILE_ATTACKS, mark: str = "") -> Path:
    """Two cells, one after the other, each played by the attacker; the run directory."""
    write_project(root, {"add": ADD_TASK})
    (root / "pytest.ini").write_text("[pytest]\ntestpaths = tasks\nponybench_retry_wait = 0\n")
    copy = planted_check_copy()
    env = {"PONYBENCH_FAKE": json.dumps({"write": GOOD_ADD}), "ANTHROPIC_API_KEY": "fake", "IS_SANDBOX": "1",
           "PONYBENCH_ATTACKS": ",".join(attacks), "PONYBENCH_DAEMON_MARK": mark, "PONYBENCH_DAEMON_S": "40",
           "PONYBENCH_READ": os.pathsep.join(map(str, answer_key(root, copy)))}
    # The default (no confinement option): bench_args runs stand-ins unconfined, so that goes.
    args = [a for a in bench_args(root, claude=ATTACKER) if a != "--ponybench-no-confine"]
    try:
        done = run(root, [*args, "--runs", "2", *extra], env=env)
    finally:
        shutil.rmtree(copy.parents[2], ignore_errors=True)
    assert "INTERNALERROR" not in done.stdout, done.stdout[-3000:]
    run_dir = only_run_dir(root)
    (run_dir / "session.out").write_text(done.stdout)
    return run_dir


def report(run_dir: Path, cell: str) -> dict:
    return json.loads((run_dir / cell / "attack.json").read_text())


@pytest.fixture(scope="module")
def unconfined():
    root = Path(tempfile.mkdtemp(prefix="ponybench-attack-open-"))
    try:
        yield attacked_session(root, "--ponybench-no-confine")
    finally:
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture(scope="module")
def confined():
    needs_sandbox()
    root = Path(tempfile.mkdtemp(prefix="ponybench-attack-boxed-"))
    mark = f"ponybench-attack-daemon-{uuid.uuid4().hex[:8]}"
    try:
        run_dir = attacked_session(root, attacks=(*FILE_ATTACKS, "daemon"), mark=mark)
        yield run_dir, mark
    finally:
        shutil.rmtree(root, ignore_errors=True)


# ------------------------------------------------------------------ unconfined: each attack lands


def test_unconfined_the_agent_reads_other_cells_verdicts_and_overwrites_results(unconfined):
    assert "the agent runs unconfined (--ponybench-no-confine)" in (unconfined / "session.out").read_text()
    assert report(unconfined, CELL1)["results"].startswith("done:")
    seen = (unconfined / CELL1 / "seen.results.jsonl").read_text()
    assert f'"cell": "{CELL0}"' in seen, "cell 1's agent did not see cell 0's record"


def test_unconfined_the_agent_rewrites_another_cells_code_and_result(unconfined):
    assert report(unconfined, CELL1)["other_cell"] == f"done: rewrote {CELL0}"
    assert "rewritten by another cell's agent" in (unconfined / CELL0 / "add.py").read_text()
    sealed = json.loads((unconfined / "_ponybench.records" / CELL0 / "result.json").read_text())
    assert sealed["mac"] == "", "cell 0's sealed result was not replaced"


def test_unconfined_the_agent_erases_paid_spend_from_the_ledger(unconfined):
    ledger = [json.loads(line) for line in (unconfined / "_ponybench.spend.jsonl").read_text().splitlines()]
    assert {"cell": CELL1, "cost_usd": -1000.0} in ledger
    assert CELL0 not in [entry["cell"] for entry in ledger if entry["cost_usd"] >= 0], \
        "cell 0's paid spend survived its neighbour's overwrite"


def test_unconfined_the_agent_pauses_the_run_and_steals_the_key(unconfined):
    pause = json.loads((unconfined / "_ponybench.pause.json").read_text())
    assert pause["cell"] == CELL1 and pause["until"] > 3600 + os.path.getmtime(unconfined / "_ponybench.pause.json")
    run_id = (unconfined / "_ponybench.run-id").read_text().strip()
    assert (unconfined / CELL0 / "stolen.key").read_bytes() == (key_dir() / f"{run_id}.key").read_bytes()


def test_unconfined_the_agent_plants_links_beside_its_workspace(unconfined):
    assert os.path.islink(unconfined / "_ponybench.records" / CELL0 / ".result.json.tmp")
    assert os.path.islink(unconfined / ".results.jsonl.tmp")
    assert report(unconfined, CELL0)["link"].startswith("done: planted")


def test_unconfined_the_agent_reads_the_task_file_the_harness_and_a_check_copy(unconfined):
    assert report(unconfined, CELL0)["read"].startswith("done:")
    seen = (unconfined / CELL0 / "read.txt").read_text()
    for secret in ("good:", "PLANTED-REFERENCE-COPY", "__all__"):
        assert secret in seen, f"{secret!r} not read by the unconfined agent"


# ------------------------------------------------------------------ confined: each one is held


def test_confined_every_attack_is_refused_inside_the_sandbox(confined):
    run_dir, _ = confined
    assert "the agent runs confined (bubblewrap" in (run_dir / "session.out").read_text()
    for cell in (CELL0, CELL1):
        said = report(run_dir, cell)
        for attack in FILE_ATTACKS:
            assert said[attack].startswith("refused:") or said[attack] == "nothing to attack", (cell, attack, said)
        assert not (run_dir / cell / "stolen.key").exists() and not (run_dir / cell / "seen.results.jsonl").exists()
        # No task file (checks, good reference), harness or check copy in its view (issue 36).
        assert said["read"] == "refused: none of the files could be read", said
        assert not (run_dir / cell / "read.txt").exists()


def test_confined_the_run_and_every_cell_are_untouched(confined):
    run_dir, _ = confined
    records = {r["cell"]: r for r in results(run_dir)}
    assert sorted(records) == [CELL0, CELL1]
    for cell, record in records.items():
        assert (record["status"], record["passed"], record["escaped"]) == ("finished", True, ""), record
        assert (run_dir / cell / "add.py").read_text() == GOOD_ADD["add.py"]
    ledger = [json.loads(line) for line in (run_dir / "_ponybench.spend.jsonl").read_text().splitlines()]
    assert sorted(e["cell"] for e in ledger) == [CELL0, CELL1] and all(e["cost_usd"] >= 0 for e in ledger)
    assert not (run_dir / "_ponybench.pause.json").exists()
    assert not any(p.is_symlink() for p in run_dir.rglob("*")), "a link was planted in the run directory"
    options = json.loads((run_dir / "run.json").read_text())
    assert (options["confinement"]["confined"], options["confinement"]["why"], options["confinement"]["own_pids"]) == (True, "", True)


def test_confined_a_hopping_daemon_is_gone_when_its_cell_ends(confined):
    run_dir, mark = confined
    for cell in (CELL0, CELL1):
        assert report(run_dir, cell)["daemon"] == f"done: started {mark}"
    # It hops for 40 s unless killed; the session took far less, so one alive now escaped.
    assert mine(mark) == set()


STARTER = """
import os, sys
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        os.execv(sys.executable, [sys.executable, "-c", *sys.argv[1:]])
    os._exit(0)
"""


def hopper_code() -> str:
    """The attacker's hopping daemon, as it plays it in a cell."""
    spec = importlib.util.spec_from_file_location("attacker_claude", ATTACKER)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.HOPPER


def leave_a_daemon(confine: bool, tmp_path: Path, mark: str) -> Path:
    """Start a CLI that leaves a hopping daemon and exits, with no harness supervisor around
    it: only the sandbox (or nothing) stands between the daemon and the machine. Returns the
    file the daemon writes in its workspace once it has hopped for 4 s: its proof that it
    outlived the CLI, which no scan of /proc can miss (a hopper's pid lives microseconds, and
    under load every scan of a few seconds fell between two of them)."""
    ws = tmp_path / "run" / "cell"
    ws.mkdir(parents=True)
    outlived = ws / "outlived"
    hopper = hopper_code() + "\nopen(sys.argv[3], 'w').write('outlived the CLI')\n"
    argv = [sys.executable, "-c", STARTER, hopper, mark, "4", str(outlived)]
    if confine:
        boxed = confinement.confine(argv, ws, dict(os.environ), run_dir=ws.parent)
        confinement.run_alone(boxed, cwd=ws, stdin=subprocess.DEVNULL).check_returncode()
    else:
        subprocess.run(argv, cwd=ws, stdin=subprocess.DEVNULL, timeout=60, check=True)
    return outlived


def test_the_sandbox_alone_ends_a_daemon_that_an_unsupervised_cli_leaves(tmp_path):
    needs_sandbox()
    mark = f"ponybench-attack-daemon-{uuid.uuid4().hex[:8]}"
    boxed = leave_a_daemon(True, tmp_path / "boxed", mark)
    assert mine(mark) == set(), "a daemon outlived the sandbox it was started in"
    # The control: unconfined, the same daemon outlives its CLI and writes its proof. Waited
    # for, not timed (pytest-timeout is the net); by then the boxed one, had it survived the
    # sandbox, would have written its own proof long ago (it was started first).
    open_proof = leave_a_daemon(False, tmp_path / "open", mark)
    while not open_proof.exists():
        time.sleep(0.1)
    assert not boxed.exists(), "a daemon outlived the sandbox it was started in and wrote its proof"


# ------------------------------------------------------------------ the real CLI, in rehearsal

REAL_ATTACK_CONFTEST = """\
from pathlib import Path
from pytest_ponybench.store.rundir import key_dir

def pytest_ponybench_rehearsal_script(cell, script):
    ws = Path(script.writes[0][0]).parent
    run = ws.parent
    run_id = (run / "_ponybench.run-id").read_text().strip()
    script.tool_calls.append(("Read", {"file_path": str(key_dir() / f"{run_id}.key")}))
    script.tool_calls.append(("Read", {"file_path": str(run / "results.jsonl")}))
    script.writes += [
        (str(run / "results.jsonl"), "{}\\n"),
        (str(run / "_ponybench.spend.jsonl"), '{"cell": "x", "cost_usd": -1000}\\n'),
        (str(run / "_ponybench.pause.json"), '{"until": 9e9, "cell": "x"}'),
    ]
    if cell.run == 1:
        script.writes.append((str(run / "add__baseline__haiku__0" / "add.py"), "def add(a, b):\\n    return 0\\n"))
"""


def real_attack(root: Path, claude_bin: str, *extra: str) -> Path:
    write_project(root, {"add": ADD_TASK}, conftest=REAL_ATTACK_CONFTEST)
    (root / "pytest.ini").write_text("[pytest]\ntestpaths = tasks\nponybench_retry_wait = 0\n")
    done = run(root, bench_args(root, "--ponybench-rehearse", "--runs", "2", *extra, claude=claude_bin))
    assert "INTERNALERROR" not in done.stdout, done.stdout[-3000:]
    return only_run_dir(root)


@pytest.fixture
def project():
    root = Path(tempfile.mkdtemp(prefix="ponybench-attack-real-", dir="/var/tmp"))
    try:
        yield root
    finally:
        shutil.rmtree(root, ignore_errors=True)


def run_key(run_dir: Path) -> str:
    return (key_dir() / f"{(run_dir / '_ponybench.run-id').read_text().strip()}.key").read_text().strip()


def transcript(run_dir: Path, cell: str) -> str:
    return (run_dir / cell / "_ponybench.transcript.jsonl").read_text()


def test_the_real_cli_unconfined_reads_the_key_and_rewrites_the_run(project, claude_bin):
    run_dir = real_attack(project, claude_bin, "--ponybench-no-confine")
    assert run_key(run_dir) in transcript(run_dir, CELL0), "the agent's Read did not reach the run's key"
    assert f'\\"cell\\": \\"{CELL0}\\"' in transcript(run_dir, CELL1), "cell 1 did not read cell 0's record"
    assert "return 0" in (run_dir / CELL0 / "add.py").read_text(), "cell 1's agent did not reach cell 0"
    assert '"cost_usd": -1000' in (run_dir / "_ponybench.spend.jsonl").read_text()
    assert '"until": 9e9' in (run_dir / "_ponybench.pause.json").read_text()


def test_the_real_cli_confined_reaches_nothing_beside_its_workspace(project, claude_bin):
    needs_sandbox()
    run_dir = real_attack(project, claude_bin)
    records = {r["cell"]: r for r in results(run_dir)}
    assert sorted(records) == [CELL0, CELL1]
    for cell, record in records.items():
        assert (record["status"], record["passed"], record["escaped"]) == ("finished", True, ""), record
    assert (run_dir / CELL0 / "add.py").read_text() == ADD_TASK["rehearsal"]["add.py"]
    ledger = (run_dir / "_ponybench.spend.jsonl").read_text()
    assert "-1000" not in ledger and not (run_dir / "_ponybench.pause.json").exists()
    key = run_key(run_dir)
    for cell in (CELL0, CELL1):
        said = transcript(run_dir, cell)
        assert key not in said and CELL0 + '\\"' not in said.replace(f"{CELL0}/", "")
        # Every write outside the workspace met a read-only file system.
        refused = [line for line in said.splitlines() if "EROFS: read-only file system" in line]
        assert len(refused) == 3 + (cell == CELL1), said[-2000:]
