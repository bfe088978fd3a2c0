#!/usr/bin/env python3
"""What the agent's cgroup costs a cell: /bin/true started the way a cell's CLI is
(procs.start, under a supervisor), without and with the agent's limits (a cgroup made, joined
between fork and exec, emptied, read and removed), interleaved; and the cgroup operations
alone. Median wall time of N. Prints figures; asserts nothing.

    python bench/agent_cgroup.py [--n 40]
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


def started(limits: dict | None) -> float:
    start = time.perf_counter()
    procs.start(["/bin/true"], stdin=subprocess.DEVNULL, limits=limits).wait()
    return (time.perf_counter() - start) * 1000


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--n", type=int, default=40)
    n = parser.parse_args().n
    missing = sandbox.support().cgroup
    if missing:
        print(f"no cgroup here ({missing}): the agent runs without one, at no cost")
        return
    limits = agent.AgentLimits().as_message()
    started(None), started(limits)  # the fork server, warm
    bare, limited = [], []
    for _ in range(n):
        bare.append(started(None))
        limited.append(started(limits))
    steps = {"create": [], "kill_all + hit + peak": [], "remove": []}
    for _ in range(n):
        t0 = time.perf_counter()
        group = sandbox.CallCgroup.create("bench", **{"memory": limits["memory"], "pids": limits["pids"]})
        t1 = time.perf_counter()
        group.kill_all(), group.hit(), group.peak()
        t2 = time.perf_counter()
        group.remove()
        t3 = time.perf_counter()
        steps["create"].append((t1 - t0) * 1000)
        steps["kill_all + hit + peak"].append((t2 - t1) * 1000)
        steps["remove"].append((t3 - t2) * 1000)
    print(f"cgroup {sandbox.support().cgroup_kind}, load average {os.getloadavg()[0]:.1f}, n={n}")
    print(f"/bin/true under a supervisor: {statistics.median(bare):.1f} ms bare, "
          f"{statistics.median(limited):.1f} ms in the agent's cgroup (median wall)")
    for name, values in steps.items():
        print(f"  {name}: {statistics.median(values):.2f} ms")
    procs.stop_server()


if __name__ == "__main__":
    main()
