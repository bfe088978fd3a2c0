"""The cell record: CellRecord, its JSON form, and the one check of a record's shape."""
from __future__ import annotations

import json

import pytest

from pytest_ponybench.store import record as records
from pytest_ponybench.store.record import ABSENT, FIELDS, CellRecord, RecordError

IDENTITY = {"cell": "add__baseline__haiku__0", "spec_hash": "abc", "task": "add", "arm": "baseline",
            "model": "haiku", "model_id": "claude-haiku-4-5-20251001", "run": 0, "kind": "open"}


def full_record() -> dict:
    """A finished cell's JSON form with every field the harness writes, in the order it writes them."""
    values = {str: "x", int: 1, bool: True}
    data = {**IDENTITY, "status": "finished"}
    for name, types in FIELDS.items():
        data.setdefault(name, values[types[0]] if types[0] in values else 0.5)
    data["correct"], data["cost_usd"] = None, 0.25  # None is a value: the axis was not measured
    return {**data, "graders_not_run": "regex"}  # another plugin's field


def test_the_json_form_round_trips_key_for_key_and_in_order():
    data = full_record()
    record = CellRecord.from_json(data)
    assert record.correct is None and record.cost_usd == 0.25 and record.extra == {"graders_not_run": "regex"}
    assert list(record.to_json().items()) == list(data.items())
    assert json.dumps(record.to_json(), sort_keys=True) == json.dumps(data, sort_keys=True)


def test_a_field_the_record_does_not_have_stays_out_of_its_json_form():
    data = {**IDENTITY, "status": "interrupted", "ran": False}
    record = CellRecord.from_json(data)
    assert record.verdict_key is ABSENT and not record.verdict_key and record.cost_usd is ABSENT
    assert record.to_json() == data


def test_the_table_is_the_dataclass_and_holds_every_axis():
    assert FIELDS["cost_usd"] == (float, int, type(None)) and FIELDS["run"] == (int,)
    assert all(axis in FIELDS and f"{axis}_reason" in FIELDS for axis in records.AXES)
    assert "extra" not in FIELDS


@pytest.mark.parametrize("change, named", [
    ({"cell": ""}, "it has no cell"),
    ({"task": None, "arm": 3}, "it has no task, arm"),
    ({"status": "exploded"}, "status 'exploded' is not one of"),
    ({"correct": True}, "correct=True is not int or NoneType"),  # a flag where a number belongs
    ({"total_loc": "12"}, "total_loc='12' is not int"),
    ({"passed": 1}, "passed=1 is not bool"),
    ({"cost_usd": "0.1"}, "cost_usd='0.1' is not float or int or NoneType"),
    ({"mine": [1, 2]}, "mine=[1, 2] is not str or int or float or bool or NoneType"),  # another plugin's
    ({"mine": {"a": 1}}, "mine={'a': 1} is not"),
])
def test_from_json_names_the_field_that_is_wrong(change, named):
    with pytest.raises(RecordError, match="^" + named.replace("[", r"\[").replace("(", r"\(")):
        CellRecord.from_json({**IDENTITY, "status": "finished", **change})


def test_from_json_refuses_what_is_no_object():
    with pytest.raises(RecordError, match="it is not a JSON object"):
        CellRecord.from_json([1, 2])


def test_records_made_with_one_table_share_their_short_repeated_values():
    shared: dict[str, str] = {}
    first, second = (CellRecord.from_json(json.loads(json.dumps({**IDENTITY, "status": "finished",
                                                                 "failure": "incorrect: add(2, 3) is not 5"})), shared)
                     for _ in range(2))
    assert first.failure == second.failure and first.failure is second.failure and first.task is second.task
    alone = CellRecord.from_json(json.loads(json.dumps({**IDENTITY, "status": "finished", "failure": first.failure})))
    assert alone.failure is not first.failure  # without a table each record keeps its own
