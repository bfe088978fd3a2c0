"""Calling the `claude` CLI: finding it, its argv and environment, its memory and process
limits, and running it with its output kept in files.

The agent runs headless with stream-json output written to a transcript file, never to a
pipe: a killed cell keeps its transcript and the usage seen so far, and a child that holds a
pipe open can never freeze the harness. While the CLI runs its transcript and stderr are in
the cell's records folder, beside the workspace (cell.py moves them into the workspace once
the CLI's tree is gone). Every open of them here refuses a link (O_NOFOLLOW), and a flooded
one is cut to its head and tail (`bound_file`), so a CLI that prints hundreds of megabytes
costs bounded disk and memory.

What the CLI's output means is `transcript`; the sandbox the CLI runs in is `confine`. Both
import this module, so this one imports neither (no cycle). May import `processes` and
`store`.
"""
from __future__ import annotations

import os
import shutil
import stat
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from pytest_ponybench.processes import procs
from pytest_ponybench.processes import sandbox as check_sandbox  # its cgroup serves the agent too; confine.py is bubblewrap
from pytest_ponybench.store.rundir import _parent_fd, keep_room, release_room

# Appended to every arm's system prompt, identically. The benchmark measures the code an agent
# writes, not its attempts to run it: agents that start servers or browsers burn tokens on
# flailing (a login wall, a port in use) instead of code.
WRITE_AND_STOP = (
    "Write the implementation, with tests if you would normally write them for a change like "
    "this. Do not run servers, install dependencies, start databases or open a browser to "
    "verify it: write the code and stop. Only the code you write is measured."
)
KEEP_BYTES = 8 * 1024 * 1024  # a flooded transcript keeps this much of its head and of its tail
FILE_SIZE_LIMIT = 2 * 1024 ** 3  # no file the agent writes (its transcript included) grows past this



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
