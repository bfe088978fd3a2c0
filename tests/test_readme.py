"""README and docs/ stay true: README is a short guide whose commands are CI's and which
points to every reference page; the reference's task, tag and option tables match what
ships; every relative link of README and docs/ leads to a file and heading that exist."""
import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
README = (REPO / "README.md").read_text(encoding="utf-8")
DOCS = REPO / "docs"
BENCHMARK = "pip install -e . && npm ci && pytest --ponybench --ponybench-rehearse -n 2"


def page(name: str) -> str:
    return (DOCS / name).read_text(encoding="utf-8")


def section(text: str, title: str) -> str:
    start = text.index(title)
    end = text.find("\n## ", start + len(title))
    return text[start:end if end != -1 else None]


def test_the_task_table_names_every_shipped_task_once():
    table = section(page("tasks.md"), "The shipped library").split("Task tags")[0]
    cells = [line.split("|")[2] for line in table.splitlines()
             if line.startswith("| ") and "---" not in line and not line.startswith("| kind")]
    # Task names, without the notes in parentheses.
    listed = re.findall(r"\b[a-z][a-z0-9_]+\b", re.sub(r"\([^)]*\)", "", "\n".join(cells)))
    shipped = sorted(p.stem for p in (REPO / "tasks").glob("*.yaml"))
    assert sorted(listed) == shipped


def test_the_tag_table_lists_every_task_tag_with_its_tasks():
    import yaml

    table = section(page("tasks.md"), "Task tags")
    listed = {m.group(1): sorted(t.strip() for t in m.group(2).split(","))
              for m in re.finditer(r"^\| `(\w+)` \| ([^|]+) \|$", table, re.M)}
    shipped: dict[str, list[str]] = {}
    for path in sorted((REPO / "tasks").glob("*.yaml")):
        for tag in yaml.safe_load(path.read_text())["tags"]:
            shipped.setdefault(tag, []).append(path.stem)
    assert listed == shipped


def options_table(text: str) -> tuple[set[str], set[str]]:
    """The flags (first column) and ini names (second column) of docs/options.md's table."""
    flags: set[str] = set()
    ini: set[str] = set()
    for line in section(text, "# Options").splitlines():
        cells = re.split(r"(?<!\\)\|", line)  # `good\|bad` is one cell
        if line.startswith("|") and "---" not in line and len(cells) > 3:
            flags.update(re.findall(r"`(--[a-z][a-z-]*)", cells[1]))
            ini.update(re.findall(r"`(ponybench_\w+)`", cells[2]))
    return flags, ini


def test_the_options_table_lists_exactly_the_option_table():
    from pytest_ponybench.run.options import OPTIONS

    assert options_table(page("options.md")) == ({row.flag for row in OPTIONS if row.flag},
                                                 {row.ini for row in OPTIONS if row.ini})


def test_an_option_missing_from_the_docs_or_extra_in_them_is_caught():
    text = ("# Options\n\n| option | ini | default | meaning |\n| --- | --- | --- | --- |\n"
            "| `--ponybench-rehearse-ref good\\|bad` | | good | `--not-a-flag` here |\n"
            "| `--runs N` | `ponybench_runs` | 1 | runs |\n| | `ponybench_tasks`, `ponybench_arms` | | folders |\n")
    assert options_table(text) == ({"--ponybench-rehearse-ref", "--runs"},
                                   {"ponybench_runs", "ponybench_tasks", "ponybench_arms"})


def test_the_plugin_declares_exactly_the_option_table_and_help_shows_each(pytestconfig):
    from pytest_ponybench.run.options import OPTIONS

    parser = pytestconfig._parser
    declared = {name for option in parser.getgroup("ponybench").options for name in option.names()}
    assert declared == {row.flag for row in OPTIONS if row.flag}
    assert {name for name in parser._inidict if name.startswith("ponybench_")} == {row.ini for row in OPTIONS
                                                                                    if row.ini}
    shown = parser.optparser.format_help()
    assert [row.flag for row in OPTIONS if row.flag and not re.search(rf"{row.flag}(?![\w-])", shown)] == []


@pytest.mark.parametrize("command", [BENCHMARK, "python3 -m pytest -n 2"])
def test_the_two_commands_are_stated_and_ci_runs_them(command):
    assert command in README
    assert command in (REPO / ".ci" / "run").read_text()


def test_the_readme_is_a_short_guide_that_points_to_every_reference_page():
    assert len(README.splitlines()) <= 200
    linked = set(re.findall(r"\]\(docs/([\w.-]+\.md)\)", README))
    assert sorted(p.name for p in DOCS.glob("*.md") if p.name not in linked) == []


def github_anchor(heading: str) -> str:
    """The id GitHub gives a heading: lower case, punctuation (backticks, quotes, colons)
    dropped, spaces to hyphens."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading.strip().lower())
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def without_code(text: str) -> str:
    """The Markdown outside fenced blocks and inline code, where links and headings are real."""
    text = re.sub(r"^ *(```|~~~).*?^ *\1[^\n]*$", "", text, flags=re.M | re.S)
    return re.sub(r"`[^`\n]*`", "", text)


def anchors(path: Path) -> set[str]:
    found: set[str] = set()
    body = re.sub(r"^ *(```|~~~).*?^ *\1[^\n]*$", "", path.read_text(encoding="utf-8"), flags=re.M | re.S)
    for heading in re.findall(r"^#{1,6} +(.+?) *#*$", body, re.M):
        slug = github_anchor(heading)
        n = 0
        while (slug if n == 0 else f"{slug}-{n}") in found:
            n += 1
        found.add(slug if n == 0 else f"{slug}-{n}")
    return found


def broken_links(path: Path) -> list[str]:
    broken = []
    for target in re.findall(r"\]\(([^)\s]+)\)", without_code(path.read_text(encoding="utf-8"))):
        if re.match(r"[a-z][a-z0-9+.-]*:", target):  # https:, mailto:
            continue
        file, _, anchor = target.partition("#")
        linked = (path.parent / file).resolve() if file else path
        if not linked.is_file():
            broken.append(f"{target}: no file {linked}")
        elif anchor and linked.suffix == ".md" and anchor not in anchors(linked):
            broken.append(f"{target}: no heading #{anchor} in {linked.name}")
    return broken


@pytest.mark.parametrize("name", ["README.md", *sorted(f"docs/{p.name}" for p in DOCS.glob("*.md"))])
def test_every_relative_link_leads_to_a_file_and_heading_that_exist(name):
    assert broken_links(REPO / name) == []


def test_a_broken_link_or_anchor_is_caught(tmp_path):
    (tmp_path / "other.md").write_text("# Other\n\n## What `bypassPermissions` lets an agent do\n")
    doc = tmp_path / "doc.md"
    doc.write_text("# Doc\n\n[ok](other.md#what-bypasspermissions-lets-an-agent-do) [self](#doc)\n"
                   "[web](https://example.com/x) `[code](nowhere.md)`\n"
                   "[gone](missing.md) [bad anchor](other.md#no-such-heading)\n")
    assert [b.split(":")[0] for b in broken_links(doc)] == ["missing.md", "other.md#no-such-heading"]
