"""The shipped library (library.py): where it is found, how a project's own tasks/ and arms/
combine with it (--ponybench-library replace|add|off), name clashes, and collecting it from a
directory that holds nothing of it."""
from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from pytest_ponybench.specs import library
from pytest_ponybench.specs.spec import SpecError
from support.benchproc import ADD_TASK, QUIET, run, write_project

REPO = Path(__file__).resolve().parents[1]
SHIPPED_TASKS = sorted(p.stem for p in (REPO / "tasks").glob("*.yaml"))
SHIPPED_ARMS = sorted(p.stem for p in (REPO / "arms").glob("*.yaml"))


def shipped(tmp_path: Path) -> Path:
    root = tmp_path / "shipped"
    for folder in ("tasks", "arms", "fixtures"):
        (root / folder).mkdir(parents=True)
    (root / "tasks" / "lib_task.yaml").write_text("prompt: p\nopen: true\n")
    (root / "arms" / "baseline.yaml").write_text("")
    return root


def test_a_checkout_is_its_own_shipped_library():
    assert library.shipped_root() == REPO


@pytest.mark.parametrize("mode, own, expected", [
    ("replace", True, ["project"]),
    ("replace", False, ["shipped"]),
    ("add", True, ["project", "shipped"]),
    ("add", False, ["shipped"]),
    ("off", True, ["project"]),
    ("off", False, []),
])
def test_each_mode_combines_the_project_folders_with_the_shipped_ones(tmp_path, mode, own, expected):
    root = shipped(tmp_path)
    project = tmp_path / "project"
    if own:
        (project / "tasks").mkdir(parents=True)
        (project / "arms").mkdir(parents=True)
    folders = library.task_folders(project / "tasks", project / "fixtures", mode, root=root)
    assert ["shipped" if f.shipped else "project" for f in folders] == expected
    # A shipped task's fixtures are the shipped ones, a project task's the project's.
    assert all(f.fixtures == ((root if f.shipped else project) / "fixtures").resolve() for f in folders)
    arms = library.arm_folders(project / "arms", mode, root=root)
    assert ["shipped" if a == (root / "arms").resolve() else "project" for a in arms] == expected


def test_the_checkout_run_from_itself_counts_its_folders_once(tmp_path):
    folders = library.task_folders(REPO / "tasks", REPO / "fixtures", "add", root=REPO)
    assert len(folders) == 1 and folders[0].tasks == (REPO / "tasks").resolve()


def test_a_name_in_both_is_an_error_naming_both_files(tmp_path):
    root = shipped(tmp_path)
    (tmp_path / "project" / "tasks").mkdir(parents=True)
    mine = tmp_path / "project" / "tasks" / "lib_task.yaml"
    mine.write_text("prompt: q\nopen: true\n")
    folders = library.task_folders(tmp_path / "project" / "tasks", tmp_path / "project" / "fixtures", "add", root=root)
    with pytest.raises(SpecError) as caught:
        library.all_task_files(folders)
    assert str(caught.value) == (
        f"task 'lib_task' is defined twice: {mine.resolve()} and {(root / 'tasks' / 'lib_task.yaml').resolve()}; "
        f"rename one, or pass --ponybench-library replace to use the project's tasks instead of the shipped ones")


def collected_cells(stdout: str) -> list[str]:
    return re.findall(r"::(\w[\w.-]*__[\w.-]+__\w+__\d+)", stdout)


def test_an_empty_directory_collects_the_shipped_library(tmp_path):
    done = run(tmp_path, ["--ponybench", "--co", "-q", *QUIET])
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    cells = collected_cells(done.stdout)
    assert sorted({c.split("__")[0] for c in cells}) == SHIPPED_TASKS
    assert sorted({c.split("__")[1] for c in cells}) == SHIPPED_ARMS
    assert len(cells) == len(SHIPPED_TASKS) * len(SHIPPED_ARMS)
    # The shipped folder, outside the rootdir, is an initial path: its files are named from
    # it, the same in every process (xdist workers collect the same ids).
    assert "\ncsv_total.yaml::csv_total__baseline__haiku__0\n" in "\n" + done.stdout


PROJECT_HOOKS = """
def pytest_ponybench_cell_record(cell, record):
    record["mine"] = 1


def pytest_collection_finish(session):
    loaded = [impl.plugin_name for impl in session.config.hook.pytest_ponybench_cell_record.get_hookimpls()]
    print("project cell_record hooks:", [name for name in loaded if name.endswith("conftest.py")])
"""


@pytest.mark.parametrize("layout", ["empty", "plugin evals only"])
def test_a_project_without_tasks_loads_its_own_conftest(tmp_path, layout):
    # The shipped library (or a plugin's evals/ elsewhere) is what the run collects; the
    # project's conftest.py at the rootdir must load all the same, or its hooks are ignored
    # without a word. tests/conftest.py stays unread, as it is when tasks/ is collected.
    root = tmp_path / "project"
    (root / "tests").mkdir(parents=True)
    (root / "conftest.py").write_text(PROJECT_HOOKS)
    (root / "tests" / "conftest.py").write_text("raise SystemExit('tests/conftest.py was imported')\n")
    extra = []
    if layout == "plugin evals only":
        plugin = tmp_path / "plug"
        (plugin / ".claude-plugin").mkdir(parents=True)
        (plugin / ".claude-plugin" / "plugin.json").write_text('{"name": "plug"}')
        (plugin / "skills" / "terse").mkdir(parents=True)
        (plugin / "skills" / "terse" / "SKILL.md").write_text("---\nname: terse\ndescription: short\n---\nBe terse.\n")
        (plugin / "evals" / "note").mkdir(parents=True)
        (plugin / "evals" / "note" / "case.yaml").write_text(
            "prompt: Write a note.\ngraders:\n  - {type: file_exists, path: '*.md'}\n")
        extra = [f"--ponybench-plugin={plugin}", "--ponybench-library=off"]
    done = run(root, ["--ponybench", "--co", "-q", *extra, *QUIET])
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    assert f"project cell_record hooks: ['{root / 'conftest.py'}']" in done.stdout, done.stdout[-3000:]


def test_a_project_with_its_own_tasks_replaces_the_shipped_ones_or_adds_to_them(tmp_path):
    root = write_project(tmp_path / "p", {"add": ADD_TASK})
    replaced = run(root, ["--ponybench", "--co", "-q", *QUIET])
    assert replaced.returncode == 0, replaced.stdout[-3000:]
    assert collected_cells(replaced.stdout) == ["add__baseline__haiku__0"]
    # Its own baseline arm and the shipped one cannot both be added: one name, two files.
    clash = run(root, ["--ponybench", "--co", "-q", "--ponybench-library", "add", *QUIET])
    assert clash.returncode == pytest.ExitCode.USAGE_ERROR
    assert (f"arm 'baseline' is defined twice: {(root / 'arms' / 'baseline.yaml').resolve()} and "
            f"{REPO / 'arms' / 'baseline.yaml'}") in clash.stderr
    (root / "arms" / "baseline.yaml").unlink()
    (root / "arms").rmdir()
    added = run(root, ["--ponybench", "--co", "-q", "--ponybench-library", "add", *QUIET])
    assert added.returncode == 0, added.stdout[-3000:]
    tasks = {c.split("__")[0] for c in collected_cells(added.stdout)}
    assert tasks == {"add", *SHIPPED_TASKS}
    assert {c.split("__")[1] for c in collected_cells(added.stdout)} == set(SHIPPED_ARMS)
    assert "tasks/add.yaml::add__yagni__haiku__0" in added.stdout


def test_a_clash_in_add_mode_stops_the_run_naming_both_files(tmp_path):
    root = write_project(tmp_path / "p", {"csv_total": ADD_TASK})
    (root / "arms" / "baseline.yaml").unlink()  # the shipped arms, so only the task clashes
    (root / "pytest.ini").write_text("[pytest]\nponybench_library = add\n")
    done = run(root, ["--ponybench", "--co", "-q", *QUIET])
    assert done.returncode != 0
    out = done.stdout + done.stderr
    assert f"task 'csv_total' is defined twice: {root / 'tasks' / 'csv_total.yaml'} and {REPO / 'tasks' / 'csv_total.yaml'}" \
        in out, out[-2000:]


def test_off_leaves_an_empty_directory_with_no_arms_and_bad_values_are_named(tmp_path):
    done = run(tmp_path, ["--ponybench", "--co", "-q", "--ponybench-library=off", *QUIET])
    assert done.returncode == pytest.ExitCode.USAGE_ERROR
    assert "no arms:" in done.stderr and "no --ponybench-plugin was given" in done.stderr
    bad = run(tmp_path, ["--ponybench", "--ponybench-library=sometimes", *QUIET])
    assert bad.returncode == pytest.ExitCode.USAGE_ERROR
    assert "argument --ponybench-library: 'sometimes' is not one of replace, add, off" in bad.stderr
    (tmp_path / "pytest.ini").write_text("[pytest]\nponybench_library = both\n")
    ini = run(tmp_path, ["--ponybench", *QUIET])
    assert ini.returncode == pytest.ExitCode.USAGE_ERROR
    assert "ini option ponybench_library = 'both': 'both' is not one of replace, add, off" in ini.stderr


def test_a_shipped_arm_finds_its_plugin_beside_it_wherever_the_run_starts(tmp_path):
    from pytest_ponybench.specs.spec import load_arm, resolve_plugin_dir

    arm = load_arm(REPO / "arms" / "small-diff.yaml")
    found = resolve_plugin_dir(arm, tmp_path / "arms", tmp_path / "no-cache", {})
    assert found == str((REPO / "arms" / "plugins" / "small-diff").resolve())
    assert yaml.safe_load((REPO / "arms" / "small-diff.yaml").read_text())["plugin"] == "plugins/small-diff"
