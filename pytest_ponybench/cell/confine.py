"""The agent's sandbox: bubblewrap around the `claude` CLI.

Found once per process by a trial run (`sandbox`); `confine` wraps a cell's argv in a view
built from an allow-list, what a user's machine shows the agent: the system and its tools
read-only, the CLI, the arm's plugin, a private /tmp and CLI configuration, and its workspace,
the only folder of the host it writes. The run directory, other cells, the run keys, the task
library, the harness and its temporary copies are never in it; nothing the agent starts
outlives it. Where there is no sandbox, `unconfined_reach` and `confinement_line` say what
the agent can then reach. May import `agent` (CliMissing), `store` and `specs`; `agent` never
imports this module.
"""
from __future__ import annotations

import atexit
import json
import os
import select
import shutil
import subprocess
import sys
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


# The system a user's machine shows any program: its tools and libraries and /etc, read-only.
# Nothing else of the host is in the sandbox unless bound in by name (confine): not /home, /root,
# /opt, /srv, /var, /mnt, the harness's checkout or its temporary folders.
SYSTEM_DIRS = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc")


def _system_flags() -> list[str]:
    flags = []
    for path in SYSTEM_DIRS:
        if os.path.islink(path):  # a merged /usr: /bin -> usr/bin
            flags += ["--symlink", os.readlink(path), path]
        elif os.path.isdir(path):
            flags += ["--ro-bind", path, path]
    resolv = os.path.realpath("/etc/resolv.conf")
    if not resolv.startswith("/etc/") and os.path.isfile(resolv):  # systemd's, under /run: names still resolve
        flags += ["--ro-bind", resolv, resolv]
    return flags


def _base_flags(own_user: bool) -> list[str]:
    # A PID namespace: when the CLI ends, the sandbox's first process ends and the kernel
    # kills everything left in it, a daemon that forked twice and called setsid included.
    flags = [*_system_flags(), "--dev", "/dev", "--proc", "/proc", "--unshare-pid", "--die-with-parent"]
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
    return (f"ponybench: the agent runs confined (bubblewrap, {who}): it sees the system, its tools, the CLI "
            f"and its workspace, the only folder it writes; not the run, the run's key, the task library or "
            f"the harness; a private CLI configuration, nothing it starts outlives it{end}")


def cli_folder(claude: str) -> str:
    """The folder the CLI needs beside its binary: its npm package (node_modules/<name> or
    node_modules/@scope/<name>, which holds its vendored tools), else the binary's own folder."""
    real = os.path.realpath(claude)
    parts = real.split(os.sep)
    if "node_modules" in parts[:-1]:
        at = len(parts) - 1 - parts[::-1].index("node_modules")
        package = parts[:at + 2 + (at + 1 < len(parts) - 1 and parts[at + 1].startswith("@"))]
        return os.sep.join(package)
    return os.path.dirname(real)


def tool_paths(env: dict[str, str]) -> list[str]:
    """Where the programs a user would have live, outside SYSTEM_DIRS: each folder on PATH and
    this interpreter's prefix; one under a home as the top folder of it that holds it (~/.pyenv,
    ~/.cargo, ~/.nvm), since a shim there runs what lies beside it."""
    homes = {os.path.realpath(h) for h in (env.get("HOME"), str(Path.home())) if h}
    items = [*(env.get("PATH") or "").split(os.pathsep), sys.prefix, sys.base_prefix,
             os.path.dirname(os.path.realpath(sys.executable))]
    found = []
    for item in items:
        if not item or not os.path.isabs(item):
            continue
        real = os.path.realpath(item)
        if not os.path.isdir(real) or _under(real, SYSTEM_DIRS) or real == "/":
            continue
        for home in homes:
            if real != home and _under(real, [home]):
                real = os.path.join(home, os.path.relpath(real, home).split(os.sep)[0])
        if real not in homes:
            found.append(real)
    return list(dict.fromkeys(found))


def harness_paths(run_dir: Path | None) -> list[str]:
    """What no sandbox of the agent shows, where a folder bound in holds it: the harness's
    package, the task library (shipped and the project's: checks and good references), the
    runs folder, the run keys and the harness's temporary folder (check copies, reference copies)."""
    from pytest_ponybench.specs.library import answer_key_folders
    from pytest_ponybench.store.rundir import key_dir

    paths = [Path(__file__).resolve().parents[1], *answer_key_folders(Path.cwd()), key_dir(), Path(tempfile.gettempdir())]
    if run_dir is not None:
        paths += [Path(run_dir).resolve().parent]
    return [os.path.realpath(p) for p in paths]


def _under(path: str, folders) -> bool:
    return any(path == f or path.startswith(f.rstrip("/") + "/") for f in folders)


def confine(argv: list[str], workspace: Path, env: dict[str, str], run_dir: Path | None = None,
            needed: list | None = None, box: Sandbox | None = None) -> list[str]:
    """Wrap argv in bubblewrap around a view built from an allow-list, as a user's machine
    would show the agent: the system read-only (SYSTEM_DIRS), the programs on PATH and this
    interpreter (tool_paths), the CLI's own folder and `needed` (the arm's plugin) read-only,
    a private /tmp, a private CLI configuration, and the workspace, the only host folder it
    writes. The run directory, other cells, the run keys, the task library, the harness and its
    temporary copies are never bound (harness_paths: covered where a bound folder holds one);
    no folder above the workspace exists in the view, so no git repository holds it. The
    network stays (the API is on it, and rehearsal's scripted model on 127.0.0.1). A PID
    namespace ends everything the agent started with it."""
    box = box or sandbox()
    if not box.works:
        raise agent.CliMissing(f"--ponybench-confine: {box.problem}")
    home = Path(env.get("HOME") or Path.home())
    config_dir = Path(env.get("CLAUDE_CONFIG_DIR") or home / ".claude")
    claude = os.path.realpath(argv[0])
    scratch = private_tmp()
    # A /tmp of its own first: a tool or CLI installed under the host's /tmp is bound over it.
    wrapped = [box.bwrap, *_base_flags(box.own_user), "--tmpfs", "/tmp"]
    bound = list(SYSTEM_DIRS)
    for path in tool_paths(env):
        wrapped += ["--ro-bind", path, path]
        bound.append(path)
    covered: list[str] = []
    for path in sorted(harness_paths(run_dir)):  # a non-editable install's package data, under ~/.pyenv or /usr/lib
        # One inside another already covered (an installed package's library/) is gone with it:
        # bubblewrap could not make its mount point in the read-only cover.
        if os.path.isdir(path) and _under(path, bound) and not _under(path, covered):
            wrapped += ["--tmpfs", path]  # made read-only below, once what is bound inside it is
            covered.append(path)
    wrapped += ["--tmpfs", scratch]
    for var in ("TMPDIR", "TMP", "TEMP"):
        wrapped += ["--setenv", var, scratch]
    if home.is_dir() and home.resolve() != Path.home().resolve():
        wrapped += ["--bind", str(home), str(home)]  # a home made for the agent (a rehearsal's): all its own
    wrapped += private_config(config_dir, [claude, *(needed or [])])
    for path in [cli_folder(claude), *(needed or [])]:
        real = os.path.realpath(path) if path else ""
        if real and os.path.exists(real) and not _under(real, [os.path.realpath(config_dir)]):
            wrapped += ["--ro-bind", real, real]
    # A shipped arm's plugin lies in the installed package's library/: bound into its cover above,
    # which bubblewrap can make the mount point in only while the cover is still writable.
    for path in covered:
        wrapped += ["--remount-ro", path]
    ws = str(Path(workspace).resolve())
    # Its run directory: an empty read-only folder holding only the workspace, wherever it lies
    # (under /tmp too, whose tmpfs is the agent's): a write beside it fails as it would anywhere.
    beside = os.path.dirname(ws)
    wrapped += ["--tmpfs", beside, "--bind", ws, ws, "--remount-ro", beside, "--remount-ro", "/"]
    if box.own_user:
        wrapped += ["--unsetenv", "IS_SANDBOX"]  # not root in there: the CLI needs no leave to bypass
    return wrapped + ["--chdir", ws, "--", claude, *argv[1:]]



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
    with it: its TMPDIR, its private CLI configuration or its /tmp (all tmpfs)? Everywhere else
    but the workspace and a home made for it (bound from the host) the sandbox is read-only, so
    a write that succeeded there was real."""
    target = os.path.realpath(path)
    home = Path(env.get("HOME") or Path.home())
    config = os.path.realpath(env.get("CLAUDE_CONFIG_DIR") or home / ".claude")
    if _under(target, [*_private_tmp[:1], config]):
        return True
    if _under(target, [os.path.realpath(workspace)]):
        return False
    if home.resolve() != Path.home().resolve() and _under(target, [str(home.resolve())]):
        return False  # the rehearsal's home, bound in whole
    return _under(target, ["/tmp"])
