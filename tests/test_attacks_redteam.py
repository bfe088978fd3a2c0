"""Red team for issue 20: attacks of our own, beyond the ones the issue lists.

The attacker is the agent and the code it delivers, and it has read this project's source. The
promise under attack: a cell can spoil only its own verdict, never forge it, never touch another
cell, the run's records or the harness, and nothing outlives it.

Each test is one attack, really attempted, and asserts the promise (the attack fails). An attack
that still breaks the promise on the code of the day is marked `xfail(strict=True)` with one line
saying what breaks, so the suite stays green and flips the day a fix lands.

Most attacks run the agent's code the way a cell's checks do (`checks.run_checks`: the fork
server, a supervisor, a disposable copy); the others run a whole session (`python -m pytest
--ponybench`) with a hostile stand-in CLI built on tests/fakes/fake_claude.py. Nothing here
reaches a network. Whatever an attack leaves running carries MARK in its argv and is killed
after each test, whether the attack worked or not.
"""
from __future__ import annotations

import glob
import json
import os
import re
import secrets
import signal
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
from pathlib import Path

import pytest
from support.benchproc import (ADD_TASK, FAKE, GOOD_ADD, Session, bench_args, by_cell, fake_env, only_run_dir,
                               results, run, summary, write_project)

from pytest_ponybench import cell, checks, metrics, procs, workspace
from pytest_ponybench.rundir import RunDir
from pytest_ponybench.spec import ArmSpec, TaskSpec

MARK = "redteam20-leftover"  # in the argv of every process an attack tries to leave behind
CELL = "add__baseline__haiku__{}".format
MODEL_ID = "claude-haiku-4-5-20251001"
ADD_CHECK = 'add = find_function(load(FILE), "add")\nassert add(2, 3) == 5, "add(2, 3) is not 5"\n'
BAD_ADD = "def add(a, b):\n    return a - b\n"
CHECK_TIMEOUT = 20.0

# Walks up from the agent's code to the harness: the first ancestor that is not one of the
# harness's own children (pony-check, pony-supervisor, pony-server: procs._name).
FIND_HARNESS = '''
import os as _os
def _comm(pid):
    try:
        with open(f"/proc/{pid}/comm") as fh:
            return fh.read().strip()
    except OSError:
        return ""
def _ppid(pid):
    with open(f"/proc/{pid}/stat") as fh:
        stat = fh.read()
    return int(stat[stat.rfind(")") + 2:].split()[1])
def harness_pid():
    pid = _os.getppid()
    while pid > 1 and _comm(pid).startswith("pony-"):
        pid = _ppid(pid)
    return pid
def ancestor(name):
    pid = _os.getppid()
    while pid > 1 and _comm(pid) != name:
        pid = _ppid(pid)
    return pid if pid > 1 else None
'''


# --------------------------------------------------------------------------- clean-up


def marked_pids() -> list[int]:
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as fh:
                if MARK.encode() in fh.read():
                    found.append(int(entry))
        except OSError:
            continue
    return found


def kill_marked() -> None:
    for pid in marked_pids():
        try:
            os.kill(pid, signal.SIGCONT)
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def leftovers(timeout: float = 3.0) -> list[int]:
    """Processes carrying MARK still alive after `timeout` (zombies do not count)."""
    deadline = time.monotonic() + timeout
    while True:
        alive = []
        for pid in marked_pids():
            try:
                with open(f"/proc/{pid}/stat") as fh:
                    stat = fh.read()
            except OSError:
                continue
            if stat[stat.rfind(")") + 2:].split()[0] != "Z":
                alive.append(pid)
        if not alive or time.monotonic() > deadline:
            return alive
        time.sleep(0.1)


@pytest.fixture(autouse=True)
def nothing_left_running():
    yield
    kill_marked()
    for path in glob.glob(os.path.join(tempfile.gettempdir(), "redteam20-*")) + glob.glob("/dev/shm/redteam20-*"):
        try:
            os.unlink(path)
        except OSError:
            pass


@pytest.fixture(autouse=True)
def key_dir(tmp_path, monkeypatch):
    """Run keys in a folder of this test, outside its run directory (as a user's cache is)."""
    folder = tmp_path / "keys"
    monkeypatch.setenv("PONYBENCH_KEY_DIR", str(folder))
    return folder


# --------------------------------------------------------------------------- the checks' way


def cell_workspace(parent: Path, add_py: str, name: str = CELL(0), **more: str) -> Path:
    ws = parent / name
    ws.mkdir(parents=True, exist_ok=True)
    (ws / "add.py").write_text(add_py)
    for rel, text in more.items():
        (ws / rel).write_text(text)
    return ws


def judged(ws: Path, code: str | dict = ADD_CHECK, reference: Path | None = None,
           timeout: float = CHECK_TIMEOUT) -> dict[str, checks.Verdict]:
    """The verdicts of a cell's checks on `ws`, run as the harness runs them."""
    axes = code if isinstance(code, dict) else {"correct": code}
    return checks.run_checks(axes, ws, "add.py", timeout, ignore=workspace.copy_ignore(ws), reference=reference)


def good_reference(tmp_path: Path) -> Path:
    ref = tmp_path / "reference" / CELL(0)
    ref.mkdir(parents=True)
    (ref / "add.py").write_text(GOOD_ADD["add.py"])
    return ref


def attacked(source: str) -> str:
    """A delivered add.py: a wrong add plus the attack (run when the check imports it)."""
    return BAD_ADD + textwrap.dedent(source)


def test_the_wrong_add_fails_its_check_when_nothing_attacks(tmp_path):
    """Control: the wrong add every forgery below starts from fails the check, and the good
    one passes, so a pass below is the attack's doing."""
    assert not judged(cell_workspace(tmp_path / "a", BAD_ADD))["correct"].ok
    assert judged(cell_workspace(tmp_path / "b", GOOD_ADD["add.py"]))["correct"].ok


# --------------------------------------------------------------------------- forged verdicts


@pytest.mark.xfail(strict=True, reason="values cross from the agent's code to the check as live objects: an "
                                       "__eq__ that says True passes any assert ==")
def test_a_lying_return_value_whose_eq_is_always_true_does_not_pass(tmp_path):
    """Attack: add returns an object whose __eq__ always says True (and __ne__ False), so the
    check's `add(2, 3) == 5` holds whatever the code computes. Promise: a verdict is forged
    by no value; values cross the boundary as data."""
    ws = cell_workspace(tmp_path, textwrap.dedent("""
        class Anything:
            def __eq__(self, other):
                return True
            def __ne__(self, other):
                return False
            __hash__ = object.__hash__
        def add(a, b):
            return Anything()
        """))
    assert not judged(ws)["correct"].ok


@pytest.mark.xfail(strict=True, reason="the agent's code shares the check's interpreter: patching json.dump "
                                       "rewrites the verdict the trusted side writes")
def test_patching_the_json_module_the_verdict_is_written_with_does_not_pass(tmp_path):
    """Attack: at import the delivered code wraps json.dump (the very module object
    checks.run_here writes its verdict with), turning any failed verdict into ok. It never
    touches the verdict file itself. Promise: the verdict comes from the trusted side only."""
    ws = cell_workspace(tmp_path, attacked("""
        import json
        _dump = json.dump
        def _forging_dump(obj, fh, *args, **kwargs):
            if isinstance(obj, dict) and obj.get("ok") is False:
                obj = {"ok": True, "reason": "ok"}
            return _dump(obj, fh, *args, **kwargs)
        json.dump = _forging_dump
        """))
    assert not judged(ws)["correct"].ok


@pytest.mark.xfail(strict=True, reason="the agent's code can walk up to the check's frame and rebind names in "
                                       "the check's own namespace between its lines")
def test_a_trace_function_on_the_check_s_frame_swapping_add_does_not_pass(tmp_path):
    """Attack: frame walking. At import the delivered code finds the `<check>` frame above it
    and sets a trace function on it; on the next line event it rebinds `add` in the check's
    globals to an honest function, so the assertion tests code the agent never delivered.
    Promise: the check's own logic and names are out of the agent's reach."""
    ws = cell_workspace(tmp_path, attacked("""
        import sys
        def _honest(a, b):
            return a + b
        _frame = sys._getframe()
        while _frame is not None and _frame.f_code.co_filename != "<check>":
            _frame = _frame.f_back
        def _tracer(frame, event, arg):
            if frame.f_globals.get("add") is not None and frame.f_globals["add"] is not _honest:
                frame.f_globals["add"] = _honest
            return _tracer
        if _frame is not None:
            sys.settrace(lambda *args: None)
            _frame.f_trace = _tracer
        """))
    assert not judged(ws)["correct"].ok


@pytest.mark.xfail(strict=True, reason="the agent's code shares the check's builtins: builtins.all patched to "
                                       "True passes every all(...) assertion")
def test_overriding_a_builtin_the_check_uses_does_not_pass(tmp_path):
    """Attack: the check asserts `all(...)` over many inputs, a common idiom; the delivered
    code replaces builtins.all with a function that always says True. Promise: trusted check
    logic runs with trusted builtins."""
    code = 'add = find_function(load(FILE), "add")\nassert all(add(i, i) == 2 * i for i in range(1, 9)), "add(i, i) != 2i"\n'
    ws = cell_workspace(tmp_path, attacked("""
        import builtins
        builtins.all = lambda iterable: True
        """))
    assert not judged(ws, code)["correct"].ok


@pytest.mark.xfail(strict=True, reason="checklib is a module of the check's interpreter: replacing "
                                       "run_named_checks skips every @check")
def test_replacing_run_named_checks_through_sys_modules_does_not_pass(tmp_path):
    """Attack: the task's assertions live in named checks (`@check`), run after the check code
    by checklib.run_named_checks; the delivered code, imported by the check code, replaces that
    function through sys.modules with one that does nothing. Promise: no named check is
    skipped by the code under test."""
    code = ('mod = load(FILE)\n\n@check\ndef adds_two_numbers():\n'
            '    assert find_function(mod, "add")(2, 3) == 5, "add(2, 3) is not 5"\n')
    ws = cell_workspace(tmp_path, attacked("""
        import sys
        sys.modules["pytest_ponybench.checklib"].run_named_checks = lambda: None
        """))
    verdict = judged(ws, code)["correct"]
    assert not verdict.ok and verdict.check == "adds_two_numbers", verdict


@pytest.mark.xfail(strict=True, reason="gc.get_objects() hands the agent's code the check's namespace dict, and "
                                       "find_function in it is replaced")
def test_finding_the_check_namespace_through_gc_does_not_pass(tmp_path):
    """Attack: through gc the delivered code finds the dict the check code runs in (its
    `__name__` is `__ponybench_check__`) and replaces `find_function` in it, so the check's
    next line picks up an honest add the agent never delivered. Promise: the check's namespace
    is out of the agent's reach."""
    code = 'mod = load(FILE)\nadd = find_function(mod, "add")\nassert add(2, 3) == 5, "add(2, 3) is not 5"\n'
    ws = cell_workspace(tmp_path, attacked("""
        import gc
        def _honest(a, b):
            return a + b
        for _obj in gc.get_objects():
            if isinstance(_obj, dict) and _obj.get("__name__") == "__ponybench_check__" and "find_function" in _obj:
                _obj["find_function"] = lambda module, *names: _honest
        """))
    assert not judged(ws, code)["correct"].ok


@pytest.mark.xfail(strict=True, reason="the check can open its supervisor's status pipe through /proc/<ppid>/fd "
                                       "and write a verdict line that is read before the real one")
def test_writing_a_forged_report_into_the_supervisor_s_status_pipe_does_not_pass(tmp_path):
    """Attack: the supervisor reports each check to the harness as one JSON line on a pipe.
    The delivered code opens that pipe's write end through /proc/<its parent>/fd (every pipe
    of the supervisor but its standard streams), writes a report of a passed check, and dies
    without a verdict. Promise: only the trusted side speaks for a check."""
    ws = cell_workspace(tmp_path, attacked("""
        import json, os
        _forged = json.dumps({"code": 0, "timed_out": False, "result": {"ok": True, "reason": "ok"}, "tail": ""})
        _parent = os.getppid()
        _streams = set()
        for _fd in ("0", "1", "2"):
            try:
                _streams.add(os.readlink(f"/proc/{_parent}/fd/{_fd}"))
            except OSError:
                pass
        for _fd in os.listdir(f"/proc/{_parent}/fd"):
            try:
                _target = os.readlink(f"/proc/{_parent}/fd/{_fd}")
            except OSError:
                continue
            if not _target.startswith("pipe:") or _target in _streams:
                continue
            try:
                _w = os.open(f"/proc/{_parent}/fd/{_fd}", os.O_WRONLY | os.O_NONBLOCK)
            except OSError:
                continue
            try:
                os.write(_w, (_forged + "\\n").encode())
            except OSError:
                pass
            os.close(_w)
        os._exit(1)
        """))
    assert not judged(ws)["correct"].ok


DIFFERENTIAL_CHECK = ('add = find_function(load(FILE), "add")\nref = find_function(load_reference(), "add")\n'
                      'differential(add, ref, st.integers(), st.integers(), examples=25)\n')


def test_control_a_differential_check_catches_the_wrong_add(tmp_path):
    """Control for the reference attacks: against the good reference, the wrong add fails."""
    ws = cell_workspace(tmp_path / "cell", BAD_ADD)
    assert not judged(ws, DIFFERENTIAL_CHECK, reference=good_reference(tmp_path))["correct"].ok


@pytest.mark.xfail(strict=True, reason="checklib.REFERENCE is writable by the agent's code: pointed at its own "
                                       "workspace, the differential compares the agent with itself")
def test_pointing_the_reference_at_the_delivered_code_does_not_pass(tmp_path):
    """Attack: monkeypatching the reference. The delivered code sets checklib.REFERENCE to its
    own workspace before the check loads the reference, so the differential check compares the
    wrong add with itself. Promise: the reference a check compares with is the task's."""
    ws = cell_workspace(tmp_path / "cell", attacked("""
        import sys
        _lib = sys.modules["pytest_ponybench.checklib"]
        _lib.REFERENCE = _lib.WORKSPACE
        """))
    assert not judged(ws, DIFFERENTIAL_CHECK, reference=good_reference(tmp_path))["correct"].ok


@pytest.mark.xfail(strict=True, reason="the good reference's copy is readable by the agent's code, which can "
                                       "import it and return its answers")
def test_delivered_code_that_answers_with_the_good_reference_read_from_disk_does_not_pass(tmp_path):
    """Attack: the delivered add does no work of its own: it finds the good reference the
    harness copied for the check (next to the check's copy, under the same temporary folder)
    and returns its answers. Promise: the agent's code cannot see the answer key."""
    ws = cell_workspace(tmp_path / "cell", textwrap.dedent("""
        import glob, importlib.util, os, tempfile
        def _stolen():
            here = os.getcwd()
            patterns = [os.path.join(os.path.dirname(os.path.dirname(here)), "*", "reference", "*", "add.py"),
                        os.path.join(tempfile.gettempdir(), "ponybench-*", "*", "reference", "*", "add.py")]
            for pattern in patterns:
                for path in glob.glob(pattern):
                    spec = importlib.util.spec_from_file_location("stolen_reference", path)
                    module = importlib.util.module_from_spec(spec)
                    spec.loader.exec_module(module)
                    return module.add
            return None
        def add(a, b):
            honest = _stolen()
            return honest(a, b) if honest else a - b
        """))
    assert not judged(ws, DIFFERENTIAL_CHECK, reference=good_reference(tmp_path))["correct"].ok


def a_task(tmp_path: Path, checks_code: str, refs: bool = True) -> TaskSpec:
    from pytest_ponybench.spec import Refs

    return TaskSpec(name="add", path=tmp_path / "add.yaml", prompt="Write add(a, b) in add.py.", file="add.py",
                    seed={"add.py": "def add(a, b):\n    raise NotImplementedError\n"},
                    checks={"correct": checks_code},
                    refs=Refs(good=GOOD_ADD, bad={"add.py": BAD_ADD}, axis="correct") if refs else None)


@pytest.mark.xfail(strict=True, reason="the master copy of the good reference (one per process, under /tmp) is "
                                       "writable by any check: one cell's code rewrites it for every later cell")
def test_rewriting_the_process_s_master_reference_does_not_fail_later_cells(tmp_path):
    """Attack: the harness seeds the good reference once per process and task
    (cell.reference_workspace) and copies it for each check. Cell 0's delivered code finds
    that master copy under the temporary folder and writes its own wrong add into it: from
    then on a correct cell disagrees with the "reference" and fails, and its own arm's later
    wrong cells pass. Promise: a cell never touches another cell's verdict."""
    task = a_task(tmp_path, DIFFERENTIAL_CHECK)
    cell._references.pop((task.name, task.spec_hash), None)
    master = cell.reference_workspace(task)
    try:
        attacker = cell_workspace(tmp_path / "runs", attacked(f"""
            import glob, os, tempfile
            for _path in glob.glob(os.path.join(tempfile.gettempdir(), "ponybench-reference-add-*", "reference", "add.py")):
                try:
                    with open(_path, "w") as _fh:
                        _fh.write({BAD_ADD!r})
                except OSError:
                    pass
            """), name=CELL(0))
        judged(attacker, DIFFERENTIAL_CHECK, reference=master)
        honest = cell_workspace(tmp_path / "runs", GOOD_ADD["add.py"], name=CELL(1))
        assert judged(honest, DIFFERENTIAL_CHECK, reference=master)["correct"].ok
    finally:
        (master / "add.py").write_text(GOOD_ADD["add.py"])
        cell._references.pop((task.name, task.spec_hash), None)


def test_printing_a_verdict_and_exiting_0_early_does_not_pass(tmp_path):
    """Attack: the delivered code prints what a verdict looks like on the check's stdout and
    stderr and leaves with os._exit(0) before any assertion runs. Promise: the verdict comes
    from the trusted side, never from the output or the exit code."""
    ws = cell_workspace(tmp_path, attacked("""
        import os, sys
        _line = '{"ok": true, "reason": "ok"}\\n'
        sys.stdout.write(_line)
        sys.stdout.flush()
        os.write(2, _line.encode())
        os._exit(0)
        """))
    verdict = judged(ws)["correct"]
    assert not verdict.ok and "without a verdict" in verdict.reason, verdict


def test_an_atexit_handler_and_exit_0_do_not_pass(tmp_path):
    """Attack: the delivered code registers an atexit handler that prints a passing verdict and
    exits 0, then calls sys.exit(0) from the import. Promise: no handler of the agent's runs
    after the check, and an exit is a failure, never a pass."""
    ws = cell_workspace(tmp_path, attacked("""
        import atexit, os, sys
        atexit.register(lambda: (sys.stdout.write('{"ok": true, "reason": "ok"}\\n'), os._exit(0)))
        sys.exit(0)
        """))
    verdict = judged(ws)["correct"]
    assert not verdict.ok and "exit(0)" in verdict.reason, verdict


@pytest.mark.xfail(strict=True, reason="every axis's copy is made before the first check runs, side by side: the "
                                       "correct check's code rewrites the safe axis's copy")
def test_the_code_run_by_one_axis_does_not_rewrite_the_next_axis_s_copy(tmp_path):
    """Attack: run_checks copies the workspace once per axis into sibling folders before the
    first check runs. While the `correct` check imports it, the wrong add rewrites itself in
    the `safe` axis's copy (../../1/<cell>/add.py) with an honest one, so the safe verdict is
    forged although the delivered code is wrong. Promise (run_checks' own docstring): neither
    a check nor the code it runs can touch the other axis."""
    ws = cell_workspace(tmp_path, attacked(f"""
        import os
        _here = os.getcwd()
        _mine = os.path.basename(os.path.dirname(_here))
        for _other in os.listdir(os.path.dirname(os.path.dirname(_here))):
            _target = os.path.join(os.path.dirname(os.path.dirname(_here)), _other, os.path.basename(_here), "add.py")
            if _other != _mine and os.path.exists(_target):
                with open(_target, "w") as _fh:
                    _fh.write({GOOD_ADD["add.py"]!r})
        """))
    verdicts = judged(ws, {"correct": ADD_CHECK, "safe": ADD_CHECK})
    assert not verdicts["correct"].ok
    assert not verdicts["safe"].ok, "the safe verdict was forged by the code the correct check ran"


@pytest.mark.xfail(strict=True, reason="check.load() resolves links: add.py linked to another cell's passed code "
                                       "passes as this cell's")
def test_a_link_to_another_cell_s_passed_code_does_not_pass_as_this_cell_s(tmp_path):
    """Attack: the agent delivers no code of its own: add.py is an absolute link to a finished
    cell's add.py in the same run directory. The check's copy keeps the link and the check's
    load() follows it. Promise: a cell is judged on what it delivered; it cannot borrow another
    cell's verdict (the check sees only its own cell)."""
    run = tmp_path / "runs" / "stamp"
    other = cell_workspace(run, GOOD_ADD["add.py"], name=CELL(1))
    ws = run / CELL(0)
    ws.mkdir()
    (ws / "add.py").symlink_to(other / "add.py")
    assert not judged(ws)["correct"].ok
