"""LOC metrics (metrics.py), with the seed's definitions. Every expected number is counted by
hand in the comments beside the file it comes from."""
from __future__ import annotations

from pathlib import Path

import pytest

from pytest_ponybench.cell import workspace
from pytest_ponybench.scoring import metrics
from pytest_ponybench.specs.spec import TaskSpec
from support.records import record_data


def write(root: Path, files: dict[str, str | bytes]) -> None:
    for rel, content in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, bytes):
            path.write_bytes(content)
        else:
            path.write_text(content)


# app.py: 8 non-blank lines, 2 of them comments. The self-check starts at `if __name__`:
#   before it 5 non-blank (1 comment) -> 5 total, 4 src; from it 3 non-blank -> 3 test.
APP = '''# app module
import os

def add(a, b):
    """Add."""
    return a + b

if __name__ == "__main__":
    # check
    assert add(1, 2) == 3
'''
# util.js: 7 non-blank; `//`, `/*`, `*` and `*/` lines are comments -> 7 total, 3 src.
UTIL = """// helper
function f() {
  /* block
   * more
   */
  return 1;
}
"""
# lib.py: an indented `def demo` is a method, not a self-check -> 3 total, 3 src, no split.
LIB = """class A:
    def demo(self):
        return 1
"""
# b.py: a top-level `def smoke(` and everything below it is a self-check -> 1 src, 3 test.
SMOKE = """x = 1
def smoke():
    assert x == 1
smoke()
"""
TESTS = {
    "test_app.py": "from app import add\nassert add(1, 1) == 2\n",  # 2
    "tests/helpers.py": "# shared\nX = 1\n\nY = 2\n",  # 3 (comments count in test LOC)
    "conftest.py": "import pytest\n",  # 1
    "pkg/app_test.py": "def test_x():\n    pass\n",  # 2
    "test/x.js": "console.log(1)\n",  # 1
}
SKIPPED = {
    ".hidden.py": "a = 1\n",
    "_private.py": "a = 1\n",
    "__pycache__/app.py": "a = 1\n",
    "node_modules/lib/index.js": "module.exports = 1\n",
    "web/node_modules/x.js": "1\n",
    "notes.md": "# notes\ntext\n",
    "data.json": '{"a": 1}\n',
    "image.png": b"\x89PNG\r\n\x1a\n\x00\x00",
    "script.PY": "a = 1\n",  # extensions are compared as written, as in the seed
    "seeded.py": "from_the_fixture = 1\n",  # listed in the fixture manifest
    "_ponybench.transcript.jsonl": "{}\n",
}


@pytest.fixture
def ws(tmp_path) -> Path:
    write(tmp_path, {"app.py": APP, "util.js": UTIL, "lib.py": LIB, "b.py": SMOKE, **TESTS, **SKIPPED})
    return tmp_path


def test_code_files_are_code_extensions_minus_the_skipped(ws):
    files = metrics.code_files(ws, {"seeded.py"})
    assert files == sorted(["app.py", "util.js", "lib.py", "b.py", *TESTS])


def test_surgical_stats_split_the_self_check_off_as_tests(ws):
    stats = metrics.workspace_stats(ws, {"seeded.py"}, selfcheck_as_test=True)
    assert stats == {
        "files": 9, "src_files": 4,
        "total_loc": 5 + 7 + 3 + 1,  # app before the check, util, lib, b before smoke()
        "src_loc": 4 + 3 + 3 + 1,
        "test_files": 5,
        "test_loc": (2 + 3 + 1 + 2 + 1) + 3 + 3,  # test files, app's __main__ block, b's smoke
    }


def test_without_the_split_every_source_line_counts(ws):
    stats = metrics.workspace_stats(ws, {"seeded.py"}, selfcheck_as_test=False)
    assert stats == {"files": 9, "src_files": 4, "total_loc": 8 + 7 + 3 + 4, "src_loc": 6 + 3 + 3 + 4,
                     "test_files": 5, "test_loc": 9}


def test_seeded_fixture_files_count_only_when_not_listed(ws):
    with_seed = metrics.workspace_stats(ws, set(), selfcheck_as_test=False)
    assert with_seed["src_files"] == 5 and with_seed["total_loc"] == 22 + 1


@pytest.mark.parametrize("rel, is_test", [
    ("test_x.py", True), ("pkg/x_test.py", True), ("conftest.py", True), ("a/tests/util.py", True),
    ("test/x.js", True), ("Tests/x.ts", True), ("TEST_upper.py", True),
    ("x.py", False), ("testing/x.py", False), ("contest.py", False), ("x_test.js", False), ("tests.py", False),
])
def test_is_test_path(rel, is_test):
    assert metrics.is_test_path(rel) is is_test


@pytest.mark.parametrize("start, split_at", [
    ('if __name__ == "__main__":', 1), ("def demo():", 1), ("def _demo():", 1), ("def selfcheck():", 1),
    ("def _selfcheck():", 1), ("def _check():", 1), ("def _smoke():", 1), ("def smoke():", 1),
    ("    def demo(self):", None), ("\tif __name__ == '__main__':", None), ("def demonstrate():", None),
    ("def check():", None), ("async def demo():", None),
])
def test_where_a_self_check_starts(start, split_at):
    lines = ["x = 1", start, "    pass"]
    assert metrics._selfcheck_start(lines) == split_at


def test_line_counts_treat_every_comment_marker_alike():
    lines = ["# py", "// js", "* star", "/* open", "*/ close", "  x = 1  # trailing", "", "   ", "y"]
    assert metrics.line_counts(lines) == (7, 2)


# --- fixture tasks: the agent's git diff ---------------------------------------------------

@pytest.fixture
def fixture_ws(tmp_path) -> Path:
    source = tmp_path / "fixture"
    write(source, {"app/main.py": "def main():\n    return 0\n", "README.md": "# app\n",
                   "app/old.py": "a = 1\nb = 2\nc = 3\n", "tests/test_main.py": "def test(): pass\n"})
    task = TaskSpec(name="fx", path=tmp_path / "fx.yaml", prompt="p", fixture=source)
    ws = tmp_path / "ws"
    workspace.seed(task, ws)
    assert record_data(ws, workspace.FIXTURE_MANIFEST)  # the harness's manifest exists, beside the workspace
    return ws


def test_diff_stats_count_the_agent_s_added_lines(fixture_ws):
    ws = fixture_ws
    # modified: 3 lines added (a comment among them; a diff counts every added line)
    (ws / "app/main.py").write_text("def main():\n    # start\n    x = 1\n    return x\n")
    write(ws, {
        "app/new.py": "import os\n\nVALUE = os.sep\nOTHER = 1\n",  # new: 4 added lines (blank included)
        "tests/test_new.py": "def test_new():\n    assert True\n",  # a test: 2, apart
        "src/routeTree.gen.ts": "export const a = 1;\nexport const b = 2;\n",  # generated: skipped
        "src/api.gen.ts": "export {};\n",  # generated: skipped
        "vendor-lock.js": "x\n",  # lockfile marker: skipped
        "package-lock.json": "{}\n", "yarn.lock": "x\n",  # not code, and lockfiles
        "node_modules/pkg/index.js": "module.exports = 1;\n",  # dependencies: skipped
        "blob.py": b"\x00\x01\x02binary\x00\n",  # binary: numstat prints '-', skipped
        "README.md": "# app\nmore docs\n",  # not code
        "_ponybench.transcript.jsonl": "{}\n",  # harness file, excluded from the snapshot
    })
    (ws / "app/old.py").write_text("a = 1\n")  # only deletions: adds no line, but is a changed file (seed)
    before = tree_bytes(ws)
    stats = metrics.diff_stats(ws)
    assert stats == {"files": 3, "src_files": 3, "total_loc": 3 + 4 + 0, "src_loc": 3 + 4 + 0,
                     "test_files": 1, "test_loc": 2, "delivered": True}
    # Reading the diff wrote nothing: no index refresh, no new object under .git.
    assert tree_bytes(ws) == before
    assert metrics.diff_stats(ws) == stats


def tree_bytes(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def test_a_fixture_file_only_shortened_is_a_delivery_with_no_lines(fixture_ws):
    (fixture_ws / "app/old.py").write_text("a = 1\n")
    stats = metrics.diff_stats(fixture_ws)
    assert stats["delivered"] is True and stats["total_loc"] == 0


def test_diff_stats_read_renamed_and_unusually_named_files(fixture_ws):
    ws = fixture_ws
    # a move into tests/ with one added line: a test file, 1 line (git shows "{app => tests}/old.py")
    (ws / "tests").mkdir(exist_ok=True)
    (ws / "app/old.py").rename(ws / "tests/old.py")
    with open(ws / "tests/old.py", "a") as fh:
        fh.write("d = 4\n")
    # a rename that changes the suffix's file name ("app/{main.py => entry.py}") with 2 added lines
    (ws / "app/main.py").rename(ws / "app/entry.py")
    with open(ws / "app/entry.py", "a") as fh:
        fh.write("\nVALUE = 1\n")
    write(ws, {"caf\u00e9.py": "a = 1\nb = 2\n",  # git quotes this name without -z: 2 lines
               'say "hi".py': "print(1)\n"})  # and this one: 1 line
    stats = metrics.diff_stats(ws)
    assert stats == {"files": 3, "src_files": 3, "total_loc": 2 + 2 + 1, "src_loc": 5,
                     "test_files": 1, "test_loc": 1, "delivered": True}


def test_diff_stats_of_an_untouched_fixture_are_zero(fixture_ws):
    assert metrics.diff_stats(fixture_ws) == metrics.EMPTY


def test_cell_stats_of_a_fixture_task_use_the_diff_not_the_files(fixture_ws):
    write(fixture_ws, {"app/extra.py": "x = 1\n"})
    stats = metrics.cell_stats(fixture_ws, "fixture", workspace.fixture_manifest(fixture_ws), {}, "```py\na=1\n```")
    assert stats["total_loc"] == 1 and stats["files"] == 1  # not the 4 seeded code files


# --- open tasks: the answer's code blocks when no file was written --------------------------

ANSWER = """Here you go:

```python
# compute
x = 1

y = 2
```

and in JavaScript:

```js
// log it
console.log(x)
```
Not code: `inline`.
"""


def test_answer_code_loc_counts_fenced_blocks():
    assert metrics.answer_code_loc(ANSWER) == (3 + 2, 2 + 1)
    assert metrics.answer_code_loc("no code here, just `inline`") == (0, 0)
    assert metrics.answer_code_loc(None) == (0, 0)


def test_open_task_without_files_falls_back_to_the_answer(tmp_path):
    stats = metrics.cell_stats(tmp_path, "open", set(), {}, ANSWER)
    assert stats == {"files": 0, "src_files": 1, "total_loc": 5, "src_loc": 3, "test_files": 0, "test_loc": 0,
                     "delivered": True}


def test_open_task_with_a_file_ignores_the_answer(tmp_path):
    write(tmp_path, {"solution.py": "a = 1\nb = 2\n"})
    stats = metrics.cell_stats(tmp_path, "open", set(), {}, ANSWER)
    assert stats["total_loc"] == 2 and stats["src_files"] == 1


def test_open_task_keeps_a_self_check_as_source(tmp_path):
    write(tmp_path, {"solution.py": "a = 1\nif __name__ == '__main__':\n    print(a)\n"})
    assert metrics.cell_stats(tmp_path, "open", set(), {}, None)["total_loc"] == 3


def test_surgical_task_never_counts_the_answer(tmp_path):
    stats = metrics.cell_stats(tmp_path, "surgical", set(), {}, ANSWER)
    assert stats == metrics.EMPTY


STUB = "def f():\n    raise NotImplementedError\n"


def test_an_untouched_seed_stub_is_no_delivery_though_its_lines_count(tmp_path):
    task = TaskSpec(name="stub", path=tmp_path / "stub.yaml", prompt="p", seed={"f.py": STUB})
    ws = tmp_path / "ws"
    workspace.seed(task, ws)
    seeded = workspace.seed_manifest(ws, {})
    stats = metrics.cell_stats(ws, "surgical", set(), seeded, None)
    assert stats["total_loc"] == 2 and stats["delivered"] is False  # LOC keeps the seed's definition
    (ws / "f.py").write_text("def f():\n    return 1\n")
    assert metrics.cell_stats(ws, "surgical", set(), seeded, None)["delivered"] is True


def test_a_new_file_beside_an_untouched_stub_is_a_delivery(tmp_path):
    write(tmp_path, {"f.py": STUB, "helper.py": "X = 1\n"})
    seeded = {"f.py": workspace.digest(STUB)}
    assert metrics.cell_stats(tmp_path, "surgical", set(), seeded, None)["delivered"] is True


def test_a_workspace_kept_before_the_seed_manifest_falls_back_to_the_task_seed(tmp_path):
    write(tmp_path, {"f.py": STUB})
    seeded = workspace.seed_manifest(tmp_path, {"f.py": STUB})
    assert metrics.cell_stats(tmp_path, "surgical", set(), seeded, None)["delivered"] is False
