"""What a benchmark run collects and imports: only the tasks folder, and nothing heavy in a
process that runs cells."""
from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

from support.benchproc import ADD_TASK, bench_args, fake_env, run, write_project
from support.ponyproject import only_run_dir

REPO = Path(__file__).resolve().parents[1]
TRAP = "raise RuntimeError('tests/ was imported by a benchmark run')\n"


def project_with_tests(tmp_path: Path) -> Path:
    root = write_project(tmp_path, {"add": ADD_TASK})
    (root / "pytest.ini").write_text("[pytest]\ntestpaths = tests tasks\n")
    (root / "tests").mkdir()
    (root / "tests" / "conftest.py").write_text(TRAP)
    (root / "tests" / "test_trap.py").write_text(TRAP + "def test_x():\n    pass\n")
    return root


def test_a_benchmark_run_with_no_paths_collects_the_tasks_folder_only(tmp_path):
    root = project_with_tests(tmp_path)
    listed = run(root, bench_args(root, "--runs=2", "--co", "-q"))
    assert listed.returncode == 0, listed.stdout[-3000:] + listed.stderr[-3000:]
    assert "tests/ was imported" not in listed.stdout + listed.stderr
    assert "add__baseline__haiku__0" in listed.stdout and "add__baseline__haiku__1" in listed.stdout
    # The same project without --ponybench collects its testpaths, the trap included: the
    # scope above is the plugin's doing, not the project's.
    plain = run(root, ["-p", "no:cacheprovider", "--co", "-q"])
    assert plain.returncode != 0 and "tests/ was imported" in plain.stdout + plain.stderr


def test_paths_given_on_the_command_line_are_kept(tmp_path):
    root = project_with_tests(tmp_path)
    listed = run(root, bench_args(root, "--co", "-q", "tasks/add.yaml"))
    assert listed.returncode == 0, listed.stdout[-3000:]
    assert "add__baseline__haiku__0" in listed.stdout


def test_running_a_cell_imports_no_numerical_or_plotting_library(tmp_path):
    # What an xdist worker imports to run cells: the plugin, a cell, its checks and metrics.
    probe = textwrap.dedent(f"""
        import sys
        sys.path.insert(0, {str(REPO)!r})
        import pytest_ponybench.plugin, pytest_ponybench.cell.lifecycle, pytest_ponybench.run.collect
        from pytest_ponybench.scoring import checks
        from pathlib import Path
        assert checks.run_check("assert 1 + 1 == 2", Path({str(tmp_path)!r}), "correct", None, 30).ok
        heavy = sorted(m for m in ("numpy", "scipy", "matplotlib", "pandas") if m in sys.modules)
        print(",".join(heavy) or "none")
    """)
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip() == "none"


def plot_images(run_dir: Path) -> int:
    return (run_dir / "report.html").read_text(encoding="utf-8").count('<img class="plot"')


def test_plots_are_drawn_only_when_asked_for(tmp_path):
    # Drawing them imports matplotlib and costs seconds at the end of every session.
    import matplotlib  # noqa: F401  (the test extra has it: drawing must work when asked for)

    root = write_project(tmp_path, {"add": ADD_TASK})
    env = fake_env(root, write={"add.py": "def add(a, b):\n    return a + b\n"})
    plain = run(root, bench_args(root, "-q"), env=env)
    assert plain.returncode == 0, plain.stdout[-3000:]
    first = only_run_dir(root)
    page = (first / "report.html").read_text(encoding="utf-8")
    assert plot_images(first) == 0 and "--ponybench-plots" in page
    asked = run(root, bench_args(root, "-q", "--ponybench-plots", f"--ponybench-rescore={first}"), env=env)
    assert asked.returncode == 0, asked.stdout[-3000:]
    assert plot_images(first) == 3
