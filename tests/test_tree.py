"""store.tree: the one walk of a workspace (snapshot, clean-up, verdict key, code files,
graders, the judge). Agent-written trees are hostile: links are never entered, depth costs
no stack, a folder removed mid-walk ends its walk quietly, and the order is the same
everywhere."""
from __future__ import annotations

import os

from pytest_ponybench.cell import workspace
from pytest_ponybench.scoring import fingerprint, graders, metrics
from pytest_ponybench.store import tree


def rels(root, skip=None):
    return [rel for rel, _ in (tree.walk(root, skip) if skip else tree.walk(root))]


def test_the_walk_lists_every_entry_sorted_a_folder_before_its_contents(tmp_path):
    for rel in ("b/z.py", "b/a.py", "a.py", "c/d/e.txt"):
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text("x")
    assert rels(tmp_path) == ["a.py", "b", "c", "b/a.py", "b/z.py", "c/d", "c/d/e.txt"]


def test_a_link_is_an_entry_and_its_target_is_never_entered(tmp_path):
    outside = tmp_path / "outside"
    (outside / "inner").mkdir(parents=True)
    (outside / "inner" / "secret.py").write_text("KEY = 1\n")
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "to_dir").symlink_to(outside)
    (ws / "to_file.py").symlink_to(outside / "inner" / "secret.py")
    assert rels(ws) == ["to_dir", "to_file.py"]


def test_skip_prunes_a_folder_and_all_it_holds(tmp_path):
    (tmp_path / "node_modules" / "pkg").mkdir(parents=True)
    (tmp_path / "node_modules" / "pkg" / "i.js").write_text("x")
    (tmp_path / "keep.js").write_text("x")
    assert rels(tmp_path, lambda rel, name: name == "node_modules") == ["keep.js"]


def test_a_folder_removed_by_the_caller_is_not_walked_and_raises_nothing(tmp_path):
    (tmp_path / "gone" / "deeper").mkdir(parents=True)
    (tmp_path / "gone" / "deeper" / "f").write_text("x")
    seen = []
    for rel, entry in tree.walk(tmp_path):
        seen.append(rel)
        if rel == "gone":
            (tmp_path / "gone" / "deeper" / "f").unlink()
            (tmp_path / "gone" / "deeper").rmdir()
            (tmp_path / "gone").rmdir()
    assert seen == ["gone"]


def test_depth_costs_no_stack(tmp_path):
    folder = tmp_path
    for _ in range(1200):  # beyond Python's default recursion limit of 1000
        folder = folder / "d"
        os.mkdir(folder)
    (folder / "leaf.py").write_text("x = 1\n")
    try:
        assert sum(1 for _ in tree.walk(tmp_path)) == 1201
    finally:  # shutil.rmtree (pytest's clean-up) recurses, and this tree is too deep for it
        workspace.remove_tree(tmp_path / "d")


def test_every_reader_of_a_workspace_leaves_a_link_to_outside_unread(tmp_path):
    """The defence as a principle: the measured code files, a grader's `files` target and the
    verdict key all see the link as a link, never what it points to."""
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "answers.py").write_text("ANSWER_KEY = 'sealed'\n")
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "main.py").write_text("print('hi')\n")
    (ws / "peek.py").symlink_to(outside / "answers.py")
    (ws / "lib").symlink_to(outside)
    assert metrics.code_files(ws, set()) == ["main.py"]
    assert graders._workspace_files(ws) == [ws / "main.py"]
    before = fingerprint.workspace_digest(ws)
    (outside / "answers.py").write_text("ANSWER_KEY = 'changed'\n")
    assert fingerprint.workspace_digest(ws) == before, "the digest read through a link"
