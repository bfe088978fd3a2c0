"""Print the simulation figures of the sequential decision (docs/sequential.md).

    PYTHONPATH=. python bench/sequential_sim.py

Seeded: the same figures every time. Every experiment goes through sequential.decision_rounds
(the code that stops a real run) or, for contrast, sequential.naive_rounds.
"""
from __future__ import annotations

import math
import sys
from pathlib import Path


sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from pytest_ponybench.reports import sequential as seq  # noqa: E402
from pytest_ponybench.reports.power import rate_runs  # noqa: E402

N, ROUNDS, ALPHA = 2000, 60, seq.ALPHA


def main() -> None:
    se = 3 * math.sqrt(ALPHA * (1 - ALPHA) / N)
    print(f"false-positive rate, no true difference, {N} experiments x {ROUNDS} looks, alpha {ALPHA} "
          f"(bound {ALPHA + se:.4f}):")
    print("| both rates | betting CS | naive peeking (Newcombe after every round) |")
    print("| --- | --- | --- |")
    for seed, p in enumerate((0.2, 0.5, 0.9), 11):
        arm, ref = seq.simulate_outcomes(p, p, N, ROUNDS, seed)
        r = seq.decision_rounds(arm - ref, ALPHA)
        betting = float(((r[seq.BETTER] > 0) | (r[seq.WORSE] > 0)).mean())
        naive = float((seq.naive_rounds(arm - ref, arm, ALPHA) > 0).mean())
        print(f"| {p:.1f} | {betting:.4f} | {naive:.4f} |")
    print()
    print("power 0.8, the harder of a rise and a drop: fixed design (Fisher's exact test, exact power) vs "
          "the sequential cap and its mean stopping round:")
    print("| reference | arm | fixed runs per arm | sequential cap | power at cap | mean rounds |")
    print("| --- | --- | --- | --- | --- | --- |")
    for p_ref, diff in ((0.5, 0.2), (0.8, 0.2), (0.5, 0.4), (0.3, 0.4), (0.9, 0.9), (1.0, 1.0)):
        plan = seq.plan_rounds(p_ref, diff, power=0.8, alpha=ALPHA)
        fixed = rate_runs(p_ref, diff, ALPHA, 0.8).runs
        print(f"| {p_ref:.1f} | {plan.p_arm:.1f} | {fixed} | {plan.cap} | {plan.power_at_cap:.3f} | "
              f"{plan.mean_rounds:.1f} |")
    print()
    for pattern in ([1] * 12, [-1] * 12):
        d = seq.decide(pattern, ALPHA)
        print(f"every round {pattern[0]:+d}: {d.verdict} at round {d.round}; alpha 0.2: "
              f"round {seq.decide(pattern, 0.2).round}")


if __name__ == "__main__":
    main()
