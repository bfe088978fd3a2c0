"""The instrument proof cache (instruments.py): a proof that held is not run again for the
same task spec, fixture, harness code, deciding library versions and CLI version; a failed
one always is."""
from __future__ import annotations

from pathlib import Path

import yaml

from pytest_ponybench.instruments import gate as instruments
from pytest_ponybench.processes import procs
from pytest_ponybench.scoring import fingerprint
from pytest_ponybench.specs.spec import load_task
from support.benchproc import ADD_TASK


def task_file(tmp_path: Path, spec: dict, name: str = "add") -> Path:
    path = tmp_path / "tasks" / f"{name}.yaml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    return path


def counting(monkeypatch) -> list:
    """Record every reference proof that actually runs (and still run it)."""
    ran = []
    real = instruments.prove_reference

    def prove(task, side):
        ran.append((task.name, side))
        return real(task, side)

    monkeypatch.setattr(instruments, "prove_reference", prove)
    return ran


def test_a_proof_that_held_is_not_run_again_until_something_it_depends_on_changes(tmp_path, monkeypatch):
    cache = tmp_path / "cache"
    ran = counting(monkeypatch)
    task = load_task(task_file(tmp_path, ADD_TASK), tmp_path / "fixtures")
    assert instruments.prove_all([task], "2.0.0 (Claude Code)", cache) == []
    assert sorted(ran) == [("add", "bad"), ("add", "good")]

    ran.clear()
    assert instruments.prove_all([task], "2.0.0 (Claude Code)", cache) == []
    assert ran == [], "an unchanged task was proven again"

    assert instruments.prove_all([task], "2.0.1 (Claude Code)", cache) == []
    assert sorted(ran) == [("add", "bad"), ("add", "good")], "a new CLI version must prove again"

    ran.clear()
    changed = {**ADD_TASK, "checks": {"correct": ADD_TASK["checks"]["correct"] + "assert add(0, 0) == 0\n"}}
    task = load_task(task_file(tmp_path, changed), tmp_path / "fixtures")
    assert instruments.prove_all([task], "2.0.1 (Claude Code)", cache) == []
    assert sorted(ran) == [("add", "bad"), ("add", "good")], "a changed spec must prove again"

    ran.clear()
    assert instruments.prove_all([task], "2.0.1 (Claude Code)", None) == []
    assert len(ran) == 2, "without a cache every proof runs"


def test_another_hypothesis_version_proves_again(tmp_path, monkeypatch):
    """Hypothesis draws the differential checks' inputs: a reference proven under one version
    is not proven under another (a sql_lookup red-team case failed under 6.170.27 and passed
    under 6.155.2)."""
    cache = tmp_path / "cache"
    ran = counting(monkeypatch)
    task = load_task(task_file(tmp_path, ADD_TASK), tmp_path / "fixtures")
    assert instruments.prove_all([task], "v", cache) == [] and len(ran) == 2
    assert instruments.prove_all([task], "v", cache) == [] and len(ran) == 2
    versions = {**fingerprint.library_versions(), "hypothesis": "6.170.27"}
    monkeypatch.setattr(fingerprint, "library_versions", lambda: versions)
    assert instruments.prove_all([task], "v", cache) == []
    assert len(ran) == 4, "a proof made under another Hypothesis version was taken as proven"


def test_a_failed_proof_is_never_remembered(tmp_path, monkeypatch):
    cache = tmp_path / "cache"
    ran = counting(monkeypatch)
    broken = {**ADD_TASK, "refs": {**ADD_TASK["refs"], "bad": ADD_TASK["refs"]["good"]}}
    task = load_task(task_file(tmp_path, broken), tmp_path / "fixtures")
    for _ in range(2):
        problems = instruments.prove_all([task], "v", cache)
        assert len(problems) == 1 and "the bad reference passes the correct check" in problems[0]
    assert ran.count(("add", "bad")) == 2
    assert ran.count(("add", "good")) == 1  # the good side held the first time


def test_the_cache_directory_follows_the_environment(tmp_path, monkeypatch):
    monkeypatch.setenv(instruments.CACHE_ENV, str(tmp_path / "here"))
    assert instruments.cache_dir() == tmp_path / "here"
    monkeypatch.setenv(instruments.CACHE_ENV, "off")
    assert instruments.cache_dir() is None
    monkeypatch.delenv(instruments.CACHE_ENV)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert instruments.cache_dir() == tmp_path / "xdg" / "pytest-ponybench"


def test_the_tree_kill_proof_holds_and_catches_a_kill_that_spares_the_grandchild(monkeypatch):
    assert instruments.prove_tree_kill() is None
    groups = []

    def spares_the_tree(proc, timeout):  # a "kill" that only waits, as a broken one would
        groups.append(proc.pid)
        return True

    monkeypatch.setattr(procs, "wait_or_kill", spares_the_tree)
    monkeypatch.setattr(procs, "wait_group_gone", lambda pgid: not procs.group_alive(pgid))
    try:
        assert instruments.prove_tree_kill() == "processes of a killed cell survived the process-tree kill"
    finally:
        for pgid in groups:
            procs.kill_group(pgid)
