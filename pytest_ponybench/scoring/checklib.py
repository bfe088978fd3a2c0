"""The helper API a task's check code sees.

A check is Python code in the task YAML. It runs in its own child process with the
workspace as working directory; every name below is already in its namespace (no import
needed). A check passes when it runs to the end and fails on the first exception; the
message of an `assert` becomes the cell's failure reason, so write it for a human:

    upload = load(FILE)
    save = find_function(upload, "save_upload", "save", "store")
    assert save("a.txt", b"x").endswith("a.txt"), "saving a plain name failed"

Names:
- `WORKSPACE` (Path) and `FILE` (the task's entry file, relative, or None); `Path`
- `load(path, name=None)`: import a file of the workspace as a fresh module (a new name each
  call, so two loads never share state)
- `find_function(module, *names)`: the first callable attribute among `names`
- `find_class(module, method)`: the first class defined in the module with that method
- `free_port()`: a TCP port on 127.0.0.1 nobody listens on
- `start_process(argv, port=None, timeout=10, env=None)`: start a program (e.g. the agent's
  `node server.js`) and, with `port`, wait until it accepts connections; it is killed when the
  check ends, with everything it started
- `wait_port(port, timeout=10, process=None)`: wait for a listener on 127.0.0.1:port
- `http(method, url, body=None, headers=None, timeout=5)`: `(status, headers, body bytes)`;
  an HTTP error status is returned, not raised
- the hostile-input batteries of `batteries.py` (`check_path_containment`,
  `check_archive_entries`, `check_sql_lookup`, `check_shell_injection`,
  `check_header_injection`, `check_html_contexts`, and their payload lists)
- `notes_app_regressions(ordered=True, server=True)`: re-test the notes-app fixture's existing
  behaviour (see regressions.py), for fixture tasks
- `check_app_tests(timeout=25)`: fail unless the workspace's own unittest suite passes

Following the ticket rather than a list of payloads (docs/writing-tasks.md):
- `@check`: a named check. A function of the check code decorated with `@check` runs after
  the code itself, in order; the first that fails fails the axis, and the verdict names it.
  A task's `review:` lines name the checks that cover them (`safe.keyed_on_the_client`).
- `load_reference(path=FILE)`: the task's good reference (`refs.good`), imported from its own
  copy, for differential checks
- `differential(delivered, reference, *strategies, examples=150, same=None, what=None)`: call
  both on the same generated arguments (Hypothesis, derandomized: the same code always gets
  the same verdict) and fail on the first disagreement, shrunk to the plainest input: a
  different value or type, or one refusing (raising) where the other does not
- `inputs`: one strategy per input class (inputs.py): `inputs.text()`, `inputs.ip_address()`,
  `inputs.decimal_amount()`, `inputs.binary()`, `inputs.csv_field()`, ...; `st`: Hypothesis's
  strategies
- the environment as an input: `time_zone(name)` (and `TIME_ZONES`, far from UTC both ways),
  `fake_clock(start)` (time.time, time.monotonic and datetime.now move only when the check
  says `clock.advance(seconds)`), `elsewhere()` (another working directory, non-ASCII),
  `non_ascii_copy()` (the workspace copied under a non-ASCII path; `load(path, root=...)`)
- behaviour over time: `entries_held(value)` counts what a value holds (its containers' lengths
  and those inside them, an object's attributes, a functools cache's size), for a bound on state
  that must not grow with every call
- entry points as a user would run them: `find_class(module, method, *names)` (the class the
  ticket names first), `find_programs(language, hint)` (`python -m package`, scripts with a
  shebang and no `.py`, `node` entry files and the modules that start a server)

This module is the API's one face (task code also reads `checklib.WORKSPACE`, `checklib.REFERENCE`,
...); what host.py, remote.py and regressions.py need lives below it, so nothing imports back up:
check_state.py (where the check runs), check_clock.py (the fake clock), check_boundary.py
(reaching the agent's code and programs), remote.py (the trust boundary's protocol) and host.py
(the host processes where the agent's code runs).
"""
from __future__ import annotations

import contextlib
import copy
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from decimal import Decimal
from pathlib import Path

from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from pytest_ponybench.scoring import batteries, check_state, host, inputs
# What the check code sees, made in the modules below (which regressions.py uses too):
from pytest_ponybench.scoring.check_boundary import (_STARTERS, _agent_child, _in_the_check, _preexec,
                                                     _processes, _ProgramOfTheCheck, _untrusted_child,
                                                     agent_module, by_reference, find_class, find_function,
                                                     free_port, guard_programs, http, load, record_calls,
                                                     start_process, subclass, wait_port)
from pytest_ponybench.scoring.check_clock import (_REAL_DATE, _REAL_DATETIME, Clock, FakeDate, FakeDatetime,
                                                  fake_clock)  # noqa: F401
from pytest_ponybench.scoring.regressions import notes_app_regressions
from pytest_ponybench.scoring.host import _counter, load_here  # noqa: F401

# Where the check runs (WORKSPACE, REFERENCE, BEHIND_BOUNDARY, CHECK_GLOBALS) lives in
# check_state, which checks.run_here and host.start_host set at run time: a copy here would
# keep the value of the day it was made, so `checklib.WORKSPACE` (task code reads it) reads
# check_state's through this. Set them there, not here.
_STATE = ("WORKSPACE", "REFERENCE", "BEHIND_BOUNDARY", "CHECK_GLOBALS")


def __getattr__(name: str):
    if name in _STATE:
        return getattr(check_state, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


# Named checks ---------------------------------------------------------------------------

_named_checks: list = []


def check(function):
    """Register `function` as a named check of this axis (run after the check code, in order)."""
    _named_checks.append(function)
    return function


def run_named_checks() -> None:
    """Run the registered checks in order; the first failure names its check (checks.run_here)."""
    for function in list(_named_checks):
        try:
            function()
        except NamedCheckFailed:
            raise
        except BaseException as exc:
            raise NamedCheckFailed(function.__name__, exc) from exc


class NamedCheckFailed(Exception):
    def __init__(self, name: str, error: BaseException):
        super().__init__(name)
        self.name, self.error = name, error


# Differential checks ----------------------------------------------------------------------

DIFFERENTIAL_EXAMPLES = 150  # per differential: enough to reach the corners, well inside a check's 30 s


def load_reference(path=None, name=None):
    """The good reference's module (its own copy: nothing the delivered code does to its own
    files reaches it)."""
    assert check_state.REFERENCE is not None, "this task has no good reference to compare with (refs.good)"
    return load(path or _entry, name=name, root=check_state.REFERENCE)


_entry: str | None = None  # the task's entry file, for load_reference()


def _outcome(function, args, refused):
    try:
        return ("value", function(*copy.deepcopy(args)))
    except refused as exc:
        return ("refused", exc)


def same_value(want, got) -> bool:
    """Equal and of the same kind: a Decimal is not a float, True is not 1, a str is not bytes;
    a list and a tuple holding the same are the same sequence."""
    if isinstance(want, bool) or isinstance(got, bool):
        return type(want) is type(got) and want == got
    if isinstance(want, (list, tuple)) and isinstance(got, (list, tuple)):
        return len(want) == len(got) and all(same_value(w, g) for w, g in zip(want, got))
    if isinstance(want, dict) and isinstance(got, dict):
        return want.keys() == got.keys() and all(same_value(want[k], got[k]) for k in want)
    kinds = (Decimal, float, int, str, bytes)
    for kind in kinds:
        if isinstance(want, kind) or isinstance(got, kind):
            return isinstance(want, kind) and isinstance(got, kind) and want == got
    return want == got


def _short(value, limit: int = 160) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _said(outcome) -> str:
    kind, value = outcome
    if kind == "value":
        return f"returns {_short(value)}"
    return f"refuses it ({type(value).__name__}: {_short(str(value), 100)})"


class _Disagreement(Exception):
    pass


def differential(delivered, reference, *strategies, examples: int = DIFFERENTIAL_EXAMPLES, same=None,
                 what: str | None = None, refused=Exception) -> int:
    """Assert that `delivered` and `reference` agree on every generated argument tuple (one
    strategy per positional argument); the number of inputs tried when they do.

    Agreeing: both return values `same` accepts (default `same_value`), or both refuse
    (raise one of `refused`). Hypothesis draws the inputs derandomized and without an
    example database, so a verdict depends on the code alone, and shrinks a disagreement to
    the plainest input before it is reported. A scenario (a sequence of calls on one
    instance, a clock moving between them) is a function of its drawn steps: pass functions
    that play it and return what was observed."""
    same = same or same_value
    label = what or getattr(delivered, "__name__", "the function")
    seen: list = []
    tried, values, refusals = [0], [0], []  # inputs tried; the reference's values and refusals

    @settings(derandomize=True, database=None, deadline=None, max_examples=examples, print_blob=False,
              suppress_health_check=list(HealthCheck), report_multiple_bugs=False,
              phases=(Phase.explicit, Phase.generate, Phase.shrink))
    @given(st.tuples(*strategies))
    def trial(args):
        tried[0] += 1
        want = _outcome(reference, args, refused)
        got = _outcome(delivered, args, refused)
        agree = (want[0] == got[0] == "refused") or (want[0] == got[0] == "value" and same(want[1], got[1]))
        if want[0] == "value":
            values[0] += 1
        elif len(refusals) < 1000:
            refusals.append(want[1])
        if not agree:
            seen.append((args, want, got))
            raise _Disagreement()

    try:
        trial()
    except BaseException as exc:
        if not seen:  # not a disagreement: the delivered code (or the check) broke the trial
            raise
        _raise_disagreement(exc, seen, label)
    if values[0] == 0 and refusals and all(isinstance(e, TypeError) for e in refusals):
        # Both sides "agreed" by refusing every input with a TypeError: the check calls them
        # wrongly (a request passed as one argument, say), and would pass any code at all.
        raise AssertionError(f"check error: the reference refused every generated input of {label} with a TypeError "
                             f"({_short(str(refusals[0]), 120)}): the check calls it with the wrong arguments")
    return tried[0]


def _raise_disagreement(exc: BaseException, seen: list, label: str) -> None:
    """Report the shrunk disagreement; anything else the trial raised goes up as it was."""
    if not isinstance(exc, _Disagreement) and not any(isinstance(e, _Disagreement) for e in _leaves(exc)):
        raise exc
    args, want, got = seen[-1]  # the last one seen is the shrunk one
    shown = ", ".join(_short(a, 120) for a in args)
    raise AssertionError(f"{label}({shown}): the reference {_said(want)}, the delivered code {_said(got)}") from None


def _leaves(exc: BaseException):
    for inner in getattr(exc, "exceptions", ()) or ():
        yield inner
        yield from _leaves(inner)


# Behaviour over time ---------------------------------------------------------------------

def entries_held(value, depth: int = 3) -> int:
    """The entries a value holds: the lengths of its containers and of those inside them (a dict
    of per-client lists), an object's attributes, a function's functools cache; counted rather
    than weighed, so the same on every machine (docs/writing-tasks.md, "Behaviour over time")."""
    if depth == 0 or value is None or isinstance(value, (bool, int, float, str, bytes)):
        return 0
    if callable(value):  # a function's functools cache; a class holds nothing of a call
        info = None if hasattr(value, "__mro__") else getattr(value, "cache_info", None)
        return info()[-1] if callable(info) else 0  # CacheInfo's currsize (a plain tuple once across)
    if isinstance(value, dict):
        return len(value) + sum(entries_held(item, depth - 1) for item in value.values())
    if isinstance(value, (list, tuple, set, frozenset)):
        return len(value) + sum(entries_held(item, depth - 1) for item in value)
    try:  # an object of the agent's side (a deque, a bucket): its length, or its attributes
        return len(value) + sum(entries_held(item, depth - 1) for item in list(value))
    except TypeError:
        if hasattr(value, "__name__"):  # a module it imported, not state of its own
            return 0
        attributes = getattr(value, "__dict__", None)
        return entries_held(list(attributes.values()), depth) - len(attributes) if isinstance(attributes, dict) else 0


# The environment as an input ----------------------------------------------------------------

# Far from UTC both ways, with the odd offsets naive code forgets: UTC+14, UTC-3:30, UTC+5:45, UTC-11.
TIME_ZONES = ("Pacific/Kiritimati", "America/St_Johns", "Asia/Kathmandu", "Pacific/Pago_Pago")


@contextlib.contextmanager
def time_zone(name: str):
    """Run the block with the process's local time zone set to `name`."""
    before = os.environ.get("TZ")
    os.environ["TZ"] = name
    time.tzset()
    try:
        yield name
    finally:
        if before is None:
            os.environ.pop("TZ", None)
        else:
            os.environ["TZ"] = before
        time.tzset()


NON_ASCII_DIR = "répertoire ü 測試"


@contextlib.contextmanager
def elsewhere():
    """Run the block in another, empty working directory whose path is not ASCII."""
    before = os.getcwd()
    with tempfile.TemporaryDirectory(prefix="ponybench-elsewhere-") as tmp:
        here = Path(tmp) / NON_ASCII_DIR
        here.mkdir()
        os.chdir(here)
        try:
            yield here
        finally:
            os.chdir(before)


def non_ascii_copy() -> Path:
    """A copy of the workspace under a non-ASCII path (removed when the check ends)."""
    tmp = tempfile.mkdtemp(prefix="ponybench-copy-")
    _scratch.append(tmp)
    target = Path(tmp) / NON_ASCII_DIR
    shutil.copytree(check_state.WORKSPACE, target, symlinks=True)
    return target


_scratch: list[str] = []


# Entry points as a user runs them -------------------------------------------------------------

SKIP_DIRS = {"node_modules", ".git", "__pycache__", ".venv", "venv", "env", ".tox", "dist", "build", "coverage"}


@dataclass(frozen=True)
class Program:
    """One way to start the delivered program: `argv` before the user's arguments, run in the
    user's folder with `env` added (PYTHONPATH for a package run with -m)."""

    name: str  # how a message names it: "todo.py", "python -m todo", "./todo"
    argv: tuple[str, ...]
    env: dict = field(default_factory=dict)

    def run(self, *args, cwd=None, timeout: float = 10, input: str | None = None, env=None):
        try:
            return subprocess.run([*self.argv, *map(str, args)], cwd=cwd or check_state.WORKSPACE, capture_output=True, text=True,
                                  timeout=timeout, input=input, stdin=None if input is not None else subprocess.DEVNULL,
                                  env={**os.environ, **self.env, **(env or {})},
                                  preexec_fn=_preexec([*self.argv, *map(str, args)], cwd or check_state.WORKSPACE))
        except subprocess.TimeoutExpired:
            raise AssertionError(f"`{self.name} {' '.join(map(str, args))}` did not finish within {timeout:g} s") from None


def _files(suffixes) -> list[Path]:
    return sorted(p for p in check_state.WORKSPACE.rglob("*") if p.is_file() and not SKIP_DIRS & set(p.relative_to(check_state.WORKSPACE).parts)
                  and not p.name.startswith("_ponybench") and (p.suffix in suffixes))


def is_test_file(path: Path) -> bool:
    parts = set(Path(path).parts)
    name = Path(path).name
    return (name.startswith("test_") or name.endswith(("_test.py", "conftest.py")) or ".test." in name
            or ".spec." in name or bool(parts & {"test", "tests", "__tests__"}))


def _shebang(path: Path) -> str:
    try:
        with open(path, "rb") as fh:
            first = fh.readline(200)
    except OSError:
        return ""
    return first.decode("utf-8", "replace").strip() if first.startswith(b"#!") else ""


def _relative_modules(path: Path) -> set[Path]:
    """The files a Node script may mean by each relative module it requires or imports
    ('./app', '../lib/server.mjs', './routes' for routes/index.js)."""
    found: set[Path] = set()
    for spec in re.findall(r"""(?:require\s*\(|from\s+|import\s*\()\s*['"](\.{1,2}/[^'"]+)['"]""",
                           path.read_text(errors="replace")):
        base = (path.parent / spec).resolve()
        found |= {base, base.with_name(base.name + ".js"), base.with_name(base.name + ".mjs"),
                  base.with_name(base.name + ".cjs"), base / "index.js"}
    return found


def find_programs(language: str = "python", hint: str = "") -> list[Program]:
    """Every reasonable way the workspace's program is meant to be started, most likely first
    (names holding `hint` ahead): for Python, packages with a __main__.py (`python -m`),
    scripts with a main guard, sys.argv or argparse, and scripts without `.py` whose shebang
    names Python; for Node, package.json's start script and main, then files that create a
    server or require one that does. Test files are never a program."""
    found: list[Program] = []
    hint = hint.lower()
    if language == "python":
        for main in _files({".py"}):
            if main.name == "__main__.py" and not is_test_file(main.relative_to(check_state.WORKSPACE)):
                package = main.parent.relative_to(check_state.WORKSPACE)
                if str(package) != ".":
                    found.append(Program(f"python -m {'.'.join(package.parts)}",
                                         (sys.executable, "-m", ".".join(package.parts)),
                                         {"PYTHONPATH": str(check_state.WORKSPACE)}))
        for path in _files({".py", ""}):
            rel = path.relative_to(check_state.WORKSPACE)
            if is_test_file(rel) or path.name == "__main__.py" or path.name == "setup.py":
                continue
            if path.suffix == "" and "python" not in _shebang(path):
                continue
            text = path.read_text(errors="replace")
            if path.suffix == ".py" and not ("__main__" in text or "sys.argv" in text or "argparse" in text
                                             or "click" in text or "typer" in text):
                continue
            found.append(Program(str(rel), (sys.executable, str(path)), {"PYTHONPATH": str(path.parent)}))
    elif language == "node":
        names: list[str] = []
        package = check_state.WORKSPACE / "package.json"
        if package.is_file():
            try:
                meta = json.loads(package.read_text())
                start = (meta.get("scripts") or {}).get("start", "")
                names += [w for w in start.split() if w.endswith((".js", ".mjs", ".cjs"))]
                names.append(str(meta.get("main") or ""))
            except (ValueError, AttributeError):
                pass
        scripts = [p for p in _files({".js", ".mjs", ".cjs"}) if not is_test_file(p.relative_to(check_state.WORKSPACE))]
        servers = [p for p in scripts if "createServer" in p.read_text(errors="replace")
                   or re.search(r"\blisten\s*\(", p.read_text(errors="replace"))]
        # A file that requires a server module is how the server is started (index.js doing
        # `require('./app').listen(...)`, or importing '../lib/server.mjs'), even when it calls
        # listen itself: it comes first.
        starters = [p for p in scripts if any(q != p and q.resolve() in _relative_modules(p) for q in servers)]
        names += [str(p.relative_to(check_state.WORKSPACE)) for p in starters + [s for s in servers if s not in starters]]
        names = [n.removeprefix("./") for n in names]
        for index, name in enumerate(names):
            if name and name not in names[:index] and (check_state.WORKSPACE / name).is_file():
                found.append(Program(f"node {name}", ("node", str(check_state.WORKSPACE / name))))
    else:
        raise ValueError(f"find_programs: language {language!r} is not python or node")
    found.sort(key=lambda p: hint not in p.name.lower() if hint else False)
    return found


def check_app_tests(timeout: float = 25) -> None:
    """Fail unless the workspace's own unittest suite passes (`python -m unittest discover -s
    tests`, the notes app's `make test`): a fixture task's change leaves the repository's tests
    green, whatever else its ticket asks."""
    run = subprocess.run([sys.executable, "-m", "unittest", "discover", "-s", "tests"], cwd=check_state.WORKSPACE,
                         capture_output=True, text=True, timeout=timeout)
    assert run.returncode == 0, f"the app's own test suite fails after the change: {run.stderr[-600:]}"


def cleanup() -> None:
    host.close_hosts()
    for proc in _processes:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    _processes.clear()
    for tmp in _scratch:
        shutil.rmtree(tmp, ignore_errors=True)
    _scratch.clear()


def namespace(entry: str | None) -> dict:
    global _entry
    _entry = entry
    check_state.CHECK_GLOBALS = {
        "__name__": "__ponybench_check__", "Path": Path,
        "WORKSPACE": check_state.WORKSPACE, "FILE": entry, "load": load, "agent_module": agent_module, "record_calls": record_calls,
        "by_reference": by_reference, "subclass": subclass,
        "find_function": find_function,
        "find_class": find_class, "free_port": free_port, "wait_port": wait_port,
        "start_process": start_process, "http": http,
        "check": check, "load_reference": load_reference, "differential": differential, "same_value": same_value,
        "inputs": inputs, "st": st, "time_zone": time_zone, "TIME_ZONES": TIME_ZONES, "fake_clock": fake_clock,
        "elsewhere": elsewhere, "non_ascii_copy": non_ascii_copy, "find_programs": find_programs,
        "is_test_file": is_test_file, "entries_held": entries_held,
        **{name: getattr(batteries, name) for name in batteries.NAMES},
        "notes_app_regressions": notes_app_regressions, "check_app_tests": check_app_tests,
    }
    return check_state.CHECK_GLOBALS
