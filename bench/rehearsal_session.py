"""Time real `claude` sessions against the scripted model (no model API is reached).

    python bench/rehearsal_session.py [--runs 5] [--parallel 2] [--writes 2] [--claude PATH]

Each session runs in a fresh temporary workspace and HOME, with the flags and environment a
rehearsal cell uses, and the stand-in scripts `--writes` Write turns and a final answer. Prints
one line per session (wall seconds, turns, cost, the arm proof) and the median.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from pytest_ponybench.rehearsal.server import CellScript, ScriptedModel, prove_arm  # noqa: E402

MARKER = "PONYBENCH BENCH MARKER: keep it short."


def one_session(claude: str, model: ScriptedModel, index: int, writes: int) -> dict:
    with tempfile.TemporaryDirectory(prefix="ponybench-bench-") as tmp:
        ws, home = Path(tmp, "ws"), Path(tmp, "home")
        ws.mkdir()
        home.mkdir()
        key = f"bench{index}"
        script = CellScript(writes=[(str(ws / f"f{i}.py"), f"X = {i}\n") for i in range(writes)])
        url = model.register(key, script)
        env = {k: v for k, v in os.environ.items() if not k.startswith(("ANTHROPIC_", "CLAUDE"))}
        env.update(ANTHROPIC_BASE_URL=url, ANTHROPIC_API_KEY="dummy", IS_SANDBOX="1",
                   CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC="1", DISABLE_TELEMETRY="1",
                   HOME=str(home))
        argv = [claude, "-p", "Write the files.", "--model", "claude-haiku-4-5-20251001",
                "--permission-mode", "bypassPermissions", "--setting-sources", "project,local",
                "--strict-mcp-config", "--disallowedTools", "Bash",
                "--append-system-prompt", MARKER, "--output-format", "stream-json",
                "--verbose", "--no-session-persistence"]
        started = time.monotonic()
        proc = subprocess.run(argv, cwd=ws, env=env, capture_output=True, text=True,
                              timeout=90, stdin=subprocess.DEVNULL)
        wall = time.monotonic() - started
        lines = [json.loads(line) for line in proc.stdout.splitlines() if line.strip()]
        result = lines[-1] if lines else {}
        ok, why = prove_arm(model.requests(key), MARKER, [], [])
        written = all(Path(p).read_text() == c for p, c in script.writes if Path(p).exists())
        model.forget(key)
        return {"wall": wall, "rc": proc.returncode, "turns": result.get("num_turns"),
                "cost": result.get("total_cost_usd"), "proven": ok, "why": why,
                "written": written and all(Path(p).exists() for p, _ in script.writes)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--parallel", type=int, default=1)
    parser.add_argument("--writes", type=int, default=1)
    parser.add_argument("--claude", default=str(REPO / "node_modules" / ".bin" / "claude"))
    args = parser.parse_args()
    if not Path(args.claude).exists():
        print(f"no claude binary at {args.claude}: run `npm ci` in {REPO}", file=sys.stderr)
        return 2
    with ScriptedModel() as model, ThreadPoolExecutor(max_workers=args.parallel) as pool:
        started = time.monotonic()
        runs = list(pool.map(lambda i: one_session(args.claude, model, i, args.writes),
                             range(args.runs)))
        total = time.monotonic() - started
    for i, run in enumerate(runs):
        print(f"session {i}: {run['wall']:.2f} s, exit {run['rc']}, turns {run['turns']}, "
              f"cost {run['cost']}, files {'ok' if run['written'] else 'MISSING'}, "
              f"{run['why']}")
    print(f"median {statistics.median(r['wall'] for r in runs):.2f} s per session; "
          f"{args.runs} sessions, {args.parallel} at a time, in {total:.2f} s")
    return 0 if all(r["rc"] == 0 and r["proven"] and r["written"] for r in runs) else 1


if __name__ == "__main__":
    raise SystemExit(main())
