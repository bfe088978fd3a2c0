"""The hostile-input batteries (batteries.py): each catches known-bad implementations, one per
mistake kind it exists for, and accepts known-good ones, including ones that refuse with their
own exception class. The implementations here are ours (trusted), so they run in-process."""
from __future__ import annotations

import os
import re
import shlex
import shutil
import sqlite3
import subprocess
import tarfile
import textwrap
from html import escape
from pathlib import Path
from urllib.parse import unquote

import pytest

from pytest_ponybench.scoring import batteries, checklib
from pytest_ponybench.scoring.batteries import (
    check_archive_entries, check_header_injection, check_html_contexts, check_path_containment,
    check_shell_injection, check_sql_lookup,
)


class Refused(Exception):
    """An implementation's own exception class: refusing with it is safe."""


def test_every_battery_is_in_the_check_namespace():
    names = checklib.namespace("x.py")
    for name in batteries.NAMES:
        assert names[name] is getattr(batteries, name)


# ---------------------------------------------------------------------------------------
# Path containment
# ---------------------------------------------------------------------------------------

def saver(root: Path, to_target):
    def save(name):
        target = Path(to_target(root, name))
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(b"x")
        return str(target)
    return save


def prefix_contained(root, name):
    target = os.path.normpath(os.path.join(root, name))
    if not target.startswith(str(root)):
        raise Refused(name)
    return target


def decoded_after_check(root, name):
    if ".." in name.split("/"):
        raise Refused(name)
    return os.path.join(root, unquote(name))


def nfkc_after_check(root, name):
    import unicodedata
    if ".." in name or name.startswith("/") or "%" in name or "\\" in name:
        raise Refused(name)
    return os.path.join(root, unicodedata.normalize("NFKC", name))


def backslashes_after_check(root, name):
    if ".." in Path(name).parts:
        raise Refused(name)
    return os.path.join(root, name.replace("\\", "/"))


def resolved_contained(root, name):
    target = (root / name).resolve()
    if not target.is_relative_to(root.resolve()) or target == root.resolve():
        raise Refused(name)
    return target


def normpath_commonpath(root, name):  # lexical only: fine until a symlink sits inside root
    target = os.path.normpath(os.path.join(root, name))
    if os.path.commonpath([target, str(root)]) != str(root):
        raise Refused(name)
    return target


@pytest.mark.parametrize("to_target, why", [
    (lambda root, name: os.path.join(root, name), "joined as given"),
    (lambda root, name: root / name.replace("../", ""), "../ removed once"),
    (prefix_contained, "string-prefix containment"),
    (decoded_after_check, "URL-decoded after the check"),
    (backslashes_after_check, "backslashes turned into slashes after the check"),
    (nfkc_after_check, "Unicode-normalised after the check"),
])
def test_path_containment_catches(tmp_path, to_target, why):
    root = tmp_path / "uploads"
    with pytest.raises(AssertionError, match="outside uploads/"):
        check_path_containment(saver(root, to_target), root)


def test_path_containment_catches_a_path_returned_outside(tmp_path):
    root = tmp_path / "uploads"

    def save(name):
        (root / Path(name).name).parent.mkdir(parents=True, exist_ok=True)
        (root / Path(name).name).write_bytes(b"x")
        return str(tmp_path / name)  # stores safely, but tells the caller another place

    with pytest.raises(AssertionError, match="was saved at"):
        check_path_containment(save, root)


def test_path_containment_symlink_form_catches_lexical_checks(tmp_path):
    root = tmp_path / "uploads"
    check_path_containment(saver(root, normpath_commonpath), root)  # no symlink: lexical is enough
    with pytest.raises(AssertionError, match="pony_outside"):
        check_path_containment(saver(root, normpath_commonpath), root, symlink=True)


@pytest.mark.parametrize("to_target", [
    lambda root, name: root / Path(name).name if Path(name).name not in ("", ".", "..") else 1 / 0,
    resolved_contained,
])
def test_path_containment_accepts(tmp_path, to_target):
    root = tmp_path / "uploads"
    check_path_containment(saver(root, to_target), root, symlink=True)


def test_path_payloads_stay_in_scope(tmp_path):
    root = tmp_path / "a" / "uploads"
    for _, name in batteries.path_payloads(root, tmp_path):
        landed = os.path.normpath(os.path.join(root, unquote(unquote(name)).replace("\\", "/")))
        assert os.path.commonpath([landed, str(tmp_path)]) == str(tmp_path), name
    with pytest.raises(ValueError, match="strictly inside"):
        batteries.path_payloads(tmp_path, tmp_path)


# ---------------------------------------------------------------------------------------
# Archive entries
# ---------------------------------------------------------------------------------------

def naive_extract(dest):
    def extract(archive):
        with tarfile.open(archive) as tar:
            tar.extractall(dest, filter="fully_trusted")
    return extract


def names_checked(dest):  # refuses ../ and absolute names, follows every link kind
    def extract(archive):
        with tarfile.open(archive) as tar:
            for m in tar.getmembers():
                if m.name.startswith("/") or ".." in Path(m.name).parts:
                    raise Refused(m.name)
                tar.extract(m, dest, filter="fully_trusted")
    return extract


def links_refused_devices_not(dest):
    def extract(archive):
        with tarfile.open(archive) as tar:
            for m in tar.getmembers():
                target = os.path.realpath(os.path.join(dest, m.name))
                if m.issym() or m.islnk() or os.path.commonpath([target, str(dest)]) != str(dest):
                    raise Refused(m.name)
                tar.extract(m, dest, filter="fully_trusted")
    return extract


def lexical_symlink_check(dest):  # symlinks allowed when their target looks inside, lexically
    def extract(archive):
        with tarfile.open(archive) as tar:
            for m in tar.getmembers():
                target = os.path.normpath(os.path.join(dest, m.name))
                ok = os.path.commonpath([target, str(dest)]) == str(dest)
                if m.issym():
                    pointed = os.path.normpath(os.path.join(os.path.dirname(target), m.linkname))
                    ok = ok and os.path.commonpath([pointed, str(dest)]) == str(dest)
                if not ok or m.islnk() or m.isdev():
                    raise Refused(m.name)
                tar.extract(m, dest, filter="fully_trusted")
    return extract


@pytest.mark.parametrize("make, what", [
    (naive_extract, "a member named ../"),
    (names_checked, "symlink"),
    (links_refused_devices_not, "device"),
    (lexical_symlink_check, "chained symlinks"),
])
def test_archive_entries_catch(tmp_path, make, what):
    dest = tmp_path / "site" / "theme"
    with pytest.raises(AssertionError, match=re.escape(what)):
        check_archive_entries(make(dest), dest)


def test_archive_entries_catch_a_write_through_a_duplicate_name(tmp_path):
    dest = tmp_path / "theme"

    def flat_bundles_links_cleaned_after(archive):  # flat names only; outward links removed afterwards
        try:
            with tarfile.open(archive) as tar:
                for m in tar.getmembers():
                    if "/" in m.name or m.name.startswith("..") or not (m.isreg() or m.issym()):
                        raise Refused(m.name)
                    tar.extract(m, dest, filter="fully_trusted")
        finally:
            for path in dest.iterdir():
                if path.is_symlink() and not path.resolve().is_relative_to(dest.resolve()):
                    path.unlink()

    with pytest.raises(AssertionError, match="duplicate names: a symlink out.*changed pony_secret.txt"):
        check_archive_entries(flat_bundles_links_cleaned_after, dest)


def test_archive_entries_catch_a_fifo(tmp_path):
    dest = tmp_path / "theme"

    def extract(archive):
        with tarfile.open(archive) as tar:
            for m in tar.getmembers():
                if m.isreg() and ".." not in m.name and not m.name.startswith("/"):
                    tar.extract(m, dest, filter="fully_trusted")
                elif m.isfifo():
                    os.mkfifo(dest / m.name)

    with pytest.raises(AssertionError, match="a fifo pipe"):
        check_archive_entries(extract, dest)


def regular_files_only(dest):
    def extract(archive):
        root = Path(dest).resolve()
        with tarfile.open(archive) as tar:
            for m in tar.getmembers():
                target = (root / m.name).resolve()
                if not target.is_relative_to(root) or not (m.isfile() or m.isdir()):
                    raise Refused(m.name)
                if m.isdir():
                    target.mkdir(parents=True, exist_ok=True)
                else:
                    target.parent.mkdir(parents=True, exist_ok=True)
                    target.write_bytes(tar.extractfile(m).read())
    return extract


def data_filter(dest):
    def extract(archive):
        with tarfile.open(archive) as tar:
            tar.extractall(dest, filter="data")
    return extract


def skip_silently(dest):  # skips what it will not unpack instead of raising
    def extract(archive):
        with tarfile.open(archive) as tar:
            tar.extractall(dest, filter=lambda member, path: tarfile.data_filter(member, path)
                           if member.isreg() or member.isdir() else None)
    return extract


@pytest.mark.parametrize("make", [regular_files_only, data_filter])
def test_archive_entries_accept(tmp_path, make):
    dest = tmp_path / "site" / "theme"
    check_archive_entries(make(dest), dest)


def test_archive_entries_accept_skipping(tmp_path):
    dest = tmp_path / "theme"

    def extract(archive):
        with tarfile.open(archive) as tar:
            for m in tar.getmembers():
                try:
                    tar.extract(m, dest, filter="data")
                except tarfile.FilterError:
                    continue

    check_archive_entries(extract, dest)


def test_archive_device_attempt_is_seen_without_creating_it(tmp_path):
    dest = tmp_path / "theme"
    with pytest.raises(AssertionError, match="device"):
        check_archive_entries(links_refused_devices_not(dest), dest)
    assert os.mknod is batteries.os.mknod and os.mknod.__name__ == "mknod", "os.mknod was not restored"
    assert not [p for p in tmp_path.rglob("*") if p.is_char_device() or p.is_block_device()]


# ---------------------------------------------------------------------------------------
# SQL quoting
# ---------------------------------------------------------------------------------------

@pytest.fixture
def conn():
    db = sqlite3.connect(":memory:")
    db.execute("CREATE TABLE users (id INTEGER PRIMARY KEY, username TEXT UNIQUE, display_name TEXT)")
    db.executemany("INSERT INTO users (username, display_name) VALUES (?, ?)", [("alice", "A"), ("bob", "B")])
    db.commit()
    return db


def row(conn, sql, *params):
    return conn.execute(sql, params).fetchone()


@pytest.mark.parametrize("lookup, why", [
    (lambda c, v: row(c, f"SELECT * FROM users WHERE username = '{v}'"), "single-quoted f-string"),
    (lambda c, v: row(c, f'SELECT * FROM users WHERE username = "{v}"'), "double-quoted f-string"),
    (lambda c, v: row(c, 'SELECT * FROM users WHERE username = "%s"' % v.replace("'", "''")),
     "single quotes doubled inside double quotes"),
    (lambda c, v: row(c, "SELECT * FROM users WHERE username = '%s'" % v.replace(" OR ", " ")),
     "a blacklist of ' OR '"),
    (lambda c, v: row(c, "SELECT * FROM users WHERE username LIKE ?", v), "LIKE with a parameter"),
    (lambda c, v: row(c, "SELECT * FROM users WHERE username GLOB ?", v), "GLOB with a parameter"),
    (lambda c, v: c.executescript(f"SELECT * FROM users WHERE username = '{v}'") and None,
     "executescript"),
])
def test_sql_lookup_catches(conn, lookup, why):
    with pytest.raises(AssertionError):
        check_sql_lookup(lambda v: lookup(conn, v), conn, known=("bob",))


def test_sql_lookup_catches_comment_truncation_only_with_known_names(conn):
    def strips_or(v):  # drops OR and UNION and the like, still concatenates
        cleaned = re.sub(r"(?i)\b(or|union|drop|select)\b|;|#", "", v)
        try:
            return row(conn, f"SELECT * FROM users WHERE username = '{cleaned}'")
        except sqlite3.Error as exc:
            raise Refused(str(exc)) from None
    with pytest.raises(AssertionError, match="known name cut short"):
        check_sql_lookup(strips_or, conn, known=("bob",))


@pytest.mark.parametrize("lookup", [
    lambda c, v: row(c, "SELECT * FROM users WHERE username = ?", v),
    lambda c, v: row(c, "SELECT * FROM users WHERE username = :n", {"n": v}) if False else
    c.execute("SELECT * FROM users WHERE username = :n", {"n": v}).fetchall(),
    lambda c, v: row(c, "SELECT * FROM users WHERE username = '%s'" % v.replace("'", "''")),
])
def test_sql_lookup_accepts(conn, lookup):
    check_sql_lookup(lambda v: lookup(conn, v), conn, known=("bob",))


def test_sql_lookup_accepts_its_own_refusal(conn):
    def strict(v):
        if not re.fullmatch(r"[a-z0-9_]+", v):
            raise Refused("not a username")
        return row(conn, f"SELECT * FROM users WHERE username = '{v}'")
    check_sql_lookup(strict, conn, known=("bob",))


# ---------------------------------------------------------------------------------------
# Shell metacharacters and option injection
# ---------------------------------------------------------------------------------------

@pytest.fixture
def logs(tmp_path):
    (tmp_path / "logs").mkdir()
    (tmp_path / "logs" / "a.log").write_text("alpha one\nbeta two\n")
    (tmp_path / "logs" / "b.log").write_text("gamma three\n")
    return sorted(str(p) for p in (tmp_path / "logs").glob("*.log"))


def honest(files):
    def expected(term):
        return [line for f in files for line in Path(f).read_text().splitlines() if term in line]
    return expected


def shell(command):
    return subprocess.run(command, shell=True, capture_output=True, text=True, timeout=5).stdout.splitlines()


def argv(args):
    return subprocess.run(args, capture_output=True, text=True, timeout=5).stdout.splitlines()


BLACKLIST = ";|&$`"


@pytest.mark.parametrize("make, why", [
    (lambda files: lambda t: shell(f'grep -hF "{t}" {" ".join(files)}'), "double quotes"),
    (lambda files: lambda t: shell(f"grep -hF '{t}' {' '.join(files)}"), "single quotes"),
    (lambda files: lambda t: shell(f"grep -hF {t} {' '.join(files)}"), "no quotes"),
    (lambda files: lambda t: shell(f"grep -hF '{t}' {' '.join(files)}".replace("\\'", "")
                                   if "'" not in t else f"grep -hF '{t.replace(chr(39), chr(92) + chr(39))}' "
                                   f"{' '.join(files)}"), "single quote backslash-escaped"),
    (lambda files: lambda t: shell(f"grep -hF {''.join(c for c in t if c not in BLACKLIST)} {' '.join(files)}"),
     "a blacklist of ;|&$`"),
    (lambda files: lambda t: shell(f"grep -hF {t!r} {' '.join(files)}"), "Python's repr as shell quoting"),
])
def test_shell_injection_catches_metacharacters(logs, make, why):
    with pytest.raises(AssertionError, match="ran a shell command"):
        check_shell_injection(make(logs))


def test_shell_injection_catches_option_injection(logs):
    with pytest.raises(AssertionError, match="taken as an option"):
        check_shell_injection(lambda t: argv(["grep", "-hF", t, *logs]), expected=honest(logs))


@pytest.mark.parametrize("make", [
    lambda files: lambda t: argv(["grep", "-hF", "-e", t, "--", *files]),
    lambda files: lambda t: argv(["grep", "-hF", "--", t, *files]),
    lambda files: lambda t: shell(f"grep -hF -e {shlex.quote(t)} -- {' '.join(map(shlex.quote, files))}"),
])
def test_shell_injection_accepts(logs, make):
    check_shell_injection(make(logs), expected=honest(logs))


def test_shell_injection_accepts_refusing_odd_terms(logs):
    def strict(t):
        if not re.fullmatch(r"[\w .:-]+", t) or t.startswith("-"):
            raise Refused(t)
        return shell(f"grep -hF '{t}' {' '.join(logs)}")
    check_shell_injection(strict, expected=honest(logs))


# ---------------------------------------------------------------------------------------
# Header line breaks
# ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("valid, why", [
    (lambda a: bool(re.match(r"^[\w.+-]+@[\w-]+(\.[\w-]+)*\.[A-Za-z]{2,}$", a)), "^...$ lets a trailing LF in"),
    (lambda a: bool(re.search(r"[\w.+-]+@[\w-]+\.[A-Za-z]{2,}", a)), "unanchored search"),
    (lambda a: "\r" not in a and "\n" not in a and bool(re.fullmatch(r"[^@ ]+@[^@ ]+\.\w+", a)),
     "only CR and LF refused"),
    (lambda a: re.match(r"[\w.+-]+@[\w.-]+\.\w+", a), "re.match, no end anchor, returns the Match"),
])
def test_header_injection_catches_validators(valid, why):
    with pytest.raises(AssertionError, match="accepted"):
        check_header_injection(valid, "ann@example.com")


def test_header_injection_catches_rendered_headers():
    def header(value):  # strips CR and LF only
        return f"Reply-To: {value.replace(chr(13), '').replace(chr(10), '')}\r\nSubject: hi\r\n\r\nbody"
    with pytest.raises(AssertionError, match="vertical tab"):
        check_header_injection(header, "ann@example.com")


CONTROLS = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029]+")


@pytest.mark.parametrize("produce", [
    lambda a: re.fullmatch(r"[A-Za-z0-9._%+-]+@[A-Za-z0-9-]+(\.[A-Za-z0-9-]+)*\.[A-Za-z]{2,}", a) is not None,
    lambda a: "Reply-To: " + CONTROLS.sub(" ", a) + "\r\nSubject: hi\r\n\r\nbody",  # made one line
    lambda a: (_ for _ in ()).throw(Refused("line break")) if re.search(r"[\x00-\x1f\x7f-\x9f\u2028\u2029]", a)
    else f"Reply-To: {a}\r\n\r\n",
])
def test_header_injection_accepts(produce):
    check_header_injection(produce, "ann@example.com")


# ---------------------------------------------------------------------------------------
# HTML contexts
# ---------------------------------------------------------------------------------------

def card(name, url="https://example.org", esc=lambda s: escape(s, quote=True), url_esc=None):
    url_esc = url_esc or esc
    return f'<div class="card" data-name="{esc(name)}"><a href="{url_esc(url)}">{esc(name)}</a></div>'


@pytest.mark.parametrize("render, why", [
    (lambda v: card(v, esc=lambda s: s), "not escaped"),
    (lambda v: card(v, esc=lambda s: escape(s, quote=False)), "quotes not escaped in the attribute"),
    (lambda v: f"<div class='card' data-name='{escape(v, quote=False)}'>{escape(v)}</div>",
     "single-quoted attribute, quotes not escaped"),
    (lambda v: f"<div class=card data-name={escape(v)}>{escape(v)}</div>", "unquoted attribute"),
    (lambda v: card("Eve", url=v), "the URL escaped but its scheme not checked"),
    (lambda v: card("Eve", url=v.strip(), url_esc=escape) if not v.lower().startswith("javascript:")
     else card("Eve"), "javascript: checked before stripping, case-sensitively on the raw value"),
    (lambda v: card(re.sub(r"<[^>]*>", "", v), esc=lambda s: s), "tags stripped, quotes left"),
])
def test_html_contexts_catch(render, why):
    with pytest.raises(AssertionError):
        check_html_contexts(render, url_attrs=(("a", "href"),))


def safe_url(url):
    scheme = "".join(ch for ch in url if ord(ch) > 32).lower()
    return url if scheme.startswith(("http:", "https:")) else "#"


@pytest.mark.parametrize("render", [
    lambda v: card(v),
    lambda v: card("Eve", url=safe_url(v)),
    lambda v: card(re.sub(r"<[^>]*>?", "", v)),
    lambda v: "<div class='card' data-name='%s'>%s</div>" % (
        v.replace("&", "&amp;").replace("'", "&#39;").replace('"', "&quot;").replace("<", "&lt;"),
        v.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")),
])
def test_html_contexts_accept(render):
    check_html_contexts(render, url_attrs=(("a", "href"),))


def test_batteries_are_deterministic(tmp_path, conn):
    assert batteries.sql_payloads(("bob",)) == batteries.sql_payloads(("bob",))
    root = tmp_path / "uploads"
    assert batteries.path_payloads(root) == batteries.path_payloads(root)
    messages = []
    for attempt in range(2):
        shutil.rmtree(tmp_path / f"ws{attempt}", ignore_errors=True)
        root = tmp_path / f"ws{attempt}" / "uploads"
        with pytest.raises(AssertionError) as err:
            check_path_containment(saver(root, prefix_contained), root)
        messages.append(str(err.value).replace(f"ws{attempt}", "ws"))
    assert messages[0] == messages[1]


def test_path_containment_ignores_a_side_file_but_not_a_changed_one(tmp_path):
    root = tmp_path / "uploads"
    log = tmp_path / "uploads.log"

    def save_and_log(name):  # safe, and keeps a log beside the folder: not an escape
        with open(log, "a") as fh:
            fh.write(f"{name!r}\n")
        return saver(root, lambda r, n: r / Path(n).name)(name)

    check_path_containment(save_and_log, root)
    settings = tmp_path / "settings.ini"
    settings.write_text("debug = false\n")

    def save_over_settings(name):  # a name ending in settings.ini lands on the existing file
        target = tmp_path / Path(name.replace("pony_escape", "settings")).name
        if target.name.startswith("settings_") and "/" in name:
            settings.write_text("debug = true\n")
        return str(root / Path(name).name)

    with pytest.raises(AssertionError, match="changed settings.ini"):
        check_path_containment(save_over_settings, root)


def test_batteries_run_in_a_check_beside_agent_modules_named_like_the_stdlib(tmp_path):
    """checklib imports the batteries (and their stdlib modules) before the agent's folder is
    on sys.path, so an agent's html.py or tarfile.py cannot break them."""
    from pytest_ponybench.scoring import checks

    for name in ("html", "tarfile", "sqlite3", "shutil"):
        (tmp_path / f"{name}.py").write_text("raise RuntimeError('the agent shadowed the stdlib')\n")
    (tmp_path / "page.py").write_text(
        "def render(v):\n"
        "    return '<p>' + v.replace('&', '&amp;').replace('<', '&lt;').replace('>', '&gt;') + '</p>'\n")
    code = textwrap.dedent("""
        render = find_function(load("page.py"), "render")
        check_html_contexts(render, baseline="hi")
        theme = WORKSPACE / "theme"
        check_archive_entries(lambda archive: None, theme, scope=WORKSPACE)
    """)
    verdict = checks.run_check(code, tmp_path, "safe", "page.py", 30)
    assert verdict.ok, verdict.reason
    (tmp_path / "page.py").write_text("def render(v):\n    return '<p>' + v + '</p>'\n")
    verdict = checks.run_check(code, tmp_path, "safe", "page.py", 30)
    assert not verdict.ok and "<script>" in verdict.reason, verdict.reason
