"""Import a plugin's `claude plugin eval` suite: its `evals/` cases become tasks.

The format (Claude Code's plugin-evals documentation): `<plugin>/evals/` holds one folder per
case (a folder without a case file groups cases); a case has `prompt.md` (optional YAML
front matter, then the prompt) and/or `case.yaml` (`prompt`, or `execution.prompt`, `tags`,
`graders`, and more). A grader is a `graders/<name>.md` file (its front matter; a regex
grader's pattern may be the body) or an entry of the `graders:` list of case.yaml.

Each case becomes a task named like its folder, run with the plugin's arm and the reference
arm (baseline). Its deterministic graders (graders.py) are its `correct` check, run like any
check: in a child process, with a time limit, over the workspace and the transcript. Its
judged graders (`llm`, `baseline`) need a second model; they are never run, and never
dropped either: each cell's record names them (`graders_not_run`), and the terminal and
summary.md list them.

What a case declares beyond the prompt and graders: `files:` in case.yaml ({path: content})
and a `files/` folder in the case are written into the workspace before the agent starts.
Keys this import does not use (run limits such as `max_turns`, `allowed_tools`, `env`) are
listed in the task's description. A `ponybench:` block is this project's own: `rehearsal:
{files: {path: content}, answer: text}` is what the scripted model writes and says in a
rehearsal (default: the small file any task without references gets, and a one-line answer).

One module on purpose (about 500 lines): it follows one external format. Reading a suite,
making its cases tasks, and the plugin that reports the graders a run did not judge all read
the same fields of `claude plugin eval`; a change to that format is a change here and nowhere
else.
"""
from __future__ import annotations

import fnmatch
import hashlib
import json
import os
import re
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import yaml

from pytest_ponybench.judge.judged_graders import RUBRIC_KEYS, JudgedGrader, from_grader
from pytest_ponybench.scoring import graders as grading
from pytest_ponybench.specs.spec import NAME_RE, SpecError, TaskSpec, check_relative, load_yaml

CASE_FILES = ("case.yaml", "prompt.md")
USED_KEYS = {"prompt", "execution", "tags", "graders", "files", "ponybench", "name", "description"}
FRONT_RE = re.compile(r"\A---\s*\n(.*?)\n---\s*(?:\n|\Z)", re.S)
# Keys that tune the CLI run: the harness runs every cell its own way (one timeout, the same
# tools for every arm), so these are named in the description and nothing more.
RUN_LIMITS = {"max_turns", "timeout_seconds", "allowed_tools", "model", "runs", "env", "schema_version", "arm"}
SETUP_SCRIPTS = ("scaffold.sh", "setup.sh")
MAX_FILES = 200  # files of one case's files/ folder
CHECK_TIMEOUT = 30.0


@dataclass(frozen=True)
class EvalCase:
    task: TaskSpec
    plugin_arm: str  # the arm of the plugin whose suite this is
    graders: tuple[dict, ...]
    not_run: tuple[str, ...]  # "name (kind)" of each judged grader
    rehearsal_answer: str | None = None
    ignored: tuple[str, ...] = ()
    # What the scripted model writes (the case's block, else derived from its graders) and
    # the graders no derived default can satisfy ("grader g (kind): why").
    rehearsal_files: dict = field(default_factory=dict)
    rehearsal_unsatisfied: tuple[str, ...] = ()
    # The judged graders with what they need to run under --ponybench-judge (judged_graders.py).
    judged: tuple[JudgedGrader, ...] = ()

    @property
    def setup_not_run(self) -> tuple[str, ...]:
        """What the case declares beyond files and run limits (a setup script, extra folders,
        history): the agent starts without it, and the output says so."""
        return tuple(k for k in self.ignored if k not in RUN_LIMITS)


def _yaml_where(exc: yaml.YAMLError, offset: int = 0) -> str:
    """' at line N' of a YAML error, when PyYAML knows where it is."""
    mark = getattr(exc, "problem_mark", None)
    return f" at line {mark.line + 1 + offset}" if mark is not None else ""


def front_matter(text: str, where: Path) -> tuple[dict, str]:
    match = FRONT_RE.match(text)
    if not match:
        return {}, text
    try:
        data = load_yaml(match.group(1), where) or {}
    except yaml.YAMLError as exc:
        # The front matter starts on the file's second line (after '---').
        raise SpecError(f"{where}: the front matter is not valid YAML{_yaml_where(exc, 1)}: "
                        f"{getattr(exc, 'problem', None) or exc}") from None
    if not isinstance(data, dict):
        raise SpecError(f"{where}: the front matter must be a mapping of fields")
    return data, text[match.end():]


def find_cases(evals_dir: Path) -> list[Path]:
    """Case folders under evals/, sorted; a folder with neither case file groups others."""
    found = []
    for child in sorted(p for p in Path(evals_dir).iterdir() if p.is_dir() and not p.name.startswith(".")):
        if child.name == "results":  # written by `claude plugin eval` runs
            continue
        if any((child / name).is_file() for name in CASE_FILES):
            found.append(child)
        else:
            found.extend(find_cases(child))
    return found


def _grader_files(case: Path) -> list[dict]:
    out = []
    folder = case / "graders"
    for path in sorted(folder.glob("*.md")) if folder.is_dir() else []:
        data, body = front_matter(path.read_text(encoding="utf-8"), path)
        grader = dict(data)
        grader.setdefault("name", path.stem)
        if grader.get("type") == "regex" and not grader.get("pattern") and body.strip():
            grader["pattern"] = body.strip()
        # A judged grader's rubric may be the file's body (judged_graders.py).
        if grader.get("type") in grading.JUDGED and body.strip() and not any(
                isinstance(grader.get(k), str) and grader[k].strip() for k in RUBRIC_KEYS):
            grader["rubric"] = body.strip()
        grader["_file"] = str(path)
        out.append(grader)
    return out


def _case_files(case: Path, raw: dict, where: Path) -> dict[str, str]:
    files = {}
    folder = case / "files"
    if folder.is_dir():
        # A link would be followed into every workspace (a secret, /etc/shadow): refused, named.
        for dirpath, dirnames, filenames in os.walk(folder):
            for name in sorted(dirnames + filenames):
                if os.path.islink(os.path.join(dirpath, name)):
                    raise SpecError(f"{Path(dirpath, name)}: a symbolic link in the case's files/; "
                                    f"copy the file in instead (links are never seeded)")
        paths = sorted(p for p in folder.rglob("*") if p.is_file())
        if len(paths) > MAX_FILES:
            raise SpecError(f"{folder}: more than {MAX_FILES} files to seed")
        for path in paths:
            files[str(path.relative_to(folder))] = path.read_text(encoding="utf-8")
    declared = raw.get("files") or {}
    if not isinstance(declared, dict):
        raise SpecError(f"{where}: field 'files': must map a workspace path to its content")
    for rel, content in declared.items():
        rel = check_relative(where, "files", rel)
        if not isinstance(content, str):
            raise SpecError(f"{where}: field 'files': content of '{rel}' must be a string")
        files[rel] = content
    return files


def _rehearsal(raw: dict, where: Path) -> tuple[dict[str, str] | None, str | None]:
    """The case's own `ponybench: rehearsal:` block: (files, answer); files None when the
    block (or its `files`) is absent, {} when it says `files: {}` (a read-only case)."""
    block = raw.get("ponybench") or {}
    rehearsal = block.get("rehearsal") if isinstance(block, dict) else None
    if rehearsal is None:
        return None, None
    if not isinstance(rehearsal, dict):
        raise SpecError(f"{where}: field 'ponybench.rehearsal': must be a mapping with files and answer")
    answer = rehearsal.get("answer")
    answer = str(answer) if answer is not None else None
    if rehearsal.get("files") is None:
        return None, answer
    if not isinstance(rehearsal["files"], dict):
        raise SpecError(f"{where}: field 'ponybench.rehearsal.files': must map a workspace path to its content")
    files = {}
    for rel, content in rehearsal["files"].items():
        files[check_relative(where, "ponybench.rehearsal.files", rel)] = str(content)
    return files, answer


def _check_judge_pair(raw: dict, where: Path) -> None:
    """`ponybench: {judge_pair: {pass: {answer, files}, fail: {answer, files}}}`: the examples
    the judge is proven on for this case's judged graders (judged_graders.py)."""
    block = raw.get("ponybench")
    if not isinstance(block, dict):
        block = {}
    pair = block.get("judge_pair")
    if pair is None:
        return
    if not isinstance(pair, dict) or not set(pair) <= {"pass", "fail"} or not pair:
        raise SpecError(f"{where}: field 'ponybench.judge_pair': must be a mapping with `pass` and/or `fail`, "
                        f"each {{answer: text, files: {{path: content}}}}")
    for side, example in pair.items():
        if not isinstance(example, dict) or not set(example) <= {"answer", "files"} \
                or not isinstance(example.get("files") or {}, dict):
            raise SpecError(f"{where}: field 'ponybench.judge_pair.{side}': must be {{answer: text, files: "
                            f"{{path: content}}}}")


def load_case(case: Path, plugin_arm: str) -> EvalCase:
    """One case folder as a task. Raises SpecError naming the file and field at fault."""
    case = Path(case)
    name = case.name
    where = case / "case.yaml" if (case / "case.yaml").is_file() else case / "prompt.md"
    if not NAME_RE.match(name) or "__" in name:
        raise SpecError(f"{case}: the case name '{name}' must be letters, digits, '.', '-' or '_' without '__'")
    raw: dict = {}
    if (case / "case.yaml").is_file():
        try:
            raw = load_yaml((case / "case.yaml").read_text(encoding="utf-8"), case / "case.yaml") or {}
        except yaml.YAMLError as exc:
            raise SpecError(f"{case / 'case.yaml'}: malformed YAML{_yaml_where(exc)}: "
                            f"{getattr(exc, 'problem', None) or exc}") from None
        if not isinstance(raw, dict):
            raise SpecError(f"{case / 'case.yaml'}: expected a mapping of fields at the top level")
    front: dict = {}
    body = ""
    if (case / "prompt.md").is_file():
        front, body = front_matter((case / "prompt.md").read_text(encoding="utf-8"), case / "prompt.md")
    execution = raw.get("execution")
    if not isinstance(execution, dict):
        execution = {}
    prompt = body.strip() or raw.get("prompt") or execution.get("prompt")
    if not isinstance(prompt, str) or not prompt.strip():
        raise SpecError(f"{where}: no prompt: write it in prompt.md or as 'prompt' in case.yaml")
    graders = _grader_files(case)
    listed = raw.get("graders") or []
    if not isinstance(listed, list):
        raise SpecError(f"{case / 'case.yaml'}: field 'graders': must be a list of graders")
    for i, grader in enumerate(listed, 1):
        if not isinstance(grader, dict):
            raise SpecError(f"{case / 'case.yaml'}: field 'graders' entry {i}: must be a mapping with a type")
        grader = dict(grader)
        grader.setdefault("name", f"{grader.get('type', 'grader')}-{i}")
        grader["_file"] = f"{case / 'case.yaml'} graders[{i}]"
        graders.append(grader)
    if not graders:
        raise SpecError(f"{case}: the case has no grader (graders/*.md or 'graders' in case.yaml)")
    for grader in graders:
        try:
            grading.validate(grader)
        except grading.GraderError as exc:
            raise SpecError(f"{grader['_file']}: grader '{grader['name']}': {exc}") from None
    graders = [{k: v for k, v in g.items() if k != "_file"} for g in graders]
    runnable = [g for g in graders if g["type"] in grading.DETERMINISTIC]
    not_run = tuple(f"{g['name']} ({g['type']})" for g in graders if g["type"] in grading.JUDGED)
    judged = tuple(from_grader(g, case, raw) for g in graders if g["type"] in grading.JUDGED)
    tags = [t for t in list(raw.get("tags") or []) + list(front.get("tags") or [])
            if isinstance(t, str) and t.isidentifier()]
    ignored = tuple(sorted((set(raw) - USED_KEYS) | (set(front) - {"tags"})
                           | {name for name in SETUP_SCRIPTS if (case / name).is_file()}))
    rehearsal_files, answer = _rehearsal(raw, where)
    _check_judge_pair(raw, where)
    unsatisfied: tuple[str, ...] = ()
    if rehearsal_files is None:  # no block: what the graders expect, as far as a default can
        if runnable:
            rehearsal_files, default_answer, unsatisfied = default_rehearsal(graders)
            answer = answer if answer is not None else default_answer
        else:  # judged graders only: scored as an open task, on delivered code
            from pytest_ponybench.rehearsal.plugin import DEFAULT_FILES

            rehearsal_files = dict(DEFAULT_FILES)
    checks = {}
    if runnable:
        checks["correct"] = grading.check_code(runnable)
    description = f"claude plugin eval case {name}"
    if not_run:
        description += f"; not run (judged): {', '.join(not_run)}"
    if ignored:
        description += f"; not imported: {', '.join(ignored)}"
    fingerprint = json.dumps({"prompt": prompt, "graders": graders, "raw": raw, "front": front}, sort_keys=True, default=str)
    task = TaskSpec(
        name=name, path=where, prompt=prompt.strip(), file=None, seed=_case_files(case, raw, where),
        checks=checks, tags=tuple(dict.fromkeys(["plugin_eval", *tags])), check_timeout=CHECK_TIMEOUT,
        # The scripted model's files are set by EvalSuites (an empty set included), not here.
        description=description,
        spec_hash=hashlib.sha256(fingerprint.encode()).hexdigest()[:12],
        # No deterministic grader at all (only judged ones): the cell is scored as an open task.
        open=not runnable,
    )
    return EvalCase(task=task, plugin_arm=plugin_arm, graders=tuple(graders), not_run=not_run,
                    rehearsal_answer=answer, ignored=ignored, rehearsal_files=rehearsal_files,
                    rehearsal_unsatisfied=unsatisfied, judged=judged)


def load_suite(plugin: Path, plugin_arm: str) -> list[EvalCase]:
    """Every case of a plugin's evals/ folder (none when it has no such folder)."""
    evals = Path(plugin) / "evals"
    if not evals.is_dir():
        return []
    return [load_case(case, plugin_arm) for case in find_cases(evals)]


@dataclass(eq=False)  # a pytest plugin object must hash by identity
class EvalSuites:
    """The imported cases of a session, by task name, as a pytest plugin: it names each
    cell's judged graders in its record, plays each case's rehearsal answer, and lists what
    was not run at the end (terminal and summary.md)."""

    cases: dict[str, EvalCase] = field(default_factory=dict)
    judging: bool = False  # --ponybench-judge: the judged graders run (judging.py), off the not-run list

    def add(self, suite: list[EvalCase], taken: dict[str, Path]) -> None:
        for case in suite:
            other = taken.get(case.task.name) or (self.cases[case.task.name].task.path
                                                   if case.task.name in self.cases else None)
            if other is not None:
                raise SpecError(f"eval case '{case.task.name}' ({case.task.path}) is named like {other}; "
                                f"rename one of them")
            self.cases[case.task.name] = case

    def arms_for(self, task_name: str, reference: str) -> list[str] | None:
        case = self.cases.get(task_name)
        return None if case is None else [case.plugin_arm, reference]

    def pytest_ponybench_cell_record(self, cell, record):
        case = self.cases.get(cell.task.name)
        if case is not None:  # under --ponybench-judge the judge's own hook says which did not run
            record.setdefault("graders_not_run", ", ".join(case.not_run))

    def pytest_ponybench_rehearsal_script(self, cell, script, workspace):
        case = self.cases.get(cell.task.name)
        if case is None:
            return
        if workspace is not None:  # the case's files, or none at all for `files: {}`
            script.writes = [(str(Path(workspace) / rel), content) for rel, content in case.rehearsal_files.items()]
        if case.rehearsal_answer is not None:
            script.answer = case.rehearsal_answer

    def rehearsal_lines(self) -> list[str]:
        """Per case, the graders the scripted model's derived default cannot satisfy."""
        return [f"{name}: in rehearsal the scripted model cannot satisfy {why}; {REHEARSAL_BLOCK} "
                f"({case.task.path.parent / 'case.yaml'})"
                for name, case in sorted(self.cases.items()) for why in case.rehearsal_unsatisfied]

    def not_run_lines(self) -> list[str]:
        lines = []
        for name, case in sorted(self.cases.items()):
            if case.not_run and not self.judging:
                lines.append(f"{name}: judged graders not run (they need a second model; run with --ponybench-judge): "
                             f"{', '.join(case.not_run)}")
            for grader in case.judged if self.judging else ():
                if grader.problem:
                    lines.append(f"{name}: judged grader not run: {grader.problem}")
            if case.setup_not_run:
                lines.append(f"{name}: not imported, the agent starts without it: {', '.join(case.setup_not_run)}")
        return lines

    def pytest_terminal_summary(self, terminalreporter, config):
        lines = self.not_run_lines()
        if lines:
            terminalreporter.write_sep("-", "claude plugin eval: not run here")
            for line in lines:
                terminalreporter.write_line(line, yellow=True)
        rehearsing = config.getoption("ponybench_rehearse", False) and config.getoption("ponybench", False)
        if rehearsing and self.rehearsal_lines():
            terminalreporter.write_sep("-", "claude plugin eval: rehearsal")
            for line in self.rehearsal_lines():
                terminalreporter.write_line(line, yellow=True)

    @pytest.hookimpl(trylast=True)
    def pytest_sessionfinish(self, session):
        """After the controller wrote summary.md: append the graders that were not run."""
        from pytest_ponybench.run.session import STATE

        state = session.config.stash.get(STATE, None)
        run_dir = getattr(state, "run_dir", None)
        text = self.markdown()
        if self.judging and run_dir is not None and not hasattr(session.config, "workerinput"):
            from pytest_ponybench.run.judging import grader_lines

            controller = session.config.pluginmanager.get_plugin("ponybench-controller")
            gathering = getattr(controller, "gathering", None)  # the run's records, as the controller holds them
            graded = grader_lines(gathering.all_records() if gathering is not None else [])
            if graded:  # the verdicts of the judged graders, per arm then per cell
                text += "\n## Judged graders\n\n" + "".join(f"- {line.strip()}\n" for line in graded)
        if hasattr(session.config, "workerinput") or run_dir is None or not text:
            return
        path = run_dir.path / "summary.md"
        if path.is_file():
            with open(path, "a", encoding="utf-8") as fh:
                fh.write(text)

    def markdown(self) -> str:
        lines = self.not_run_lines()
        if not lines:
            return ""
        return "\n## Graders not run\n\nJudged graders of the imported `claude plugin eval` cases need a " \
               "second model: they are listed here, never counted as passed. A case's setup this import " \
               "cannot reproduce is listed too:\n\n" + \
               "".join(f"- {line}\n" for line in lines)


# --------------------------------------------------------------------------- rehearsal default
# What the scripted model writes and answers in a case without a `ponybench: rehearsal:` block:
# worked out from the case's graders, so that a correct suite passes its first rehearsal.

REHEARSAL_ANSWER = "Done: the change is written."
REHEARSAL_BLOCK = "add a `ponybench: {rehearsal: {files: {path: content}, answer: text}}` block to its case.yaml"
_CLASS_SAMPLE = {"d": "0", "w": "x", "s": " ", "D": "x", "W": "-", "S": "x"}


def sample_text(pattern: str, flags: str = "") -> str | None:
    """A short text the JavaScript regex `pattern` finds, for the plain patterns suites use
    (text, escapes, `.`, `\\d`, classes, quantifiers, anchors, top-level `|`); None when the
    pattern is beyond that. The sample is checked against the pattern itself."""
    branch = pattern.split("|")[0] if "(" not in pattern and "[" not in pattern else pattern
    out, i = [], 0
    while i < len(branch):
        c = branch[i]
        if c in "^$" and (i == 0 or i == len(branch) - 1):
            i += 1
            continue
        if c == "\\" and i + 1 < len(branch):
            nxt = branch[i + 1]
            atom = _CLASS_SAMPLE.get(nxt, None if nxt.isalnum() else nxt)
            i += 2
        elif c == "[":
            end = branch.find("]", i + 2)
            body = branch[i + 1:end] if end > 0 else ""
            if not body or body.startswith("^") or "\\" in body:
                return None
            atom, i = body[0], end + 1
        elif c == ".":
            atom, i = "x", i + 1
        elif c in "()|*+?{}^$":
            return None
        else:
            atom, i = c, i + 1
        if atom is None:
            return None
        quant = re.match(r"\{(\d+)(?:,\d*)?\}|[*+?]", branch[i:])
        if quant:
            times = int(quant.group(1)) if quant.group(1) else (0 if quant.group(0) in "*?" else 1)
            atom *= times
            i += quant.end()
        out.append(atom)
    text = "".join(out)
    try:
        return text if grading.js_regex(pattern, flags).search(text) else None
    except grading.GraderError:
        return None


def sample_path(glob: str) -> str | None:
    """A workspace path the glob of a file_exists grader matches (`*.txt`: rehearsal.txt)."""
    path = glob.replace("**/", "").replace("**", "rehearsal").replace("*", "rehearsal").replace("?", "x")
    path = re.sub(r"\[!?([^\]])[^\]]*\]", r"\1", path)
    path = path.lstrip("/")
    return path if path and fnmatch.fnmatch(path, glob) and ".." not in path.split("/") else None


def default_rehearsal(graders: list[dict]) -> tuple[dict[str, str], str, tuple[str, ...]]:
    """(files, answer, graders no default can satisfy) for a case without a rehearsal block."""
    files: dict[str, str] = {}
    needed_by: dict[str, str] = {}  # path -> the grader it is written for: a hint names that one
    answer: list[str] = []
    unsatisfied: list[str] = []

    def cannot(grader: dict, why: str) -> None:
        unsatisfied.append(f"grader {grader['name']} ({grader['type']}): {why}")

    runnable = [g for g in graders if g["type"] in grading.DETERMINISTIC]
    for g in runnable:
        if g["type"] == "file_exists" and g.get("exists", True) is not False:
            path = sample_path(g["path"])
            if path is None:
                cannot(g, f"no plain path matches the glob {g['path']!r}")
            else:
                files.setdefault(path, f"Written by the scripted model for grader {g['name']}.\n")
                needed_by.setdefault(path, g["name"])
    for g in runnable:
        if g["type"] != "regex" or str(g.get("match") or "contains") == "not_contains":
            continue
        match = str(g.get("match") or "contains")
        text = sample_text(g["pattern"], str(g.get("flags") or ""))
        if text is None or (not text and match != "contains"):
            cannot(g, f"no default text is sure to match /{g['pattern']}/")
            continue
        text = "\n".join([text] * (int(match.split(":")[1]) if match.startswith("count:") else 1))
        target = g.get("target", "last_message")
        source = target.get("source") if isinstance(target, dict) else target
        if source in ("file", "files"):
            # First in the file (and in the first file the grader reads): a `^` without the
            # m flag matches only there.
            rel = target["path"] if source == "file" else min(files, default="rehearsal.txt")
            files[rel] = text + "\n" + files.get(rel, "")
            needed_by.setdefault(rel, g["name"])
        else:  # the last message, which the trace holds too
            answer.append(text)
    for g in runnable:
        kind = g["type"]
        if kind == "tool_used":
            low, high = grading.call_bounds(g)
            if g["tool"] == "Write" and not g.get("input_match"):
                while len(files) < low:  # more Write calls wanted than files: write more
                    path = f"rehearsal-{len(files) + 1}.txt"
                    files[path] = "Written by the scripted model.\n"
                    needed_by[path] = g["name"]
                if high is not None and len(files) > high:
                    others = sorted(set(needed_by.values()) - {g["name"]})
                    cannot(g, f"grader(s) {', '.join(others)} need {len(files)} written file(s), more than its "
                              f"max {high}")
            elif g["tool"] in grading.WRITE_TOOLS and g["tool"] != "Write" and low > 0:
                cannot(g, f"the scripted model writes with Write, never {g['tool']}")
            elif g["tool"] not in grading.WRITE_TOOLS and low > 0 and g["tool"] != "Read":
                cannot(g, f"the scripted model never calls {g['tool']}")
            elif g["tool"] == "Read" and low > 0:
                cannot(g, "the scripted model reads a file only before overwriting a seeded one")
            elif g.get("input_match") and low > 0:
                cannot(g, f"no default call's input is sure to match /{g['input_match']}/")
        elif kind == "tool_order":
            cannot(g, "the scripted model plays no chosen order of tool calls")
    final = REHEARSAL_ANSWER + ("\n" + "\n".join(answer) if answer else "")
    for g in runnable:  # what must not be there
        if g["type"] == "regex" and str(g.get("match") or "contains") == "not_contains":
            target = g.get("target", "last_message")
            source = target.get("source") if isinstance(target, dict) else target
            texts = {"file": [files.get(target["path"], "")] if source == "file" else [],
                     "files": list(files.values()), "trace": [final, *files.values()],
                     "last_message": [final]}.get(str(source), [final])
            pattern = grading.js_regex(g["pattern"], str(g.get("flags") or ""))
            if any(pattern.search(t) for t in texts):
                cannot(g, f"the default answer or files contain /{g['pattern']}/")
        if g["type"] == "file_exists" and g.get("exists", True) is False:
            hit = [p for p in files if fnmatch.fnmatch(p, g["path"])]
            if hit:
                cannot(g, f"another grader needs {hit[0]}, which matches {g['path']!r}")
    return files, final, tuple(unsatisfied)
