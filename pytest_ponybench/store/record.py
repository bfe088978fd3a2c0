"""The cell record, and which cells count: one definition every output reads.

A record is one flat dict of JSON-safe values (str, int, float, bool or None): it travels
from an xdist worker to the controller as the item's `user_properties`, lands in `--junitxml`
as `<property>` elements and is one line of `results.jsonl`. Its fields are `FIELDS` below
(docs/architecture.md explains each).

Statuses fall in five sets, and every output (the terminal table, summary.json, summary.md,
report.html, ponybench-compare) counts cells through the helpers here, so one run never gives
two answers:

- `MEASURED`: the arm was applied and the agent ran; whatever happened is the agent's doing
  under that arm (a timeout or a CLI error counts as a failed run). Counted in every rate.
- `NEVER_RAN`: the arm was never (provably) applied or the cell was cut short by the harness
  (its plugin not found, another arm's plugin loaded, the arm's text never reached the model,
  an interrupt or a crashed worker). Such a cell says nothing about the arm: left out of every
  rate and counted apart.
- `INFRA`: the session failed for reasons outside the agent (the model API). Left out of
  every rate and counted apart.
- `CUT`: the run's budget (`--ponybench-max-cost`) cut the cell short: the harness passed the
  CLI what was left of the run's budget as `--max-budget-usd`, below the per-cell cap, and the
  CLI stopped there (`error_max_budget_usd`). An accident of the order cells ran in, not the
  arm's doing: left out of every rate, counted apart, run again by a resume.
- `INSTRUMENT`: the harness's own instrument failed on the cell (an imported grader's pattern
  that did not finish over a bounded text): the agent was not measured. Left out of every
  rate and counted apart, named in one sentence.
"""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Iterable

from pytest_ponybench.specs.spec import AXES, PASS_AXES  # noqa: F401 (records.AXES, records.PASS_AXES)

FINISHED = "finished"
TIMEOUT = "timeout"
CLI_ERROR = "cli_error"
BAD_OUTPUT = "bad_output"
WRONG_ARM = "wrong_arm"
ARM_UNPROVEN = "arm_unproven"
NOT_RUN = "not_run"
INTERRUPTED = "interrupted"
INFRA_ERROR = "infra_error"
BUDGET_CUT = "budget_cut"
INSTRUMENT_ERROR = "instrument_error"

MEASURED = frozenset({FINISHED, TIMEOUT, CLI_ERROR, BAD_OUTPUT})
NEVER_RAN = frozenset({NOT_RUN, WRONG_ARM, ARM_UNPROVEN, INTERRUPTED})
INFRA = frozenset({INFRA_ERROR})
CUT = frozenset({BUDGET_CUT})
INSTRUMENT = frozenset({INSTRUMENT_ERROR})
STATUSES = MEASURED | NEVER_RAN | INFRA | CUT | INSTRUMENT


def not_measured_reason(axis: str) -> str:
    """The reason of an axis the task has no check on: its value is None, not a pass."""
    return f"not measured: the task has no {axis} check"

_num = (int, float, type(None))
_int = (int, type(None))
_str = (str,)
_bool = (bool,)

# Every field of a record and the types its value may have. A record of a cell that never
# produced its own (interrupted, its worker crashed) has the identity fields and the verdicts.
FIELDS: dict[str, tuple[type, ...]] = {
    # identity
    "cell": _str, "spec_hash": _str, "task": _str, "arm": _str, "model": _str, "model_id": _str,
    "run": (int,), "kind": _str,
    # how the agent run ended
    "status": _str, "ran": _bool, "error": _str, "rehearsal": _bool, "reused": _bool,
    "escaped": _str, "workspace": _str,
    "skipped_files": _str,  # what the agent left that no program can copy, removed and named (workspace.py)
    "workspace_cut": _str,  # only on a remote worker's cell whose workspace did not all fit home (fleet.py)
    # verdicts
    # None: the task has no check on that axis, so the axis was not measured (never a pass)
    **{axis: _int for axis in AXES}, **{f"{axis}_reason": _str for axis in AXES},
    "passed": _bool, "failure": _str,
    # what the verdicts were judged under (scoring/fingerprint.verdict_key): the workspace's
    # files, the checks, the harness and the deciding library versions; absent when no check ran
    "verdict_key": _str,
    # what the agent delivered (metrics.py)
    "delivered": _bool, "files": (int,), "src_files": (int,), "total_loc": (int,),
    "src_loc": (int,), "test_files": (int,), "test_loc": (int,),
    # usage (transcript.usage_metrics)
    # cost_estimated: no result line gave the cost, so it is the counted tokens at list price
    "cost_usd": _num, "cost_estimated": _bool, "cost_note": _str, "duration_ms": _int, "turns": _int, "denials": _int,
    "in_tokens": _int, "out_tokens": _int, "cache_tokens": _int, "total_tokens": _int,
    "served_model": _str, "claude_version": _str, "plugins": _str, "tools": _str,
    # what the agent did (transcript.activity): 'Name:count' pairs, skill names, distinct files
    "tool_calls": _str, "skills_used": _str, "files_read": (int,), "files_written": (int,),
    "edits": (int,), "api_error_status": _int,
    # infra errors retried (cell.run_cell): attempts made, and what the failed ones cost
    "attempts": (int,), "infra_cost_usd": _num,
}


def problems(record: dict) -> list[str]:
    """What is wrong with a record's shape (unknown status, a value of the wrong type, a value
    that is not JSON-safe); empty when it is well formed. Fields added by other plugins through
    `pytest_ponybench_cell_record` are allowed when their values are JSON-safe scalars."""
    found = []
    status = record.get("status")
    if status not in STATUSES:
        found.append(f"status {status!r} is not one of {', '.join(sorted(STATUSES))}")
    for key, value in record.items():
        allowed = FIELDS.get(key, (str, int, float, bool, type(None)))
        # bool is an int to isinstance(); a flag where a number belongs is still wrong.
        if not isinstance(value, allowed) or (isinstance(value, bool) and bool not in allowed
                                              and key in FIELDS):
            found.append(f"{key}={value!r} is not {' or '.join(t.__name__ for t in allowed)}")
    return found


# --------------------------------------------------------------------------- which cells count


def name_of(record: dict, key: str) -> str:
    """A task, arm or model name; a record without one (a broken line) groups under '?'."""
    value = record.get(key)
    return "?" if value is None or value == "" else str(value)


def group_by(records: Iterable[dict], *keys: str) -> dict[tuple[str, ...], list[dict]]:
    """Records grouped by the named fields, groups sorted by key."""
    groups: dict[tuple[str, ...], list[dict]] = {}
    for record in records:
        groups.setdefault(tuple(name_of(record, k) for k in keys), []).append(record)
    return dict(sorted(groups.items()))


def status_of(record: dict) -> str:
    return str(record.get("status") or "")


def is_measured(record: dict) -> bool:
    """Whether the cell counts in the rates: the arm was applied and the agent ran.

    A record with a status this version does not know (an old or foreign results file) is
    left out rather than guessed at."""
    return status_of(record) in MEASURED


def outcome(record: dict, axis: str) -> int | None:
    """`correct` or `safe` as 0/1, or None when the cell does not count or the axis was not
    measured (the task has no check on it: such a cell is left out of that axis's rate)."""
    if not is_measured(record):
        return None
    value = record.get(axis)
    if value is None or isinstance(value, str):
        return None
    return 1 if value else 0


def delivered(record: dict) -> bool:
    """Whether the agent created or changed a code file compared with what was seeded (an
    untouched seed stub is no delivery). Records written before the field existed fall back
    to `total_loc > 0`."""
    value = record.get("delivered")
    if isinstance(value, bool):
        return value
    loc = record.get("total_loc")
    return isinstance(loc, (int, float)) and not isinstance(loc, bool) and loc > 0


def delivered_loc(record: dict) -> int | None:
    """`total_loc` of a measured cell that delivered code with lines in it, else None: LOC
    statistics use only these cells (a cell that wrote nothing says nothing about size)."""
    if not is_measured(record) or not delivered(record):
        return None
    loc = record.get("total_loc")
    if isinstance(loc, bool) or not isinstance(loc, (int, float)) or loc <= 0:
        return None
    return loc


def passed(record: dict) -> bool | None:
    """The cell's pytest outcome for a measured cell (or correct and safe when the record has
    no `passed`; robust never decides it), None when the cell does not count."""
    if not is_measured(record):
        return None
    value = record.get("passed")
    if isinstance(value, bool):
        return value
    outcomes = [outcome(record, axis) for axis in PASS_AXES]
    if all(v is None for v in outcomes):
        return None
    return all(v != 0 for v in outcomes)  # an axis not measured does not fail the cell


def count(records: Iterable[dict], axis: str) -> tuple[int, int]:
    """(successes, cells that count) for an axis (AXES): cells measured on that axis."""
    values = [v for v in (outcome(r, axis) for r in records) if v is not None]
    return sum(values), len(values)


def loc_values(records: Iterable[dict]) -> list[float]:
    return [v for v in (delivered_loc(r) for r in records) if v is not None]


def loc_all_cells(records: Iterable[dict], largest: float) -> list[float]:
    """`total_loc` of every measured cell, a cell that delivered nothing counted at `largest`
    (the task's largest observed LOC): size over all cells, the PonyBench v3 imputation, so an
    arm that delivers less often does not look smaller for it."""
    return [float(loc) if (loc := delivered_loc(r)) is not None else float(largest)
            for r in records if is_measured(r)]


def largest_loc(records: Iterable[dict]) -> float | None:
    """The largest delivered `total_loc` among `records` (a task's, over every arm), or None."""
    return max(loc_values(records), default=None)


def is_infra(record: dict) -> bool:
    """Whether the cell failed for reasons outside the agent (the model API)."""
    return status_of(record) in INFRA


def is_budget_cut(record: dict) -> bool:
    """Whether the run's budget cut the cell short (not the arm's doing)."""
    return status_of(record) in CUT


def is_instrument_error(record: dict) -> bool:
    """Whether the harness's own instrument failed on the cell (not the agent's doing)."""
    return status_of(record) in INSTRUMENT


def skipped_apart(record: dict) -> bool:
    """Cells reported to pytest as skipped with their record kept: neither a pass nor a
    failure of the arm (the API failed, the run's budget cut it, an instrument failed)."""
    return status_of(record) in INFRA | CUT | INSTRUMENT


INFRA_LOUD_SHARE = 0.2  # more than this share of a run's cells infra errors: say so loudly


def infra_share(records: Iterable[dict]) -> tuple[int, int]:
    """(infra error cells, cells) of a run."""
    records = list(records)
    return sum(1 for r in records if is_infra(r)), len(records)


def left_out(records: Iterable[dict]) -> dict[str, int]:
    """{status: cells} of the cells that count in no rate, sorted by status."""
    counts = Counter(status_of(r) or "?" for r in records if not is_measured(r))
    return dict(sorted(counts.items()))


def left_out_text(counts: dict[str, int]) -> str:
    """'+2 left out: 1 infra_error, 1 not_run', or '' when none was."""
    total = sum(counts.values())
    if not total:
        return ""
    return f"+{total} left out: " + ", ".join(f"{n} {status}" for status, n in counts.items())


@dataclass
class Tally:
    """The counts behind one row of any output: how many cells, how many count, how many of
    those passed each axis, delivered code, wrote tests; and what was left out, by status.
    `axes`: {axis: (successes, n)} for every axis of AXES, n the measured cells with a check on
    that axis: the rate's denominator (0 when the task has none: no rate, never 100%)."""

    cells: int = 0
    measured: int = 0
    axes: dict[str, tuple[int, int]] = field(default_factory=dict)
    delivered: int = 0
    wrote_tests: int = 0
    infra: int = 0
    left_out: dict[str, int] = field(default_factory=dict)

    def rate(self, successes: int, n: int | None = None) -> float | None:
        """successes over `n` (default: the measured cells); None when there is no cell."""
        n = self.measured if n is None else n
        return round(successes / n, 3) if n else None

    def axis_rate(self, axis: str) -> float | None:
        """The rate of an axis over the cells measured on it; None when none was."""
        return self.rate(*self.axes.get(axis, (0, 0)))


def tally(records: Iterable[dict]) -> Tally:
    records = list(records)
    measured = [r for r in records if is_measured(r)]
    skipped = left_out(records)
    return Tally(
        cells=len(records), measured=len(measured), axes={axis: count(measured, axis) for axis in AXES},
        delivered=sum(1 for r in measured if delivered(r)),
        wrote_tests=sum(1 for r in measured if (r.get("test_files") or 0) > 0),
        infra=sum(n for status, n in skipped.items() if status in INFRA),
        left_out=skipped,
    )
