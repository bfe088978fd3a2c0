"""`claude plugin eval` suites imported as tasks (plugin_evals.py, graders.py), and arms made
from plugin folders (plugin_arm.py).

The suites here are written in that format: one folder per case under the plugin's evals/,
prompt.md and/or case.yaml, graders as graders/<name>.md files or case.yaml entries. The last
test runs a suite in rehearsal through the real CLI: one case where every deterministic
grader kind passes, and one case per kind where exactly that grader fails.
"""
from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from pytest_ponybench.run import plugin_evals
from pytest_ponybench.scoring import graders
from pytest_ponybench.specs import plugin_arm
from pytest_ponybench.specs.spec import SpecError
from support.benchproc import QUIET, bench_args, fake_env, results, run

REPO = Path(__file__).resolve().parents[1]
HOOK_TEXT = "tidy-plugin is on: keep every function under twenty lines."


def write_plugin(root: Path, name: str = "tidy-plugin", hook: str = "script", skills=("tidy",)) -> Path:
    """A plugin folder: a manifest, a SessionStart hook (its text in a script, inline in the
    command, or none), and skills."""
    (root / ".claude-plugin").mkdir(parents=True, exist_ok=True)
    (root / ".claude-plugin" / "plugin.json").write_text(json.dumps({"name": name, "version": "0.1.0"}))
    context = json.dumps({"hookSpecificOutput": {"hookEventName": "SessionStart", "additionalContext": HOOK_TEXT}})
    if hook == "script":
        (root / "hooks").mkdir(exist_ok=True)
        (root / "hooks" / "start.sh").write_text(f"#!/bin/sh\ncat <<'JSON'\n{context}\nJSON\n")
        command = "sh ${CLAUDE_PLUGIN_ROOT}/hooks/start.sh"
    elif hook == "inline":
        command = f"printf '%s\\n' '{context}'"
    else:
        command = None
    if command:
        (root / "hooks").mkdir(exist_ok=True)
        (root / "hooks" / "hooks.json").write_text(json.dumps(
            {"hooks": {"SessionStart": [{"hooks": [{"type": "command", "command": command}]}]}}))
    for skill in skills:
        (root / "skills" / skill).mkdir(parents=True, exist_ok=True)
        (root / "skills" / skill / "SKILL.md").write_text(f"---\nname: {skill}\ndescription: d\n---\nBe {skill}.\n")
    return root


def write_case(evals: Path, name: str, prompt: str | None = "Write the note.", case: dict | None = None,
               grader_files: dict[str, dict | str] | None = None) -> Path:
    folder = evals / name
    (folder / "graders").mkdir(parents=True, exist_ok=True)
    if prompt is not None:
        (folder / "prompt.md").write_text(f"---\nmax_turns: 5\n---\n{prompt}\n")
    if case is not None:
        (folder / "case.yaml").write_text(yaml.safe_dump(case, sort_keys=False))
    for gname, grader in (grader_files or {}).items():
        if isinstance(grader, str):
            (folder / "graders" / f"{gname}.md").write_text(grader)
        else:
            (folder / "graders" / f"{gname}.md").write_text(f"---\n{yaml.safe_dump(grader)}---\n")
    return folder


# --------------------------------------------------------------------------- plugin arms


@pytest.mark.parametrize("hook", ["script", "inline"])
def test_a_plugin_arm_is_proven_by_what_its_session_start_hook_prints(tmp_path, hook):
    arm = plugin_arm.plugin_arm(write_plugin(tmp_path / "p", hook=hook))
    assert arm.name == "tidy-plugin" and arm.kind == "plugin" and arm.plugin == str((tmp_path / "p").resolve())
    assert arm.proof == (HOOK_TEXT,)


def test_a_plugin_whose_hook_prints_nothing_literal_is_proven_by_its_skill_names(tmp_path):
    plugin = write_plugin(tmp_path / "p", hook="none", skills=("tidy", "short"))
    assert plugin_arm.plugin_arm(plugin).proof == ("tidy-plugin:short", "tidy-plugin:tidy")
    # A context built at run time: only its literal stretches can be looked for.
    (plugin / "hooks").mkdir()
    (plugin / "hooks" / "hooks.json").write_text(json.dumps({"hooks": {"SessionStart": [{"hooks": [
        {"type": "command", "command": "echo '{\"additionalContext\": \"branch $BRANCH is the one you are working on\"}'"}]}]}}))
    assert plugin_arm.plugin_arm(plugin).proof == ("is the one you are working on",)


def test_a_plugin_with_nothing_to_prove_it_and_a_folder_that_is_no_plugin_are_refused(tmp_path):
    with pytest.raises(SpecError, match="nothing could prove"):
        plugin_arm.plugin_arm(write_plugin(tmp_path / "p", hook="none", skills=()))
    with pytest.raises(SpecError, match=r"not a Claude Code plugin \(no .claude-plugin/plugin.json\)"):
        plugin_arm.plugin_arm(tmp_path)


def test_the_shipped_small_diff_plugin_yields_the_proof_its_yaml_arm_declares():
    arm = plugin_arm.plugin_arm(REPO / "arms" / "plugins" / "small-diff")
    declared = yaml.safe_load((REPO / "arms" / "small-diff.yaml").read_text())["proof"]
    assert all(any(text in found for found in arm.proof) for text in declared), arm.proof


def test_ponybench_plugin_naming_no_plugin_is_an_option_error(tmp_path):
    done = run(tmp_path, ["--ponybench", f"--ponybench-plugin={tmp_path}", *QUIET])
    assert done.returncode == pytest.ExitCode.USAGE_ERROR
    assert f"--ponybench-plugin: {tmp_path} is not a Claude Code plugin: it has no .claude-plugin/plugin.json" \
        in done.stderr


def hooks_json(root: Path, command: str, event: str = "SessionStart") -> None:
    (root / "hooks").mkdir(exist_ok=True)
    (root / "hooks" / "hooks.json").write_text(json.dumps(
        {"hooks": {event: [{"hooks": [{"type": "command", "command": command}]}]}}))


def test_a_sound_plugin_has_no_problem(tmp_path):
    plugin = write_plugin(tmp_path / "p")
    (plugin / "hooks" / "run.sh").write_text("#!/bin/sh\necho hi\n")
    (plugin / "hooks" / "run.sh").chmod(0o755)
    hooks_json(plugin, "${CLAUDE_PLUGIN_ROOT}/hooks/run.sh --quiet", event="PreToolUse")
    assert plugin_arm.plugin_problems(plugin) == []
    assert plugin_arm.plugin_problems(write_plugin(tmp_path / "q")) == []  # sh script.sh: no +x needed


@pytest.mark.parametrize("breakage, problem", [
    ("no-name", '.claude-plugin/plugin.json: no "name": the CLI does not load a plugin without one, so every cell '
                'of its arm would run without it; add "name": "p"'),
    ("not-executable", "hooks/start.sh: not executable, so the SessionStart hook of {root}/hooks/hooks.json fails "
                       "(Permission denied); run chmod +x on it, or start the command with its interpreter"),
    ("missing-script", "hooks/hooks.json: the SessionStart hook runs {root}/hooks/gone.sh, which does not exist in the plugin"),
    ("bad-hooks-json", "hooks/hooks.json: not valid JSON"),
])
def test_a_broken_plugin_is_one_sentence_naming_the_file(tmp_path, breakage, problem):
    plugin = write_plugin(tmp_path / "p")
    root = plugin.resolve()
    if breakage == "no-name":
        (plugin / ".claude-plugin" / "plugin.json").write_text(json.dumps({"version": "1.0.0"}))
    elif breakage == "not-executable":
        hooks_json(plugin, "${CLAUDE_PLUGIN_ROOT}/hooks/start.sh")
    elif breakage == "missing-script":
        hooks_json(plugin, "bash ${CLAUDE_PLUGIN_ROOT}/hooks/gone.sh")
    else:
        (plugin / "hooks" / "hooks.json").write_text("{not json")
    (found,) = plugin_arm.plugin_problems(plugin)
    assert found.startswith(str(root / problem.split(":")[0])), found
    assert problem.format(root=root).split(":", 1)[1] in found, found


def test_a_plugin_without_a_name_stops_the_run_before_its_first_cell(tmp_path):
    plugin = write_plugin(tmp_path / "p")
    (plugin / ".claude-plugin" / "plugin.json").write_text(json.dumps({"version": "1.0.0"}))
    env = fake_env(tmp_path)
    done = run(tmp_path, bench_args(tmp_path, f"--ponybench-plugin={plugin}"), env)
    assert done.returncode == pytest.ExitCode.USAGE_ERROR, done.stdout[-2000:]
    assert f'{plugin.resolve() / ".claude-plugin" / "plugin.json"}: no "name"' in done.stderr
    assert not (tmp_path / "calls.jsonl").exists() and not (tmp_path / "runs").exists()


def test_a_yaml_arm_whose_hook_script_cannot_run_stops_the_run_before_its_first_cell(tmp_path):
    plugin = write_plugin(tmp_path / "arms" / "plugins" / "tidy")
    hooks_json(plugin, "${CLAUDE_PLUGIN_ROOT}/hooks/start.sh")  # run directly, without +x
    (tmp_path / "arms" / "tidy.yaml").write_text(f"plugin: plugins/tidy\nproof: [{json.dumps(HOOK_TEXT)}]\n")
    (tmp_path / "arms" / "baseline.yaml").write_text("description: as it comes\n")
    done = run(tmp_path, bench_args(tmp_path, "-n", "2"), fake_env(tmp_path))
    assert done.returncode == pytest.ExitCode.USAGE_ERROR, done.stdout[-2000:]
    assert "a plugin of this run is broken; no cell was started:" in done.stderr
    assert f"arm 'tidy': {plugin.resolve() / 'hooks' / 'start.sh'}: not executable" in done.stderr
    assert not (tmp_path / "calls.jsonl").exists()


# --------------------------------------------------------------------------- graders, unit


def transcript(path: Path, workspace: Path, calls: list[tuple[str, dict]], answer: str) -> Path:
    lines = [{"type": "system", "subtype": "init", "cwd": str(workspace)}]
    for i, (name, data) in enumerate(calls):
        lines.append({"type": "assistant", "message": {"id": f"m{i}", "content": [
            {"type": "tool_use", "id": f"t{i}", "name": name, "input": data}]}})
    lines.append({"type": "assistant", "message": {"id": "last", "content": [{"type": "text", "text": answer}]}})
    lines.append({"type": "result", "result": answer})
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    return path


@pytest.fixture
def evidence(tmp_path):
    ws = tmp_path / "ws"
    (ws / "src").mkdir(parents=True)
    (ws / "src" / "slug.py").write_text("def slugify(s):\n    return s.lower()\n")
    (ws / "seeded.txt").write_text("seeded\n")
    calls = [("Read", {"file_path": str(ws / "seeded.txt")}),
             ("Write", {"file_path": str(ws / "src" / "slug.py"), "content": "..."}),
             ("Write", {"file_path": str(ws / "gone.py"), "content": "..."})]
    return graders.evidence(ws, transcript(tmp_path / "t.jsonl", ws, calls, "Slugify is DONE."))


@pytest.mark.parametrize("grader, passes", [
    ({"type": "regex", "pattern": "done", "flags": "i"}, True),
    ({"type": "regex", "pattern": "done"}, False),
    ({"type": "regex", "pattern": "(?<verb>Slug)ify"}, True),  # a JavaScript named group
    ({"type": "regex", "pattern": "DONE", "match": "not_contains"}, False),
    ({"type": "regex", "pattern": '"name": "Write"', "match": "count:2", "target": "trace"}, True),
    ({"type": "regex", "pattern": '"name": "Write"', "match": "count:3", "target": "trace"}, False),
    ({"type": "regex", "pattern": r"^def slugify", "flags": "m", "target": {"source": "file", "path": "src/slug.py"}}, True),
    ({"type": "regex", "pattern": "x", "target": {"source": "file", "path": "absent.py"}}, False),
    ({"type": "regex", "pattern": "seeded", "target": "files"}, True),
    ({"type": "tool_used", "tool": "Write"}, True),
    ({"type": "tool_used", "tool": "Write", "max": 1}, False),
    ({"type": "tool_used", "tool": "Write", "input_match": r"slug\.py", "min": 1, "max": 1}, True),
    ({"type": "tool_used", "tool": "Edit", "min": 0, "max": 0}, True),
    # Only a max: min is 0, as a user means it (`max: 0` alone forbids the tool).
    ({"type": "tool_used", "tool": "Edit", "max": 0}, True),
    ({"type": "tool_used", "tool": "Write", "max": 0}, False),
    ({"type": "tool_used", "tool": "Write", "max": 2}, True),
    ({"type": "tool_order", "before": "Read", "after": "Write"}, True),
    ({"type": "tool_order", "before": {"tool": "Write", "input_match": "gone"},
      "after": {"tool": "Write", "input_match": "slug"}}, False),
    ({"type": "tool_order", "before": "Read", "after": "Edit"}, False),  # never happened
    ({"type": "file_exists", "path": "src/*.py"}, True),
    ({"type": "file_exists", "path": "gone.py"}, False),  # written, but no longer there
    ({"type": "file_exists", "path": "seeded.txt"}, False),  # there, but not the agent's
    ({"type": "file_exists", "path": "*.exe", "exists": False}, True),
    ({"type": "file_exists", "path": "src/slug.py", "exists": False}, False),
])
def test_each_deterministic_grader_passes_and_fails_where_it_should(evidence, grader, passes):
    graders.validate(grader)
    ok, reason = graders.grade(grader, evidence)
    assert ok is passes, reason
    assert reason


@pytest.mark.parametrize("grader, problem", [
    ({"type": "rubric"}, "type 'rubric' is not a grader kind"),
    ({"type": "regex"}, "a regex grader needs a 'pattern'"),
    ({"type": "regex", "pattern": "("}, "is not a valid regular expression"),
    ({"type": "regex", "pattern": "x", "match": "some"}, "must be contains, not_contains or count:N"),
    ({"type": "regex", "pattern": "x", "target": "diff"}, "target 'diff' must be"),
    ({"type": "tool_used"}, "needs a 'tool'"),
    ({"type": "tool_used", "tool": "Bash", "max": -1}, "'max' must be a whole number"),
    ({"type": "tool_used", "tool": "Bash", "min": 2, "max": 1}, "'min' 2 is more than 'max' 1"),
    ({"type": "tool_order", "before": "Read"}, "'after' must be a tool name"),
    ({"type": "file_exists"}, "needs a 'path'"),
])
def test_a_malformed_grader_is_refused_with_what_is_wrong(grader, problem):
    with pytest.raises(graders.GraderError, match=problem):
        graders.validate(grader)


# --------------------------------------------------------------------------- importing a suite


def test_a_case_becomes_a_task_named_like_its_folder_with_its_setup_and_judged_graders_listed(tmp_path):
    evals = tmp_path / "evals"
    folder = write_case(evals / "group", "slug-case", prompt="Write slugify in src/slug.py.",
                        case={"files": {"src/__init__.py": ""}, "tags": ["slugs", "not an identifier"],
                              "graders": [{"type": "llm", "name": "quality"}, {"type": "tool_used", "tool": "Write"}]},
                        grader_files={"pattern-in-body": "---\ntype: regex\ntarget: {source: file, path: src/slug.py}\n---\ndef slugify\n",
                                      "against-reference": {"type": "baseline", "baseline_file": "ref.jsonl"}})
    (folder / "files" / "docs").mkdir(parents=True)
    (folder / "files" / "docs" / "README.md").write_text("# slugs\n")
    (case,) = plugin_evals.load_suite(tmp_path, "tidy-plugin")
    task = case.task
    assert task.name == "slug-case" and task.prompt == "Write slugify in src/slug.py."
    assert task.seed == {"docs/README.md": "# slugs\n", "src/__init__.py": ""}
    assert task.tags == ("plugin_eval", "slugs") and task.kind == "surgical" and not task.gated
    assert case.not_run == ("against-reference (baseline)", "quality (llm)")
    assert "not run (judged): against-reference (baseline), quality (llm)" in task.description
    assert "not imported: max_turns" in task.description and case.setup_not_run == ()
    (folder / "scaffold.sh").write_text("git init\n")
    (folder / "case.yaml").write_text(yaml.safe_dump({**yaml.safe_load((folder / "case.yaml").read_text()),
                                                     "context": {"add_dirs": ["../shared"]}}))
    (case,) = plugin_evals.load_suite(tmp_path, "tidy-plugin")
    assert case.setup_not_run == ("context", "scaffold.sh")
    suites = plugin_evals.EvalSuites()
    suites.add([case], {})
    assert "slug-case: not imported, the agent starts without it: context, scaffold.sh" in suites.not_run_lines()
    runnable = json.loads(task.checks["correct"].split("assert_graders(", 1)[1].rsplit(")", 1)[0].strip("'"))
    assert [(g["name"], g["type"]) for g in runnable] == [("pattern-in-body", "regex"), ("tool_used-2", "tool_used")]
    assert runnable[0]["pattern"] == "def slugify"


@pytest.mark.parametrize("setup, problem", [
    (lambda e: write_case(e, "no-grader"), r"no-grader: the case has no grader"),
    (lambda e: write_case(e, "bad", grader_files={"g": {"type": "regex", "pattern": "("}}),
     r"graders/g.md: grader 'g': pattern '\(' is not a valid regular expression"),
    (lambda e: write_case(e, "bad", prompt=None, case={"graders": [{"type": "tool_used", "tool": "Read"}]}),
     r"case.yaml: no prompt: write it in prompt.md or as 'prompt' in case.yaml"),
    (lambda e: write_case(e, "two__parts", grader_files={"g": {"type": "tool_used", "tool": "Read"}}),
     r"the case name 'two__parts' must be"),
    (lambda e: write_case(e, "bad", case={"graders": [{"type": "judge"}]}),
     r"case.yaml graders\[1\]: grader 'judge-1': type 'judge' is not a grader kind"),
])
def test_a_broken_case_names_its_file_and_what_to_fix(tmp_path, setup, problem):
    setup(tmp_path / "evals")
    with pytest.raises(SpecError, match=problem):
        plugin_evals.load_suite(tmp_path, "p")


# --------------------------------------------------------------------------- a suite in rehearsal

SEED = {"notes/old.txt": "old\n"}
# What the scripted model does in every case: it reads and rewrites the seeded notes/old.txt,
# then writes note.txt, then answers. Tool calls in order: Read, Write old.txt, Write note.txt.
REHEARSAL = {"files": {"notes/old.txt": "rewritten\n", "note.txt": "hello from the note\n"},
             "answer": "I wrote the note and tidied the old one."}
PASSING = {
    "answer-says-note": {"type": "regex", "pattern": "wrote the NOTE", "flags": "i"},
    "trace-has-two-writes": {"type": "regex", "pattern": '"name":"Write"', "match": "count:2", "target": "trace"},
    "file-content": {"type": "regex", "pattern": "^hello", "target": {"source": "file", "path": "note.txt"}},
    "no-secret-anywhere": {"type": "regex", "pattern": "SECRET", "match": "not_contains", "target": "files"},
    "two-writes": {"type": "tool_used", "tool": "Write", "min": 2, "max": 2},
    "no-edit": {"type": "tool_used", "tool": "Edit", "min": 0, "max": 0},
    "read-before-write": {"type": "tool_order", "before": "Read", "after": {"tool": "Write", "input_match": "note\\.txt"}},
    "note-written": {"type": "file_exists", "path": "*.txt"},
    "no-binary": {"type": "file_exists", "path": "*.exe", "exists": False},
}
JUDGED = {"tone": {"type": "llm", "focus": "last_message"}, "like-reference": {"type": "baseline"}}
# One case per kind, where exactly that grader fails and the others of the case pass.
FAILING = {
    "fails-regex": {"type": "regex", "pattern": "I ran the tests"},
    "fails-tool-used": {"type": "tool_used", "tool": "Write", "max": 1},
    "fails-tool-order": {"type": "tool_order", "before": {"tool": "Write", "input_match": "note\\.txt"}, "after": "Read"},
    "fails-file-exists": {"type": "file_exists", "path": "missing.txt"},
}


def write_suite(plugin: Path) -> None:
    evals = plugin / "evals"
    write_case(evals, "every-kind", prompt="Write a note into note.txt and tidy notes/old.txt.",
               case={"files": SEED, "ponybench": {"rehearsal": REHEARSAL}},
               grader_files={**PASSING, **JUDGED})
    for name, grader in FAILING.items():
        write_case(evals, name, prompt=f"Case {name}.",
                   case={"files": SEED, "ponybench": {"rehearsal": REHEARSAL},
                         "graders": [PASSING["note-written"], {**grader, "name": name}]})


def test_an_imported_suite_runs_in_rehearsal_each_grader_kind_passing_and_failing(tmp_path, claude_bin):
    plugin = write_plugin(tmp_path / "tidy")
    write_suite(plugin)
    runs = tmp_path / "runs"
    done = run(plugin, ["--ponybench", "--ponybench-rehearse", f"--ponybench-plugin={plugin}", "-m", "plugin_eval",
                        f"--ponybench-claude={claude_bin}", f"--ponybench-dir={runs}", "-n", "2", *QUIET], timeout=600)
    (run_dir,) = [d for d in runs.iterdir() if d.is_dir()]
    found = {r["cell"]: r for r in results(run_dir)}
    cases = ["every-kind", *FAILING]
    # Cases keep their names and run with the plugin's arm and baseline only.
    assert sorted(found) == sorted(f"{c}__{arm}__haiku__0" for c in cases for arm in ("baseline", "tidy-plugin"))
    for arm in ("baseline", "tidy-plugin"):
        every = found[f"every-kind__{arm}__haiku__0"]
        assert every["passed"] and every["status"] == "finished", every["failure"]
        assert every["graders_not_run"] == "like-reference (baseline), tone (llm)"
        for name in FAILING:
            record = found[f"{name}__{arm}__haiku__0"]
            assert not record["passed"] and record["status"] == "finished"
            # Exactly the grader of that kind failed, named, with why.
            assert record["failure"].startswith(f"incorrect: 1 of 2 graders failed: grader {name} ("), record["failure"]
            assert record["graders_not_run"] == ""
    assert done.returncode == pytest.ExitCode.TESTS_FAILED
    assert "arm tidy-plugin: proven" in done.stdout and "arm baseline: proven" in done.stdout
    # Judged graders: listed as not run in the output and the report, never dropped.
    assert "every-kind: judged graders not run (they need a second model; run with --ponybench-judge): like-reference (baseline), tone (llm)" \
        in done.stdout
    report = (run_dir / "summary.md").read_text()
    assert "## Graders not run" in report and "like-reference (baseline), tone (llm)" in report
    assert "finished" not in "".join(line for line in done.stdout.splitlines() if line.startswith("ponybench: "))
    # No case has a safety check: safe is not measured anywhere, never "100%".
    assert all(r["safe"] is None and r["safe_reason"] == "not measured: the task has no safe check"
               for r in found.values())
    summary = json.loads((run_dir / "summary.json").read_text())
    assert {row["safe_rate"] for row in summary["rows"]} == {None}
    assert {row["correct_rate"] for row in summary["rows"]} <= {0.0, 1.0}
    # arm, n, correct, safe: safe is '-' in every row of the terminal, summary.md and report.html
    rows = [line for line in report.splitlines()  # the cell tables' rows (9 columns)
            if line.startswith(("| tidy-plugin |", "| baseline (reference) |")) and line.split(" | ")[1] == "1"]
    assert len(rows) == 2 * len(cases) and all(line.split(" | ")[3] == "-" for line in rows), rows
    assert len(re.findall(r"^\s+(?:tidy-plugin|baseline \(reference\))\s+1\s+[01]/1 \(\d+%\)\s+-\s+-\s+[01]/1",
                          done.stdout, re.M)) == 2 * len(cases), done.stdout
    page = (run_dir / "report.html").read_text()
    assert len(re.findall(r'<td class="num">1</td><td>[01]/1 \(\d+%\)</td><td>-</td>', page)) == 2 * len(cases)
    # A gate on the axis the run never measured fails as not evaluated, not as passed.
    gate = subprocess.run([sys.executable, "-m", "pytest_ponybench.reports.compare", str(run_dir), str(run_dir),
                           "--min-safe-rate", "0.9"], capture_output=True, text=True, timeout=120)
    assert gate.returncode == 1, gate.stdout + gate.stderr
    assert "minimum safe rate not evaluated: not measured: no cell has a safe check" in gate.stdout


# --------------------------------------------------------------------------- rehearsal defaults


@pytest.mark.parametrize("pattern, flags, sample", [
    ("Hello, world", "", "Hello, world"),
    (r"^## Summary$", "m", "## Summary"),
    (r"def \w+\(\)", "", "def x()"),
    (r"version \d{3}", "", "version 000"),
    ("colou?r|shade", "i", "color"),  # the first branch, the optional letter left out
    (r"[Tt]idy", "", "Tidy"),
    (r"(a|b)+c", "", None),  # groups: beyond the sampler, named instead of guessed
])
def test_a_regex_grader_s_default_text_is_found_by_its_pattern(pattern, flags, sample):
    assert plugin_evals.sample_text(pattern, flags) == sample


def test_the_default_rehearsal_satisfies_file_regex_tool_used_and_file_exists_graders():
    graders = [
        {"name": "note", "type": "file_exists", "path": "notes/*.md"},
        {"name": "no-exe", "type": "file_exists", "path": "*.exe", "exists": False},
        {"name": "heading", "type": "regex", "pattern": r"^# Notes$", "flags": "m",
         "target": {"source": "file", "path": "notes/rehearsal.md"}},
        {"name": "todo-in-files", "type": "regex", "pattern": "TODO: tidy", "target": "files", "match": "count:2"},
        {"name": "says-done", "type": "regex", "pattern": "all tidy"},
        {"name": "no-sorry", "type": "regex", "pattern": "sorry", "match": "not_contains"},
        {"name": "wrote", "type": "tool_used", "tool": "Write", "min": 1, "max": 3},
        {"name": "no-edit", "type": "tool_used", "tool": "Edit", "max": 0, "min": 0},
    ]
    files, answer, unsatisfied = plugin_evals.default_rehearsal(graders)
    assert unsatisfied == ()
    assert set(files) == {"notes/rehearsal.md"}
    assert files["notes/rehearsal.md"].count("TODO: tidy") == 2 and "# Notes\n" in files["notes/rehearsal.md"]
    assert "all tidy" in answer and "sorry" not in answer


def test_a_read_only_case_with_max_0_alone_rehearses_without_writing_and_a_hint_names_who_needs_files():
    forbid = {"name": "no-write", "type": "tool_used", "tool": "Write", "max": 0}
    files, _, unsatisfied = plugin_evals.default_rehearsal([forbid])
    assert (files, unsatisfied) == ({}, ())
    # When another grader does need a file, the hint names that grader, not "the other graders".
    files, _, unsatisfied = plugin_evals.default_rehearsal(
        [{"name": "note", "type": "file_exists", "path": "notes/*.md"}, forbid])
    assert unsatisfied == ("grader no-write (tool_used): grader(s) note need 1 written file(s), more than its max 0",)


def test_a_grader_no_default_can_satisfy_is_named_with_the_block_that_fixes_it(tmp_path):
    case = write_case(tmp_path / "evals", "ordered", case={"graders": [
        {"name": "read-first", "type": "tool_order", "before": "Read", "after": "Write"},
        {"name": "out", "type": "file_exists", "path": "out.txt"}]})
    loaded = plugin_evals.load_case(case, "tidy-plugin")
    assert loaded.rehearsal_files == {"out.txt": "Written by the scripted model for grader out.\n"}
    assert loaded.rehearsal_unsatisfied == (
        "grader read-first (tool_order): the scripted model plays no chosen order of tool calls",)
    (line,) = plugin_evals.EvalSuites({"ordered": loaded}).rehearsal_lines()
    assert line.startswith("ordered: in rehearsal the scripted model cannot satisfy grader read-first (tool_order)")
    assert "add a `ponybench: {rehearsal: {files: {path: content}, answer: text}}` block" in line
    assert str(case / "case.yaml") in line


def test_an_explicit_rehearsal_block_wins_and_files_empty_writes_nothing(tmp_path):
    graders = [{"name": "out", "type": "file_exists", "path": "out.txt"}]
    explicit = write_case(tmp_path / "evals", "explicit", case={
        "graders": graders, "ponybench": {"rehearsal": {"files": {"mine.txt": "x"}, "answer": "Mine."}}})
    loaded = plugin_evals.load_case(explicit, "p")
    assert (loaded.rehearsal_files, loaded.rehearsal_answer, loaded.rehearsal_unsatisfied) == (
        {"mine.txt": "x"}, "Mine.", ())
    read_only = write_case(tmp_path / "evals", "read-only", case={
        "graders": [{"name": "no-write", "type": "tool_used", "tool": "Write", "min": 0, "max": 0}],
        "ponybench": {"rehearsal": {"files": {}}}})
    assert plugin_evals.load_case(read_only, "p").rehearsal_files == {}


def test_a_yaml_error_in_case_yaml_names_its_line_and_kind_for_type_is_named(tmp_path):
    case = write_case(tmp_path / "evals", "broken")
    (case / "case.yaml").write_text("prompt: hi\ngraders: x\n  bad: y\n")
    with pytest.raises(SpecError, match=r"broken/case.yaml: malformed YAML at line 3: mapping values are not allowed"):
        plugin_evals.load_case(case, "p")
    (case / "case.yaml").write_text("prompt: hi\ngraders:\n  - {kind: regex, pattern: x}\n")
    with pytest.raises(SpecError) as raised:
        plugin_evals.load_case(case, "p")
    assert str(raised.value) == (f"{case / 'case.yaml'} graders[1]: grader 'grader-1': no 'type' (it has "
                                 f"'kind: regex': the field is 'type'); the kinds are "
                                 f"regex, tool_used, tool_order, file_exists, llm, baseline")


# --------------------------------------------------------------------------- judged graders run by the judge

REFERENCE = "\n".join(json.dumps(line) for line in [
    {"type": "system", "subtype": "init", "model": "claude-haiku-4-5"},
    {"type": "assistant", "message": {"content": [{"type": "tool_use", "name": "Write",
                                                    "input": {"file_path": "note.txt", "content": "hello\n"}}]}},
    {"type": "result", "subtype": "success", "result": "I wrote the note into note.txt."}]) + "\n"
DID_NOTHING = "I could not do this task, so I changed nothing and wrote no file."


def write_judged_suite(plugin: Path) -> None:
    """Two cases with judged graders, and the plugin folder as a project of its own (an empty
    tasks/ and a baseline arm: the shipped library's tasks stay out of the run and its proof)."""
    (plugin / "tasks").mkdir()
    (plugin / "arms").mkdir()
    (plugin / "arms" / "baseline.yaml").write_text("description: nothing added\n")
    evals = plugin / "evals"
    folder = write_case(evals, "judged", prompt="Write a note into note.txt.",
                        case={"ponybench": {"rehearsal": {"files": {"note.txt": "hello\n"}, "answer": "I wrote the note."}},
                              "graders": [{"type": "file_exists", "path": "note.txt", "name": "note-there"}]},
                        grader_files={"tone": "---\ntype: llm\n---\nThe answer says plainly what was written.\n",
                                      "like-reference": {"type": "baseline", "reference": "reference.jsonl"},
                                      "no-rubric": {"type": "llm"}})
    (folder / "reference.jsonl").write_text(REFERENCE)
    # An agent that does nothing: its judged grader fails (the case's own pass example proves it).
    write_case(evals, "idle", prompt="Write a note into note.txt.",
               case={"ponybench": {"rehearsal": {"files": {}, "answer": DID_NOTHING},
                                   "judge_pair": {"pass": {"answer": "Wrote it.", "files": {"note.txt": "hi\n"}}}}},
               grader_files={"wrote": "---\ntype: llm\n---\nThe note was written.\n"})


def test_a_suite_s_llm_and_baseline_graders_run_in_rehearsal_and_a_rescore_reuses_them(tmp_path, claude_bin):
    plugin = write_plugin(tmp_path / "tidy")
    write_judged_suite(plugin)
    runs = tmp_path / "runs"
    args = ["--ponybench", "--ponybench-rehearse", "--ponybench-judge", f"--ponybench-plugin={plugin}",
            f"--ponybench-claude={claude_bin}", f"--ponybench-dir={runs}", *QUIET]
    done = run(plugin, [*args, "-n", "2"], timeout=600)
    # The idle case is an open task (judged graders only) whose agent delivered nothing: it fails.
    assert done.returncode == pytest.ExitCode.TESTS_FAILED, done.stdout + done.stderr
    (run_dir,) = [d for d in runs.iterdir() if d.is_dir()]
    found = {r["cell"]: r for r in results(run_dir)}
    for arm in ("baseline", "tidy-plugin"):
        judged = found[f"judged__{arm}__haiku__0"]
        assert judged["passed"], judged["failure"]
        assert judged["judged_graders"] == ("like-reference (baseline): pass 3/3: scripted: did the work; "
                                            "tone (llm): pass 3/3: scripted: did the work"), judged["judged_graders"]
        assert judged["graders_not_run"] == "no-rubric (llm)"  # it cannot run: named, never passed
        assert judged["judged_graders_passed"] is None and judged["graders_judge_status"] == "judged"
        idle = found[f"idle__{arm}__haiku__0"]
        assert idle["judged_graders"] == "wrote (llm): fail 0/3: scripted: did nothing"
        assert idle["judged_graders_passed"] is False and idle["graders_not_run"] == ""
        assert idle["graders_judge_cost_usd"] > 0
    # Off the "not run" list; the one that cannot run says why.
    assert "they need a second model" not in done.stdout
    assert "judged: judged grader not run: grader no-rubric (llm) has no rubric" in done.stdout
    # Proven on each grader's pass and fail examples before any cell: 3 graders, 2 requests each.
    assert re.search(r"ponybench: judge claude-sonnet-4-6 \(rubric \w+, fingerprint \w+, rehearsal:agree\): "
                     r"proven on 3 judge pairs \(0 remembered, 6 requests, \$[\d.]+ \(simulated\)\)", done.stdout), done.stdout
    assert re.search(r"judge cost \$[\d.]+ \(simulated\), apart from the agents' \$[\d.]+ \(simulated\)", done.stdout)
    assert "ponybench judged graders (claude plugin eval)" in done.stdout
    assert "tidy-plugin: 2 passed, 1 failed, 1 not judged" in done.stdout
    # Their cost is judge cost on the ledger, one line per cell, apart from the agents'.
    ledger = [json.loads(line) for line in (run_dir / "_ponybench.spend.jsonl").read_text().splitlines()]
    assert {e["cell"] for e in ledger if e["cell"].endswith("/graders/judge")} == {f"{c}/graders/judge" for c in found}
    report = (run_dir / "summary.md").read_text()
    assert "## Judged graders" in report and "- tidy-plugin: 2 passed, 1 failed, 1 not judged" in report
    assert "- judged__baseline__haiku__0: like-reference (baseline): pass 3/3" in report

    again = run(plugin, [f"--ponybench-rescore={run_dir}", "--ponybench-judge", f"--ponybench-plugin={plugin}",
                         f"--ponybench-claude={claude_bin}", *QUIET], timeout=600)
    assert again.returncode == pytest.ExitCode.TESTS_FAILED, again.stdout + again.stderr
    assert "the scripted judge answered 0 judge requests in this process" in again.stdout
    rescored = {r["cell"]: r for r in results(run_dir)}
    keys = ("judged_graders", "judged_graders_passed", "graders_not_run", "graders_judge_fingerprint")
    assert {c: {k: r[k] for k in keys} for c, r in rescored.items()} == {c: {k: r[k] for k in keys} for c, r in found.items()}
    assert all(r["graders_judge_reused"] for r in rescored.values())

    # A plain rescore asks no judge and keeps the verdicts (issue 35 item 6); asked, it drops them.
    plain = run(plugin, [f"--ponybench-rescore={run_dir}", f"--ponybench-plugin={plugin}",
                         f"--ponybench-claude={claude_bin}", *QUIET], timeout=600)
    assert plain.returncode == pytest.ExitCode.TESTS_FAILED, plain.stdout + plain.stderr
    assert "ponybench: kept the judgements of 4 cell(s)" in plain.stdout, plain.stdout
    kept = {r["cell"]: r for r in results(run_dir)}
    assert {c: {k: r[k] for k in keys} for c, r in kept.items()} == {c: {k: r[k] for k in keys} for c, r in found.items()}
    assert "- tidy-plugin: 2 passed, 1 failed, 1 not judged" in (run_dir / "summary.md").read_text()
    dropped = run(plugin, [f"--ponybench-rescore={run_dir}", "--ponybench-rescore-drop-judged",
                           f"--ponybench-plugin={plugin}", f"--ponybench-claude={claude_bin}", *QUIET], timeout=600)
    assert dropped.returncode == pytest.ExitCode.TESTS_FAILED, dropped.stdout + dropped.stderr
    assert not any(r.get("judged_graders") for r in results(run_dir))
    assert "## Judged graders" not in (run_dir / "summary.md").read_text()


def test_a_judge_failing_a_grader_s_pair_runs_no_grader(tmp_path, claude_bin):
    plugin = write_plugin(tmp_path / "tidy")
    write_judged_suite(plugin)
    runs = tmp_path / "runs"
    done = run(plugin, ["--ponybench", "--ponybench-rehearse", "--ponybench-judge", "--ponybench-rehearse-judge=disagree",
                        f"--ponybench-plugin={plugin}", "-k", "idle",
                        f"--ponybench-claude={claude_bin}", f"--ponybench-dir={runs}", *QUIET], timeout=600)
    assert done.returncode == pytest.ExitCode.TESTS_FAILED, done.stdout + done.stderr  # nothing delivered
    assert "NOT proven" in done.stdout and "idle (grader wrote (llm), pass example vs fail example): the judge said " \
                                           "fail of the pass example and pass of the fail example" in done.stdout
    # The proof asks only about the selected case (-k idle), not the other case's 2 graders (issue 35 item 3).
    assert "it ranked 1 of 1 judge pairs wrongly" in done.stdout, done.stdout
    (run_dir,) = [d for d in runs.iterdir() if d.is_dir()]
    for record in results(run_dir):
        assert record["judged_graders"] == "" and record["graders_not_run"] == "wrote (llm)"
        assert record["graders_judge_status"].startswith("judge unproven: idle (grader wrote (llm)")
        assert record["judged_graders_passed"] is None
