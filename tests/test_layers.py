"""The package's layers are enforced: import-linter's contracts (pyproject.toml,
[tool.importlinter]) hold on the tree, and a planted upward import or cycle breaks them with
the offending import named (docs/architecture.md, "Layers")."""
import shutil
import subprocess
import sys
from pathlib import Path


REPO = Path(__file__).resolve().parents[1]
PACKAGE = REPO / "pytest_ponybench"


def lint_imports(root: Path) -> subprocess.CompletedProcess:
    """import-linter on the package under `root`, with the project's contracts. The package
    is found on PYTHONPATH first, so a copy is linted, not the installed one."""
    program = shutil.which("lint-imports", path=str(Path(sys.executable).parent)) or shutil.which("lint-imports")
    assert program, "import-linter is not installed: pip install -e '.[test]'"
    return subprocess.run([program, str(root / "pyproject.toml"), "--no-cache"], cwd=root,
                          capture_output=True, text=True, timeout=300,
                          env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(root), "HOME": str(root)})


def planted(tmp_path: Path, module: str, line: str) -> Path:
    """A copy of the package with `line` added at the end of `module` (a path under it)."""
    root = tmp_path / "tree"
    shutil.copytree(PACKAGE, root / "pytest_ponybench", ignore=shutil.ignore_patterns("__pycache__", "library"))
    shutil.copy(REPO / "pyproject.toml", root / "pyproject.toml")
    target = root / "pytest_ponybench" / module
    target.write_text(target.read_text() + f"\n{line}\n")
    return root


def test_the_tree_keeps_its_layers():
    done = lint_imports(REPO)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "Contracts: 3 kept, 0 broken" in done.stdout


def test_an_upward_import_is_named(tmp_path):
    # the run directory (store) reaching up to the options (run): a layer below importing one above
    root = planted(tmp_path, "store/rundir.py", "from pytest_ponybench.run import options  # planted")
    done = lint_imports(root)
    assert done.returncode == 1, done.stdout
    assert "BROKEN" in done.stdout
    assert "pytest_ponybench.store.rundir -> pytest_ponybench.run.options" in done.stdout


def test_a_cycle_inside_a_package_is_named(tmp_path):
    # the workspace importing the cell lifecycle, which imports the workspace: same layer, a
    # cycle the layers contract alone would not see; inside a function, as a cycle hidden there would be
    root = planted(tmp_path, "cell/workspace.py",
                   "def _planted():\n    from pytest_ponybench.cell import lifecycle  # planted")
    done = lint_imports(root)
    assert done.returncode == 1, done.stdout
    assert "pytest_ponybench.cell." in done.stdout and "- .workspace -> .lifecycle (1 import)" in done.stdout
