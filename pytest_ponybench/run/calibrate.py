"""`ponybench-calibrate`: how far a judge agrees with labels, before it may gate.

A labelled set (by default the shipped one, `pytest_ponybench/judge/judge_labels.yaml`, over
the shipped tasks; it travels in the wheel) names submissions (a task's good reference or one
of its judge-pair variants) and a label per axis. The judge scores each; per axis this reports
the exact agreement, agreement within one point, Cohen's kappa over the four scores, and
Cohen's kappa of the decision the gates use (over-built: over_engineering >= 2; incomplete:
completeness <= 1). The record is kept under the judge's fingerprint (the proof cache's
folder, `calibrations/<fingerprint>.json`, or `--out`), and ponybench-compare's judged gates
read it: a judged axis gates only when its decision kappa is at least FLOOR over at least
MIN_LABELS labels (docs/judge.md says why these numbers).
"""
from __future__ import annotations

import argparse
import json
import sys
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

from pytest_ponybench.cell import agent
from pytest_ponybench.judge import judge
from pytest_ponybench.judge.calibration import FLOOR, GRADERS_AXIS, MIN_LABELS, SHIPPED_LABELS, calibration_path

VARIANTS = ("good", "over_built", "stub")
AT_ONCE = 4


@dataclass(frozen=True)
class Item:
    task: str
    variant: str
    submission: judge.Submission
    ticket: str
    labels: dict  # axis -> label 0..3


def cohen_kappa(pairs: Sequence[tuple[int, int]]) -> float | None:
    """Cohen's kappa of (label, judged) pairs: (observed - chance agreement) / (1 - chance).
    None without pairs; 1.0 when both raters agree on one category throughout."""
    if not pairs:
        return None
    n = len(pairs)
    observed = sum(1 for a, b in pairs if a == b) / n
    first, second = Counter(a for a, _ in pairs), Counter(b for _, b in pairs)
    chance = sum(first[c] * second[c] for c in set(first) | set(second)) / (n * n)
    if chance >= 1.0:
        return 1.0 if observed == 1.0 else 0.0
    return (observed - chance) / (1 - chance)


def decision(axis: str, score: int) -> bool:
    """The gate's yes/no: over-built, or incomplete."""
    return score >= judge.OVER_BUILT if axis == "over_engineering" else score <= judge.INCOMPLETE


def variant_files(task, variant: str) -> dict[str, str]:
    good = dict(task.refs.good)
    return {"good": good, "over_built": judge.over_built(good), "stub": judge.stub(good)}[variant]


def load_labels(path: Path, tasks_dir: Path, fixtures_dir: Path) -> list[Item]:
    """The labelled set: a YAML list of {task, variant, over_engineering, completeness}
    (a label may be left out: that axis is not labelled for the item). Errors name the file,
    the entry and the field."""
    import yaml

    from pytest_ponybench.specs.spec import SpecError, load_task

    try:
        raw = yaml.safe_load(Path(path).read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError) as exc:
        raise ValueError(f"{path}: cannot be read as YAML: {exc}") from None
    if not isinstance(raw, dict) or not isinstance(raw.get("labels"), list):
        raise ValueError(f"{path}: must be a mapping with a `labels` list")
    tasks, items = {}, []
    for index, entry in enumerate(raw["labels"]):
        where = f"{path}: labels[{index}]"
        if not isinstance(entry, dict) or not isinstance(entry.get("task"), str):
            raise ValueError(f"{where}: needs a `task` name")
        if entry.get("variant") not in VARIANTS:
            raise ValueError(f"{where}: field 'variant' must be one of {', '.join(VARIANTS)}")
        unknown = set(entry) - {"task", "variant", *judge.AXES}
        if unknown:
            raise ValueError(f"{where}: unknown field '{sorted(unknown)[0]}'")
        labels = {}
        for axis in judge.AXES:
            if axis in entry:
                value = entry[axis]
                if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= 3:
                    raise ValueError(f"{where}: field '{axis}' must be a whole number 0 to 3")
                labels[axis] = value
        name = entry["task"]
        if name not in tasks:
            try:
                tasks[name] = load_task(Path(tasks_dir) / f"{name}.yaml", Path(fixtures_dir))
            except SpecError as exc:
                raise ValueError(f"{where}: task '{name}': {exc}") from None
        task = tasks[name]
        files = variant_files(task, entry["variant"])
        if task.kind == "fixture":
            from pytest_ponybench.judge.judge import _before

            sub = judge.diff_submission(_before(task), files)
        else:
            sub = judge.files_submission(files)
        items.append(Item(name, entry["variant"], sub, task.prompt, labels))
    return items


def calibrate(ask, items: Sequence[Item], votes: int = 1) -> dict:
    """Judge every labelled item on each labelled axis; the figures per axis."""
    jobs = [(item, axis) for item in items for axis in judge.AXES if axis in item.labels]

    def one(job):
        item, axis = job
        return judge.judge_axis(ask, axis, item.ticket, item.submission, votes)

    with ThreadPoolExecutor(max_workers=AT_ONCE) as pool:
        judged = list(pool.map(one, jobs))
    out = {}
    for axis in judge.AXES:
        pairs = [(item.labels[axis], j.score) for (item, a), j in zip(jobs, judged) if a == axis]
        scored = [(a, b) for a, b in pairs if b is not None]
        kappa = cohen_kappa(scored)
        gate = cohen_kappa([(decision(axis, a), decision(axis, b)) for a, b in scored])
        out[axis] = {
            "labels": len(pairs), "judged": len(scored),
            "agreement": round(sum(a == b for a, b in scored) / len(scored), 3) if scored else None,
            "within_one": round(sum(abs(a - b) <= 1 for a, b in scored) / len(scored), 3) if scored else None,
            "kappa": None if kappa is None else round(kappa, 3),
            "decision_kappa": None if gate is None else round(gate, 3),
            "cost_usd": round(sum(j.cost_usd for (item, a), j in zip(jobs, judged) if a == axis), 6),
        }
        # Not judged counts against the judge: a label it could not score is a disagreement.
        out[axis]["passes_floor"] = bool(len(pairs) >= MIN_LABELS and scored and len(scored) == len(pairs)
                                         and gate is not None and gate >= FLOOR)
    return out


# --------------------------------------------------------------------------- the judged graders



@dataclass(frozen=True)
class GraderItem:
    case: str
    grader: object  # judged_graders.JudgedGrader
    ticket: str
    work: object  # judged_graders.Work
    label: bool  # True: the grader should pass this work


def load_grader_labels(path: Path) -> list[GraderItem]:
    """The labelled set of the judged graders: a YAML `labels` list of {case: a case folder
    (relative to the file), grader: its name, work: {answer, files}, label: pass | fail}."""
    import yaml

    from pytest_ponybench.judge import judged_graders
    from pytest_ponybench.run import plugin_evals
    from pytest_ponybench.specs.spec import SpecError

    try:
        raw = yaml.safe_load(Path(path).read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError) as exc:
        raise ValueError(f"{path}: cannot be read as YAML: {exc}") from None
    if not isinstance(raw, dict) or not isinstance(raw.get("labels"), list):
        raise ValueError(f"{path}: must be a mapping with a `labels` list")
    cases, items = {}, []
    for index, entry in enumerate(raw["labels"]):
        where = f"{path}: labels[{index}]"
        if not isinstance(entry, dict) or set(entry) - {"case", "grader", "work", "label"}:
            raise ValueError(f"{where}: must have exactly case, grader, work and label")
        if entry.get("label") not in ("pass", "fail"):
            raise ValueError(f"{where}: field 'label' must be pass or fail")
        work = judged_graders.work_of(entry.get("work"))
        if work is None:
            raise ValueError(f"{where}: field 'work' must be {{answer: text, files: {{path: content}}}}")
        folder = Path(path).parent / str(entry.get("case"))
        if folder not in cases:
            try:
                cases[folder] = plugin_evals.load_case(folder, "calibrate")
            except (SpecError, OSError) as exc:
                raise ValueError(f"{where}: field 'case': {exc}") from None
        case = cases[folder]
        grader = next((g for g in case.judged if g.name == entry.get("grader")), None)
        if grader is None or (grader.problem and "pass example" not in grader.problem):
            raise ValueError(f"{where}: field 'grader': the case {folder} has no runnable judged grader "
                             f"{entry.get('grader')!r}" + (f" ({grader.problem})" if grader is not None else ""))
        items.append(GraderItem(case.task.name, grader, case.task.prompt, work, entry["label"] == "pass"))
    return items


def calibrate_graders(ask, items: Sequence[GraderItem], votes: int = 1) -> dict:
    """Judge every labelled work with its grader; agreement and Cohen's kappa of pass/fail."""
    from pytest_ponybench.judge import judged_graders

    def one(item):
        return judged_graders.judge_grader(ask, item.grader, item.ticket, item.work, votes)

    with ThreadPoolExecutor(max_workers=AT_ONCE) as pool:
        judged = list(pool.map(one, items))
    pairs = [(item.label, v.passed) for item, v in zip(items, judged)]
    scored = [(a, b) for a, b in pairs if b is not None]
    kappa = cohen_kappa(scored)
    figures = {"labels": len(pairs), "judged": len(scored),
               "agreement": round(sum(a == b for a, b in scored) / len(scored), 3) if scored else None,
               "within_one": None, "kappa": None if kappa is None else round(kappa, 3),
               "decision_kappa": None if kappa is None else round(kappa, 3),
               "cost_usd": round(sum(v.cost_usd for v in judged), 6)}
    figures["passes_floor"] = bool(len(pairs) >= MIN_LABELS and scored and len(scored) == len(pairs)
                                   and kappa is not None and kappa >= FLOOR)
    return {GRADERS_AXIS: figures}


def lines(result: dict, identity: str) -> list[str]:
    out = [f"calibration of {identity}"]
    for axis, f in result.items():
        verdict = "may gate" if f["passes_floor"] else "may NOT gate"
        out.append(f"  {axis}: {f['judged']} of {f['labels']} labels judged; agreement {f['agreement']}, "
                   f"within one {f['within_one']}; Cohen's kappa {f['kappa']}, of the gate's decision "
                   f"{f['decision_kappa']} (floor {FLOOR} over >= {MIN_LABELS} labels): {verdict}")
    return out


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="ponybench-calibrate",
                                description="Judge a labelled set; report agreement and Cohen's kappa per axis; "
                                            "record it for ponybench-compare's judged gates.")
    p.add_argument("--labels", type=Path, default=None,
                   help="the labelled set (default: the shipped one, over the shipped tasks)")
    p.add_argument("--tasks", type=Path, default=None,
                   help="the folder of the labelled tasks (default: the shipped tasks with the shipped labels, "
                        "else ./tasks)")
    p.add_argument("--fixtures", type=Path, default=None, help="their fixtures folder (default: as --tasks)")
    p.add_argument("--judge-model", default=judge.DEFAULT_JUDGE_MODEL, help="an alias or a full claude-... id")
    p.add_argument("--votes", type=int, default=1, help="answers per item and axis (odd)")
    p.add_argument("--claude", default=None, help="the claude CLI (default: PATH, then node_modules/.bin/claude)")
    p.add_argument("--rehearse", default=None, metavar="SCRIPT",
                   help="the scripted judge instead of a model: agree, disagree, malformed, malformed:N or a fault")
    p.add_argument("--graders-labels", type=Path, default=None, metavar="FILE",
                   help="calibrate the judged graders of claude plugin eval suites on this labelled set "
                        "instead of the judged axes (docs/judge.md)")
    p.add_argument("--out", type=Path, default=None, help="write the record here (default: the proof cache)")
    return p


def labelled_set(labels: Path | None, tasks: Path | None, fixtures: Path | None) -> tuple[Path, Path, Path]:
    """The labels file and the tasks and fixtures folders it names. The shipped labels label
    the shipped tasks, so with them the folders default to the shipped library's (the wheel's
    package data, or the checkout), whatever the current directory holds; a project's own
    labels default to its ./tasks and ./fixtures."""
    from pytest_ponybench.specs.library import shipped_root

    root = shipped_root() if labels is None else None
    base = root if root is not None else Path(".")
    return (labels or SHIPPED_LABELS, tasks or base / "tasks", fixtures or base / "fixtures")


def main(argv: Sequence[str] | None = None) -> int:
    from pytest_ponybench.run.judging import RehearsalJudge, path_name
    from pytest_ponybench.specs.argtypes import rehearsal_judge
    from pytest_ponybench.specs.spec import SpecError, model_ids, resolve_model

    args = parser().parse_args(argv)
    if args.votes < 1 or args.votes % 2 == 0:
        print("ponybench-calibrate: error: --votes must be odd", file=sys.stderr)
        return 2
    try:
        model_id = resolve_model(args.judge_model, model_ids([]))
        script = rehearsal_judge(args.rehearse) if args.rehearse else ("agree", 0, None)
        # One kind of labels per run: the graders' (--graders-labels), else the axes'.
        grader_items = load_grader_labels(args.graders_labels) if args.graders_labels else []
        items = [] if args.graders_labels else load_labels(*labelled_set(args.labels, args.tasks, args.fixtures))
        claude = agent.find_claude(args.claude, Path.cwd())
        version = agent.claude_version(claude)
        if not args.rehearse and (problem := agent.real_run_problem()):
            raise ValueError(problem)
    except (SpecError, ValueError, argparse.ArgumentTypeError, agent.CliMissing) as exc:
        print(f"ponybench-calibrate: error: {exc}", file=sys.stderr)
        return 2
    server = RehearsalJudge(script) if args.rehearse else None
    try:
        env = server.env if server else {}
        ask = lambda text: judge.ask_cli(claude, model_id, text, env)  # noqa: E731
        result = (calibrate_graders(ask, grader_items, args.votes) if args.graders_labels
                  else calibrate(ask, items, args.votes))
    finally:
        if server:
            server.stop()
    path = path_name(script, bool(args.rehearse))
    if args.graders_labels:  # the graders' judge has its own fingerprint (judged_graders.py)
        from pytest_ponybench.judge import judged_graders

        fp, rubric = judged_graders.fingerprint(model_id, version, path), judged_graders.frame_hash()
    else:
        fp, rubric = judge.fingerprint(model_id, version, path), judge.rubric_hash()
    identity = f"judge {model_id}, rubric {rubric} (fingerprint {fp}, {path})"
    record = {"fingerprint": fp, "judge_model": model_id, "rubric": rubric, "claude_version": version,
              "labels_file": str(args.graders_labels or args.labels or SHIPPED_LABELS), "floor": FLOOR, "min_labels": MIN_LABELS,
              "axes": result}
    target = args.out or calibration_path(fp)
    if target is not None:
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(json.dumps(record, indent=2), encoding="utf-8")
    for line in lines(result, identity):
        print(line)
    print(f"recorded in {target}" if target else "not recorded: the proof cache is off (PONYBENCH_CACHE_DIR=off); give --out")
    return 0


if __name__ == "__main__":
    sys.exit(main())
