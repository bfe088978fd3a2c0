"""Prove the instruments before spending.

Every gated task ships a good and a bad reference: the good one must pass every check (robust
too), the bad one must be caught on its axis and pass the other pass/fail axis. The harness's own instruments are proven too: plugin
directory resolution and the process-tree kill. `pytest -m selftest` shows each proof as a
test; `pytest --ponybench` runs them all first and refuses to start a cell if one fails.

A proof that held is remembered (one empty file per proof under the cache directory, named
by a hash of what it depends on: the task's spec and fixture, the harness's own code, the
Python, the versions of the libraries that decide a verdict and the CLI version: the keys of
scoring/fingerprint.py, by which a cell's verdicts are remembered too), so an unchanged library
is not proven again in every session.
A failed proof is never remembered. `pytest -m selftest` uses the same cache (its items name
the proof, collect.py), so a user's second selftest costs seconds; PONYBENCH_CACHE_DIR=off
proves everything afresh.
"""
from __future__ import annotations

import os
import select
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from pytest_ponybench.cell import lifecycle as cell, workspace
from pytest_ponybench.processes import procs
# The keys a proof is remembered by, shared with a cell's verdicts (scoring/fingerprint.py).
from pytest_ponybench.scoring.fingerprint import fixture_fingerprint, harness_fingerprint, proof_key
from pytest_ponybench.specs.spec import PASS_AXES, ArmSpec, SpecError, TaskSpec, resolve_plugin_dir


def prove_reference(task: TaskSpec, side: str) -> str | None:
    """None when the `side` ("good" or "bad") reference scores as it must; else why not."""
    refs = task.refs
    with tempfile.TemporaryDirectory(prefix=f"ponybench-ref-{task.name}-") as tmp:
        ws = Path(tmp)
        workspace.seed(task, ws, files=getattr(refs, side))
        verdicts = cell.judge(task, ws)  # exactly as a cell is judged, forbidden edits included
    if side == "good":
        failed = [f"{axis}: {v.reason}" for axis, v in verdicts.items() if not v.ok]
        return f"{task.path}: the good reference fails its checks ({'; '.join(failed)})" if failed else None
    if verdicts[refs.axis].ok:
        return f"{task.path}: the bad reference passes the {refs.axis} check, so the check cannot catch it"
    # The bad reference is the lazy-but-plausible version: it must pass the other pass/fail
    # axis, so a check that crashes on everything cannot pass for one that catches the mistake.
    # Not robust: lazy code may well lack what the ticket never asked for, and the good
    # reference passing robust already proves its checks do not fail everything.
    others = [f"{axis}: {v.reason}" for axis, v in verdicts.items()
              if axis != refs.axis and axis in PASS_AXES and not v.ok]
    if others:
        return f"{task.path}: the bad reference should fail only on {refs.axis}, but also fails {'; '.join(others)}"
    return None


def prove_plugin_resolution() -> str | None:
    """The env override wins; a plugin that is nowhere gives a clear error."""
    with tempfile.TemporaryDirectory(prefix="ponybench-plugin-") as tmp:
        arm = ArmSpec(name="probe", path=None, plugin="ponybench-probe-plugin")
        override = {"PONYBENCH_PROBE_PLUGIN_PLUGIN_DIR": tmp}
        if resolve_plugin_dir(arm, Path(tmp), Path(tmp) / "cache", override) != str(Path(tmp).resolve()):
            return "plugin resolution ignores the <NAME>_PLUGIN_DIR override"
        try:
            resolve_plugin_dir(arm, Path(tmp), Path(tmp) / "cache", {})
        except SpecError as exc:
            return None if "not found" in str(exc) else f"plugin resolution error is unclear: {exc}"
        return "a plugin that exists nowhere resolved to a directory instead of an error"


def prove_tree_kill() -> str | None:
    """A cell that outran its time dies with all its children (a grandchild included). The
    probe says when its grandchild runs, and is killed then: no fixed wait (a second per
    session once), and the kill is proven on a tree that surely has its grandchild, however
    slow the machine is to start one."""
    spawn = ("import subprocess, sys, time; "
             "subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'], stdout=subprocess.DEVNULL); "
             "print('grandchild running', flush=True); time.sleep(60)")
    proc = procs.start([sys.executable, "-c", spawn], stdin=subprocess.DEVNULL,
                       stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        said = proc.stdout.readline() if select.select([proc.stdout], [], [], TREE_KILL_START)[0] else ""
    finally:
        killed = procs.wait_or_kill(proc, 0.0)
        proc.stdout.close()
    if "grandchild running" not in said:
        return (f"the probe process did not start its grandchild within {TREE_KILL_START:g} s "
                f"(it said {said.strip()!r}); the kill was not exercised")
    if not killed:
        return "the probe process ended before its timeout; the kill was not exercised"
    if not procs.wait_group_gone(proc.pid):
        return "processes of a killed cell survived the process-tree kill"
    return None


TREE_KILL_START = 30.0  # seconds the probe has to start its grandchild (two interpreter starts)


CACHE_ENV = "PONYBENCH_CACHE_DIR"  # where proofs are remembered; "off" remembers nothing


def cache_dir() -> Path | None:
    """$PONYBENCH_CACHE_DIR, else $XDG_CACHE_HOME/pytest-ponybench, else ~/.cache/pytest-ponybench."""
    configured = os.environ.get(CACHE_ENV)
    if configured == "off":
        return None
    if configured:
        return Path(configured).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "pytest-ponybench"


def _remembered(directory: Path | None, key: str) -> bool:
    return directory is not None and (directory / "proofs" / key).is_file()


def _remember(directory: Path | None, key: str) -> None:
    if directory is None:
        return
    try:
        (directory / "proofs").mkdir(parents=True, exist_ok=True)
        (directory / "proofs" / key).touch()
    except OSError:
        pass  # an unwritable cache only costs the next session its proofs


def reference_proof_key(harness: str, task: TaskSpec, side: str) -> str:
    return proof_key(harness, "ref", task.name, task.spec_hash, side, fixture_fingerprint(task))


def harness_proofs() -> dict:
    """The harness's own proofs by the name their proof key holds (looked up when called)."""
    return {"plugin-resolution": prove_plugin_resolution, "tree-kill": prove_tree_kill}


def proven(proof, args: tuple, key: str, directory: Path | None) -> str | None:
    """`proof(*args)` unless it held before under `key`; remembered when it holds now."""
    if _remembered(directory, key):
        return None
    problem = proof(*args)
    if problem is None:
        _remember(directory, key)
    return problem


def proofs_at_once() -> int:
    """Each proof waits on child processes, so threads overlap them well on two cores."""
    return max(2, os.cpu_count() or 2)


def prove_all(tasks: list[TaskSpec], cli_version: str = "", cache: Path | None | str = "default") -> list[str]:
    """Every instrument at once; the list of what is broken (empty when all hold). Proofs
    that held before, for the same task spec, fixture, harness code, deciding library versions
    and CLI version, are not run again (`cache`: a directory, None for no cache, or the default `cache_dir()`)."""
    directory = cache_dir() if cache == "default" else (None if cache is None else Path(cache))
    harness = harness_fingerprint(cli_version)
    jobs = [(prove_reference, (t, side), reference_proof_key(harness, t, side))
            for t in tasks if t.gated for side in ("good", "bad")]
    jobs += [(proof, (), proof_key(harness, name)) for name, proof in harness_proofs().items()]
    with ThreadPoolExecutor(max_workers=proofs_at_once()) as pool:
        results = list(pool.map(lambda job: proven(*job, directory), jobs))
    return [r for r in results if r]
