"""The agent's cgroup (issue 20): a cell's CLI and everything it starts share a memory and a
process limit, and nothing of theirs outlives the cell, confined or not.

Each session here runs a stand-in CLI (tests/fakes/fake_claude.py) that first does what a
hostile or careless agent would with its tools: allocate past the memory limit, fork past the
process limit, leave a daemon behind. The limits are small (`--ponybench-agent-memory`,
`--ponybench-agent-pids`), so the tests never eat the machine. The session must go on: the
cell that ran into a limit fails on its own, in one sentence naming the limit, the next cell
passes.
"""
from __future__ import annotations

import json
import shutil
import subprocess
import os
import sys
import textwrap
import time
import uuid
from pathlib import Path

import pytest

from pytest_ponybench.cell import agent, confine as confinement
from pytest_ponybench.processes import sandbox
from support.records import record_data
from support.benchproc import ADD_TASK, FAKE, GOOD_ADD, bench_args, fake_env, only_run_dir, results, run, write_project

CELL0, CELL1 = "add__baseline__haiku__0", "add__baseline__haiku__1"


def needs_cgroups():
    """Skipped, saying why, where this machine gives no cgroup (not root, none writable); a
    failure in CI, whose runner is root on Linux."""
    missing = sandbox.support().cgroup
    if missing:
        if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
            pytest.fail(missing)
        pytest.skip(missing)


def hostile_cli(tmp_path: Path, before: dict[str, str]) -> Path:
    """A stand-in CLI that runs `before[cell]` (what the agent does with its tools) in the cell
    of that name, then plays the session as fake_claude does."""
    # Installed in a folder of its own, fake_claude beside it: a confined CLI sees its own
    # folder, not the project's tests/.
    folder = tmp_path / "cli"
    folder.mkdir()
    shutil.copy(FAKE, folder / FAKE.name)
    script = folder / "limited-claude"
    script.write_text(textwrap.dedent(f"""\
        #!{sys.executable}
        import sys
        from pathlib import Path
        BEFORE = {before!r}
        sys.path.insert(0, {str(folder)!r})
        import fake_claude
        if sys.argv[1:2] != ["--version"] and Path.cwd().name in BEFORE:
            exec(compile(BEFORE[Path.cwd().name], "agent", "exec"), {{"__name__": "agent"}})
        code = fake_claude.main(sys.argv[1:])
        sys.stdout.flush()
        sys.exit(code)
        """))
    script.chmod(0o755)
    return script


def session(root: Path, claude: Path, *extra: str, env: dict[str, str] | None = None):
    done = run(root, bench_args(root, "--runs=2", *extra, claude=claude), env, timeout=240)
    out = done.stdout + done.stderr
    assert "INTERNALERROR" not in out and "Traceback" not in out, out[-4000:]
    return done


def records_of(root: Path) -> dict[str, dict]:
    return {r["cell"]: r for r in results(only_run_dir(root))}


def alive_with(mark: str, seconds: float = 1.0) -> list[int]:
    """Live (not zombie) processes whose command line holds `mark`, over `seconds`."""
    deadline = time.monotonic() + seconds
    while True:
        found = []
        for entry in filter(str.isdigit, os.listdir("/proc")):
            try:
                cmdline = Path(f"/proc/{entry}/cmdline").read_bytes()
                state = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()[0]
            except OSError:
                continue
            if mark.encode() in cmdline and state != "Z" and int(entry) != os.getpid():
                found.append(int(entry))
        if found or time.monotonic() >= deadline:
            return found
        time.sleep(0.1)


# The agent touches memory 32 MiB at a time, up to 1 GiB, far past the 128 MiB limit below.
HOG = """
_chunks = []
for _ in range(32):
    _chunks.append(bytearray(32 << 20))
    for _i in range(0, len(_chunks[-1]), 4096):
        _chunks[-1][_i] = 1
"""


def test_an_agent_past_its_memory_limit_fails_its_own_cell_and_the_session_goes_on(tmp_path):
    needs_cgroups()
    root = write_project(tmp_path / "project", {"add": ADD_TASK})
    done = session(root, hostile_cli(tmp_path, {CELL0: HOG}), "--ponybench-agent-memory=128M",
                   env=fake_env(root, write=GOOD_ADD))
    records = records_of(root)
    assert sorted(records) == [CELL0, CELL1], done.stdout[-3000:]
    hog, good = records[CELL0], records[CELL1]
    assert (hog["status"], hog["passed"]) == ("cli_error", False), hog
    assert hog["error"] == ("the agent's process tree ran into its memory limit (128 MiB, --ponybench-agent-memory): "
                            "the kernel killed a process for it"), hog
    assert "api" not in hog["error"].lower() and hog["api_error_status"] is None
    assert (good["status"], good["passed"]) == ("finished", True), good
    assert done.returncode == pytest.ExitCode.TESTS_FAILED
    assert "at most 128 MiB of memory and 1024 processes (a cgroup)" in done.stdout.split("collected")[0]
    limits = json.loads((only_run_dir(root) / "run.json").read_text())["confinement"]["limits"]
    assert limits == {"memory_bytes": 128 << 20, "pids_max": 1024, "cgroup": sandbox.support().cgroup_kind, "why": ""}


def forker(mark: str) -> str:
    """The agent forks children that sleep with `mark` in their command line, up to 200 of
    them, until a fork is refused; then it goes on and delivers good code."""
    return textwrap.dedent(f"""
        import os
        _n = 0
        try:
            while _n < 200:
                if os.fork() == 0:
                    os.execv("/bin/sleep", ["sleep", "120", {mark!r}])
                _n += 1
        except OSError:
            pass
        """)


def test_an_agent_past_its_process_limit_fails_its_own_cell_and_leaves_nothing(tmp_path):
    needs_cgroups()
    mark = f"ponybench-forker-{uuid.uuid4().hex[:8]}"
    root = write_project(tmp_path / "project", {"add": ADD_TASK})
    ini = "[pytest]\ntestpaths = tasks\nponybench_agent_pids = 32\n"  # the ini reads as the option does
    (root / "pytest.ini").write_text(ini)
    session(root, hostile_cli(tmp_path, {CELL0: forker(mark)}), env=fake_env(root, write=GOOD_ADD))
    records = records_of(root)
    forked, good = records[CELL0], records[CELL1]
    assert (forked["status"], forked["passed"]) == ("cli_error", False), forked
    assert forked["error"] == ("the agent's process tree ran into its limit of 32 processes "
                               "(--ponybench-agent-pids): a fork was refused"), forked
    assert (good["status"], good["passed"]) == ("finished", True), good
    assert alive_with(mark) == [], "a child of the forking agent outlived its cell"


def daemon(mark: str) -> str:
    """The agent leaves a daemon: forked twice, in a session of its own, its parent gone."""
    return textwrap.dedent(f"""
        import os
        if os.fork() == 0:
            os.setsid()
            if os.fork() == 0:
                os.execv("/bin/sleep", ["sleep", "120", {mark!r}])
            os._exit(0)
        os.wait()
        """)


@pytest.mark.parametrize("confined", [False, True], ids=["unconfined", "confined"])
def test_a_daemon_the_agent_leaves_does_not_outlive_its_cell(tmp_path, confined):
    if confined and not confinement.sandbox().works:
        pytest.skip(confinement.sandbox().problem)
    mark = f"ponybench-daemon-{uuid.uuid4().hex[:8]}"
    root = write_project(tmp_path / "project", {"add": ADD_TASK})
    # The spec itself, no call log: confined, no file of the project is in the agent's view.
    env = {**fake_env(root, write=GOOD_ADD), "PONYBENCH_FAKE": json.dumps({"write": GOOD_ADD})}
    extra = ("--ponybench-confine",) if confined else ()
    done = session(root, hostile_cli(tmp_path, {CELL0: daemon(mark)}), *extra, env=env)
    records = records_of(root)
    assert records[CELL0]["status"] == "finished", (records[CELL0], done.stdout[-3000:])
    assert alive_with(mark) == [], "the agent's daemon outlived its cell"
    said = record_data(only_run_dir(root) / CELL0, "agent")
    assert said["confined"] is confined
    if not sandbox.support().cgroup:  # it ran in a cgroup, which met no limit
        peak = said["limits"].pop("memory_peak_bytes")
        assert said["limits"] == {"memory": False, "pids": False, "memory_bytes": 4 << 30, "pids_max": 1024,
                                  "cgroup": sandbox.support().cgroup_kind}, said
        assert peak is None or 0 < peak < 4 << 30


def test_without_cgroups_the_agent_runs_without_limits_and_the_run_says_so_once(tmp_path):
    root = write_project(tmp_path / "project", {"add": ADD_TASK})
    env = {**fake_env(root, write=GOOD_ADD), sandbox.FORCE_OFF_ENV: "1"}
    done = session(root, FAKE, env=env)
    assert done.returncode == 0, done.stdout[-3000:]
    why = f"${sandbox.FORCE_OFF_ENV}=1"
    header = done.stdout.split("collected")[0]
    assert header.count("no memory or process limits for the agent") == 1, header
    assert f"no memory or process limits for the agent ({why})" in header
    limits = json.loads((only_run_dir(root) / "run.json").read_text())["confinement"]["limits"]
    assert limits == {"memory_bytes": None, "pids_max": None, "cgroup": None, "why": why}
    assert all(r["status"] == "finished" and r["passed"] for r in records_of(root).values())


@pytest.mark.parametrize("flag, value, said", [
    ("--ponybench-agent-memory", "12M", "must be at least 64M"),
    ("--ponybench-agent-memory", "lots", "'lots' is not a size such as 4G, 512M or a number of bytes"),
    ("--ponybench-agent-pids", "4", "must be at least 16"),
])
def test_a_bad_limit_is_named_before_any_cell(tmp_path, flag, value, said):
    root = write_project(tmp_path / "project", {"add": ADD_TASK})
    done = run(root, bench_args(root, f"{flag}={value}"), fake_env(root, write=GOOD_ADD))
    assert done.returncode == pytest.ExitCode.USAGE_ERROR, done.stdout[-2000:]
    assert flag in done.stderr and said in done.stderr, done.stderr[-2000:]
    assert not (root / "runs").exists()


def test_sizes_read_as_people_write_them():
    from pytest_ponybench.specs.argtypes import agent_memory

    assert agent_memory("4G") == agent_memory("4GiB") == agent_memory("4gb") == 4 * 1024 ** 3
    assert agent_memory("512M") == agent_memory(str(512 * 1024 ** 2)) == 512 * 1024 ** 2
    assert sandbox.byte_size(4 * 1024 ** 3) == "4 GiB" and sandbox.byte_size(384 * 1024 ** 2) == "384 MiB"


def test_the_agent_and_a_check_say_a_limit_in_the_same_words():
    """One phrase builder for both: a cell whose agent met its limits, and a check whose
    processes did, read alike, the agent's naming the options that set them."""
    from pytest_ponybench.scoring.checks import _limits_said

    both = {"memory": True, "pids": True, "memory_bytes": 256 * 1024 ** 2, "pids_max": 64}
    assert agent.limit_hit(both) == (
        "the agent's process tree ran into its memory limit (256 MiB, --ponybench-agent-memory): the kernel "
        "killed a process for it and its limit of 64 processes (--ponybench-agent-pids): a fork was refused")
    assert _limits_said({"limits": both}) == (
        "; the check's processes ran into its memory limit (256 MiB): the kernel killed a process for it "
        "and its limit of 64 processes: a fork was refused")
    assert agent.limit_hit({"memory": False, "pids": False}) == "" == _limits_said({"limits": None})


def test_a_program_killed_at_its_deadline_takes_its_daemon_and_its_cgroup_with_it(tmp_path):
    """The timeout path: the supervisor is stopped while the program hangs; its daemon (forked
    twice, setsid) dies, the group is removed and what it met is still reported."""
    needs_cgroups()
    from pytest_ponybench.processes import procs

    mark = f"ponybench-deadline-{uuid.uuid4().hex[:8]}"
    program = daemon(mark) + "\nimport time\ntime.sleep(120)\n"
    child = procs.start([sys.executable, "-c", program], stdin=subprocess.DEVNULL,
                        limits={"memory": 256 << 20, "pids": 64})
    assert alive_with(mark, 10) != [], "the daemon never started"
    assert procs.wait_or_kill(child, 1.0) is True
    assert alive_with(mark) == []
    assert child.limits is not None and child.limits["pids_max"] == 64 and not child.limits["memory"], child.limits
    assert sandbox.supervisor_cgroups(child.pid) == []


def test_a_confined_cell_has_a_configuration_folder_of_its_own(tmp_path, monkeypatch):
    """The flags: a tmpfs over the folder, the login read-only, the arm's plugin from the
    plugin cache read-only, CLAUDE_CONFIG_DIR pointing there; a write the agent made there
    vanished with the sandbox, so it is no escape."""
    config = tmp_path / "home" / ".claude"
    plugin = config / "plugins" / "cache" / "market" / "p" / "1.0"
    plugin.mkdir(parents=True)
    (config / ".credentials.json").write_text("{}")
    (config / "settings.json").write_text("{}")
    flags = confinement.private_config(config, ["/usr/bin/claude", str(plugin)])
    real = os.path.realpath(config)
    assert flags[:5] == ["--tmpfs", real, "--setenv", "CLAUDE_CONFIG_DIR", real]
    assert ["--ro-bind", f"{real}/.credentials.json", f"{real}/.credentials.json"] == flags[5:8]
    assert ["--ro-bind", os.path.realpath(plugin), os.path.realpath(plugin)] == flags[8:11]
    assert "settings.json" not in " ".join(flags) and len(flags) == 11
    env = {"HOME": str(tmp_path / "home")}
    assert confinement.absorbed_by_confinement(str(config / "skills" / "x" / "SKILL.md"), tmp_path / "ws", env)
    assert not confinement.absorbed_by_confinement(str(tmp_path / "home" / "notes.txt"), tmp_path / "ws", env)
    missing = confinement.private_config(tmp_path / "nowhere", [])
    assert missing[0] == "--dir" and missing[1].startswith(confinement.private_tmp())


def test_a_cgroup_v2_hierarchy_is_used_as_the_kernel_lays_it_out(tmp_path, monkeypatch):
    """The machines here and CI mount cgroup v1, so the v2 branch of CallCgroup never meets a
    kernel in the suite: this runs it on a folder laid out as a v2 hierarchy (cgroup.controllers
    at the root, the harness's group delegating memory and pids) and reads back what it wrote
    and what it reports. A kernel creates a group's files on mkdir; here the writer creates them."""
    root = tmp_path / "cgroup"
    own = root / "user.slice" / "session-1.scope"
    own.mkdir(parents=True)
    (root / "cgroup.controllers").write_text("cpuset cpu io memory pids\n")
    (own / "cgroup.subtree_control").write_text("memory pids\n")
    monkeypatch.setattr(sandbox, "V1_ROOT", str(root))
    monkeypatch.setattr(sandbox, "_own_cgroup_paths", lambda: {"": "/user.slice/session-1.scope"})

    def write(path: str, text: str) -> None:
        Path(path).write_text(text)
    monkeypatch.setattr(sandbox, "_write", write)

    group = sandbox.CallCgroup.create("t", memory=256 * 1024 ** 2, pids=64)
    assert group is not None and group.kind == "v2", group
    (made,) = group.dirs
    assert Path(made).parent == own and Path(made).name.startswith(f"ponybench-{os.getpid()}-t-")
    assert {name: (Path(made) / name).read_text() for name in ("memory.max", "memory.swap.max", "pids.max")} == {
        "memory.max": str(256 * 1024 ** 2), "memory.swap.max": "0", "pids.max": "64"}
    assert group.hit() == {"memory": False, "pids": False}  # no events file yet: nothing met
    (Path(made) / "memory.events").write_text("low 0\nhigh 0\nmax 3\noom 1\noom_kill 1\n")
    (Path(made) / "pids.events").write_text("max 2\n")
    (Path(made) / "memory.peak").write_text("123456\n")
    (Path(made) / "cgroup.procs").write_text("41\n42\n")
    assert group.hit() == {"memory": True, "pids": True}
    assert group.peak() == 123456 and group.members() == {41, 42}
    assert agent.limit_hit({**group.hit(), "memory_bytes": group.memory, "pids_max": group.pids}).startswith(
        "the agent's process tree ran into its memory limit (256 MiB, --ponybench-agent-memory)")

    (own / "cgroup.subtree_control").write_text("cpu io\n")  # memory and pids not delegated
    assert sandbox.CallCgroup.create("u") is None
