"""Attacks on the trust boundary between a check and the agent's code (remote.py, issue 20
item 1). Each is delivered code, written as a hostile agent would, for a task whose honest
answer it does not give: every attack must end with a failing verdict written by the check's
own process, never a forged pass. A control beside them shows the same check passes honest
code, so a failure here is the attack's, not a broken check's."""
from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from pytest_ponybench.scoring import checks

# The check every attack faces: `add` must add. Its message is the reason when it fails.
CHECK = """
add = find_function(load(FILE), "add")

@check
def adds():
    assert add(2, 3) == 5, "add(2, 3) is not 5"
    assert add(-1, 1) == 0, "add(-1, 1) is not 0"
"""

# A check that reads a refusal as fine, the way many differential checks do.
TOLERANT_CHECK = """
add = find_function(load(FILE), "add")
for a, b in [(2, 3), (10, 20)]:
    try:
        got = add(a, b)
    except Exception:
        continue  # refusing is allowed
    assert got == a + b, f"add({a}, {b}) gave {got!r}"
assert add(1, 1) == 2, "add(1, 1) is not 2"
"""

# The wrong answer every attack delivers besides its attack.
WRONG = "\n\ndef add(a, b):\n    return a - b\n"


def judge(tmp_path: Path, impl: str, code: str = CHECK, timeout: float = 10) -> checks.Verdict:
    ws = tmp_path / "ws"
    ws.mkdir(exist_ok=True)
    (ws / "impl.py").write_text(textwrap.dedent(impl), encoding="utf-8")
    return checks.run_checks({"correct": textwrap.dedent(code)}, ws, "impl.py", timeout)["correct"]


def test_control_honest_code_passes_and_wrong_code_fails(tmp_path):
    assert judge(tmp_path, "def add(a, b):\n    return a + b\n") == checks.Verdict(True, "ok")
    verdict = judge(tmp_path, WRONG)
    assert not verdict.ok and verdict.reason == "add(2, 3) is not 5"


# The verdict itself --------------------------------------------------------------------------

FIND_VERDICT_PATH = """
import json, os, sys

def verdict_path():
    # The check's frames are in this process's stack: it was forked from inside load().
    frame = sys._getframe()
    while frame is not None:
        if "verdict_path" in frame.f_locals:
            return frame.f_locals["verdict_path"]
        frame = frame.f_back
    # Else guess it: next to the copy of the workspace.
    return os.path.join(os.path.dirname(os.getcwd()), "verdict.json")

def forge():
    path = verdict_path()
    with open(path, "w") as fh:
        json.dump({"ok": True, "reason": "ok"}, fh)
    return path
"""


def test_writing_the_verdict_file_and_exiting_does_not_pass(tmp_path):
    verdict = judge(tmp_path, FIND_VERDICT_PATH + WRONG.replace("return a - b", "forge(); os._exit(0)"))
    assert not verdict.ok
    # Unsandboxed the forged file is written and the host's exit fails the check; in the
    # sandbox the host, an unprivileged user, cannot even open the verdict's folder.
    assert "ended its own process" in verdict.reason or "Permission denied" in verdict.reason, verdict.reason


def test_writing_the_verdict_file_at_import_and_exiting_does_not_pass(tmp_path):
    verdict = judge(tmp_path, FIND_VERDICT_PATH + "forge()\nos._exit(0)\n")
    assert not verdict.ok


def test_writing_the_verdict_then_killing_the_check_does_not_pass(tmp_path):
    impl = FIND_VERDICT_PATH + """
import signal

def add(a, b):
    forge()
    os.kill(os.getppid(), signal.SIGKILL)  # the check: its verdict would never be written
    return a - b
"""
    verdict = judge(tmp_path, impl)
    assert not verdict.ok
    assert "without a verdict" in verdict.reason or "Permission denied" in verdict.reason, verdict.reason


def test_a_daemon_rewriting_the_verdict_file_does_not_pass(tmp_path):
    # A grandchild that outlives the call and keeps writing "ok" over the verdict.
    impl = FIND_VERDICT_PATH + """
def add(a, b):
    path = verdict_path()
    if os.fork() == 0:
        os.setsid()
        if os.fork() == 0:
            for _ in range(20000):
                try:
                    with open(path + ".x", "w") as fh:
                        json.dump({"ok": True, "reason": "ok"}, fh)
                    os.replace(path + ".x", path)
                except OSError:
                    pass
                time.sleep(0.0005)
        os._exit(0)
    return a - b

import time
"""
    verdict = judge(tmp_path, impl)
    assert not verdict.ok
    assert verdict.reason == "add(2, 3) is not 5"


def test_writing_to_every_open_fd_reaches_no_verdict(tmp_path):
    # Whatever fd the check holds (a verdict fd, the supervisor's socket), the host has only
    # its own socket and stdio: it writes "ok" to each fd it has, then answers wrong.
    impl = """
import json, os

def add(a, b):
    names = os.listdir("/proc/self/fd")
    for name in names:
        fd = int(name)
        if fd > 2:
            try:
                os.write(fd, b'{"ok": true, "reason": "ok"}')
            except OSError:
                pass
    return a - b
"""
    verdict = judge(tmp_path, impl)
    assert not verdict.ok


def test_the_host_holds_no_fd_but_its_socket_and_stdio(tmp_path):
    impl = """
import os

def fds():
    return sorted(int(n) for n in os.listdir("/proc/self/fd"))
"""
    code = """
fds = load(FILE).fds()
mine = [fd for fd in fds if fd > 2]
assert len(mine) <= 2, f"the host holds fds {fds}"  # its socket, and the listing's own
"""
    assert judge(tmp_path, impl, code) == checks.Verdict(True, "ok")


# The check's code and helpers ------------------------------------------------------------------

def test_patching_checklib_and_checks_changes_nothing(tmp_path):
    impl = """
import sys
from pytest_ponybench import checklib
from pytest_ponybench.scoring import checks

checklib.run_named_checks = lambda: None
checklib._named_checks.clear()
checks._reason = lambda exc: "ok"
for module in list(sys.modules.values()):
    if getattr(module, "__name__", "").startswith("pytest_ponybench"):
        for name in ("differential", "check", "same_value"):
            if hasattr(module, name):
                setattr(module, name, lambda *a, **k: None)
""" + WRONG
    verdict = judge(tmp_path, impl)
    assert verdict == checks.Verdict(False, "add(2, 3) is not 5", "adds")


def test_raising_system_exit_in_a_call_does_not_pass(tmp_path):
    verdict = judge(tmp_path, "def add(a, b):\n    raise SystemExit(0)\n", TOLERANT_CHECK)
    assert not verdict.ok
    assert "exit(0)" in verdict.reason


def test_os_exit_in_a_call_is_no_refusal(tmp_path):
    # The tolerant check reads an exception as a refusal; a host gone is not one.
    verdict = judge(tmp_path, "import os\ndef add(a, b):\n    os._exit(0)\n", TOLERANT_CHECK)
    assert not verdict.ok
    assert "ended its own process (exit code 0)" in verdict.reason


def test_killing_its_own_host_mid_call_does_not_pass(tmp_path):
    impl = "import os, signal\ndef add(a, b):\n    os.kill(os.getpid(), signal.SIGKILL)\n"
    verdict = judge(tmp_path, impl, TOLERANT_CHECK)
    assert not verdict.ok
    assert "signal 9" in verdict.reason


def test_overriding_builtins_and_assertion_error_changes_nothing(tmp_path):
    impl = """
import builtins

class Never(Exception):
    pass

builtins.AssertionError = Never
builtins.isinstance = lambda *a: True
builtins.len = lambda x: 0
builtins.print = lambda *a, **k: None
""" + WRONG
    verdict = judge(tmp_path, impl)
    assert not verdict.ok  # the check's own reason, or the host broken by its own isinstance
    assert verdict.reason in ("add(2, 3) is not 5", "the code under test ended its own process (exit code 70) "
                                                     "during a call from the check")


def test_walking_gc_and_frames_reaches_only_copies(tmp_path):
    impl = """
import gc, sys

def add(a, b):
    # Every check function the garbage collector knows, and every frame: make them no-ops.
    for obj in gc.get_objects():
        if callable(obj) and getattr(obj, "__name__", "") in ("adds", "run_named_checks", "run_here"):
            try:
                obj.__code__ = (lambda: None).__code__
            except Exception:
                pass
        if isinstance(obj, list):
            for item in list(obj):
                if getattr(item, "__name__", "") == "adds":
                    obj.clear()
    frame = sys._getframe()
    while frame is not None:
        frame.f_globals.pop("adds", None)
        frame = frame.f_back
    return a - b
"""
    verdict = judge(tmp_path, impl)
    assert verdict == checks.Verdict(False, "add(2, 3) is not 5", "adds")


def test_a_callback_gives_no_way_into_the_check(tmp_path):
    # The check hands a callable over; the agent's code tries to climb from it to the check's
    # globals, to set attributes on it, and to call operations the boundary does not offer.
    impl = """
def add(a, b, log=None):
    tries = []
    for name in ("__globals__", "__code__", "__self__", "_private", "__class__"):
        try:
            tries.append(getattr(log, name))
        except Exception as exc:
            tries.append(type(exc).__name__)
    try:
        log.result = "ok"
    except Exception as exc:
        tries.append(type(exc).__name__)
    try:
        tries.append(log._endpoint.request("setattr", log._id, "ok", True))
    except Exception as exc:
        tries.append(type(exc).__name__)
    try:
        tries.append(log._endpoint.request("patched", None, "pytest_ponybench.checklib", "run_named_checks", [], {}))
    except Exception as exc:
        tries.append(type(exc).__name__)
    log(str(tries))
    return a - b
"""
    code = """
seen = []
def log(text):
    seen.append(text)
add = find_function(load(FILE), "add")
assert add(2, 3, log=log) == 5, f"add(2, 3) is not 5 ({seen})"
"""
    verdict = judge(tmp_path, impl, code)
    assert not verdict.ok
    assert verdict.reason.startswith("add(2, 3) is not 5")
    assert "function" not in verdict.reason.split("(", 2)[-1].replace("__class__", "")


# Hostile values --------------------------------------------------------------------------------

def test_an_object_whose_eq_always_says_true_is_not_equal(tmp_path):
    impl = """
class Yes:
    def __eq__(self, other):
        return True
    def __ne__(self, other):
        return False
    __hash__ = object.__hash__

def add(a, b):
    return Yes()
"""
    verdict = judge(tmp_path, impl)
    assert not verdict.ok


def test_an_int_subclass_that_lies_crosses_as_its_value(tmp_path):
    impl = """
class Liar(int):
    def __eq__(self, other):
        return True
    __hash__ = int.__hash__

def add(a, b):
    return Liar(a - b)
"""
    verdict = judge(tmp_path, impl)
    assert verdict == checks.Verdict(False, "add(2, 3) is not 5", "adds")


def test_a_repr_that_loops_ends_in_a_timeout_not_a_pass(tmp_path):
    impl = """
class Loop:
    def __repr__(self):
        while True:
            pass
    __str__ = __repr__

def add(a, b):
    return Loop()
"""
    code = """
add = find_function(load(FILE), "add")
got = add(2, 3)
assert got == 5, f"add(2, 3) gave {got!r}"
"""
    verdict = judge(tmp_path, impl, code, timeout=3)
    assert not verdict.ok
    assert "timed out" in verdict.reason


def test_a_bool_that_raises_or_lies_about_its_type_fails(tmp_path):
    impl = """
class Odd:
    def __bool__(self):
        return "yes"

def add(a, b):
    return Odd()
"""
    code = """
add = find_function(load(FILE), "add")
assert add(2, 3), "add(2, 3) is falsy"
"""
    assert not judge(tmp_path, impl, code).ok


def test_a_huge_value_is_refused_at_the_boundary(tmp_path):
    impl = "def add(a, b):\n    return 'x' * (48 * 1024 * 1024)\n"
    verdict = judge(tmp_path, impl, TOLERANT_CHECK)
    assert not verdict.ok
    assert "over the boundary's limit" in verdict.reason


def test_a_deeply_nested_value_fails(tmp_path):
    impl = """
def add(a, b):
    value = []
    for _ in range(100000):
        value = [value]
    return value
"""
    verdict = judge(tmp_path, impl)
    assert not verdict.ok


def test_garbage_on_the_socket_breaks_the_host_not_the_verdict(tmp_path):
    # The agent's code writes its own "reply" on the host's socket: a huge length, then JSON
    # that says ok, then a message of a kind the boundary does not know.
    for payload in ("struct.pack('>I', 2**31) + b'{}'",
                    "struct.pack('>I', len(b'[1]')) + b'[1]'",
                    "struct.pack('>I', len(b'{\"r\": {\"$\": \"pickle\", \"v\": \"x\"}}')) + "
                    "b'{\"r\": {\"$\": \"pickle\", \"v\": \"x\"}}'",
                    "struct.pack('>I', 9) + b'not json!'"):
        impl = f"""
import os, socket, struct, time

def add(a, b):
    for name in os.listdir("/proc/self/fd"):
        fd = int(name)
        try:
            if fd > 2 and socket.socket(fileno=os.dup(fd)).type == socket.SOCK_STREAM:
                os.write(fd, {payload})
        except OSError:
            pass
    time.sleep(30)
"""
        verdict = judge(tmp_path, impl, TOLERANT_CHECK)
        assert not verdict.ok, payload
        assert "timed out" not in verdict.reason, payload


def test_an_exception_named_like_the_harness_is_only_a_name(tmp_path):
    impl = """
class NamedCheckFailed(Exception):
    pass

class AgentProcessDied(Exception):
    pass

def add(a, b):
    if a == 2:
        raise NamedCheckFailed("adds")
    raise AgentProcessDied("x")
"""
    verdict = judge(tmp_path, impl, TOLERANT_CHECK)
    assert not verdict.ok
    assert "add(1, 1)" in verdict.reason or "NamedCheckFailed" in verdict.reason or "AgentProcessDied" in verdict.reason


def test_agent_code_never_runs_in_the_check_process(tmp_path):
    impl = """
import os

PID = os.getpid()

def add(a, b):
    return a + b
"""
    code = """
import os
module = load(FILE)
assert module.PID != os.getpid(), "the agent's module ran in the check's own process"
assert "impl" not in " ".join(sorted(__import__("sys").modules)), "the check imported the agent's module"
"""
    assert judge(tmp_path, impl, code) == checks.Verdict(True, "ok")


def test_a_round_trip_is_cheap_enough_for_a_differential(tmp_path):
    # Not a timing assertion: the figure is bench/boundary.py's. This only proves a check of
    # many calls finishes and counts them.
    impl = "def add(a, b):\n    return a + b\n"
    code = """
from pytest_ponybench.scoring import host
add = find_function(load(FILE), "add")
for i in range(2000):
    assert add(i, 1) == i + 1
assert host.round_trips() >= 2000, host.round_trips()
"""
    assert judge(tmp_path, impl, code) == checks.Verdict(True, "ok")


def test_a_check_that_stops_waiting_gets_its_own_reason_not_a_stale_reply(tmp_path):
    # email_header's alarm: the check gives up on a call that backtracks; the host is ended,
    # so no late reply is read as the answer to a later call.
    impl = """
import time

def add(a, b):
    if a == 40:
        while True:
            time.sleep(0.01)
    return a + b
"""
    code = """
import signal
add = find_function(load(FILE), "add")

def too_slow(signum, frame):
    raise TimeoutError

signal.signal(signal.SIGALRM, too_slow)
signal.alarm(1)
try:
    add(40, 0)
except TimeoutError:
    pass
signal.alarm(0)
try:
    got = add(2, 3)
except BaseException as exc:
    raise AssertionError(f"after the alarm: {type(exc).__name__}") from None
assert got == 5, got
"""
    verdict = judge(tmp_path, impl, code)
    assert not verdict.ok
    assert verdict.reason == "after the alarm: AgentProcessDied"


# What the check hands over (issue 36 item 2) ---------------------------------------------------

def test_a_path_the_check_hands_over_is_refused_not_read_through(tmp_path):
    # The red team's attack: a path's methods ran in the check's process, which sees the
    # reference's copy (here a file of answers that only the check keeps), so wrong code read
    # the answer through the path it was given and passed.
    impl = """
def add(a, b, where=None):
    return int(where.with_name("answers.txt").read_text())
"""
    code = """
import tempfile
kept = Path(tempfile.mkdtemp(prefix="ponybench-answers-"))
(kept / "answers.txt").write_text("5")
add = find_function(load(FILE), "add")
assert add(2, 3, kept / "input.txt") == 5, "add(2, 3) is not 5"
"""
    verdict = judge(tmp_path, impl, code)
    assert not verdict.ok
    assert "handed the agent's code a PosixPath (PosixPath('" in verdict.reason, verdict.reason
    assert verdict.reason.endswith("pass str(path) and read the file inside the check"), verdict.reason


@pytest.mark.parametrize("handed, named, instead", [
    ("open(FILE)", "a TextIOWrapper (<_io.TextIOWrapper name='impl.py'", "pass its contents"),
    ("os", "a module (<module 'os'", "pass the values the agent's code needs"),
    ("open", "a builtin_function_or_method (<built-in function open>)", "pass a function written in the check's code"),
    # a lambda the check's code did not write (a library's): its body is not the check's to vouch for
    ("eval('lambda path: open(path).read()')", "a function (<function <lambda> at ", "pass a function written"),
], ids=["open file", "module", "builtin function", "lambda of a library"])
def test_an_object_of_the_checks_side_is_refused_naming_it_whatever_the_check_catches(tmp_path, handed, named, instead):
    # Honest code, and a check that reads an error as a refusal: the check still fails, with
    # the sentence, because what it handed over would run in its own process.
    impl = "def add(a, b, extra=None):\n    return a + b\n"
    code = f"""
import os
add = find_function(load(FILE), "add")
try:
    add(2, 3, {handed})
except Exception:
    pass
assert add(2, 3) == 5, "add(2, 3) is not 5"
"""
    verdict = judge(tmp_path, impl, code)
    assert not verdict.ok, verdict
    assert f"the check handed the agent's code {named}" in verdict.reason, verdict.reason
    assert instead in verdict.reason, verdict.reason


def test_a_stub_giving_back_a_path_fails_the_check_though_the_agents_code_catches_it(tmp_path):
    impl = """
def add(a, b, where=None):
    try:
        where().read_text()
    except Exception:
        pass
    return a + b
"""
    code = """
add = find_function(load(FILE), "add")
assert add(2, 3, lambda: Path(FILE)) == 5, "add(2, 3) is not 5"
"""
    verdict = judge(tmp_path, impl, code)
    assert not verdict.ok
    assert verdict.reason.startswith("the check handed the agent's code a PosixPath (PosixPath('impl.py'))"), verdict.reason


def test_plain_data_and_the_checks_own_stubs_still_cross(tmp_path):
    impl = """
def add(a, b, data=None, clock=None, gateway=None, Gateway=None, events=None):
    assert data == {"n": [1, 2.5, "x", b"y", (None, True)], "s": {1, 2}}, data
    assert clock() == 10.0
    assert gateway.charge("tok", 5) == "tx-1" and gateway.name == "g"
    assert Gateway("again").charge("t", 1) == "tx-1"
    assert list(gateway) == [("tok", 5)] and list(events()) == [1, 2]
    return a + b
"""
    code = """
now = [10.0]

class Gateway:
    def __init__(self, name="g"):
        self.name, self.calls = name, []
    def charge(self, token, cents):
        self.calls.append((token, cents))
        return f"tx-{len(self.calls)}"
    def __iter__(self):
        return iter(self.calls)

def events():
    yield 1
    yield 2

gateway = Gateway()
add = find_function(load(FILE), "add")
data = {"n": [1, 2.5, "x", b"y", (None, True)], "s": {1, 2}}
assert add(2, 3, data, lambda: now[0], gateway, Gateway, events) == 5, "add(2, 3) is not 5"
assert gateway.calls == [("tok", 5)], gateway.calls
"""
    assert judge(tmp_path, impl, code) == checks.Verdict(True, "ok")
