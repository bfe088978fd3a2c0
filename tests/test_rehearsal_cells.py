"""The glue between cells and the scripted model: what it writes, and what proves an arm."""
import json
from pathlib import Path

from pytest_ponybench.cell import lifecycle as cell, proof
from pytest_ponybench.rehearsal import plugin as rehearsal_plugin
from pytest_ponybench.specs import spec

REPO = Path(__file__).resolve().parents[1]


def task(name):
    return spec.load_task(REPO / "tasks" / f"{name}.yaml", REPO / "fixtures")


def test_the_scripted_model_plays_the_chosen_reference():
    gated = task("upload_path")
    assert rehearsal_plugin.rehearsal_files(gated) == gated.refs.good
    assert rehearsal_plugin.rehearsal_files(gated, "bad") == gated.refs.bad
    # A task with its own rehearsal files still plays its bad reference when asked.
    fixture = task("notes_health")
    assert fixture.rehearsal and rehearsal_plugin.rehearsal_files(fixture) == fixture.rehearsal
    assert rehearsal_plugin.rehearsal_files(fixture, "bad") == fixture.refs.bad


def test_a_task_without_references_gets_a_plausible_file(tmp_path):
    path = tmp_path / "bare.yaml"
    path.write_text("prompt: build something\nopen: true\n")
    bare = spec.load_task(path, tmp_path)
    assert rehearsal_plugin.rehearsal_files(bare) == rehearsal_plugin.DEFAULT_FILES
    assert rehearsal_plugin.rehearsal_files(bare, "bad") == rehearsal_plugin.DEFAULT_FILES


def test_plugin_markers_name_each_skill(tmp_path):
    plugin = tmp_path / "p"
    (plugin / ".claude-plugin").mkdir(parents=True)
    (plugin / ".claude-plugin" / "plugin.json").write_text(json.dumps({"name": "tidy"}))
    for skill in ("b-skill", "a-skill"):
        (plugin / "skills" / skill).mkdir(parents=True)
        (plugin / "skills" / skill / "SKILL.md").write_text("---\nname: x\n---\n")
    (plugin / "skills" / "no-skill-file").mkdir()
    assert proof.plugin_markers(str(plugin)) == ["tidy:a-skill", "tidy:b-skill"]
    assert proof.plugin_markers(None) == []


def _request(system_text, message_text):
    return {"tools": [{"name": "Write"}], "system": [{"type": "text", "text": system_text}],
            "messages": [{"role": "user", "content": [{"type": "text", "text": message_text}]}]}


def test_prove_ignores_another_arms_text_that_is_part_of_our_own(monkeypatch):
    arms = {a.name: a for a in (spec.ArmSpec("yagni", None, prompt="Follow YAGNI principles."),
                                spec.ArmSpec("yagni-oneliner", None,
                                             prompt="Follow YAGNI principles, and prefer one-liner solutions."))}
    run = rehearsal_plugin.RehearsalPlugin(None, arms, REPO / "arms")
    one = cell.Cell(task("upload_path"), arms["yagni-oneliner"], "haiku", "claude-haiku-4-5-20251001", 0)
    # The server records what the CLI sent; here the test says what it sent.
    sent = [_request("You are Claude Code.\n\n" + cell.append_text(one.arm), "task")]
    monkeypatch.setattr(run.model, "requests", lambda key: sent)
    assert run.pytest_ponybench_prove_arm(one, None, None) == ""
    other = cell.Cell(one.task, arms["yagni"], "haiku", "claude-haiku-4-5-20251001", 0)
    sent[:] = [_request("You are Claude Code.\n\n" + cell.append_text(other.arm),
                        "Follow YAGNI principles, and prefer one-liner solutions.")]
    reason = run.pytest_ponybench_prove_arm(other, None, None)
    assert "Foreign text" in reason


def test_a_plugin_arm_with_nothing_to_prove_is_not_proven(tmp_path):
    empty = tmp_path / "empty-plugin"
    (empty / ".claude-plugin").mkdir(parents=True)
    arm = spec.ArmSpec("empty", None, plugin=str(empty))
    run = rehearsal_plugin.RehearsalPlugin(None, {"empty": arm}, tmp_path)
    one = cell.Cell(task("upload_path"), arm, "haiku", "claude-haiku-4-5-20251001", 0)
    assert "nothing that can prove it" in run.pytest_ponybench_prove_arm(one, None, None)
