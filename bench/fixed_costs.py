#!/usr/bin/env python3
"""The costs a session pays once, each measured in a fresh child process (wall, CPU, peak
memory of that process): starting pytest with the plugin, the gate cold and warm (proof
cache), writing the reports for N records, and the peak of a process that only gathers
records. Prints figures; asserts nothing.

The cold gate is mostly CPU of processes the harness starts (fork server, check processes,
the hosts that run the agent's code, programs the checks start), which a busy machine
stretches in wall time: compare CPU. `--by-process` (root only) runs the cold gate under
the kernel's process accounting (acct(2)) and splits its CPU by kind of process, with how
many of each ran; `--repeat N` measures the cold gate N times.

    python bench/fixed_costs.py [--records 1040] [--root CHECKOUT] [--repeat N] [--by-process]
"""
from __future__ import annotations

import argparse
import collections
import ctypes
import json
import os
import struct
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

HERE = Path(__file__).resolve().parents[1]

MEASURE = textwrap.dedent('''
    import json, os, resource, sys, time
    sys.path.insert(0, {root!r})
    cpu0, wall0 = os.times(), time.perf_counter()
    {body}
    cpu1 = os.times()
    cpu = (cpu1.user - cpu0.user) + (cpu1.system - cpu0.system)
    children = (cpu1.children_user - cpu0.children_user) + (cpu1.children_system - cpu0.children_system)
    print(json.dumps({{"wall": time.perf_counter() - wall0, "cpu": cpu, "children_cpu": children,
                      "peak_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}}))
''')

STARTUP = "import pytest, xdist, pytest_ponybench.plugin, pytest_ponybench.run.collect, pytest_ponybench.cell.lifecycle"

GATE = '''
from pathlib import Path
from pytest_ponybench.instruments import gate as instruments
from pytest_ponybench.processes import procs
from pytest_ponybench.specs.spec import load_task
tasks = [load_task(p, Path({root!r}) / "fixtures") for p in sorted(Path({root!r}, "tasks").glob("*.yaml"))
         if not {names!r} or p.stem in {names!r}]
try:
    broken = instruments.prove_all(tasks, "bench", {cache!r})
except TypeError:  # a checkout without the proof cache
    broken = instruments.prove_all(tasks)
procs.stop_server() if hasattr(procs, "stop_server") else None
assert not broken, broken
'''

RECORD = {"cell": "", "spec_hash": "abc", "task": "", "arm": "", "model": "haiku", "model_id": "claude-haiku-4-5",
          "run": 0, "kind": "surgical", "status": "finished", "ran": True, "error": "", "rehearsal": True,
          "reused": False, "escaped": "", "workspace": "/tmp/x", "cost_usd": 0.01, "in_tokens": 100,
          "out_tokens": 200, "cache_tokens": 0, "turns": 2, "duration_s": 1.5, "total_loc": 10, "src_loc": 8,
          "src_files": 1, "test_files": 0, "test_loc": 0, "correct": 1, "safe": 1, "correct_reason": "ok",
          "safe_reason": "ok", "passed": True, "failure": ""}

REPORT = '''
import json
from pathlib import Path
from pytest_ponybench.run.controller import Gathering
from pytest_ponybench.store.rundir import RunDir
run_dir = RunDir(Path({run_dir!r}))
# An earlier session's records, read through CellRecord.from_json and held as a rescore holds them
# (a session never reads its own back: it holds what it was handed).
session = Gathering(run_dir, mode="rescore")
every = session.all_records()
'''
FINISH = 'session.finish({"haiku": "claude-haiku-4-5"}, "bench", rehearsal=True, reference="baseline", plots=False)\n'


def measure(root: Path, body: str, accounting: Path | None = None) -> dict:
    """The figures of `body` run in a fresh child; with `accounting` (a file), the CPU of
    every process of the child's tree by kind, from the kernel's process accounting."""
    argv = [sys.executable, "-c", MEASURE.format(root=str(root), body=textwrap.indent(body, ""))]
    if accounting is not None:
        accounting.write_bytes(b"")
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.acct(str(accounting).encode()) != 0:
            return {"error": f"process accounting: {os.strerror(ctypes.get_errno())} (root only)"}
    try:
        child = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=root)
        out, err = child.communicate()
    finally:
        if accounting is not None:
            libc.acct(None)
    if child.returncode != 0:
        return {"error": err.strip().splitlines()[-1] if err.strip() else f"exit {child.returncode}"}
    figures = json.loads(out.strip().splitlines()[-1])
    if accounting is not None:
        figures["kinds"] = by_kind(accounting.read_bytes(), child.pid)
    return figures


# struct acct_v3 (linux/acct.h): flag, version, tty, exitcode, uid, gid, pid, ppid, btime,
# etime (float), utime, stime and six more comp_t, comm[16]
ACCT_V3 = struct.Struct("<BBHIIIIIIf8H16s")
AFORK = 0x01  # forked, never exec'd


def comp_t(value: int) -> float:
    """A comp_t (13-bit mantissa, 3-bit base-8 exponent) of 1/100 s ticks, in seconds."""
    return ((value & 0x1FFF) << (3 * (value >> 13))) / 100


def by_kind(data: bytes, root: int) -> dict:
    """{kind: [processes, CPU seconds]} over the processes under `root`. Kinds are the names
    the harness gives its processes (pony-server, pony-supervisor, pony-init, pony-check); a
    process a check forks without exec is the host of the agent's code (remote.py); the
    others are named by their program (python3, node, git: what checks start). Each process's
    CPU is rounded down to 10 ms by the kernel."""
    records = {}
    for offset in range(0, len(data) - ACCT_V3.size + 1, ACCT_V3.size):
        f = ACCT_V3.unpack_from(data, offset)
        records[f[6]] = {"ppid": f[7], "flag": f[0], "comm": f[18].split(b"\0")[0].decode(errors="replace"),
                         "cpu": comp_t(f[10]) + comp_t(f[11])}
    children = collections.defaultdict(list)
    for pid, r in records.items():
        children[r["ppid"]].append(pid)
    kinds: dict = collections.defaultdict(lambda: [0, 0.0])
    stack = [root]
    while stack:
        for pid in children.get(stack.pop(), []):
            stack.append(pid)
            r, parent = records[pid], records.get(records[pid]["ppid"], {})
            kind = r["comm"]
            if kind == "pony-check" and parent.get("comm") == "pony-check" and r["flag"] & AFORK:
                kind = "host of the agent's code"
            elif kind == "pony-check":
                kind = "check process"
            kinds[kind][0] += 1
            kinds[kind][1] += r["cpu"]
    return dict(kinds)


def show(name: str, f: dict) -> None:
    if "error" in f:
        print(f"{name:34} failed: {f['error']}")
        return
    print(f"{name:34} wall {f['wall']:6.2f} s  CPU {f['cpu']:5.2f} s (+{f['children_cpu']:5.2f} s children)"
          f"  peak {f['peak_mb']:5.0f} MB")
    for kind, (count, cpu) in sorted(f.get("kinds", {}).items(), key=lambda kv: -kv[1][1]):
        print(f"    {kind:30} {count:4d} processes  CPU {cpu:6.2f} s")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=1040)
    parser.add_argument("--root", type=Path, default=HERE)
    parser.add_argument("--tasks", default="",
                        help="comma-separated shipped task names: the gate of a session given those task files only")
    parser.add_argument("--repeat", type=int, default=1, help="measure the cold gate this many times")
    parser.add_argument("--by-process", action="store_true",
                        help="split the cold gate's CPU by kind of process (process accounting: root only)")
    args = parser.parse_args()
    root = args.root.resolve()
    print(f"plugin at {root}; {os.cpu_count()} cores; load {os.getloadavg()[0]:.1f}")
    show("import pytest + plugin (a worker)", measure(root, STARTUP))
    with tempfile.TemporaryDirectory(prefix="ponybench-fixed-") as tmp:
        accounting = Path(tmp) / "pacct" if args.by_process else None
        names = [n for n in args.tasks.split(",") if n]
        what = f"tasks {','.join(names)}" if names else "shipped tasks"
        for _ in range(args.repeat):
            show(f"gate, {what}, cold", measure(root, GATE.format(root=str(root), cache=None, names=names), accounting))
        cache = str(Path(tmp) / "cache")
        measure(root, GATE.format(root=str(root), cache=cache, names=names))  # fills the cache
        show(f"gate, {what}, warm cache", measure(root, GATE.format(root=str(root), cache=cache, names=names)))
        run_dir = Path(tmp) / "run"
        run_dir.mkdir()
        tasks, arms = [f"task{i}" for i in range(13)], ["baseline", "yagni", "small-diff", "terse"]
        lines = []
        for i in range(args.records):
            task, arm = tasks[i % len(tasks)], arms[(i // len(tasks)) % len(arms)]
            run = i // (len(tasks) * len(arms))
            lines.append(json.dumps({**RECORD, "cell": f"{task}__{arm}__haiku__{run}", "task": task, "arm": arm,
                                     "run": run, "total_loc": 5 + i % 17, "correct": int(i % 5 != 0)}))
        (run_dir / "results.jsonl").write_text("\n".join(lines) + "\n")
        show(f"holding {args.records} records only", measure(root, REPORT.format(run_dir=str(run_dir))))
        show("+ writing the reports", measure(root, REPORT.format(run_dir=str(run_dir)) + FINISH))


if __name__ == "__main__":
    main()
