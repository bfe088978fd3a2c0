"""The agent's sandbox: bubblewrap around the `claude` CLI.

Found once per process by a trial run (`sandbox`); `confine` wraps a cell's argv so that the
whole system is read-only but the workspace and a private CLI configuration, the run
directory and the run keys are hidden, and nothing the agent starts outlives it. Where there
is no sandbox, `unconfined_reach` and `confinement_line` say what the agent can then reach.
May import `agent` (CliMissing) and `store`; `agent` never imports this module.
"""
from __future__ import annotations

import atexit
import json
import os
import select
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

from pytest_ponybench.cell import agent

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
    """The one line a session prints about the agent's sandbox; `limits`: agent.limits_phrase();
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
        raise agent.CliMissing(f"--ponybench-confine: {box.problem}")
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



def run_alone(argv: list[str], wait_s: float = 30.0, **popen) -> subprocess.CompletedProcess:
    """Run a `confine`d argv with no supervisor around it (subprocess.run's keywords) and
    return once its PID namespace is gone, not merely bubblewrap. bubblewrap returns as soon as
    the CLI exits, while the namespace's init is still killing what the CLI left (about 0.5 s
    later on an idle machine): a daemon seen right after is not an escape. In a cell the
    supervisor's sweep waits for that init (it is a subreaper, so the init becomes its child);
    here its pidfd, from bubblewrap's --info-fd, is waited on, for at most `wait_s`."""
    read, write = os.pipe()
    try:
        proc = subprocess.Popen([argv[0], "--info-fd", str(write), *argv[1:]], pass_fds=(write,), **popen)
    except BaseException:
        os.close(read)
        raise
    finally:
        os.close(write)
    with os.fdopen(read, "rb") as info:
        said = info.read()  # bubblewrap closes it once the namespace's init is started
    init = None
    if said:
        try:
            init = os.pidfd_open(json.loads(said)["child-pid"])
        except (ProcessLookupError, ValueError, KeyError):
            pass  # already gone: nothing to wait for
    try:
        out, err = proc.communicate()
        if init is not None and not select.select([init], [], [], wait_s)[0]:
            raise TimeoutError(f"the sandbox's init outlived bubblewrap by {wait_s:g} s")
    finally:
        if init is not None:
            os.close(init)
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)

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
