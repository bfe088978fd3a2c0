"""Regression checks for fixture tasks: the app's existing behaviour, re-tested after a change.

A fixture task's own check confirms the new feature; a feature that breaks the rest of the app
to get there must still fail `correct`. `notes_app_regressions()` (in every check's
namespace) drives the notes app of `fixtures/notes-app` in-process, as its own tests do, with
a fixed clock: notes CRUD and validation, tags and their normalisation, the tag filter,
search over titles and bodies, users' isolation, error statuses; then, with `server=True`,
boots the real server and re-tests the static files and the HTTP layer.

Every assertion is behaviour the fixture documents in its README and tests, picked so that
a legitimate feature ticket leaves it true: search terms appear in no tag name (so "search
matches tags too" keeps them), and list order is only checked with `ordered=True` (a ticket
may re-sort the list).
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

from pytest_ponybench.scoring import check_boundary, check_state


class _Clock:
    """2024-01-01T00:00:00Z, then one second later on each call (the fixture's FakeClock)."""

    _ponybench_check_side = True  # a stub the app calls back across the boundary: it gives back a str

    def __init__(self):
        self.seconds = 0

    def __call__(self) -> str:
        minutes, seconds = divmod(self.seconds, 60)
        self.seconds += 1
        return f"2024-01-01T00:{minutes:02d}:{seconds:02d}Z"


def _app(workspace: Path):
    # The app's modules as its own code imports them: behind the trust boundary, in the
    # workspace's host process (remote.py), and the app's objects are proxies there.
    if not check_state.BEHIND_BOUNDARY and str(workspace) not in sys.path:
        sys.path.insert(0, str(workspace))
    Application = check_boundary.agent_module("app.application").Application
    Config = check_boundary.agent_module("app.config").Config
    open_database = check_boundary.agent_module("app.db").open_database
    Request = check_boundary.agent_module("app.web").Request

    app = Application(Config(database=":memory:"), open_database(":memory:"), _Clock())

    def call(method, target, body=None, user=None, raw=None):
        headers = {"Content-Type": "application/json"}
        if user:
            headers["X-User"] = user
        data = raw if raw is not None else (json.dumps(body).encode() if body is not None else b"")
        return app.handle(Request.build(method, target, headers, data))

    return call


def _json(response, what):
    try:
        return json.loads(response.body)
    except ValueError:
        raise AssertionError(f"regression: {what} did not answer JSON: {response.body[:200]!r}") from None


def _expect(response, status, what):
    assert response.status == status, (
        f"regression: {what} answered {response.status}, the app answered {status} before the change: "
        f"{response.body[:200]!r}")
    return _json(response, what) if response.body else None


def _api(call, ordered: bool) -> None:
    make = lambda title, body="", tags=(), user=None: _expect(  # noqa: E731
        call("POST", "/api/notes", {"title": title, "body": body, "tags": list(tags)}, user), 201,
        f"POST /api/notes {title!r}")
    milk = make("Buy milk", "two litres, semi-skimmed", ["Shopping", "#errands"])
    plumber = make("Call the plumber", "the kitchen sink drips", ["home", "errands"])
    idea = make("  Big idea  ", "a notes app with tags", ["Big Idea"])
    rent = make("Pay the rent", "by friday", ["home"], user="bob")

    assert milk["tags"] == ["errands", "shopping"], f"regression: tags are no longer normalised and sorted: {milk['tags']}"
    assert idea["title"] == "Big idea" and idea["tags"] == ["big-idea"], f"regression: title or tag not cleaned: {idea}"
    for key in ("id", "title", "body", "tags", "created_at", "updated_at"):
        assert key in milk, f"regression: a created note lacks '{key}': {milk}"

    for body, what in (({"title": ""}, "an empty title"), ({"body": "no title"}, "a missing title"),
                       ({"title": "x", "tags": ["no good!"]}, "an invalid tag"),
                       ({"title": "x", "colour": "red"}, "an unknown field"), ([1, 2], "a JSON list")):
        _expect(call("POST", "/api/notes", body), 400, f"POST /api/notes with {what}")
    _expect(call("POST", "/api/notes", raw=b"{not json"), 400, "POST /api/notes with a body that is not JSON")

    got = _expect(call("GET", f"/api/notes/{milk['id']}"), 200, "GET /api/notes/ID")
    assert got == milk, f"regression: GET /api/notes/{milk['id']} gave {got}, created {milk}"
    _expect(call("GET", "/api/notes/9999"), 404, "GET of a note that does not exist")
    _expect(call("GET", f"/api/notes/{rent['id']}"), 404, "GET of another user's note")
    _expect(call("PATCH", f"/api/notes/{rent['id']}", {"title": "mine"}), 404, "PATCH of another user's note")
    _expect(call("DELETE", f"/api/notes/{rent['id']}"), 404, "DELETE of another user's note")
    _expect(call("PUT", "/api/notes"), 405, "PUT /api/notes")
    _expect(call("GET", "/api/nothing-here"), 404, "GET of an unknown API path")
    _expect(call("GET", "/api/notes", user="Not A User!"), 400, "a request with an invalid X-User")

    patched = _expect(call("PATCH", f"/api/notes/{plumber['id']}", {"title": "Call the plumber today"}), 200,
                      "PATCH of a title")
    kept = ("body", "tags", "created_at")
    assert all(patched[k] == plumber[k] for k in kept), (
        f"regression: PATCH of the title alone changed other fields: {plumber} became {patched}")
    _expect(call("PATCH", f"/api/notes/{plumber['id']}", {"title": ""}), 400, "PATCH with an empty title")

    listed = _expect(call("GET", "/api/notes"), 200, "GET /api/notes")["notes"]
    titles = [n["title"] for n in listed]
    assert sorted(titles) == ["Big idea", "Buy milk", "Call the plumber today"], (
        f"regression: GET /api/notes lists {titles} (bob's note must not show, every own note must)")
    for note in listed:
        alone = _expect(call("GET", f"/api/notes/{note['id']}"), 200, "GET /api/notes/ID of a listed note")
        assert note == alone, f"regression: GET /api/notes lists {note}, but the note is {alone}"
    if ordered:
        assert titles == ["Big idea", "Call the plumber today", "Buy milk"], (
            f"regression: GET /api/notes is no longer newest first: {titles}")
    assert [n["title"] for n in _expect(call("GET", "/api/notes", user="bob"), 200, "bob's list")["notes"]] == [
        "Pay the rent"], "regression: a user sees another user's notes, or not their own"
    for tag in ("errands", "Errands", "%23errands"):
        found = sorted(n["title"] for n in _expect(call("GET", f"/api/notes?tag={tag}"), 200,
                                                   f"GET /api/notes?tag={tag}")["notes"])
        assert found == ["Buy milk", "Call the plumber today"], f"regression: ?tag={tag} lists {found}"
    _expect(call("GET", "/api/notes?tag=no!good"), 400, "an invalid tag filter")

    def searched(query, user=None):
        body = _expect(call("GET", "/api/search?q=" + query.replace(" ", "+"), user=user), 200,
                       f"GET /api/search?q={query}")
        return sorted(n["title"] for n in body["notes"])

    # No term below is part of any tag name, so a ticket that makes search match tags keeps them.
    for query, want in (("milk", ["Buy milk"]), ("KITCHEN", ["Call the plumber today"]),
                        ("sink plumber", ["Call the plumber today"]), ("milk sink", []),
                        ("rent", []), ("%", []), ("_", []), ("", [])):
        got = searched(query)
        assert got == want, f"regression: searching {query!r} found {got}, expected {want}"
    assert searched("rent", user="bob") == ["Pay the rent"], "regression: search no longer finds a user's own note"

    tags = _expect(call("GET", "/api/tags"), 200, "GET /api/tags")["tags"]
    counts = {t["name"]: t["count"] for t in tags}
    assert counts == {"big-idea": 1, "errands": 2, "home": 1, "shopping": 1}, f"regression: GET /api/tags gave {tags}"
    _expect(call("DELETE", "/api/tags/errands"), 204, "DELETE /api/tags/errands")
    _expect(call("DELETE", "/api/tags/errands"), 404, "DELETE of a tag that is gone")
    assert _expect(call("GET", f"/api/notes/{milk['id']}"), 200, "GET after a tag delete")["tags"] == ["shopping"], (
        "regression: deleting a tag did not remove it from its notes")
    _expect(call("DELETE", f"/api/notes/{idea['id']}"), 204, "DELETE /api/notes/ID")
    _expect(call("DELETE", f"/api/notes/{idea['id']}"), 404, "a second DELETE of the same note")
    names = [t["name"] for t in _expect(call("GET", "/api/tags"), 200, "GET /api/tags")["tags"]]
    assert names == ["home", "shopping"], f"regression: tags of a deleted note were not pruned: {names}"


def _server(workspace: Path) -> None:
    port = check_boundary.free_port()
    check_boundary.start_process([sys.executable, "-m", "app.server", "--port", str(port), "--db", ":memory:"], port=port)
    base = f"http://127.0.0.1:{port}"
    status, headers, raw = check_boundary.http("GET", f"{base}/")
    assert status == 200 and b"<html" in raw.lower(), f"regression: GET / answered {status}: {raw[:120]!r}"
    status, headers, _ = check_boundary.http("GET", f"{base}/css/app.css")
    assert status == 200 and "text/css" in headers.get("Content-Type", ""), f"regression: GET /css/app.css answered {status}"
    for path in ("/../README.md", "/%2e%2e/README.md", "/no-such-file.js"):
        status, _, _ = check_boundary.http("GET", base + path)
        assert status == 404, f"regression: GET {path} answered {status}, the app answered 404 before the change"
    status, _, raw = check_boundary.http("POST", f"{base}/api/notes", {"title": "over http", "tags": ["web"]})
    assert status == 201, f"regression: POST /api/notes over HTTP answered {status}: {raw[:200]!r}"
    status, _, raw = check_boundary.http("GET", f"{base}/api/notes?tag=web")
    assert status == 200 and [n["title"] for n in json.loads(raw)["notes"]] == ["over http"], (
        f"regression: GET /api/notes?tag=web over HTTP answered {status}: {raw[:200]!r}")
    status, _, _ = check_boundary.http("POST", f"{base}/index.html", b"")
    assert status == 405, f"regression: POST to a static path answered {status}, the app answered 405 before the change"


def notes_app_regressions(ordered: bool = True, server: bool = True) -> None:
    """Re-test the notes app's existing behaviour; the first regression raises AssertionError.

    `ordered=False` when the ticket changes the list order; `server=False` skips the HTTP layer."""
    workspace = check_state.WORKSPACE
    _api(_app(workspace), ordered)
    if server:
        _server(workspace)
