"""The contract with the `claude` CLI: how it is called, and what its output means.

The agent runs headless with stream-json output written to a transcript file, never to a
pipe: a killed cell keeps its transcript and the usage seen so far, and a child that holds a
pipe open can never freeze the harness. While the CLI runs its transcript and stderr are in
the cell's records folder, beside the workspace (cell.py moves them into the workspace once
the CLI's tree is gone). Every read of them here refuses a link (O_NOFOLLOW) and is capped:
the transcript line by line with a cap on each line and on the whole, so a CLI that prints
hundreds of megabytes costs bounded memory.
"""
from __future__ import annotations

import atexit
import json
import os
import shutil
import stat
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from pytest_ponybench.processes import procs
from pytest_ponybench.processes import sandbox as check_sandbox  # its cgroup serves the agent too; sandbox() below is bubblewrap
from pytest_ponybench.store import record as records
from pytest_ponybench.store.rundir import _parent_fd, keep_room, release_room, valid_cost

# Appended to every arm's system prompt, identically. The benchmark measures the code an agent
# writes, not its attempts to run it: agents that start servers or browsers burn tokens on
# flailing (a login wall, a port in use) instead of code.
WRITE_AND_STOP = (
    "Write the implementation, with tests if you would normally write them for a change like "
    "this. Do not run servers, install dependencies, start databases or open a browser to "
    "verify it: write the code and stop. Only the code you write is measured."
)
MAX_LINE = 1024 * 1024  # a transcript line longer than this is garbage, not an event
KEEP_BYTES = 8 * 1024 * 1024  # a flooded transcript keeps this much of its head and of its tail
FILE_SIZE_LIMIT = 2 * 1024 ** 3  # no file the agent writes (its transcript included) grows past this
EXCERPT = 2000
ROOT_REFUSAL = "cannot be used with root/sudo"



# The user's own setup kept out of every cell, whatever --setting-sources says. Measured with
# 2.1.328 against the scripted model (tests/test_isolation.py): without these, a CLAUDE.md,
# CLAUDE.local.md, .claude/CLAUDE.md or .claude/rules/ in any folder above the workspace, the
# user's ~/.claude/CLAUDE.md and rules (when the workspace is under their home) and the
# auto-memory of the enclosing git repository (~/.claude/projects/<repo>/memory/MEMORY.md)
# all reached the model in the first request; with them, none did.
ISOLATION_ENV = {"CLAUDE_CODE_DISABLE_CLAUDE_MDS": "1", "CLAUDE_CODE_DISABLE_AUTO_MEMORY": "1"}

# What still reaches the model from the folders above the workspace with ISOLATION_ENV set
# (measured with 2.1.328): the skills, agents and commands of each folder's `.claude/`, up to
# and including the first folder that is a git repository's root (the CLI stops there). The
# user's own ~/.claude is not among them (`--setting-sources project,local` keeps it out).
SETUP_ABOVE = (".claude/skills", ".claude/agents", ".claude/commands")


def setup_above(path: Path, environ: dict | None = None) -> list[Path]:
    """The folders of project setup the CLI would still put in front of the model in every
    cell under `path`: non-empty `.claude/skills|agents|commands` above it, up to the git root."""
    environ = os.environ if environ is None else environ
    home = Path(environ.get("HOME") or Path.home())
    config = Path(environ.get("CLAUDE_CONFIG_DIR") or home / ".claude").resolve()
    found = []
    for folder in [Path(path).resolve(), *Path(path).resolve().parents]:
        for rel in SETUP_ABOVE:
            target = folder / rel
            if target.parent.resolve() == config:
                continue  # the user's own config folder: not read as a project's
            if target.is_dir() and any(target.iterdir()):
                found.append(target)
        if (folder / ".git").exists():
            break
    return found


class CliMissing(Exception):
    """No usable claude binary: one clear error for the session, not N failed cells."""


def find_claude(explicit: str | None, rootdir: Path) -> str:
    """`--ponybench-claude`, else `claude` on PATH, else the pinned `node_modules/.bin/claude`."""
    if explicit:
        path = shutil.which(explicit) or (explicit if Path(explicit).is_file() else None)
        if path is None:
            raise CliMissing(f"--ponybench-claude: {explicit} is not an executable file")
        return str(Path(path).resolve())
    found = shutil.which("claude")
    if found:
        return found
    pinned = Path(rootdir) / "node_modules" / ".bin" / "claude"
    if pinned.exists():
        return str(pinned)
    raise CliMissing(
        "the claude CLI was not found on PATH nor at node_modules/.bin/claude: run `npm ci` in a "
        "clone of pytest-ponybench (its package.json pins the CLI), `npm install @anthropic-ai/claude-code` "
        "in this project (where pytest's rootdir is), or pass --ponybench-claude PATH"
    )


CREDENTIAL_ENV = ("ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN", "CLAUDE_CODE_OAUTH_TOKEN",
                  "CLAUDE_CODE_USE_BEDROCK", "CLAUDE_CODE_USE_VERTEX")


def real_run_problem(own_user: bool = False) -> str | None:
    """Why a real (paid) run cannot start here, in one sentence; None when it can. `own_user`:
    the agent runs in a sandbox as a user that is not root, so root outside it is no problem.

    Said once, before any cell, instead of as N identical failures. Never answered by quietly
    rehearsing instead: a rehearsal's figures must not pass for a real model's."""
    config_dir = Path(os.environ.get("CLAUDE_CONFIG_DIR") or Path.home() / ".claude")
    logged_in = (config_dir / ".credentials.json").is_file()
    if not logged_in and not any(os.environ.get(var) for var in CREDENTIAL_ENV):
        return ("no credentials for a real run: set ANTHROPIC_API_KEY or log in with `claude` first; "
                "to see the whole benchmark work at zero spend, add --ponybench-rehearse")
    if not own_user and hasattr(os, "geteuid") and os.geteuid() == 0 and os.environ.get("IS_SANDBOX") != "1":
        return ("running as root: the CLI refuses --permission-mode bypassPermissions for root; run as "
                "another user, or set IS_SANDBOX=1 if this machine is a disposable sandbox")
    return None


def claude_version(claude: str) -> str:
    try:
        done = subprocess.run([claude, "--version"], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise CliMissing(f"{claude} --version failed: {exc}") from None
    if done.returncode != 0:
        raise CliMissing(f"{claude} --version exited {done.returncode}: {done.stderr.strip()[:200]}")
    return done.stdout.strip().split(" ")[0]


def build_argv(claude: str, prompt: str, model_id: str, append: str, plugin_dir: str | None,
               max_budget_usd: float | None = None) -> list[str]:
    argv = [
        claude, "-p", prompt, "--model", model_id,
        "--permission-mode", "bypassPermissions",
        # The user's settings (their enabled plugins and hooks) stay out: one arm, one plugin.
        "--setting-sources", "project,local",
        "--strict-mcp-config",
        "--disallowedTools", "Bash",
        "--output-format", "stream-json", "--verbose",
        # Every hook's output, exit code and outcome in the stream: how a real run proves its
        # arm (proof.py) without seeing the requests.
        "--include-hook-events",
        "--no-session-persistence",
    ]
    if plugin_dir:
        argv += ["--plugin-dir", plugin_dir]
    if max_budget_usd is not None:
        argv += ["--max-budget-usd", f"{max_budget_usd:g}"]
    return argv + ["--append-system-prompt", append]


def agent_env(overrides: dict[str, str] | None = None) -> dict[str, str]:
    env = {k: v for k, v in procs.environ_snapshot().items() if k not in ("CLAUDECODE", "CLAUDE_CODE_ENTRYPOINT")}
    env["CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC"] = "1"
    env["DISABLE_TELEMETRY"] = "1"
    env.update(overrides or {})
    env.update(ISOLATION_ENV)  # last: no hook's environment brings the user's setup back
    return env


# --------------------------------------------------------------------------- the sandbox

SANDBOX_UID = 1000  # the agent's user inside the sandbox when the harness runs as root
# What an unconfined agent can reach, said wherever a run goes without the sandbox: files as
# this user everywhere; processes too where it cannot have a PID namespace of its own (run
# puts it in one where sandbox.support() has namespaces: as root).
UNCONFINED_FILES = ("it can read and write whatever this user can, other cells, their records, results.jsonl, "
                    "the spend ledger, the pause file and the run's key included")
UNCONFINED_REACH = (f"{UNCONFINED_FILES}, and see and signal every process of this user, other cells' CLIs and "
                    "the harness included")
UNCONFINED_REACH_OWN_PIDS = (f"{UNCONFINED_FILES}, and every process's memory through /proc, where it sees them "
                             "all; in a PID namespace of its own it can signal none outside it, other cells' CLIs "
                             "and the harness included")


def unconfined_reach(own_pid_namespace: bool) -> str:
    """What an unconfined agent can reach; `own_pid_namespace`: not sandbox.support().namespaces."""
    return UNCONFINED_REACH_OWN_PIDS if own_pid_namespace else UNCONFINED_REACH


@dataclass(frozen=True)
class Sandbox:
    """What bubblewrap can do on this machine, found once per process by a trial run."""

    bwrap: str | None
    own_user: bool  # the agent runs as SANDBOX_UID in a user namespace, not as root
    problem: str  # '' when the agent can be confined; else why not, in one sentence

    @property
    def works(self) -> bool:
        return not self.problem


_sandbox: list[Sandbox] = []


def _base_flags(own_user: bool) -> list[str]:
    # A PID namespace: when the CLI ends, the sandbox's first process ends and the kernel
    # kills everything left in it, a daemon that forked twice and called setsid included.
    flags = ["--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc", "--unshare-pid", "--die-with-parent"]
    if own_user:
        flags += ["--unshare-user", "--uid", str(SANDBOX_UID), "--gid", str(SANDBOX_UID)]
    return flags


def sandbox() -> Sandbox:
    """The sandbox this process gives its agents: a trial `bwrap ... true` with the flags every
    cell uses, run once. As root it first tries a user namespace in which the agent is not
    root (the CLI then takes bypassPermissions without IS_SANDBOX), then without one."""
    if not _sandbox:
        _sandbox.append(_try_sandbox())
    return _sandbox[0]


def _try_sandbox() -> Sandbox:
    bwrap = shutil.which("bwrap")
    if bwrap is None:
        return Sandbox(None, False, "bubblewrap is not installed (apt-get install bubblewrap)")
    last = ""
    for own_user in ([True, False] if hasattr(os, "geteuid") and os.geteuid() == 0 else [False]):
        try:
            done = subprocess.run([bwrap, *_base_flags(own_user), "--", "true"], stdin=subprocess.DEVNULL,
                                  capture_output=True, text=True, timeout=30)
        except (OSError, subprocess.TimeoutExpired) as exc:
            last = str(exc)
            continue
        if done.returncode == 0:
            return Sandbox(bwrap, own_user, "")
        last = (done.stderr.strip().splitlines() or [f"it exited {done.returncode}"])[-1][:200]
    return Sandbox(bwrap, False, f"bubblewrap cannot make a sandbox here ({last})")


_private_tmp: list[str] = []


def private_tmp() -> str:
    """An empty folder of this process on the host, covered in each sandbox by a tmpfs of its
    own: the confined agent's TMPDIR, where its temporary files go and vanish with it."""
    if not _private_tmp:
        path = tempfile.mkdtemp(prefix="ponybench-agent-tmp-")
        atexit.register(shutil.rmtree, path, True)
        _private_tmp.append(os.path.realpath(path))
    return _private_tmp[0]


def confinement_line(box: Sandbox, wanted: bool, limits: str = "", own_pid_namespace: bool = False) -> str:
    """The one line a session prints about the agent's sandbox; `limits`: limits_phrase();
    `own_pid_namespace`: an unconfined agent runs in a PID namespace of its own (run)."""
    end = f"; {limits}" if limits else ""
    reach = unconfined_reach(own_pid_namespace)
    if not wanted:
        return f"ponybench: the agent runs unconfined (--ponybench-no-confine): {reach}{end}"
    if not box.works:
        return f"ponybench: the agent runs unconfined: {box.problem}; {reach}{end}"
    who = f"as uid {SANDBOX_UID}, not root" if box.own_user else "as this user"
    return (f"ponybench: the agent runs confined (bubblewrap, {who}): only its workspace writable, the run "
            f"directory and the run's key hidden, a private CLI configuration, nothing it starts outlives it{end}")


def hidden_paths(run_dir: Path, needed: list) -> list[Path]:
    """What a confined agent must not see: the runs folder (every kept run, every cell and
    record), or only this run's directory when something in `needed` (the CLI, its plugin, its
    home, the project) lies in that folder; and the run keys' folder."""
    from pytest_ponybench.store.rundir import key_dir

    run_dir = Path(run_dir).resolve()
    needed = [Path(os.path.realpath(p)) for p in needed if p]

    def holds_needed(folder: Path) -> bool:
        return any(folder == p or folder in p.parents for p in needed)

    base = run_dir.parent
    hidden = [base if base != Path("/") and not holds_needed(base) else run_dir]
    keys = key_dir().resolve()
    if keys.is_dir() and not holds_needed(keys):
        hidden.append(keys)
    return hidden


def confine(argv: list[str], workspace: Path, env: dict[str, str], run_dir: Path | None = None,
            needed: list | None = None, box: Sandbox | None = None) -> list[str]:
    """Wrap argv in bubblewrap: the whole system read-only (/tmp included; the agent's own
    temporary files go to a private tmpfs, its TMPDIR); the run directory (or the whole runs folder) and
    the run keys' folder hidden under empty read-only folders; only the workspace and the
    CLI's own configuration writable. The network stays (the API is on it, and rehearsal's
    scripted model on 127.0.0.1). A PID namespace ends everything the agent started with it."""
    box = box or sandbox()
    if not box.works:
        raise CliMissing(f"--ponybench-confine: {box.problem}")
    home = Path(env.get("HOME") or Path.home())
    config_dir = Path(env.get("CLAUDE_CONFIG_DIR") or home / ".claude")
    # The host's /tmp is read-only like the rest (a CLI or checkout under /tmp stays
    # reachable); the agent's temporary files go to a tmpfs of its own, named by TMPDIR. One
    # bind per /tmp entry instead cost about 7 ms each: 2 s a cell on a machine with 300.
    scratch = private_tmp()
    wrapped = [box.bwrap, *_base_flags(box.own_user), "--tmpfs", scratch]
    for var in ("TMPDIR", "TMP", "TEMP"):
        wrapped += ["--setenv", var, scratch]
    if home.is_dir() and home.resolve() != Path.home().resolve():
        wrapped += ["--bind", str(home), str(home)]  # a home made for the agent (a rehearsal's): all its own
    wrapped += private_config(config_dir, [argv[0], *(needed or [])])
    ws = str(Path(workspace).resolve())
    # The harness's working folder (the project) counts as needed: a runs folder that holds
    # the project (--ponybench-dir=.) is the project, and only the run directory is hidden.
    keep = [argv[0], home, config_dir, os.getcwd(), *(needed or [])]
    hidden = [str(p) for p in hidden_paths(run_dir, keep)] if run_dir else []
    for path in hidden:
        wrapped += ["--tmpfs", path]
    wrapped += ["--bind", ws, ws]
    for path in hidden:  # read-only after the workspace is bound in: a write beside it fails as elsewhere
        wrapped += ["--remount-ro", path]
    if box.own_user:
        wrapped += ["--unsetenv", "IS_SANDBOX"]  # not root in there: the CLI needs no leave to bypass
    return wrapped + ["--chdir", ws, "--"] + argv


# What the CLI needs of its configuration folder in a confined cell, bound in read-only: the
# login of `claude` (an API key in the environment needs nothing). Everything else there (the
# user's settings, plugins, skills, hooks, history) is kept out of every cell anyway by
# --setting-sources project,local and --no-session-persistence.
CONFIG_KEPT = (".credentials.json",)


def private_config(config_dir: Path, needed: list) -> list[str]:
    """bubblewrap flags that give a confined cell a configuration folder of its own: an empty
    tmpfs over the CLI's folder (~/.claude or $CLAUDE_CONFIG_DIR), writable, gone with the cell;
    the login bound back in read-only; what the cell needs from inside the folder (the CLI
    itself, the arm's plugin from the plugin cache) bound back read-only at its own path; and
    CLAUDE_CONFIG_DIR pointing there, so the CLI's global state (~/.claude.json otherwise, shared
    by every cell) is written there too. What one cell's agent writes into its configuration
    (a skill, a hook, settings) reaches no later cell.

    A login token the CLI refreshes in a cell is not saved for the next (the file is
    read-only in there); an API key in the environment has no such limit."""
    config = os.path.realpath(config_dir)
    if not os.path.isdir(config):  # no folder to lay the tmpfs over: one inside the private TMPDIR
        fresh = os.path.join(private_tmp(), "claude-config")
        return ["--dir", fresh, "--setenv", "CLAUDE_CONFIG_DIR", fresh]
    flags = ["--tmpfs", config, "--setenv", "CLAUDE_CONFIG_DIR", config]
    for name in CONFIG_KEPT:
        path = os.path.join(config, name)
        if os.path.isfile(path):
            flags += ["--ro-bind", path, path]
    for item in needed:
        if not item:
            continue
        real = os.path.realpath(item)
        if real.startswith(config + os.sep):
            # The CLI's own install (~/.claude/local/...) needs its whole folder, not one file.
            top = os.path.join(config, os.path.relpath(real, config).split(os.sep)[0])
            path = top if os.path.isdir(top) and os.path.isfile(real) else real
            if os.path.exists(path):
                flags += ["--ro-bind", path, path]
    return flags


def absorbed_by_confinement(path: str, workspace: Path, env: dict[str, str]) -> bool:
    """Did confine() send a write to this path into a folder of the sandbox's own that vanished
    with it: its TMPDIR, or its private CLI configuration (both tmpfs)? Everywhere else but the
    workspace the sandbox is read-only, so a write that succeeded there was real."""
    target = os.path.realpath(path)
    home = Path(env.get("HOME") or Path.home())
    config = os.path.realpath(env.get("CLAUDE_CONFIG_DIR") or home / ".claude")
    private = [*_private_tmp[:1], config]
    return any(target == folder or target.startswith(folder + os.sep) for folder in private)


def bound_file(path: Path, keep: int = KEEP_BYTES) -> None:
    """Cut a flooded file down to its head and tail (whole lines), with a marker between.
    The init line is at the head and the result line at the tail, so a cut transcript still
    scores; memory stays bounded since nothing is read whole."""
    try:
        src = open_kept(path)
    except OSError:
        return  # missing, or a link: never followed
    with src:
        st = os.fstat(src.fileno())
        size = st.st_size
        if not stat.S_ISREG(st.st_mode) or size <= 2 * keep:
            return
        head = src.read(keep)
        head = head[: head.rfind(b"\n") + 1]
        src.seek(size - keep - 1)
        tail = src.read(keep + 1)  # with the byte before: does the tail start on a line start?
        tail = tail[1:] if tail[:1] == b"\n" else tail[tail.find(b"\n") + 1:]
    tmp = path.with_name(path.name + ".cut")
    with open_output(tmp) as dst:
        dst.write(head)
        dst.write(f"[ponybench: {size - len(head) - len(tail)} bytes cut from a {size}-byte output]\n".encode())
        dst.write(tail)
    os.replace(tmp, path)


@dataclass
class RunOutcome:
    exit_code: int | None
    timed_out: bool
    wall_s: float
    # What the agent's cgroup met (procs.Child.limits): {"memory": bool, "pids": bool,
    # "memory_bytes", "pids_max", "cgroup"}, {"error": why none was made}, or None (no cgroup).
    limits: dict | None = None


# --------------------------------------------------------------------------- memory and process limits

MEMORY_DEFAULT = 4 * 1024 ** 3  # bytes the agent's processes may use together: the CLI, its hooks, npm, pytest
PIDS_DEFAULT = 1024  # processes and threads the agent's tree may hold at once


@dataclass(frozen=True)
class AgentLimits:
    """The cgroup limits of one cell's agent (the CLI and everything it starts)."""

    memory: int = MEMORY_DEFAULT
    pids: int = PIDS_DEFAULT

    def as_message(self) -> dict:
        return {"memory": self.memory, "pids": self.pids}


def limits_phrase(limits: AgentLimits, problem: str) -> str:
    """What bounds the agent's processes on this machine, for the header line."""
    if problem:
        return f"no memory or process limits for the agent ({problem})"
    return f"at most {check_sandbox.byte_size(limits.memory)} of memory and {limits.pids} processes (a cgroup)"


def limits_record(limits: AgentLimits, problem: str, kind: str) -> dict:
    """run.json's `confinement.limits`: the agent's cgroup limits, or why there are none."""
    if problem:
        return {"memory_bytes": None, "pids_max": None, "cgroup": None, "why": problem}
    return {"memory_bytes": limits.memory, "pids_max": limits.pids, "cgroup": kind, "why": ""}


def limit_hit(said: dict | None) -> str:
    """The one sentence of a cell whose agent ran into a limit of its cgroup ("" for none)."""
    met = check_sandbox.limits_met(said, "--ponybench-agent-memory", "--ponybench-agent-pids")
    return f"the agent's process tree ran into {met}" if met else ""


TRANSCRIPT_ROOM = 1024 * 1024  # bytes kept allocated for the transcript while the CLI runs


def release_transcript(path: Path) -> None:
    """Give back the room `run` kept for a transcript, once the harness has written what the
    cell's run told it: until then a disk the agent filled stays full, and the harness's first
    write of its own records says so, rather than succeeding in the room and failing later."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_NOFOLLOW)
    except OSError:
        return
    try:
        release_room(fd)
    finally:
        os.close(fd)


def open_output(path: Path):
    """A new file of the harness's for the CLI's output: never opened through a link at its
    name or at its folder (a records folder an agent replaced with a link). Readable by all,
    as a file the CLI made would be: a check, run as the sandbox's own user, reads the
    transcript (the graders of an imported eval case)."""
    dfd = _parent_fd(Path(path))
    try:
        fd = os.open(Path(path).name, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644,
                     dir_fd=dfd)
    finally:
        os.close(dfd)
    return os.fdopen(fd, "wb")


def open_kept(path: Path):
    """The CLI's output kept by the harness, opened for reading without following a link: a
    link an agent planted at the name must never make the harness read (and quote) the file
    it points to. Raises OSError (ELOOP for a link)."""
    return os.fdopen(os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK), "rb")


def run(argv: list[str], workspace: Path, env: dict[str, str], timeout: float,
        transcript: Path, stderr: Path, limits: AgentLimits | None = None, confined: bool = False) -> RunOutcome:
    """Run the CLI in `workspace` with its stdout in `transcript` and its stderr in `stderr`
    (new files; cell.py has them in the records folder, out of the agent's workspace); with
    `limits`, in a cgroup of its own where the machine has one (procs.start): everything the
    CLI started is killed with it at its end, its timeout or an interrupt, whoever its parent
    then was. Its whole process tree is gone when this returns or raises.

    Unconfined (`confined` False: argv is not wrapped by `confine`), the CLI runs in a PID
    namespace of its own where the machine has one (procs.start(pid_namespace=True)): it
    can signal, ptrace or pidfd no process outside its namespace, another cell's CLI and the
    harness included (a `pkill node`, a `kill -9 -1` stays inside). Not a wall: it still sees
    the host's /proc, and as the harness's user can write any process's memory there."""

    start = time.monotonic()
    with open_output(transcript) as out, open_output(stderr) as err:
        # Room for the CLI's output kept allocated before it starts: an agent that fills the
        # disk still leaves its CLI room for the result line, and so the harness its cost.
        keep_room(out.fileno(), TRANSCRIPT_ROOM)
        # A confined CLI is already in bubblewrap's PID namespace (--unshare-pid): a second one
        # around it would protect nothing more and cost an init process (a fork of the
        # supervisor, one more process counted in the pids limit) per cell.
        proc = procs.start(argv, cwd=workspace, env=env, stdin=subprocess.DEVNULL, stdout=out, stderr=err,
                           max_file_size=FILE_SIZE_LIMIT, limits=limits.as_message() if limits else None,
                           pid_namespace=not confined)
        timed_out = procs.wait_or_kill(proc, timeout)
        if timed_out:
            err.write(f"\n[ponybench: killed with its process tree after {timeout:g} s]\n".encode())
    return RunOutcome(None if timed_out else proc.returncode, timed_out, time.monotonic() - start, proc.limits)


@dataclass
class Transcript:
    init: dict | None = None
    result: dict | None = None
    last_text: str = ""
    events: int = 0
    garbage: int = 0
    first_garbage: str = ""
    usage_seen: dict = field(default_factory=dict)  # summed per assistant message, for killed cells
    written: list[str] = field(default_factory=list)  # paths the agent's write tools wrote (no error)
    hooks: list[dict] = field(default_factory=list)  # hook_response lines (--include-hook-events)
    api_retries: list[dict] = field(default_factory=list)  # api_retry lines: the CLI retrying an API error
    api_error: dict | None = None  # the last assistant line marked is_api_error_message
    answered: bool = False  # the model answered at least once (an assistant message of its own)
    tool_uses: list[tuple[str, dict]] = field(default_factory=list)  # (tool name, input), in order
    read_paths: list[str] = field(default_factory=list)  # paths the Read tool read (no error)


# The agent has no Bash: these tools are how it writes files. The path is in their input.
WRITE_TOOLS = {"Write": "file_path", "Edit": "file_path", "MultiEdit": "file_path", "NotebookEdit": "notebook_path"}


def _blocks(event: dict) -> list[dict]:
    message = event.get("message")
    content = message.get("content") if isinstance(message, dict) else None
    return [b for b in content if isinstance(b, dict)] if isinstance(content, list) else []


# Bytes of a transcript the harness reads: what `bound_file` leaves and its marker line. A
# larger one (never bound: a run killed before, a file put there) is read as its head and
# its tail, as `bound_file` would have cut it.
READ_CAP = 2 * KEEP_BYTES + 4096


def _lines(path: Path):
    """Yield transcript lines of at most MAX_LINE bytes; longer ones yield None (garbage).
    Nothing when the file is missing, is not a regular file, or is a link (never followed)."""
    try:
        fh = open_kept(path)
    except OSError:
        return
    with fh:
        st = os.fstat(fh.fileno())
        if not stat.S_ISREG(st.st_mode):
            return
        if st.st_size <= READ_CAP:
            yield from _lines_of(fh, st.st_size)
            return
        yield from _lines_of(fh, KEEP_BYTES, whole_only=True)
        fh.seek(st.st_size - KEEP_BYTES - 1)
        if fh.read(1) != b"\n":
            fh.readline(KEEP_BYTES)  # the tail starts at a line's start
        yield from _lines_of(fh, st.st_size - fh.tell())


def _lines_of(fh, limit: int, whole_only: bool = False):
    """The lines in the next `limit` bytes of `fh`; a last one cut there too, unless
    `whole_only` (the head of a transcript read as head and tail)."""
    while limit > 0:
        chunk = fh.readline(min(MAX_LINE, limit))
        if not chunk:
            return
        limit -= len(chunk)
        if whole_only and limit <= 0 and not chunk.endswith(b"\n"):
            return
        if chunk.endswith(b"\n") or len(chunk) < MAX_LINE:
            yield chunk
            continue
        while chunk and not chunk.endswith(b"\n") and limit > 0:  # skip the rest of an oversized line
            chunk = fh.readline(min(MAX_LINE, limit))
            limit -= len(chunk)
        yield None


def read_transcript(path: Path) -> Transcript:
    seen = Transcript()
    usage_by_message: dict[str, dict] = {}
    writes: dict[str, str] = {}  # tool_use id -> path, for the agent's write tools
    reads: dict[str, str] = {}  # tool_use id -> path, for its Read tool
    failed: set[str] = set()  # tool_use ids whose result was an error (e.g. a read-only file system)
    for raw in _lines(path):
        text = raw.decode("utf-8", "replace").strip() if raw is not None else None
        if text == "" or (text or "").startswith("[ponybench:"):  # blank, or the harness's cut marker
            continue
        try:
            event = json.loads(text) if text is not None else None
        except ValueError:
            event = None
        if not isinstance(event, dict):
            seen.garbage += 1
            if not seen.first_garbage:
                seen.first_garbage = (text or "<a line over 1 MiB>")[:200]
            continue
        seen.events += 1
        kind = event.get("type")
        if kind == "system" and event.get("subtype") == "init":
            seen.init = event
        elif kind == "system" and event.get("subtype") == "hook_response":
            seen.hooks.append(event)
        elif kind == "system" and event.get("subtype") == "api_retry":
            seen.api_retries.append(event)
        elif kind == "result":
            seen.result = event
        elif kind == "assistant" and isinstance(event.get("message"), dict) and _is_api_error(event):
            seen.api_error = event  # the CLI's own "API Error: ..." line, not a model answer
        elif kind == "assistant" and isinstance(event.get("message"), dict):
            seen.answered = True
            message = event["message"]
            if isinstance(message.get("usage"), dict):
                usage_by_message[str(message.get("id", seen.events))] = message["usage"]
            texts = [b.get("text", "") for b in _blocks(event) if b.get("type") == "text"]
            if texts:
                seen.last_text = "\n".join(texts)
            for block in _blocks(event):
                if block.get("type") != "tool_use":
                    continue
                tool_input = block.get("input") if isinstance(block.get("input"), dict) else {}
                seen.tool_uses.append((str(block.get("name") or "?"), tool_input))
                key = WRITE_TOOLS.get(block.get("name"))
                if key and isinstance(tool_input.get(key), str):
                    writes[str(block.get("id"))] = tool_input[key]
                if block.get("name") == "Read" and isinstance(tool_input.get("file_path"), str):
                    reads[str(block.get("id"))] = tool_input["file_path"]
        elif kind == "user":
            failed.update(str(b.get("tool_use_id")) for b in _blocks(event)
                          if b.get("type") == "tool_result" and b.get("is_error"))
    seen.written = [p for tool_id, p in writes.items() if tool_id not in failed]
    seen.read_paths = [p for tool_id, p in reads.items() if tool_id not in failed]
    for usage in usage_by_message.values():
        for key, value in usage.items():
            if isinstance(value, int):
                seen.usage_seen[key] = seen.usage_seen.get(key, 0) + value
    return seen


def _is_api_error(event: dict) -> bool:
    message = event.get("message") or {}
    return bool(event.get("is_api_error_message") or message.get("is_api_error_message"))


def _int(value) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def usage_metrics(t: Transcript) -> dict:
    """Cost, time, turns and tokens: from the result line, or the usage seen before a kill."""
    result = t.result or {}
    usage = result.get("usage") if isinstance(result.get("usage"), dict) else t.usage_seen
    cost = result.get("total_cost_usd")
    in_tokens = _int(usage.get("input_tokens"))
    out_tokens = _int(usage.get("output_tokens"))
    cache = None
    if usage:
        cache = (_int(usage.get("cache_read_input_tokens")) or 0) + (_int(usage.get("cache_creation_input_tokens")) or 0)
    total = None if out_tokens is None else (in_tokens or 0) + out_tokens + (cache or 0)
    model_usage = result.get("modelUsage") if isinstance(result.get("modelUsage"), dict) else {}
    return {
        # A negative or non-finite cost is no cost: never shown, summed or subtracted.
        "cost_usd": valid_cost(cost),
        "duration_ms": _int(result.get("duration_ms")),
        "turns": _int(result.get("num_turns")),
        "denials": len(result["permission_denials"]) if isinstance(result.get("permission_denials"), list) else None,
        "in_tokens": in_tokens, "out_tokens": out_tokens, "cache_tokens": cache, "total_tokens": total,
        "served_model": ",".join(sorted(model_usage)) or str((t.init or {}).get("model") or ""),
        "claude_version": str((t.init or {}).get("claude_code_version") or ""),
        "plugins": ",".join(_plugin_label(p) for p in _plugins(t.init)),
        "tools": ",".join(str(x) for x in (t.init or {}).get("tools") or []),
    }


def _plugins(init: dict | None) -> list[dict]:
    return [p for p in (init or {}).get("plugins") or [] if isinstance(p, dict)]


def _plugin_label(plugin: dict) -> str:
    return str(plugin.get("name") or plugin.get("path") or "?")


def _is_builtin(plugin: dict) -> bool:
    return plugin.get("path") == "builtin" or plugin.get("source") == "builtin"


def verify_arm(init: dict | None, plugin_dir: str | None) -> str | None:
    """None when the init line shows exactly this arm; else why not, in one sentence.

    The original benchmark once published a baseline in which a plugin's hook fired in every
    arm. The init line lists what the agent really had, so a contaminated cell cannot pass.
    """
    if init is None:
        return "the CLI printed no init line, so the arm it ran cannot be verified"
    tools = [str(t) for t in init.get("tools") or []]
    if "Bash" in tools:
        return "Bash was available to the agent although it is disallowed for every arm"
    loaded = [p for p in _plugins(init) if not _is_builtin(p)]
    if plugin_dir is None:
        if loaded:
            return f"a plugin of another arm or of the user was loaded: {', '.join(_plugin_label(p) for p in loaded)}"
        return None
    want = os.path.realpath(plugin_dir)
    mine = [p for p in loaded if os.path.realpath(str(p.get("path", ""))) == want]
    if not mine:
        return f"the arm's plugin ({plugin_dir}) is not among the plugins the CLI loaded"
    others = [p for p in loaded if p not in mine]
    if others:
        return f"plugins besides the arm's were loaded: {', '.join(_plugin_label(p) for p in others)}"
    return None


# API statuses after which every later cell would fail the same way: the run stops.
AUTH_STATUSES = (401, 403)
RATE_LIMITED = 429


def api_error_status(t: Transcript) -> int | None:
    """The HTTP status of the API error that ended (or was last retried in) the session, from
    the result line, the CLI's API error line or its last api_retry line; None when none."""
    for source in (t.result or {}, t.api_error or {}, (t.api_retries or [{}])[-1]):
        status = _int(source.get("api_error_status", source.get("error_status")))
        if status is not None:
            return status
    return None


def saw_rate_limit(t: Transcript) -> bool:
    """Did the API answer 429 anywhere in this session (retried or final)?"""
    return api_error_status(t) == RATE_LIMITED or any(
        _int(r.get("error_status")) == RATE_LIMITED for r in t.api_retries)


def _api_error_text(t: Transcript) -> str:
    status = api_error_status(t)
    kind = ((t.result or {}).get("api_error_type") or (t.api_error or {}).get("error")
            or (t.api_retries[-1].get("error") if t.api_retries else None))
    return " ".join(str(x) for x in (status, kind) if x) or "no status"


def auth_failure(record: dict) -> str | None:
    """One sentence stopping the run when a cell's API error was an authentication or
    permission error (every later cell would fail the same way); None otherwise."""
    status = record.get("api_error_status")
    if record.get("status") != records.INFRA_ERROR or status not in AUTH_STATUSES:
        return None
    what = "refused the credentials" if status == 401 else "refused this key access to the model"
    return (f"the model API {what} ({status}) in cell {record.get('cell')}, so every later cell would fail "
            f"the same way: check ANTHROPIC_API_KEY (or log in again with `claude`) and resume the run")


def judge(outcome: RunOutcome, t: Transcript, stderr: Path, timeout: float) -> tuple[str, str]:
    """(status, error sentence) of one agent run, before the arm is verified.

    An API that failed (after the CLI's own retries, or while the CLI was still retrying when
    the cell timed out, or a stream that ended mid-message) is `infra_error`: the session says
    nothing about the agent or its arm. An agent that ran into a limit of its cgroup failed on
    its own (`cli_error`, the limit named), whatever its CLI printed after."""
    hit = limit_hit(outcome.limits)
    if hit:
        return records.CLI_ERROR, hit
    if outcome.timed_out:
        if t.api_retries and not t.answered:
            return records.INFRA_ERROR, (
                f"the model API never answered: the cell timed out after {timeout:g} s while the CLI was "
                f"still retrying ({len(t.api_retries)} api_retry lines, last {_api_error_text(t)})")
        return records.TIMEOUT, f"the agent ran past the cell timeout of {timeout:g} s and was killed with its process tree"
    err = procs.output_tail(stderr, EXCERPT)
    if ROOT_REFUSAL in err:
        return records.CLI_ERROR, ("the CLI refuses --permission-mode bypassPermissions when run as root; "
                                  "run as another user, or set IS_SANDBOX=1 if this machine is a disposable sandbox")
    if t.result is not None:
        if t.result.get("terminal_reason") == "api_error" or _int(t.result.get("api_error_status")) is not None:
            detail = " ".join(str(t.result.get("result") or "").split())[:300]
            return records.INFRA_ERROR, f"the model API failed after the CLI's retries ({_api_error_text(t)}): {detail}"
        if t.result.get("is_error") or t.result.get("subtype") not in (None, "success"):
            detail = str(t.result.get("result") or t.result.get("subtype") or "error")[:300]
            return records.CLI_ERROR, f"the CLI ended with an error ({t.result.get('subtype')}): {detail}"
        return records.FINISHED, ""
    if t.api_error is not None or (t.api_retries and not t.answered):
        # No result line, and the last the stream said was about the API: it was cut off.
        return records.INFRA_ERROR, (f"the session ended without a result while the model API was failing "
                                     f"({_api_error_text(t)}): the stream was cut")
    if outcome.exit_code not in (0, None):
        last = err.splitlines()[-1][:300] if err else "no output on stderr"
        return records.CLI_ERROR, f"the CLI exited with code {outcome.exit_code} before a result: {last}"
    if t.garbage:
        return records.BAD_OUTPUT, f"the CLI's output was not stream-json ({t.garbage} unreadable lines, first: {t.first_garbage!r})"
    return records.BAD_OUTPUT, "the CLI exited without printing a result line"


BUDGET_SUBTYPE = "error_max_budget_usd"  # the result line's subtype when --max-budget-usd stopped the CLI


def stopped_at_budget(t: Transcript) -> bool:
    """Whether the CLI ended because it reached its --max-budget-usd (measured with 2.1.328:
    `subtype: error_max_budget_usd`, `terminal_reason: budget_exhausted`, `is_error: true`)."""
    result = t.result or {}
    return result.get("subtype") == BUDGET_SUBTYPE or result.get("terminal_reason") == "budget_exhausted"


# --------------------------------------------------------------------------- what the agent did

EDIT_TOOLS = tuple(WRITE_TOOLS)


def activity(t: Transcript) -> dict:
    """What the agent did, from its transcript: record fields (flat, JSON-safe).

    `tool_calls`: 'Name:count' pairs by tool name, comma-separated and sorted; `skills_used`:
    the skills the Skill tool invoked, in order of first use, comma-separated; `files_read`
    and `files_written`: distinct paths its Read tool read and its write tools wrote or edited;
    `edits`: calls of its write tools (Write, Edit, MultiEdit, NotebookEdit)."""
    counts: dict[str, int] = {}
    skills: list[str] = []
    for name, tool_input in t.tool_uses:
        counts[name] = counts.get(name, 0) + 1
        skill = tool_input.get("skill") if name == "Skill" else None
        if isinstance(skill, str) and skill and skill not in skills:
            skills.append(skill)
    return {
        "tool_calls": format_counts(counts),
        "skills_used": ",".join(skills),
        "files_read": len(set(t.read_paths)),
        "files_written": len(set(t.written)),
        "edits": sum(n for name, n in counts.items() if name in EDIT_TOOLS),
        "api_error_status": api_error_status(t),
    }


def format_counts(counts: dict[str, int]) -> str:
    """{'Write': 2, 'Read': 1} as 'Read:1,Write:2' (a flat value for JUnit)."""
    return ",".join(f"{name}:{n}" for name, n in sorted(counts.items()))


def parse_counts(text) -> dict[str, int]:
    """The inverse of format_counts; anything malformed is skipped."""
    counts: dict[str, int] = {}
    for part in str(text or "").split(","):
        name, _, n = part.rpartition(":")
        if name and n.isdigit():
            counts[name] = int(n)
    return counts
