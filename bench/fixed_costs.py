#!/usr/bin/env python3
"""The costs a session pays once, each measured in a fresh child process (wall, CPU, peak
memory of that process): starting pytest with the plugin, the gate cold and warm (proof
cache), writing the reports for N records, and the peak of a process that only gathers
records. Prints figures; asserts nothing.

    python bench/fixed_costs.py [--records 1040] [--root CHECKOUT]
"""
from __future__ import annotations

import argparse
import json
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

STARTUP = "import pytest, xdist, pytest_ponybench.plugin, pytest_ponybench.collect, pytest_ponybench.cell"

GATE = '''
from pathlib import Path
from pytest_ponybench import instruments, procs
from pytest_ponybench.spec import load_task
tasks = [load_task(p, Path({root!r}) / "fixtures") for p in sorted(Path({root!r}, "tasks").glob("*.yaml"))]
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
from pytest_ponybench.controller import Gathering
from pytest_ponybench.rundir import RunDir
run_dir = RunDir(Path({run_dir!r}))
session = Gathering(run_dir)  # reads the records back from results.jsonl when they are needed
every = session.all_records()
'''
FINISH = 'session.finish({"haiku": "claude-haiku-4-5"}, "bench", rehearsal=True, reference="baseline", plots=False)\n'


def measure(root: Path, body: str) -> dict:
    done = subprocess.run([sys.executable, "-c", MEASURE.format(root=str(root), body=textwrap.indent(body, ""))],
                          capture_output=True, text=True, cwd=root)
    if done.returncode != 0:
        return {"error": done.stderr.strip().splitlines()[-1] if done.stderr.strip() else f"exit {done.returncode}"}
    return json.loads(done.stdout.strip().splitlines()[-1])


def show(name: str, f: dict) -> None:
    if "error" in f:
        print(f"{name:34} failed: {f['error']}")
        return
    print(f"{name:34} wall {f['wall']:6.2f} s  CPU {f['cpu']:5.2f} s (+{f['children_cpu']:5.2f} s children)"
          f"  peak {f['peak_mb']:5.0f} MB")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=1040)
    parser.add_argument("--root", type=Path, default=HERE)
    args = parser.parse_args()
    root = args.root.resolve()
    print(f"plugin at {root}")
    show("import pytest + plugin (a worker)", measure(root, STARTUP))
    with tempfile.TemporaryDirectory(prefix="ponybench-fixed-") as tmp:
        cache = str(Path(tmp) / "cache")
        show("gate, shipped tasks, cold", measure(root, GATE.format(root=str(root), cache=cache)))
        show("gate, shipped tasks, warm cache", measure(root, GATE.format(root=str(root), cache=cache)))
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
