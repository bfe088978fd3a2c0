"""The notes-app fixture: a real multi-file web app that fixture tasks copy into a workspace.

These tests keep the fixture honest: big enough to be a codebase, free of files the copier
would skip, with a passing test suite of its own and a server that really answers.
"""
import json
import os
import re
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
FIXTURE = REPO / "fixtures" / "notes-app"

# Byproducts of running the fixture locally; they are never part of it.
CACHE_DIRS = {"__pycache__", ".pytest_cache", ".mypy_cache", ".ruff_cache"}
# Names a workspace copy skips or that look secret: the fixture must not rely on any.
SKIPPED_DIRS = {"node_modules", ".git", "build", "dist", ".venv", "venv", ".tox"}
SKIPPED_SUFFIXES = {".pem", ".key", ".p12", ".png", ".jpg", ".jpeg", ".gif", ".mp3", ".mp4", ".zip", ".db", ".pyc"}


def fixture_files() -> list[Path]:
    return sorted(
        path
        for path in FIXTURE.rglob("*")
        if path.is_file() and not CACHE_DIRS & set(path.relative_to(FIXTURE).parts)
    )


def child_env() -> dict[str, str]:
    """The environment for fixture processes: no bytecode written into the checkout."""
    return {**os.environ, "PYTHONDONTWRITEBYTECODE": "1"}


def test_fixture_is_a_real_codebase():
    files = fixture_files()
    assert len(files) >= 30, f"only {len(files)} files in {FIXTURE}"
    suffixes = {path.suffix for path in files}
    assert {".py", ".js", ".html", ".css"} <= suffixes, sorted(suffixes)
    names = {path.relative_to(FIXTURE).as_posix() for path in files}
    for expected in ["README.md", "app/server.py", "app/db.py", "static/index.html", "static/js/main.js"]:
        assert expected in names


def test_fixture_has_no_skipped_or_secret_looking_files():
    for path in fixture_files():
        relative = path.relative_to(FIXTURE)
        assert not SKIPPED_DIRS & set(relative.parts), relative
        assert path.suffix.lower() not in SKIPPED_SUFFIXES, relative
        name = path.name.lower()
        assert not name.startswith(".env") and "service-account" not in name and "secret" not in name, relative


def test_workspace_copy_keeps_every_fixture_file(tmp_path):
    workspace = pytest.importorskip("pytest_ponybench.cell.workspace")
    copied = workspace.copy_fixture(FIXTURE, tmp_path / "ws")
    expected = [path.relative_to(FIXTURE).as_posix() for path in fixture_files()]
    assert sorted(copied) == sorted(expected)


def test_fixture_unittest_suite_passes():
    result = subprocess.run(
        [sys.executable, "-m", "unittest", "discover", "-s", "tests"],
        cwd=FIXTURE,
        env=child_env(),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr[-4000:]
    ran = re.search(r"^Ran (\d+) tests? in", result.stderr, re.MULTILINE)
    assert ran, result.stderr[-4000:]
    assert int(ran.group(1)) >= 30, f"the fixture suite ran only {ran.group(1)} tests"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def wait_for_port(proc: subprocess.Popen, port: int, log: Path, timeout: float = 15.0) -> None:
    """Poll until the server accepts connections; fail if it exits or the deadline passes."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            pytest.fail(f"server exited with {proc.returncode}:\n{log.read_text()}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return
        except OSError:
            time.sleep(0.05)
    pytest.fail(f"server did not listen on port {port} within {timeout}s:\n{log.read_text()}")


@pytest.fixture
def server_url(tmp_path):
    port = free_port()
    log = tmp_path / "server.log"
    with log.open("w") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "app.server", "--host", "127.0.0.1", "--port", str(port), "--db", ":memory:"],
            cwd=FIXTURE,
            env=child_env(),
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    try:
        wait_for_port(proc, port, log)
        yield f"http://127.0.0.1:{port}"
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=5)


def fetch(url: str, method: str = "GET", data: dict | None = None) -> tuple[int, str, bytes]:
    body = json.dumps(data).encode() if data is not None else None
    request = urllib.request.Request(url, data=body, method=method, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, response.headers.get("Content-Type", ""), response.read()
    except urllib.error.HTTPError as error:
        return error.code, error.headers.get("Content-Type", ""), error.read()


def test_server_serves_page_and_json_api(server_url):
    status, content_type, body = fetch(f"{server_url}/")
    assert status == 200 and content_type.startswith("text/html")
    assert b"/js/main.js" in body and b"<title>Notes</title>" in body

    status, content_type, body = fetch(f"{server_url}/js/main.js")
    assert status == 200 and content_type.startswith("text/javascript")

    status, content_type, body = fetch(f"{server_url}/api/notes")
    assert status == 200 and content_type.startswith("application/json")
    assert json.loads(body) == {"notes": []}

    status, _, body = fetch(f"{server_url}/api/notes", "POST", {"title": "Buy milk", "tags": ["Shop"]})
    assert status == 201, body
    created = json.loads(body)
    assert created["title"] == "Buy milk" and created["tags"] == ["shop"]

    status, _, body = fetch(f"{server_url}/api/search?q=milk")
    assert status == 200
    assert [note["id"] for note in json.loads(body)["notes"]] == [created["id"]]

    status, _, body = fetch(f"{server_url}/api/notes/{created['id'] + 1000}")
    assert status == 404 and json.loads(body)["error"]["code"] == "not_found"
