"""Running a task's checks: untrusted code, in a child process, with a time limit.

The check imports what the agent wrote, and that code may loop, exit, fork, crash or flood
its output. So each check runs in its own process, forked by its cell's supervisor from the
warm fork server of `procs` (the check helpers already imported: no interpreter start per
check), in the supervisor's session, with a copy of the workspace as working directory,
output to a file whose tail is kept, a cap on the size of any file it writes, and a deadline
after which its whole process tree is killed. The verdict comes back through a JSON file,
never through stdout, which the agent's code controls.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import traceback
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

from pytest_ponybench.processes import procs, sandbox
from pytest_ponybench.scoring import graders

if TYPE_CHECKING:  # the check child imports this module: keep it free of the spec's YAML
    from pytest_ponybench.specs.spec import TaskSpec

OUTPUT_EXCERPT = 2000  # characters of a failed check's output kept in its reason
REASON_LIMIT = 2000  # characters of a failed assertion's message kept as the reason
FILE_SIZE_LIMIT = 64 * 1024 * 1024  # a check (and the code it runs) writes no larger file


@dataclass(frozen=True)
class Verdict:
    ok: bool
    reason: str  # "ok", or one sentence saying why the check failed
    check: str = ""  # the named check (`@check`) that failed, when one did
    # The harness's own instrument failed, not the agent's code (a grader's pattern that did
    # not finish over a bounded text): the cell is an instrument error, left out of the rates.
    instrument: bool = False
    # The check ran out of its time: on a loaded machine a check of correct code can too, so
    # such a verdict is never kept for a rescore to reuse (cell/lifecycle.judged).
    timed_out: bool = False


def run_check(code: str, workspace: Path, axis: str, entry: str | None, timeout: float,
              transcript: Path | None = None, reference: Path | None = None, in_process: bool = False) -> Verdict:
    """Run one check in `workspace` itself and return its verdict; never raises for agent
    faults. `transcript`: the cell's kept transcript, named to the check in
    $PONYBENCH_TRANSCRIPT (the graders of an imported eval case read the agent's tool calls
    there)."""
    return _run({axis: code}, Path(workspace), entry, timeout, transcript, in_copies=False,
                reference=reference, in_process=in_process)[axis]


def run_checks(checks: dict[str, str], workspace: Path, entry: str | None, timeout: float,
               transcript: Path | None = None, ignore=None, reference: Path | None = None,
               in_process: bool = False) -> dict[str, Verdict]:
    """Run a cell's checks, each in its own disposable copy of `workspace` (`ignore`: what
    the copies leave out, as for `shutil.copytree`), so neither a check nor the code it runs
    can touch the workspace or the other axis; their verdicts by axis. `reference`: a
    workspace seeded with the good reference, copied for each check (`load_reference`).
    `in_process`: the task's checks are not yet behind the trust boundary (remote.py): they
    load the agent's code into their own process, as before it existed.

    One supervisor runs them one after the other (procs.start_calls): it forks each check
    and kills its tree at `timeout` or when it ends, so a cell pays for one supervisor, not
    one a check. The copies are made here, where copying is cheap: in a freshly forked
    process every page the copying code touches is first copied itself."""
    return _run(checks, Path(workspace), entry, timeout, transcript, in_copies=True, ignore=ignore,
                reference=reference, in_process=in_process)


# Beyond the checks' own deadlines, for the supervisor's own work between them: only a wedged
# supervisor meets the harness's deadline.
SUPERVISOR_ALLOWANCE = 30.0


def _run(checks: dict[str, str], workspace: Path, entry: str | None, timeout: float,
         transcript: Path | None, in_copies: bool, ignore=None, reference: Path | None = None,
         in_process: bool = False) -> dict[str, Verdict]:
    if not checks:  # a task without checks: no supervisor to start
        return {}
    env = {
        **procs.environ_snapshot(),  # cells may run in threads beside pytest's main thread
        "PYTHONDONTWRITEBYTECODE": "1",  # no __pycache__ left in the kept workspace
        "PYTHONHASHSEED": "0",
    }
    if transcript is not None:
        env["PONYBENCH_TRANSCRIPT"] = str(transcript)
    axes = list(checks)
    with tempfile.TemporaryDirectory(prefix="ponybench-check-") as tmp:
        calls = []
        for index, axis in enumerate(axes):
            scratch = Path(tmp) / str(index)  # an axis name is a task file's word: not a path
            cwd = workspace
            if in_copies:  # the copy keeps the workspace's own name
                cwd = scratch / workspace.name
                shutil.copytree(workspace, cwd, symlinks=True, ignore=ignore)
            else:
                scratch.mkdir()
            own_reference = ""
            if reference is not None:  # its own copy: a check's code cannot change another's reference
                own_reference = str(scratch / "reference" / workspace.name)
                shutil.copytree(reference, own_reference, symlinks=True)
            # The verdict's folder is the harness's alone (0700): the check opens the file
            # before it drops to the untrusted user, who can neither find nor write it.
            private = scratch / "private"
            private.mkdir(mode=0o700)
            verdict = private / "verdict.json"
            calls.append({"function": "pytest_ponybench.scoring.checks:run_here",
                          "args": [checks[axis], str(verdict), entry or "", own_reference, not in_process],
                          "cwd": str(cwd), "timeout": timeout,
                          "result": str(verdict), "output": str(scratch / "output.txt"), "tail": OUTPUT_EXCERPT,
                          "sandbox": {**_view(scratch, workspace, [cwd, own_reference] if in_copies else [own_reference],
                                                    transcript, in_place=[] if in_copies else [workspace]),
                                      "home": env.get("HOME") or "", "path": env.get("PATH") or ""}})
        proc = procs.start_calls(calls, env=env, max_file_size=FILE_SIZE_LIMIT, stdin=subprocess.DEVNULL)
        procs.wait_or_kill(proc, len(calls) * (timeout + SUPERVISOR_ALLOWANCE))
    return {axis: _verdict(axis, timeout, proc.results[i] if i < len(proc.results) else None,
                           graders_only=graders.is_check_code(checks[axis]))
            for i, axis in enumerate(axes)}


def _view(scratch: Path, workspace: Path, writable: list, transcript: Path | None, in_place=()) -> dict:
    """What a check call sees (sandbox.enter_view): its scratch folder, its copies writable,
    the run directory (the kept workspace's parent: other cells, results.jsonl, the ledger),
    the run-key folder and the task library (task files with their good references, shipped
    in the package or the project's: answer_key_folders) hidden, the transcript shown read-only."""
    from pytest_ponybench.specs.library import answer_key_folders  # here, in the harness, as key_dir
    from pytest_ponybench.store.rundir import key_dir  # here, in the harness: the check's process never needs it

    return {"scratch": str(scratch), "writable": [str(w) for w in writable if w],
            "hide": [str(Path(workspace).resolve().parent), str(key_dir()), *map(str, answer_key_folders(Path.cwd()))],
            "show": [str(transcript)] if transcript is not None else [], "in_place": [str(w) for w in in_place]}


def _limits_said(report: dict | None) -> str:
    """What the call's cgroup says it ran into, as the end of a sentence ("" for nothing)."""
    met = sandbox.limits_met((report or {}).get("limits"))
    return f"; the check's processes ran into {met}" if met else ""


def _verdict(axis: str, timeout: float, report: dict | None, graders_only: bool = False) -> Verdict:
    verdict = _verdict_of_report(axis, timeout, report, graders_only)
    limits = _limits_said(report)
    if limits and not verdict.ok:
        return replace(verdict, reason=verdict.reason + limits)
    return verdict


def _verdict_of_report(axis: str, timeout: float, report: dict | None, graders_only: bool = False) -> Verdict:
    if report is not None and report.get("sandbox_error"):  # the harness's failure, not the agent's
        return Verdict(False, f"{axis} check could not start: its sandbox failed ({str(report['sandbox_error'])[-300:]}); "
                              f"no agent code ran", instrument=True)
    """A check's verdict from what its supervisor reported (None: it never reported).
    `graders_only`: the check is an imported case's graders, which run no agent code."""
    if report is not None and report.get("timed_out") and graders_only:
        stuck = graders.stuck_search(str(report.get("tail") or ""))
        if stuck is not None and stuck["chars"] <= graders.SHORT_TEXT:
            return Verdict(False, instrument_reason(stuck, timeout), instrument=True)
    if report is None or report.get("timed_out"):
        return Verdict(False, f"{axis} check timed out after {timeout:g} s: the code under test looped or blocked",
                       timed_out=True)
    result = report.get("result")
    # The check's process ends with os._exit(0) right after writing its verdict, and with
    # nothing else: a verdict file beside another ending was written by someone else (agent
    # code that wrote it, then killed the check).
    if report.get("code") != 0:
        result = None
    if isinstance(result, dict) and "ok" in result and "reason" in result:
        return Verdict(bool(result["ok"]), str(result["reason"]), str(result.get("check") or ""))
    tail = str(report.get("tail") or "").splitlines()
    last = f": {tail[-1][:300]}" if tail else ""
    return Verdict(False, f"{axis} check process ended with exit code {report.get('code')} "
                          f"without a verdict (the code under test exited or crashed){last}")


def instrument_reason(stuck: dict, timeout: float) -> str:
    """The one sentence of a grader whose own pattern ran out the check's time."""
    return (f"the grader {stuck.get('name')}'s own pattern /{stuck.get('pattern')}/ did not finish over "
            f"{stuck['chars']} characters of {stuck.get('where')} within the check's {timeout:g} s (no agent code "
            f"runs in a grader, and even a quadratic search ends in under a second over {graders.SHORT_TEXT} "
            f"characters): the pattern backtracks catastrophically; fix the grader")


def forbidden_edits(task: TaskSpec, workspace: Path) -> Verdict | None:
    """A failed `correct` verdict naming the files of `task.forbidden` the agent changed,
    deleted or replaced (compared with what was seeded: the seed's text, else the fixture's
    file); None when every forbidden file is as it was seeded."""
    touched = []
    for rel in task.forbidden:
        if rel in task.seed:
            seeded = task.seed[rel].encode("utf-8")
        else:
            assert task.fixture is not None  # the spec forbids only files of the seed or the fixture
            seeded = (task.fixture / rel).read_bytes()
        target = Path(workspace) / rel
        if not target.is_file():
            touched.append(f"{rel} (deleted)")
        elif target.read_bytes() != seeded:
            touched.append(rel)
    if not touched:
        return None
    return Verdict(False, f"changed {', '.join(touched)}, which the ticket says not to change")


def with_forbidden(verdicts: dict[str, Verdict], forbidden: Verdict | None) -> dict[str, Verdict]:
    """The verdicts with a forbidden edit folded into `correct` (keeping the check's own reason)."""
    if forbidden is None:
        return verdicts
    check = verdicts.get("correct")
    reason = forbidden.reason if check is None or check.ok else f"{forbidden.reason}; {check.reason}"
    return {**verdicts, "correct": Verdict(False, reason)}


def _reason(exc: BaseException) -> str:
    if isinstance(exc, AssertionError):
        message = str(exc).strip()
        if message:
            return message[:REASON_LIMIT]
        frames = traceback.extract_tb(exc.__traceback__)
        check_frames = [f for f in frames if f.filename == "<check>"]
        line = (check_frames or frames)[-1]
        return f"assertion failed: {(line.line or '').strip() or 'line ' + str(line.lineno)}"
    if isinstance(exc, SystemExit):
        return f"the code under test called exit({repr(exc.code)[:300]})"
    return f"{type(exc).__name__}: {str(exc)[:300]}"


def run_here(code: str, verdict_path: str, entry: str, reference: str = "", boundary: bool = True) -> None:
    """The check's own process (forked, in the workspace): run the check code with the
    helper API, then its named checks in order, write the verdict, leave at once.

    `boundary`: the agent's code runs only in host processes (remote.py) that `load` forks,
    and this process, which alone writes the verdict, never imports it. A host that died or
    broke the protocol fails the check whatever the check code caught. Without `boundary`
    (a task marked `checks_in_process`) the agent's modules are imported here, as before."""
    from pytest_ponybench.scoring import check_state, checklib, host, remote  # with its imports, before an agent's json.py or http.py can shadow them

    verdict_fd = _open_verdict(verdict_path)
    if sandbox.IN_SANDBOX and boundary and reference:
        # Made while this process is root: the view the agent's code runs in, without the
        # reference's copy (sandbox.agent_view; its hosts and programs join it).
        host.AGENT_VIEW = sandbox.agent_view([reference])
        checklib.guard_programs()  # the agent's programs a check starts its own way join that view too
    # In the sandbox this process drops to the untrusted user too: what the check makes in
    # the copy (folders, files, a database) must be the agent's code's to write. The verdict
    # stays out of that code's reach all the same: it runs in hosts (remote.py) that keep no
    # descriptor but their socket, and this process is non-dumpable, so no process of that
    # user may open its descriptors or memory; the worst the code can do is kill it, which
    # fails the check ("without a verdict").
    if sandbox.IN_SANDBOX:
        sandbox.become_untrusted()
    sys.dont_write_bytecode = True  # no __pycache__ left in the kept workspace
    # Where this check runs, read by checklib (checklib.WORKSPACE, ...), remote and regressions.
    check_state.WORKSPACE = Path.cwd()  # the module was imported once, in the fork server's directory
    check_state.REFERENCE = Path(reference) if reference else None
    check_state.BEHIND_BOUNDARY = boundary
    if boundary:
        host._set_non_dumpable()  # no host may ptrace this process or read its memory
        host.adopt_orphans()  # what a host leaves running ends before the verdict is written
        # Nothing of the workspace is importable here: the check never runs the agent's module
        # by importing it by name; the hosts put their own tree first on their path.
        sys.path[:] = [p for p in sys.path if p not in ("", ".", os.getcwd())]
    else:
        sys.path.insert(0, os.getcwd())  # the agent's modules import each other by name
    try:
        exec(compile(code, "<check>", "exec"), checklib.namespace(entry or None))
        checklib.run_named_checks()
        verdict = {"ok": True, "reason": "ok"}
    except checklib.NamedCheckFailed as failed:
        verdict = {"ok": False, "reason": _reason(failed.error), "check": failed.name}
    except BaseException as exc:  # the agent's code may raise anything, SystemExit included
        verdict = {"ok": False, "reason": _reason(exc)}
    finally:
        checklib.cleanup()
        if boundary:
            host.kill_descendants()
    if remote.broken():  # checked after the check code, whatever it caught
        verdict = {"ok": False, "reason": remote.broken(), **({"check": verdict["check"]} if "check" in verdict else {})}
    _write_verdict(verdict_fd, verdict)
    sys.stdout.flush()
    os._exit(0)  # skip atexit handlers the agent's code may have registered


def _open_verdict(path: str) -> int:
    """The verdict file, opened while the check's process is still the harness's user (before
    `sandbox.become_untrusted`), in a folder only that user may enter, without following a
    link: code that guesses the path can neither find nor write it, and nothing planted there
    redirects the write. (Code running in this very process can still reach the descriptor:
    that goes when the agent's code runs in a process of its own.)"""
    return os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)


def _write_verdict(fd: int, verdict: dict) -> None:
    data = json.dumps(verdict).encode("utf-8")
    os.ftruncate(fd, 0)
    os.lseek(fd, 0, os.SEEK_SET)
    while data:
        data = data[os.write(fd, data):]
    os.close(fd)


if __name__ == "__main__":  # by hand: python -m pytest_ponybench.scoring.checks CHECK.py VERDICT.json [ENTRY]
    run_here(Path(sys.argv[1]).read_text(encoding="utf-8"), sys.argv[2], (sys.argv[3:] or [""])[0],
             (sys.argv[4:] or [""])[0])
