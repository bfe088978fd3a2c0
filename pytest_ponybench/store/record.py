"""The cell record, and which cells count: one definition every output reads.

A record is a `CellRecord`, built once where its cell ends and passed forward; its JSON form
(`to_json`), one flat dict of JSON-safe values (str, int, float, bool or None), travels from an
xdist worker to the controller as the item's `user_properties`, lands in `--junitxml` as
`<property>` elements and is one line of `results.jsonl`. Whatever is read back becomes a
record through `CellRecord.from_json`. Its fields are `FIELDS` below, the dataclass's
(docs/architecture.md, "The result record", explains each and how a record flows).

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
from typing import Any, Iterable, Union, get_args, get_type_hints

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


class _Absent:
    """A field the record does not have: an interrupted cell's record has no usage, a cell
    that never ran properly no `verdict_key`. Left out of the JSON form, so a record read back
    is the record written, key for key; `None` is a value (an axis not measured), not this."""

    def __repr__(self) -> str:
        return "ABSENT"

    def __bool__(self) -> bool:
        return False


ABSENT: Any = _Absent()
SHARED_MAX = 200  # characters: string values up to this long are kept once (CellRecord.from_json's `shared`)

Scalar = Union[str, int, float, bool, None]  # what a field another plugin adds may hold
_SCALARS = (str, int, float, bool, type(None))


class RecordError(ValueError):
    """A value that is not a cell record; the message names the field and why."""


@dataclass(kw_only=True, slots=True)
class CellRecord:
    """One cell's record. Built once where the cell ends (lifecycle.score_cell, or
    controller.never_ran_record for a cell that produced none), passed forward as it is, and
    written or sent as its JSON form (`to_json`): the item's user_properties, a results.jsonl
    line, the sealed result beside the workspace. Everything read back from a file or a worker
    becomes a record through `from_json`, the one check of a record's shape.

    The fields and their types are the table `FIELDS` (built from these annotations). A field
    is ABSENT when the record does not have it (a record of a cell that never produced its own
    has the identity fields and the verdicts). `extra`: fields other plugins add through
    `pytest_ponybench_cell_record`, JSON-safe scalars, after the harness's own in the JSON form.
    The order below is the order of the JSON form, so of the JUnit properties."""

    # identity (the first five every output groups and counts by: a record without them is none)
    cell: str
    spec_hash: str = ABSENT
    task: str
    arm: str
    model: str
    model_id: str = ABSENT
    run: int = ABSENT
    kind: str = ABSENT
    # how the agent run ended
    status: str
    ran: bool = ABSENT
    error: str = ABSENT
    rehearsal: bool = ABSENT
    reused: bool = ABSENT
    escaped: str = ABSENT
    workspace: str = ABSENT
    attempts: int = ABSENT  # infra errors retried (cell.run_cell): attempts made,
    infra_cost_usd: float | int | None = ABSENT  # and what the failed ones cost
    skipped_files: str = ABSENT  # what the agent left that no program can copy, removed and named (workspace.py)
    # usage (transcript.usage_metrics)
    # cost_estimated: no result line gave the cost, so it is the counted tokens at list price
    cost_usd: float | int | None = ABSENT
    cost_estimated: bool = ABSENT
    cost_note: str = ABSENT
    duration_ms: int | None = ABSENT
    turns: int | None = ABSENT
    denials: int | None = ABSENT
    in_tokens: int | None = ABSENT
    out_tokens: int | None = ABSENT
    cache_tokens: int | None = ABSENT
    total_tokens: int | None = ABSENT
    served_model: str = ABSENT
    claude_version: str = ABSENT
    plugins: str = ABSENT
    tools: str = ABSENT
    # what the agent did (transcript.activity): 'Name:count' pairs, skill names, distinct files
    tool_calls: str = ABSENT
    skills_used: str = ABSENT
    files_read: int = ABSENT
    files_written: int = ABSENT
    edits: int = ABSENT
    api_error_status: int | None = ABSENT
    # what the agent delivered (metrics.py)
    files: int = ABSENT
    src_files: int = ABSENT
    total_loc: int = ABSENT
    src_loc: int = ABSENT
    test_files: int = ABSENT
    test_loc: int = ABSENT
    delivered: bool = ABSENT
    # what the verdicts were judged under (scoring/fingerprint.verdict_key): the workspace's
    # files, the checks, the harness and the deciding library versions; absent when no check ran
    verdict_key: str = ABSENT
    # verdicts, one pair per axis of AXES (checked below): None when the task has no check on
    # that axis, so the axis was not measured (never a pass)
    correct: int | None = ABSENT
    correct_reason: str = ABSENT
    safe: int | None = ABSENT
    safe_reason: str = ABSENT
    robust: int | None = ABSENT
    robust_reason: str = ABSENT
    passed: bool = ABSENT
    failure: str = ABSENT
    workspace_cut: str = ABSENT  # only on a remote worker's cell whose workspace did not all fit home (fleet.py)
    extra: dict[str, Scalar] = field(default_factory=dict)

    def to_json(self) -> dict:
        """The flat dict of JSON-safe scalars every output reads: the fields the record has,
        then the other plugins' fields."""
        data = {name: value for name in FIELDS if (value := getattr(self, name)) is not ABSENT}
        data.update(self.extra)
        return data

    @classmethod
    def from_json(cls, data, shared: dict[str, str] | None = None) -> "CellRecord":
        """The record of a JSON form, or RecordError naming the first field that is wrong:
        an identity field missing, a status this version does not know, a value of the wrong
        type, another plugin's value that is not a JSON-safe scalar. `shared`: one copy of each
        short string value that repeats across the records made with the same table (task,
        arm, status, a failure line): 10,000 records held for the summary kept each 10,000
        times."""
        if not isinstance(data, dict):
            raise RecordError("it is not a JSON object")
        missing = [k for k in IDENTITY if not isinstance(data.get(k), str) or not data.get(k)]
        if missing:
            raise RecordError(f"it has no {', '.join(missing)}")
        if data["status"] not in STATUSES:
            raise RecordError(f"status {data['status']!r} is not one of {', '.join(sorted(STATUSES))}")
        known, extra = {}, {}
        for key, value in data.items():
            allowed = FIELDS.get(key, _SCALARS)
            # bool is an int to isinstance(); a flag where a number belongs is still wrong.
            if not isinstance(value, allowed) or (isinstance(value, bool) and bool not in allowed
                                                  and key in FIELDS):
                raise RecordError(f"{key}={value!r} is not {' or '.join(t.__name__ for t in allowed)}")
            if shared is not None and type(value) is str and len(value) <= SHARED_MAX:
                value = shared.setdefault(value, value)
            if key in FIELDS:
                known[key] = value
            elif isinstance(key, str) and key != "extra":
                extra[key] = value
            else:
                raise RecordError(f"{key!r} is not a field another plugin may add")
        return cls(**known, extra=extra)


def _types(hint) -> tuple[type, ...]:
    """`int | None` -> (int, NoneType): what isinstance() takes."""
    return tuple(t for t in get_args(hint)) if get_args(hint) else (hint,)


# Every field of a record and the types its value may have: the dataclass's annotations.
FIELDS: dict[str, tuple[type, ...]] = {
    name: _types(hint) for name, hint in get_type_hints(CellRecord).items() if name != "extra"}
# The fields every output reads a record by (group_by, status_of): a value without them is none.
IDENTITY = ("cell", "task", "arm", "model", "status")
if {name for name in FIELDS if name.split("_reason")[0] in AXES} != {*AXES, *(f"{a}_reason" for a in AXES)}:
    raise ImportError(f"CellRecord's verdict fields are not those of spec.AXES {AXES}")  # one source: AXES


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
