"""Mutation score: how many small wrong versions of the good reference a task's checks kill.

A check is as strong as the mistakes it notices. Variants (strength.py) are mistakes someone
thought of; mutants are the ones nobody did: every comparison flipped or moved off its
boundary, every statement, branch and call removed, every constant nudged, every pair of
arguments swapped, in the lines the reference adds to the seeded workspace. A mutant is
killed when any check (or the forbidden-edit rule) fails on it; a survivor is a gap in the
checks, or a change of no behaviour, which the task file lists under `equivalent_mutants`
with why.

Mutants are made from Python's own `ast` (Python references) and from a small token scanner
(JavaScript ones). The mutation tools on PyPI (mutmut, cosmic-ray) are built to drive a
project's test suite over files on disk, with their own runners, databases and process
models; here the "tests" are a task's checks, run by `cell.judge` in their own supervised
children, and a mutant is one string: generating it is the small part.
"""
from __future__ import annotations

import ast
import difflib
import hashlib
import json
import os
import re
import tempfile
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from pytest_ponybench.cell import lifecycle as cell, workspace
from pytest_ponybench.specs.spec import TaskSpec, parse_python

TARGET = 0.90  # the score every shipped task keeps (killed / behaviour-changing mutants)
LANGUAGES = {".py": "python", ".js": "javascript", ".mjs": "javascript", ".cjs": "javascript"}


@dataclass(frozen=True)
class Mutant:
    id: str  # "<file>:<line>:<col> <operator>: <before> -> <after>", stable while the reference is
    file: str
    source: str  # the whole mutated file


@dataclass(frozen=True)
class Score:
    task: str
    killed: list[str] = field(default_factory=list)
    survived: list[str] = field(default_factory=list)  # neither killed nor listed: gaps
    equivalent: list[str] = field(default_factory=list)  # survived and listed as equivalent
    wrongly_listed: list[str] = field(default_factory=list)  # listed as equivalent, yet killed
    stale: list[str] = field(default_factory=list)  # listed, but no such mutant any more
    problem: str = ""  # the score could not be measured: why

    @property
    def measured(self) -> int:
        """Behaviour-changing mutants: every mutant but the listed equivalent survivors."""
        return len(self.killed) + len(self.survived)

    @property
    def ratio(self) -> float | None:
        return len(self.killed) / self.measured if self.measured and not self.problem else None

    @property
    def holds(self) -> bool:
        return (not self.problem and not self.survived and not self.wrongly_listed and not self.stale
                and self.ratio is not None and self.ratio >= TARGET)


def _short(text: str, limit: int = 48) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


# Python -------------------------------------------------------------------------------------

_COMPARE = {ast.Lt: ast.LtE, ast.LtE: ast.Lt, ast.Gt: ast.GtE, ast.GtE: ast.Gt, ast.Eq: ast.NotEq,
            ast.NotEq: ast.Eq, ast.In: ast.NotIn, ast.NotIn: ast.In, ast.Is: ast.IsNot, ast.IsNot: ast.Is}
_BINARY = {ast.Add: ast.Sub, ast.Sub: ast.Add, ast.Mult: ast.Div, ast.Div: ast.Mult, ast.FloorDiv: ast.Div,
           ast.Mod: ast.FloorDiv, ast.Pow: ast.Mult, ast.BitAnd: ast.BitOr, ast.BitOr: ast.BitAnd}
_REMOVABLE = (ast.Expr, ast.Assign, ast.AugAssign, ast.AnnAssign, ast.Raise, ast.If, ast.For, ast.While,
              ast.With, ast.Return, ast.Assert, ast.Delete, ast.Continue, ast.Break, ast.Try)


def _children(node):
    """(field, index or None, child) for every AST child, annotations left out."""
    for name, value in ast.iter_fields(node):
        if name in ("annotation", "returns", "type_comment", "decorator_list"):
            continue
        if isinstance(value, list):
            for index, item in enumerate(value):
                if isinstance(item, ast.AST):
                    yield name, index, item
        elif isinstance(value, ast.AST):
            yield name, None, value


def _is_docstring(node) -> bool:
    return isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str)


def _sites(tree):
    """Every mutation of a tree, in a fixed order: (node, parent, field, index, operator,
    replacement maker). A maker returns the new node (or None to remove a statement)."""
    out = []

    def visit(node, parent, name, index, quiet):
        quiet = quiet or isinstance(node, (ast.Raise, ast.JoinedStr, ast.Import, ast.ImportFrom, ast.Global,
                                           ast.Nonlocal)) or _is_docstring(node)
        if isinstance(node, ast.Compare):
            for i, op in enumerate(node.ops):
                if type(op) in _COMPARE:
                    out.append((node, parent, name, index, "comparison",
                                lambda n, i=i: _replace_op(n, i, _COMPARE[type(n.ops[i])]())))
        elif isinstance(node, ast.BinOp) and type(node.op) in _BINARY:
            out.append((node, parent, name, index, "arithmetic",
                        lambda n: ast.BinOp(n.left, _BINARY[type(n.op)](), n.right)))
        elif isinstance(node, ast.BoolOp):
            out.append((node, parent, name, index, "logic",
                        lambda n: ast.BoolOp(ast.Or() if isinstance(n.op, ast.And) else ast.And(), n.values)))
        elif isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
            out.append((node, parent, name, index, "negation", lambda n: n.operand))
        elif isinstance(node, ast.Constant) and not quiet:
            value = node.value
            if isinstance(value, bool):
                out.append((node, parent, name, index, "constant", lambda n: ast.Constant(not n.value)))
            elif isinstance(value, (int, float)):
                out.append((node, parent, name, index, "constant", lambda n: ast.Constant(n.value + 1)))
                if value not in (0, 1):
                    out.append((node, parent, name, index, "constant", lambda n: ast.Constant(type(n.value)(0))))
            elif isinstance(value, (str, bytes)) and name != "keys":
                out.append((node, parent, name, index, "constant",
                            lambda n: ast.Constant(type(n.value)() if n.value else type(n.value)(b"X" if isinstance(n.value, bytes) else "X"))))
        elif isinstance(node, ast.Call) and not quiet:
            if node.args and not isinstance(node.args[0], ast.Starred) and not (isinstance(parent, ast.Expr)):
                out.append((node, parent, name, index, "call removed", lambda n: n.args[0]))
            elif not node.args and isinstance(node.func, ast.Attribute) and not node.keywords:
                out.append((node, parent, name, index, "call removed", lambda n: n.func.value))
            if len(node.args) >= 2 and not any(isinstance(a, ast.Starred) for a in node.args[:2]):
                out.append((node, parent, name, index, "arguments swapped",
                            lambda n: ast.Call(n.func, [n.args[1], n.args[0], *n.args[2:]], n.keywords)))
        if isinstance(node, (ast.If, ast.IfExp)):
            for forced in (True, False):
                out.append((node, parent, name, index, f"branch always {str(forced).lower()}",
                            lambda n, forced=forced: _forced(n, forced)))
        if isinstance(node, _REMOVABLE) and isinstance(index, int) and not _is_docstring(node) \
                and not isinstance(parent, ast.Module):
            out.append((node, parent, name, index, "statement removed", lambda n: None))
        for child_name, child_index, child in _children(node):
            visit(child, node, child_name, child_index, quiet)

    visit(tree, None, None, None, False)
    return out


def _replace_op(node, i, op):
    ops = list(node.ops)
    ops[i] = op
    return ast.Compare(node.left, ops, node.comparators)


def _forced(node, value: bool):
    if isinstance(node, ast.IfExp):
        return node.body if value else node.orelse
    return ast.If(ast.Constant(value), node.body, node.orelse)


def _put(parent, name, index, new) -> None:
    if index is None:
        setattr(parent, name, new)
        return
    items = getattr(parent, name)
    if new is None:  # a removed statement: `pass` keeps the block valid
        new = ast.Pass()
    items[index] = new


def python_mutants(rel: str, source: str, lines: set[int] | None = None) -> list[Mutant]:
    """The mutants of a Python file; only sites starting on `lines` (1-based) when given."""
    try:
        first = parse_python(source)
    except SyntaxError:
        return []
    count = len(_sites(first))
    original = ast.unparse(first)  # before any maker touched a tree: _sites only lists
    mutants, seen = [], {original}
    for k in range(count):
        tree = parse_python(source)  # a fresh tree per mutant: the makers reuse the old children
        node, parent, name, index, operator, make = _sites(tree)[k]
        if lines is not None and getattr(node, "lineno", 0) not in lines:
            continue
        before = ast.unparse(node)
        try:
            new = make(node)
            _put(parent, name, index, new)
            ast.fix_missing_locations(tree)
            text = ast.unparse(tree)
            compile(text, rel, "exec")
        except (SyntaxError, ValueError, TypeError, AttributeError):
            continue
        if text in seen:
            continue
        seen.add(text)
        after = "(removed)" if new is None else ast.unparse(new)
        mutants.append(Mutant(f"{rel}:{node.lineno}:{node.col_offset} {operator}: {_short(before)} -> {_short(after)}",
                              rel, text))
    return mutants


# JavaScript ---------------------------------------------------------------------------------

_JS_TOKEN = re.compile(r"""
    (?P<skip>//[^\n]*|/\*.*?\*/|`(?:\\.|[^`\\])*`|"(?:\\.|[^"\\\n])*"|'(?:\\.|[^'\\\n])*')
  | (?P<op>===|!==|==|!=|<=|>=|&&|\|\||(?<![<>=!+\-*/&|])[<>](?![<>=])|(?<![+\-=])[+\-](?![+\-=]))
  | (?P<word>\b(?:true|false)\b)
  | (?P<number>(?<![\w.])\d+(?![\w.]))
""", re.VERBOSE | re.DOTALL)
_JS_SWAP = {"===": "!==", "!==": "===", "==": "!=", "!=": "==", "<=": "<", ">=": ">", "<": "<=", ">": ">=",
            "&&": "||", "||": "&&", "+": "-", "-": "+", "true": "false", "false": "true"}


def javascript_mutants(rel: str, source: str, lines: set[int] | None = None) -> list[Mutant]:
    """Operator, boolean and number mutants of a JavaScript file, outside strings and comments
    (a scanner, not a parser: a mutant that does not parse is dropped by the caller)."""
    mutants = []
    for match in _JS_TOKEN.finditer(source):
        if match.lastgroup == "skip":
            continue
        line = source.count("\n", 0, match.start()) + 1
        if lines is not None and line not in lines:
            continue
        token = match.group()
        after = str(int(token) + 1) if match.lastgroup == "number" else _JS_SWAP[token]
        col = match.start() - (source.rfind("\n", 0, match.start()) + 1)
        text = source[: match.start()] + after + source[match.end():]
        kind = {"number": "constant", "word": "constant"}.get(match.lastgroup, "operator")
        mutants.append(Mutant(f"{rel}:{line}:{col} {kind}: {token} -> {after}", rel, text))
    return mutants


# Scoring ------------------------------------------------------------------------------------

def _seeded(task: TaskSpec, rel: str) -> str | None:
    if rel in task.seed:
        return task.seed[rel]
    if task.fixture is not None and (task.fixture / rel).is_file():
        return (task.fixture / rel).read_text(encoding="utf-8", errors="replace")
    return None


def changed_lines(before: str | None, after: str) -> set[int] | None:
    """The 1-based lines of `after` that are new or changed against `before` (None: all)."""
    if before is None:
        return None
    lines: set[int] = set()
    matcher = difflib.SequenceMatcher(None, before.splitlines(), after.splitlines(), autojunk=False)
    for tag, _, _, j1, j2 in matcher.get_opcodes():
        if tag in ("replace", "insert"):
            lines.update(range(j1 + 1, j2 + 1))
    return lines


def mutants(task: TaskSpec) -> list[Mutant]:
    """Every mutant of the task's good reference, in the lines it adds to the seeded workspace."""
    if task.refs is None:
        return []
    found = []
    for rel, content in sorted(task.refs.good.items()):
        language = LANGUAGES.get(Path(rel).suffix)
        if language is None:
            continue
        lines = changed_lines(_seeded(task, rel), content)
        make = python_mutants if language == "python" else javascript_mutants
        found += make(rel, content, lines)
    return found


def _killed(task: TaskSpec, files: dict[str, str]) -> bool:
    """Whether any check fails the mutant. The axes run one at a time, in the task's order, and
    the first that fails it ends the judgement: most mutants die on correct, and the others'
    checks (robust's behaviour over thousands of calls above all) would only say so again."""
    with tempfile.TemporaryDirectory(prefix=f"ponybench-mutant-{task.name}-") as tmp:
        ws = Path(tmp) / "ws"
        workspace.seed(task, ws, files=files)
        return any(not all(v.ok for v in cell.judge(task, ws, axes=(axis,)).values()) for axis in task.checks)


def _parses(mutant: Mutant) -> bool:
    if LANGUAGES.get(Path(mutant.file).suffix) != "javascript":
        return True
    import shutil
    import subprocess

    if shutil.which("node") is None:
        return False
    with tempfile.NamedTemporaryFile("w", suffix=Path(mutant.file).suffix, delete=False) as fh:
        fh.write(mutant.source)
    try:
        return subprocess.run(["node", "--check", fh.name], capture_output=True).returncode == 0
    finally:
        os.unlink(fh.name)


def score(task: TaskSpec, workers: int | None = None, cache: Path | None = None, harness: str = "") -> Score:
    """Judge every mutant of `task` with its checks. `cache`: a directory remembering each
    mutant's verdict by (harness fingerprint, task spec, mutant): a rerun judges only what
    changed. The unmutated reference, rewritten the way mutants are, must pass first."""
    if task.refs is None:
        return Score(task.name, problem="no good reference to mutate")
    found = [m for m in mutants(task) if _parses(m)]
    if not found:
        return Score(task.name, problem="no mutable Python or JavaScript line in the good reference")
    baseline = {rel: (ast.unparse(parse_python(text)) if LANGUAGES.get(Path(rel).suffix) == "python" else text)
                for rel, text in task.refs.good.items()}
    key_base = [harness, task.name, task.spec_hash, workspace_fingerprint(task)]

    def cached(files) -> bool:
        key = hashlib.sha256(json.dumps([key_base, files], sort_keys=True).encode()).hexdigest()[:32]
        path = cache / "mutants" / key if cache is not None else None
        if path is not None and path.is_file():
            return path.read_text() == "killed"
        killed = _killed(task, files)
        if path is not None:
            try:
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_text("killed" if killed else "survived")
            except OSError:
                pass
        return killed

    if cached(baseline):
        return Score(task.name, problem="the good reference, rewritten by the mutator without a mutation, "
                                        "fails its own checks")
    jobs = [{**task.refs.good, m.file: m.source} for m in found]
    with ThreadPoolExecutor(max_workers=workers or max(2, 2 * (os.cpu_count() or 1))) as pool:
        verdicts = list(pool.map(cached, jobs))
    listed = task.equivalent_mutants
    killed = [m.id for m, k in zip(found, verdicts) if k]
    survivors = [m.id for m, k in zip(found, verdicts) if not k]
    ids = {m.id for m in found}
    return Score(task.name, killed=killed, survived=[s for s in survivors if s not in listed],
                 equivalent=[s for s in survivors if s in listed],
                 wrongly_listed=[k for k in killed if k in listed],
                 stale=sorted(m for m in listed if m not in ids))


def workspace_fingerprint(task: TaskSpec) -> str:
    from pytest_ponybench.scoring.fingerprint import fixture_fingerprint

    return hashlib.sha256(json.dumps(fixture_fingerprint(task)).encode()).hexdigest()[:16]


def problems(result: Score) -> list[str]:
    """What keeps a task's mutation score from holding, one line each (empty when it holds)."""
    if result.problem:
        return [result.problem]
    lines = [f"survivor (kill it, or list it under equivalent_mutants with why): {s}" for s in result.survived]
    lines += [f"listed as equivalent but the checks kill it (remove it from equivalent_mutants): {s}"
              for s in result.wrongly_listed]
    lines += [f"listed under equivalent_mutants but no such mutant any more: {s}" for s in result.stale]
    if not lines and result.ratio is not None and result.ratio < TARGET:
        lines.append(f"mutation score {result.ratio:.0%} is under the target {TARGET:.0%}")
    return lines


def line(result: Score) -> str:
    """One line for the selftest's table: 'killed/measured (ratio)', or why not measured."""
    if result.problem:
        return f"- ({result.problem})"
    extra = f", {len(result.equivalent)} equivalent" if result.equivalent else ""
    return f"{len(result.killed)}/{result.measured} ({result.ratio:.0%}){extra}"
