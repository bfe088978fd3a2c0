"""One walk of a workspace's tree for every reader of it: the snapshot's file list, the
clean-up after the agent, the verdict key's digest, the code files that are measured and the
files a grader or the judge reads.

A workspace is written by untrusted code, so the walk never follows a link (a link is an
entry like any other, its target never entered), keeps a stack instead of recursing (depth
costs no stack) and goes on past a folder it cannot list. Names come in sorted order, a
folder before what it holds, so a digest of the walk is the same on every machine.
"""
from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path

# An entry's relative path ("a/b.py") and name; True keeps it out of the walk (and, for a
# folder, everything in it).
Skip = Callable[[str, str], bool]


def _never(rel: str, name: str) -> bool:
    return False


def walk(root: Path | str, skip: Skip = _never) -> Iterator[tuple[str, os.DirEntry]]:
    """(relative path, entry) of every entry under `root` but those `skip` names. The entry's
    kind comes from the listing (`entry.is_dir(follow_symlinks=False)` costs no system call;
    `entry.stat(follow_symlinks=False)` is the entry's own lstat, made once when asked). A
    folder is entered after the caller has seen it, so a caller that removes a yielded folder
    ends the walk of it there, without an error."""
    stack: list[tuple[str, str]] = [("", os.fspath(root))]  # (relative path of a folder, its path)
    while stack:
        rel, folder = stack.pop()
        try:
            with os.scandir(folder) as found:
                entries = sorted(found, key=lambda e: e.name)
        except OSError:  # removed by the caller, unreadable, or no longer a folder
            continue
        below: list[tuple[str, str]] = []
        for entry in entries:
            path = f"{rel}/{entry.name}" if rel else entry.name
            if skip(path, entry.name):
                continue
            yield path, entry
            try:
                if entry.is_dir(follow_symlinks=False):
                    below.append((path, entry.path))
            except OSError:
                continue
        # A folder's entries all come before any folder's contents; pushed in reverse, the
        # folders are then entered in name order.
        stack.extend(reversed(below))
