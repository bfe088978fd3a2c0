"""The red team's implementations: written from a task's ticket, seed and fixture alone, by
reviewers who never read its checks (docs/writing-tasks.md, "A red team that has not seen
the checks"). Unlike tests/variants/, which the checks' authors wrote, these measure how far
the checks generalize.

Every flawed one must fail its axis and every fine one pass, except the few listed in
tests/redteam/misses.yaml, each with why. That list may only shrink: a listed one that the
checks now judge right fails here too, so the list never claims a gap that is closed.
"""
from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from pytest_ponybench.instruments import strength
from pytest_ponybench.specs.spec import load_task

REPO = Path(__file__).resolve().parents[1]
REDTEAM_DIR = REPO / "tests" / "redteam"
TASKS_DIR = REPO / "tasks"
MISSES = yaml.safe_load((REDTEAM_DIR / "misses.yaml").read_text(encoding="utf-8")) or {}
PATHS = sorted(p for p in REDTEAM_DIR.glob("*.yaml") if p.name != "misses.yaml")
VARIANTS = [v for path in PATHS for v in strength.load_variants(path)]


def test_every_shipped_task_has_a_red_team_file():
    unmatched = {p.stem for p in TASKS_DIR.glob("*.yaml")} ^ {p.stem for p in PATHS}
    assert not unmatched, f"tasks without tests/redteam/<task>.yaml, or red-team files for no task: {sorted(unmatched)}"
    for path in PATHS:
        variants = strength.load_variants(path)
        assert sum(v.kind == "caught" for v in variants) >= 5, f"{path.stem}: fewer than 5 flawed implementations"
        assert sum(v.kind == "accepted" for v in variants) >= 3, f"{path.stem}: fewer than 3 fine implementations"


def test_the_misses_name_red_team_implementations_with_a_reason():
    names = {f"{v.task}/{v.name}" for v in VARIANTS}
    for key, why in MISSES.items():
        assert key in names, f"tests/redteam/misses.yaml: {key} is no red-team implementation"
        assert isinstance(why, str) and len(why.split()) >= 5, f"tests/redteam/misses.yaml: {key} needs a reason"


@pytest.mark.library_gate
@pytest.mark.parametrize("variant", VARIANTS, ids=lambda v: f"{v.task}/{v.name}")
def test_red_team_implementation_is_judged_as_a_reviewer_would(variant):
    judgement = strength.judge(load_task(TASKS_DIR / f"{variant.task}.yaml", REPO / "fixtures"), variant)
    key = f"{variant.task}/{variant.name}"
    if key in MISSES:
        assert not judgement.held, f"{key} is judged right now: remove it from tests/redteam/misses.yaml"
        return
    if variant.kind == "caught":
        assert judgement.held, f"the {variant.axis} check of {variant.task} lets through: {variant.mistake}"
    else:
        failed = {axis: v.reason for axis, v in judgement.verdicts.items() if not v.ok}
        assert judgement.held, f"{variant.task} rejects a fine implementation ({variant.name}): {failed}"
