"""Prove the instruments before spending.

Every gated task ships a good and a bad reference: the good one must pass every check, the
bad one must be caught on its axis and pass the others. The harness's own instruments are proven too: plugin
directory resolution and the process-tree kill. `pytest -m selftest` shows each proof as a
test; `pytest --ponybench` runs them all first and refuses to start a cell if one fails.
"""
from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from . import cell, procs, workspace
from .spec import ArmSpec, SpecError, TaskSpec, resolve_plugin_dir


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
    # The bad reference is the lazy-but-plausible version: it must pass every other axis, so a
    # check that crashes on everything cannot pass for one that catches the mistake.
    others = [f"{axis}: {v.reason}" for axis, v in verdicts.items() if axis != refs.axis and not v.ok]
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
    """A cell that outran its time dies with all its children (a grandchild included)."""
    spawn = ("import subprocess, sys, time; "
             "subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)']); time.sleep(60)")
    proc = procs.start([sys.executable, "-c", spawn], stdin=subprocess.DEVNULL,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    if not procs.wait_or_kill(proc, 1.0):
        return "the probe process ended before its timeout; the kill was not exercised"
    if not procs.wait_group_gone(proc.pid):
        return "processes of a killed cell survived the process-tree kill"
    return None


def prove_all(tasks: list[TaskSpec]) -> list[str]:
    """Every instrument at once; the list of what is broken (empty when all hold)."""
    jobs = [(prove_reference, (t, side)) for t in tasks if t.gated for side in ("good", "bad")]
    jobs += [(prove_plugin_resolution, ()), (prove_tree_kill, ())]
    # Each proof waits on child processes, so threads overlap them well on two cores.
    with ThreadPoolExecutor(max_workers=max(2, os.cpu_count() or 2)) as pool:
        results = list(pool.map(lambda job: job[0](*job[1]), jobs))
    return [r for r in results if r]
