#!/usr/bin/env python3
"""What the trust boundary (remote.py) costs a check: starting a host and loading a module in
it, one round trip (a call with two ints and its int back; a call passing a check-side
callback the agent's code calls once), and a 100-example differential of two functions, each
behind the boundary and, for comparison, in the check's own process as before. Prints a
table; asserts nothing.

    python bench/boundary.py [--calls 5000]

Measured 2026-12-06 on the 2-core development machine, shared with five other sessions (so
every figure is an upper bound; single runs vary by 2x):

                              host start+load   one call  with callback  differential x100
    behind the boundary              102.2 ms      44 us         110 us             560 ms
    in the check's process             0.5 ms       0 us           0 us             628 ms

A round trip (a call, its value back) is 40-50 us; a call whose argument is a check function
the agent's code calls twice is three round trips. A differential's cost is Hypothesis's own:
100 examples of two calls each add about 10 ms. The host's start is a fork plus the first
import in a forked process (its pages copied as they are touched); 100 ms is mostly this
machine's scheduling delays (the parts measure 1-10 ms each when they are not delayed).
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import textwrap
from pathlib import Path

HERE = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(HERE))

from pytest_ponybench.scoring import checks  # noqa: E402

IMPL = """
def add(a, b):
    return a + b

def twice(f):
    return f() + f()
"""

CHECK = """
import json, time
from pytest_ponybench import checklib
t0 = time.perf_counter()
module = load(FILE)
add = find_function(module, "add")
twice = find_function(module, "twice")
started = time.perf_counter() - t0
t0 = time.perf_counter()
for i in range(CALLS):
    add(i, 1)
call = (time.perf_counter() - t0) / CALLS
t0 = time.perf_counter()
for i in range(CALLS // 5):
    twice(lambda: 1)
callback = (time.perf_counter() - t0) / (CALLS // 5)
reference = add
t0 = time.perf_counter()
differential(add, reference, st.integers(), st.integers(), examples=100)
diff = time.perf_counter() - t0
with open(OUT, "w") as fh:
    json.dump({"start": started, "call": call, "callback": callback, "differential": diff}, fh)
"""


def measure(calls: int, in_process: bool) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        ws = Path(tmp) / "ws"
        ws.mkdir()
        (ws / "impl.py").write_text(IMPL)
        out = Path(tmp) / "out.json"
        code = f"CALLS = {calls}\nOUT = {str(out)!r}\n" + textwrap.dedent(CHECK)
        verdict = checks.run_checks({"correct": code}, ws, "impl.py", 120, in_process=in_process)["correct"]
        if not verdict.ok:
            raise SystemExit(f"the bench's check failed: {verdict.reason}")
        return json.loads(out.read_text())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=5000)
    args = parser.parse_args()
    rows = [("behind the boundary", measure(args.calls, False)), ("in the check's process", measure(args.calls, True))]
    print(f"{'':24} {'host start+load':>16} {'one call':>10} {'with callback':>14} {'differential x100':>18}")
    for name, r in rows:
        print(f"{name:24} {r['start'] * 1e3:13.1f} ms {r['call'] * 1e6:7.0f} us {r['callback'] * 1e6:11.0f} us "
              f"{r['differential'] * 1e3:15.0f} ms")
    print(f"(machine: {os.cpu_count()} cores; {args.calls} calls)")


if __name__ == "__main__":
    main()
