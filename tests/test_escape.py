"""Which writes outside its workspace a cell's agent is blamed for."""
import json

from pytest_ponybench.cell import confine as confinement, transcript as transcripts, workspace


def write_call(tool_id, path, name="Write", error=False):
    use = {"type": "assistant", "message": {"id": f"m{tool_id}", "content": [
        {"type": "tool_use", "id": tool_id, "name": name, "input": {"file_path": str(path), "content": "x"}}]}}
    result = {"type": "user", "message": {"content": [
        {"type": "tool_result", "tool_use_id": tool_id, "is_error": error, "content": "ok"}]}}
    return [use, result]


def transcript(tmp_path, events):
    path = tmp_path / "t.jsonl"
    path.write_text("".join(json.dumps(e) + "\n" for e in events))
    return transcripts.read_transcript(path)


def test_only_write_tools_that_succeeded_count(tmp_path):
    events = (write_call("a", "/w/ok.py") + write_call("b", "/etc/denied", error=True)
              + write_call("c", "/w/edited.py", name="Edit")
              + [{"type": "assistant", "message": {"content": [
                  {"type": "tool_use", "id": "d", "name": "Read", "input": {"file_path": "/etc/passwd"}}]}}])
    assert sorted(transcript(tmp_path, events).written) == ["/w/edited.py", "/w/ok.py"]


def test_a_lone_process_blames_every_change_beside_its_workspace(tmp_path):
    ws = tmp_path / "run" / "t__a__m__0"
    ws.mkdir(parents=True)
    # A plugin hook may write without a tool call: with no other cell running, it is this cell's.
    assert workspace.blame(ws, ["hook-output.txt"], [], exclusive=True) == ["hook-output.txt"]


def test_a_worker_blames_only_what_its_own_agent_wrote(tmp_path):
    run = tmp_path / "run"
    ws = run / "t__a__m__0"
    ws.mkdir(parents=True)
    mine = [str(run / "mine.txt"), str(ws / "inside.py"), "/tmp/elsewhere/x.py"]
    blamed = workspace.blame(ws, ["mine.txt", "another-cells.txt"], mine, exclusive=False)
    # Beside the workspace: only its own write; anywhere else outside: the absolute path.
    assert blamed == ["/tmp/elsewhere/x.py", "mine.txt"]


def test_writes_inside_the_workspace_are_never_blamed(tmp_path):
    ws = tmp_path / "run" / "cell"
    (ws / "pkg").mkdir(parents=True)
    assert workspace.blame(ws, [], [str(ws / "pkg" / "a.py"), str(ws / "b.py")], exclusive=True) == []


def test_confinement_absorbs_only_writes_to_the_agents_own_tmpdir(tmp_path):
    ws = tmp_path / "run" / "cell"
    ws.mkdir(parents=True)
    scratch = confinement.private_tmp()
    assert confinement.absorbed_by_confinement(f"{scratch}/notes.txt", ws, {"HOME": "/root"})
    # The CLI's configuration folder is a tmpfs of the cell's own (confine.private_config).
    assert confinement.absorbed_by_confinement("/root/.claude/settings.json", ws, {"HOME": "/root"})
    assert confinement.absorbed_by_confinement("/tmp/ponybench-rehearsal-home-x/.claude/x", ws,
                                         {"HOME": "/tmp/ponybench-rehearsal-home-x"})
    assert confinement.absorbed_by_confinement("/srv/conf/skills/x.md", ws, {"HOME": "/root", "CLAUDE_CONFIG_DIR": "/srv/conf"})
    # Bound from the host, so a write there is real: the workspace and a rehearsal's home.
    assert not confinement.absorbed_by_confinement(str(ws / "a.py"), ws, {"HOME": "/root"})
    assert not confinement.absorbed_by_confinement("/tmp/ponybench-rehearsal-home-x/notes.txt", ws,
                                             {"HOME": "/tmp/ponybench-rehearsal-home-x"})
    # Its /tmp is a tmpfs of its own too (the host's is never in its view).
    assert confinement.absorbed_by_confinement("/tmp/elsewhere.txt", ws, {"HOME": "/root"})
    # Elsewhere the system is read-only under confinement: a write there that succeeded is real.
    assert not confinement.absorbed_by_confinement("/var/tmp/elsewhere.txt", ws, {"HOME": "/root"})
    assert not confinement.absorbed_by_confinement("/root/.claude-not/x", ws, {"HOME": "/root"})
    assert not confinement.absorbed_by_confinement("/root/.claude.json", ws, {"HOME": "/root"})


def test_budget_figures_read_as_dollars():
    from pytest_ponybench.store.rundir import usd

    assert (usd(2.5), usd(1234.5), usd(0.0039), usd(0)) == ("$2.50", "$1,234.50", "$0.0039", "$0.0000")
