"""Time judge requests through the real `claude` CLI against the scripted judge (no model API).

    python bench/judge_requests.py [--runs 6] [--task csv_total] [--claude PATH]

Asks the rehearsal's agreeing judge to score one task's over-built judge pair submission, as
a judged cell does (judge.ask_cli: no tools, one turn), `--runs` times one after the other.
Prints one line per request (wall seconds, cost the CLI priced, the score) and the median:
what one judge vote adds to a cell (a cell asks votes x judged axes of them).
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from pytest_ponybench.judge import judge  # noqa: E402
from pytest_ponybench.run.judging import RehearsalJudge  # noqa: E402
from pytest_ponybench.specs.spec import load_task  # noqa: E402


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--runs", type=int, default=6)
    p.add_argument("--task", default="csv_total")
    p.add_argument("--claude", default=str(REPO / "node_modules" / ".bin" / "claude"))
    args = p.parse_args()
    task = load_task(REPO / "tasks" / f"{args.task}.yaml", REPO / "fixtures")
    pair = judge.pairs_for(task)[0]
    text = judge.prompt(pair.axis, task.prompt, pair.worse)
    server = RehearsalJudge(("agree", 0, None))
    walls = []
    try:
        for i in range(args.runs):
            start = time.monotonic()
            reply = judge.ask_cli(args.claude, "claude-sonnet-4-6", text, server.env)
            wall = time.monotonic() - start
            walls.append(wall)
            vote, problem = judge.parse_answer(pair.axis, reply.text)
            print(f"request {i + 1}: {wall:.2f} s, ${reply.cost_usd:.5f} (simulated), "
                  f"{reply.status}, score {vote.score if vote else problem}")
        print(f"median {statistics.median(walls):.2f} s over {len(walls)} requests; "
              f"the scripted judge answered {server.requests}")
    finally:
        server.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
