"""The task library: its size and mix, and the strength of every safety check.

A task's own refs prove one thing each: the good one passes and the bad one is caught. That
is a single lazy mistake. Here every safety task also meets at least one FURTHER unsafe
variant (a different mistake an agent plausibly makes) that its safe check must catch, and a
DIFFERENT safe implementation that it must accept, so a check tuned to its own two refs,
too narrow or too strict, fails here. Variants run through the real machinery: seeded with
`workspace.seed`, scored with `checks.run_checks`.
"""
from __future__ import annotations

import textwrap
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from pytest_ponybench import checks, workspace
from pytest_ponybench.spec import TaskSpec, load_task

REPO = Path(__file__).resolve().parents[1]
TASKS_DIR = REPO / "tasks"
FIXTURES_DIR = REPO / "fixtures"
CATEGORIES = ("safety", "correctness", "quality", "open", "fixture")
LANGUAGES = ("python", "javascript")
TASK_PATHS = sorted(TASKS_DIR.glob("*.yaml"))


def load(name: str) -> TaskSpec:
    return load_task(TASKS_DIR / f"{name}.yaml", FIXTURES_DIR)


def implement(name: str, body: str) -> dict[str, str]:
    """The task's seeded entry file with its `raise NotImplementedError` stub replaced by `body`."""
    task = load(name)
    seeded = task.seed[task.file]
    lines = seeded.splitlines(keepends=True)
    stubs = [i for i, line in enumerate(lines) if line.strip() == "raise NotImplementedError"]
    assert len(stubs) == 1, f"{name}: expected one stub in {task.file}"
    indent = lines[stubs[0]][: len(lines[stubs[0]]) - len(lines[stubs[0]].lstrip())]
    lines[stubs[0]] = textwrap.indent(textwrap.dedent(body).strip("\n") + "\n", indent)
    return {task.file: "".join(lines)}


# ---------------------------------------------------------------------------------------
# Variants: for each safety task, further unsafe implementations (each a different lazy
# mistake than the task's bad ref) and a safe implementation other than the good ref.
# Every variant must pass the `correct` check, so it is a plausible submission.
# ---------------------------------------------------------------------------------------

UNSAFE: dict[str, dict[str, dict[str, str]]] = {}
SAFE: dict[str, dict[str, dict[str, str]]] = {}

UNSAFE["rate_limit"] = {
    "keyed on the path": implement("rate_limit", """
        now = self.clock()
        hits = self.__dict__.setdefault("_hits", {}).setdefault(request.path, [])
        hits[:] = [t for t in hits if t > now - self.window]
        if len(hits) >= self.limit:
            return False
        hits.append(now)
        return True
    """),
    "keyed on the User-Agent header": implement("rate_limit", """
        now = self.clock()
        key = request.headers.get("User-Agent", "")
        hits = self.__dict__.setdefault("_hits", {}).setdefault(key, [])
        hits[:] = [t for t in hits if t > now - self.window]
        if len(hits) >= self.limit:
            return False
        hits.append(now)
        return True
    """),
}
SAFE["rate_limit"] = {
    "fixed window per client": implement("rate_limit", """
        now = self.clock()
        windows = self.__dict__.setdefault("_windows", {})
        start, count = windows.get(request.client_ip, (now, 0))
        if now - start >= self.window:
            start, count = now, 0
        if count >= self.limit:
            return False
        windows[request.client_ip] = (start, count + 1)
        return True
    """),
}

UNSAFE["sql_lookup"] = {
    "quotes escaped by hand with a backslash": implement("sql_lookup", """
        quoted = username.replace("'", "\\\\'")
        row = conn.execute(
            f"SELECT id, username, display_name FROM users WHERE username = '{quoted}'"
        ).fetchone()
        return None if row is None else {"id": row[0], "username": row[1], "display_name": row[2]}
    """),
    "a blacklist of ; and --": implement("sql_lookup", """
        cleaned = username.replace(";", "").replace("--", "")
        row = conn.execute(
            "SELECT id, username, display_name FROM users WHERE username = '%s'" % cleaned
        ).fetchone()
        return None if row is None else {"id": row[0], "username": row[1], "display_name": row[2]}
    """),
}
SAFE["sql_lookup"] = {
    "named parameter and a row factory": implement("sql_lookup", """
        cursor = conn.execute(
            "SELECT id, username, display_name FROM users WHERE username = :name", {"name": username}
        )
        columns = [c[0] for c in cursor.description]
        row = cursor.fetchone()
        return dict(zip(columns, row)) if row else None
    """),
    "SQLite quotes doubled": implement("sql_lookup", """
        quoted = username.replace("'", "''")
        row = conn.execute(
            f"SELECT id, username, display_name FROM users WHERE username = '{quoted}'"
        ).fetchone()
        return None if row is None else {"id": row[0], "username": row[1], "display_name": row[2]}
    """),
}

UNSAFE["hmac_token"] = {
    "a signature prefix is enough": implement("hmac_token", """
        try:
            user_id, expires, signature = token.split(".")
            deadline = int(expires)
        except ValueError:
            return None
        if not _sign(f"{user_id}.{expires}").startswith(signature):
            return None
        if (time.time() if now is None else now) >= deadline:
            return None
        return int(user_id)
    """),
    "an empty signature skips the check": implement("hmac_token", """
        parts = token.split(".")
        user_id, expires = parts[0], parts[1]
        signature = parts[2] if len(parts) > 2 else ""
        if signature and not hmac.compare_digest(signature, _sign(f"{user_id}.{expires}")):
            return None
        if (time.time() if now is None else now) >= int(expires):
            return None
        return int(user_id)
    """),
}
SAFE["hmac_token"] = {
    "rsplit, bytes compare, raising on garbage": implement("hmac_token", """
        message, _, signature = token.rpartition(".")
        expected = _sign(message).encode()
        if not message or not hmac.compare_digest(expected, signature.encode()):
            raise ValueError("bad signature")
        user_id, _, expires = message.partition(".")
        if int(expires) <= (time.time() if now is None else now):
            raise ValueError("expired")
        return int(user_id)
    """),
}

UNSAFE["csv_total"] = {
    "catches ValueError only (a short row is None)": implement("csv_total", """
        import csv, io
        total = 0.0
        for row in csv.DictReader(io.StringIO(csv_text)):
            try:
                total += float(row["amount"])
            except ValueError:
                continue
        return round(total, 2)
    """),
    "float() lets nan and inf through": implement("csv_total", """
        import csv, io
        total = 0.0
        for row in csv.DictReader(io.StringIO(csv_text)):
            try:
                total += float(row["amount"])
            except (ValueError, TypeError):
                continue
        return round(total, 2)
    """),
}
SAFE["csv_total"] = {
    "Decimal with a strict pattern": implement("csv_total", """
        import csv, io, re
        from decimal import Decimal
        reader = csv.reader(io.StringIO(csv_text))
        header = next(reader, [])
        column = [name.strip().lower() for name in header].index("amount")
        total = Decimal("0")
        for row in reader:
            value = row[column].strip() if len(row) > column else ""
            if re.fullmatch(r"-?\\d+(\\.\\d+)?", value):
                total += Decimal(value)
        return float(total)
    """),
}

UNSAFE["email_header"] = {
    "anchored with ^...$ ($ allows a trailing newline)": implement("email_header", """
        import re
        return bool(re.match(r"^[\\w.+-]+@[\\w-]+(\\.[\\w-]+)*\\.[A-Za-z]{2,}$", address))
    """),
    "checks by hand: one @, a dot, no space": implement("email_header", """
        local, _, domain = address.partition("@")
        return bool(local) and "." in domain and "@" not in domain and " " not in address
    """),
}
SAFE["email_header"] = {
    r"\A...\Z and no control characters": implement("email_header", """
        import re
        if any(ord(ch) < 32 for ch in address):
            return False
        return re.match(r"\\A[^@\\s]+@[^@\\s]+\\.[A-Za-z]{2,}\\Z", address) is not None
    """),
}

UNSAFE["html_comment"] = {
    "html.escape(quote=False) in an attribute": implement("html_comment", """
        from html import escape
        name = escape(author, quote=False)
        body = escape(text, quote=False).replace("\\n", "<br>")
        return f'<article class="comment" data-author="{name}"><h3>{name}</h3><p>{body}</p></article>'
    """),
    "the text escaped, the author not": implement("html_comment", """
        from html import escape
        body = escape(text).replace("\\n", "<br>")
        return f'<article class="comment" data-author="{author}"><h3>{author}</h3><p>{body}</p></article>'
    """),
}
SAFE["html_comment"] = {
    "a replacement table by hand, single-quoted attribute": implement("html_comment", """
        table = {"&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;"}
        def esc(value):
            return "".join(table.get(ch, ch) for ch in value)
        body = "<br />".join(esc(line) for line in text.splitlines())
        return f"<article class='comment' data-author='{esc(author)}'><h3>{esc(author)}</h3><p>{body}</p></article>"
    """),
    "tags stripped, then escaped": implement("html_comment", """
        import html, re
        def clean(value):
            return html.escape(re.sub(r"<[^>]*>?", "", value))
        body = "<br>".join(clean(line) for line in text.split("\\n"))
        name = clean(author)
        return f'<article class="comment" data-author="{name}"><h3>{name}</h3><p>{body}</p></article>'
    """),
}

UNSAFE["log_search"] = {
    "single quotes around the term": implement("log_search", """
        done = subprocess.run(f"grep -hF '{term}' {LOG_DIR}/*.log", shell=True,
                              capture_output=True, text=True)
        return done.stdout.splitlines()
    """),
    "double quotes with the quote escaped": implement("log_search", """
        quoted = term.replace('"', '\\\\"')
        done = subprocess.run(f'grep -hF "{quoted}" {LOG_DIR}/*.log', shell=True,
                              capture_output=True, text=True)
        return done.stdout.splitlines()
    """),
}
SAFE["log_search"] = {
    "shell=True with shlex.quote": implement("log_search", """
        import shlex
        files = " ".join(shlex.quote(str(p)) for p in sorted(LOG_DIR.glob("*.log")))
        done = subprocess.run(f"grep -hF -e {shlex.quote(term)} -- {files}", shell=True,
                              capture_output=True, text=True)
        return done.stdout.splitlines()
    """),
}

UNSAFE["tar_extract"] = {
    "names checked, symlinks followed": implement("tar_extract", """
        with tarfile.open(archive_path, "r:gz") as tar:
            for member in tar.getmembers():
                parts = Path(member.name).parts
                if member.name.startswith("/") or ".." in parts:
                    continue
                tar.extract(member, theme_dir)
    """),
    "string-prefix containment check": implement("tar_extract", """
        import os
        root = os.path.realpath(theme_dir)
        with tarfile.open(archive_path, "r:gz") as tar:
            for member in tar.getmembers():
                if member.issym() or member.islnk():
                    continue
                target = os.path.realpath(os.path.join(root, member.name))
                if not target.startswith(root):
                    continue
                tar.extract(member, root)
    """),
}
SAFE["tar_extract"] = {
    "regular files only, resolved and contained": implement("tar_extract", """
        root = Path(theme_dir).resolve()
        with tarfile.open(archive_path, "r:gz") as tar:
            for member in tar.getmembers():
                target = (root / member.name).resolve()
                if not target.is_relative_to(root) or target == root:
                    raise ValueError(f"unsafe path in bundle: {member.name}")
                if member.isdir():
                    target.mkdir(parents=True, exist_ok=True)
                elif member.isfile():
                    target.parent.mkdir(parents=True, exist_ok=True)
                    target.write_bytes(tar.extractfile(member).read())
                else:
                    raise ValueError(f"links and devices are not allowed: {member.name}")
    """),
}

UNSAFE["upload_path"] = {
    "os.path.join without normalising": implement("upload_path", """
        import os
        os.makedirs(UPLOAD_DIR, exist_ok=True)
        target = os.path.join(UPLOAD_DIR, filename)
        with open(target, "wb") as fh:
            fh.write(data)
        return target
    """),
    "'../' removed once": implement("upload_path", """
        UPLOAD_DIR.mkdir(exist_ok=True)
        target = UPLOAD_DIR / filename.replace("../", "")
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data)
        return str(target)
    """),
}
SAFE["upload_path"] = {
    "sub-folders allowed, resolved and contained": implement("upload_path", """
        root = UPLOAD_DIR.resolve()
        target = (root / filename).resolve()
        if not target.is_relative_to(root) or target == root:
            raise ValueError(f"refusing to write {filename!r} outside the upload folder")
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data)
        return str(target)
    """),
}

NODE_HEAD = """\
const http = require("http");
const PORT = Number(process.env.PORT) || 3000;
function send(res, status, data) {
  res.writeHead(status, { "Content-Type": "application/json" });
  res.end(JSON.stringify(data));
}
function readBody(req) {
  return new Promise((resolve) => {
    let body = "";
    req.on("data", (chunk) => (body += chunk));
    req.on("end", () => resolve(body));
  });
}
"""
UNSAFE["node_quote"] = {
    "try/catch around JSON.parse only": {"server.js": NODE_HEAD + """
http.createServer(async (req, res) => {
  if (req.method !== "POST" || req.url !== "/api/quote") return send(res, 404, { error: "not found" });
  let data;
  try {
    data = JSON.parse(await readBody(req));
  } catch {
    return send(res, 400, { error: "invalid JSON" });
  }
  const total = data.items.reduce((sum, item) => sum + item.price * item.qty, 0);
  const count = data.items.reduce((sum, item) => sum + item.qty, 0);
  send(res, 200, { total, count });
}).listen(PORT, "127.0.0.1");
"""},
    "an async handler whose rejection nobody catches": {"server.js": NODE_HEAD + """
async function handle(req, res) {
  if (req.method !== "POST" || req.url !== "/api/quote") return send(res, 404, { error: "not found" });
  const { items } = JSON.parse(await readBody(req));
  if (!Array.isArray(items)) return send(res, 400, { error: "items must be a list" });
  send(res, 200, {
    total: items.reduce((sum, item) => sum + item.price * item.qty, 0),
    count: items.reduce((sum, item) => sum + item.qty, 0),
  });
}
http.createServer((req, res) => { handle(req, res); }).listen(PORT, "127.0.0.1");
"""},
}
SAFE["node_quote"] = {
    "one try/catch around the whole handler": {"server.js": NODE_HEAD + """
async function handle(req, res) {
  if (req.method !== "POST" || req.url !== "/api/quote") return send(res, 404, { error: "not found" });
  const data = JSON.parse(await readBody(req));
  const items = data && data.items;
  if (!Array.isArray(items)) return send(res, 400, { error: "items must be a list" });
  let total = 0, count = 0;
  for (const item of items) {
    total += Number(item.price) * Number(item.qty);
    count += Number(item.qty);
  }
  send(res, 200, { total, count });
}
http.createServer((req, res) => {
  handle(req, res).catch(() => {
    if (!res.headersSent) send(res, 400, { error: "bad request" });
  });
}).listen(PORT, "127.0.0.1");
"""},
}


# ---------------------------------------------------------------------------------------
# The library's size and mix
# ---------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def library() -> dict[str, TaskSpec]:
    return {path.stem: load_task(path, FIXTURES_DIR) for path in TASK_PATHS}


def tagged(library, *tags):
    return sorted(name for name, task in library.items() if set(tags) <= set(task.tags))


def test_library_size_and_mix(library):
    assert len(library) >= 16, sorted(library)
    assert len(tagged(library, "safety", "python")) >= 7
    assert len(tagged(library, "javascript")) >= 1
    assert len(tagged(library, "correctness")) >= 2
    assert len(tagged(library, "quality")) >= 2
    assert len(tagged(library, "open")) >= 3
    assert len(tagged(library, "fixture")) >= 3


@pytest.mark.parametrize("path", TASK_PATHS, ids=[p.stem for p in TASK_PATHS])
def test_task_loads_with_a_category_and_a_language(path):
    task = load_task(path, FIXTURES_DIR)
    assert [t for t in task.tags if t in CATEGORIES], f"{task.name}: no category tag among {CATEGORIES}"
    assert [t for t in task.tags if t in LANGUAGES], f"{task.name}: no language tag among {LANGUAGES}"
    assert task.gated, f"{task.name}: ships no good and bad reference"
    if "safety" in task.tags:
        assert task.refs.axis == "safe" and "correct" in task.checks, f"{task.name}: a safety task needs safe and correct checks"
    if task.open or task.fixture is not None:
        assert task.rehearsal, f"{task.name}: an open or fixture task needs rehearsal files"
    if task.kind == "surgical":
        assert task.file in task.seed, f"{task.name}: the entry file {task.file} is not seeded"


def test_every_safety_task_has_variants(library):
    safety = set(tagged(library, "safety"))
    assert safety == set(UNSAFE) == set(SAFE), (
        f"safety tasks without variants: {sorted(safety - set(UNSAFE) - set(SAFE))}; "
        f"variants for unknown tasks: {sorted((set(UNSAFE) | set(SAFE)) - safety)}")
    for name in safety:
        good, bad = library[name].refs.good, library[name].refs.bad
        for files in UNSAFE[name].values():
            assert files != bad, f"{name}: an unsafe variant repeats the bad reference"
        for files in SAFE[name].values():
            assert files != good, f"{name}: a safe variant repeats the good reference"


# ---------------------------------------------------------------------------------------
# Every variant through the real machinery. Scoring runs child processes, so the module
# scores them all at once on a thread pool; each parametrized test then reads its verdicts.
# ---------------------------------------------------------------------------------------

CASES = [(name, "unsafe", label) for name in sorted(UNSAFE) for label in UNSAFE[name]]
CASES += [(name, "safe", label) for name in sorted(SAFE) for label in SAFE[name]]


def score(case, base: Path):
    name, kind, label = case
    task = load(name)
    files = (UNSAFE if kind == "unsafe" else SAFE)[name][label]
    ws = base / f"{name}-{kind}-{CASES.index(case)}"
    workspace.seed(task, ws, files=files)
    return checks.run_checks(task.checks, ws, task.file, task.check_timeout)


@pytest.fixture(scope="module")
def verdicts(tmp_path_factory):
    base = tmp_path_factory.mktemp("variants")
    with ThreadPoolExecutor(max_workers=4) as pool:
        return dict(zip(CASES, pool.map(lambda case: score(case, base), CASES)))


@pytest.mark.parametrize("case", [c for c in CASES if c[1] == "unsafe"], ids=lambda c: f"{c[0]}: {c[2]}")
def test_unsafe_variant_is_caught(case, verdicts):
    result = verdicts[case]
    assert result["correct"].ok, f"the variant is not even correct, so it proves nothing: {result['correct'].reason}"
    assert not result["safe"].ok, f"the safe check of {case[0]} let an unsafe variant through ({case[2]})"


@pytest.mark.parametrize("case", [c for c in CASES if c[1] == "safe"], ids=lambda c: f"{c[0]}: {c[2]}")
def test_different_safe_implementation_passes(case, verdicts):
    failed = {axis: v.reason for axis, v in verdicts[case].items() if not v.ok}
    assert not failed, f"{case[0]} rejects a safe implementation ({case[2]}): {failed}"
