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
"""
from __future__ import annotations

import importlib.util
import itertools
import json
import os
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

from . import batteries

WORKSPACE = Path.cwd()
_counter = itertools.count()
_processes: list[subprocess.Popen] = []


def load(path, name=None):
    target = (WORKSPACE / path).resolve()
    assert target.is_file(), f"{path} was not written"
    module_name = name or f"_pony_{target.stem}_{next(_counter)}"
    spec = importlib.util.spec_from_file_location(module_name, target)
    assert spec is not None and spec.loader is not None, f"{path} is not importable Python"
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module  # dataclasses and pickling look modules up by name
    spec.loader.exec_module(module)
    return module


def find_function(module, *names):
    for name in names:
        candidate = getattr(module, name, None)
        if callable(candidate):
            return candidate
    raise AssertionError(f"no function named any of {', '.join(names)}")


def find_class(module, method):
    for value in vars(module).values():
        if isinstance(value, type) and value.__module__ == module.__name__ and callable(getattr(value, method, None)):
            return value
    raise AssertionError(f"no class with a method {method}()")


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


def start_process(argv, port=None, timeout=10, env=None):
    """Start a program in the check's own process group, so killing the check kills it too."""
    proc = subprocess.Popen(
        [str(a) for a in argv], cwd=WORKSPACE, env={**os.environ, **(env or {})},
        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
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


def cleanup() -> None:
    for proc in _processes:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    _processes.clear()


def namespace(entry: str | None) -> dict:
    from .regressions import notes_app_regressions  # it uses this module's helpers

    return {
        "__name__": "__ponybench_check__", "Path": Path,
        "WORKSPACE": WORKSPACE, "FILE": entry, "load": load, "find_function": find_function,
        "find_class": find_class, "free_port": free_port, "wait_port": wait_port,
        "start_process": start_process, "http": http,
        **{name: getattr(batteries, name) for name in batteries.NAMES},
        "notes_app_regressions": notes_app_regressions,
    }
