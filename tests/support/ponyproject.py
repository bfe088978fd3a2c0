"""A small benchmark project on disk (tasks/, arms/, an ini file) driven by the stand-in CLI.

Used with pytester (its directory as the project root) and by module-scoped fixtures that run
pytest once and let several tests read the same run. The fake CLI behaves per a JSON file
named by PONYBENCH_FAKE and logs each call to `calls.jsonl` in the project root.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import yaml

from support import proc_tree

REPO = Path(__file__).resolve().parents[2]
FAKE = REPO / "tests" / "fakes" / "fake_claude.py"
# Plugins of this machine that only slow a subprocess pytest down; absent ones are ignored.
QUIET = ["-p", "no:cacheprovider", "-p", "no:hypothesispytest", "-p", "no:benchmark"]

# A task of the real-CLI tests: the scripted model writes its good or bad reference.
DOUBLE_TASK = """\
description: double a number
tags: [demo]
file: calc.py
prompt: Implement double(x) in calc.py.
seed:
  calc.py: |
    def double(x):
        raise NotImplementedError
checks:
  correct: |
    double = find_function(load(FILE), "double")
    for x in (2, 5, -1):
        assert double(x) == 2 * x, f"double({x}) gave {double(x)!r}"
refs:
  axis: correct
  good: |
    def double(x):
        return 2 * x
  bad: |
    def double(x):
        return x + 2 if x != 2 else 4
"""

ADD_TASK = {
    "description": "add two numbers",
    "tags": ["mathy"],
    "file": "add.py",
    "prompt": "Write add(a, b) in add.py.",
    "checks": {"correct": 'add = find_function(load(FILE), "add")\nassert add(2, 3) == 5, "add(2, 3) is not 5"\n'},
    "refs": {"axis": "correct", "good": "def add(a, b):\n    return a + b\n",
             "bad": "def add(a, b):\n    return a - b\n"},
}
MUL_TASK = {
    "file": "mul.py",
    "prompt": "Write mul(a, b) in mul.py.",
    "checks": {"correct": 'assert find_function(load(FILE), "mul")(2, 3) == 6, "mul(2, 3) is not 6"\n'},
    "refs": {"axis": "correct", "good": "def mul(a, b):\n    return a * b\n",
             "bad": "def mul(a, b):\n    return a + b\n"},
}
# What the fake writes in every cell: both tasks' files, correct, with a comment and a test.
GOOD_WRITES = {
    "add.py": "# adds\ndef add(a, b):\n    return a + b\n",
    "mul.py": "def mul(a, b):\n    return a * b\n",
    "tests/test_it.py": "def test_it():\n    assert True\n",
}


# The project's conftest.py: the reports' plots are test_report.py's business, and drawing
# them costs about a second per run. Without matplotlib the reports are written without plots.
CONFTEST = '''import sys

sys.modules["matplotlib"] = None  # written by tests/support/ponyproject.py: no plots, faster runs
'''


def write_project(root: Path, tasks: dict[str, dict | str], arms: dict[str, dict | str],
                  ini: dict[str, str] | None = None) -> Path:
    """tasks/<name>.yaml and arms/<name>.yaml (a dict is dumped as YAML, a str written as is),
    a pytest.ini with testpaths = tasks, and the conftest.py above."""
    root = Path(root)
    root.mkdir(parents=True, exist_ok=True)
    (root / "conftest.py").write_text(CONFTEST)
    for folder, specs in (("tasks", tasks), ("arms", arms)):
        (root / folder).mkdir(parents=True, exist_ok=True)
        for name, spec in specs.items():
            text = spec if isinstance(spec, str) else yaml.safe_dump(spec, sort_keys=False)
            (root / folder / f"{name}.yaml").write_text(text)
    lines = ["[pytest]", "testpaths = tasks"]
    for key, value in (ini or {}).items():
        lines.append(f"{key} = {value}")
    (root / "pytest.ini").write_text("\n".join(lines) + "\n")
    return root


def fake_env(root: Path, home: Path | None = None, **spec) -> dict[str, str]:
    """Environment for a run against the fake: its spec file, a call log, credentials the
    harness looks for (never used: the fake calls nothing), and a private HOME."""
    root = Path(root)
    spec.setdefault("calls", str(root / "calls.jsonl"))
    path = root / "fake.json"
    path.write_text(json.dumps(spec))
    home = home or root / "home"
    home.mkdir(parents=True, exist_ok=True)
    return {"PONYBENCH_FAKE": str(path), "ANTHROPIC_API_KEY": "not-a-real-key", "IS_SANDBOX": "1",
            "HOME": str(home)}


def bench_args(root: Path, *extra: str, claude: str | Path = FAKE) -> list[str]:
    """Options of a benchmark run (with '=': pytest must not take a path for a test path)."""
    from support.benchproc import stand_in_unconfined

    return ["--ponybench", f"--ponybench-claude={claude}", f"--ponybench-dir={Path(root) / 'runs'}",
            *QUIET, *stand_in_unconfined(claude), *extra]


def calls(root: Path) -> list[dict]:
    path = Path(root) / "calls.jsonl"
    # Each line carries its MAC (`mac`, rundir.seal_result): the tests read the record without it.
    return [{k: v for k, v in json.loads(line).items() if k != "mac"} for line in path.read_text().splitlines()] if path.exists() else []


def run_dirs(root: Path) -> list[Path]:
    base = Path(root) / "runs"
    return sorted(p for p in base.iterdir() if p.is_dir()) if base.is_dir() else []


def only_run_dir(root: Path) -> Path:
    dirs = run_dirs(root)
    assert len(dirs) == 1, f"expected one run directory, found {dirs}"
    return dirs[0]


def results(run_dir: Path) -> list[dict]:
    path = Path(run_dir) / "results.jsonl"
    # Each line carries its MAC (`mac`, rundir.seal_result): the tests read the record without it.
    return [{k: v for k, v in json.loads(line).items() if k != "mac"} for line in path.read_text().splitlines()]


def by_cell(records: list[dict]) -> dict[str, dict]:
    cells = {r["cell"]: r for r in records}
    assert len(cells) == len(records), "a cell was recorded twice"
    return cells


def summary(run_dir: Path) -> dict:
    return json.loads((Path(run_dir) / "summary.json").read_text())


def run_pytest(root: Path, args: list[str], env: dict[str, str], timeout: float = 900) -> subprocess.CompletedProcess:
    """`python -m pytest ARGS` in `root`, for runs that several tests read (pytester is
    per test). Output is text, stdout and stderr apart. Every process the child started dies
    at once if the call fails (its timeout, Ctrl-C), else when the test or module ends (proc_tree)."""
    full_env = {**os.environ, **env}
    full_env.pop("PYTEST_ADDOPTS", None)
    full_env.pop("PYTEST_XDIST_WORKER", None)
    with proc_tree.call_tree(full_env) as marked:
        return subprocess.run([sys.executable, "-m", "pytest", *args], cwd=root, env=marked, capture_output=True,
                              text=True, timeout=timeout)
