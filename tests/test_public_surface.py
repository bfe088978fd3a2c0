"""The public surface is small and named: what other plugins, conftests and task files may
import (pytest_ponybench.__all__, the check API's names, the hook names, the record fields,
the entry point and the console scripts) imports, and keeps the names it always had."""
import ast
import importlib
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest_ponybench

REPO = Path(__file__).resolve().parents[1]


def test_every_public_name_imports():
    for name in pytest_ponybench.__all__:
        assert getattr(pytest_ponybench, name) is not None, name
    with_star: dict = {}
    exec("from pytest_ponybench import *", with_star)
    assert set(pytest_ponybench.__all__) <= set(with_star)


def test_a_name_outside_the_surface_is_an_attribute_error():
    try:
        pytest_ponybench.Controller
    except AttributeError as exc:
        assert "Controller" in str(exc)
    else:
        raise AssertionError("pytest_ponybench.Controller should not be public")


def test_the_check_api_keeps_its_name_and_is_one_module():
    import pytest_ponybench.checklib as by_task_files
    import pytest_ponybench.graders as by_generated_checks
    from pytest_ponybench.scoring import checklib, graders

    assert by_task_files is checklib is pytest_ponybench.checklib
    assert by_generated_checks is graders and pytest_ponybench.assert_graders is graders.assert_graders
    # every name the check API's docstring promises a check's code (the list under "Names")
    promised = [line.split("`")[1].split("(")[0].lstrip("@") for line in checklib.__doc__.splitlines()
                if line.startswith("- `")]
    assert len(promised) >= 10
    for name in promised:
        assert hasattr(checklib, name), f"checklib's docstring promises {name}"


def test_the_hook_names_stay():
    hooks = {name for name in vars(pytest_ponybench.hookspec) if name.startswith("pytest_ponybench_")}
    assert hooks == {"pytest_ponybench_cell_record", "pytest_ponybench_agent_env", "pytest_ponybench_prove_arm",
                     "pytest_ponybench_rehearsal_script"}


def test_the_record_fields_are_public():
    fields = pytest_ponybench.RECORD_FIELDS
    for name in ("cell", "task", "arm", "model", "run", "status", "correct", "safe", "src_loc", "cost_usd"):
        assert name in fields
    assert pytest_ponybench.MEASURED | pytest_ponybench.NEVER_RAN <= pytest_ponybench.STATUSES


def test_the_entry_point_and_console_scripts_resolve():
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    assert project["entry-points"]["pytest11"] == {"ponybench": "pytest_ponybench.plugin"}
    importlib.import_module("pytest_ponybench.plugin")
    assert set(project["scripts"]) == {"ponybench-compare", "ponybench-history", "ponybench-calibrate"}
    for script, target in project["scripts"].items():
        module, _, function = target.partition(":")
        assert callable(getattr(importlib.import_module(module), function)), script
        done = subprocess.run([sys.executable, "-c", f"import sys; from {module} import {function}; "
                               f"sys.argv = ['{script}', '--help']; sys.exit({function}())"],
                              capture_output=True, text=True, timeout=120)
        assert done.returncode == 0 and "usage:" in done.stdout, (script, done.stderr)


def test_importing_the_check_api_does_not_import_the_plugin():
    # a check's process imports pytest_ponybench.checklib; the root must not pull the rest in
    done = subprocess.run([sys.executable, "-c", "import sys, pytest_ponybench.checklib; "
                           "print(sorted(m for m in sys.modules if m.startswith('pytest_ponybench.')))"],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    loaded = ast.literal_eval(done.stdout.strip())
    assert not [m for m in loaded if m.startswith(("pytest_ponybench.run", "pytest_ponybench.reports",
                                                   "pytest_ponybench.judge", "pytest_ponybench.plugin"))], loaded
