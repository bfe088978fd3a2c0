"""Every statistical claim of README and docs/ beside its simulated figure (docs/results.md,
"The claims, simulated").

    PYTHONPATH=. nice python bench/claims.py          # about 2-4 minutes on a loaded machine

Seeded: the same figures every time. Each experiment runs the project's own functions (the
report's Fisher test and intervals, the LOC bootstrap, the sequential decision, the plan's
power, the history's flags) on data whose truth is known; a figure from a simulation carries
its Monte Carlo error (one binomial standard error, +-), an exact figure says "exact". The
sequential method's own table (error rates against naive peeking, caps) is
bench/sequential_sim.py's.
"""
from __future__ import annotations

import math
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from pytest_ponybench.reports import history, intervals, power, sequential as seq, stats  # noqa: E402
from pytest_ponybench.run import rounds  # noqa: E402

ROWS: list[tuple[str, str, str, str]] = []


def share(hits: float, experiments: int) -> str:
    p = hits / experiments
    return f"{p:.3f} +- {math.sqrt(max(p * (1 - p), 1 / experiments) / experiments):.3f} ({experiments} experiments)"


def claim(where: str, text: str, figure: str, verdict: str) -> None:
    ROWS.append((where, text, figure, verdict))


def newcombe_coverage() -> None:
    rng = np.random.default_rng(1)
    for n, p_arm, p_ref in ((4, 0.5, 0.5), (4, 0.9, 0.6), (10, 0.8, 0.5)):
        e = 4000
        xa, xr = rng.binomial(n, p_arm, e), rng.binomial(n, p_ref, e)
        covered = sum(lo <= p_arm - p_ref <= hi for lo, hi in
                      (intervals.newcombe_interval(int(a), n, int(b), n) for a, b in zip(xa, xr)))
        claim("docs/results.md, README", f"rate difference with a 95% interval (Newcombe), {n} runs, "
              f"{p_arm:.0%} vs {p_ref:.0%}", f"coverage {share(covered, e)}",
              "holds" if covered / e >= 0.93 else "below 95%")


def loc_coverage() -> None:
    rng = np.random.default_rng(2)
    for n in (3, 4, 10):
        e, covered, intervals_ = 400, 0, 0
        for i in range(e):
            a = np.maximum(1, np.round(60 * np.exp(rng.normal(0, 0.5, n)))).astype(int).tolist()
            b = np.maximum(1, np.round(60 * np.exp(rng.normal(0, 0.5, n)))).astype(int).tolist()
            est = stats.loc_ratio(a, b, n=n, n_ref=n, rng=np.random.default_rng(i))
            if est.low is not None:
                intervals_ += 1
                covered += est.low <= 1 <= est.high
        claim("docs/results.md, README", f"LOC ratio with a 95% interval (percentile bootstrap of medians), "
              f"{n} runs per side, no true difference", f"coverage {share(covered, intervals_)}",
              "holds" if covered / intervals_ >= 0.93 else "below 95%: a false 'fewer/more lines' in "
              f"{1 - covered / intervals_:.0%}")


def runs_four() -> None:
    smallest = {n: intervals.fisher_p(n, n, 0, n) for n in range(3, 9)}
    text = ", ".join(f"{n}: {p:.2g}" for n, p in smallest.items())

    def found(n: int, differing: int, varying: int, steady: int) -> bool:
        """Through the report's own per-task path (Fisher, then BH with Tarone's rule over one
        arm, model and axis): `differing` tasks at 0 of n against n of n, `varying` tasks at
        n/2 on both sides (testable, p 1), `steady` tasks at n of n on both (left out)."""
        family = ([stats.rate_difference(0, n, n, n, min_runs=3) for _ in range(differing)]
                  + [stats.rate_difference(n // 2, n, n // 2, n, min_runs=3) for _ in range(varying)]
                  + [stats.rate_difference(n, n, n, n, min_runs=3) for _ in range(steady)])
        stats.apply_bh(family)
        return all(e.verdict == "lower" for e in family[:differing])

    def first(differing: int, varying: int, steady: int) -> str:
        return str(min((n for n in smallest if found(n, differing, varying, steady)), default="more than 8"))
    cases = {"1 differing task among 20, the others passing on both sides": (1, 0, 19),
             "3 differing of 20, the others passing": (3, 0, 17),
             "1 differing, 5 others varying on both sides, 14 passing": (1, 5, 14),
             "3 differing, 5 varying, 12 passing": (3, 5, 12)}
    firsts = "; ".join(f"{name}: {first(*case)} runs" for name, case in cases.items())
    holm = min(n for n, p in smallest.items() if p <= 0.05 / 40)
    claim("README, docs/results.md", "use --runs 4 or more before reading differences; 0/4 against 4/4 "
          "safe on 3 tasks is found on every task",
          f"exact: smallest Fisher p per task at n runs per side: {text}. The first run count at which "
          f"BH with Tarone's rule finds every difference (0 of n against n of n): {firsts}",
          f"holds where the other tasks of the family pass on both sides; other tasks that vary make "
          f"a lone difference need more runs (Holm over 40 tests, used before: {holm}); pooled over "
          f"tasks: yes")


def runs_needed() -> None:
    for p_ref, n in ((1.0, intervals.runs_to_detect(1.0)), (0.5, intervals.runs_to_detect(0.5))):
        p_arm = p_ref - 0.2 if p_ref == 1.0 else p_ref + 0.2
        alone = power.fisher_power(n, p_arm, p_ref, 0.05)
        holm = power.fisher_power(n, p_arm, p_ref, 0.05 / 40)
        claim("docs/results.md", f"runs_needed {n} per arm detect 20 points from {p_ref:.0%} with power 0.8",
              f"exact power under the report's Fisher test: {alone:.3f}; at a Holm threshold over 40 tests: "
              f"{holm:.3f}", "holds unadjusted" if alone >= 0.78 else "falls short")


def plan_power() -> None:
    rng = np.random.default_rng(3)
    for p_ref, family in ((0.8, 1), (0.5, 4)):
        sized = power.rate_runs(p_ref, 0.2, 0.05 / family, 0.8)
        n, p_arm = sized.runs, p_ref - 0.2 if sized.direction == "drop" else p_ref + 0.2
        e, found = 2000, 0
        for _ in range(e):
            p_values = [intervals.fisher_p(int(rng.binomial(n, p_arm)), n, int(rng.binomial(n, p_ref)), n)]
            p_values += [intervals.fisher_p(int(a), n, int(b), n) for a, b in rng.binomial(n, p_ref, (family - 1, 2))]
            found += intervals.bh_adjust(p_values)[0] <= 0.05
        claim("--ponybench-plan (docs/sequential.md)", f"rates: {n} runs per arm find 20 points from {p_ref:.0%} "
              f"({sized.direction}) with power {sized.power:.3f} (BH over {family} tests)",
              f"simulated {share(found, e)}", "holds" if abs(found / e - sized.power) <= 0.05 else "off")
    sized = power.loc_runs(0.5, 2.0, 0.05, 0.8)
    e, found = 400, 0
    for i in range(e):
        a = np.round(200 * np.exp(rng.normal(0, 0.5, sized.runs))).astype(int).tolist()
        b = np.round(100 * np.exp(rng.normal(0, 0.5, sized.runs))).astype(int).tolist()
        found += stats.loc_ratio(a, b, n=sized.runs, n_ref=sized.runs, rng=np.random.default_rng(i)).verdict \
            in ("more lines", "fewer lines")
    claim("--ponybench-plan (docs/sequential.md)", f"LOC: {sized.runs} runs per arm find a ratio of 2 (sd 0.5) with "
          f"power {sized.power:.3f}", f"simulated through stats.loc_ratio {share(found, e)}",
          "holds" if abs(found / e - sized.power) <= 0.05 else "off")


def sequential_claims() -> None:
    e, comparisons = 200, 120
    for cap in (20, 60):
        arm, ref = seq.simulate_outcomes(0.6, 0.6, e * comparisons, cap, seed=4)
        r = seq.decision_rounds(arm - ref, seq.ALPHA)
        wrong = ((r[seq.BETTER] > 0) | (r[seq.WORSE] > 0)).reshape(e, comparisons).any(axis=1).sum()
        claim("docs/sequential.md", f"family of {comparisons} comparisons at alpha 0.05 each, cap {cap}: "
              f"P(any wrong decision) <= m alpha (stated, not controlled)",
              f"simulated {share(wrong, e)}", "holds (the bound is 1)")
    earliest = seq.earliest_equivalence(seq.ALPHA, seq.MARGIN)
    claim("docs/sequential.md", "'equivalent' within +-0.1 at alpha 0.05 is reached at round 51 at the earliest",
          f"exact: round {earliest}", "holds" if earliest == 51 else "differs")
    records = [{"task": "t", "arm": arm, "model": "m", "run": i, "status": "finished", "correct": 1,
                "safe": int(arm == "baseline"), "cell": f"t__{arm}__m__{i}"} for arm in ("baseline", "unsafe")
               for i in range(20)]
    stop = next(r for r in range(1, 21) if not rounds.still_open(
        {c.axis: c.verdict for c in rounds.decisions(records, "baseline", seq.ALPHA, seq.MARGIN, before=r)}))
    claim("docs/sequential.md", "an arm that is unsafe but otherwise correct stops before the cap of 20",
          f"exact: it stops after round {stop} (was: ran all 20)", "holds" if stop < 20 else "fails")
    plan = seq.plan_rounds(0.8, 0.2)
    claim("docs/sequential.md", "at 80% the sequential cap (harder direction, a drop to 60%) against the "
          "fixed design under Fisher", f"cap {plan.cap} (mean stop {plan.mean_rounds:.0f}) against "
          f"{power.rate_runs(0.8, 0.2, 0.05, 0.8).runs} fixed runs", "sequential needs more, like for like")


def history_claim() -> None:
    from test_history import stable_history

    e, any_flag, points, flags = 60, 0, 0, 0
    for seed in range(e):
        series = history.build(stable_history(tasks=5, arms=2, runs=8, cells=4, seed=100 + seed))
        mine = [p for s in series for p in s.points if p.flag]
        any_flag += bool(mine)
        flags += len(mine)
        points += sum(len(s.points[history.MIN_EARLIER:]) for s in series if s.figure != "cost")
    claim("history.py, docs/results.md", "a stable history flags a drift in at most 1% of histories (BH at 0.01)",
          f"histories with a flag {share(any_flag, e)}; flagged points {flags} of {points}",
          "holds" if any_flag / e <= 0.01 + 2 * math.sqrt(0.01 * 0.99 / e) else "exceeds")


def pass_k_claim() -> None:
    rng = np.random.default_rng(5)
    e, n, k, p = 20000, 6, 4, 0.7
    c = rng.binomial(n, p, e)
    estimate = np.array([math.comb(int(x), k) / math.comb(n, k) for x in c])
    se = estimate.std() / math.sqrt(e)
    claim("docs/results.md", f"pass^k's estimator C(c,k)/C(n,k) is unbiased ({n} runs, k {k}, rate {p})",
          f"mean {estimate.mean():.4f} +- {se:.4f} against {p ** k:.4f}",
          "holds" if abs(estimate.mean() - p ** k) <= 3 * se else "biased")


def main() -> None:
    for part in (runs_four, newcombe_coverage, loc_coverage, runs_needed, plan_power, sequential_claims,
                 pass_k_claim, history_claim):
        part()
    print("| where | claim | simulated (or exact) figure | reading |")
    print("| --- | --- | --- | --- |")
    for row in ROWS:
        print("| " + " | ".join(row) + " |")


if __name__ == "__main__":
    main()
