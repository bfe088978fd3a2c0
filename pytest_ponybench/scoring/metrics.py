"""Lines of code: the over-engineering proxy. Tests are counted apart, never as bloat.

Definitions (kept identical to the original benchmark's so published numbers compare):
- code files: these extensions only, so generated images or data never count;
- `total_loc`: non-blank lines, comments included (the bloat a verbose answer produces);
- `src_loc`: non-blank lines that do not start with a comment marker;
- tests: `test_*.py`, `*_test.py`, `conftest.py`, or anything under a `test/` or `tests/` folder;
- skipped: dot and underscore files, `__pycache__`, `node_modules`, and seeded fixture files.
"""
from __future__ import annotations

import hashlib
import os
import re
import stat
from pathlib import Path, PurePosixPath

from pytest_ponybench.store import snapshot, tree

CODE_EXTENSIONS = frozenset({".py", ".js", ".ts", ".jsx", ".tsx", ".html", ".css", ".go", ".rs", ".java", ".rb", ".sh"})
COMMENT_PREFIXES = ("#", "//", "*", "/*", "*/")
# Top-level markers where an in-file self-check starts on a surgical task.
SELFCHECK_STARTS = ("if __name__",) + tuple(
    f"def {name}(" for name in ("demo", "_demo", "selfcheck", "_selfcheck", "_check", "_smoke", "smoke")
)
# Diff paths never counted as written code: lockfiles and generated files.
GENERATED_MARKERS = ("-lock", ".lock", ".gen.ts", "lock.json", "routeTree.gen")
FENCED_BLOCK = re.compile(r"```[a-zA-Z0-9_+-]*\r?\n(.*?)```", re.S)

EMPTY = {"files": 0, "src_files": 0, "total_loc": 0, "src_loc": 0, "test_files": 0, "test_loc": 0,
         "delivered": False}


def is_test_path(rel: str) -> bool:
    parts = PurePosixPath(rel).parts
    name = parts[-1].lower()
    in_test_dir = any(part.lower() in ("test", "tests") for part in parts[:-1])
    return name.startswith("test_") or name.endswith("_test.py") or name == "conftest.py" or in_test_dir


def line_counts(lines) -> tuple[int, int]:
    """(non-blank lines, non-blank lines that are not comments)."""
    total = code = 0
    for line in lines:
        stripped = line.strip()
        if not stripped:
            continue
        total += 1
        if not stripped.startswith(COMMENT_PREFIXES):
            code += 1
    return total, code


def _read_lines(path: Path) -> list[str]:
    try:
        return path.read_text(encoding="utf-8", errors="ignore").splitlines()
    except OSError:
        return []


def _selfcheck_start(lines: list[str]) -> int | None:
    for index, line in enumerate(lines):
        if line[:1] not in (" ", "\t") and line.startswith(SELFCHECK_STARTS):
            return index
    return None


def code_files(workspace: Path, seeded: set[str], regular_only: bool = True) -> list[str]:
    """Workspace-relative paths of the code files the agent delivered: regular files (no
    link) with a code extension, outside `__pycache__` and `node_modules`, not named `.*` or
    `_*`, not seeded. `regular_only=False`: links and special files too (the judge names them).

    One walk (store.tree): no link is entered, and a link or special file is told from a
    regular one by the listing's own kind, with no further system call."""
    def skip(rel: str, name: str) -> bool:
        return name in ("__pycache__", "node_modules")  # nothing below counts

    found = []
    for rel, entry in tree.walk(workspace, skip):
        name = entry.name
        if name.startswith((".", "_")) or os.path.splitext(name)[1] not in CODE_EXTENSIONS or rel in seeded:
            continue
        if entry.is_dir(follow_symlinks=False):
            continue
        if not regular_only or entry.is_file(follow_symlinks=False):
            found.append(rel)
    return sorted(found)


def workspace_stats(workspace: Path, seeded: set[str] = frozenset(), selfcheck_as_test: bool = False,
                    files: list[str] | None = None) -> dict:
    """LOC of the code files in a workspace (`files`: its `code_files`, when already listed).
    With `selfcheck_as_test` (surgical tasks), an in-file self-check (a top-level `if __name__`
    block or demo/selfcheck function, and all below it) counts as test LOC: leaving a runnable
    check is good practice, not bloat."""
    files = code_files(workspace, set(seeded)) if files is None else files
    sources = [f for f in files if not is_test_path(f)]
    tests = [f for f in files if is_test_path(f)]
    test_loc = sum(line_counts(_read_lines(workspace / f))[0] for f in tests)
    total_loc = src_loc = 0
    for rel in sources:
        lines = _read_lines(workspace / rel)
        start = _selfcheck_start(lines) if selfcheck_as_test else None
        if start is not None:
            test_loc += line_counts(lines[start:])[0]
            lines = lines[:start]
        total, code = line_counts(lines)
        total_loc += total
        src_loc += code
    return {"files": len(files), "src_files": len(sources), "total_loc": total_loc,
            "src_loc": src_loc, "test_files": len(tests), "test_loc": test_loc}


def _numstat(run, base: str) -> list[tuple[str, str]]:
    """(added, path) of each file staged against the snapshot, read with -z: without it git
    quotes unusual names ("caf\\303\\251.py") and writes a rename as "a/{x.py => y.py}", and
    either would hide the file's real suffix and folders. A rename is counted under its new path."""
    tokens = run("diff", "--cached", "--numstat", "-z", base).stdout.split("\0")
    rows, i = [], 0
    while i < len(tokens):
        fields = tokens[i].split("\t")
        i += 1
        if len(fields) != 3:
            continue
        added, _deleted, path = fields
        if path == "" and i + 1 < len(tokens):  # a rename: the old path, then the new one
            path, i = tokens[i + 1], i + 2
        rows.append((added, path))
    return rows


def _counted_in_diff(rel: str) -> bool:
    return (PurePosixPath(rel).suffix in CODE_EXTENSIONS and "node_modules" not in rel
            and not any(marker in rel for marker in GENERATED_MARKERS))


def diff_stats(workspace: Path) -> dict:
    """Added lines of code files the agent created or changed since the seeded snapshot:
    the '+N' a pull request shows. Lockfiles and generated files are skipped, tests apart.

    Read-only, and nothing of the agent's runs or decides: git stages the working tree into a
    throwaway repository of the harness's over the seeded snapshot (`snapshot.staged`)."""
    stats = dict(EMPTY)
    changed = 0
    with snapshot.staged(workspace) as (base, run):
        rows = _numstat(run, base)
    for added_text, rel in rows:
        if not _counted_in_diff(rel):
            continue
        changed += 1  # created, changed or deleted: a code file differs from the seed
        if added_text == "-":  # a binary file
            continue
        added = int(added_text)
        if is_test_path(rel):
            stats["test_loc"] += added
            stats["test_files"] += 1
        else:
            stats["total_loc"] += added
            stats["files"] += 1
    stats["src_files"] = stats["files"]
    stats["src_loc"] = stats["total_loc"]
    stats["delivered"] = changed > 0
    return stats


def _digest_file(path: Path) -> str | None:
    """The sha256 of a regular file, read in chunks (a 1 GiB file costs no 1 GiB of memory);
    None for a link, a FIFO (whose read would never end), a socket or a device."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return None
    with open(fd, "rb") as file:
        try:
            return hashlib.file_digest(file, "sha256").hexdigest() if stat.S_ISREG(os.fstat(fd).st_mode) else None
        except OSError:
            return None


def delivered_files(workspace: Path, seeded: dict[str, str], fixture_files: set[str],
                    files: list[str] | None = None) -> list[str]:
    """Code files the agent created or changed compared with what was seeded (`seeded`:
    {path: sha256}); a seeded stub left as it was is not among them. `files`: the
    workspace's `code_files` without the fixture's, when already listed."""
    files = code_files(workspace, fixture_files) if files is None else files
    return [rel for rel in files if seeded.get(rel) is None or seeded[rel] != _digest_file(workspace / rel)]


def answer_code_loc(text: str | None) -> tuple[int, int]:
    """LOC of the fenced code blocks in a chat answer: (total, without comments)."""
    total = code = 0
    for block in FENCED_BLOCK.findall(text or ""):
        block_total, block_code = line_counts(block.splitlines())
        total += block_total
        code += block_code
    return total, code


def cell_stats(workspace: Path, kind: str, fixture_files: set[str], seeded: dict[str, str],
               answer: str | None) -> dict:
    """The metrics of one cell, by task kind: fixture -> git diff; open -> files, or the
    answer's code blocks when no file was written; surgical -> files, self-check as test.
    Seeded files count in LOC (the original benchmark's definition); `delivered` says whether
    the agent created or changed any code file (or, on an open task, answered with code)."""
    if kind == "fixture":
        return diff_stats(workspace)
    files = code_files(workspace, fixture_files)  # one walk of the workspace for both
    stats = workspace_stats(workspace, fixture_files, selfcheck_as_test=(kind == "surgical"), files=files)
    stats["delivered"] = bool(delivered_files(workspace, seeded, fixture_files, files=files))
    if kind == "open" and stats["total_loc"] == 0 and answer:
        total, code = answer_code_loc(answer)
        stats.update(total_loc=total, src_loc=code, src_files=1 if total else 0, delivered=total > 0)
    return stats
