"""Laying out a cell's workspace: the fixture copy, the seed files, the git snapshot.

Workspaces are kept (never pytest's pruned `tmp_path`): rescoring needs them, and a scorer
fix must never cost model spend twice.
"""
from __future__ import annotations

import fnmatch
import hashlib
import os
import re
import shutil
import stat
from pathlib import Path

from pytest_ponybench.cell import beside
from pytest_ponybench.specs.spec import HARNESS_PREFIX, TaskSpec
from pytest_ponybench.store import snapshot as harness_snapshot
from pytest_ponybench.store import tree
from pytest_ponybench.store.rundir import read_record, records_dir, write_record

# In the workspace once the CLI's tree is gone: what the CLI printed (kept for scoring).
# While it runs both are written in the cell's records folder under the same names
# (`cli_output`), where an agent cannot replace, truncate or link them in its workspace.
TRANSCRIPT = f"{HARNESS_PREFIX}.transcript.jsonl"
STDERR = f"{HARNESS_PREFIX}.stderr.txt"
CLI_OUTPUTS = (TRANSCRIPT, STDERR)
# Beside it (rundir.records_dir), sealed with the run's key: record kinds, never in the
# workspace, where the agent (and the code it wrote) could rewrite them.
IDENTITY = "cell"
FIXTURE_MANIFEST = "fixture"  # the fixture's files as copied
SEED_MANIFEST = "seed"  # {path: sha256} of the task's seed files
RESULT = "result"

# What a fixture copy leaves behind: dependencies, VCS data, build output, caches, virtual
# environments, media, and anything that looks like a secret.
FIXTURE_SKIP = (
    "node_modules", ".git", "build", "dist", "dist-ssr", ".vite", ".next", "out", "target",
    "__pycache__", ".pytest_cache", ".mypy_cache", ".ruff_cache", ".cache", ".tox",
    ".venv", "venv", "env", ".idea", ".vscode", "coverage", "storage", "*.log", "*.pyc",
    "*.mp4", "*.mp3", "*.wav", "*.mov", "*.avi", "*.zip", "*.tar", "*.gz",
    ".env", ".env.*", "*.pem", "*.key", "*.p12", "*.pfx", "id_rsa*", "*secret*",
    "*credential*", "*service-account*.json",
)


def _skipped(name: str) -> bool:
    return any(fnmatch.fnmatch(name, pattern) for pattern in FIXTURE_SKIP)


def copy_fixture(source: Path, workspace: Path) -> list[str]:
    shutil.copytree(source, workspace, dirs_exist_ok=True, symlinks=True,
                    ignore=lambda _dir, names: [n for n in names if _skipped(n)])
    return sorted(rel for rel, entry in tree.walk(workspace)
                  if entry.is_file(follow_symlinks=False) and not entry.name.startswith(HARNESS_PREFIX))


def write_files(workspace: Path, files: dict[str, str]) -> None:
    for rel, content in files.items():
        target = workspace / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(content, encoding="utf-8")


# The agent's own .git: a plain copy of the harness's snapshot, the repository it always saw.
AGENT_GIT_CONFIG = "[core]\n\trepositoryformatversion = 0\n\tfilemode = true\n\tbare = false\n\tlogallrefupdates = true\n"


def snapshot(workspace: Path) -> None:
    """Commit the seeded tree, so the agent's work is exactly the diff against it. The commit
    scoring and the judge read is the harness's, beside the workspace; the agent gets a copy
    as its .git (the repository it always saw), which nothing of the harness reads again:
    the agent can rewrite it."""
    kept = harness_snapshot.take(workspace)
    own = workspace / ".git"
    shutil.copytree(kept, own)
    (own / "config").write_text(AGENT_GIT_CONFIG, encoding="utf-8")
    (own / "info" / "attributes").unlink()  # the harness's neutral attributes: not the agent's
    (own / "info" / "exclude").write_text(f"{HARNESS_PREFIX}*\n", encoding="utf-8")


def digest(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def seed(task: TaskSpec, workspace: Path, files: dict[str, str] | None = None, key: bytes | None = None) -> None:
    """Fixture copy, then seed files, then snapshot; then `files` over them (a reference).
    The manifests go beside the workspace, sealed with `key` (a run's; None outside a run)."""
    workspace.mkdir(parents=True, exist_ok=True)
    manifest = copy_fixture(task.fixture, workspace) if task.fixture is not None else []
    write_files(workspace, task.seed)
    # What was seeded, so "the agent delivered code" can be told from "the stub is still there"
    # from the kept cell alone, whatever the task file says by the time it is rescored.
    write_record(workspace, SEED_MANIFEST, {rel: digest(text) for rel, text in sorted(task.seed.items())}, key)
    if task.fixture is not None:
        write_record(workspace, FIXTURE_MANIFEST, manifest, key)
        snapshot(workspace)
    if files:
        write_files(workspace, files)


def fixture_manifest(workspace: Path, key: bytes | None = None) -> set[str]:
    data, _ = read_record(workspace, FIXTURE_MANIFEST, key)
    return {str(p) for p in data} if isinstance(data, list) else set()


def seed_manifest(workspace: Path, fallback: dict[str, str], key: bytes | None = None) -> dict[str, str]:
    """{path: sha256} of what was seeded; without a trusted manifest, the digests of
    `fallback` (the task's seed files)."""
    data, _ = read_record(workspace, SEED_MANIFEST, key)
    if isinstance(data, dict):
        return {str(k): str(v) for k, v in data.items()}
    return {rel: digest(text) for rel, text in fallback.items()}


def copy_ignore(workspace: Path):
    """The `shutil.copytree` ignore of a check's disposable copy (checks.run_checks): the
    harness's own files and the fixture's git data at the top (checks never need them),
    nothing the agent wrote."""
    root = Path(workspace)

    def ignore(directory: str, names: list[str]) -> list[str]:
        if Path(directory) != root:
            return []
        return [n for n in names if n.startswith(HARNESS_PREFIX) or n == ".git"]
    return ignore


def cli_output(workspace: Path, name: str) -> Path:
    """Where the CLI writes its output `name` (TRANSCRIPT, STDERR) while it runs: the cell's
    records folder, beside the workspace. A confined agent does not see the run directory; an
    unconfined one would have to leave its workspace and go looking for it."""
    return records_dir(workspace) / name


def put_back(workspace: Path) -> list[str]:
    """Move the CLI's output from the records folder to its kept names in the workspace, once
    the CLI's whole process tree is gone: a rename, which replaces whatever the agent left at
    those names (a file, a link, never followed; a folder is removed first). Both folders are
    opened without following a link. The names moved."""
    records, ws = records_dir(workspace), Path(workspace)
    moved = []
    try:
        src = os.open(records, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    except OSError:
        return moved  # no records folder (the run never started), or a link in its place
    try:
        dst = os.open(ws, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    except OSError:
        os.close(src)
        return moved
    try:
        for name in CLI_OUTPUTS:
            try:
                if not stat.S_ISREG(os.stat(name, dir_fd=src, follow_symlinks=False).st_mode):
                    continue
            except FileNotFoundError:
                continue
            try:
                there = os.stat(name, dir_fd=dst, follow_symlinks=False)
            except FileNotFoundError:
                there = None
            if there is not None and stat.S_ISDIR(there.st_mode):
                remove_tree(ws / name)  # never follows a link inside it, however deep
            os.replace(name, name, src_dir_fd=src, dst_dir_fd=dst)
            moved.append(name)
    finally:
        os.close(src)
        os.close(dst)
    return moved


def fresh(workspace: Path) -> None:
    """An empty workspace and no records: a rerun starts from a fresh seed, never from a
    half-done one."""
    for folder in (workspace, records_dir(workspace)):
        if folder.is_symlink():
            folder.unlink()
        elif folder.exists():
            remove_tree(folder)
    workspace.mkdir(parents=True)


# What an ordinary program copies, walks and removes: deeper than this, or a longer path
# inside the workspace, and Python's own copy, walk and removal (recursive, by path) fail
# (a file 1,200 folders deep raised RecursionError, issue 36 item 5). Far beyond any project.
MAX_DEPTH = 100  # folders below the workspace
MAX_PATH_BYTES = 2048  # of a path relative to the workspace
NAMED_AT_MOST = 20  # entries named one by one in `skipped_files`; the rest are counted
_OPEN_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW


def remove_tree(path: Path) -> None:
    """Remove the folder `path` and everything in it, as shutil.rmtree would, but without
    recursion and through descriptors: a tree of any depth goes (rmtree raised RecursionError
    on one 1,200 folders deep), one descriptor open at a time, and no link is followed (a link
    is removed, never entered; `path` itself must not be one)."""
    path = Path(path)
    top = os.open(path.parent, _OPEN_DIR)
    try:
        fd = os.open(path.name, _OPEN_DIR, dir_fd=top)
    except BaseException:
        os.close(top)
        raise
    names = [path.name]  # the folders entered, from `path` down to the one `fd` holds
    try:
        while names:
            child = None
            with os.scandir(fd) as entries:
                for entry in entries:
                    if entry.is_dir(follow_symlinks=False):
                        child = entry.name
                        break
                    os.unlink(entry.name, dir_fd=fd)
            if child is not None:  # go down into it
                inner = os.open(child, _OPEN_DIR, dir_fd=fd)
                os.close(fd)
                fd = inner
                names.append(child)
                continue
            # Empty: back up and remove it. Nothing else runs in the tree now, so '..' is its parent.
            name = names.pop()
            parent = os.open("..", _OPEN_DIR, dir_fd=fd) if names else os.dup(top)
            os.close(fd)
            fd = parent
            os.rmdir(name, dir_fd=fd)
    finally:
        os.close(fd)
        os.close(top)


def _special_kind(mode: int) -> str | None:
    """What a file that is neither a folder, a regular file nor a link is, in words."""
    if stat.S_ISFIFO(mode):
        return "a named pipe (FIFO)"
    if stat.S_ISSOCK(mode):
        return "a socket"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    if not (stat.S_ISDIR(mode) or stat.S_ISREG(mode) or stat.S_ISLNK(mode)):
        return "a special file"
    return None


def _short(rel: str, limit: int = 120) -> str:
    return rel if len(rel) <= limit else f"{rel[:limit // 2]}...{rel[-limit // 2:]} ({len(rel)} bytes)"


def remove_uncopyable(workspace: Path) -> str:
    """Remove from the workspace, once the agent's whole process tree is gone, what no
    ordinary program can copy, walk or score, and name each in one line (the record's
    `skipped_files`): a folder or file deeper than MAX_DEPTH folders or with a path over
    MAX_PATH_BYTES, a named pipe, a socket or a device, and a link that leads outside the
    workspace. The cell is then scored, kept, resumed and rescored with what remains; before,
    such an entry made the copy for checks, the walk of metrics or the removal of a rerun
    raise, and the paid cell was `interrupted`, again at every resume. "" when nothing was.

    One walk (store.tree), no link followed."""
    ws = Path(workspace)
    if ws.is_symlink() or not ws.is_dir():  # a link put in its place: never walk (and prune) its target
        return ""
    real = os.path.realpath(ws)
    named: list[str] = []
    count = 0
    for rel, entry in tree.walk(ws):
        try:
            st = entry.stat(follow_symlinks=False)
        except OSError:  # gone since the listing
            continue
        why = None
        if rel.count("/") >= MAX_DEPTH or len(rel.encode("utf-8", "surrogateescape")) > MAX_PATH_BYTES:
            why = f"deeper than {MAX_DEPTH} folders or a path over {MAX_PATH_BYTES} bytes"
        elif stat.S_ISLNK(st.st_mode):
            target = os.path.realpath(entry.path)
            if target != real and not target.startswith(real + os.sep):
                why = "a link that leads outside the workspace"
        else:
            why = _special_kind(st.st_mode)
        if why is None:
            continue
        # Removed before the walk would enter it: a removed folder is not walked.
        if stat.S_ISDIR(st.st_mode):
            remove_tree(Path(entry.path))
        else:
            os.unlink(entry.path)
        count += 1
        if len(named) < NAMED_AT_MOST:
            named.append(f"{_short(rel)}: {why}")
    if count > len(named):
        named.append(f"and {count - len(named)} more")
    return "; ".join(named)


# Entries of a run directory that the harness itself writes: everything else that appears or
# changes there while an agent runs was written by that agent, outside its workspace. Cell
# workspaces (and copies a resume kept aside, and a retried cell's earlier attempts) are
# directories named like a cell id; any other name with "__" in it (an agent's
# `../__init__.py`) is the agent's.
CELL_DIR_RE = re.compile(r"^[^_][^/]*?__[^/]+?__[^/]+?__\d+(\.stale-[\w-]+|\.attempt-\d+)?$")


def harness_entry(name: str, mode: int) -> bool:
    if stat.S_ISDIR(mode) and CELL_DIR_RE.match(name):
        return True
    return name.startswith((HARNESS_PREFIX, "results.", "summary.", "report."))


def watch_beside(run_dir: Path) -> beside.Watch:
    """Started before an agent runs: `.changed()` after it gives the names beside the
    workspaces that appeared or changed meanwhile, harness entries left out (beside.py: the
    kernel's events on Linux, no listing of the run)."""
    return beside.Watch(run_dir, harness_entry)


def blame(workspace: Path, changed_beside: list[str], written: list[str], exclusive: bool) -> list[str]:
    """What this cell's agent wrote outside its workspace.

    `written` are the paths its write tools wrote (from its transcript), anywhere outside the
    workspace; `changed_beside` are the run directory's entries that changed while it ran. A
    process that runs one cell at a time blames every change beside the workspace (a plugin
    hook may write without a tool call); under xdist other cells run at the same time, so a
    change is blamed only on the cell whose agent wrote it."""
    ws = Path(workspace).resolve()
    run_dir = ws.parent
    outside = [Path(p) for p in written if ws != Path(p).resolve() and ws not in Path(p).resolve().parents]
    named = set()
    for path in outside:
        resolved = path.resolve()
        inside_run = run_dir in resolved.parents
        named.add(resolved.relative_to(run_dir).parts[0] if inside_run else str(resolved))
    beside = set(changed_beside) if exclusive else {n for n in changed_beside if n in named}
    return sorted(named | beside)
