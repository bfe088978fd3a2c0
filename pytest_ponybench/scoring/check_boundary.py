"""The check's side of the trust boundary: how a check reaches the agent's code and programs.

The agent's code (`load`, `agent_module`, `record_calls`, `by_reference`, `subclass`,
`find_function`, `find_class`) is reached through host.py's host processes when the check
is behind the boundary (check_state.BEHIND_BOUNDARY), else imported here. The programs a check
starts (`start_process`, and through guard_programs any subprocess, os.popen or os.system of
the check's process) run as the agent's, in its view without the reference's copy, unless
they run from that copy. `free_port`, `wait_port` and `http` talk to them.

checklib.py shows every name here to the check code; regressions.py uses them too, which is
why they live below both.
"""
from __future__ import annotations

import contextlib
import json
import os
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

from pytest_ponybench.scoring import check_state, host, remote

_processes: list[subprocess.Popen] = []  # the programs start_process started (checklib.cleanup kills them)


def load(path, name=None, root=None):
    """The agent's module at `path` (of the workspace, or of `root`), imported fresh: behind
    the trust boundary, in the host process of that tree, as a `remote.Remote` proxy."""
    if check_state.BEHIND_BOUNDARY:
        tree = Path(root or check_state.WORKSPACE).resolve()
        return host.host(tree).request("load", None, str(path), name, str(tree))
    return host.load_here(path, name, root)


def agent_module(name: str, reference: bool = False, fresh: bool = False):
    """The module `name` as the agent's code imports it (`import centralbank` in rates.py):
    the same module object its code uses, so what the check reads or sets on it is what that
    code sees. `reference`: the one of the reference's copy. `fresh`: imported anew, so a
    module that binds a name at import (`from text_utils import slugify`) binds what the
    check has set since."""
    if not check_state.BEHIND_BOUNDARY:
        import importlib
        if fresh:
            sys.modules.pop(name, None)
        return importlib.import_module(name)
    tree = check_state.REFERENCE if reference else check_state.WORKSPACE
    assert tree is not None, "this task has no good reference to compare with (refs.good)"
    endpoint = host.host(Path(tree).resolve())
    if fresh:
        endpoint.request("drop_module", None, name)
    return endpoint.request("module", None, name)


@contextlib.contextmanager
def record_calls(*names: str, reference: bool = False):
    """Log every call the agent's code makes, during the block, to the functions named (dotted:
    "subprocess.Popen.__init__", "builtins.open", "os.system"), where that code runs: behind
    the trust boundary, in its host. Yields {name: [[args, kwargs], ...]}, filled when the
    block ends; arguments that are not data (a Popen's self) come as proxies. The agent's code
    could forge this log: a spy checks what a fine implementation shows, not a safety rule."""
    calls: dict = {}
    if not check_state.BEHIND_BOUNDARY:  # a task whose checks are not yet behind the boundary
        index = host._record_start(None, None, list(names))
        try:
            yield calls
        finally:
            calls.update(host._record_stop(None, None, index))
        return
    tree = check_state.REFERENCE if reference else check_state.WORKSPACE
    endpoint = host.host(Path(tree).resolve())
    index = endpoint.request("record_start", None, list(names))
    try:
        yield calls
    finally:
        calls.update(endpoint.request("record_stop", None, index))


def by_reference(owner, name: str):
    """The attribute `name` of an agent object (a module of `agent_module`) as a proxy of the
    object itself, not a copy of its value: `by_reference(store, "ARTICLES")[:] = [...]`
    changes the list the agent's code holds. Outside the boundary, the attribute itself."""
    if isinstance(owner, remote.Remote):
        return owner._endpoint.request("getref", owner._id, name)
    return getattr(owner, name)


def subclass(base, name: str):
    """A subclass named `name` of one of the agent's classes (`class Timeout(payments.GatewayUnavailable)`
    in a check), made where that class lives: behind the trust boundary, its host."""
    if isinstance(base, remote.Remote):
        return base._endpoint.request("subclass", base._id, name)
    return type(name, (base,), {})
def find_function(module, *names):
    if isinstance(module, remote.Remote):
        return module._endpoint.request("find_function", module._id, *names)
    for name in names:
        candidate = getattr(module, name, None)
        if callable(candidate):
            return candidate
    raise AssertionError(f"no function named any of {', '.join(names)}")


def find_class(module, method, *names):
    """The class the ticket names (the first of `names` the module has, with `method`), else
    the first class defined in the module with `method`: a helper class with the same method
    name, defined first, is not taken for the one the ticket asks for."""
    if isinstance(module, remote.Remote):
        return module._endpoint.request("find_class", module._id, method, *names)
    for name in names:
        value = getattr(module, name, None)
        if isinstance(value, type) and callable(getattr(value, method, None)):
            return value
    for value in vars(module).values():
        if isinstance(value, type) and value.__module__ == module.__name__ and callable(getattr(value, method, None)):
            return value
    raise AssertionError(f"no class {'named ' + ' or '.join(names) + ' ' if names else ''}with a method {method}()")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def wait_port(port: int, timeout: float = 10, process: subprocess.Popen | None = None) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process is not None and process.poll() is not None:
            raise AssertionError(f"the program exited with code {process.returncode} before listening on port {port}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return
        except OSError:
            time.sleep(0.05)
    raise AssertionError(f"nothing listened on port {port} within {timeout} s")


def start_process(argv, port=None, timeout=10, env=None, cwd=None):
    """Start a program in the check's own process group, so killing the check kills it too;
    in the workspace, or `cwd` (the reference's copy, for a differential of two servers)."""
    proc = subprocess.Popen(
        [str(a) for a in argv], cwd=cwd or check_state.WORKSPACE, env={**os.environ, **(env or {})},
        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        preexec_fn=_preexec(argv, cwd or check_state.WORKSPACE),
    )
    _processes.append(proc)
    if port is not None:
        wait_port(port, timeout, proc)
    return proc


def http(method, url, body=None, headers=None, timeout=5):
    data = body
    headers = dict(headers or {})
    if body is not None and not isinstance(body, (bytes, str)):
        data = json.dumps(body)
        headers.setdefault("Content-Type", "application/json")
    if isinstance(data, str):
        data = data.encode()
    request = urllib.request.Request(url, data=data, method=method, headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return response.status, dict(response.headers), response.read()
    except urllib.error.HTTPError as err:
        return err.code, dict(err.headers), err.read()

def _untrusted_child() -> None:
    """preexec of the reference's programs: the sandbox's unprivileged user where there is one."""
    host.become_untrusted()


def _agent_child() -> None:
    """preexec of the agent's programs: that user too, in the view without the reference's copy."""
    host.become_untrusted()
    host.enter_agent_view()


def _preexec(argv=(), cwd=None):
    """What a program a check starts runs as: a program of the reference (its cwd or an
    argument in the reference's copy: `node REFERENCE/server.js`) sees that copy; any other
    is the agent's and does not."""
    try:
        from pytest_ponybench.processes import sandbox  # the sandbox branch's module, where merged
    except ImportError:
        return None
    if not getattr(sandbox, "IN_SANDBOX", False):
        return None
    if host.is_reference(cwd) or any(host.is_reference(a) for a in argv if os.path.isabs(str(a))):
        return _untrusted_child
    return _agent_child


class _ProgramOfTheCheck(subprocess.Popen):
    """subprocess.Popen in a check's process: a program started without the helper API (a
    check's own `subprocess.run([sys.executable, "todo.py", ...])`) runs as `start_process`
    would start it, so the agent's program never sees the reference's copy whichever way the
    check starts it. A `preexec_fn` of the check's own runs after. Only in the check's own
    process: a host forked from it (host.py) runs the agent's or the reference's code in its
    view already, and its programs stay there as they would anywhere."""

    check_pid: int | None = None

    def __init__(self, args, *more, **options):
        own = options.get("preexec_fn")
        # Started by the helper API (its choice made already), or with positional options
        # (rare), or in a host: left as they came.
        if os.getpid() == _ProgramOfTheCheck.check_pid and not more and own not in (_agent_child, _untrusted_child):
            argv = [args] if isinstance(args, (str, bytes, os.PathLike)) else list(args)
            chosen = _preexec([os.fsdecode(a) for a in argv if isinstance(a, (str, bytes, os.PathLike))],
                              options.get("cwd") or check_state.WORKSPACE)
            if chosen is not None:
                options["preexec_fn"] = chosen if own is None else (lambda: (chosen(), own()))
        super().__init__(args, *more, **options)


def _in_the_check(original):
    """`original` (an os function that starts a program) as a check's process must call it:
    anywhere else (a host forked from it, where the agent's code runs in its own view
    already) it is left as it was."""
    def guarded(*args, **kwargs):
        if os.getpid() != _ProgramOfTheCheck.check_pid or _preexec((), check_state.WORKSPACE) is None:  # no view to keep
            return original(*args, **kwargs)
        if original.__name__ == "system":
            # The same shell, started as subprocess is (guarded), with os.system's wait status.
            code = subprocess.call(*args, **kwargs, shell=True)
            return code << 8 if code >= 0 else -code
        raise PermissionError(f"os.{original.__name__} cannot start a program in a check: use subprocess, "
                              f"os.system or start_process, which run the agent's programs in its own view")
    return guarded


# The ways a check's process could start a program past subprocess.Popen: os.popen goes through
# subprocess; os.system's shell is routed through it; posix_spawn and the spawn* family would
# start the program in the check's view, where the reference's copy is visible, so they are refused.
_STARTERS = ("system", "posix_spawn", "posix_spawnp", "spawnl", "spawnle", "spawnlp", "spawnlpe",
             "spawnv", "spawnve", "spawnvp", "spawnvpe")


def guard_programs() -> None:
    """Every program this check's process starts through subprocess, os.popen or os.system is
    the agent's unless it runs from the reference's copy (_preexec); posix_spawn and the spawn*
    family are refused there. Called once, in the check's own process."""
    _ProgramOfTheCheck.check_pid = os.getpid()
    subprocess.Popen = _ProgramOfTheCheck
    for name in _STARTERS:
        if hasattr(os, name):
            setattr(os, name, _in_the_check(getattr(os, name)))
