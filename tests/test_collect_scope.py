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


# --- inert until asked (issue 37): a project that only has the plugin installed ----------------

ANSIBLE_TASKS = "- name: install nginx\n  apt:\n    name: nginx\n"
# Prints, at the session's end, the plugin's registered parts: none in an inert session.
PARTS_PROBE = ("def pytest_unconfigure(config):\n"
               "    parts = sorted(n for n, _ in config.pluginmanager.list_name_plugin() if str(n).startswith('ponybench-'))\n"
               "    print('ponybench parts:', ','.join(parts) or 'none')\n")


def ansible_project(root: Path) -> Path:
    (root / "tasks").mkdir()
    (root / "tasks" / "main.yml").write_text(ANSIBLE_TASKS)
    (root / "tests").mkdir()
    (root / "tests" / "test_one.py").write_text("def test_one():\n    assert 1 + 1 == 2\n")
    (root / "conftest.py").write_text(PARTS_PROBE)
    (root / "pytest.ini").write_text("[pytest]\n")
    return root


def test_plain_pytest_in_a_project_with_an_ansible_tasks_folder_runs_its_one_test_and_nothing_else(pytester):
    ansible_project(pytester.path)
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-s")
    result.assert_outcomes(passed=1)
    assert "main.yml" not in result.stdout.str()
    assert "ponybench parts: none" in result.stdout.str()  # no session hooks, no check-strength section
    listed = pytester.runpytest_subprocess("-p", "no:cacheprovider", "--co", "-q")
    assert [line for line in listed.stdout.lines if "::" in line] == ["tests/test_one.py::test_one"]


def test_an_inert_session_imports_only_what_declaring_the_options_needs(tmp_path):
    root = ansible_project(tmp_path)
    probe = textwrap.dedent(f"""
        import sys
        sys.path.insert(0, {str(REPO)!r})
        import pytest
        code = pytest.main(["-q", "-p", "no:cacheprovider", {str(root / "tests")!r}])
        ours = sorted(m for m in sys.modules if m.startswith("pytest_ponybench"))
        print("exit", int(code), "imported", ",".join(ours), "yaml" in sys.modules and "yaml" or "")
    """)
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120, cwd=root)
    assert done.returncode == 0 and "exit 0" in done.stdout, done.stdout[-2000:] + done.stderr[-2000:]
    imported = set(done.stdout.split("imported ")[1].split()[0].split(","))
    light = {"pytest_ponybench", "pytest_ponybench.plugin", "pytest_ponybench.hookspec", "pytest_ponybench.run",
             "pytest_ponybench.run.options", "pytest_ponybench.specs", "pytest_ponybench.specs.argtypes",
             "pytest_ponybench.specs.faults", "pytest_ponybench.store", "pytest_ponybench.store.rundir"}
    assert imported <= light, f"an inert session imported {sorted(imported - light)}"


def _task_project(root: Path) -> Path:
    root = write_project(root, {"add": ADD_TASK})
    (root / "tests").mkdir()
    (root / "tests" / "test_one.py").write_text("def test_one():\n    pass\n")
    (root / "pytest.ini").write_text("[pytest]\ntestpaths = tests tasks\n")
    return root


def test_a_selftest_collects_the_references_and_the_harness_proofs_not_the_quality_gates(pytester):
    _task_project(pytester.path)
    plain = pytester.runpytest("-p", "no:cacheprovider", "--co", "-q")
    assert "tasks/add.yaml" not in plain.stdout.str()
    selftest = pytester.runpytest("-p", "no:cacheprovider", "--co", "-q", "-m", "selftest")
    ids = [line for line in selftest.stdout.lines if "::" in line]
    assert ids == ["tasks/add.yaml::selftest-good", "tasks/add.yaml::selftest-bad",
                   "tasks::harness-tree-kill", "tasks::harness-plugin-resolution"], ids
    quality = pytester.runpytest("-p", "no:cacheprovider", "--co", "-q", "-m", "ponybench_quality")
    assert [line for line in quality.stdout.lines if "::" in line] == ["tasks/add.yaml::selftest-mutants"]


PROOF_LOG = ("from pytest_ponybench.instruments import gate\n"
             "real = gate.prove_reference\n"
             "def logged(task, side):\n"
             "    with open('proved.log', 'a') as log:\n"
             "        log.write(side + '\\n')\n"
             "    return real(task, side)\n"
             "gate.prove_reference = logged\n")


def test_a_selftest_proof_that_held_is_remembered_by_the_proof_cache(pytester, monkeypatch):
    _task_project(pytester.path)
    (pytester.path / "conftest.py").write_text(PROOF_LOG)
    monkeypatch.setenv("PONYBENCH_CACHE_DIR", str(pytester.path / "cache"))
    proved = pytester.path / "proved.log"
    pytester.runpytest_subprocess("-p", "no:cacheprovider", "-m", "selftest").assert_outcomes(passed=4)
    assert sorted(proved.read_text().split()) == ["bad", "good"]
    proved.unlink()
    pytester.runpytest_subprocess("-p", "no:cacheprovider", "-m", "selftest").assert_outcomes(passed=4)
    assert not proved.exists(), "an unchanged reference was proven again"


OVERLAP_PROBE = ("import threading\n"
                 "from pytest_ponybench.instruments import gate\n"
                 "real = gate.prove_reference\n"
                 "started = {'good': threading.Event(), 'bad': threading.Event()}\n"
                 "def overlapping(task, side):\n"
                 "    started[side].set()\n"
                 "    other = started['bad' if side == 'good' else 'good'].wait(timeout=120)\n"
                 "    with open('overlap.log', 'a') as log:\n"
                 "        log.write(f'{side} {other}\\n')\n"
                 "    return real(task, side)\n"
                 "gate.prove_reference = overlapping\n")


def test_a_selftest_without_xdist_overlaps_its_proofs(pytester):
    # Each reference proof waits for the other to start: proven one after the other, the first
    # would wait in vain (and log False).
    _task_project(pytester.path)
    (pytester.path / "conftest.py").write_text(OVERLAP_PROBE)
    pytester.runpytest_subprocess("-p", "no:cacheprovider", "-m", "selftest").assert_outcomes(passed=4)
    assert sorted((pytester.path / "overlap.log").read_text().split("\n")[:2]) == ["bad True", "good True"]
