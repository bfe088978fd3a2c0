"""Where the shipped task library lives, and how a project's own folders combine with it.

The library is the repository's `tasks/`, `arms/` (with `arms/plugins/`) and `fixtures/`.
From a checkout (an editable install included) it is read where it is; a built wheel or sdist
carries a copy as package data, `pytest_ponybench/library/{tasks,arms,fixtures}` (setup.py
copies it there at build time), so an installed plugin can run it from any directory.

`--ponybench-library` (ini `ponybench_library`) says how a project's own `tasks/` and `arms/`
combine with the shipped ones, folder by folder:

- `replace` (the default): the project's folder when it has one, else the shipped one. A
  plugin repository with no `tasks/` runs the shipped tasks; one with its own `tasks/` runs
  those alone (and pays for nothing it did not ask for).
- `add`: the project's folder and the shipped one; a name in both is an error naming both
  files.
- `off`: the project's folders only, as if nothing were shipped.

A shipped task's `fixture:` is looked up in the shipped `fixtures/`, a project task's in the
project's; a shipped arm's plugin path is relative to the shipped `arms/`.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from pytest_ponybench.specs.spec import SpecError

MODES = ("replace", "add", "off")
DEFAULT_MODE = "replace"
PACKAGE_LIBRARY = Path(__file__).resolve().parents[1] / "library"  # pytest_ponybench/library
TASK_SUFFIXES = (".yaml", ".yml")


def shipped_root() -> Path | None:
    """The folder holding the shipped tasks/, arms/ and fixtures/: the package data of an
    installed wheel, else the checkout this package was imported from, else None."""
    if (PACKAGE_LIBRARY / "tasks").is_dir():
        return PACKAGE_LIBRARY
    checkout = PACKAGE_LIBRARY.parents[1]
    if (checkout / "tasks").is_dir() and (checkout / "pyproject.toml").is_file():
        return checkout
    return None


LIBRARY_FOLDERS = ("tasks", "arms", "fixtures")


def answer_key_folders(project: Path) -> list[Path]:
    """The folders that hold task files (their checks and good references), arms and fixtures:
    the shipped library (the installed package's data, or the checkout) and `project`'s own.
    Neither sandbox shows them: not the agent's, not the one its code runs in inside a check."""
    folders = [PACKAGE_LIBRARY]
    checkout = Path(__file__).resolve().parents[2]  # an editable install's: the library is read there
    for root in dict.fromkeys([checkout, Path(project)]):
        folders += [root / name for name in LIBRARY_FOLDERS]
    return [folder.resolve() for folder in folders if folder.is_dir()]


@dataclass(frozen=True)
class TaskFolder:
    """A folder of task files and the fixtures folder its tasks' `fixture:` fields name."""

    tasks: Path
    fixtures: Path
    shipped: bool


def _combine(own: list, shipped: list, mode: str, same) -> list:
    if shipped and own and same(own[0], shipped[0]):
        shipped = []  # run from the checkout itself: its folders are the shipped ones
    if mode == "replace":
        return own or shipped
    if mode == "add":
        return own + shipped
    return own


def task_folders(project_tasks: Path, project_fixtures: Path, mode: str,
                 root: Path | None = None) -> list[TaskFolder]:
    """The task folders a benchmark run collects, the project's first."""
    root = shipped_root() if root is None else root
    own = [TaskFolder(project_tasks.resolve(), project_fixtures.resolve(), False)] if project_tasks.is_dir() else []
    shipped = ([TaskFolder((root / "tasks").resolve(), (root / "fixtures").resolve(), True)]
               if root is not None and (root / "tasks").is_dir() and mode != "off" else [])
    return _combine(own, shipped, mode, lambda a, b: a.tasks == b.tasks)


def arm_folders(project_arms: Path, mode: str, root: Path | None = None) -> list[Path]:
    """The arm folders of a run, the project's first."""
    root = shipped_root() if root is None else root
    own = [project_arms.resolve()] if project_arms.is_dir() else []
    shipped = [(root / "arms").resolve()] if root is not None and (root / "arms").is_dir() and mode != "off" else []
    return _combine(own, shipped, mode, lambda a, b: a == b)


def task_files(folder: Path) -> list[Path]:
    return sorted(p for p in folder.iterdir() if p.suffix in TASK_SUFFIXES and p.is_file())


def check_clashes(kind: str, files: list[Path]) -> None:
    """Two files of one name (a project task named like a shipped one) would make two items
    with one cell id: refuse, naming both."""
    seen: dict[str, Path] = {}
    for path in files:
        if path.stem in seen:
            raise SpecError(
                f"{kind} '{path.stem}' is defined twice: {seen[path.stem]} and {path}; rename one, "
                f"or pass --ponybench-library replace to use the project's {kind}s instead of the shipped ones")
        seen[path.stem] = path


def all_task_files(folders: list[TaskFolder]) -> list[tuple[Path, Path]]:
    """Every task file of the run with the fixtures folder it reads, checked for clashes."""
    pairs = [(path, folder.fixtures) for folder in folders for path in task_files(folder.tasks)]
    check_clashes("task", [p for p, _ in pairs])
    return pairs
