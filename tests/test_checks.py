"""Checks (checks.py, checklib.py): untrusted agent code judged in a child process with a time
limit. Agent code that loops, exits, forks, floods or raises gets a verdict, never a hang, and
leaves no process behind."""
from __future__ import annotations

import os
import textwrap
from pathlib import Path

import pytest

from pytest_ponybench.cell import workspace
from pytest_ponybench.scoring import checklib, checks
from support import proc_watch


def ws_with(tmp_path: Path, files: dict[str, str]) -> Path:
    ws = tmp_path / "ws"
    ws.mkdir()
    for rel, content in files.items():
        path = ws / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(content))
    return ws


def check(ws: Path, code: str, entry: str | None = "impl.py", timeout: float = 10, axis: str = "correct"):
    return checks.run_check(textwrap.dedent(code), ws, axis, entry, timeout)


def pids_in(ws: Path, name: str = "pids.txt") -> list[int]:
    path = ws / name
    return [int(x) for x in path.read_text().split()] if path.exists() else []


def assert_all_dead(pids: list[int]) -> None:
    assert pids, "the agent code never wrote its pids: the test would prove nothing"
    survivors = proc_watch.wait_until_dead(pids, timeout=2)
    proc_watch.kill(survivors)
    assert survivors == [], f"processes outlived the check: {survivors}"


ADD = """
def add(a, b):
    return a + b
"""


def test_a_passing_check(tmp_path):
    ws = ws_with(tmp_path, {"impl.py": ADD})
    verdict = check(ws, """
        add = find_function(load(FILE), "plus", "add")
        assert add(2, 3) == 5, "add(2, 3) is not 5"
    """)
    assert verdict == checks.Verdict(True, "ok")


def test_the_assertion_message_is_the_reason(tmp_path):
    ws = ws_with(tmp_path, {"impl.py": "def add(a, b):\n    return a - b\n"})
    verdict = check(ws, """
        add = find_function(load(FILE), "add")
        assert add(2, 3) == 5, f"add(2, 3) gave {add(2, 3)}, not 5"
    """)
    assert verdict == checks.Verdict(False, "add(2, 3) gave -1, not 5")


def test_a_bare_assert_names_its_line(tmp_path):
    ws = ws_with(tmp_path, {"impl.py": ADD})
    verdict = check(ws, "x = 1\nassert load(FILE).add(1, 1) == 3\n")
    assert not verdict.ok and verdict.reason == "assertion failed: line 2"


def test_agent_code_that_raises_gives_the_exception(tmp_path):
    ws = ws_with(tmp_path, {"impl.py": "raise ValueError('boom at import')\n"})
    verdict = check(ws, "load(FILE)")
    assert verdict == checks.Verdict(False, "ValueError: boom at import")


def test_a_file_that_was_not_written(tmp_path):
    ws = ws_with(tmp_path, {})
    verdict = check(ws, "load(FILE)")
    assert verdict == checks.Verdict(False, "impl.py was not written")


def test_agent_code_that_loops_times_out_and_dies(tmp_path):
    marker = f"pony-marker-{tmp_path.name}"
    ws = ws_with(tmp_path, {"impl.py": f"""
        import os, subprocess, sys
        child = subprocess.Popen([sys.executable, "-c", "while True: pass", {marker!r}])
        while True:
            pass
    """})
    # 5 s, not 1: on a loaded 2-core machine the child may need more than a second just to
    # start; the loop never ends, so the deadline is what stops it.
    with proc_watch.Sightings(marker) as seen:
        verdict = check(ws, "load(FILE)", timeout=5)
    assert not verdict.ok
    assert verdict.reason == "correct check timed out after 5 s: the code under test looped or blocked"
    assert_none_marked_left(seen)


def test_agent_code_that_calls_sys_exit_at_import(tmp_path):
    ws = ws_with(tmp_path, {"impl.py": "import sys\nsys.exit(3)\n"})
    verdict = check(ws, "load(FILE)")
    assert verdict == checks.Verdict(False, "the code under test called exit(3)")


def test_agent_code_that_calls_os_exit_at_import(tmp_path):
    ws = ws_with(tmp_path, {"impl.py": "import os\nprint('leaving now', flush=True)\nos._exit(7)\n"})
    verdict = check(ws, "load(FILE)")
    assert not verdict.ok
    # Behind the trust boundary (remote.py) its host process died; the check's own process,
    # which alone writes the verdict, says so.
    assert "ended its own process (exit code 7)" in verdict.reason


def test_agent_code_that_calls_os_exit_at_import_in_process(tmp_path):
    ws = ws_with(tmp_path, {"impl.py": "import os\nprint('leaving now', flush=True)\nos._exit(7)\n"})
    verdict = checks.run_check("load(FILE)", ws, "correct", "impl.py", 10, in_process=True)
    assert not verdict.ok
    assert "exit code 7 without a verdict" in verdict.reason
    assert verdict.reason.endswith(": leaving now")  # the last line of its output is kept


def assert_none_marked_left(sightings: proc_watch.Sightings) -> None:
    """The processes carrying the marker were seen while the check ran and none is left: a
    check in its own PID namespace has pids of its own, so they are found by their argv."""
    assert sightings.seen, "no process of the agent code was ever seen: the test would prove nothing"
    survivors = proc_watch.wait_until_dead(proc_watch.marked(sightings.marker), timeout=2)
    proc_watch.kill(survivors)
    assert survivors == [], f"processes outlived the check: {survivors}"


def test_a_child_forked_by_agent_code_does_not_survive_the_verdict(tmp_path):
    marker = f"pony-marker-{tmp_path.name}"
    ws = ws_with(tmp_path, {"impl.py": f"""
        import subprocess, sys
        child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)", {marker!r}])
        with open("pids.txt", "w") as fh:
            fh.write(str(child.pid))

        def add(a, b):
            return a + b
    """})
    with proc_watch.Sightings(marker) as seen:
        verdict = check(ws, """
            import os, time
            assert load(FILE).add(1, 2) == 3
            time.sleep(0.5)  # long enough for the watch to see the child
            child = open("pids.txt").read()
            assert os.path.exists(f"/proc/{child}"), "the child never ran"
        """)
    assert verdict == checks.Verdict(True, "ok")
    assert_none_marked_left(seen)


def test_a_flood_of_output_is_bounded_and_still_gives_a_verdict(tmp_path):
    # More than the file-size cap of the check's output: the write fails, the check reports it.
    flood_mb = checks.FILE_SIZE_LIMIT // (1024 * 1024) + 16
    ws = ws_with(tmp_path, {"impl.py": f"""
        import sys
        chunk = "y" * (1024 * 1024)
        for _ in range({flood_mb}):
            sys.stdout.write(chunk)
        sys.stdout.flush()
    """})
    verdict = check(ws, "load(FILE)")
    assert not verdict.ok
    assert len(verdict.reason) <= checks.OUTPUT_EXCERPT + 200


def test_a_small_flood_still_passes(tmp_path):
    ws = ws_with(tmp_path, {"impl.py": ADD + "\nimport sys\nsys.stdout.write('z' * (4 * 1024 * 1024))\n"})
    assert check(ws, "assert load(FILE).add(2, 2) == 4").ok


SERVER = """
import json, os, sys
from http.server import BaseHTTPRequestHandler, HTTPServer

with open("pids.txt", "w") as fh:
    fh.write(str(os.getpid()))


class Handler(BaseHTTPRequestHandler):
    def do_GET(self):
        status, body = (200, b"pong") if self.path == "/ping" else (404, b"nope")
        self.send_response(status)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_POST(self):
        data = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        body = json.dumps({"echo": data, "type": self.headers["Content-Type"]}).encode()
        self.send_response(201)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


HTTPServer(("127.0.0.1", int(sys.argv[1])), Handler).serve_forever()
"""


def test_a_check_can_start_the_agent_s_server_and_talk_to_it(tmp_path):
    ws = ws_with(tmp_path, {"server.py": SERVER})
    marker = f"pony-marker-{tmp_path.name}"
    code = """
        import json, sys, time
        port = free_port()
        start_process([sys.executable, "server.py", port, MARKER], port=port)
        status, headers, body = http("GET", f"http://127.0.0.1:{port}/ping")
        assert (status, body) == (200, b"pong"), f"GET /ping gave {status} {body!r}"
        status, _, body = http("GET", f"http://127.0.0.1:{port}/missing")
        assert status == 404, f"an error status is returned, not raised: {status}"
        status, _, body = http("POST", f"http://127.0.0.1:{port}/echo", body={"a": 1})
        assert status == 201 and json.loads(body) == {"echo": {"a": 1}, "type": "application/json"}, body
        time.sleep(0.5)  # long enough for the watch to see the server
    """.replace("MARKER", repr(marker))
    with proc_watch.Sightings(marker) as seen:
        verdict = check(ws, code, entry="server.py", timeout=20)
    assert verdict == checks.Verdict(True, "ok")
    assert_none_marked_left(seen)  # the server was stopped with the check


def test_start_process_reports_a_program_that_dies_before_listening(tmp_path):
    ws = ws_with(tmp_path, {"server.py": "raise SystemExit(2)\n"})
    verdict = check(ws, """
        import sys
        start_process([sys.executable, "server.py"], port=free_port(), timeout=5)
    """, entry="server.py")
    assert not verdict.ok and "exited with code 2 before listening" in verdict.reason


def test_the_check_cannot_see_the_harness_s_memory(tmp_path, monkeypatch):
    monkeypatch.setattr(checklib, "HARNESS_ONLY", "set in the test process", raising=False)
    ws = ws_with(tmp_path, {"impl.py": ADD})
    probe = f"""
        import os
        import pytest_ponybench.checklib as lib
        assert os.getpid() != {os.getpid()}, "the check ran inside the harness process"
        assert not hasattr(lib, "HARNESS_ONLY"), "the check saw a module variable of the harness"
    """
    assert check(ws, probe) == checks.Verdict(True, "ok")
    # The same probe can fail: a variable the check's own process sets is seen.
    seen = check(ws, "import pytest_ponybench.checklib as lib\nlib.HARNESS_ONLY = 1\n" + textwrap.dedent(probe))
    assert seen == checks.Verdict(False, "the check saw a module variable of the harness")


def test_the_check_runs_in_the_workspace_with_the_helper_names(tmp_path):
    ws = ws_with(tmp_path, {"impl.py": "from helper import twice\n\ndef quad(x):\n    return twice(twice(x))\n",
                            "helper.py": "def twice(x):\n    return 2 * x\n"})
    verdict = check(ws, f"""
        assert Path.cwd() == WORKSPACE == Path({str(ws.resolve())!r}), Path.cwd()
        assert FILE == "impl.py"
        assert load(FILE).quad(3) == 12  # the agent's modules import each other by name
        first, second = load(FILE), load(FILE)
        assert first is not second and first.__name__ != second.__name__
    """)
    assert verdict == checks.Verdict(True, "ok")
    assert not (ws / "__pycache__").exists(), "the check left bytecode in the kept workspace"


def test_find_function_and_find_class_say_what_is_missing(tmp_path):
    ws = ws_with(tmp_path, {"impl.py": "class Store:\n    def put(self, k, v):\n        pass\n"})
    assert check(ws, "assert find_class(load(FILE), 'put').__name__ == 'Store'").ok
    missing_fn = check(ws, "find_function(load(FILE), 'save', 'store')")
    assert missing_fn == checks.Verdict(False, "no function named any of save, store")
    missing_cls = check(ws, "find_class(load(FILE), 'get')")
    assert missing_cls == checks.Verdict(False, "no class with a method get()")


def test_run_checks_runs_each_axis(tmp_path):
    ws = ws_with(tmp_path, {"impl.py": ADD})
    verdicts = checks.run_checks({"correct": "assert load(FILE).add(1, 1) == 2",
                                  "safe": "assert False, 'unsafe on purpose'"}, ws, "impl.py", 10)
    assert verdicts == {"correct": checks.Verdict(True, "ok"), "safe": checks.Verdict(False, "unsafe on purpose")}


@pytest.mark.parametrize("module", ["json", "tempfile", "http", "subprocess", "runpy"])
def test_an_agent_file_named_like_a_stdlib_module_does_not_break_the_checker(tmp_path, module):
    ws = ws_with(tmp_path, {"impl.py": ADD, f"{module}.py": "raise SystemExit('shadowed the standard library')\n"})
    assert check(ws, "assert load(FILE).add(1, 2) == 3") == checks.Verdict(True, "ok")


def test_a_check_past_its_deadline_does_not_cost_the_next_axis_its_verdict(tmp_path):
    ws = ws_with(tmp_path, {"impl.py": ADD})
    verdicts = checks.run_checks({"correct": "while True:\n    pass\n",
                                  "safe": "assert load(FILE).add(1, 1) == 2"}, ws, "impl.py", 3)
    assert verdicts == {
        "correct": checks.Verdict(False, "correct check timed out after 3 s: the code under test looped or blocked",
                                  timed_out=True),
        "safe": checks.Verdict(True, "ok")}


def test_a_huge_assertion_message_is_cut_to_a_reason(tmp_path):
    ws = ws_with(tmp_path, {"impl.py": ADD})
    verdict = check(ws, "assert False, 'x' * 10_000_000")
    assert verdict == checks.Verdict(False, "x" * checks.REASON_LIMIT)


def test_each_check_works_in_its_own_copy_without_the_harness_files(tmp_path):
    ws = ws_with(tmp_path, {"impl.py": ADD, "_ponybench.result.json": "{}", "sub/.git/HEAD": "x"})
    (ws / ".git").mkdir()
    (ws / "link").symlink_to("impl.py")
    before = sorted((str(p.relative_to(ws)), p.is_symlink()) for p in ws.rglob("*"))
    in_the_copy = """
        import os
        assert os.getcwd() != {ws!r} and os.path.basename(os.getcwd()) == {name!r}, os.getcwd()
        assert sorted(os.listdir(".")) == ["impl.py", "link", "sub"], os.listdir(".")
        assert os.path.isfile("sub/.git/HEAD"), "a nested .git is the agent's: copied"
        assert os.readlink("link") == "impl.py", "a symlink is copied as a link"
        assert not os.path.exists("from-the-other-axis"), "the other axis's copy is shared"
        os.remove("impl.py")
        open("from-the-other-axis", "w").write("x")
    """.format(ws=str(ws), name=ws.name)
    verdicts = checks.run_checks({"correct": textwrap.dedent(in_the_copy), "safe": textwrap.dedent(in_the_copy)},
                                 ws, "impl.py", 10, ignore=workspace.copy_ignore(ws))
    assert verdicts == {"correct": checks.Verdict(True, "ok"), "safe": checks.Verdict(True, "ok")}
    assert sorted((str(p.relative_to(ws)), p.is_symlink()) for p in ws.rglob("*")) == before
    assert (ws / "impl.py").read_text() == textwrap.dedent(ADD)


def test_no_checks_start_no_process(tmp_path, monkeypatch):
    ws = ws_with(tmp_path, {"impl.py": ADD})

    def refuse(*args, **kwargs):
        raise AssertionError("a supervisor was started for no check")

    monkeypatch.setattr(checks.procs, "start_calls", refuse)
    assert checks.run_checks({}, ws, "impl.py", 10) == {}
