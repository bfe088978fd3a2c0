#!/usr/bin/env python3
"""What the agent's cgroup and an unconfined agent's PID namespace cost a cell at its CLI's
start: /bin/true started the way a cell's CLI is (procs.start, under a supervisor), bare,
with the agent's cgroup limits (a group made, joined, emptied and removed), with
pid_namespace (a clone into a new PID namespace, an init forked from the supervisor that
forks and execs the program, reaps and exits), and with both, interleaved; each where the
machine has it. Median wall time of N. Prints figures; asserts nothing.

    python bench/agent_start.py [--n 40]
"""
from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from pytest_ponybench.cell import agent
from pytest_ponybench.processes import procs, sandbox  # noqa: E402


def started(pid_namespace: bool, limits: dict | None) -> float:
    start = time.perf_counter()
    procs.start(["/bin/true"], stdin=subprocess.DEVNULL, pid_namespace=pid_namespace, limits=limits).wait()
    return (time.perf_counter() - start) * 1000


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--n", type=int, default=40)
    n = parser.parse_args().n
    support = sandbox.support()
    limits = None if support.cgroup else agent.AgentLimits().as_message()
    cases = {"bare": (False, None)}
    if not support.namespaces:
        cases["own PID namespace"] = (True, None)
    if limits:
        cases["cgroup"] = (False, limits)
        if not support.namespaces:
            cases["cgroup + own PID namespace"] = (True, limits)
    for what, missing in (("PID namespace", support.namespaces), ("cgroup", support.cgroup)):
        if missing:
            print(f"no {what} here ({missing}): the agent runs without one, at no cost")
    for ns, lim in cases.values():
        started(ns, lim)  # the fork server, warm
    times: dict[str, list[float]] = {name: [] for name in cases}
    for _ in range(n):
        for name, (ns, lim) in cases.items():
            times[name].append(started(ns, lim))
    print(f"load average {os.getloadavg()[0]:.1f}, n={n}; /bin/true under a supervisor (median wall):")
    for name, values in times.items():
        print(f"  {name}: {statistics.median(values):.1f} ms")
    if limits:  # the group's own steps, apart from moving processes into it
        steps: dict[str, list[float]] = {"create": [], "kill_all + hit + peak": [], "remove": []}
        for _ in range(n):
            t0 = time.perf_counter()
            group = sandbox.CallCgroup.create("bench", memory=limits["memory"], pids=limits["pids"])
            t1 = time.perf_counter()
            group.kill_all(), group.hit(), group.peak()
            t2 = time.perf_counter()
            group.remove()
            t3 = time.perf_counter()
            for name, took in zip(steps, (t1 - t0, t2 - t1, t3 - t2)):
                steps[name].append(took * 1000)
        print(f"the agent's cgroup ({support.cgroup_kind}), its own steps (median):")
        for name, values in steps.items():
            print(f"  {name}: {statistics.median(values):.2f} ms")
    procs.stop_server()


if __name__ == "__main__":
    main()
