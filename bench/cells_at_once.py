#!/usr/bin/env python3
"""What N waiting cells cost run at once two ways: N xdist workers (`-n N`) against one
process running N cells in threads (`--ponybench-at-once N`). Prints wall time, peak memory
of the whole process tree and its CPU seconds for each way, and their ratio; asserts nothing.

    PYTHONPATH=. python bench/cells_at_once.py [--cells 8 32] [--sleep 20] [--real-cli]

Each cell is one run of a tiny task (the process tests' add task, one check) in a temporary project, answered by the stand-in CLI
(tests/fakes/fake_claude.py, mode sleep_then_ok) after `--sleep` seconds, as a model would
keep a real cell waiting. N cells, N at once: one round, so the wall time is start-up plus
one wait plus the harness's own work. `--real-cli` runs the pinned CLI
(node_modules/.bin/claude) against the rehearsal's scripted model on 127.0.0.1, stalled
(`--ponybench-rehearse-fault=stall`), so each cell waits until its `--sleep`-second timeout
and fails: what a waiting cell of the real CLI holds, not a verdict.

Memory: every process of the session, found by a marker in its environment or as a
descendant of one (the harness's fork server and supervisors lead sessions of their own),
sampled from /proc every 0.2 s. RSS counts a page shared by forks once per process; PSS
divides it among them, so its sum is what the tree really holds. CPU, two ways: "reaped" is
getrusage(RUSAGE_CHILDREN) (this process is made a child subreaper and reaps every orphan, but
a process whose parent never waits for it is not counted); "seen" sums each process's last
sampled utime+stime (a process that lived under 0.2 s is missed). The truth is at least the
larger.
"""
from __future__ import annotations

import argparse
import ctypes
import json
import os
import resource
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path

import yaml

HERE = Path(__file__).resolve().parents[1]
FAKE = HERE / "tests" / "fakes" / "fake_claude.py"
REAL_CLI = HERE / "node_modules" / ".bin" / "claude"
sys.path.insert(0, str(HERE / "tests"))
from support.benchproc import ADD_TASK, GOOD_ADD  # noqa: E402  the process tests' one-check task
MARK = "PONYBENCH_AT_ONCE_BENCH"
# Plugins of this machine that only slow a child pytest down.
QUIET = ["-p", "no:cacheprovider", "-p", "no:hypothesispytest", "-p", "no:benchmark", "-p", "no:randomly"]


def project(root: Path, sleep: float) -> dict[str, str]:
    """A one-task project and the environment of a run against the sleeping stand-in."""
    (root / "tasks").mkdir(parents=True)
    (root / "arms").mkdir()
    (root / "tasks" / "add.yaml").write_text(yaml.safe_dump(ADD_TASK, sort_keys=False))
    (root / "arms" / "baseline.yaml").write_text("description: nothing added\n")
    (root / "pytest.ini").write_text("[pytest]\ntestpaths = tasks\n")
    (root / "fake.json").write_text(json.dumps({"write": GOOD_ADD, "mode": "sleep_then_ok", "sleep": sleep}))
    (root / "home").mkdir()
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTEST_ADDOPTS", "PYTEST_XDIST_WORKER", "PYTEST_XDIST_WORKER_COUNT")}
    return {**env, "PONYBENCH_FAKE": str(root / "fake.json"), "ANTHROPIC_API_KEY": "fake", "IS_SANDBOX": "1",
            "HOME": str(root / "home")}


TICK = os.sysconf("SC_CLK_TCK")


def _proc_table(cpu_seen: dict | None = None) -> dict[int, tuple[int, bool]]:
    """pid: (parent pid, carries the marker) for every process readable now; each one's CPU
    so far into `cpu_seen`, keyed by (pid, start time) so a reused pid is another process."""
    table = {}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry.name}/stat").read_text()
            fields = stat[stat.rfind(")") + 2:].split()
            parent = int(fields[1])
            if cpu_seen is not None:  # utime, stime and starttime: fields 14, 15 and 22 of stat
                cpu_seen[(entry.name, fields[19])] = (int(fields[11]) + int(fields[12])) / TICK
            marked = f"{MARK}=".encode() in Path(f"/proc/{entry.name}/environ").read_bytes()
        except (OSError, ValueError, IndexError):
            continue
        table[int(entry.name)] = (parent, marked)
    return table


def _tree_pids(cpu_seen: dict) -> list[int]:
    """The session's processes now; the CPU of each into `cpu_seen`."""
    every: dict = {}
    table = _proc_table(every)
    found = {pid for pid, (_, marked) in table.items() if marked}
    grew = True
    while grew:  # descendants of a marked process (an agent's environment may drop the marker)
        more = {pid for pid, (parent, _) in table.items() if parent in found} - found
        found |= more
        grew = bool(more)
    cpu_seen.update({key: cpu for key, cpu in every.items() if int(key[0]) in found})
    return sorted(found)


def _memory(pids: list[int]) -> tuple[int, int]:
    """Summed RSS and PSS in kB."""
    rss = pss = 0
    for pid in pids:
        try:
            for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
                if line.startswith("Rss:"):
                    rss += int(line.split()[1])
                elif line.startswith("Pss:"):
                    pss += int(line.split()[1])
        except OSError:
            continue
    return rss, pss


def measure(args: list[str], root: Path, env: dict[str, str]) -> dict:
    peak = {"rss": 0, "pss": 0, "procs": 0}
    cpu_seen: dict = {}
    done = threading.Event()

    def sample():
        while not done.wait(0.2):
            pids = _tree_pids(cpu_seen)
            rss, pss = _memory(pids)
            peak["rss"], peak["pss"] = max(peak["rss"], rss), max(peak["pss"], pss)
            peak["procs"] = max(peak["procs"], len(pids))

    sampler = threading.Thread(target=sample, daemon=True)
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.monotonic()
    sampler.start()
    child = subprocess.run([sys.executable, "-m", "pytest", *args], cwd=root, env={**env, MARK: uuid.uuid4().hex},
                           capture_output=True, text=True)
    wall = time.monotonic() - start
    done.set()
    sampler.join()
    while True:  # orphans of the tree came to this subreaper: reap them so their CPU counts
        try:
            os.waitpid(-1, 0)
        except ChildProcessError:
            break
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    tail = child.stdout.strip().splitlines()[-1:] or ["(no output)"]
    if child.returncode != 0:
        print(child.stdout[-3000:], child.stderr[-3000:], file=sys.stderr)
    return {"wall": wall, "cpu": cpu, "cpu_seen": sum(cpu_seen.values()), "rss_mb": peak["rss"] / 1024, "pss_mb": peak["pss"] / 1024,
            "procs": peak["procs"], "code": child.returncode, "summary": tail[0]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cells", type=int, nargs="+", default=[8, 32])
    parser.add_argument("--sleep", type=float, default=20.0, help="seconds each stand-in session waits")
    parser.add_argument("--real-cli", action="store_true", help="the pinned CLI, its model stalled (see above)")
    options = parser.parse_args()
    ctypes.CDLL(None, use_errno=True).prctl(36, 1, 0, 0, 0)  # PR_SET_CHILD_SUBREAPER
    cli = f"real CLI (model stalled, cell timeout {options.sleep:g} s)" if options.real_cli else "stand-in CLI"
    if options.real_cli:  # the rehearsal's own scripted model on 127.0.0.1; the sandbox as a user has it
        way_args = ["--ponybench-rehearse", "--ponybench-rehearse-fault=stall", f"--ponybench-claude={REAL_CLI}",
                    f"--ponybench-timeout={options.sleep:g}"]
    else:
        way_args = [f"--ponybench-claude={FAKE}", "--ponybench-no-confine"]
    print(f"{cli} waits {options.sleep:g} s per cell; {os.cpu_count()} cores, "
          f"load {os.getloadavg()[0]:.1f} at start")
    print("| cells | way | wall s | CPU s reaped | CPU s seen | peak RSS sum MB | peak PSS sum MB | peak processes "
          "| outcome |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for n in options.cells:
        figures = {}
        for way, extra in (("xdist -n N", ["-n", str(n)]), ("at-once N", ["-n", "0", f"--ponybench-at-once={n}"])):
            with tempfile.TemporaryDirectory(prefix="ponybench-at-once-") as tmp:
                root = Path(tmp)
                env = project(root, options.sleep)
                args = ["--ponybench", *way_args, f"--ponybench-dir={root / 'runs'}", f"--runs={n}", *QUIET, *extra]
                got = figures[way] = measure(args, root, env)
            print(f"| {n} | {way} | {got['wall']:.1f} | {got['cpu']:.1f} | {got['cpu_seen']:.1f} | {got['rss_mb']:.0f} | "
                  f"{got['pss_mb']:.0f} | {got['procs']} | {got['summary']} |", flush=True)
        x, p = figures["xdist -n N"], figures["at-once N"]
        print(f"| {n} | xdist / at-once | {x['wall'] / p['wall']:.2f}x | {x['cpu'] / max(p['cpu'], 0.01):.2f}x | "
              f"{x['cpu_seen'] / max(p['cpu_seen'], 0.01):.2f}x | "
              f"{x['rss_mb'] / max(p['rss_mb'], 1):.2f}x | {x['pss_mb'] / max(p['pss_mb'], 1):.2f}x | | |", flush=True)


if __name__ == "__main__":
    main()
