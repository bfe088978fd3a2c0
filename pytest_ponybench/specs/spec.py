"""Task and arm specs: YAML in, validated dataclasses out.

Every problem is a `SpecError` whose message names the file, the field and what to do, so a
collection error reads like a sentence and the other task files still collect.

One module on purpose (about 600 lines): one schema for tasks and arms. Every field check
writes the same error form (file, field, problem, what to do) and reads the same model table;
split, two halves of a spec would validate apart.
"""
from __future__ import annotations

import copy
import functools
import hashlib
import json
import os
import re
import threading
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

import yaml

from pytest_ponybench.specs import HARNESS_PREFIX
from pytest_ponybench.specs.argtypes import NAME_RE
from pytest_ponybench.specs.faults import parse_fault

# The axes a task's checks measure, in the order every output shows them; the one source.
# `correct` and `safe` decide a cell's pass/fail and are the axes a bad reference must fail.
# `robust` is what a careful engineer may want but the ticket does not ask for (resource
# bounds, locales, disk full, numeric extremes, durability): measured and reported apart,
# never folded into pass/fail (docs/writing-tasks.md, "Which axis a check belongs to").
AXES = ("correct", "safe", "robust")
PASS_AXES = ("correct", "safe")


DEFAULT_MODEL_IDS = {
    "haiku": "claude-haiku-4-5-20251001",
    "sonnet": "claude-sonnet-4-6",
    "opus": "claude-opus-4-8",
}

# List prices in US dollars per million tokens: (input, output, cache write, cache read), by
# model id prefix, for the models above. Source: the pinned CLI's own model catalog
# (2.1.328, `pricing_tiers` haiku_45, tier_3_15 and tier_5_25 of claude-haiku-4-5,
# claude-sonnet-4-6 and claude-opus-4-8), as on https://www.anthropic.com/pricing. The cache
# write is the 1-hour price (twice the input), the higher of the two the CLI may pay: an
# estimate must not come in under the spend. Used only for a session that printed no result
# line (killed at its timeout), whose cost the CLI never reported.
LIST_PRICES = {
    "claude-haiku-4-5": (1.0, 5.0, 2.0, 0.10),
    "claude-sonnet-4-6": (3.0, 15.0, 6.0, 0.30),
    "claude-opus-4-8": (5.0, 25.0, 10.0, 0.50),
}

TASK_FIELDS = {
    "description": "one line for humans",
    "prompt": "the instruction to the agent (required)",
    "file": "the entry file the checks read, relative to the workspace",
    "seed": "{relative path: content} written before the agent starts",
    "fixture": "a directory under fixtures/, or $VARIABLE naming a directory",
    "open": "true: scored on LOC only (plus checks, if any)",
    "checks": "{correct: python code, safe: python code, robust: python code (optional, beyond the ticket)}",
    "check_prelude": "python code run before each axis's checks: helpers the axes share (no @check)",
    "refs": "{good: ..., bad: ..., axis: safe|correct}",
    "tags": "list of markers, e.g. [safety, python]",
    "check_timeout": "seconds each check may run (default 30)",
    "rehearsal": "{relative path: content} the scripted model writes in rehearsal",
    "forbidden": "seeded or fixture files the ticket says not to change (changing one fails correct)",
    "rehearsal_fault": "what the scripted model does wrong in rehearsal: 429, 529, 500, 401, 403, stall or cut, ':N' for the first N requests",
    "review": "what a reviewer blocks a merge for, one {requirement: ..., check: axis.name} per line",
    "equivalent_mutants": "{mutant id: why it changes no behaviour}: survivors of the mutation score",
    "judge_completeness": "true: the judge (--ponybench-judge) scores completeness here too; false: never "
                          "(default: open and fixture tasks only)",
    "checks_in_process": "why this task's checks still run the agent's code in the check's own process "
                         "(not yet behind the trust boundary; the run says so)",
}
ARM_FIELDS = {
    "description": "one line for humans",
    "prompt": "text appended to the system prompt",
    "plugin": "a plugin name or a path relative to arms/, loaded with --plugin-dir",
    "proof": "strings that must reach the model when this arm runs (rehearsal proof)",
}


class SpecError(Exception):
    """A task or arm spec that cannot be used, said in one sentence."""


@dataclass(frozen=True)
class ReviewLine:
    """One thing a senior reviewer would block the merge for, and the named checks
    (`axis.function`, functions decorated with `@check`) that catch its violation."""

    requirement: str
    checks: tuple[str, ...] = ()


def named_checks(code: str) -> list[str]:
    """The functions of a check's code decorated with `@check`, in order."""
    return list(_named_checks(code))


# CPython 3.11 keeps the AST converter's recursion depth per interpreter, not per thread: two
# threads parsing at once can raise "SystemError: AST constructor recursion depth mismatch"
# (seen in CI, the mutation selftest scoring mutants on threads). The harness parses under this.
AST_LOCK = threading.Lock()


def parse_python(code: str):
    """ast.parse, one thread at a time (AST_LOCK)."""
    import ast

    with AST_LOCK:
        return ast.parse(code)


@functools.lru_cache(maxsize=1024)  # a check's code is walked once per process, not per load
def _named_checks(code: str) -> tuple[str, ...]:
    import ast

    try:
        tree = parse_python(code)
    except SyntaxError:
        return ()
    return tuple(node.name for node in ast.walk(tree) if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
                 and any(isinstance(d, ast.Name) and d.id == "check" for d in node.decorator_list))


@dataclass(frozen=True)
class Refs:
    good: dict[str, str]  # relative path -> content, laid over the seeded workspace
    bad: dict[str, str]
    axis: str  # the axis the bad reference must fail


@dataclass(frozen=True)
class TaskSpec:
    name: str
    path: Path
    prompt: str
    file: str | None = None
    seed: dict[str, str] = field(default_factory=dict)
    fixture: Path | None = None
    open: bool = False
    checks: dict[str, str] = field(default_factory=dict)
    refs: Refs | None = None
    tags: tuple[str, ...] = ()
    check_timeout: float = 30.0
    # Not "": why the checks still load the agent's code into their own process, not behind the
    # trust boundary of remote.py (the run prints it; docs/writing-tasks.md lists these tasks).
    checks_in_process: str = ""
    rehearsal: dict[str, str] = field(default_factory=dict)
    description: str = ""
    spec_hash: str = ""
    forbidden: tuple[str, ...] = ()  # files the ticket says not to change
    rehearsal_fault: str = ""  # rehearsal only: the fault the scripted model plays (rehearsal.parse_fault)
    review: tuple["ReviewLine", ...] = ()  # what the reviewer checks, each line naming its checks
    equivalent_mutants: dict[str, str] = field(default_factory=dict)  # mutant id -> why it is equivalent
    judge_completeness: bool | None = None  # None: by kind (judge.task_axes)

    @property
    def kind(self) -> str:
        if self.fixture is not None:
            return "fixture"
        return "open" if self.open else "surgical"

    @property
    def gated(self) -> bool:
        """A gated task proves its checks with a good and a bad reference before any spend."""
        return self.refs is not None


@dataclass(frozen=True)
class ArmSpec:
    name: str
    path: Path | None
    prompt: str | None = None
    plugin: str | None = None
    proof: tuple[str, ...] = ()
    description: str = ""
    spec_hash: str = ""

    @property
    def kind(self) -> str:
        if self.plugin:
            return "plugin"
        return "prompt" if self.prompt else "baseline"


def _short_hash(raw: object) -> str:
    text = json.dumps(raw, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:12]


MAX_SPEC_BYTES = 1024 * 1024  # a task, arm or case file; the largest shipped task is 25 kB
MAX_SPEC_NODES = 200_000  # values a file expands to, aliases counted each time they are used


# The C loader (libyaml) where PyYAML was built with it: about 20 times faster than the pure
# Python one on the shipped tasks, the same documents and the same errors' line numbers.
YAML_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
_MAX_PARSED = 512  # documents kept parsed per process (the shipped tasks are 20)
_parsed: dict[str, object] = {}


def load_yaml(text: str, path: Path):
    """`yaml.safe_load`, after refusing what would expand beyond reason: a file over
    MAX_SPEC_BYTES, or one whose aliases expand it to more than MAX_SPEC_NODES values (a
    700-byte "billion laughs" file of anchors takes all memory once anything walks it).
    The document is composed once (nodes shared, nothing expanded), its expanded size counted
    per node, and only then constructed, so the refusal costs about as much as parsing.
    A text is parsed once per process (the controller, each worker, each rescore read the
    same files): a copy of the first parse is returned after that. Raises SpecError."""
    if len(text.encode("utf-8", "replace")) > MAX_SPEC_BYTES:
        raise SpecError(f"{path}: the file is larger than {MAX_SPEC_BYTES // 1024} KiB; a task, arm or case "
                        f"file this size is not one: keep large seed files in a fixture folder")
    if text in _parsed:
        return copy.deepcopy(_parsed[text])  # the caller may change what it gets
    loader = YAML_LOADER(text)
    try:
        node = loader.get_single_node()
        if node is not None:
            _refuse_expansion(node, path)
        data = loader.construct_document(node) if node is not None else None
    finally:
        loader.dispose()
    if len(_parsed) >= _MAX_PARSED:
        _parsed.clear()
    _parsed[text] = data
    return copy.deepcopy(data)


def _refuse_expansion(node, path: Path) -> None:
    sizes: dict[int, int] = {}
    stack = [(node, False)]
    active: set[int] = set()
    while stack:
        current, done = stack.pop()
        key = id(current)
        if done:
            active.discard(key)
            children = _yaml_children(current)
            sizes[key] = min(1 + sum(sizes[id(c)] for c in children), MAX_SPEC_NODES + 1)
            if sizes[key] > MAX_SPEC_NODES:
                raise SpecError(f"{path}: its aliases expand to more than {MAX_SPEC_NODES:,} values (a YAML "
                                f"alias bomb?); write the values out, or use fewer anchors")
            continue
        if key in sizes:
            continue
        if key in active:
            raise SpecError(f"{path}: an anchor refers to itself; write the value out")
        active.add(key)
        stack.append((current, True))
        stack.extend((c, False) for c in _yaml_children(current) if id(c) not in sizes)


def _yaml_children(node) -> list:
    if isinstance(node, yaml.SequenceNode):
        return list(node.value)
    if isinstance(node, yaml.MappingNode):
        return [part for pair in node.value for part in pair]
    return []


def _read_mapping(path: Path) -> dict:
    try:
        raw = load_yaml(path.read_text(encoding="utf-8"), path)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark is not None else ""
        problem = getattr(exc, "problem", None) or "not valid YAML"
        raise SpecError(f"{path}: malformed YAML{where}: {problem}") from None
    except OSError as exc:
        raise SpecError(f"{path}: cannot read: {exc.strerror}") from None
    if not isinstance(raw, dict):
        raise SpecError(f"{path}: expected a mapping of fields at the top level, got {type(raw).__name__}")
    return raw


def _reject_unknown(path: Path, raw: dict, known: dict[str, str]) -> None:
    for key in raw:
        if key not in known:
            raise SpecError(
                f"{path}: field '{key}': unknown field; known fields are {', '.join(sorted(known))}"
            )


def _text(path: Path, raw: dict, key: str) -> str | None:
    value = raw.get(key)
    if value is None:
        return None
    if not isinstance(value, str) or not value.strip():
        raise SpecError(f"{path}: field '{key}': must be a non-empty string")
    return value


def _required_text(path: Path, raw: dict, key: str) -> str:
    value = _text(path, raw, key)
    if value is None:
        raise SpecError(f"{path}: field '{key}': missing; every task needs a {key}")
    return value


def check_relative(path: Path, fieldname: str, rel: object) -> str:
    """A workspace-relative path: no absolute paths, no climbing out, no harness names."""
    if not isinstance(rel, str) or not rel.strip():
        raise SpecError(f"{path}: field '{fieldname}': paths must be non-empty strings")
    pure = PurePosixPath(rel.replace("\\", "/"))
    if pure.is_absolute() or re.match(r"^[A-Za-z]:", rel):
        raise SpecError(f"{path}: field '{fieldname}': '{rel}' is absolute; give a path relative to the workspace")
    if ".." in pure.parts:
        raise SpecError(f"{path}: field '{fieldname}': '{rel}' climbs out of the workspace with '..'")
    if not pure.parts:  # "." or "./": the workspace itself, which no file can be written to
        raise SpecError(f"{path}: field '{fieldname}': '{rel}' names the workspace itself, not a file")
    if pure.parts and pure.parts[0].startswith(HARNESS_PREFIX):
        raise SpecError(f"{path}: field '{fieldname}': '{rel}' uses the harness prefix {HARNESS_PREFIX}")
    return str(pure)


def _files(path: Path, raw: dict, key: str) -> dict[str, str]:
    value = raw.get(key) or {}
    if not isinstance(value, dict):
        raise SpecError(f"{path}: field '{key}': must be a mapping of relative path to file content")
    files = {}
    for rel, content in value.items():
        rel = check_relative(path, key, rel)
        if not isinstance(content, str):
            raise SpecError(f"{path}: field '{key}': content of '{rel}' must be a string")
        files[rel] = content
    return files


def _fixture(path: Path, raw: dict, fixtures_dir: Path) -> Path | None:
    value = raw.get("fixture")
    if value is None:
        return None
    if not isinstance(value, str) or not value.strip():
        raise SpecError(f"{path}: field 'fixture': must be a directory name under fixtures/ or $VARIABLE")
    if value.startswith("$"):
        var = value[1:].strip("{}")
        where = os.environ.get(var)
        if not where:
            raise SpecError(
                f"{path}: field 'fixture': environment variable {var} is not set; "
                f"point it at the repository to copy"
            )
        target = Path(where).expanduser()
    else:
        pure = PurePosixPath(value.replace("\\", "/"))
        if pure.is_absolute() or ".." in pure.parts or re.match(r"^[A-Za-z]:", value):
            raise SpecError(f"{path}: field 'fixture': '{value}' leaves {fixtures_dir}; name a directory "
                            f"under it, or use the $VARIABLE form for a repository elsewhere")
        target = fixtures_dir / value
        # A link inside fixtures/ may point elsewhere: what counts is where the tree really is.
        if target.is_dir() and Path(fixtures_dir).resolve() not in target.resolve().parents:
            raise SpecError(f"{path}: field 'fixture': '{value}' resolves to {target.resolve()}, outside "
                            f"{fixtures_dir}; use the $VARIABLE form for a repository elsewhere")
    if not target.is_dir():
        raise SpecError(f"{path}: field 'fixture': directory {target} does not exist")
    return target.resolve()


def _refs(path: Path, raw: dict, entry: str | None) -> Refs | None:
    value = raw.get("refs")
    if value is None:
        return None
    if not isinstance(value, dict):
        raise SpecError(f"{path}: field 'refs': must be a mapping with good, bad and axis")
    unknown = set(value) - {"good", "bad", "axis"}
    if unknown:
        raise SpecError(f"{path}: field 'refs': unknown key '{sorted(unknown)[0]}'; use good, bad, axis")
    axis = value.get("axis", "safe")
    if axis not in PASS_AXES:  # the bad reference is caught where a cell fails: never robust alone
        raise SpecError(f"{path}: field 'refs.axis': '{axis}' is not an axis a bad reference may fail; "
                        f"use {' or '.join(PASS_AXES)}")
    sides = {}
    for side in ("good", "bad"):
        ref = value.get(side)
        if isinstance(ref, str):
            if entry is None:
                raise SpecError(f"{path}: field 'refs.{side}': a plain string needs the task's 'file' field")
            sides[side] = {entry: ref}
        elif isinstance(ref, dict) and ref:
            sides[side] = _files(path, {f"refs.{side}": ref}, f"refs.{side}")
        else:
            raise SpecError(
                f"{path}: field 'refs.{side}': missing; give the {side} implementation of the entry file"
            )
    return Refs(good=sides["good"], bad=sides["bad"], axis=axis)


def _forbidden(path: Path, raw: dict, seed: dict[str, str], fixture: Path | None) -> tuple[str, ...]:
    """Files the ticket says not to change: each must be one the workspace starts with, so a
    typo cannot silently forbid nothing."""
    value = raw.get("forbidden")
    if value is None:
        return ()
    if not isinstance(value, list) or not value:
        raise SpecError(f"{path}: field 'forbidden': must be a list of workspace-relative file paths")
    names = []
    for rel in value:
        rel = check_relative(path, "forbidden", rel)
        if rel not in seed and (fixture is None or not (fixture / rel).is_file()):
            where = "the seed or the fixture" if fixture is not None else "the seed"
            raise SpecError(f"{path}: field 'forbidden': '{rel}' is not a file of {where}; "
                            f"list files the workspace starts with")
        names.append(rel)
    return tuple(names)


def load_task(path: Path, fixtures_dir: Path) -> TaskSpec:
    path = Path(path)
    raw = _read_mapping(path)
    _reject_unknown(path, raw, TASK_FIELDS)
    name = path.stem
    if not NAME_RE.match(name) or "__" in name:
        raise SpecError(f"{path}: the file name '{name}' must be letters, digits, '.', '-' or '_' without '__'")
    prompt = _required_text(path, raw, "prompt")
    entry = raw.get("file")
    if entry is not None:
        entry = check_relative(path, "file", entry)
    open_ = raw.get("open", False)
    if not isinstance(open_, bool):
        raise SpecError(f"{path}: field 'open': must be true or false")
    checks = raw.get("checks") or {}
    if not isinstance(checks, dict):
        raise SpecError(f"{path}: field 'checks': must map an axis ({', '.join(AXES)}) to Python code")
    for axis, code in checks.items():
        if axis not in AXES:
            raise SpecError(f"{path}: field 'checks.{axis}': unknown axis; use {', '.join(AXES)}")
        if not isinstance(code, str) or not code.strip():
            raise SpecError(f"{path}: field 'checks.{axis}': must be Python code as a string")
        problem = _syntax_problem(code)
        if problem:
            raise SpecError(f"{path}: field 'checks.{axis}': {problem}")
    checks = _with_prelude(path, raw.get("check_prelude"), checks)
    refs = _refs(path, raw, entry)
    fixture = _fixture(path, raw, fixtures_dir)
    if checks and refs is None:
        raise SpecError(
            f"{path}: field 'refs': a task with checks must ship a good and a bad reference "
            f"so the checks are proven before any spend"
        )
    if refs is not None and refs.axis not in checks:
        raise SpecError(f"{path}: field 'refs.axis': '{refs.axis}' has no check under 'checks'")
    if not checks and fixture is None and not open_:
        raise SpecError(f"{path}: field 'checks': a surgical task needs checks (or mark it open: true)")
    tags = raw.get("tags") or []
    if not isinstance(tags, list) or not all(isinstance(t, str) and t.isidentifier() for t in tags):
        raise SpecError(f"{path}: field 'tags': must be a list of identifiers (used as pytest markers)")
    timeout = raw.get("check_timeout", 30)
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or timeout <= 0:
        raise SpecError(f"{path}: field 'check_timeout': must be a positive number of seconds")
    seed = _files(path, raw, "seed")
    rehearsal = _files(path, raw, "rehearsal")
    forbidden = _forbidden(path, raw, seed, fixture)
    fault = _rehearsal_fault(path, raw)
    description = raw.get("description") or ""
    review = _review(path, raw, checks)
    equivalent = raw.get("equivalent_mutants") or {}
    if not isinstance(equivalent, dict) or not all(isinstance(k, str) and isinstance(v, str) and v.strip()
                                                   for k, v in equivalent.items()):
        raise SpecError(f"{path}: field 'equivalent_mutants': must map a mutant id (as the selftest prints it) "
                        f"to one line saying why it changes no behaviour")
    completeness = raw.get("judge_completeness")
    if completeness is not None and not isinstance(completeness, bool):
        raise SpecError(f"{path}: field 'judge_completeness': must be true or false (or left out: open and "
                        f"fixture tasks are judged on completeness, others not)")
    in_process = raw.get("checks_in_process") or ""
    if not isinstance(in_process, str):
        raise SpecError(f"{path}: field 'checks_in_process': must be one line saying why the checks are not yet "
                        f"behind the trust boundary")
    return TaskSpec(
        checks_in_process=in_process.strip(),
        name=name, path=path, prompt=prompt, file=entry, seed=seed, fixture=fixture, open=open_,
        checks=dict(checks), refs=refs, tags=tuple(tags), check_timeout=float(timeout),
        rehearsal=rehearsal, description=str(description), spec_hash=_short_hash(raw),
        forbidden=forbidden, rehearsal_fault=fault, review=review, equivalent_mutants=dict(equivalent),
        judge_completeness=completeness,
    )


def _with_prelude(path: Path, prelude: object, checks: dict) -> dict:
    """Each axis's code with the task's shared helpers before it: the axes run apart (each in its
    own check process), so what two of them need is written once here and run in each."""
    if prelude is None:
        return checks
    if not isinstance(prelude, str) or not prelude.strip():
        raise SpecError(f"{path}: field 'check_prelude': must be Python code as a string")
    problem = _syntax_problem(prelude)
    if problem:
        raise SpecError(f"{path}: field 'check_prelude': {problem}")
    if re.search(r"^\s*@check\b", prelude, re.MULTILINE):
        raise SpecError(f"{path}: field 'check_prelude': holds the helpers the axes share, not checks; "
                        f"move each @check function under checks.<axis>")
    if not checks:
        raise SpecError(f"{path}: field 'check_prelude': there are no checks for it to come before")
    return {axis: prelude.rstrip("\n") + "\n\n\n" + code for axis, code in checks.items()}


@functools.lru_cache(maxsize=1024)  # compiled once per process, whichever file holds the code
def _syntax_problem(code: str) -> str:
    try:
        compile(code, "<check>", "exec")
    except SyntaxError as exc:
        return f"Python syntax error at line {exc.lineno}: {exc.msg}"
    return ""


def _review(path: Path, raw: dict, checks: dict) -> tuple[ReviewLine, ...]:
    value = raw.get("review")
    if value is None:
        return ()
    if not isinstance(value, list):
        raise SpecError(f"{path}: field 'review': must be a list of {{requirement: ..., check: axis.name}}")
    named = {axis: set(named_checks(code)) for axis, code in checks.items()}
    lines = []
    for index, entry in enumerate(value):
        where = f"{path}: field 'review[{index}]'"
        if not isinstance(entry, dict) or not isinstance(entry.get("requirement"), str) or not entry["requirement"].strip():
            raise SpecError(f"{where}: must be a mapping with 'requirement' (one line) and 'check' (axis.name)")
        unknown = set(entry) - {"requirement", "check"}
        if unknown:
            raise SpecError(f"{where}: unknown key '{sorted(unknown)[0]}'; use requirement and check")
        covering = entry.get("check") or []
        covering = [covering] if isinstance(covering, str) else covering
        if not isinstance(covering, list) or not all(isinstance(c, str) for c in covering):
            raise SpecError(f"{where}: 'check' must be axis.name or a list of them")
        for name in covering:
            axis, _, function = name.partition(".")
            if axis not in named or function not in named[axis]:
                have = ", ".join(f"{a}.{f}" for a in named for f in sorted(named[a])) or "none"
                raise SpecError(f"{where}: '{name}' is not a named check; write it as axis.function with the function "
                                f"decorated with @check in checks.<axis> (named checks: {have})")
        lines.append(ReviewLine(entry["requirement"].strip(), tuple(covering)))
    return tuple(lines)


def _rehearsal_fault(path: Path, raw: dict) -> str:
    """The task's `rehearsal_fault` in its written form ('529:1'), checked; '' when absent."""
    value = raw.get("rehearsal_fault")
    if value is None:
        return ""
    try:
        return str(parse_fault(str(value)))
    except ValueError as exc:
        raise SpecError(f"{path}: field 'rehearsal_fault': {exc}") from None


def load_arm(path: Path) -> ArmSpec:
    path = Path(path)
    raw = _read_mapping(path) if path.read_text(encoding="utf-8").strip() else {}
    _reject_unknown(path, raw, ARM_FIELDS)
    name = path.stem
    if not NAME_RE.match(name) or "__" in name:
        raise SpecError(f"{path}: the file name '{name}' must be letters, digits, '.', '-' or '_' without '__'")
    prompt = _text(path, raw, "prompt")
    plugin = _text(path, raw, "plugin")
    proof = raw.get("proof") or []
    if isinstance(proof, str):
        proof = [proof]
    if not isinstance(proof, list) or not all(isinstance(p, str) and p for p in proof):
        raise SpecError(f"{path}: field 'proof': must be a list of non-empty strings")
    return ArmSpec(
        name=name, path=path, prompt=prompt, plugin=plugin, proof=tuple(proof),
        description=str(raw.get("description") or ""), spec_hash=_short_hash(raw),
    )


def load_arms(arms_dir: Path) -> dict[str, ArmSpec]:
    """All arms, by name. An arm that fails to load is an error for the whole run: arms are few
    and every cell depends on them, unlike tasks which fail one file at a time."""
    arms = {}
    for path in sorted(Path(arms_dir).glob("*.yaml")):
        arm = load_arm(path)
        arms[arm.name] = arm
    return arms


def model_ids(overrides: list[str]) -> dict[str, str]:
    """Alias -> full model id: the defaults, then `alias = id` lines from configuration."""
    ids = dict(DEFAULT_MODEL_IDS)
    for line in overrides:
        if not line.strip():
            continue
        alias, sep, full = line.partition("=")
        if not sep or not alias.strip() or not full.strip():
            raise SpecError(f"ponybench_model_ids: '{line}' must read 'alias = full-model-id'")
        ids[alias.strip()] = full.strip()
    return ids


def resolve_model(name: str, ids: dict[str, str]) -> str:
    if name in ids:
        return ids[name]
    if name.startswith("claude-"):
        return name  # a full id passes through
    raise SpecError(f"--models: unknown model '{name}'; use one of {', '.join(sorted(ids))} or a full claude-... id")


def plugin_cache_dir() -> Path:
    return Path.home() / ".claude" / "plugins" / "cache"


def _version_key(path: Path):
    """Released versions by their order (1.10 after 1.9, 1.0.0 after 1.0.0b1), above folders
    whose names are no version (a git hash), which rank by modification time."""
    from packaging.version import InvalidVersion, Version  # pytest's own dependency

    try:
        return (1, Version(path.name), path.stat().st_mtime)
    except InvalidVersion:
        return (0, Version("0"), path.stat().st_mtime)


def resolve_plugin_dir(arm: ArmSpec, arms_dir: Path, cache_dir: Path | None = None,
                       environ: dict[str, str] | None = None) -> str | None:
    """Where a plugin arm's plugin lives: `<NAME>_PLUGIN_DIR`, else the newest installed version
    under ~/.claude/plugins/cache/<marketplace>/<name>/<version>, else a path relative to arms/.
    Raises SpecError with what to do when none exists."""
    if not arm.plugin:
        return None
    if arm.path is None and Path(arm.plugin).is_absolute():
        # An arm made from a plugin folder (--ponybench-plugin): exactly that folder, never an
        # installed copy of the same name.
        if not Path(arm.plugin).is_dir():
            raise SpecError(f"arm '{arm.name}': plugin folder {arm.plugin} does not exist")
        return str(Path(arm.plugin).resolve())
    # A YAML arm's relative plugin path is relative to its own folder (the shipped arms/ or the
    # project's), else to the arms folder given.
    arms_dir = Path(arm.path).parent if arm.path is not None else Path(arms_dir)
    name = Path(arm.plugin).name
    var = re.sub(r"[^A-Za-z0-9]", "_", name).upper() + "_PLUGIN_DIR"
    override = (os.environ if environ is None else environ).get(var)
    if override:
        if not Path(override).is_dir():
            raise SpecError(f"arm '{arm.name}': {var}={override} is not a directory")
        return str(Path(override).resolve())
    cache = cache_dir if cache_dir is not None else plugin_cache_dir()
    versions = [v for v in cache.glob(f"*/{name}/*") if v.is_dir()] if cache.is_dir() else []
    if versions:
        return str(max(versions, key=_version_key).resolve())
    local = (Path(arms_dir) / arm.plugin).expanduser()
    if local.is_dir():
        return str(local.resolve())
    raise SpecError(
        f"arm '{arm.name}': plugin '{arm.plugin}' not found: set {var}, install the plugin "
        f"(looked under {cache}/*/{name}/), or give a path relative to {arms_dir}"
    )
