"""The sandbox a check call runs in, on Linux as root; what is missing elsewhere, said once.

A sandboxed call of `procs.start_calls` (a call with a `sandbox` view, as `checks` makes) is
set up by the call's supervisor:

- **its own PID namespace** (`clone` with CLONE_NEWPID): the first process in it is a tiny
  init (pid 1 there) that reaps and, when the call's process ends, exits with its code. The
  kernel kills every process of a namespace whose init dies, and the init itself dies with
  the supervisor (PR_SET_PDEATHSIG). At the deadline the supervisor kills the init: the whole
  tree goes, a process that forks and calls setsid in a loop included, with no scan of /proc.
  Inside, /proc shows only the namespace: no ancestor can be found, let alone signalled.
- **its own mount view** (CLONE_NEWNS): a private, size-capped tmpfs over the temporary
  directory (other checks' copies and any run directory under it are not there), the call's
  own scratch directory bound back; empty tmpfs over the run directory and the run-key
  directory; the installed harness (the package, site-packages) read-only; the call's copy
  (and its reference copy) writable through an overlay whose upper layer is a tmpfs of
  `DISK_LIMIT` bytes, so what a check writes is capped in total, not only per file.
- **a cgroup** (v1 `memory` and `pids` here; v2 where it is the only hierarchy and the
  controllers are delegated): `MEMORY_LIMIT` bytes and `PIDS_LIMIT` processes, removed after
  the call; what it hit is reported with the call and named in the verdict.
- **its own unprivileged user**: `become_untrusted()`, called in the check's process before
  any agent code runs (the copy is owned by `UNTRUSTED_UID`).

Where a part is missing (not Linux, not root, a kernel or container without it),
`support()` says which, checks run as before, and the run says so once (terminal header,
`run.json`'s `sandbox` field).

One module on purpose (about 800 lines): one sandbox. Probing what the machine offers, building
it (namespaces, cgroup v1 and v2, the capped disk) and saying what is missing must agree on the
same facts; split, the probe and the builder could disagree about one machine.
"""
from __future__ import annotations

import ctypes
import os
import pwd
import secrets
import signal
import sys
import sysconfig
import tempfile
import time
from dataclasses import dataclass

# A fixed uid and gid for untrusted code: high, outside the ranges distributions hand out to
# people (1000-60000) and system users (< 1000), and not 65534 (nobody), which daemons share.
UNTRUSTED_UID = 64923
UNTRUSTED_GID = 64923
MEMORY_LIMIT = 1024 * 1024 * 1024  # bytes of memory of one check call's processes (tmpfs pages count)
PIDS_LIMIT = 256  # processes of one check call at once
DISK_LIMIT = 256 * 1024 * 1024  # bytes one check call may write, its copies and /tmp together
# Folders every user may write besides the temporary ones, covered by a tmpfs per call.
WORLD_WRITABLE = ("/var/tmp", "/run/lock")
HIDDEN_SIZE = 64 * 1024  # bytes of an empty tmpfs laid over what a check must not see
IN_SANDBOX = False  # set in a check's process that runs in the sandbox (it then drops to UNTRUSTED_UID)

CLONE_NEWNS = 0x00020000
CLONE_NEWPID = 0x20000000
CLONE_NEWUSER = 0x10000000
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC = 1, 2, 4, 8
MS_REMOUNT, MS_BIND, MS_REC, MS_PRIVATE = 32, 4096, 16384, 1 << 18
PR_SET_NO_NEW_PRIVS = 38
_SYS_CLONE = {"x86_64": 56, "aarch64": 220}


# --- what this machine has -------------------------------------------------------------------

@dataclass(frozen=True)
class Support:
    namespaces: str = ""  # why PID and mount namespaces are missing ("" when present)
    user: str = ""  # why the switch to UNTRUSTED_UID is missing
    overlay: str = ""  # why the disk cap of the copy (an overlay on a tmpfs) is missing
    cgroup: str = ""  # why memory and process limits are missing
    cgroup_kind: str = ""  # "v1" or "v2" when present
    views: str = ""  # why the agent's code cannot be given a view without the reference's copy

    @property
    def active(self) -> bool:
        """Whether check calls run sandboxed at all: namespaces and the user switch both."""
        return not self.namespaces and not self.user

    def missing(self) -> list[str]:
        """One phrase per missing part, for the header and run.json."""
        if not self.active:
            return [f"no sandbox for checks ({self.namespaces or self.user})"]
        said = []
        if self.overlay:
            said.append(f"no disk cap for a check's copy ({self.overlay})")
        if self.cgroup:
            said.append(f"no memory or process limits ({self.cgroup})")
        if self.views:
            said.append(f"the good reference's copy is readable by the agent's code ({self.views})")
        return said

    def describe(self) -> str:
        """One line: what a check runs in here, and what it lacks."""
        missing = self.missing()
        if not self.active:
            return (f"sandbox: {missing[0]}: checks run as this user, killed by a /proc sweep, "
                    f"with a per-file size cap only")
        base = (f"sandbox: checks run as uid {UNTRUSTED_UID} in their own PID and mount namespaces"
                + (f", cgroup {self.cgroup_kind}" if not self.cgroup else ""))
        return base + (f"; missing: {'; '.join(missing)}" if missing else "")

    def as_record(self) -> dict:
        """JSON-safe, for run.json: what was missing (an empty list: nothing)."""
        return {"active": self.active, "cgroup": self.cgroup_kind or None, "missing": self.missing()}


_support: Support | None = None
FORCE_OFF_ENV = "PONYBENCH_NO_SANDBOX"  # "1": behave as where nothing is available (tests, bench)


def support() -> Support:
    """What this machine offers, found once per process by trying each part on a throwaway
    child (a clone into new namespaces that mounts a tmpfs and an overlay and switches user)."""
    global _support
    if _support is None:
        _support = _detect()
        if _support.active:
            _harness_dirs()  # here, once: each call's init inherits it instead of asking sysconfig
            _interpreter_paths()
            tempfile.gettempdir()  # which tries to write a file in each candidate, the first time
    return _support


def _detect() -> Support:
    if os.environ.get(FORCE_OFF_ENV) == "1":
        return Support(namespaces=f"${FORCE_OFF_ENV}=1", user=f"${FORCE_OFF_ENV}=1", overlay="off", cgroup=f"${FORCE_OFF_ENV}=1")
    if not sys.platform.startswith("linux"):
        why = f"{sys.platform} is not Linux"
        return Support(why, why, why, why)
    if os.geteuid() != 0:
        why = "not running as root"
        return Support(why, why, why, why)
    if _machine_clone_number() is None:
        why = f"clone is not wired for {os.uname().machine}"
        return Support(why, why, why, why)
    namespaces = user = overlay = views = ""
    probe = tempfile.mkdtemp(prefix="ponybench-sandbox-probe-")
    try:
        os.mkdir(os.path.join(probe, "low"))
        os.mkdir(os.path.join(probe, "cap"))
        try:
            pid = clone_namespaces()
        except OSError as exc:
            namespaces = f"clone into new PID and mount namespaces: {exc.strerror}"
            pid = None
        if pid == 0:
            os._exit(_probe_child(probe))
        if pid is not None:
            _, status = os.waitpid(pid, 0)
            code = os.waitstatus_to_exitcode(status)
            if code < 0 or code & 1:
                namespaces = "a mount namespace cannot mount a tmpfs"
            if code < 0 or code & 2:
                user = f"cannot switch to uid {UNTRUSTED_UID}"
            if code < 0 or code & 4:
                overlay = "overlayfs cannot be mounted"
            if code < 0 or code & 8:
                views = f"uid {UNTRUSTED_UID} cannot make a user namespace here"
    finally:
        _remove_tree(probe)
    cgroup, kind = _detect_cgroup()
    return Support(namespaces, user, overlay, cgroup, kind, views)


def _probe_child(probe: str) -> int:
    code = 0
    try:
        _mount(None, "/", None, MS_REC | MS_PRIVATE)
        _mount("tmpfs", os.path.join(probe, "cap"), "tmpfs", 0, "size=1m")
    except OSError:
        return 1 | 4
    try:
        cap = os.path.join(probe, "cap")
        os.mkdir(os.path.join(cap, "u"))
        os.mkdir(os.path.join(cap, "w"))
        _mount("overlay", os.path.join(probe, "low"), "overlay", 0,
               f"lowerdir={probe}/low,upperdir={cap}/u,workdir={cap}/w")
    except OSError:
        code |= 4
    try:
        become_untrusted()
        if os.getuid() != UNTRUSTED_UID:
            code |= 2
    except OSError:
        return code | 2 | 8
    if _libc().unshare(CLONE_NEWUSER | CLONE_NEWNS) != 0:  # what agent_view() needs
        code |= 8
    return code


def _detect_cgroup() -> tuple[str, str]:
    try:
        group = CallCgroup.create("probe")
    except OSError as exc:
        return f"cgroup: {exc.strerror or exc}", ""
    if group is None:
        return "no cgroup hierarchy with memory and pids controllers this process may use", ""
    group.remove()
    return "", group.kind


# --- the switch to the untrusted user ----------------------------------------------------------

def become_untrusted() -> None:
    """Make this process UNTRUSTED_UID (and its gid, no supplementary groups) for good, with
    no way back through a setuid program (PR_SET_NO_NEW_PRIVS). Call it in a forked child,
    after opening anything it must still write as the harness (a verdict file)."""
    os.setgroups([])
    os.setresgid(UNTRUSTED_GID, UNTRUSTED_GID, UNTRUSTED_GID)
    os.setresuid(UNTRUSTED_UID, UNTRUSTED_UID, UNTRUSTED_UID)
    if _libc().prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_NO_NEW_PRIVS)")


def hand_over(root: str) -> None:
    """Make UNTRUSTED_UID the owner of a disposable tree (a check's copy), links not followed."""
    os.lchown(root, UNTRUSTED_UID, UNTRUSTED_GID)
    for folder, dirs, files in os.walk(root):
        for name in dirs + files:
            os.lchown(os.path.join(folder, name), UNTRUSTED_UID, UNTRUSTED_GID)


# --- the agent's view: a check's tree without the reference's copy -----------------------------
#
# A differential check compares the delivered code with the good reference, copied beside it.
# The check's process and the reference's host must read that copy; the agent's code (its
# host, the programs of the agent's a check starts) must not, and they all run as the same
# untrusted user. So the check's process, while still root, makes a user and a mount
# namespace owned by that user in which the copy is covered by an empty tmpfs, and keeps a
# handle on each (`agent_view`); each process that will run the agent's code joins them
# (`enter_agent_view`) and drops every capability. A process of that user outside cannot
# join them (joining a mount namespace needs CAP_SYS_CHROOT where it is), and one inside
# cannot reach what the process outside see through /proc/PID/root: a process of a child
# user namespace may not read the /proc links of one of the parent's without CAP_SYS_PTRACE
# there. Mounts copied into a namespace made later inside are locked: the tmpfs stays.

_CAP_VERSION_3 = 0x20080522


class _CapHeader(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]


class _CapData(ctypes.Structure):
    _fields_ = [("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32), ("inheritable", ctypes.c_uint32)]


def agent_view(hide: list[str]) -> tuple[int, int] | None:
    """In a check's process, as root, before it drops to UNTRUSTED_UID: handles (user, mount
    namespace) of a view in which every directory of `hide` is an empty, read-only tmpfs;
    None where it cannot be made (Support.views says why, once)."""
    hide = [os.path.realpath(h) for h in hide if h and os.path.isdir(h)]
    if not hide or support().views:
        return None
    ready_read, ready_write = os.pipe()
    hold_read, hold_write = os.pipe()
    pid = os.fork()
    if pid == 0:  # drops, makes the namespaces, covers, says so, waits to be let go
        code = 1
        try:
            os.close(ready_read)
            os.close(hold_write)
            os.setgroups([])
            os.setresgid(UNTRUSTED_GID, UNTRUSTED_GID, UNTRUSTED_GID)
            os.setresuid(UNTRUSTED_UID, UNTRUSTED_UID, UNTRUSTED_UID)  # the namespace's owner
            if _libc().unshare(CLONE_NEWUSER | CLONE_NEWNS) != 0:
                raise OSError(ctypes.get_errno(), "unshare")
            _mount(None, "/", None, MS_REC | MS_PRIVATE)
            for path in hide:
                _mount("tmpfs", path, "tmpfs", MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC, "size=4k,mode=0555")
            os.write(ready_write, b"1")
            os.read(hold_read, 1)  # until the check's process holds the namespaces
            code = 0
        except BaseException:
            pass
        os._exit(code)
    os.close(ready_write)
    os.close(hold_read)
    handles: list[int] = []
    try:
        if os.read(ready_read, 1) != b"1":
            return None
        for name, text in (("uid_map", f"{UNTRUSTED_UID} {UNTRUSTED_UID} 1"), ("setgroups", "deny"),
                           ("gid_map", f"{UNTRUSTED_GID} {UNTRUSTED_GID} 1")):
            with open(f"/proc/{pid}/{name}", "w", encoding="ascii") as fh:
                fh.write(text)
        handles = [os.open(f"/proc/{pid}/ns/{ns}", os.O_RDONLY | os.O_CLOEXEC) for ns in ("user", "mnt")]
        return handles[0], handles[1]
    except OSError:
        for fd in handles:
            os.close(fd)
        return None
    finally:
        os.close(ready_read)
        os.close(hold_write)
        os.waitpid(pid, 0)


def enter_agent_view(view: tuple[int, int]) -> None:
    """In a process that will run the agent's code (UNTRUSTED_UID, single-threaded): join the
    view of `agent_view`, at the same working directory, with no capability left. Raises
    OSError when it cannot: the caller must then not run the agent's code."""
    here = os.getcwd()
    libc = _libc()
    for fd, kind in zip(view, (CLONE_NEWUSER, CLONE_NEWNS)):
        if libc.setns(fd, kind) != 0:
            err = ctypes.get_errno()
            raise OSError(err, f"setns: {os.strerror(err)}")
    os.chdir(here)  # joining a mount namespace moves to its root
    none = (_CapData * 2)()
    if libc.capset(ctypes.byref(_CapHeader(_CAP_VERSION_3, 0)), none) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"capset: {os.strerror(err)}")


# --- namespaces ---------------------------------------------------------------------------------

_libc_handle = None
_pylibc_handle = None


def _libc():
    global _libc_handle
    if _libc_handle is None:
        _libc_handle = ctypes.CDLL(None, use_errno=True)
    return _libc_handle


def _machine_clone_number() -> int | None:
    return _SYS_CLONE.get(os.uname().machine)


def clone_namespaces(flags: int = CLONE_NEWPID | CLONE_NEWNS) -> int:
    """fork(), but the child starts new PID and mount namespaces (pid 1 in its own). Python's
    own before- and after-fork work runs around the raw system call, as in `os.fork`;
    call it from a single-threaded process (a supervisor)."""
    global _pylibc_handle
    if _pylibc_handle is None:  # PyDLL: the GIL stays held across the system call, as in os.fork
        _pylibc_handle = ctypes.PyDLL(None, use_errno=True)
    number = _machine_clone_number()
    if number is None:
        raise OSError(38, "clone is not wired for this machine")
    ctypes.pythonapi.PyOS_BeforeFork()
    # x86_64 and aarch64 take (flags, stack, parent_tid, child_tid, tls): no stack means fork-like.
    pid = _pylibc_handle.syscall(ctypes.c_long(number), ctypes.c_ulong(flags | signal.SIGCHLD),
                                 None, None, None, ctypes.c_ulong(0))
    if pid == 0:
        ctypes.pythonapi.PyOS_AfterFork_Child()
        return 0
    err = ctypes.get_errno()
    ctypes.pythonapi.PyOS_AfterFork_Parent()
    if pid < 0:
        raise OSError(err, os.strerror(err))
    return pid


def _encoded(text: str | None) -> bytes | None:
    return None if text is None else text.encode()


def _mount(source: str | None, target: str, fstype: str | None, flags: int, data: str | None = None) -> None:
    enc = _encoded
    if _libc().mount(enc(source), enc(target), enc(fstype), ctypes.c_ulong(flags), enc(data)) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"mount {fstype or 'bind'} on {target}: {os.strerror(err)}")


def _covered(path: str, covers: list[str]) -> bool:
    return any(path == c or path.startswith(c.rstrip("/") + "/") for c in covers)


def _make_mount_point(path: str, is_dir: bool) -> None:
    if is_dir:
        os.makedirs(path, mode=0o755, exist_ok=True)
    else:
        os.makedirs(os.path.dirname(path), mode=0o755, exist_ok=True)
        if not os.path.exists(path):
            os.close(os.open(path, os.O_WRONLY | os.O_CREAT, 0o444))


def enter_view(view: dict) -> None:
    """In a call's init (root, in its own mount namespace): build the call's mount view.

    `view`: {"scratch": the call's own directory (its copies, output, private verdict dir),
    "writable": directories to lay a capped overlay over (they are disposable copies, handed
    to UNTRUSTED_UID), "in_place": directories checked where they are (an overlay too, whose
    writes never reach them), "hide": directories to cover with an empty tmpfs (the run directory,
    the run-key directory), "show": files to bind back read-only at their own path (the
    transcript, which lives in the hidden run directory)}. The temporary directory is
    covered too (other checks' copies), and the installed harness made read-only."""
    sup = support()
    scratch = os.path.realpath(view["scratch"])
    _mount(None, "/", None, MS_REC | MS_PRIVATE)
    # The capped layer: the upper layers of the copies' overlays live here.
    cap = os.path.join(scratch, ".ponybench-cap")
    os.makedirs(cap, mode=0o700, exist_ok=True)
    _mount("tmpfs", cap, "tmpfs", MS_NOSUID | MS_NODEV, f"size={DISK_LIMIT},mode=0700")
    for index, directory in enumerate(view.get("writable") or []):
        directory = os.path.realpath(directory)
        hand_over(directory)
        if sup.overlay:
            continue  # no overlay: the copy is written in place, capped per file only
        upper, work = os.path.join(cap, f"u{index}"), os.path.join(cap, f"w{index}")
        os.mkdir(upper)
        os.mkdir(work)
        os.chown(upper, UNTRUSTED_UID, UNTRUSTED_GID)  # the overlay's root takes the upper's owner
        os.chmod(upper, os.stat(directory).st_mode & 0o7777)
        _mount("overlay", directory, "overlay", MS_NOSUID | MS_NODEV,
               f"lowerdir={directory},upperdir={upper},workdir={work}")
    # A directory checked in place (not a copy): its overlay is handed over through the
    # overlay itself, so the files are copied up into the capped layer and the original keeps
    # its owner and content.
    in_place = []
    for index, directory in enumerate(view.get("in_place") or []):
        directory = os.path.realpath(directory)
        if sup.overlay:
            continue  # no overlay: the check cannot write there (its files are not its user's)
        upper, work = os.path.join(cap, f"pu{index}"), os.path.join(cap, f"pw{index}")
        os.mkdir(upper)
        os.mkdir(work)
        os.chmod(upper, os.stat(directory).st_mode & 0o7777)
        _mount("overlay", directory, "overlay", MS_NOSUID | MS_NODEV,
               f"lowerdir={directory},upperdir={upper},workdir={work}")
        hand_over(directory)
        in_place.append(directory)
    # Handles on what must stay reachable once the temporary directory is covered (opened
    # after the overlays: a handle on a directory checked in place is on its overlay).
    keep = {scratch: os.open(scratch, os.O_PATH | os.O_DIRECTORY)}
    for directory in in_place:
        keep[directory] = os.open(directory, os.O_PATH | os.O_DIRECTORY)
    for path in view.get("show") or []:
        real = os.path.realpath(path)
        if os.path.isfile(real):
            keep[real] = os.open(real, os.O_PATH)
    # The interpreter and the installed harness, read-only, wherever they are: a virtual
    # environment under /tmp (a wheel installed for a test, a CI's scratch venv) would vanish
    # under the tmpfs laid over /tmp with its python and its lazily imported modules.
    read_only = set()
    for directory in dict.fromkeys([os.path.realpath(sys.prefix), os.path.realpath(sys.base_prefix), *_harness_dirs()]):
        if os.path.isdir(directory) and directory not in keep:
            keep[directory] = os.open(directory, os.O_PATH | os.O_DIRECTORY)
            read_only.add(directory)
    # Every folder anyone may write (the temporary folders, /var/tmp, /run/lock): what the
    # check writes there lands in a tmpfs of its own and is gone with the call, so nothing it
    # writes outside its copy outlives it (a .pth file, a planted module, a filled disk).
    covers: list[str] = []
    shared = {os.path.realpath(tempfile.gettempdir()), "/tmp", "/dev/shm", *map(os.path.realpath, WORLD_WRITABLE)}
    for directory in sorted(shared, key=len):
        if os.path.isdir(directory) and not _covered(directory, covers):  # $TMPDIR inside /tmp: covered with it
            _mount("tmpfs", directory, "tmpfs", MS_NOSUID | MS_NODEV, f"size={DISK_LIMIT},mode=1777")
            covers.append(directory)
    # $HOME and the harness user's own home, always: a run with another $HOME (a rehearsal's,
    # a test's) still has the interpreter under the user's own, which must stay reachable;
    # and what the check writes there (~/.local's site-packages, whose .pth files every later
    # Python of the user runs) must not outlive it.
    for home in dict.fromkeys([view.get("home") or "", _own_home()]):
        covered = _cover_home(home, view.get("path") or "", covers)
        if covered:
            covers.append(covered)
    hidden = []
    for path in view.get("hide") or []:
        real = os.path.realpath(path)
        if os.path.isdir(real) and not _covered(real, covers):
            _mount("tmpfs", real, "tmpfs", MS_NOSUID | MS_NODEV | MS_NOEXEC, f"size={HIDDEN_SIZE},mode=0755")
            hidden.append(real)
    for path, fd in keep.items():
        if not _covered(path, covers + hidden):
            os.close(fd)
            continue
        is_dir = path == scratch or path in in_place or path in read_only
        _make_mount_point(path, is_dir)
        _mount(f"/proc/self/fd/{fd}", path, None, MS_BIND | MS_REC)
        if not is_dir or path in read_only:
            _mount(None, path, None, MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | MS_NODEV)
        os.close(fd)
    temporary = os.path.realpath(tempfile.gettempdir())
    if temporary not in covers and _covered(temporary, covers):  # $TMPDIR was inside /tmp: a fresh one
        os.makedirs(temporary, exist_ok=True)
        os.chmod(temporary, 0o1777)
    for directory in _harness_dirs():
        if os.path.isdir(directory) and not _covered(directory, covers + hidden):
            _mount(directory, directory, None, MS_BIND | MS_REC)
            _mount(None, directory, None, MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | MS_NODEV)
    # A /proc of this namespace only: no ancestor's pid, environment or open files.
    _mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC)


def _own_home() -> str:
    """The home of the user the harness runs as, from the password database ("" if none)."""
    try:
        return pwd.getpwuid(os.getuid()).pw_dir
    except KeyError:
        return ""


def _cover_home(home: str | None, path: str, covers: list[str]) -> str:
    """Cover a home of the harness's user: its secrets (the CLI's credentials, the run keys,
    caches) are not there, and the untrusted user gets an empty, writable home of its own
    instead, gone with the call (a home others may enter is covered too: ~/.local's
    site-packages, ~/.bashrc and the like run in every later process of the user, so nothing
    the check writes may stay there); the folders of it that hold the interpreter, the harness
    and the programs on PATH (~/.pyenv, ~/.local, ~/.cargo, ...) are bound back read-only. The
    covered home, or "" when it is left as it is."""
    if not home:
        return ""
    home = os.path.realpath(home)
    if home == "/":
        return ""
    if _covered(home, covers):  # under a folder covered already (/var/tmp): an empty one there
        if not os.path.isdir(home):
            os.makedirs(home, mode=0o755)
            os.chown(home, UNTRUSTED_UID, UNTRUSTED_GID)
            os.chmod(home, 0o700)
        return ""
    if not os.path.isdir(home):
        return ""
    needed = [*_interpreter_paths(), *[os.path.realpath(p) for p in path.split(os.pathsep) if p]]
    tops = set()
    for real in needed:
        if _covered(real, [home]) and real != home:
            top = os.path.join(home, os.path.relpath(real, home).split(os.sep)[0])
            if os.path.isdir(top):
                tops.add(top)
    handles = {top: os.open(top, os.O_PATH | os.O_DIRECTORY) for top in sorted(tops)}
    _mount("tmpfs", home, "tmpfs", MS_NOSUID | MS_NODEV,
           f"size={DISK_LIMIT},mode=0700,uid={UNTRUSTED_UID},gid={UNTRUSTED_GID}")
    for top, fd in handles.items():
        _make_mount_point(top, True)
        _mount(f"/proc/self/fd/{fd}", top, None, MS_BIND | MS_REC)
        _mount(None, top, None, MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | MS_NODEV)
        os.close(fd)
    return home


_harness_dirs_found: list[str] | None = None
_interpreter_paths_found: list[str] | None = None


def _harness_dirs() -> list[str]:
    """The installed harness: this package and site-packages (found once per process)."""
    global _harness_dirs_found
    if _harness_dirs_found is None:
        found = {os.path.dirname(os.path.dirname(os.path.abspath(__file__)))}  # pytest_ponybench/
        for key in ("purelib", "platlib"):
            try:
                found.add(os.path.realpath(sysconfig.get_paths()[key]))
            except KeyError:
                pass
        _harness_dirs_found = sorted(found)
    return _harness_dirs_found


def _interpreter_paths() -> list[str]:
    """Where the interpreter, its libraries and this package live (found once per process)."""
    global _interpreter_paths_found
    if _interpreter_paths_found is None:
        items = [sys.prefix, sys.base_prefix, sys.executable, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))),
                 *[p for p in sys.path if p]]
        _interpreter_paths_found = sorted({os.path.realpath(p) for p in items})
    return _interpreter_paths_found


def run_init(child: int) -> None:
    """The namespace's init: reap every process re-parented here; when `child` (the call's
    process) ends, exit with its code, and the kernel kills whatever else is in the
    namespace. Never returns."""
    code = 126
    try:
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        while True:
            pid, status = os.waitpid(-1, 0)
            if pid == child:
                code = os.waitstatus_to_exitcode(status)
                code = code if code >= 0 else 128 - code
                break
    except BaseException:
        pass
    os._exit(code)


# --- cgroups --------------------------------------------------------------------------------------

V1_ROOT = "/sys/fs/cgroup"


def _own_cgroup_paths() -> dict[str, str]:
    """This process's cgroup per controller ("" for the v2 hierarchy), from /proc/self/cgroup."""
    paths: dict[str, str] = {}
    try:
        with open("/proc/self/cgroup", encoding="utf-8") as fh:
            for line in fh:
                parts = line.rstrip("\n").split(":", 2)
                if len(parts) == 3:
                    for controller in parts[1].split(","):
                        paths[controller] = parts[2]
    except OSError:
        pass
    return paths


def byte_size(size: int) -> str:
    """A byte count as people write it: '4 GiB', '256 MiB'."""
    return f"{size / 1024 ** 3:g} GiB" if size % 1024 ** 3 == 0 else f"{size / 1024 ** 2:g} MiB"


def limits_met(said: dict | None, memory_option: str = "", pids_option: str = "") -> str:
    """The limits a group's processes ran into, as the end of a sentence ("" for none), for
    the agent's cell and for a check alike. `said` is `CallCgroup.hit()` with the group's
    "memory_bytes" and "pids_max" beside it; an option that sets a limit is named with it."""
    said = said or {}
    met = []
    if said.get("memory"):
        named = f", {memory_option}" if memory_option else ""
        met.append(f"its memory limit ({byte_size(int(said.get('memory_bytes') or 0))}{named}): "
                   f"the kernel killed a process for it")
    if said.get("pids"):
        named = f" ({pids_option})" if pids_option else ""
        met.append(f"its limit of {said.get('pids_max')} processes{named}: a fork was refused")
    return " and ".join(met)


@dataclass
class CallCgroup:
    """One check call's cgroup: made before the call, joined by its init, read and removed after."""

    kind: str  # "v1" or "v2"
    dirs: list[str]  # v1: the memory and the pids group; v2: the one group
    memory: int = MEMORY_LIMIT  # bytes its processes may use together
    pids: int = PIDS_LIMIT  # processes (threads included) it may hold at once

    @classmethod
    def create(cls, tag: str, memory: int = MEMORY_LIMIT, pids: int = PIDS_LIMIT) -> "CallCgroup | None":
        """A new group below this process's own (so the machine's own accounting still holds
        it), with the limits set (a check call's by default; a cell's agent passes its own);
        None where no usable hierarchy exists. Raises OSError when one exists but cannot be
        written (not root, read-only in a container)."""
        own = _own_cgroup_paths()
        name = f"ponybench-{os.getpid()}-{tag}-{secrets.token_hex(3)}"
        memory_root, pids_root = os.path.join(V1_ROOT, "memory"), os.path.join(V1_ROOT, "pids")
        if "memory" in own and "pids" in own and os.path.isdir(memory_root) and os.path.isdir(pids_root):
            dirs = [os.path.join(memory_root, own["memory"].lstrip("/"), name),
                    os.path.join(pids_root, own["pids"].lstrip("/"), name)]
            made = []
            try:
                for d in dirs:
                    os.mkdir(d)
                    made.append(d)
                _write(os.path.join(dirs[0], "memory.limit_in_bytes"), str(memory))
                try:  # swap counts too where the kernel accounts it
                    _write(os.path.join(dirs[0], "memory.memsw.limit_in_bytes"), str(memory))
                except OSError:
                    pass
                _write(os.path.join(dirs[1], "pids.max"), str(pids))
            except OSError:
                for d in reversed(made):
                    _rmdir(d)
                raise
            return cls("v1", dirs, memory, pids)
        if "" in own and os.path.isfile(os.path.join(V1_ROOT, "cgroup.controllers")):
            parent = os.path.join(V1_ROOT, own[""].lstrip("/"))
            try:
                with open(os.path.join(parent, "cgroup.subtree_control"), encoding="utf-8") as fh:
                    delegated = fh.read().split()
            except OSError:
                return None
            if "memory" not in delegated or "pids" not in delegated:
                return None
            group = os.path.join(parent, name)
            os.mkdir(group)
            try:
                _write(os.path.join(group, "memory.max"), str(memory))
                _write(os.path.join(group, "memory.swap.max"), "0")
                _write(os.path.join(group, "pids.max"), str(pids))
            except OSError:
                _rmdir(group)
                raise
            return cls("v2", [group], memory, pids)
        return None

    def join(self) -> None:
        """Move the calling process into the group (its children follow)."""
        for d in self.dirs:
            _write(os.path.join(d, "cgroup.procs"), "0")

    def leave(self) -> None:
        """Move the calling process back to the groups it came from (the parents of this one);
        where it cannot, it stays (kill_all spares the caller)."""
        for d in self.dirs:
            try:
                _write(os.path.join(os.path.dirname(d), "cgroup.procs"), "0")
            except OSError:
                pass

    def hit(self) -> dict:
        """Which limits the call met: {"memory": bool, "pids": bool}."""
        if self.kind == "v1":
            oom = _field(os.path.join(self.dirs[0], "memory.oom_control"), "oom_kill")
            if oom is None:
                oom = _number(os.path.join(self.dirs[0], "memory.failcnt"))
            return {"memory": bool(oom), "pids": bool(_field(os.path.join(self.dirs[1], "pids.events"), "max"))}
        return {"memory": bool(_field(os.path.join(self.dirs[0], "memory.events"), "oom_kill")),
                "pids": bool(_field(os.path.join(self.dirs[0], "pids.events"), "max"))}

    def peak(self) -> int | None:
        """The most memory the group's processes used at once, in bytes (None if unknown)."""
        name = "memory.max_usage_in_bytes" if self.kind == "v1" else "memory.peak"
        return _number(os.path.join(self.dirs[0], name))

    def members(self) -> set[int]:
        """The processes in the group now (every thread group, whatever its session or parent)."""
        found: set[int] = set()
        for d in self.dirs:
            try:
                with open(os.path.join(d, "cgroup.procs"), encoding="ascii") as fh:
                    found.update(int(line) for line in fh if line.strip().isdigit())
            except OSError:
                pass
        return found

    def kill_all(self) -> None:
        """SIGKILL everything in the group until it is empty. A process that escaped every
        parent (a daemon that forked twice and called setsid) is still in its group, and one
        forked while the list was read is there in the next round; a parent with a SIGKILL
        pending can fork no more, so the rounds end."""
        for _ in range(200):
            found = self.members() - {os.getpid()}
            if not found:
                return
            for pid in found:
                try:
                    os.kill(pid, signal.SIGKILL)
                except (ProcessLookupError, PermissionError):
                    pass
            time.sleep(0.01)  # only when something was left: let the kills land

    def remove(self) -> None:
        for d in reversed(self.dirs):
            _rmdir(d)


def supervisor_cgroups(supervisor: int) -> list[str]:
    """The groups a supervisor made (CallCgroup.create names them ponybench-<its pid>-...)
    still there, below this process's own in each hierarchy it uses."""
    own = _own_cgroup_paths()
    prefix = f"ponybench-{supervisor}-"
    found = []
    for controller in ("memory", "pids", ""):
        if controller not in own:
            continue
        parent = os.path.join(V1_ROOT, controller, own[controller].lstrip("/"))
        try:
            found += [os.path.join(parent, name) for name in os.listdir(parent) if name.startswith(prefix)]
        except OSError:
            continue
    return found


def remove_leftover_cgroups(supervisor: int) -> None:
    """Remove the (empty) groups of a supervisor that died before removing them."""
    for group in supervisor_cgroups(supervisor):
        _rmdir(group)


def _write(path: str, text: str) -> None:
    fd = os.open(path, os.O_WRONLY)
    try:
        os.write(fd, text.encode())
    finally:
        os.close(fd)


def _rmdir(path: str) -> None:
    try:
        os.rmdir(path)
    except OSError:
        pass


def _field(path: str, key: str) -> int | None:
    try:
        with open(path, encoding="utf-8") as fh:
            for line in fh:
                parts = line.split()
                if len(parts) == 2 and parts[0] == key:
                    return int(parts[1])
    except (OSError, ValueError):
        pass
    return None


def _number(path: str) -> int | None:
    try:
        with open(path, encoding="utf-8") as fh:
            return int(fh.read().strip())
    except (OSError, ValueError):
        return None


def _remove_tree(path: str) -> None:
    import shutil
    shutil.rmtree(path, ignore_errors=True)
