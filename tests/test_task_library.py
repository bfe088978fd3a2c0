"""The task library: its size and mix, and the strength of every task's checks.

A task's own refs prove one thing each: the good one passes and the bad one is caught. That
is a single lazy mistake. Every task also has a variants file, `tests/variants/<task>.yaml`
(see `pytest_ponybench/instruments/strength.py`): at least 6 plausible implementations with one mistake
each, of different kinds, that its checks must catch on the named axis, and at least 3
independent correct ones they must accept. A check tuned to its own two refs, too narrow or
too strict, fails here. Variants run through the real machinery, exactly like a reference:
seeded with `workspace.seed`, scored with `checks.run_checks` and the forbidden-edit rule.
"""
from __future__ import annotations

from pathlib import Path

import pytest

from pytest_ponybench.instruments import strength
from pytest_ponybench.specs.spec import TaskSpec, load_task

REPO = Path(__file__).resolve().parents[1]
TASKS_DIR = REPO / "tasks"
FIXTURES_DIR = REPO / "fixtures"
VARIANTS_DIR = REPO / strength.VARIANTS_DIR
CATEGORIES = ("safety", "correctness", "quality", "open", "fixture")
LANGUAGES = ("python", "javascript")
TASK_PATHS = sorted(TASKS_DIR.glob("*.yaml"))
VARIANT_PATHS = sorted(VARIANTS_DIR.glob("*.yaml"))


def load(name: str) -> TaskSpec:
    return load_task(TASKS_DIR / f"{name}.yaml", FIXTURES_DIR)


# ---------------------------------------------------------------------------------------
# The library's size and mix
# ---------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def library() -> dict[str, TaskSpec]:
    return {path.stem: load_task(path, FIXTURES_DIR) for path in TASK_PATHS}


def tagged(library, *tags):
    return sorted(name for name, task in library.items() if set(tags) <= set(task.tags))


def test_library_size_and_mix(library):
    assert len(library) >= 16, sorted(library)
    assert len(tagged(library, "safety", "python")) >= 7
    assert len(tagged(library, "javascript")) >= 1
    assert len(tagged(library, "correctness")) >= 2
    assert len(tagged(library, "quality")) >= 2
    assert len(tagged(library, "open")) >= 3
    assert len(tagged(library, "fixture")) >= 3


@pytest.mark.parametrize("path", TASK_PATHS, ids=[p.stem for p in TASK_PATHS])
def test_task_loads_with_a_category_and_a_language(path):
    task = load_task(path, FIXTURES_DIR)
    assert [t for t in task.tags if t in CATEGORIES], f"{task.name}: no category tag among {CATEGORIES}"
    assert [t for t in task.tags if t in LANGUAGES], f"{task.name}: no language tag among {LANGUAGES}"
    assert task.gated, f"{task.name}: ships no good and bad reference"
    if "safety" in task.tags:
        assert task.refs.axis == "safe" and "correct" in task.checks, f"{task.name}: a safety task needs safe and correct checks"
    if task.open or task.fixture is not None:
        assert task.rehearsal, f"{task.name}: an open or fixture task needs rehearsal files"
    if task.kind == "surgical":
        assert task.file in task.seed, f"{task.name}: the entry file {task.file} is not seeded"


# ---------------------------------------------------------------------------------------
# The variants: every task has enough of them, and each is judged as it must be. Each test
# judges one variant (child processes), so pytest-xdist spreads them over its workers.
# ---------------------------------------------------------------------------------------

VARIANTS = [v for path in VARIANT_PATHS for v in strength.load_variants(path)]


@pytest.mark.parametrize("path", TASK_PATHS, ids=[p.stem for p in TASK_PATHS])
def test_every_task_has_enough_variants(path):
    variants_path = VARIANTS_DIR / f"{path.stem}.yaml"
    assert variants_path.is_file(), f"{path.stem}: no {variants_path.relative_to(REPO)}"
    variants = strength.load_variants(variants_path)
    caught = [v for v in variants if v.kind == "caught"]
    accepted = [v for v in variants if v.kind == "accepted"]
    assert len(caught) >= strength.MIN_CAUGHT, f"{path.stem}: {len(caught)} caught variants, keep at least {strength.MIN_CAUGHT}"
    assert len(accepted) >= strength.MIN_ACCEPTED, f"{path.stem}: {len(accepted)} accepted variants, keep at least {strength.MIN_ACCEPTED}"
    mistakes = [v.mistake for v in caught]
    assert len(set(mistakes)) == len(mistakes), f"{path.stem}: two caught variants name the same mistake"
    task = load_task(path, FIXTURES_DIR)
    for v in caught:
        assert v.files_for(task) != task.refs.bad, f"{path.stem}/{v.name} repeats the bad reference"
    for v in accepted:
        assert v.files_for(task) != task.refs.good, f"{path.stem}/{v.name} repeats the good reference"


def test_variants_name_shipped_tasks():
    orphans = sorted(p.stem for p in VARIANT_PATHS if not (TASKS_DIR / p.name).is_file())
    assert not orphans, f"variants files for tasks that do not exist: {orphans}"


CAUGHT = [v for v in VARIANTS if v.kind == "caught"]
ACCEPTED = [v for v in VARIANTS if v.kind == "accepted"]


@pytest.mark.library_gate
@pytest.mark.parametrize("variant", CAUGHT, ids=lambda v: f"{v.task}/{v.name}")
def test_caught_variant_fails_its_axis_only(variant):
    judgement = strength.judge(load(variant.task), variant)
    assert judgement.held, f"the {variant.axis} check of {variant.task} lets through: {variant.mistake}"
    # A plausible variant passes the other axes; when its mistake cannot, its mistake line says so.
    unexplained = {axis: reason for axis, reason in judgement.other_failures.items() if axis not in variant.mistake}
    assert not unexplained, (
        f"{variant.task}/{variant.name} also fails {sorted(unexplained)} ({unexplained}) and its mistake line "
        f"does not say so, so it proves little about the {variant.axis} check")


@pytest.mark.library_gate
@pytest.mark.parametrize("variant", ACCEPTED, ids=lambda v: f"{v.task}/{v.name}")
def test_accepted_variant_passes_every_check(variant):
    # every check that decides pass/fail: robust is measured apart and never rejects a fine one
    judgement = strength.judge(load(variant.task), variant)
    failed = {axis: v.reason for axis, v in judgement.verdicts.items() if not v.ok}
    assert judgement.held, f"{variant.task} rejects a correct implementation ({variant.name}): {failed}"
