#!/usr/bin/env python3
"""What an unconfined agent's PID namespace costs a cell: /bin/true started the way a cell's
CLI is (procs.start, under a supervisor), without and with pid_namespace (a clone into a new
PID namespace, an init forked from the supervisor that forks and execs the program, reaps
and exits), each without and with the agent's cgroup limits, interleaved. Median wall time
of N. Prints figures; asserts nothing.

    python bench/agent_pidns.py [--n 40]
"""
from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from pytest_ponybench import agent, procs, sandbox  # noqa: E402


def started(pid_namespace: bool, limits: dict | None) -> float:
    start = time.perf_counter()
    procs.start(["/bin/true"], stdin=subprocess.DEVNULL, pid_namespace=pid_namespace, limits=limits).wait()
    return (time.perf_counter() - start) * 1000


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--n", type=int, default=40)
    n = parser.parse_args().n
    missing = sandbox.support().namespaces
    if missing:
        print(f"no PID namespace here ({missing}): an unconfined agent runs without one, at no cost")
        return
    limits = None if sandbox.support().cgroup else agent.AgentLimits().as_message()
    cases = {"bare": (False, None), "own PID namespace": (True, None)}
    if limits:
        cases.update({"cgroup": (False, limits), "cgroup + own PID namespace": (True, limits)})
    for ns, lim in cases.values():
        started(ns, lim)  # the fork server, warm
    times: dict[str, list[float]] = {name: [] for name in cases}
    for _ in range(n):
        for name, (ns, lim) in cases.items():
            times[name].append(started(ns, lim))
    print(f"load average {os.getloadavg()[0]:.1f}, n={n}; /bin/true under a supervisor (median wall):")
    for name, values in times.items():
        print(f"  {name}: {statistics.median(values):.1f} ms")
    procs.stop_server()


if __name__ == "__main__":
    main()
