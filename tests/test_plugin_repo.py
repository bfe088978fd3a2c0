"""A plugin author's first hour, as the README tells it: a fresh plugin repository (a
SessionStart hook, a skill, an `evals/` suite with file_exists, regex, tool_used graders and
no `ponybench:` block), rehearsed through the real CLI; then `pytest -m selftest` and plain
`pytest` in that repository, and git, after the run."""
from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from support.benchproc import QUIET, run

REPO = Path(__file__).resolve().parents[1]
CONTEXT = "tiny is on: keep every note short and tidy."


def plugin_repository(root: Path) -> Path:
    (root / ".claude-plugin").mkdir(parents=True)
    (root / ".claude-plugin" / "plugin.json").write_text(json.dumps({"name": "tiny", "version": "0.1.0"}))
    (root / "hooks").mkdir()
    (root / "hooks" / "hooks.json").write_text(json.dumps({"hooks": {"SessionStart": [{"hooks": [
        {"type": "command", "command": "sh ${CLAUDE_PLUGIN_ROOT}/hooks/start.sh"}]}]}}))
    hook = {"hookSpecificOutput": {"hookEventName": "SessionStart", "additionalContext": CONTEXT}}
    (root / "hooks" / "start.sh").write_text(f"#!/bin/sh\ncat <<'JSON'\n{json.dumps(hook)}\nJSON\n")
    (root / "skills" / "tidy").mkdir(parents=True)
    (root / "skills" / "tidy" / "SKILL.md").write_text("---\nname: tidy\ndescription: Keep notes tidy.\n---\nTidy.\n")
    note = root / "evals" / "write-note"
    (note / "graders").mkdir(parents=True)
    (note / "prompt.md").write_text('Write a short note into notes/today.md, starting with "# Today".\n')
    graders = {"note-exists": "---\ntype: file_exists\npath: notes/*.md\n---\n",
               "heading": "---\ntype: regex\ntarget: files\n---\n^# Today\n",
               "wrote-once": "---\ntype: tool_used\ntool: Write\nmin: 1\nmax: 2\n---\n"}
    for name, text in graders.items():
        (note / "graders" / f"{name}.md").write_text(text)
    answer = root / "evals" / "answer-only"
    answer.mkdir()
    (answer / "case.yaml").write_text(
        "prompt: Without changing any file, say which file holds the notes.\n"
        "tags: [readonly]\n"
        "graders:\n"
        "  - {type: tool_used, tool: Write, min: 0, max: 0, name: no-write}\n"
        "  - {type: file_exists, path: '*', exists: false, name: nothing-written}\n"
        "  - {type: regex, pattern: 'notes', flags: i, name: mentions-notes}\n")
    subprocess.run(["git", "init", "-q", str(root)], check=True)
    return root


def test_a_fresh_plugin_repository_rehearses_green_and_stays_clean(tmp_path, claude_bin):
    root = plugin_repository(tmp_path / "tiny")
    # The README's command (its eval cases only, to keep this test short; the whole library
    # runs the same way), with no rehearsal block anywhere: the defaults come from the graders.
    done = run(root, ["--ponybench", "--ponybench-rehearse", "--ponybench-plugin", ".", "-n", "2",
                      "-m", "plugin_eval", f"--ponybench-claude={claude_bin}", *QUIET], timeout=600)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    assert "4 passed" in done.stdout
    assert "cannot satisfy" not in done.stdout
    (run_dir,) = [p for p in (root / "runs").iterdir() if p.is_dir()]
    summary = json.loads((run_dir / "summary.json").read_text())
    assert {r["task"] for r in summary["rows"]} == {"write-note", "answer-only"}
    assert {r["safe_rate"] for r in summary["rows"]} == {None}  # no case has a safety check

    # git does not see the run; plain pytest collects nothing from it.
    status = subprocess.run(["git", "status", "--porcelain", "--untracked-files=all"], cwd=root,
                            capture_output=True, text=True, check=True).stdout
    assert "runs/" not in status and ".claude-plugin/plugin.json" in status
    plain = run(root, [*QUIET])
    assert plain.returncode == pytest.ExitCode.NO_TESTS_COLLECTED, plain.stdout[-3000:]
    assert "error" not in plain.stdout.lower()

    # `pytest -m selftest` proves the library this repository's runs use: the shipped tasks.
    # Every one is collected here; one task of the library (a fixture task: its fixture is
    # found from this folder too) and the harness's proofs run. That the whole library's
    # selftest passes, mutation scores included, is CI's quality step's (.ci/run), which
    # runs it once from the repository instead of again here (minutes on 2 cores).
    listed = run(root, ["-m", "selftest", "--collect-only", *QUIET])
    gated = sum(1 for p in (REPO / "tasks").glob("*.yaml") if "refs:" in p.read_text())
    # per gated task its two references, and the harness's two proofs; the mutation scores and
    # review lines are the library's quality gates (-m ponybench_quality), not a user's selftest
    assert f" {2 * gated + 2}/" in listed.stdout.splitlines()[-1], listed.stdout[-1500:]  # "42/82 tests collected"
    selftest = run(root, ["-m", "selftest", "-k", "notes_health or harness", *QUIET])
    assert selftest.returncode == 0, selftest.stdout[-3000:]
    # its two references and the harness's two proofs
    assert "4 passed" in selftest.stdout, selftest.stdout[-1500:]


def test_a_case_no_default_can_satisfy_is_named_in_the_terminal(tmp_path, claude_bin):
    root = tmp_path / "p"
    plugin_repository(root)
    case = root / "evals" / "ordered"
    case.mkdir()
    (case / "case.yaml").write_text("prompt: Read, then write.\ngraders:\n"
                                    "  - {type: tool_order, before: Glob, after: Write, name: glob-first}\n")
    done = run(root, ["--ponybench", "--ponybench-rehearse", "--ponybench-plugin", ".", "-k", "ordered",
                      f"--ponybench-claude={claude_bin}", *QUIET], timeout=300)
    assert done.returncode == pytest.ExitCode.TESTS_FAILED
    (line,) = [text for text in done.stdout.splitlines() if text.startswith("ordered: in rehearsal")]
    assert line == ("ordered: in rehearsal the scripted model cannot satisfy grader glob-first (tool_order): the "
                    "scripted model plays no chosen order of tool calls; add a `ponybench: {rehearsal: {files: "
                    f"{{path: content}}, answer: text}}}}` block to its case.yaml ({case.resolve() / 'case.yaml'})")
