"""Attacks on the session from inside a check, as a hostile agent's delivered code would make
them (issue 20): the code runs in the check's process, so it can do anything a check can.

Each test is one attack that broke a promise before checks ran sandboxed (sandbox.py: their own
PID and mount namespaces, a cgroup, an unprivileged user, a capped disk); each failed on the
code before that change. Where the machine lacks a part, `require` says which and fails in
CI or as root on Linux (where the parts are expected), and skips, saying why, elsewhere.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

import pytest

from pytest_ponybench.processes import procs, sandbox
from pytest_ponybench.scoring import checks
from support import proc_watch

REPO = Path(__file__).resolve().parents[1]


def require(*parts: str) -> None:
    """Stop the test when a part of the sandbox is missing here: a failure where it should
    be present (CI, or root on Linux), a skip that says what is missing elsewhere."""
    found = sandbox.support()
    missing = [f"{part}: {getattr(found, part)}" for part in parts if getattr(found, part)]
    if not missing:
        return
    message = f"this machine lacks a part of the sandbox ({'; '.join(missing)})"
    if os.environ.get("CI") or (sys.platform.startswith("linux") and os.geteuid() == 0):
        pytest.fail(message + ", which CI and root on Linux are expected to have")
    pytest.skip(message)


@pytest.fixture
def run(monkeypatch):
    """A run directory outside /tmp (so that hiding it is the sandbox's doing, not the private
    /tmp's): a cell's workspace, another cell's, results.jsonl, the ledger, and the run's key."""
    root = Path(tempfile.mkdtemp(prefix="ponybench-attack-", dir="/var/tmp"))
    root.chmod(0o755)  # as a project folder is: others may pass through it
    run_dir = root / "runs" / "20261206-000000"
    mine, other = run_dir / "add__baseline__haiku__0", run_dir / "add__yagni__haiku__0"
    for ws in (mine, other):
        ws.mkdir(parents=True)
        (ws / "add.py").write_text("def add(a, b):\n    return a + b\n")
        (ws / "_ponybench.transcript.jsonl").write_text('{"type": "result"}\n')
    (run_dir / "results.jsonl").write_text('{"cell": "add__yagni__haiku__0", "passed": true}\n')
    (run_dir / "_ponybench.spend.jsonl").write_text('{"cost_usd": 0.5}\n')
    keys = root / "keys"
    keys.mkdir(mode=0o700)
    (keys / "run.key").write_text("SECRET-RUN-KEY-" + "9" * 40)
    (keys / "run.key").chmod(0o600)
    monkeypatch.setenv("PONYBENCH_KEY_DIR", str(keys))
    snapshot = {p: p.read_bytes() for p in root.rglob("*") if p.is_file()}
    yield {"root": root, "run": run_dir, "mine": mine, "other": other, "keys": keys, "snapshot": snapshot}
    shutil.rmtree(root, ignore_errors=True)


def judge(ws: Path, agent_code: str, check: str = "load(FILE)", timeout: float = 30) -> checks.Verdict:
    """The correct axis of a cell whose delivered add.py is `agent_code`, as a cell judges it."""
    (ws / "add.py").write_text(textwrap.dedent(agent_code))
    return checks.run_checks({"correct": textwrap.dedent(check)}, ws, "add.py", timeout,
                             transcript=ws / "_ponybench.transcript.jsonl")["correct"]


def unchanged(run: dict, but=()) -> list[str]:
    """The files of the run that differ from before the attack (those in `but` aside)."""
    changed = []
    for path, data in run["snapshot"].items():
        if path in but:
            continue
        if not path.is_file() or path.read_bytes() != data:
            changed.append(str(path))
    return changed


# --- records and other cells -----------------------------------------------------------------------

def test_a_check_cannot_rewrite_other_cells_results_or_the_ledger_by_guessed_paths(run):
    require("namespaces", "user")
    targets = [run["other"] / "add.py", run["run"] / "results.jsonl", run["run"] / "_ponybench.spend.jsonl",
               run["other"] / "planted.py"]
    verdict = judge(run["mine"], f"""
        import os
        wrote = []
        for path in {[str(t) for t in targets]!r}:
            try:
                with open(path, "a") as fh:
                    fh.write("pwned\\n")
                wrote.append(path)
            except OSError:
                pass
        def add(a, b):
            return a + b
    """, check="""
        mod = load(FILE)
        assert not mod.wrote, f"wrote {mod.wrote}"
    """)
    assert unchanged(run, but={run["mine"] / "add.py"}) == []
    assert not (run["other"] / "planted.py").exists()
    assert verdict.ok, verdict.reason  # every write was refused inside the check


def test_a_link_planted_in_the_workspace_does_not_reach_the_run(run):
    require("namespaces", "user")
    # The agent leaves links to the run's records in its workspace; the copy keeps them as links.
    (run["mine"] / "results_link").symlink_to(run["run"] / "results.jsonl")
    (run["mine"] / "other_link").symlink_to(run["other"])
    verdict = judge(run["mine"], """
        wrote = []
        for path in ("results_link", "other_link/add.py"):
            try:
                with open(path, "a") as fh:
                    fh.write("pwned\\n")
                wrote.append(path)
            except OSError:
                pass
        def add(a, b):
            return a + b
    """, check="""
        mod = load(FILE)
        assert not mod.wrote, f"wrote through {mod.wrote}"
    """)
    assert unchanged(run, but={run["mine"] / "add.py"}) == []
    assert verdict.ok, verdict.reason


def test_a_user_namespace_does_not_uncover_the_run(run):
    require("namespaces", "user")
    # As the untrusted user the check may still make a user namespace (where the kernel lets
    # anyone), be root in it and try to unmount what hides the run: the covers are locked.
    results = run["run"] / "results.jsonl"
    script = f"umount -l {run['run']} 2>/dev/null; umount -l /tmp 2>/dev/null; cat {results} 2>/dev/null; true"
    verdict = judge(run["mine"], f"""
        import shutil, subprocess
        unshare = shutil.which("unshare")
        said = ""
        if unshare:
            said = subprocess.run([unshare, "--user", "--map-root-user", "--mount", "sh", "-c", {script!r}],
                                  capture_output=True, text=True).stdout
        def add(a, b):
            return a + b
    """, check="""
        mod = load(FILE)
        assert False, f"said: {mod.said!r}"
    """)
    assert "add__yagni" not in verdict.reason, verdict.reason
    assert "said: ''" in verdict.reason, verdict.reason


def test_a_check_cannot_find_the_run_through_its_environment(run):
    require("namespaces", "user")
    # The transcript's path (in the kept workspace) names the run directory: walk up from it.
    verdict = judge(run["mine"], """
        import os
        from pathlib import Path
        transcript = Path(os.environ["PONYBENCH_TRANSCRIPT"])
        run = transcript.parent.parent
        seen = sorted(os.listdir(run)) if run.is_dir() else []
        for name in seen:
            try:
                (run / name / "add.py").write_text("def add(a, b):\\n    return 0\\n")
            except OSError:
                pass
            try:
                (run / "results.jsonl").write_text("{}")
            except OSError:
                pass
        def add(a, b):
            return a + b
    """, check="""
        import os
        mod = load(FILE)
        # At most the folder that holds the transcript shown back: its own cell's.
        assert mod.seen in ([], [os.path.basename(os.path.dirname(os.environ["PONYBENCH_TRANSCRIPT"]))]), \
            f"the run directory lists {mod.seen}"
        assert "result" in open(__import__("os").environ["PONYBENCH_TRANSCRIPT"]).read()
    """)
    assert unchanged(run, but={run["mine"] / "add.py"}) == []
    assert verdict.ok, verdict.reason  # the run is hidden; the transcript itself is still there to read


def read_by_delivered_code(ws: Path, paths: str) -> str:
    """The reason of a check that names what delivered code read (the head of each file) of
    the files `paths`, a Python expression it evaluates, names: "found: ''" for nothing."""
    return judge(ws, f"""
        import os, pathlib, pytest_ponybench
        found = ""
        for path in {paths}:
            try:
                found += open(path).read()[:40]
            except OSError:
                pass
        def add(a, b):
            return a + b
    """, check="""
        mod = load(FILE)
        assert False, f"found: {mod.found!r}"
    """).reason


def test_a_check_cannot_read_the_run_key(run):
    require("namespaces", "user")
    said = read_by_delivered_code(run["mine"], '[os.path.join(os.environ["PONYBENCH_KEY_DIR"], name) for name in '
                                               '(os.listdir(os.environ["PONYBENCH_KEY_DIR"]) '
                                               'if os.path.isdir(os.environ["PONYBENCH_KEY_DIR"]) else [])]')
    assert "found: ''" in said and "SECRET-RUN-KEY" not in said, said


def test_delivered_code_cannot_read_its_task_file_from_the_project_or_the_package(run, monkeypatch):
    require("namespaces", "user")
    # The project (the harness's folder), an installed wheel's package data and the checkout
    # (an editable install's) each hold task files with their good references; delivered code
    # finds them from pytest_ponybench.__file__. Planted beside the checkout, not under /var/tmp
    # or /tmp, which the check's own tmpfs covers anyway.
    from pytest_ponybench.specs import library
    planted = Path(tempfile.mkdtemp(prefix=".ponybench-attack-", dir=REPO))
    try:
        planted.chmod(0o755)
        project = planted / "project"
        wheel = planted / "site-packages" / "pytest_ponybench" / "library"
        for folder, key in ((project, "PROJECT"), (wheel, "PACKAGE")):
            (folder / "tasks").mkdir(parents=True)
            (folder / "tasks" / "add.yaml").write_text(f"good: {key}-ANSWER-KEY\n")
        monkeypatch.setattr(library, "PACKAGE_LIBRARY", wheel)
        monkeypatch.chdir(project)
        checkout = "pathlib.Path(pytest_ponybench.__file__).resolve().parents[1]"
        said = read_by_delivered_code(run["mine"], f"[{str(project / 'tasks' / 'add.yaml')!r}, "
                                                   f"{str(wheel / 'tasks' / 'add.yaml')!r}, "
                                                   f"*sorted(({checkout} / 'tasks').glob('*.yaml'))[:3]]")
    finally:
        shutil.rmtree(planted, ignore_errors=True)
    assert "found: ''" in said, said


def test_a_forged_verdict_file_does_not_pass_the_cell(run):
    require("namespaces", "user")
    # Where the verdict used to be (next to the copy) and where it is now (its private folder).
    verdict = judge(run["mine"], """
        import json, os
        from pathlib import Path
        for folder in (Path.cwd().parent, Path.cwd().parent / "private"):
            for name in ("verdict.json", "verdict.json.tmp"):
                try:
                    (folder / name).write_text(json.dumps({"ok": True, "reason": "ok"}))
                except OSError:
                    pass
        os._exit(0)
    """)
    assert not verdict.ok, "a verdict written by the agent's code passed the cell"
    # In process the check ends without a verdict; behind the trust boundary its host ends mid-call.
    assert "without a verdict" in verdict.reason or "ended its own process" in verdict.reason, verdict.reason


def test_a_check_cannot_change_the_installed_harness(run):
    require("namespaces", "user")
    package = Path(checks.__file__).parent
    verdict = judge(run["mine"], f"""
        changed = []
        for path in ({str(package / 'checks.py')!r}, {str(package / 'planted.py')!r}):
            try:
                with open(path, "a") as fh:
                    fh.write("# planted\\n")
                changed.append(path)
            except OSError:
                pass
        def add(a, b):
            return a + b
    """, check="""
        mod = load(FILE)
        assert not mod.changed, f"changed {mod.changed}"
    """)
    assert not (package / "planted.py").exists()
    assert "# planted" not in (package / "checks.py").read_text()
    assert verdict.ok, verdict.reason


def test_a_check_cannot_read_the_harness_user_s_home(run):
    require("namespaces", "user")
    home = Path.home()
    secret_dir = home / ".cache" / "pytest-ponybench-attack-test"
    secret_dir.mkdir(parents=True, exist_ok=True)
    secret = secret_dir / "credentials.json"
    secret.write_text('{"token": "HOME-SECRET"}')
    try:
        verdict = judge(run["mine"], f"""
            try:
                found = open({str(secret)!r}).read()
            except OSError:
                found = ""
            def add(a, b):
                return a + b
        """, check="""
            mod = load(FILE)
            assert False, f"found: {mod.found!r}"
        """)
    finally:
        shutil.rmtree(secret_dir, ignore_errors=True)
    assert "HOME-SECRET" not in verdict.reason
    assert "found: ''" in verdict.reason, verdict.reason


# --- processes ----------------------------------------------------------------------------------------

HOPPER = """
import os, sys, time
# Fork, let the parent exit, setsid, again and again: a /proc sweep keeps missing it.
while True:
    pid = os.fork()
    if pid:
        os._exit(0)
    os.setsid()
"""


def test_a_pid_hopper_started_by_a_check_does_not_outlive_it(run):
    require("namespaces")
    marker = f"pony-hopper-{run['root'].name}"
    with proc_watch.Sightings(marker) as seen:
        verdict = judge(run["mine"], f"""
            import subprocess, sys, time
            for _ in range(3):
                subprocess.Popen([sys.executable, "-c", {HOPPER!r}, {marker!r}], start_new_session=True)
            time.sleep(1.0)
            def add(a, b):
                return a + b
        """, check="assert load(FILE).add(1, 2) == 3")
    assert verdict.ok, verdict.reason
    assert seen.seen, "the hopper never ran: the test proves nothing"
    left = proc_watch.wait_until_dead(proc_watch.marked(marker), timeout=3)
    left += proc_watch.marked(marker)  # a hopper has new pids all the time: look again
    proc_watch.kill(left)
    assert not left, f"the pid hopper outlived its check: {left}"


HARNESS = """
import json, sys
from pathlib import Path
from pytest_ponybench.processes import procs
from pytest_ponybench.scoring import checks
ws, code = Path(sys.argv[1]), sys.argv[2]
verdict = checks.run_checks({"correct": "load(FILE)"}, ws, "add.py", 20)["correct"]
print(json.dumps({"ok": verdict.ok, "reason": verdict.reason}), flush=True)
procs.stop_server()
"""


def harness_run(run: dict, agent_code: str, marker: str) -> subprocess.CompletedProcess:
    """Judge the cell in a harness of its own (a child of this test), so that an attack that
    kills its ancestors kills that harness, not the test session, when it is not stopped."""
    (run["mine"] / "add.py").write_text(textwrap.dedent(agent_code))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([procs.PACKAGE_PARENT, os.environ.get("PYTHONPATH", "")])}
    return subprocess.run([sys.executable, "-c", HARNESS, str(run["mine"]), marker], capture_output=True,
                          text=True, env=env, timeout=120)


def test_a_check_that_kills_its_ancestors_does_not_end_the_session(run):
    require("namespaces", "user")
    marker = f"pony-harness-{run['root'].name}"
    # Up the parent chain, killing each, until the harness (which carries the marker).
    done = harness_run(run, f"""
        import os, signal
        pid = os.getppid()
        while pid > 0:
            try:
                cmdline = open(f"/proc/{{pid}}/cmdline", "rb").read()
                parent = int(open(f"/proc/{{pid}}/stat").read().rsplit(")", 1)[1].split()[1])
            except OSError:
                break
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
            if {marker!r}.encode() in cmdline:
                break
            pid = parent
        def add(a, b):
            return a + b
    """, marker)
    assert done.returncode == 0, f"the harness died ({done.returncode}): {done.stderr[-500:]}"
    verdict = json.loads(done.stdout.strip().splitlines()[-1])
    # Nothing of the harness's was harmed. Behind the trust boundary the code's host may kill
    # the check's process that loaded it (the same untrusted user): that spoils its own
    # verdict, never forges it; in process, its own code is correct and passes.
    assert verdict["ok"] is True or "without a verdict" in verdict["reason"], verdict


def test_a_check_that_kills_the_supervisor_and_the_fork_server_leaves_nothing(run):
    require("namespaces", "user")
    marker = f"pony-sleeper-{run['root'].name}"
    with proc_watch.Sightings(marker) as seen:
        done = harness_run(run, f"""
            import os, signal, subprocess, sys, time
            subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)", {marker!r}], start_new_session=True)
            time.sleep(0.5)
            for entry in os.listdir("/proc"):
                if entry.isdigit():
                    try:
                        name = open(f"/proc/{{entry}}/comm").read().strip()
                    except OSError:
                        continue
                    if name in ("pony-supervisor", "pony-server"):
                        try:
                            os.kill(int(entry), signal.SIGKILL)
                        except OSError:
                            pass
            def add(a, b):
                return a + b
        """, marker)
    assert done.returncode == 0, f"the harness died ({done.returncode}): {done.stderr[-500:]}"
    assert seen.seen, "the sleeper never ran: the test proves nothing"
    left = proc_watch.wait_until_dead(proc_watch.marked(marker), timeout=3)
    proc_watch.kill(left)
    assert not left, f"a sleeper outlived the check: {left}"


def test_a_check_cannot_signal_the_harness(run):
    require("namespaces", "user")
    verdict = judge(run["mine"], f"""
        import os, signal
        refused = []
        for pid in ({os.getpid()}, {os.getppid()}):
            try:
                os.kill(pid, 0)
            except OSError:
                refused.append(pid)
        def add(a, b):
            return a + b
    """, check=f"""
        mod = load(FILE)
        assert sorted(mod.refused) == sorted([{os.getpid()}, {os.getppid()}]), f"could signal {{mod.refused}}"
    """)
    assert verdict.ok, verdict.reason


# --- limits -------------------------------------------------------------------------------------------

def test_a_memory_bomb_is_killed_and_the_verdict_says_so(run):
    require("namespaces", "cgroup")
    size = sandbox.MEMORY_LIMIT + 512 * 1024 * 1024
    verdict = judge(run["mine"], f"""
        hog = bytearray({size})  # zero-filled: every page is touched
        def add(a, b):
            return a + b
    """, check="assert load(FILE).add(1, 2) == 3")
    assert not verdict.ok, "the memory bomb got its memory"
    assert "memory limit" in verdict.reason, verdict.reason


def test_a_fork_bomb_is_contained_and_the_verdict_says_so(run):
    require("namespaces", "cgroup")
    marker = f"pony-bomb-{run['root'].name}"
    bound = sandbox.PIDS_LIMIT + 150  # bounded, so that the test is safe where nothing caps it
    verdict = judge(run["mine"], f"""
        import subprocess, sys
        children = []
        for _ in range({bound}):
            # A shell waiting on a sleep: two small processes, the shell's argv marked.
            children.append(subprocess.Popen(["/bin/sh", "-c", "sleep 60; : {marker}"]))
        def add(a, b):
            return a + b
    """, check="assert load(FILE).add(1, 2) == 3", timeout=60)
    left = proc_watch.wait_until_dead(proc_watch.marked(marker), timeout=5)
    proc_watch.kill(left)
    assert not left, f"{len(left)} processes of the bomb outlived the check"
    assert not verdict.ok, "the fork bomb got all its processes"
    assert f"limit of {sandbox.PIDS_LIMIT} processes" in verdict.reason, verdict.reason


def test_a_check_filling_the_disk_is_capped(run):
    require("namespaces", "overlay")
    chunk = 32 * 1024 * 1024
    count = (sandbox.DISK_LIMIT + 128 * 1024 * 1024) // chunk
    verdict = judge(run["mine"], f"""
        block = b"x" * {chunk}
        for i in range({count}):
            with open(f"fill{{i}}.bin", "wb") as fh:
                fh.write(block)
        def add(a, b):
            return a + b
    """, check="assert load(FILE).add(1, 2) == 3")
    assert not verdict.ok, f"the check wrote {count * chunk} bytes"
    assert "No space left on device" in verdict.reason, verdict.reason
    assert not list(run["mine"].glob("fill*.bin")), "the check wrote into the kept workspace"


def test_a_check_filling_tmp_is_capped(run):
    require("namespaces")
    chunk = 32 * 1024 * 1024
    count = (sandbox.DISK_LIMIT + 128 * 1024 * 1024) // chunk
    verdict = judge(run["mine"], f"""
        import tempfile
        block = b"x" * {chunk}
        folder = tempfile.mkdtemp()
        for i in range({count}):
            with open(f"{{folder}}/fill{{i}}.bin", "wb") as fh:
                fh.write(block)
        def add(a, b):
            return a + b
    """, check="assert load(FILE).add(1, 2) == 3")
    assert not verdict.ok, f"the check wrote {count * chunk} bytes to /tmp"
    assert "No space left on device" in verdict.reason, verdict.reason


def test_a_check_runs_as_the_untrusted_user_without_a_way_back(run):
    require("namespaces", "user")
    verdict = judge(run["mine"], """
        import os
        ids = (os.getuid(), os.geteuid(), os.getgid(), os.getgroups())
        try:
            os.setuid(0)
            regained = True
        except OSError:
            regained = False
        no_new_privs = [l for l in open("/proc/self/status") if l.startswith("NoNewPrivs")][0].split()[1]
        def add(a, b):
            return a + b
    """, check=f"""
        mod = load(FILE)
        assert mod.ids == ({sandbox.UNTRUSTED_UID}, {sandbox.UNTRUSTED_UID}, {sandbox.UNTRUSTED_GID}, []), mod.ids
        assert not mod.regained and mod.no_new_privs == "1", (mod.regained, mod.no_new_privs)
    """)
    assert verdict.ok, verdict.reason


def test_no_cgroup_is_left_after_the_calls(run):
    require("namespaces", "cgroup")
    before = set(_groups_of_ended_supervisors())
    verdict = judge(run["mine"], "def add(a, b):\n    return a + b\n", check="assert load(FILE).add(1, 2) == 3")
    assert verdict.ok, verdict.reason
    left = set(_groups_of_ended_supervisors()) - before
    assert not left, f"cgroups left behind: {sorted(left)}"


def _groups_of_ended_supervisors() -> list[str]:
    """The ponybench cgroups below this process's own whose supervisor (named in the group's
    name) has ended: a group is removed before its supervisor exits."""
    found = []
    for line in Path("/proc/self/cgroup").read_text().splitlines():
        _, controllers, path = line.split(":", 2)
        for controller in controllers.split(",") or [""]:
            parent = Path("/sys/fs/cgroup", controller, path.lstrip("/"))
            if not parent.is_dir():
                continue
            for group in parent.iterdir():
                if group.name.startswith("ponybench-") and not proc_watch.alive(int(group.name.split("-")[1])):
                    found.append(str(group))
    return found
