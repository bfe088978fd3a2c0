"""The judged columns (judge_report.py): figures per arm against the reference, pooled over
tasks, cells not judged left out, and the judge and rubric named."""
from __future__ import annotations

import pytest

from pytest_ponybench.judge import judge
from pytest_ponybench.reports import judge_report


def cell(task, arm, oe, co=None, votes="", status="judged", fp="fp1"):
    return {"task": task, "model": "haiku", "arm": arm, "over_engineering": oe, "completeness": co,
            "over_engineering_votes": votes, "completeness_votes": "", "judge_status": status,
            "judge_model": "claude-sonnet-4-6", "judge_rubric": judge.rubric_hash(), "judge_fingerprint": fp}


RECORDS = ([cell("t1", "baseline", 0, 3) for _ in range(4)] + [cell("t1", "big", 3, 3), cell("t1", "big", 2, 1),
           cell("t1", "big", 2, 3, votes="2,3,2"), cell("t1", "big", None, None, status="infra_error: 529")]
           + [cell("t2", "baseline", 1, 2), cell("t2", "baseline", 1, 2), cell("t2", "big", 3, 1), cell("t2", "big", 3, 1)])


def row(rows, task, arm):
    (found,) = [r for r in rows if r["task"] == task and r["arm"] == arm]
    return found


def test_per_arm_figures_against_the_reference():
    rows = judge_report.rows(RECORDS, "baseline")
    big = row(rows, "t1", "big")
    assert big["cells"] == 4 and big["over_engineering"]["n"] == 3  # the infra error left out, not 0
    assert big["over_engineering"]["mean"] == pytest.approx(7 / 3, abs=1e-3)
    assert big["over_engineering"]["diff"] == pytest.approx(7 / 3, abs=1e-3)
    low, high = big["over_engineering"]["diff_ci"]
    assert 0 < low <= 7 / 3 <= high <= 3
    assert big["over_built_share"] == 1.0 and big["incomplete_share"] == pytest.approx(1 / 3, abs=1e-3)
    assert big["vote_disagreement"] == 1.0
    assert big["not_judged"] == {"infra_error": 1}
    base = row(rows, "t1", "baseline")
    assert base["over_engineering"]["diff"] is None and base["over_built_share"] == 0.0


def test_the_pooled_line_averages_per_task_differences():
    pooled = row(judge_report.rows(RECORDS, "baseline"), "(pooled)", "big")
    assert pooled["tasks"] == 2
    assert pooled["over_engineering"]["diff"] == pytest.approx(((7 / 3) + 2) / 2, abs=1e-3)
    assert pooled["completeness"]["diff"] == pytest.approx(((7 / 3 - 3) + (1 - 2)) / 2, abs=1e-3)


def test_the_table_names_the_judge_and_a_mix_is_loud():
    table = judge_report.table(RECORDS, "baseline")
    assert table.notes[0].startswith("judge claude-sonnet-4-6, rubric " + judge.rubric_hash())
    assert any("not judged in 1 cell(s): infra_error: 529" in n for n in table.notes)
    assert judge_report.identity(RECORDS + [cell("t1", "big", 1, fp="fp2")]).startswith("MIXED JUDGES")
    assert judge_report.table([{"task": "t", "arm": "a", "model": "m"}], "baseline") is None
