"""notes_app_regressions: the notes fixture as shipped passes; each way of breaking it fails,
naming what regressed. Run through the real check machinery, in a copy of the fixture."""
from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from pytest_ponybench.scoring import checks

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "notes-app"


def app_copy(tmp_path: Path, rel: str | None = None, old: str = "", new: str = "") -> Path:
    ws = tmp_path / "ws"
    shutil.copytree(FIXTURE, ws, ignore=shutil.ignore_patterns("__pycache__"))
    if rel is not None:
        text = (ws / rel).read_text()
        assert text.count(old) == 1, f"{rel}: the edit no longer applies"
        (ws / rel).write_text(text.replace(old, new))
    return ws


def verdict(ws: Path, call: str = "notes_app_regressions()") -> checks.Verdict:
    return checks.run_check(call, ws, "correct", None, 30)


def test_the_shipped_app_passes(tmp_path):
    assert verdict(app_copy(tmp_path)) == checks.Verdict(True, "ok")


BREAKAGES = {
    "another user's notes listed": (
        "app/repositories/notes.py", 'f"SELECT n.* FROM notes n WHERE n.user_id = ? {ORDER_BY}", (user_id,)',
        'f"SELECT n.* FROM notes n {ORDER_BY}"', "bob's note must not show"),
    "LIKE wildcards unescaped": (
        "app/repositories/notes.py", 'pattern = f"%{escape_like(term)}%"', 'pattern = f"%{term}%"',
        "searching '%' found"),
    "tags no longer normalised": (
        "app/services/tags.py", 'name = re.sub(r"\\s+", "-", raw.strip().lstrip("#").strip().lower())',
        'name = re.sub(r"\\s+", "-", raw.strip().lstrip("#").strip())', "regression: "),
    "unknown fields accepted": (
        "app/services/validation.py", 'errors[name] = "unknown field"', "pass",
        "POST /api/notes with an unknown field answered 201"),
    "unused tags kept": (
        "app/services/notes.py", "            self.tags.prune(user)\n", "",
        "tags of a deleted note were not pruned"),
    "static files escape their folder": (
        "app/static_files.py", "if not candidate.is_relative_to(root) or not candidate.is_file():",
        "if not candidate.is_file():", "README.md answered 200"),
    "list order reversed": (
        "app/repositories/notes.py", 'ORDER_BY = "ORDER BY n.created_at DESC, n.id DESC"',
        'ORDER_BY = "ORDER BY n.created_at, n.id"', "is no longer newest first"),
}


@pytest.mark.parametrize("name", sorted(BREAKAGES))
def test_a_broken_app_fails_naming_the_regression(tmp_path, name):
    rel, old, new, expected = BREAKAGES[name]
    result = verdict(app_copy(tmp_path, rel, old, new))
    assert not result.ok and result.reason.startswith("regression: ") and expected in result.reason, result.reason


def test_ordered_false_allows_a_new_list_order(tmp_path):
    rel, old, new, _ = BREAKAGES["list order reversed"]
    ws = app_copy(tmp_path, rel, old, new)
    assert verdict(ws, "notes_app_regressions(ordered=False)").ok


def test_server_false_skips_the_http_layer(tmp_path):
    rel, old, new, _ = BREAKAGES["static files escape their folder"]
    ws = app_copy(tmp_path, rel, old, new)
    assert verdict(ws, "notes_app_regressions(server=False)").ok


def test_check_app_tests_passes_the_shipped_suite_and_fails_one_a_change_broke(tmp_path):
    assert verdict(app_copy(tmp_path), "check_app_tests()") == checks.Verdict(True, "ok")
    rel, old, new, _ = BREAKAGES["list order reversed"]  # the app's own tests pin newest first
    result = verdict(app_copy(tmp_path / "broken", rel, old, new), "check_app_tests()")
    assert not result.ok and "the app's own test suite fails after the change" in result.reason, result.reason
