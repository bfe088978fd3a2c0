"""Check strength: how many plausible wrong implementations a task's checks catch.

A task's refs prove one lazy mistake each way. Its variants file, `tests/variants/<task>.yaml`,
holds more: `caught` variants (each a plausible implementation with one mistake, which must
fail its `axis`) and `accepted` ones (independent correct implementations, which must pass
correct and safe; robust is what the ticket never asked for, so a fine one may fail it). A variant is judged exactly like a reference: seeded into a temporary workspace
with `workspace.seed`, scored with `checks.run_checks`, plus the task's forbidden edits.

    caught:
      - name: prefix_string_containment   # unique in the file, snake_case
        axis: safe                        # the axis that must FAIL
        mistake: containment by string prefix instead of path ancestry
        code: |                           # the whole entry file (task.file) ...
          ...
        # ... or files: {relative/path: content}, laid over the seeded workspace
    accepted:
      - name: realpath_commonpath
        code: |
          ...

A caught variant should pass the other axes; when its mistake cannot, its `mistake` line
names the other axis it fails ("... (so also incorrect)").
"""
from __future__ import annotations

import os
import re
import tempfile
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from pytest_ponybench.cell import lifecycle as cell, workspace
from pytest_ponybench.scoring import checks
from pytest_ponybench.specs.spec import AXES, PASS_AXES, SpecError, TaskSpec, check_relative, load_task

VARIANTS_DIR = Path("tests") / "variants"  # under the rootdir
SECTIONS = ("caught", "accepted")
VARIANT_KEYS = {"name", "axis", "mistake", "code", "files"}
NAME_RE = re.compile(r"^[a-z][a-z0-9_]*$")
MIN_CAUGHT, MIN_ACCEPTED = 6, 3  # what every shipped task keeps


@dataclass(frozen=True)
class Variant:
    task: str  # the task name, from the file name
    name: str
    kind: str  # "caught" or "accepted"
    axis: str | None = None  # caught: the axis that must fail
    mistake: str = ""  # caught: the mistake in one line
    code: str | None = None  # the whole entry file ...
    files: dict[str, str] = field(default_factory=dict)  # ... or files laid over the seed

    def files_for(self, task: TaskSpec) -> dict[str, str]:
        if self.code is None:
            return dict(self.files)
        if task.file is None:
            raise SpecError(f"variant {self.task}/{self.name}: 'code' needs the task's 'file' field; use 'files'")
        return {task.file: self.code}


@dataclass(frozen=True)
class Judgement:
    variant: Variant
    verdicts: dict[str, checks.Verdict]

    @property
    def held(self) -> bool:
        """A caught variant failed its axis; an accepted one passed correct and safe."""
        if self.variant.kind == "caught":
            return not self.verdicts[self.variant.axis].ok
        return all(v.ok for axis, v in self.verdicts.items() if axis in PASS_AXES)

    @property
    def other_failures(self) -> dict[str, str]:
        """Caught variants: the pass/fail axes besides its own that it failed too (with reasons)."""
        if self.variant.kind != "caught":
            return {}
        return {axis: v.reason for axis, v in self.verdicts.items()
                if axis != self.variant.axis and axis in PASS_AXES and not v.ok}


def _problem(path: Path, where: str, message: str) -> SpecError:
    return SpecError(f"{path}: {where}: {message}")


def load_variants(path: Path) -> list[Variant]:
    """The variants of one task file, validated; SpecError names the file, entry and problem."""
    path = Path(path)
    try:
        raw = yaml.safe_load(path.read_text(encoding="utf-8"))
    except yaml.YAMLError as exc:
        raise SpecError(f"{path}: malformed YAML: {getattr(exc, 'problem', None) or exc}") from None
    if not isinstance(raw, dict):
        raise SpecError(f"{path}: expected a mapping with 'caught' and 'accepted' lists")
    unknown = set(raw) - set(SECTIONS)
    if unknown:
        raise _problem(path, f"field '{sorted(unknown)[0]}'", "unknown; use caught and accepted")
    variants, seen = [], set()
    for kind in SECTIONS:
        entries = raw.get(kind) or []
        if not isinstance(entries, list):
            raise _problem(path, f"field '{kind}'", "must be a list of variants")
        for index, entry in enumerate(entries):
            where = f"{kind}[{index}]"
            if not isinstance(entry, dict):
                raise _problem(path, where, "must be a mapping with name, code or files")
            bad_keys = set(entry) - VARIANT_KEYS
            if bad_keys:
                raise _problem(path, where, f"unknown key '{sorted(bad_keys)[0]}'; use {', '.join(sorted(VARIANT_KEYS))}")
            name = entry.get("name")
            if not isinstance(name, str) or not NAME_RE.match(name):
                raise _problem(path, where, f"name {name!r} must be snake_case (a-z, 0-9, _)")
            where = f"{kind} '{name}'"
            if name in seen:
                raise _problem(path, where, "the name is used twice; names are unique within a file")
            seen.add(name)
            axis, mistake = entry.get("axis"), entry.get("mistake")
            if kind == "caught":
                if axis not in AXES:
                    raise _problem(path, where, f"axis {axis!r} must be one of {', '.join(AXES)} (the axis it must fail)")
                if not isinstance(mistake, str) or not mistake.strip():
                    raise _problem(path, where, "needs 'mistake': the mistake in one line")
            elif axis is not None or mistake is not None:
                raise _problem(path, where, "an accepted variant has no axis or mistake: it must pass every check")
            code, files = entry.get("code"), entry.get("files")
            if (code is None) == (files is None):
                raise _problem(path, where, "give exactly one of 'code' (the entry file) or 'files' (a path map)")
            if code is not None and (not isinstance(code, str) or not code.strip()):
                raise _problem(path, where, "'code' must be the entry file's content")
            if files is not None:
                if not isinstance(files, dict) or not files:
                    raise _problem(path, where, "'files' must map relative paths to content")
                for rel, content in files.items():
                    check_relative(path, f"{where}.files", rel)
                    if not isinstance(content, str):
                        raise _problem(path, f"{where}.files", f"content of '{rel}' must be a string")
            variants.append(Variant(task=path.stem, name=name, kind=kind, axis=axis,
                                    mistake=(mistake or "").strip(), code=code,
                                    files=dict(files or {})))
    return variants


def judge(task: TaskSpec, variant: Variant) -> Judgement:
    """Seed the variant like a reference and run the checks its judgement reads (and the
    forbidden-edit rule): correct and safe, and a caught variant's own axis. Robust never
    decides whether a fine one is accepted, so it is not run for one (its checks are the
    slowest: behaviour over thousands of calls)."""
    if variant.kind == "caught" and variant.axis not in task.checks:  # no verdict could ever hold it
        raise SpecError(f"variant {variant.task}/{variant.name}: axis '{variant.axis}' is not one of the task's "
                        f"checks ({', '.join(task.checks) or 'none'}); name the axis its mistake must fail")
    with tempfile.TemporaryDirectory(prefix=f"ponybench-variant-{task.name}-") as tmp:
        ws = Path(tmp)
        workspace.seed(task, ws, files=variant.files_for(task))
        verdicts = cell.judge(task, ws, axes=(*PASS_AXES, variant.axis or ""))
    return Judgement(variant, verdicts)


@dataclass(frozen=True)
class TaskStrength:
    task: str
    judgements: list[Judgement]

    def _of(self, kind: str) -> list[Judgement]:
        return [j for j in self.judgements if j.variant.kind == kind]

    @property
    def caught(self) -> int:
        return sum(j.held for j in self._of("caught"))

    @property
    def caught_total(self) -> int:
        return len(self._of("caught"))

    @property
    def accepted(self) -> int:
        return sum(j.held for j in self._of("accepted"))

    @property
    def accepted_total(self) -> int:
        return len(self._of("accepted"))

    @property
    def misjudged(self) -> list[Judgement]:
        return [j for j in self.judgements if not j.held]


def variant_files(variants_dir: Path) -> dict[str, Path]:
    return {p.stem: p for p in sorted(Path(variants_dir).glob("*.yaml"))}


def measure(tasks: list[TaskSpec], variants_dir: Path, workers: int | None = None) -> list[TaskStrength]:
    """Judge every variant of every task that has a variants file; one entry per such task.

    Judging waits on child processes, so a thread pool overlaps them well."""
    files = variant_files(variants_dir)
    jobs = [(task, v) for task in tasks if task.name in files for v in load_variants(files[task.name])]
    with ThreadPoolExecutor(max_workers=workers or max(2, 2 * (os.cpu_count() or 1))) as pool:
        judged = list(pool.map(lambda job: judge(*job), jobs))
    by_task: dict[str, list[Judgement]] = {}
    for j in judged:
        by_task.setdefault(j.variant.task, []).append(j)
    return [TaskStrength(name, by_task[name]) for name in sorted(by_task)]


def load_tasks(tasks_dir: Path, fixtures_dir: Path, names: set[str] | None = None) -> list[TaskSpec]:
    """Loadable tasks (a broken task file is its own collection error elsewhere)."""
    tasks = []
    for path in sorted(Path(tasks_dir).glob("*.yaml")):
        if names is not None and path.stem not in names:
            continue
        try:
            tasks.append(load_task(path, fixtures_dir))
        except SpecError:
            continue
    return tasks


def table_lines(strengths: list[TaskStrength], mutants: dict[str, str] | None = None,
                reviews: dict[str, str] | None = None) -> list[str]:
    """A plain table: per task, the caught and accepted counts (and, after a selftest, the
    mutation score and the review lines covered), then every misjudged variant. A figure
    that was not measured is `-`, never a pass."""
    mutants, reviews = mutants or {}, reviews or {}
    by_task = {s.task: s for s in strengths}
    names = sorted(set(by_task) | set(mutants) | set(reviews))
    width = max([len(n) for n in names] + [4])
    extra = bool(mutants or reviews)
    lines = [f"{'task':<{width}}  caught  accepted" + ("  review  mutants killed" if extra else "")]
    for name in names:
        s = by_task.get(name)
        caught = f"{s.caught:>2}/{s.caught_total:<3}" if s else f"{'-':>6}"
        accepted = f"{s.accepted:>2}/{s.accepted_total:<3}" if s else f"{'-':>6}"
        row = f"{name:<{width}}  {caught}  {accepted:<8}"
        if extra:
            row += f"  {reviews.get(name, '-'):<6}  {mutants.get(name, '-')}"
        flag = "" if not (s and s.misjudged) else "  <- check too weak or too strict"
        lines.append(row.rstrip() + flag)
    for s in strengths:
        for j in s.misjudged:
            v = j.variant
            if v.kind == "caught":
                lines.append(f"  {s.task}/{v.name}: passes the {v.axis} check ({v.mistake})")
            else:
                failed = "; ".join(f"{axis}: {verdict.reason}" for axis, verdict in j.verdicts.items() if not verdict.ok)
                lines.append(f"  {s.task}/{v.name}: a correct implementation is rejected ({failed})")
    return lines


class StrengthSection:
    """After a `-m ponybench_quality` session, a terminal section: per task, how many variants
    under tests/variants/ the checks catch and accept, how many review lines name a check, and
    the mutation score (from the selftest-review and selftest-mutants reports). A plugin on the
    controller (or the one process), which sees every worker's reports, registered only when
    the quality gates are asked for (`markers`: those of the selftest and the quality gates);
    silent when anything else ran, so a full test run does not judge every variant twice."""

    def __init__(self, settings, markers: tuple[str, ...]):
        self.settings = settings
        self.markers = markers
        self.tasks: set[str] = set()  # tasks whose references were proven
        self.other = False  # anything but a reference's selftest ran: not a selftest session
        self.mutants: dict[str, str] = {}  # task -> "killed/measured (ratio)", from selftest-mutants
        self.reviews: dict[str, str] = {}  # task -> "covered/lines", from selftest-review

    def pytest_runtest_logreport(self, report):
        if report.when != "call":
            return
        if not any(marker in report.keywords for marker in self.markers):
            self.other = True
        elif report.nodeid.split("::")[-1].startswith("selftest-"):
            task = Path(report.nodeid.split("::")[0]).stem
            self.tasks.add(task)
            properties = dict(report.user_properties)
            if "mutation_score" in properties:
                self.mutants[task] = str(properties["mutation_score"])
            if "review_lines" in properties:
                total = int(properties["review_lines"])
                self.reviews[task] = f"{total - int(properties.get('review_uncovered', 0))}/{total}"

    def pytest_terminal_summary(self, terminalreporter, exitstatus, config):
        variants_dir = Path(config.rootpath) / VARIANTS_DIR
        if not self.tasks or self.other:
            return
        tr = terminalreporter
        strengths: list[TaskStrength] = []
        if variants_dir.is_dir():
            tasks = load_tasks(self.settings.tasks_dir, self.settings.fixtures_dir, self.tasks)
            try:
                strengths = measure(tasks, variants_dir)
            except SpecError as exc:
                tr.write_sep("=", "check strength")
                tr.write_line(f"variants not loaded: {exc}", red=True)
        if not strengths and not self.mutants and not self.reviews:
            return
        tr.write_sep("=", "check strength (tests/variants, review lines, mutants)")
        for line in table_lines(strengths, self.mutants, self.reviews):
            tr.write_line(line, red=line.startswith("  ") or "<-" in line)
