"""ponybench-compare's judged gates: `--max-over-engineering-increase` and
`--max-incomplete-rate`, per arm x model over the new run's judged cells.

Neither gate trusts a judge that has not been calibrated: each is "not evaluated" (a failure
unless --allow-unevaluated) when the run has no judged cells, when its cells name more than
one judge, when the two runs were judged by different judges (the increase), or when the
judge has no calibration on record at or above the floor for that axis (calibration.py).
"""
from __future__ import annotations

from collections import defaultdict
from pathlib import Path
from typing import Sequence

from pytest_ponybench.judge import calibration, judge


def add_arguments(group) -> None:
    group.add_argument("--max-over-engineering-increase", type=float, default=None, metavar="POINTS",
                       help="fail when the mean judged over_engineering (0-3) of an arm rose by more than "
                            "POINTS over the tasks both runs judged; needs a calibrated judge")
    group.add_argument("--max-incomplete-rate", type=float, default=None, metavar="RATE",
                       help="fail when more than RATE (0.2 = 20%%) of an arm's judged cells in the new run are "
                            "incomplete (completeness <= 1); needs a calibrated judge")
    group.add_argument("--min-judged-grader-pass-rate", type=float, default=None, metavar="RATE",
                       help="fail when less than RATE (0.8 = 80%%) of an arm's judged claude plugin eval graders "
                            "(llm, baseline) passed in the new run; needs a calibrated judge")
    group.add_argument("--judge-calibration", type=Path, default=None, metavar="FILE",
                       help="the judge's calibration record (default: the proof cache's, by fingerprint)")


def _fingerprints(records: Sequence[dict]) -> set[str]:
    return {str(r["judge_fingerprint"]) for r in records if r.get("judge_fingerprint")}


def _scores(records, axis) -> dict[tuple, dict[str, list[int]]]:
    """(arm, model) -> task -> the judged scores on `axis`."""
    out: dict[tuple, dict[str, list[int]]] = defaultdict(lambda: defaultdict(list))
    for r in records:
        value = r.get(axis)
        if isinstance(value, int) and not isinstance(value, bool):
            out[(r.get("arm"), r.get("model"))][r.get("task")].append(value)
    return out


def evaluate(old: Sequence[dict], new: Sequence[dict], max_increase: float | None, max_incomplete: float | None,
             calibration_file: Path | None = None) -> tuple[list[str], list[str]]:
    """(failures, not evaluated), one sentence each, naming arm and model."""
    failures: list[str] = []
    unevaluated: list[str] = []
    if max_increase is None and max_incomplete is None:
        return failures, unevaluated
    wanted = [(axis, limit) for axis, limit in (("over_engineering", max_increase), ("completeness", max_incomplete))
              if limit is not None]
    judges = _fingerprints(new)
    if len(judges) != 1:
        why = "the new run has no judged cells (run it with --ponybench-judge)" if not judges else \
            f"the new run's cells name {len(judges)} judges ({', '.join(sorted(judges))})"
        return failures, [f"{axis} gate not evaluated: {why}" for axis, _ in wanted]
    (fp,) = judges
    record = calibration.load_calibration(fp, calibration_file)
    for axis, limit in wanted:
        problem = calibration.gate_problem(axis, record)
        if problem:
            unevaluated.append(f"{axis} gate not evaluated: judge {fp}: {problem}")
            continue
        if axis == "completeness":
            for (arm, model), tasks in sorted(_scores(new, axis).items()):
                scores = [v for values in tasks.values() for v in values]
                rate = sum(1 for v in scores if v <= judge.INCOMPLETE) / len(scores)
                if rate > limit + 1e-9:
                    failures.append(f"{arm} / {model}: {rate:.0%} of {len(scores)} judged cells are incomplete "
                                    f"(completeness <= {judge.INCOMPLETE}), more than the allowed {limit:.0%}")
            continue
        if _fingerprints(old) != {fp}:
            unevaluated.append(f"over_engineering gate not evaluated: the old run was judged by "
                               f"{', '.join(sorted(_fingerprints(old))) or 'no judge'}, the new by {fp}: "
                               f"rescore one with the other's judge")
            continue
        before = _scores(old, axis)
        for key, tasks in sorted(_scores(new, axis).items()):
            shared = [t for t in tasks if t in before.get(key, {})]
            if not shared:
                unevaluated.append(f"{key[0]} / {key[1]}: over_engineering gate not evaluated: no task judged in both runs")
                continue
            rise = sum(sum(tasks[t]) / len(tasks[t]) - sum(before[key][t]) / len(before[key][t])
                       for t in shared) / len(shared)
            if rise > limit + 1e-9:
                failures.append(f"{key[0]} / {key[1]}: mean judged over_engineering rose by {rise:+.2f} points over "
                                f"{len(shared)} tasks, more than the allowed {limit:g}")
    return failures, unevaluated




def evaluate_all(old: Sequence[dict], new: Sequence[dict], args) -> tuple[list[str], list[str], list[str]]:
    """Every judged gate ponybench-compare's `args` ask for, one at a time: (failures, not
    evaluated, passed), one sentence each; a gate that was evaluated and held says so in one
    line, so a green judged gate is seen to have been checked."""
    failed: list[str] = []
    unevaluated: list[str] = []
    passed: list[str] = []
    cal = args.judge_calibration
    gates = [("over_engineering", "--max-over-engineering-increase", args.max_over_engineering_increase,
              lambda limit: evaluate(old, new, limit, None, cal)),
             ("completeness", "--max-incomplete-rate", args.max_incomplete_rate,
              lambda limit: evaluate(old, new, None, limit, cal)),
             ("judged grader", "--min-judged-grader-pass-rate", args.min_judged_grader_pass_rate,
              lambda limit: evaluate_graders(new, limit, cal))]
    for name, flag, limit, run in gates:
        if limit is None:
            continue
        bad, unknown = run(limit)
        failed += bad
        unevaluated += unknown
        if not bad and not unknown:
            passed.append(f"{name} gate passed ({flag}={limit:g}): every arm within it, by a calibrated judge")
    return failed, unevaluated, passed


def grader_counts(records) -> dict[tuple, list[int]]:
    """(arm, model) -> [judged graders passed, failed] over the records' verdict lines."""
    out: dict[tuple, list[int]] = defaultdict(lambda: [0, 0])
    for r in records:
        text = str(r.get("judged_graders") or "")
        out[(r.get("arm"), r.get("model"))][0] += text.count("): pass ")
        out[(r.get("arm"), r.get("model"))][1] += text.count("): fail ")
    return out


def evaluate_graders(new: Sequence[dict], min_rate: float | None,
                     calibration_file: Path | None = None) -> tuple[list[str], list[str]]:
    """`--min-judged-grader-pass-rate`: (failures, not evaluated). Not evaluated without judged
    graders, with more than one judge, or without a calibration of that judge on the graders
    at or above the floor (a verdict not judged is left out, never a pass)."""
    if min_rate is None:
        return [], []
    judges = {str(r["graders_judge_fingerprint"]) for r in new
              if r.get("graders_judge_fingerprint") and r.get("judged_graders")}
    if len(judges) != 1:
        why = ("the new run has no judged graders (run a plugin's evals/ suite with --ponybench-judge)" if not judges
               else f"the new run's graders name {len(judges)} judges ({', '.join(sorted(judges))})")
        return [], [f"judged grader gate not evaluated: {why}"]
    (fp,) = judges
    problem = calibration.gate_problem(calibration.GRADERS_AXIS, calibration.load_calibration(fp, calibration_file))
    if problem:
        return [], [f"judged grader gate not evaluated: judge {fp}: {problem}"]
    failures = []
    for (arm, model), (passed, failed) in sorted(grader_counts(new).items(), key=str):
        if passed + failed == 0:
            continue
        rate = passed / (passed + failed)
        if rate < min_rate - 1e-9:
            failures.append(f"{arm} / {model}: {rate:.0%} of {passed + failed} judged graders passed, "
                            f"less than the required {min_rate:.0%}")
    return failures, []
