"""`ponybench-calibrate`: how far a judge agrees with labels, before it may gate.

A labelled set (by default the shipped one, `pytest_ponybench/judge/judge_labels.yaml`, over
the shipped tasks; it travels in the wheel) holds submissions written for the tasks and the
scores several labellers gave each on each axis; the label is their median. The judge scores
each; per axis this reports the exact agreement, agreement within one point, Cohen's kappa
over the four scores, and Cohen's kappa of the decision the gates use (over-built:
over_engineering >= 2; incomplete: completeness <= 1), beside the labellers' own agreement
(Cohen's kappa of every pair of them). The record is kept under the judge's fingerprint (the
proof cache's folder, `calibrations/<fingerprint>.json`, or `--out`), and ponybench-compare's
judged gates read it: a judged axis gates only when its decision kappa is at least FLOOR over at least
MIN_LABELS labels (docs/judge.md says why these numbers).
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

from pytest_ponybench.cell import agent
from pytest_ponybench.judge import judge
from pytest_ponybench.judge.calibration import FLOOR, GRADERS_AXIS, MIN_LABELS, SHIPPED_LABELS, calibration_path

AT_ONCE = 4
ENTRY_FIELDS = ("id", "task", "files", "labels")


@dataclass(frozen=True)
class Item:
    id: str
    task: str
    submission: judge.Submission
    ticket: str
    labels: dict  # axis -> the labellers' scores 0..3, in the order of the set's `labellers`

    def label(self, axis: str) -> int:
        """The label the judge is measured against: the lower median of the labellers' scores
        (with an even count, the lower of the middle two, as the judge's own votes are settled)."""
        return statistics.median_low(self.labels[axis])


@dataclass(frozen=True)
class LabelledSet:
    labellers: tuple[str, ...]
    items: list[Item]


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


def _scores(value, count: int) -> bool:
    return (isinstance(value, list) and len(value) == count
            and all(isinstance(v, int) and not isinstance(v, bool) and 0 <= v <= 3 for v in value))


def load_labels(path: Path, tasks_dir: Path, fixtures_dir: Path) -> LabelledSet:
    """The labelled set: `labellers: [names]` and `submissions:`, a list of {id, task, files:
    {path: content}, labels: {axis: [one score 0-3 per labeller, in that order]}} (an axis may
    be left out: it is not labelled for that submission). A fixture task's files are the ones
    the submission changed or added, in full; the judge is shown their diff. Errors name the
    file, the entry and the field."""
    import yaml

    from pytest_ponybench.specs.spec import SpecError, load_task

    try:
        raw = yaml.safe_load(Path(path).read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError) as exc:
        raise ValueError(f"{path}: cannot be read as YAML: {exc}") from None
    if isinstance(raw, dict) and "submissions" not in raw and isinstance(raw.get("labels"), list):
        raise ValueError(f"{path}: a `labels` list of `variant` entries is the old form, and no longer read: "
                         "a variant's label follows from how it was made, so it proves a judge (judge pairs) "
                         "but cannot calibrate one; give `labellers` and `submissions` with each "
                         "submission's files (docs/judge.md)")
    if not isinstance(raw, dict) or not isinstance(raw.get("submissions"), list):
        raise ValueError(f"{path}: must be a mapping with `labellers` and a `submissions` list")
    labellers = raw.get("labellers")
    if (not isinstance(labellers, list) or not labellers or len(set(map(str, labellers))) != len(labellers)
            or not all(isinstance(name, str) and name for name in labellers)):
        raise ValueError(f"{path}: field 'labellers' must be a list of distinct names, one per score")
    tasks, items, seen = {}, [], set()
    for index, entry in enumerate(raw["submissions"]):
        named = isinstance(entry, dict) and isinstance(entry.get("id"), str) and entry["id"]
        where = f"{path}: submissions[{index}]" + (f" ({entry['id']})" if named else "")
        if not isinstance(entry, dict):
            raise ValueError(f"{where}: must be a mapping of {', '.join(ENTRY_FIELDS)}")
        unknown = set(entry) - set(ENTRY_FIELDS)
        if unknown:
            raise ValueError(f"{where}: unknown field '{sorted(unknown)[0]}'")
        for field in ENTRY_FIELDS:
            if field not in entry:
                raise ValueError(f"{where}: needs the field '{field}'")
        if not isinstance(entry["id"], str) or not entry["id"] or entry["id"] in seen:
            raise ValueError(f"{where}: field 'id' must be a name no other submission has")
        seen.add(entry["id"])
        files = entry["files"]
        if not isinstance(files, dict) or not files or not all(
                isinstance(rel, str) and isinstance(text, str) for rel, text in files.items()):
            raise ValueError(f"{where}: field 'files' must be a mapping {{path: content}} of at least one file")
        labels = entry["labels"]
        if not isinstance(labels, dict) or not labels:
            raise ValueError(f"{where}: field 'labels' must map an axis ({', '.join(judge.AXES)}) to scores")
        for axis, value in labels.items():
            if axis not in judge.AXES:
                raise ValueError(f"{where}: field 'labels.{axis}' is not an axis ({', '.join(judge.AXES)})")
            if not _scores(value, len(labellers)):
                raise ValueError(f"{where}: field 'labels.{axis}' must be a list of {len(labellers)} whole "
                                 f"numbers 0 to 3, one per labeller ({', '.join(labellers)})")
        name = entry["task"]
        if name not in tasks:
            try:
                tasks[name] = load_task(Path(tasks_dir) / f"{name}.yaml", Path(fixtures_dir))
            except (SpecError, TypeError) as exc:
                raise ValueError(f"{where}: field 'task': '{name}': {exc}") from None
        task = tasks[name]
        sub = judge.task_submission(task, files)
        if sub.empty:
            raise ValueError(f"{where}: field 'files': nothing the judge is shown (no changed source file)")
        items.append(Item(entry["id"], name, sub, task.prompt, {a: tuple(v) for a, v in labels.items()}))
    return LabelledSet(tuple(labellers), items)


def labeller_agreement(labelled: LabelledSet) -> dict:
    """Per axis, how far the labellers agree with each other: Cohen's kappa of every pair of
    labellers, on the scores and on the gate's decision, and their means (Light's kappa)."""
    out = {}
    names = labelled.labellers
    for axis in judge.AXES:
        scored = [item.labels[axis] for item in labelled.items if axis in item.labels]
        if not scored or len(names) < 2:
            continue
        pairs = []
        for i in range(len(names)):
            for j in range(i + 1, len(names)):
                both = [(s[i], s[j]) for s in scored]
                pairs.append({"labellers": [names[i], names[j]],
                              "agreement": round(sum(a == b for a, b in both) / len(both), 3),
                              "kappa": _rounded(cohen_kappa(both)),
                              "decision_kappa": _rounded(cohen_kappa([(decision(axis, a), decision(axis, b))
                                                                      for a, b in both]))})
        out[axis] = {"labellers": list(names), "labels": len(scored), "pairs": pairs,
                     "mean_kappa": _mean(p["kappa"] for p in pairs),
                     "mean_decision_kappa": _mean(p["decision_kappa"] for p in pairs)}
    return out


def _rounded(value: float | None) -> float | None:
    return None if value is None else round(value, 3)


def _mean(values) -> float | None:
    known = [v for v in values if v is not None]
    return round(sum(known) / len(known), 3) if known else None


def calibrate(ask, labelled: LabelledSet, votes: int = 1) -> dict:
    """Judge every labelled item on each labelled axis; the figures per axis, with the
    labellers' agreement among themselves beside them."""
    items = labelled.items
    jobs = [(item, axis) for item in items for axis in judge.AXES if axis in item.labels]

    def one(job):
        item, axis = job
        return judge.judge_axis(ask, axis, item.ticket, item.submission, votes)

    with ThreadPoolExecutor(max_workers=AT_ONCE) as pool:
        judged = list(pool.map(one, jobs))
    out = {}
    for axis in judge.AXES:
        pairs = [(item.label(axis), j.score) for (item, a), j in zip(jobs, judged) if a == axis]
        scored = [(a, b) for a, b in pairs if b is not None]
        kappa = cohen_kappa(scored)
        gate = cohen_kappa([(decision(axis, a), decision(axis, b)) for a, b in scored])
        out[axis] = {
            "labels": len(pairs), "judged": len(scored),
            "agreement": round(sum(a == b for a, b in scored) / len(scored), 3) if scored else None,
            "within_one": round(sum(abs(a - b) <= 1 for a, b in scored) / len(scored), 3) if scored else None,
            "kappa": _rounded(kappa), "decision_kappa": _rounded(gate),
            "cost_usd": round(sum(j.cost_usd for (item, a), j in zip(jobs, judged) if a == axis), 6),
        }
        # Not judged counts against the judge: a label it could not score is a disagreement.
        out[axis]["passes_floor"] = bool(len(pairs) >= MIN_LABELS and scored and len(scored) == len(pairs)
                                         and gate is not None and gate >= FLOOR)
    for axis, among in labeller_agreement(labelled).items():
        out[axis]["labellers"] = among
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
        if f.get("labellers"):
            among = f["labellers"]
            each = lambda key: ", ".join(f"{'-'.join(p['labellers'])} {p[key]}" for p in among["pairs"])  # noqa: E731
            out.append(f"    the labellers among themselves ({len(among['labellers'])}, the label is their median): "
                       f"Cohen's kappa {each('kappa')} (mean {among['mean_kappa']}); of the gate's decision "
                       f"{each('decision_kappa')} (mean {among['mean_decision_kappa']})")
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
        labelled = None if args.graders_labels else load_labels(*labelled_set(args.labels, args.tasks, args.fixtures))
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
        result = (calibrate_graders(ask, grader_items, args.votes) if labelled is None
                  else calibrate(ask, labelled, args.votes))
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
