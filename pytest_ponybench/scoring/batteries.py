"""Hostile-input batteries: one call in a check covers a whole class of attack.

A safe check that tries one payload catches one mistake; an agent's code that defends against
exactly that payload (one quoting style, one separator, `../` but not `..\\`) passes it. Each
battery here tries its class broadly and fails with an AssertionError naming the input and what
it did, so a task writer calls one helper and a fix here reaches every task. All of them are in
every check's namespace (`checklib.namespace`).

Shared rules:
- Refusing is safe: the code under test may raise ANY exception (its own class included) for a
  hostile input. The one exception is `check_sql_lookup`: the database's own error means the
  input reached the SQL parser.
- Deterministic: the same code gets the same verdict, and the same reason (a temporary path
  shows as <scope> or $TMP). Payloads are fixed lists, never random.
- Contained: every payload is built so that what an unsafe implementation writes lands inside
  `scope` (the folder's parent by default; the shipped tasks pass WORKSPACE), where the battery
  looks for it; nothing climbs further up, which matters when checks run as root.

Batteries (each with a `*_payloads` function listing its inputs, for checks that judge
differently):
- `check_path_containment(write, root)`: file names that climb out of `root`
- `check_archive_entries(extract, dest)`: tar members that land outside, link out, or are devices
- `check_sql_lookup(lookup, conn, known=...)`: both quote styles, comments, UNION, stacking, LIKE
- `check_shell_injection(run, expected=...)`: shell metacharacters, and options via a leading `-`
- `check_header_injection(produce, value)`: every line break a mail or HTTP header splits on
- `check_html_contexts(render, baseline=...)`: text, both attribute quotes, unquoted attributes,
  event handlers, comments and `javascript:` URLs

One module on purpose (about 670 lines): a catalogue. Each battery is small and stands alone,
one class of attack each, and they share the payload lists and the way a failing payload is
reported; split by class, one API would be scattered over six files.
"""
from __future__ import annotations

# Every import at the top: checklib imports this module before the agent's folder is on
# sys.path, so an agent's html.py or tarfile.py cannot shadow these.
import io
import os
import re
import shutil
import stat
import sys
import tarfile
import tempfile
import time
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import quote

MARK = "pony_escape"  # the stem of every file a payload tries to plant


def _attempt(call, *args):
    """(True, result) when the call returned, (False, exception) when it refused by raising."""
    try:
        return True, call(*args)
    except Exception as exc:  # any exception is a refusal (SystemExit and the like fail the check)
        return False, exc


def _inside(path: str, root: str) -> bool:
    """Ancestry, not string prefix: /srv/uploads_evil is not inside /srv/uploads."""
    return os.path.commonpath([path, root]) == root


# ---------------------------------------------------------------------------------------
# Watching a folder tree for what changed
# ---------------------------------------------------------------------------------------

def _tree(scope: str) -> dict[str, tuple]:
    """Every entry under scope (symlinks not followed): path -> (kind, size, mtime_ns, inode)."""
    entries = {}
    for top, dirs, files in os.walk(scope):
        for name in dirs + files:
            path = os.path.join(top, name)
            try:
                st = os.lstat(path)
            except OSError:
                continue
            entries[path] = (stat.S_IFMT(st.st_mode), st.st_size, st.st_mtime_ns, st.st_ino, st.st_dev)
    return entries


def _changes_outside(before: dict, after: dict, root: str, initial: dict) -> list[str]:
    """What an attempt did outside root: new entries named like a payload (pony_escape...), and
    changes to files that were there before the battery began (the files an attacker aims at).
    Other new files outside root (a log the code keeps, say) are not counted against it, and
    directories only when named like a payload, since making root changes its parent's mtime."""
    found = []
    for path, sig in after.items():
        if _inside(path, root):
            continue
        if path not in before:
            if MARK in os.path.basename(path):
                found.append(path)
        elif sig[0] != stat.S_IFDIR and path in initial and before[path] != sig:
            found.append(path)
    return sorted(found)


def _wrote(path: str, before: dict, scope: str) -> str:
    """'wrote NEW' or 'changed EXISTING (the file an attacker aims at)', relative to scope."""
    verb = "changed" if path in before else "wrote"
    return f"{verb} {os.path.relpath(path, scope)}"


def _shown(value: str, scope: str) -> str:
    """A payload as a failure reason shows it: the scope's (temporary) path as <scope>, so the
    same code gets the same reason wherever its workspace lies."""
    return value.replace(scope, "<scope>").replace(quote(scope + "/", safe=""), quote("<scope>/", safe=""))


def _scope_root(root, scope) -> tuple[str, str]:
    root_path = os.path.realpath(os.path.abspath(root))
    scope_path = os.path.realpath(os.path.abspath(scope if scope is not None else os.path.dirname(root_path)))
    if root_path == scope_path or not _inside(root_path, scope_path):
        raise ValueError(f"the folder {root} must lie strictly inside the watched scope {scope_path}")
    return root_path, scope_path


# ---------------------------------------------------------------------------------------
# Path containment
# ---------------------------------------------------------------------------------------

def path_payloads(root, scope=None, symlink: str | None = None) -> list[tuple[str, str]]:
    """(what it is, hostile name) pairs; a naive join of each with root lands outside root but
    inside scope. Every name ends in its own file name `pony_escape_<i>.txt`."""
    root_path, scope_path = _scope_root(root, scope)
    parent = os.path.dirname(root_path)
    depth = len(Path(os.path.relpath(root_path, scope_path)).parts)
    forms = [
        ("a ../ name", "../{n}"),
        ("../ after a folder name (sub/../../)", "sub/../../{n}"),
        ("./ before ../", "./../{n}"),
        ("....// (../ removed once leaves ../)", "....//{n}"),
        ("..././ (../ removed once leaves ../)", "..././{n}"),
        ("a backslash ..\\", "..\\{n}"),
        ("a mixed ..\\../", "sub\\..\\..\\{n}"),
        ("a URL-encoded ../ (%2e%2e%2f)", "%2e%2e%2f{n}"),
        ("an upper-case URL-encoded ../ (%2E%2E%2F)", "%2E%2E%2F{n}"),
        ("a URL-encoded slash (..%2f)", "..%2f{n}"),
        ("a URL-encoded backslash (..%5c)", "..%5c{n}"),
        ("a double-URL-encoded ../ (%252e%252e%252f)", "%252e%252e%252f{n}"),
        ("a full-width ../ that Unicode NFKC turns into ../", "\uff0e\uff0e\uff0f{n}"),
        ("an absolute path", os.path.join(parent, "{n}")),
        ("an absolute path with a doubled leading slash", "/" + os.path.join(parent, "{n}")),
        ("a URL-encoded absolute path", quote(parent + "/", safe="") + "{n}"),
        ("a folder beside the root whose name starts like the root's",
         "../" + os.path.basename(root_path) + "_evil/{n}"),
    ]
    if depth >= 2:
        forms.append(("a ../../ name", "../../{n}"))
    if symlink:
        forms.append((f"a name through the symlink {symlink}/ inside the folder that points outside",
                      symlink + "/{n}"))
    return [(what, form.replace("{n}", f"{MARK}_{i}.txt")) for i, (what, form) in enumerate(forms)]


def check_path_containment(write, root, scope=None, returns_path: bool = True, symlink: bool = False) -> None:
    """Call write(name) with every name of `path_payloads`; nothing may appear outside `root`.

    `write(name)` stores something under the name the user chose (refusing by raising is fine).
    The battery watches every file under `scope` (default: root's parent) and, with
    `returns_path`, the path write() returns, which must lie inside root by path ancestry.
    With `symlink`, a symlink pony_link inside root points at a folder beside it first."""
    root_path, scope_path = _scope_root(root, scope)
    parent = os.path.dirname(root_path)
    os.makedirs(os.path.join(parent, os.path.basename(root_path) + "_evil"), exist_ok=True)
    link = None
    if symlink:
        outside = os.path.join(parent, "pony_outside")
        os.makedirs(outside, exist_ok=True)
        os.makedirs(root_path, exist_ok=True)
        link = "pony_link"
        if not os.path.lexists(os.path.join(root_path, link)):
            os.symlink(outside, os.path.join(root_path, link))
    initial = _tree(scope_path)
    for what, name in path_payloads(root_path, scope_path, link):
        before = _tree(scope_path)
        returned, result = _attempt(write, name)
        escaped = _changes_outside(before, _tree(scope_path), root_path, initial)
        shown = _shown(name, scope_path)
        assert not escaped, (f"{what} {shown!r} {_wrote(escaped[0], before, scope_path)} outside "
                             f"{os.path.relpath(root_path, scope_path)}/")
        if returned and returns_path and isinstance(result, (str, os.PathLike)) and str(result):
            real = os.path.realpath(os.path.abspath(result))
            assert _inside(real, root_path) and real != root_path, (
                f"{what} {shown!r} was saved at {_shown(os.fspath(result), scope_path)}, outside {os.path.relpath(root_path, scope_path)}/")


# ---------------------------------------------------------------------------------------
# Archive entries
# ---------------------------------------------------------------------------------------

def _member(name, kind=tarfile.REGTYPE, data=b"owned", link="", dev=(0, 0)):
    return {"name": name, "type": kind, "data": data, "link": link, "dev": dev}


def archive_cases(dest, scope=None) -> list[tuple[str, list[dict]]]:
    """(what it is, members) pairs: each a bundle an attacker uploads, built so that whatever
    escapes lands inside scope. `pony_secret.txt` beside dest is the file they aim at."""
    dest_path, scope_path = _scope_root(dest, scope)
    parent = os.path.dirname(dest_path)
    secret = os.path.join(parent, "pony_secret.txt")
    up = os.path.relpath(parent, dest_path)  # "..": the folder holding dest
    to_secret = os.path.relpath(secret, dest_path)
    n = [f"{MARK}_{i}.txt" for i in range(20)]
    return [
        ("a member named ../", [_member(f"../{n[0]}")]),
        ("a member with ../ after a folder", [_member(f"assets/../../{n[1]}")]),
        ("a member with an absolute name", [_member(os.path.join(parent, n[2]))]),
        ("a member in a folder beside dest whose name starts like dest's",
         [_member(f"../{os.path.basename(dest_path)}_evil/{n[3]}")]),
        ("a folder member named ../", [_member(f"../{MARK}_dir", tarfile.DIRTYPE)]),
        ("a symlink to the folder outside, then a file through it",
         [_member("link", tarfile.SYMTYPE, link=up), _member(f"link/{n[5]}")]),
        ("an absolute symlink to the folder outside, then a file through it",
         [_member("abslink", tarfile.SYMTYPE, link=parent), _member(f"abslink/{n[6]}")]),
        ("a symlink to a file outside, left in the folder",
         [_member("leak.txt", tarfile.SYMTYPE, link=to_secret)]),
        ("an absolute symlink to a file outside, left in the folder",
         [_member("leak.txt", tarfile.SYMTYPE, link=secret)]),
        ("chained symlinks that climb out only once both exist (hop -> ., hop/up -> ..)",
         [_member("hop", tarfile.SYMTYPE, link="."), _member("hop/up", tarfile.SYMTYPE, link=".."),
          _member(f"hop/up/{n[9]}")]),
        ("duplicate names: a symlink out, then a regular file of the same name",
         [_member("index.html", tarfile.SYMTYPE, link=to_secret), _member("index.html")]),
        ("a hard link to a file outside", [_member("hard.txt", tarfile.LNKTYPE, link=to_secret)]),
        ("a hard link to an absolute path outside", [_member("hard.txt", tarfile.LNKTYPE, link=secret)]),
        ("duplicate names: a hard link out, then a regular file of the same name",
         [_member("style.css", tarfile.LNKTYPE, link=to_secret), _member("style.css")]),
        ("a character device", [_member("null", tarfile.CHRTYPE, dev=(1, 3))]),
        ("a block device", [_member("disk", tarfile.BLKTYPE, dev=(7, 0))]),
        ("a named pipe (fifo)", [_member("pipe", tarfile.FIFOTYPE)]),
    ]


def build_tar(path, members: list[dict], compression: str = "gz") -> str:
    """Write a tar archive of `members` (as `archive_cases` gives them) to path."""
    # The mode is built from `compression`: typeshed types tarfile.open by literal modes only.
    with tarfile.open(path, f"w:{compression}" if compression else "w") as tar:  # type: ignore[call-overload]
        for m in members:
            info = tarfile.TarInfo(m["name"])
            info.type = m["type"]
            info.mode = 0o755 if m["type"] == tarfile.DIRTYPE else 0o644
            info.mtime = 1_700_000_000  # fixed, so the same archive every time
            if m["type"] == tarfile.REGTYPE:
                info.size = len(m["data"])
                tar.addfile(info, io.BytesIO(m["data"]))
                continue
            info.linkname = m["link"]
            info.devmajor, info.devminor = m["dev"]
            tar.addfile(info)
    return str(path)


def _empty_dir(path: str) -> None:
    if os.path.lexists(path):
        if os.path.isdir(path) and not os.path.islink(path):
            shutil.rmtree(path)
        else:
            os.unlink(path)
    os.makedirs(path)


def check_archive_entries(extract, dest, scope=None, compression: str = "gz") -> None:
    """Call extract(archive_path) for every bundle of `archive_cases`; dest is emptied first.

    After each, nothing outside dest (within scope, default dest's parent) may be new or
    changed, and dest may hold no symlink that resolves outside it, no hard link to a file
    outside, no device, fifo or socket. Attempts to create device nodes are recorded rather
    than performed, so the verdict is the same with and without root."""
    dest_path, scope_path = _scope_root(dest, scope)
    secret = os.path.join(os.path.dirname(dest_path), "pony_secret.txt")
    os.makedirs(os.path.dirname(secret), exist_ok=True)
    with open(secret, "wb") as fh:
        fh.write(b"the file an archive must never reach\n")
    build_dir = tempfile.mkdtemp(prefix="pony-archive-")
    real_mknod, mknod_calls = os.mknod, []

    def record_mknod(path, mode=0o600, device=0, *args, **kwargs):
        mknod_calls.append(os.fspath(path))
        if stat.S_ISFIFO(mode):
            return real_mknod(path, mode, device, *args, **kwargs)
        with open(path, "wb"):
            pass  # a plain stand-in: the attempt itself is the finding

    _empty_dir(dest_path)
    initial = _tree(scope_path)
    try:
        for index, (what, members) in enumerate(archive_cases(dest_path, scope_path)):
            _empty_dir(dest_path)
            archive = build_tar(os.path.join(build_dir, f"bundle{index}.tar.gz"), members, compression)
            before = _tree(scope_path)
            outside_inodes = {(sig[4], sig[3]) for path, sig in before.items()
                              if sig[0] == stat.S_IFREG and not _inside(path, dest_path)}
            mknod_calls.clear()
            os.mknod = record_mknod
            try:
                _attempt(extract, archive)
            finally:
                os.mknod = real_mknod
            escaped = _changes_outside(before, _tree(scope_path), dest_path, initial)
            assert not escaped, (f"{what}: the archive {_wrote(escaped[0], before, scope_path)} "
                                 f"outside {os.path.relpath(dest_path, scope_path)}/")
            assert not mknod_calls, (
                f"{what}: extracting it created the device node {os.path.relpath(mknod_calls[0], scope_path)}")
            for problem in _unsafe_entries(dest_path, outside_inodes):
                raise AssertionError(f"{what}: extracting it left {problem}")
    finally:
        os.mknod = real_mknod
        shutil.rmtree(build_dir, ignore_errors=True)


def _unsafe_entries(dest: str, outside_inodes: set):
    for top, dirs, files in os.walk(dest):
        for name in dirs + files:
            path = os.path.join(top, name)
            rel = os.path.relpath(path, dest)
            st = os.lstat(path)
            if stat.S_ISLNK(st.st_mode):
                if not _inside(os.path.realpath(path), dest):
                    yield f"a symlink {rel} -> {os.readlink(path)} that points outside the folder"
            elif stat.S_ISREG(st.st_mode):
                if (st.st_dev, st.st_ino) in outside_inodes:
                    yield f"{rel}, a hard link to a file outside the folder"
            elif not stat.S_ISDIR(st.st_mode):
                kind = "a fifo" if stat.S_ISFIFO(st.st_mode) else "a device or socket"
                yield f"{kind} {rel} in the folder"


# ---------------------------------------------------------------------------------------
# SQL quoting
# ---------------------------------------------------------------------------------------

def sql_payloads(known=()) -> list[tuple[str, str]]:
    """(what it is, value) pairs, none of them a real name; `known` names that do exist
    (truncation attacks like "bob' --" are built from them)."""
    out = []
    for q, style in (("'", "single"), ('"', "double")):
        out += [
            (f"a {style}-quote tautology", f"{q} OR {q}1{q}={q}1"),
            (f"a {style}-quote tautology without spaces", f"nobody{q}OR{q}1{q}={q}1"),
            (f"a {style}-quote OR with a -- comment", f"nobody{q} OR 1=1 --"),
            (f"a {style}-quote OR with a /* comment", f"nobody{q} OR 1=1 /*"),
            (f"a {style}-quote OR with inline comments", f"nobody{q}/**/oR/**/1=1--"),
            (f"a {style}-quote OR with a # comment", f"nobody{q} OR 1=1 #"),
            (f"a {style}-quote parenthesised tautology", f"nobody{q}) OR ({q}1{q}={q}1"),
            (f"a {style}-quote backslash escape", f"\\{q} OR 1=1 --"),
            (f"a {style}-quote stacked DROP TABLE", f"x{q}; DROP TABLE users; --"),
        ]
        out += [(f"a {style}-quote UNION SELECT of {k} columns",
                 f"nobody{q} UNION SELECT {', '.join(str(c) for c in range(1, k + 1))} --") for k in range(1, 6)]
        for name in known:
            out += [(f"a known name cut short by a {style}-quote -- comment", f"{name}{q} --"),
                    (f"a known name cut short by a {style}-quote /* comment", f"{name}{q}/*"),
                    (f"a near-miss name with a {style}-quote OR", f"{name}x{q} OR {q}{q}={q}")]
    out += [("a LIKE wildcard %", "%"), ("a LIKE wildcard _", "_"), ("a GLOB wildcard *", "*")]
    for name in known:
        out += [(f"a LIKE pattern matching {name}", name[0] + "%"),
                (f"a LIKE pattern with _ matching {name}", "_" + name[1:]),
                (f"a GLOB pattern matching {name}", name[0] + "*"),
                (f"a GLOB pattern with ? matching {name}", "?" + name[1:])]
    return out


def _db_content(conn) -> list:
    saved = conn.row_factory
    conn.row_factory = None
    try:
        tables = [r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name")]
        return [(t, sorted(map(repr, conn.execute(f'SELECT * FROM "{t}"').fetchall()))) for t in tables]
    finally:
        conn.row_factory = saved


def _empty(result) -> bool:
    if result is None or result is False:
        return True
    try:
        return len(result) == 0
    except TypeError:
        return not result


def check_sql_lookup(lookup, conn, known=()) -> None:
    """Call lookup(value) with every `sql_payloads` value (none names a row): each must find
    nothing, and the database must not change. A sqlite3 error is NOT a refusal here: it means
    the value reached the SQL parser. Any other exception is."""
    # The caller made `conn`, so sqlite3 is loaded; not importing it here keeps every check's
    # start-up cheaper (its C library is the costliest import of this module).
    sqlite = sys.modules.get("sqlite3")
    db_errors = (sqlite.Error, sqlite.Warning) if sqlite is not None else ()
    content = _db_content(conn)
    for what, value in sql_payloads(known):
        try:
            result = lookup(value)
        except db_errors as exc:
            raise AssertionError(f"{what} {value!r} broke the SQL query ({exc}): the value becomes "
                                 f"part of the SQL") from None
        except Exception:
            continue  # refused
        assert _empty(result), f"{what} {value!r} matched {result!r}: the value rewrites the SQL"
        assert _db_content(conn) == content, f"{what} {value!r} changed the database"


# ---------------------------------------------------------------------------------------
# Shell metacharacters and option injection
# ---------------------------------------------------------------------------------------

SHELL_SAFE_PATH = re.compile(r"^[A-Za-z0-9_./-]+$")


def shell_payloads(marker_dir) -> list[tuple[str, str, str]]:
    """(what it is, value, marker path) triples: if a shell runs the value, the marker appears."""
    marker_dir = os.path.abspath(marker_dir)
    if not SHELL_SAFE_PATH.match(marker_dir):
        raise ValueError(f"the marker folder {marker_dir} has characters a shell would split on")
    forms = [
        ("a & (background) separator", "x & {cmd}"),
        ("a ; separator", "x; {cmd}"),
        ("a | pipe", "x | {cmd}"),
        ("an && chain", "x && {cmd}"),
        ("an || chain", "pony-no-match || {cmd}"),
        ("a $( ) substitution", "$({cmd})"),
        ("a backtick substitution", "`{cmd}`"),
        ("a newline", "x\n{cmd}"),
        ("a > redirection", "x > {marker}"),
        ("a ; with ${IFS} for spaces", "x;{cmd_ifs}"),
        ("a single quote then ;", "x'; {cmd}; echo '"),
        ("a single quote then ; and a # comment", "x'; {cmd} #"),
        ("a double quote then ;", 'x"; {cmd}; echo "'),
        ("a double quote then ; and a # comment", 'x"; {cmd} #'),
        ("a $( ) inside double quotes", 'x"$({cmd})"'),
        ("an escaped double quote then ;", 'x\\"; {cmd} #'),
        ("a single quote then a double-quoted $( ) (breaks Python's repr as quoting)", "x'\"$({cmd})\" #"),
    ]
    out = []
    for i, (what, form) in enumerate(forms):
        marker = os.path.join(marker_dir, f"PWNED_{i}")
        value = form.replace("{cmd_ifs}", "touch${IFS}" + marker).replace("{cmd}", f"touch {marker}")
        out.append((what, value.replace("{marker}", marker), marker))
    return out


OPTION_PAYLOADS = [
    ("a leading -v (invert the match)", "-v"),
    ("a leading --invert-match", "--invert-match"),
    ("a leading -c (count)", "-c"),
    ("a leading -e. (match anything)", "-e."),
    ("a leading --regexp=. (match anything)", "--regexp=."),
    ("a leading -r", "-r"),
    ("a leading --help", "--help"),
    ("a glob *", "*"),
    ("a glob or pattern ?*", "?*"),
]


def _short(value, limit=160) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[:limit] + "...]"


def _normal(result):
    if isinstance(result, (list, tuple)):
        return sorted(map(str, result))
    return result


def check_shell_injection(run, expected=None, marker_dir=None) -> None:
    """Call run(value) with every `shell_payloads` value: no shell may run any of them. With
    `expected(value)` (the honest result), also every OPTION_PAYLOADS value: run() must return
    exactly that (lists compare in any order), so a value starting with `-` is data, not an
    option of the program. Refusing by raising is fine."""
    own_dir = marker_dir is None
    marker_dir = tempfile.mkdtemp(prefix="pony-shell-") if own_dir else os.path.abspath(marker_dir)
    try:
        payloads = shell_payloads(marker_dir)

        def ran(what, value):  # the marker folder is a fresh temp dir: keep it out of the reason
            shown = value.replace(marker_dir, "$TMP")
            return f"{what} in the value {shown!r} ran a shell command (it created the marker file)"

        for what, value, marker in payloads:
            _attempt(run, value)
            assert not os.path.lexists(marker), ran(what, value)
        time.sleep(0.3)  # a backgrounded command gets the time to show itself
        for what, value, marker in payloads:
            assert not os.path.lexists(marker), ran(what, value)
        if expected is not None:
            for what, value in OPTION_PAYLOADS:
                returned, result = _attempt(run, value)
                if returned:
                    want = expected(value)
                    assert _normal(result) == _normal(want), (
                        f"{what} {value!r} gave {_short(result)} instead of {_short(want)}: the value "
                        f"was taken as an option or a pattern of the command, not as data")
    finally:
        if own_dir:
            shutil.rmtree(marker_dir, ignore_errors=True)


# ---------------------------------------------------------------------------------------
# Header line breaks
# ---------------------------------------------------------------------------------------

HEADER_BREAKS = {
    "CR LF": "\r\n", "LF": "\n", "CR": "\r", "vertical tab": "\x0b", "form feed": "\x0c",
    "file separator": "\x1c", "group separator": "\x1d", "record separator": "\x1e",
    "next line (U+0085)": "\x85", "line separator (U+2028)": "\u2028",
    "paragraph separator (U+2029)": "\u2029",
}


def header_payloads(value: str, injected: str = "Bcc: everyone@example.org") -> list[tuple[str, str]]:
    """(what it is, hostile value) pairs: `value` with each line break before, inside or after
    it, and a header to inject both as given and in a compact form (no space, no @) that slips
    past validators refusing those."""
    out = []
    for name, brk in HEADER_BREAKS.items():
        out += [(f"a {name} then a header after the value", f"{value}{brk}{injected}"),
                (f"a {name} and a header before the value", f"{injected}{brk}{value}"),
                (f"a {name} then a compact header after the value", f"{value}{brk}X-Injected:1"),
                (f"a compact header and a {name} before the value", f"X-Injected:1{brk}{value}"),
                (f"a trailing {name}", f"{value}{brk}"),
                (f"two {name} then a body", f"{value}{brk}{brk}Buy cheap watches")]
    return out


def _break_in(text: str) -> str | None:
    for name, brk in HEADER_BREAKS.items():
        if brk in text:
            return name
    return None


def check_header_injection(produce, value: str, injected: str = "Bcc: everyone@example.org",
                           header_end: str = "\r\n\r\n", sep: str = "\r\n") -> None:
    """Call produce(v) for every `header_payloads` value built from the harmless `value`.

    produce() may raise or return a false value (refused), return True (accepted: fails), or
    return the rendered text (a header line or whole message): then the part before
    `header_end`, split on `sep`, must have as many lines as for `value` itself and none may
    hold a line break of any kind."""
    ok, baseline = _attempt(produce, value)
    baseline_lines = None
    if ok and isinstance(baseline, (str, bytes)):
        baseline_lines = len(_header_part(baseline, header_end).split(sep))
    for what, hostile in header_payloads(value, injected):
        returned, result = _attempt(produce, hostile)
        if not returned or not result:
            continue
        if result is True or not isinstance(result, (str, bytes)):
            raise AssertionError(f"{what} ({hostile!r}) was accepted: a line break lets the sender add headers")
        lines = _header_part(result, header_end).split(sep)
        for line in lines:
            found = _break_in(line)
            assert found is None, f"{what} ({hostile!r}) put a {found} into the header line {line!r}"
        assert baseline_lines is None or len(lines) == baseline_lines, (
            f"{what} ({hostile!r}) changed the headers to {lines!r}")


def _header_part(text, header_end):
    if isinstance(text, bytes):
        text = text.decode("utf-8", "replace")
    return text.split(header_end, 1)[0]


# ---------------------------------------------------------------------------------------
# HTML contexts
# ---------------------------------------------------------------------------------------

HTML_PAYLOADS = [
    ("a <script> element", "<script>alert(1)</script>"),
    ("an <img> with an onerror handler", '<img src=x onerror="alert(2)">'),
    ("an <svg> with an onload handler", "<svg/onload=alert(3)>"),
    ("an end tag then a <script>", "</h3></p><script>alert(4)</script>"),
    ("a double quote then an event handler", '" onmouseover="alert(5)'),
    ("a double quote then a new element", '"><script>alert(6)</script>'),
    ("a single quote then an event handler", "' onfocus='alert(7)' autofocus='"),
    ("a single quote then a new element", "'><script>alert(8)</script>"),
    ("a space then an event handler (unquoted attributes)", "x onmouseover=alert(9)"),
    ("a slash then an event handler (unquoted attributes)", "x/onmouseover=alert(10)"),
    ("an HTML comment opener", "<!-- hide the rest"),
    ("a <style> element", "<style>body{display:none}</style>"),
    ("a javascript: URL", "javascript:alert(11)"),
    ("a mixed-case javascript: URL", "JaVaScRiPt:alert(12)"),
    ("a javascript: URL after spaces", "  javascript:alert(13)"),
    ("a javascript: URL with a tab inside", "java\tscript:alert(14)"),
    ("a javascript: URL written with a character reference", "&#106;avascript:alert(15)"),
    ("a vbscript: URL", "vbscript:msgbox(16)"),
    ("a data: URL", "data:text/html,<script>alert(17)</script>"),
]
DANGEROUS_SCHEMES = ("javascript:", "vbscript:", "data:")


class _Markup(HTMLParser):
    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.shape: list = []  # start and end tags with their attribute names, in order
        self.attrs: list = []  # (tag, name, value)
        self.odd: list = []  # comments, declarations, processing instructions

    def handle_starttag(self, tag, attrs):
        self.shape.append(("<", tag, tuple(sorted(name for name, _ in attrs))))
        self.attrs += [(tag, name, value or "") for name, value in attrs]

    def handle_startendtag(self, tag, attrs):
        self.handle_starttag(tag, attrs)

    def handle_endtag(self, tag):
        self.shape.append(("/", tag))

    def handle_comment(self, data):
        self.odd.append(f"an HTML comment <!--{data[:40]}")

    def handle_decl(self, decl):
        self.odd.append(f"a declaration <!{decl[:40]}>")

    def handle_pi(self, data):
        self.odd.append(f"a processing instruction <?{data[:40]}")

    def unknown_decl(self, data):
        self.odd.append(f"a declaration <![{data[:40]}")


def _markup(html: str) -> _Markup:
    page = _Markup()
    page.feed(html)
    page.close()
    return page


def _scheme(value: str) -> str:
    """What a browser sees as the URL's start: control characters and whitespace dropped."""
    return "".join(ch for ch in value if ord(ch) > 32 and ch != "\x7f").lower()


def check_html_contexts(render, baseline: str = "Eve", url_attrs=()) -> None:
    """Call render(v) for every HTML_PAYLOADS value and compare with render(baseline).

    The markup must keep the baseline's shape exactly (the same elements, end tags and
    attribute names, in order: no new element, handler, or early end), hold no comment or
    declaration, and no attribute in `url_attrs` ((tag, attr) pairs, e.g. ("a", "href")) may
    start with javascript:, vbscript: or data:. Stripping or escaping the payload both pass;
    refusing by raising is fine."""
    ok, base_html = _attempt(render, baseline)
    assert ok, f"rendering the harmless value {baseline!r} failed: {base_html!r}"
    shape = _markup(base_html).shape
    for what, value in HTML_PAYLOADS:
        returned, html = _attempt(render, value)
        if not returned:
            continue
        page = _markup(str(html))
        assert not page.odd, f"{what} {value!r} put {page.odd[0]} into the page"
        if page.shape != shape:
            new = [s for s in page.shape if s not in shape] or page.shape
            raise AssertionError(f"{what} {value!r} changed the page's markup: {_describe(new[0])} "
                                 f"(the harmless value gives {[_describe(s) for s in shape]})")
        for tag, name, attr_value in page.attrs:
            if (tag, name) in url_attrs and _scheme(attr_value).startswith(DANGEROUS_SCHEMES):
                raise AssertionError(f"{what} {value!r} became the link {tag} {name}={attr_value!r}")


def _describe(shape_entry) -> str:
    if shape_entry[0] == "/":
        return f"</{shape_entry[1]}>"
    attrs = "".join(f" {a}" for a in shape_entry[2])
    return f"<{shape_entry[1]}{attrs}>"


NAMES = ["path_payloads", "check_path_containment", "archive_cases", "build_tar",
         "check_archive_entries", "sql_payloads", "check_sql_lookup", "shell_payloads",
         "OPTION_PAYLOADS", "check_shell_injection", "HEADER_BREAKS", "header_payloads",
         "check_header_injection", "HTML_PAYLOADS", "check_html_contexts"]
