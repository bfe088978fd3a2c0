"""README stays true: its task table and its options table match what ships."""
import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
README = (REPO / "README.md").read_text(encoding="utf-8")


def section(title: str) -> str:
    start = README.index(title)
    end = README.find("\n## ", start + len(title))
    return README[start:end if end != -1 else None]


def test_the_task_table_names_every_shipped_task_once():
    table = section("The shipped library").split("Task tags")[0]
    cells = [line.split("|")[2] for line in table.splitlines()
             if line.startswith("| ") and "---" not in line and not line.startswith("| kind")]
    # Task names, without the notes in parentheses.
    listed = re.findall(r"\b[a-z][a-z0-9_]+\b", re.sub(r"\([^)]*\)", "", "\n".join(cells)))
    shipped = sorted(p.stem for p in (REPO / "tasks").glob("*.yaml"))
    assert sorted(listed) == shipped


def test_the_tag_table_lists_every_task_tag_with_its_tasks():
    import yaml

    table = section("Task tags")
    listed = {m.group(1): sorted(t.strip() for t in m.group(2).split(","))
              for m in re.finditer(r"^\| `(\w+)` \| ([^|]+) \|$", table, re.M)}
    shipped: dict[str, list[str]] = {}
    for path in sorted((REPO / "tasks").glob("*.yaml")):
        for tag in yaml.safe_load(path.read_text())["tags"]:
            shipped.setdefault(tag, []).append(path.stem)
    assert listed == shipped


def test_every_option_is_in_the_options_table(pytestconfig):
    table = section("## Options")
    group = pytestconfig._parser.getgroup("ponybench")
    flags = [name for option in group.options for name in option.names() if name.startswith("--")]
    assert flags, "the ponybench option group is empty"
    missing = [flag for flag in flags if f"`{flag}" not in table]
    assert missing == []
    ini = [name for name in pytestconfig._parser._inidict if name.startswith("ponybench_")]
    assert [name for name in ini if name not in table] == []


@pytest.mark.parametrize("command", ["pytest --ponybench --ponybench-rehearse -n 2", "python3 -m pytest -n 2"])
def test_the_two_commands_are_stated_and_ci_runs_the_test_command(command):
    assert command in README
    if "--ponybench" not in command:
        assert command in (REPO / ".ci" / "run").read_text()
