"""The judged columns of every output: per task x model x arm against the reference arm, and
a pooled line over tasks (judge.py scores, judging.py keeps them on each record).

For each arm: the cells judged, the mean judged score with a bootstrap interval, the mean's
difference from the reference arm's with a bootstrap interval, the share of cells judged
over-built (over_engineering >= 2) and incomplete (completeness <= 1), and vote disagreement
(the share of judged cells whose votes were not all the same). A cell not judged (no code,
malformed answers, the judge's API failing, an unproven judge) is left out and counted apart,
never scored 0. Every table names the judge and the rubric that produced it.
"""
from __future__ import annotations

from collections import defaultdict
from typing import Sequence

from pytest_ponybench.judge import judge
from pytest_ponybench.reports.tables import Table
from pytest_ponybench.store.rundir import read_jsonl, valid_cost

N_BOOT = 2000
SEED = 22
CONFIDENCE = 0.95


def judged_records(records: Sequence[dict]) -> list[dict]:
    return [r for r in records if "judge_status" in r]


def identity(records: Sequence[dict]) -> str:
    """Which judge and rubric produced the judged columns, in one line; two of them say so
    (a run never mixes judges: this line is how anyone would see that it did)."""
    judges = sorted({(str(r.get("judge_model") or "?"), str(r.get("judge_rubric") or "?"),
                      str(r.get("judge_fingerprint") or "?")) for r in judged_records(records)
                     if r.get("judge_fingerprint")})
    if not judges:
        return "judge: none"
    text = "; ".join(f"judge {m}, rubric {h} (fingerprint {f})" for m, h, f in judges)
    return text if len(judges) == 1 else f"MIXED JUDGES: {text}"


def _scores(records: Sequence[dict], axis: str) -> list[int]:
    return [r[axis] for r in records if isinstance(r.get(axis), int) and not isinstance(r.get(axis), bool)]


def _disagreed(records: Sequence[dict]) -> tuple[int, int]:
    """(cells whose votes on some axis differ, cells with more than one vote on an axis)."""
    split = voted = 0
    for r in records:
        votes = [str(r.get(f"{axis}_votes") or "") for axis in judge.AXES]
        many = [v.split(",") for v in votes if "," in v]
        if many:
            voted += 1
            split += any(len(set(v)) > 1 for v in many)
    return split, voted


def bootstrap_mean(values: Sequence[float], key: tuple[str, ...]) -> tuple[float, float]:
    from pytest_ponybench.reports.intervals import percentile_interval, rng_for
    import numpy as np

    data = np.asarray(values, dtype=float)
    picks = rng_for(SEED, *key).integers(0, len(data), size=(N_BOOT, len(data)))
    return percentile_interval(data[picks].mean(axis=1), CONFIDENCE)


def bootstrap_difference(values: Sequence[float], reference: Sequence[float], key: tuple[str, ...]) -> tuple[float, float]:
    from pytest_ponybench.reports.intervals import percentile_interval, rng_for
    import numpy as np

    a, b = np.asarray(values, dtype=float), np.asarray(reference, dtype=float)
    rng = rng_for(SEED, *key)
    means = (a[rng.integers(0, len(a), size=(N_BOOT, len(a)))].mean(axis=1)
             - b[rng.integers(0, len(b), size=(N_BOOT, len(b)))].mean(axis=1))
    return percentile_interval(means, CONFIDENCE)


def _figure(values, reference, key) -> dict:
    """mean, its interval, and the difference from the reference's mean with its interval."""
    if not values:
        return {"mean": None, "ci": None, "diff": None, "diff_ci": None}
    mean = sum(values) / len(values)
    out = {"mean": round(mean, 3), "ci": [round(x, 3) for x in bootstrap_mean(values, key)],
           "diff": None, "diff_ci": None}
    if reference:
        out["diff"] = round(mean - sum(reference) / len(reference), 3)
        out["diff_ci"] = [round(x, 3) for x in bootstrap_difference(values, reference, key + ("diff",))]
    return out


def rows(records: Sequence[dict], reference: str) -> list[dict]:
    """One JSON-safe row per task x model x arm that has judged fields, then one pooled row per
    model x arm (`task` "(pooled)": every task's judged cells together; its difference is the
    mean over tasks of the per-task differences, with a bootstrap over cells within each task)."""
    groups: dict[tuple, list[dict]] = defaultdict(list)
    for r in judged_records(records):
        groups[(r["task"], r["model"], r["arm"])].append(r)
    out = []
    for (task, model, arm), cells in sorted(groups.items()):
        ref = groups.get((task, model, reference), [])
        row = {"task": task, "model": model, "arm": arm, "cells": len(cells),
               "judged": sum(1 for c in cells if c.get("judge_status") == judge.JUDGE_STATUS_OK)}
        for axis in judge.AXES:
            values = _scores(cells, axis)
            row[axis] = _figure(values, _scores(ref, axis) if arm != reference else [], (task, model, arm, axis))
            row[axis]["n"] = len(values)
        oe, co = _scores(cells, "over_engineering"), _scores(cells, "completeness")
        row["over_built_share"] = round(sum(1 for v in oe if v >= judge.OVER_BUILT) / len(oe), 3) if oe else None
        row["incomplete_share"] = round(sum(1 for v in co if v <= judge.INCOMPLETE) / len(co), 3) if co else None
        split, voted = _disagreed(cells)
        row["vote_disagreement"] = round(split / voted, 3) if voted else None
        row["not_judged"] = _reasons(cells)
        out.append(row)
    out += pooled(groups, reference)
    return out


def _reasons(cells) -> dict[str, int]:
    counted: dict[str, int] = defaultdict(int)
    for c in cells:
        status = str(c.get("judge_status") or "")
        if status != judge.JUDGE_STATUS_OK:
            counted[status.split(":")[0] if status.startswith(("infra_error", "judge unproven")) else status] += 1
    return dict(counted)


def pooled(groups: dict[tuple, list[dict]], reference: str) -> list[dict]:
    by_arm: dict[tuple, dict[str, list[dict]]] = defaultdict(dict)
    for (task, model, arm), cells in groups.items():
        by_arm[(model, arm)][task] = cells
    out = []
    for (model, arm), tasks in sorted(by_arm.items()):
        row = {"task": "(pooled)", "model": model, "arm": arm, "tasks": len(tasks),
               "cells": sum(len(c) for c in tasks.values())}
        for axis in judge.AXES:
            values = [v for cells in tasks.values() for v in _scores(cells, axis)]
            fig = _figure(values, [], ("pooled", model, arm, axis))
            fig["n"] = len(values)
            if arm != reference:
                fig["diff"], fig["diff_ci"] = _pooled_diff(tasks, groups, model, reference, axis, arm)
            out_axis = fig
            row[axis] = out_axis
        oe = [v for cells in tasks.values() for v in _scores(cells, "over_engineering")]
        co = [v for cells in tasks.values() for v in _scores(cells, "completeness")]
        row["over_built_share"] = round(sum(1 for v in oe if v >= judge.OVER_BUILT) / len(oe), 3) if oe else None
        row["incomplete_share"] = round(sum(1 for v in co if v <= judge.INCOMPLETE) / len(co), 3) if co else None
        out.append(row)
    return out


def _pooled_diff(tasks, groups, model, reference, axis, arm):
    import numpy as np
    from pytest_ponybench.reports.intervals import percentile_interval, rng_for

    pairs = [(_scores(cells, axis), _scores(groups.get((task, model, reference), []), axis))
             for task, cells in sorted(tasks.items())]
    pairs = [(np.asarray(a, float), np.asarray(b, float)) for a, b in pairs if a and b]
    if not pairs:
        return None, None
    point = float(np.mean([a.mean() - b.mean() for a, b in pairs]))
    rng = rng_for(SEED, "pooled", model, arm, axis)
    boots = np.zeros(N_BOOT)
    for a, b in pairs:
        boots += (a[rng.integers(0, len(a), size=(N_BOOT, len(a)))].mean(axis=1)
                  - b[rng.integers(0, len(b), size=(N_BOOT, len(b)))].mean(axis=1))
    low, high = percentile_interval(boots / len(pairs), CONFIDENCE)
    return round(point, 3), [round(low, 3), round(high, 3)]


def _fmt(fig: dict) -> str:
    if fig["mean"] is None:
        return "-"
    return f"{fig['mean']:.2f} [{fig['ci'][0]:.2f}, {fig['ci'][1]:.2f}]"


def _fmt_diff(fig: dict) -> str:
    if fig.get("diff") is None:
        return "-"
    return f"{fig['diff']:+.2f} [{fig['diff_ci'][0]:+.2f}, {fig['diff_ci'][1]:+.2f}]"


def _share(value) -> str:
    return "-" if value is None else f"{100 * value:.0f}%"


def table(records: Sequence[dict], reference: str) -> Table | None:
    """The judged columns as one table (None when the run was not judged)."""
    found = rows(records, reference)
    if not found:
        return None
    headers = ["task", "model", "arm", "judged", "over-eng. mean [95% CI]", "vs ref", "over-built >=2",
               "completeness mean [95% CI]", "vs ref", "incomplete <=1", "votes split"]
    body = []
    for row in found:
        arm = f"{row['arm']} (reference)" if row["arm"] == reference else row["arm"]
        judged = (f"{row['over_engineering']['n']}/{row['cells']}" if row["task"] != "(pooled)"
                  else f"{row['over_engineering']['n']}/{row['cells']} over {row['tasks']} tasks")
        split = row.get("vote_disagreement")
        body.append([row["task"], row["model"], arm, judged, _fmt(row["over_engineering"]),
                     _fmt_diff(row["over_engineering"]), _share(row["over_built_share"]),
                     _fmt(row["completeness"]), _fmt_diff(row["completeness"]), _share(row["incomplete_share"]),
                     _share(split)])
    notes = [identity(records),
             "over_engineering 0 (nothing beyond the ticket) to 3 (layers it never asked for); completeness 0 "
             "(nothing) to 3 (everything the ticket asks); '-': not judged on that axis. vs ref: the mean's "
             "difference from the reference arm's, with a bootstrap interval (the pooled line averages the "
             "per-task differences). Cells not judged are left out, never scored 0.",
             *_not_judged_notes(records)]
    return Table("Judged axes", headers, body, notes, level=2, numeric=set(range(3, 11)))


def _not_judged_notes(records) -> list[str]:
    counted: dict[str, int] = defaultdict(int)
    for r in judged_records(records):
        if r.get("judge_status") != judge.JUDGE_STATUS_OK:
            counted[str(r.get("judge_status"))] += 1
    return [f"not judged in {n} cell(s): {why}" for why, n in sorted(counted.items(), key=lambda kv: -kv[1])[:5]]


def judge_spent(run_dir) -> float:
    """What the run's judge requests cost: ledger lines named `.../judge`."""
    return sum(valid_cost(e.get("cost_usd")) or 0.0 for e in read_jsonl(run_dir.spend_path)
               if str(e.get("cell", "")).endswith(judge.SPEND_SUFFIX))


def summary(records: Sequence[dict], reference: str, run_dir) -> dict | None:
    """summary.json's `judged`: the judge, its rubric, the rows, and what judging cost apart
    from the agents' spend."""
    if not judged_records(records):
        return None
    spent = judge_spent(run_dir)
    return {"judge": identity(records), "rubric": judge.rubric_hash(), "rows": rows(records, reference),
            "judge_spent_usd": round(spent, 6), "agent_spent_usd": round(max(run_dir.spent() - spent, 0.0), 6),
            "over_built_at": judge.OVER_BUILT, "incomplete_at": judge.INCOMPLETE}
