"""The one way the harness runs git, and the seeded snapshot of a fixture workspace it keeps.

Git runs on folders the agent wrote (a workspace, at scoring, judging and every rescore), as
the harness's user and outside any sandbox. Git acts on what it finds in a repository and its
work tree: config (a `clean` filter, `core.fsmonitor`, `core.pager`, an include), hooks,
`info/exclude`, `objects/info/alternates`, and the work tree's `.gitattributes` and
`.gitignore`. A confined agent can write all of them, so `git` holds to one contract: nothing
of the work tree decides what git runs or reads.

- Git's repository is always a harness-owned folder (`GIT_DIR`): the snapshot kept beside the
  workspace (`rundir.records_dir`, out of a confined agent's sight) or a throwaway one. A `.git`
  in the work tree is never read: git skips that name when it walks a tree.
- No configuration but that repository's own, which only the harness writes; the settings
  below turn off every command git could start (hooks, fsmonitor, pager) and the user's
  attribute and ignore files; no `GIT_*` variable of the harness's environment passes.
- Work-tree `.gitattributes` cannot be turned off before git 2.40 (`--attr-source`), so each
  harness repository's `info/attributes`, which outranks them all, leaves every attribute git
  acts on unspecified (`NEUTRAL_ATTRIBUTES`): `*.py -diff` no longer hides lines.
- Work-tree `.gitignore` files and nested repositories would decide what `git add` stages: the
  harness lists the files itself (`tree_files`) and stages them with `git update-index`, which
  reads no ignore file; the ignore rules that apply are the seeded tree's (the fixture's
  author's), never the workspace's now (`staged`).
"""
from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from pytest_ponybench.specs.spec import HARNESS_PREFIX
from pytest_ponybench.store import tree
from pytest_ponybench.store.rundir import records_dir

SNAPSHOT = "snapshot.git"  # in the cell's records folder
EMPTY_TREE = "4b825dc642cb6eb9a060e54bf8d69288fbee4904"  # what a workspace without a snapshot is compared with
# `info/attributes` outranks every .gitattributes: `!attr` makes each attribute git acts on
# when it stages or diffs unspecified (as with no attribute file), whatever the tree sets.
NEUTRAL_ATTRIBUTES = "* !diff !filter !text !eol !crlf !ident !working-tree-encoding !merge !whitespace\n"
SETTINGS = (
    f"core.hooksPath={os.devnull}", "core.fsmonitor=false", "core.untrackedCache=false", "core.pager=cat",
    f"core.attributesFile={os.devnull}", f"core.excludesFile={os.devnull}", "core.autocrlf=false",
    "core.safecrlf=false", "core.splitIndex=false", "commit.gpgsign=false", "gc.auto=0", "maintenance.auto=false",
    "advice.addEmbeddedRepo=false", "user.email=ponybench@localhost", "user.name=ponybench",
)


def git(git_dir: Path, work_tree: Path | None, *args: str, input: str | None = None) -> subprocess.CompletedProcess:
    """`git args` on the harness's repository `git_dir` (with `work_tree`, when it has one):
    the only way the harness runs git. Text in and out (undecodable bytes replaced)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    env.update(GIT_DIR=str(git_dir), GIT_CONFIG_NOSYSTEM="1", GIT_CONFIG_GLOBAL=os.devnull, GIT_ATTR_NOSYSTEM="1",
               GIT_OPTIONAL_LOCKS="0", GIT_NO_REPLACE_OBJECTS="1", GIT_TERMINAL_PROMPT="0")
    settings: tuple[str, ...] = SETTINGS
    if work_tree is not None:
        work_tree = Path(work_tree).resolve()
        env["GIT_WORK_TREE"] = str(work_tree)
        settings += ("core.bare=false",)
    return subprocess.run(["git", "--no-pager", *(a for s in settings for a in ("-c", s)), *args],
                          check=False, cwd=work_tree or git_dir, input=input, capture_output=True, encoding="utf-8",
                          errors="replace", timeout=120, env=env)


def _init(git_dir: Path, alternate: Path | None = None) -> Path:
    """A new empty repository of the harness's at `git_dir`: no template (no hooks, no
    exclude), neutral attributes, and `alternate`'s objects readable."""
    git_dir.mkdir(parents=True)
    done = git(git_dir, None, "init", "-q", "--bare", "--template=")
    if done.returncode != 0:
        raise RuntimeError(f"git could not make a repository at {git_dir}: {done.stderr.strip()}")
    (git_dir / "info").mkdir(exist_ok=True)
    (git_dir / "info" / "attributes").write_text(NEUTRAL_ATTRIBUTES, encoding="utf-8")
    if alternate is not None:
        (git_dir / "objects" / "info").mkdir(parents=True, exist_ok=True)
        (git_dir / "objects" / "info" / "alternates").write_text(f"{alternate.resolve()}\n", encoding="utf-8")
    return git_dir


def snapshot_dir(workspace: Path) -> Path:
    return records_dir(workspace) / SNAPSHOT


def tree_files(root: Path) -> list[str]:
    """The paths, relative to `root`, of the regular files and links under it, found without
    following a link: what git stores of a work tree. No harness file; nothing named `.git`
    (a repository's data: the files beside a nested one are files like any other, where
    `git add` would store the folder as a submodule and count none of them, or fail on it
    whole); no special file (a FIFO, a socket), which git cannot store."""
    def skip(rel: str, name: str) -> bool:
        return name == ".git" or name.startswith(HARNESS_PREFIX)

    return sorted(rel for rel, entry in tree.walk(root, skip)
                  if entry.is_symlink() or entry.is_file(follow_symlinks=False))


def _stage(run, paths: list[str]) -> None:
    """Put `paths` in the index as they are in the work tree now (a path that is gone leaves
    it). Git reads no ignore file here, and the neutral attributes leave the bytes as they are."""
    done = run("update-index", "--add", "--remove", "--replace", "-z", "--stdin", input="\0".join(paths))
    if done.returncode != 0:
        raise RuntimeError(f"git could not stage the workspace: {done.stderr.strip()}")


def take(workspace: Path) -> Path:
    """Commit the seeded tree (every file but the harness's own, whatever its ignore files say)
    into the snapshot beside `workspace`, where the agent can neither see nor rewrite it.
    Returns the snapshot's folder."""
    git_dir = snapshot_dir(workspace)
    if git_dir.exists():
        shutil.rmtree(git_dir)
    _init(git_dir)

    def run(*args: str, input: str | None = None) -> subprocess.CompletedProcess:
        return git(git_dir, workspace, *args, input=input)
    _stage(run, tree_files(workspace))
    done = run("commit", "-q", "--no-verify", "--allow-empty", "-m", "ponybench: seeded workspace")
    if done.returncode != 0:
        raise RuntimeError(f"git could not snapshot the fixture in {workspace}: {done.stderr.strip()}")
    return git_dir


@contextmanager
def staged(workspace: Path) -> Iterator[tuple[str, Callable[..., subprocess.CompletedProcess]]]:
    """(base, run): the workspace as it is now, staged in a throwaway repository of the
    harness's; `base` is the seeded commit (the empty tree when the workspace has no snapshot),
    `run(*args)` runs git on that repository. Writes nothing under the workspace or its
    snapshot, so scoring twice gives the same figures.

    A file the seeded tree did not hold is left out when the seeded tree's ignore rules (the
    fixture's .gitignore files as copied) ignore it: the build output or virtual environment
    the fixture's author meant. The workspace's ignore files now decide nothing: a .gitignore
    the agent wrote hid a 202-line implementation."""
    workspace = Path(workspace)
    seed = snapshot_dir(workspace)
    seeded = ""
    if seed.is_dir():
        seeded = git(seed, None, "rev-parse", "--verify", "--quiet", "HEAD^{commit}").stdout.strip()
    with tempfile.TemporaryDirectory(prefix="ponybench-git-") as tmp:
        scratch = _init(Path(tmp) / "git", alternate=seed / "objects" if seeded else None)

        def run(*args: str, input: str | None = None) -> subprocess.CompletedProcess:
            return git(scratch, workspace, *args, input=input)
        now, before = tree_files(workspace), []
        if seeded:
            run("read-tree", seeded)
            before = [rel for rel in run("ls-files", "-z").stdout.split("\0") if rel]
            ignored = _ignored(seeded, run, scratch, Path(tmp) / "rules", sorted(set(now) - set(before)))
            now = [rel for rel in now if rel not in ignored]
        _stage(run, sorted(set(now) | set(before)))
        yield seeded or EMPTY_TREE, run


def _ignored(seeded: str, run, scratch: Path, rules: Path, new: list[str]) -> set[str]:
    """The paths of `new` that the .gitignore files of `seeded` ignore: git checks them
    against a tree that holds those files alone."""
    ignore_files = [rel for rel in run("ls-tree", "-r", "-z", "--name-only", seeded).stdout.split("\0")
                    if rel.rsplit("/", 1)[-1] == ".gitignore"]
    if not ignore_files or not new:
        return set()
    for rel in ignore_files:
        (rules / rel).parent.mkdir(parents=True, exist_ok=True)
        (rules / rel).write_text(run("cat-file", "blob", f"{seeded}:{rel}").stdout, encoding="utf-8")
    checked = git(scratch, rules, "check-ignore", "--no-index", "-z", "--stdin", input="\0".join(new))
    return {rel for rel in checked.stdout.split("\0") if rel}
