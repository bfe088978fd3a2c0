"""What a host does: the process, forked from a check, where the agent's code (untrusted) runs
behind the trust boundary, and the check's side of starting and ending it. The protocol both
sides speak (framing, `Endpoint`, the proxies, the limits) is remote.py's.

The host is forked from the check at its first load (`host`, `start_host`), so it starts with
the check's state: sys.path, the fake clock and time zone, the stdlib functions the check
patched before loading (found by `_patched_functions`; they become call-backs into the check,
so a counting spy counts where the check reads it, and `sync_patches` forwards what the check
patches later). Later changes of the working directory and of os.environ (TZ included) follow
each request (remote.Endpoint). After the fork the host closes every fd but its socket and
stdio, leaves the reference's copy out of its view (`enter_agent_view`), becomes non-dumpable
and, where `sandbox.py` exists, drops to an unprivileged user (`become_untrusted`).

What the host does for the check is HOST_OPS (use an agent object, load a module, patch,
record calls); what the check does for the host's code is TRUSTED_OPS (use an object the check
handed it, never reach past it). Each `remote.Endpoint` is handed its table here, where it is made.

Imports remote.py (never the other way round), check_state, check_clock and processes.procs.
"""
from __future__ import annotations

import ctypes
import importlib.util
import itertools
import os
import signal
import socket
import sys
import time
from pathlib import Path

from pytest_ponybench.processes import procs
from pytest_ponybench.scoring import check_clock, check_state
from pytest_ponybench.scoring import remote

# Handles of the view without the good reference's copy (sandbox.agent_view), made by the
# check's process in the sandbox: the hosts of the agent's trees and its programs join it.
AGENT_VIEW: tuple[int, int] | None = None


def _set_non_dumpable() -> None:
    """PR_SET_DUMPABLE 0: no process of the same user may ptrace this one or read its memory."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(4, 0, 0, 0, 0)  # PR_SET_DUMPABLE = 4
    except (OSError, AttributeError):
        pass


def is_reference(path) -> bool:
    """Is `path` the good reference's copy, or in it (a tree the reference's host runs)?"""
    if check_state.REFERENCE is None or not path:
        return False
    reference = os.path.realpath(str(check_state.REFERENCE))
    real = os.path.realpath(str(path))
    return real == reference or real.startswith(reference.rstrip("/") + "/")


def enter_agent_view() -> None:
    """In a process that will run the agent's code: the view without the reference's copy,
    where the check made one (AGENT_VIEW); else nothing."""
    if AGENT_VIEW is not None:
        from pytest_ponybench.processes import sandbox

        sandbox.enter_agent_view(AGENT_VIEW)


def become_untrusted() -> None:
    """Drop to the sandbox's unprivileged user where sandbox.py provides it and this check
    runs in its sandbox (`sandbox.IN_SANDBOX`: its copies handed over to that user), unless
    this process already is that user; else nothing."""
    try:
        from pytest_ponybench.processes import sandbox  # type: ignore[attr-defined]
    except ImportError:
        return
    drop = getattr(sandbox, "become_untrusted", None)
    if drop is None or not getattr(sandbox, "IN_SANDBOX", False):
        return
    if os.geteuid() == getattr(sandbox, "UNTRUSTED_UID", None):
        return
    drop()

def sync_patches(endpoint: remote.Endpoint) -> None:
    """Make the stdlib functions the check patched (a spy, the fake clock) call back into
    the check from the host, and the host's datetime classes follow the fake clock's. The
    check's endpoint calls it (its `sync`) when the clock points changed since."""
    endpoint.syncing = True
    try:
        endpoint.clock_seen = remote._clock_points()
        new = [[module, attr] for module, attr, _ in _patched_functions(endpoint.skip_roots)
               if (module, attr) not in endpoint.forwarded]
        fake = sys.modules["datetime"].datetime is check_clock.FakeDatetime
        if new or fake != endpoint.fake_datetime:
            endpoint.forwarded.update((module, attr) for module, attr in new)
            endpoint.fake_datetime = fake
            endpoint.request("patch", None, new, fake)
    finally:
        endpoint.syncing = False


# What each side does for the other -----------------------------------------------------------

def _compare(endpoint, target, op, other):
    import operator
    return bool(getattr(operator, op)(target, other))


def _exact_str(value) -> str:
    if type(value) is not str:
        raise TypeError(f"__str__ returned {type(value).__name__}, not str")
    return value[:remote.REPR_LIMIT]


def _exact_int(value) -> int:
    if type(value) is bool:
        return value
    if not isinstance(value, int):
        raise TypeError(f"returned {type(value).__name__}, not int")
    return int.__int__(value)


def _find_function(endpoint, module, *names):
    for name in names:
        candidate = getattr(module, name, None)
        if callable(candidate):
            return candidate
    raise AssertionError(f"no function named any of {', '.join(names)}")


def _find_class(endpoint, module, method, *names):
    for name in names:
        value = getattr(module, name, None)
        if isinstance(value, type) and callable(getattr(value, method, None)):
            return value
    for value in list(vars(module).values()):
        if isinstance(value, type) and value.__module__ == module.__name__ and callable(getattr(value, method, None)):
            return value
    raise AssertionError(f"no class {'named ' + ' or '.join(names) + ' ' if names else ''}with a method {method}()")


_counter = itertools.count()  # the new module name of each load_here


def load_here(path, name=None, root=None):
    """The module at `path` (of the workspace, or of `root`) imported for real, in this
    process, under a new name each call (two loads never share state): what a host does for
    the check's `load`, and what `load` does itself when the check is not behind the boundary."""
    target = (Path(root or check_state.WORKSPACE) / path).resolve()
    assert target.is_file(), f"{path} was not written"
    module_name = name or f"_pony_{target.stem}_{next(_counter)}"
    spec = importlib.util.spec_from_file_location(module_name, target)
    assert spec is not None and spec.loader is not None, f"{path} is not importable Python"
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module  # dataclasses and pickling look modules up by name
    spec.loader.exec_module(module)
    return module


def _load(endpoint, target, path, name, root):
    return load_here(path, name=name, root=root)


def _module(endpoint, target, name):
    import importlib
    return importlib.import_module(name)


def _drop_module(endpoint, target, name):
    return sys.modules.pop(name, None) is not None


def _set_module(endpoint, target, name, value):
    sys.modules[name] = value
    return None


def _patch(endpoint, target, points, fake_datetime):
    """In the host: forward each patched function to the check's current one."""
    import importlib

    for module, attr in points:
        def forward(*args, _module=module, _attr=attr, **kwargs):
            return endpoint.request("patched", None, _module, _attr, list(args), kwargs)
        forward.__name__ = str(attr)
        setattr(importlib.import_module(module), attr, forward)
    if fake_datetime:
        sys.modules["datetime"].datetime, sys.modules["datetime"].date = check_clock.FakeDatetime, check_clock.FakeDate
    else:
        sys.modules["datetime"].datetime, sys.modules["datetime"].date = check_clock._REAL_DATETIME, check_clock._REAL_DATE
    return None


def _resolve(dotted: str):
    """(owner, attribute name) of a dotted name: the longest importable module, then attributes."""
    import importlib
    parts = dotted.split(".")
    for cut in range(len(parts) - 1, 0, -1):
        try:
            owner = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        for part in parts[cut:-1]:
            owner = getattr(owner, part)
        return owner, parts[-1]
    raise LookupError(f"record_calls: {dotted} names no importable module's attribute")


_recording: list = []


def _record_start(endpoint, target, names):
    """In the host: wrap each named function so its calls are logged, arguments and all."""
    log: dict = {name: [] for name in names}
    saved = []
    for name in names:
        owner, attr = _resolve(name)
        original = getattr(owner, attr)

        def wrapper(*args, _log=log[name], _original=original, **kwargs):
            _log.append((args, kwargs))
            return _original(*args, **kwargs)
        saved.append((owner, attr, original))
        setattr(owner, attr, wrapper)
    _recording.append((log, saved))
    return len(_recording) - 1


def _record_stop(endpoint, target, index):
    log, saved = _recording[index]
    for owner, attr, original in reversed(saved):
        setattr(owner, attr, original)
    return {name: [[list(args), kwargs] for args, kwargs in calls] for name, calls in log.items()}


def _patched_call(endpoint, target, module, attr, args, kwargs):
    """In the check: the host's call of a function the check patched, run as the check has it now."""
    if (module, attr) not in endpoint.forwarded:
        raise PermissionError(f"{module}.{attr} is no function the check patched")
    return getattr(sys.modules[module], attr)(*args, **kwargs)



HOST_OPS = {
    "getattr": lambda ep, t, name: getattr(t, name),
    "getref": lambda ep, t, name: remote._ByReference(getattr(t, name)),
    "subclass": lambda ep, t, name: type(name, (t,), {"__module__": getattr(t, "__module__", "agent")}),
    "setattr": lambda ep, t, name, value: setattr(t, name, value),
    "delattr": lambda ep, t, name: delattr(t, name),
    "call": lambda ep, t, args, kwargs: t(*args, **kwargs),
    "getitem": lambda ep, t, key: t[key],
    "setitem": lambda ep, t, key, value: t.__setitem__(key, value),
    "delitem": lambda ep, t, key: t.__delitem__(key),
    "contains": lambda ep, t, item: bool(item in t) is True,
    "len": lambda ep, t: _exact_int(len(t)),
    "iter": lambda ep, t: iter(t),
    "next": lambda ep, t: next(t),
    "bool": lambda ep, t: bool(t) is True,
    "hash": lambda ep, t: _exact_int(hash(t)),
    "str": lambda ep, t: _exact_str(str(t)),
    "repr": lambda ep, t: _exact_str(repr(t)),
    "format": lambda ep, t, spec: _exact_str(format(t, spec)),
    "int": lambda ep, t: _exact_int(int(t)),
    "float": lambda ep, t: float.__float__(float(t)),
    "index": lambda ep, t: _exact_int(t.__index__()),
    "enter": lambda ep, t: t.__enter__(),
    "exit": lambda ep, t: bool(t.__exit__(None, None, None)) is True,
    "compare": lambda ep, t, op, other: bool(_compare(ep, t, op, other)) is True,
    "isinstance": lambda ep, t, value: isinstance(value, t) is True,
    "issubclass": lambda ep, t, value: issubclass(value, t) is True,
    "find_function": lambda ep, t, *names: _find_function(ep, t, *names),
    "find_class": lambda ep, t, method, *names: _find_class(ep, t, method, *names),
    "load": _load,
    "module": _module,
    "drop_module": _drop_module,
    "set_module": _set_module,
    "patch": _patch,
    "record_start": _record_start,
    "record_stop": _record_stop,
    "ping": lambda ep, t: None,
}


def _public(name: str) -> str:
    if not isinstance(name, str) or name.startswith("_"):
        raise PermissionError(f"the agent's code may not read {name!r} of the check's objects")
    return name


def _check_attribute(endpoint, target, name):
    value = getattr(target, _public(name))
    if type(value).__name__ == "module" or isinstance(value, type(sys._getframe())):
        raise PermissionError(f"the agent's code may not reach the check's {name!r}")
    return value


# What the agent's code may do with an object the check handed it: use it, not reach past it.
TRUSTED_OPS = {
    "call": lambda ep, t, args, kwargs: t(*args, **kwargs),
    "getattr": _check_attribute,
    "getitem": lambda ep, t, key: t[key],
    "contains": lambda ep, t, item: item in t,
    "len": lambda ep, t: len(t),
    "iter": lambda ep, t: iter(t),
    "next": lambda ep, t: next(t),
    "bool": lambda ep, t: bool(t),
    "hash": lambda ep, t: hash(t),
    "str": lambda ep, t: str(t),
    "repr": lambda ep, t: repr(t),
    "format": lambda ep, t, spec: format(t, spec),
    "enter": lambda ep, t: t.__enter__(),
    "exit": lambda ep, t: bool(t.__exit__(None, None, None)),
    "compare": lambda ep, t, op, other: _compare(ep, t, op, other),
    "patched": _patched_call,
}


# Hosts ----------------------------------------------------------------------------------------

_hosts: dict[str, remote.Endpoint] = {}


_FUNCTION_TYPE, _METHOD_TYPE = remote.FUNCTION_TYPE, remote.METHOD_TYPE
_check_side = remote.made_by_check  # a host calls such a function back when the check patches it in
CHECK_MODULE = remote.CHECK_MODULE


# The harness's own packages: a check patches what the agent's code uses, never these.
_NEVER_PATCHED = {"hypothesis", "pytest_ponybench", "_pytest", "pytest", "pluggy", "typing_extensions", "_hypothesis_globals",
                  "_hypothesis_ftz_detector", "yaml", "encodings"}


def _candidate_modules() -> list:
    """The modules a check can have patched: those its code names (`import hmac` then
    `hmac.compare_digest = spy`), their submodules, and what the helpers patch (time,
    datetime, builtins). Not all of sys.modules: looking at every attribute of every module
    costs a check tens of ms after a fork (each look writes a reference count, so the page is
    copied)."""
    names = {"time", "datetime", "builtins"}
    scope = check_state.CHECK_GLOBALS
    if scope is None:
        return list(sys.modules.items())
    module_type = type(sys)
    for value in list(scope.values()):
        if type(value) is module_type:
            names.add(value.__name__)
            names.update(v.__name__ for v in list(vars(value).values()) if type(v) is module_type)
        else:
            owner = getattr(value, "__module__", None)  # `from hmac import compare_digest`: hmac
            if isinstance(owner, str):
                names.add(owner)
    return [(name, sys.modules[name]) for name in names if name in sys.modules]


def _patched_functions(skip_roots) -> list[tuple[str, str, object]]:
    """Every module attribute the check set to one of its own callables (`_check_side`),
    inlined: this looks at every attribute of every module at each load."""
    found = []
    function, method = _FUNCTION_TYPE, _METHOD_TYPE
    for module_name, module in _candidate_modules():
        if module_name.partition(".")[0] in _NEVER_PATCHED:
            continue
        try:
            items = list(vars(module).items())
        except TypeError:
            continue
        for attr, value in items:
            kind = type(value)
            if kind is function:
                if value.__code__.co_filename != remote.CHECK_CODE and "_ponybench_check_side" not in value.__dict__:
                    continue
            elif kind is method:
                if not _check_side(value.__func__):
                    continue
            elif kind.__module__ != CHECK_MODULE or not callable(value):
                continue
            file = getattr(module, "__file__", None) or ""
            if not any(file.startswith(root) for root in skip_roots):
                found.append((module_name, attr, value))
    return found


def host(root) -> remote.Endpoint:
    """The host process of one tree (forked on first use), its patches synced with the check's
    (a load or agent_module: what the check patched since is what the agent's code sees)."""
    key = str(root)
    endpoint = _hosts.get(key)
    if endpoint is None or endpoint.dead:
        if endpoint is not None and endpoint.dead:
            raise remote.AgentProcessDied(remote._broken[0] if remote._broken else "the agent's process is gone")
        endpoint = _hosts[key] = start_host(key)
    sync_patches(endpoint)
    return endpoint


def start_host(root: str) -> remote.Endpoint:
    ours, theirs = socket.socketpair()
    endpoint = remote.Endpoint(ours, trusted=True, name=root, ops=TRUSTED_OPS, sync=sync_patches)
    endpoint.skip_roots = [str(check_state.WORKSPACE), str(root)] + ([str(check_state.REFERENCE)] if check_state.REFERENCE else [])
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid == 0:  # the host: the agent's code runs here and nowhere else
        code = 0
        try:
            ours.close()
            if not is_reference(root):  # the agent's code: it must not see the answer key
                enter_agent_view()
            keep = theirs.fileno()
            os.closerange(3, keep)
            os.closerange(keep + 1, 1 << 16)
            _set_non_dumpable()
            become_untrusted()
            _hosts.clear()
            side = remote.Endpoint(theirs, trusted=False, name="host", ops=HOST_OPS)
            if root not in sys.path:
                sys.path.insert(0, root)
            check_state.BEHIND_BOUNDARY = False  # in here, load() imports for real
            side.serve_forever()
        except BaseException:
            code = 70
        finally:
            os._exit(code)
    theirs.close()
    endpoint.pid = pid
    return endpoint


def adopt_orphans() -> None:
    """PR_SET_CHILD_SUBREAPER: a process a host forks and orphans (a daemon, a pid hopper)
    becomes this process's child, not init's, so kill_descendants finds it."""
    try:
        ctypes.CDLL(None, use_errno=True).prctl(36, 1, 0, 0, 0)  # PR_SET_CHILD_SUBREAPER = 36
    except (OSError, AttributeError):
        pass


def kill_descendants(rounds: int = 200) -> None:
    """SIGKILL every process under this one, orphans adopted included, until none is left."""
    me = os.getpid()
    for _ in range(rounds):
        children = procs.descendants(me) if os.path.isdir("/proc") else []
        if not children:
            return
        for pid in children:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        time.sleep(0.002)
        while True:  # reap what died; what was adopted meanwhile is the next round's
            try:
                pid, _ = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                break
            if pid == 0:
                break


def close_hosts() -> None:
    """End every host (the check is over); a host that already died is reaped."""
    for endpoint in list(_hosts.values()):
        if endpoint.pid:
            try:
                os.kill(endpoint.pid, signal.SIGKILL)
                os.waitpid(endpoint.pid, 0)
            except (ProcessLookupError, ChildProcessError):
                pass
            endpoint.pid = 0
        endpoint.dead = True
    _hosts.clear()


def round_trips() -> int:
    return sum(e.calls for e in _hosts.values())

