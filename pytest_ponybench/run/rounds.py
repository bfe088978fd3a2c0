"""Runs in rounds until each comparison is decided (`--ponybench-until-decided`), and the plan
before any spend (`--ponybench-plan`).

Rounds need no new machinery: the cells of run index r are round r. With
`--ponybench-until-decided` the run collects `--ponybench-max-runs` runs of every cell, ordered
round by round (all of round 0, then all of round 1, ...), and before a cell of round r starts,
`RoundsPlugin` reads the sealed results of rounds before r from the run directory and asks
`sequential.decide` about the cell's comparisons. A cell none of whose comparisons is still
undecided is skipped with "decided". Reading the sealed results (rather than this process's
reports) means every local xdist worker, and a resume, sees the same data.

A comparison is an arm against the reference on one task x model, on one axis (correct, safe)
the task has a check for. An arm's cell runs while any of its axes is undecided and none is
decided worse (`still_open`); a reference cell runs while any arm on its task x model runs. The caps are hard: no cell beyond
`--ponybench-max-runs`, and `--ponybench-max-cost` skips cells as in any run.

One module on purpose (about 540 lines): the plan and the rounds read the same counts per
comparison and the same sequential decision (sequential.py); the plan is the rounds' first
step, printed instead of run.
"""
from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass
from pathlib import Path

import pytest

# The options' table and their values are options.py's: declaring options imports no more.
from pytest_ponybench.run.options import RoundSettings, round_settings as settings  # noqa: F401 (rounds.RoundSettings)
from pytest_ponybench.specs.spec import PASS_AXES
from pytest_ponybench.store.rundir import SUMMARY_MD, read_jsonl, usd, write_atomic

DECIDED = "decided"


def _power():
    """power.py, imported when first needed (numpy, as _seq)."""
    from pytest_ponybench.reports import power

    return power


def _seq():
    """sequential.py, imported when first needed: it needs numpy, which a worker running
    cells without --ponybench-until-decided never imports (tests/test_collect_scope.py)."""
    from pytest_ponybench.reports import sequential

    return sequential

# The axes the rounds decide on: those that decide a cell's pass/fail. robust is reported,
# but never holds a sequential run open (it would buy rounds for what the ticket never asked).
AXES = PASS_AXES
SEQUENTIAL_JSON = "sequential.json"


# --------------------------------------------------------------------------- decisions


def axes_of(records: list[dict]) -> list[str]:
    return [a for a in AXES if any(r.get(a) is not None for r in records)]


def pairs(arm: dict[int, dict], reference: dict[int, dict], axis: str, before: int | None = None) -> list[float]:
    """Paired differences arm - reference of one axis, in round order: the rounds (below
    `before`) where both sides were measured on it."""
    from pytest_ponybench.reports.stats import UNMEASURED_STATUSES

    out = []
    for run in sorted(set(arm) & set(reference)):
        if before is not None and run >= before:
            continue
        a, b = arm[run], reference[run]
        if a.get("status") in UNMEASURED_STATUSES or b.get("status") in UNMEASURED_STATUSES:
            continue
        if a.get(axis) is None or b.get(axis) is None:
            continue
        out.append(float(a[axis]) - float(b[axis]))
    return out


@dataclass
class ComparisonResult:
    task: str
    model: str
    arm: str
    axis: str
    verdict: str
    round: int | None  # 1-based round of the decision
    rounds: int  # paired rounds seen
    low: float
    high: float
    reason: str
    method: str


def decisions(records: list[dict], reference: str, alpha: float, margin: float,
              before: int | None = None) -> list[ComparisonResult]:
    """Every comparison of the records (arm vs reference per task x model x axis), decided
    over the pairs of rounds below `before` (all when None)."""
    by_side: dict[tuple, dict[int, dict]] = {}
    for r in records:
        if isinstance(r.get("run"), int):
            by_side.setdefault((r.get("task"), r.get("model"), r.get("arm")), {})[r["run"]] = r
    out = []
    for (task, model, arm), runs_of in sorted(by_side.items(), key=lambda kv: tuple(map(str, kv[0]))):
        if arm == reference or (task, model, reference) not in by_side:
            continue
        ref = by_side[(task, model, reference)]
        mine = []
        for axis in axes_of(list(runs_of.values()) + list(ref.values())):
            d = _seq().decide(pairs(runs_of, ref, axis, before), alpha, margin)
            mine.append(ComparisonResult(task, model, arm, axis, d.verdict, d.round, d.rounds,
                                         d.low, d.high, d.reason(margin), d.method))
        worse = [c for c in mine if c.verdict == _seq().WORSE]
        for c in mine:
            if worse and not c.round:
                c.reason = (f"stopped with its arm, worse on {worse[0].axis} at round {worse[0].round}; "
                            + c.reason)
        out += mine
    return out


def still_open(verdicts: dict[str, str]) -> list[str]:
    """The axes of one arm's comparisons (axis -> verdict) that still need rounds: none once any
    axis is decided worse (a gate would reject the arm: more rounds cannot redeem it), else
    the undecided ones."""
    if _seq().WORSE in verdicts.values():
        return []
    return [axis for axis, verdict in verdicts.items() if verdict == _seq().UNDECIDED]


def family_note(comparisons: int, alpha: float) -> str:
    """The error over the whole family of comparisons, stated (docs/sequential.md): each is
    decided at alpha, so the chance of at least one wrong decision is at most m * alpha."""
    if comparisons <= 1:
        return f"1 comparison at alpha {alpha:g}"
    return (f"{comparisons} comparisons, each at alpha {alpha:g}: the chance of at least one wrong decision "
            f"among them is at most {min(1.0, comparisons * alpha):.2g} (Bonferroni); for a family-wide "
            f"{alpha:g} give --ponybench-alpha {alpha / comparisons:.2g}")


def equivalence_note(alpha: float, margin: float, cap: int) -> str:
    """When "equivalent" can first be reached, with a warning when the cap is below it."""
    earliest = _seq().earliest_equivalence(alpha, margin)
    if earliest is None:
        return f"'equivalent' within +-{margin:g} cannot be reached within 2000 rounds at alpha {alpha:g}"
    note = f"'equivalent' within +-{margin:g} can be reached at round {earliest} at the earliest (every pair equal)"
    if cap < earliest:
        note += (f"; WARNING: the cap of {cap} rounds is below it, so equal arms run to the cap: only "
                 f"differences stop early (raise --ponybench-max-runs or --ponybench-margin)")
    return note


class RoundsPlugin:
    """Registered in every process that runs cells under --ponybench-until-decided."""

    def __init__(self, state, config):
        self.state = state
        self.config = config
        self.s = settings(config)
        self.found: dict[str, dict] = {}  # finished records read so far (they never change)
        self.present: dict[tuple[str, str], set[str]] = {}

    @pytest.hookimpl(trylast=True)
    def pytest_collection_modifyitems(self, session, config, items):
        """Round by round: all of round 0 first, then round 1, ... (a stable sort, the same in
        every xdist worker)."""
        items.sort(key=lambda i: getattr(getattr(i, "cell", None), "run", -1))
        # The arms whose cells this session runs per task x model (after -k and -m): a
        # reference cell serves only those, not an arm deselected here that would never decide.
        self.present = {}
        for item in items:
            cell = getattr(item, "cell", None)
            if cell is not None:
                self.present.setdefault((cell.task.name, cell.model), set()).add(cell.arm.name)

    def record(self, cell) -> dict | None:
        from pytest_ponybench.cell.lifecycle import finished_record

        if cell.id in self.found:
            return self.found[cell.id]
        run_dir = self.state.run_dir
        record = finished_record(run_dir.cell_dir(cell.id), run_dir, move=False)
        if record is not None and record.spec_hash == cell.spec_hash:
            self.found[cell.id] = record.to_json()  # what the comparisons count (record.outcome)
            return self.found[cell.id]
        return None

    def side(self, cell, arm, upto: int) -> dict[int, dict]:
        from dataclasses import replace

        out = {}
        for run in range(upto):
            r = self.record(replace(cell, arm=arm, run=run))
            if r is not None:
                out[run] = r
        return out

    def open_comparisons(self, cell) -> list[str]:
        """The comparisons this cell still serves: "arm/axis" names; empty when all decided."""
        reference = self.state.settings.reference
        ref_arm = self.state.arms.get(reference)
        if ref_arm is None:
            return ["no reference arm"]
        present = self.present.get((cell.task.name, cell.model))
        others = [cell.arm] if cell.arm.name != reference else \
            [a for a in self.state.arms_for(cell.task)
             if a.name != reference and (present is None or a.name in present)]
        if not others:
            return ["nothing to compare it with: a reference alone runs every round, as a fixed design"]
        ref = self.side(cell, ref_arm, cell.run)
        axes = [a for a in AXES if a in cell.task.checks] or list(AXES)
        open_ = []
        for arm in others:
            mine = self.side(cell, arm, cell.run)
            verdicts = {axis: _seq().decide(pairs(mine, ref, axis), self.s.alpha, self.s.margin).verdict
                        for axis in axes}
            open_ += [f"{arm.name}/{axis}" for axis in still_open(verdicts)]
        return open_

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_setup(self, item):
        cell = getattr(item, "cell", None)
        if cell is None or cell.run == 0 or self.state.run_dir is None:
            return
        if not self.open_comparisons(cell):
            pytest.skip(f"{DECIDED}: every comparison this cell serves was decided before round {cell.run + 1}")


class RoundsReport:
    """Controller only: which comparison stopped at which round and why; in the terminal,
    summary.md and sequential.json."""

    def __init__(self, state, config):
        self.state = state
        self.config = config
        self.s = settings(config)
        self.results: list[ComparisonResult] = []
        self.skipped = 0

    def pytest_runtest_logreport(self, report):
        if report.skipped and report.when == "setup" and DECIDED in str(report.longrepr):
            self.skipped += 1
            # The progress line counts a decided cell as done (skipped), as it does a cell the
            # budget skipped, so its count reaches the total.
            controller = self.config.pluginmanager.get_plugin("ponybench-controller")
            printer = getattr(controller, "progress", None)
            if printer is not None:
                printer.progress.skip()
                printer.update()

    def lines(self) -> list[str]:
        if not self.results:
            return ["sequential: no comparison had records on both sides"]
        out = [f"sequential decisions (alpha {self.s.alpha:g}, margin +-{self.s.margin:g}, "
               f"cap {self.s.max_runs} rounds): {_seq().METHOD}",
               f"  {family_note(len(self.results), self.s.alpha)}"]
        for c in self.results:
            stop = (f"stopped at round {c.round}" if c.round else f"stopped after {c.rounds} rounds"
                    if c.reason.startswith("stopped with its arm") else f"ran to round {c.rounds} (the cap or the budget)")
            out.append(f"  {c.task} / {c.model} / {c.arm} vs {self.state.settings.reference} / {c.axis}: "
                       f"{stop}: {c.reason}")
        out.append(f"  {self.skipped} cells not run: their comparisons were decided")
        return out

    @pytest.hookimpl(trylast=True)
    def pytest_sessionfinish(self, session, exitstatus):
        run_dir = self.state.run_dir
        controller = self.config.pluginmanager.get_plugin("ponybench-controller")
        if run_dir is None or getattr(controller, "gathering", None) is None:
            return
        every = controller.gathering.all_records()  # the records the controller holds, one per cell
        self.results = decisions(every, self.state.settings.reference, self.s.alpha, self.s.margin)
        data = {"method": _seq().METHOD, "citation": _seq().CITATION, "alpha": self.s.alpha, "margin": self.s.margin,
                "max_runs": self.s.max_runs, "cells_not_run": self.skipped,
                "family": family_note(len(self.results), self.s.alpha),
                "earliest_equivalence": _seq().earliest_equivalence(self.s.alpha, self.s.margin),
                "comparisons": [asdict(c) for c in self.results]}
        write_atomic(run_dir.path / SEQUENTIAL_JSON, json.dumps(data, indent=2))
        md = run_dir.path / SUMMARY_MD
        if md.exists():
            text = md.read_text(encoding="utf-8")
            section = "\n## Sequential decisions\n\n" + "\n".join(
                ["| task | model | arm | axis | stopped | why |", "| --- | --- | --- | --- | --- | --- |"]
                + [f"| {c.task} | {c.model} | {c.arm} | {c.axis} | "
                   f"{'round ' + str(c.round) if c.round else 'not (cap)'} | {c.reason} |" for c in self.results]
            ) + (f"\n\n{family_note(len(self.results), self.s.alpha)}.\n\nMethod: {_seq().METHOD}.\n\n"
                 f"Citation: {_seq().CITATION}.\n")
            write_atomic(md, text.rstrip("\n") + "\n" + section)
        page = run_dir.path / "report.html"
        if page.exists():
            text = page.read_text(encoding="utf-8")
            if "</body>" in text:
                write_atomic(page, text.replace("</body>", self.html_section() + "</body>", 1))

    @pytest.hookimpl(trylast=True)
    def pytest_collection_finish(self, session):
        """After the controller's announcement: the cell count there is the cap, not the bill."""
        reporter = self.config.pluginmanager.get_plugin("terminalreporter")
        if reporter is not None and self.state.run_dir is not None:
            reporter.write_line(f"ponybench: until decided: the cells above are at most {self.s.max_runs} rounds; "
                                f"a cell whose comparisons are decided by its round is skipped, not paid "
                                f"(alpha {self.s.alpha:g}, margin +-{self.s.margin:g}); an arm stops once any "
                                f"axis is decided worse; "
                                + equivalence_note(self.s.alpha, self.s.margin, self.s.max_runs))

    def html_section(self) -> str:
        import html

        rows = "".join(
            f"<tr><td>{html.escape(c.task)}</td><td>{html.escape(c.model)}</td><td>{html.escape(c.arm)}</td>"
            f"<td>{c.axis}</td><td>{'round ' + str(c.round) if c.round else 'not (cap)'}</td>"
            f"<td>{html.escape(c.reason)}</td></tr>" for c in self.results)
        return ("<h2>Sequential decisions</h2><div class=\"scroll\"><table><thead><tr><th>task</th><th>model</th>"
                "<th>arm</th><th>axis</th><th>stopped</th><th>why</th></tr></thead><tbody>" + rows
                + f"</tbody></table></div><ul class=\"notes\"><li>Method: {html.escape(_seq().METHOD)}</li>"
                f"<li>Citation: {html.escape(_seq().CITATION)}</li>"
                f"<li>{html.escape(family_note(len(self.results), self.s.alpha))}</li>"
                f"<li>{self.skipped} cells not run: their comparisons were decided</li></ul>")

    @pytest.hookimpl(trylast=True)
    def pytest_terminal_summary(self, terminalreporter, exitstatus, config):
        if self.state.run_dir is None:
            return
        for line in self.lines():
            terminalreporter.write_line(line)


# --------------------------------------------------------------------------- the plan


@dataclass
class PlanRow:
    task: str
    model: str
    axis: str  # correct, safe or loc
    reference_value: float | None  # rate, or log-LOC spread
    source: str  # "earlier runs (n)" or "guess"
    fixed_runs: int | None  # None: more than power.LIMIT
    sequential_cap: int | None
    sequential_mean: float | None
    power: float | None = None  # what fixed_runs buy under the report's test (power.py)
    direction: str = ""  # rise or drop (rates): the harder one, which the runs are sized for
    family: int = 1  # m: the per-task tests of one arm on the model; the runs are sized at alpha / m


def history(base: Path, rehearsal: bool, reference: str) -> dict[tuple[str | None, str | None], list[dict]]:
    """Reference records of earlier kept runs under `base` per (task, model), same kind of run
    (a rehearsal's figures never stand in for a real run's, nor back)."""
    out: dict[tuple[str | None, str | None], list[dict]] = {}
    for results in sorted(Path(base).glob("*/results.jsonl")):
        for r in read_jsonl(results):
            if r.get("arm") == reference and bool(r.get("rehearsal")) == rehearsal:
                out.setdefault((r.get("task"), r.get("model")), []).append(r)
    return out


def family_sizes(selection) -> dict[str, int]:
    """Per model: the per-task tests of one arm (each rate axis a task checks, and LOC), the
    family its multiplicity rule adjusts over."""
    out: dict[str, int] = {}
    for task, model in selection:
        out[model] = out.get(model, 0) + len([a for a in AXES if a in task.checks]) + 1
    return out


def plan_rows(selection, s: RoundSettings, earlier: dict) -> list[PlanRow]:
    """Rows per (task, model) of `selection`: each rate axis the task checks, then LOC. The
    fixed runs are sized for the report's own tests at alpha / m (power.py), m the model's
    family of per-task tests."""
    from statistics import stdev

    from pytest_ponybench.reports import power
    from pytest_ponybench.reports.stats import UNMEASURED_STATUSES

    family = family_sizes(selection)
    rows = []
    for task, model in selection:
        level = s.alpha / family[model]
        recs = [r for r in earlier.get((task.name, model), []) if r.get("status") not in UNMEASURED_STATUSES]
        for axis in [a for a in AXES if a in task.checks]:
            values = [r[axis] for r in recs if r.get(axis) is not None]
            rate = sum(values) / len(values) if values else None
            source = f"earlier runs ({len(values)})" if values else "none: taken at 50%"
            # Rounded so that tasks with nearly the same rate share one (cached) computation.
            fixed = power.rate_runs(round(0.5 if rate is None else rate, 2), s.plan_difference, level, s.plan_power)
            sp = _seq().plan_rounds(0.5 if rate is None else rate, s.plan_difference, s.plan_power, s.alpha, s.margin)
            rows.append(PlanRow(task.name, model, axis, rate, source, fixed.runs, sp.cap, sp.mean_rounds,
                                fixed.power, fixed.direction, family[model]))
        logs = [math.log(r["total_loc"]) for r in recs if isinstance(r.get("total_loc"), int) and r["total_loc"] > 0]
        sd = stdev(logs) if len(logs) >= 3 and stdev(logs) > 0 else None
        # The spread rounded up to a grid of 0.05: tasks share a (cached) simulation, and a
        # wider spread never asks for fewer runs.
        spread = math.ceil((sd if sd is not None else s.plan_loc_sd) * 20 - 1e-9) / 20
        loc = power.loc_runs(spread, s.plan_loc_ratio, level, s.plan_power)
        rows.append(PlanRow(task.name, model, "loc", sd if sd is not None else s.plan_loc_sd,
                            f"earlier runs ({len(logs)})" if sd is not None else "guess (--ponybench-plan-loc-sd)",
                            loc.runs, None, None, loc.power, loc.direction, family[model]))
    return rows


def plan_lines(rows: list[PlanRow], arms_by: dict, costs: dict, s: RoundSettings, rehearsal: bool) -> list[str]:
    """The plan as terminal lines: one per task x model x axis, then the totals per design.
    `arms_by`: (task, model) -> the selected arms of its cells."""
    arms = sorted({a for names in arms_by.values() for a in names})
    out = [f"ponybench plan: runs per arm to detect a {s.plan_difference * 100:.0f} point rate difference "
           f"and a LOC ratio of {s.plan_loc_ratio:g}, power {s.plan_power:g}, alpha {s.alpha:g}, "
           f"{len(arms)} arms ({', '.join(arms)}); nothing was run",
           "  | task | model | axis | reference | from | fixed runs per arm | power | sized for | sequential cap "
           "| sequential mean |",
           "  | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for r in rows:
        ref = "-" if r.reference_value is None else (f"sd {r.reference_value:.2f}" if r.axis == "loc"
                                                     else f"{r.reference_value * 100:.0f}%")
        cap = "-" if r.sequential_cap is None else str(r.sequential_cap)
        mean = "-" if r.sequential_mean is None else f"{r.sequential_mean:.1f}"
        fixed = f"more than {_power().LIMIT}" if r.fixed_runs is None else str(r.fixed_runs)
        achieved = "-" if r.power is None else f"{r.power:.2f}"
        out.append(f"  | {r.task} | {r.model} | {r.axis} | {ref} | {r.source} | {fixed} | {achieved} | "
                   f"{r.direction or '-'} | {cap} | {mean} |")
    fixed_cells = seq_cells = 0
    fixed_cost = seq_cost = 0.0
    unknown = set()
    for key in sorted({(r.task, r.model) for r in rows}):
        mine = [r for r in rows if (r.task, r.model) == key]
        rate_rows = [r for r in mine if r.axis != "loc"]
        fixed_runs = max((_power().LIMIT if r.fixed_runs is None else r.fixed_runs) for r in mine)
        capped = max(((r.sequential_cap or 0) for r in rate_rows), default=0)
        width = len(arms_by.get(key, ()))
        fixed_cells += fixed_runs * width
        seq_cells += capped * width
        cost = costs.get(key, s.plan_cell_cost)
        if cost is None:
            unknown.add(key)
            continue
        fixed_cost += fixed_runs * width * cost
        seq_cost += capped * width * cost
    money = "simulated USD (rehearsal)" if rehearsal else "USD"
    source = ("cost per cell from earlier kept runs of each task and model"
              + (f", else the guess {usd(s.plan_cell_cost)}" if s.plan_cell_cost is not None else ""))
    missing = f"; {len(unknown)} task x model without a cost (give --ponybench-plan-cell-cost)" if unknown else ""
    if unknown and len(unknown) == len({(r.task, r.model) for r in rows}):
        fixed_money = seq_money = "cost unknown: no earlier kept run of these tasks and models (give --ponybench-plan-cell-cost)"
    else:
        fixed_money = f"{usd(fixed_cost)} {money} ({source}{missing})"
        seq_money = f"{usd(seq_cost)} {money}"
    out.append(f"fixed design: {fixed_cells} cells, {fixed_money}")
    out.append(f"sequential (--ponybench-until-decided), at most: {seq_cells} cells, {seq_money}; "
               f"it stops earlier where the data decide")
    families = ", ".join(f"{model}: m = {m}" for model, m in sorted({(r.model, r.family) for r in rows}))
    out.append(f"method, fixed rates: runs per arm from the reference's rate (50% without earlier runs), "
               f"{_power().RATE_METHOD} ({families}; power {s.plan_power:g}); where many of an arm's tasks "
               f"differ, BH's threshold nears alpha and fewer runs suffice")
    out.append(f"method, LOC: {_power().LOC_METHOD}, sd of log total_loc from earlier runs of the reference "
               f"(>= 3 runs), else the guess, rounded up to 0.05")
    out.append(f"method, sequential: {_seq().METHOD}, alpha {s.alpha:g} per comparison; cap = the round by "
               f"which a seeded simulation ({_seq().PLAN_EXPERIMENTS} experiments) decided the difference in "
               f"{s.plan_power:g} of them, the larger of a rise and a drop; "
               + equivalence_note(s.alpha, s.margin, s.max_runs))
    return out


class PlanPlugin:
    """--ponybench-plan: the session only collects (as `--co` does: no gate, no run directory,
    no cell), so -k, -m and paths select the plan's cells as they would a run's; the plan is
    printed when collection ends, and the session stops there."""

    def __init__(self, state, config):
        self.state = state
        self.config = config

    @pytest.hookimpl(tryfirst=True)  # before --co's listing of every cell
    def pytest_collection_finish(self, session):
        from pytest_ponybench.store.rundir import cost_history

        state, s = self.state, settings(self.config)
        tasks, arms_by = {}, {}
        for item in session.items:
            cell = getattr(item, "cell", None)
            if cell is None:
                continue
            tasks[cell.task.name] = cell.task
            arms_by.setdefault((cell.task.name, cell.model), set()).add(cell.arm.name)
        earlier = history(state.settings.dir, state.settings.rehearse, state.settings.reference)
        costs = cost_history(state.settings.dir, None, state.settings.rehearse)
        rows = plan_rows([(tasks[t], m) for t, m in sorted(arms_by)], s, earlier)
        lines = plan_lines(rows, {k: sorted(v) for k, v in arms_by.items()}, costs, s, state.settings.rehearse)
        if not arms_by:
            lines = ["ponybench plan: no cell selected (check -k, -m, --arms and the tasks folder); nothing was run"]
        reporter = self.config.pluginmanager.get_plugin("terminalreporter")
        for line in lines:
            if reporter is not None:
                reporter.write_line(line)
            else:
                print(line)
        pytest.exit("ponybench plan printed; no cell was run", returncode=0)


def register(state, config) -> None:
    """Called from hooks.configure once the state is made."""
    s = settings(config)
    if s.plan and not hasattr(config, "workerinput"):
        # Collect only: the controller's gate and every cell stay out, as under --co.
        config.option.collectonly = True
        config.pluginmanager.register(PlanPlugin(state, config), "ponybench-plan")
        return
    if s.until_decided and state.settings.rescore is None:
        if state.settings.at_once > 1:
            # The pool starts cells ahead of pytest's setup, where the decision is made: it
            # would pay for cells of comparisons already decided.
            raise pytest.UsageError(
                f"--ponybench-until-decided runs cells one round after another and cannot start cells ahead: "
                f"drop --ponybench-at-once {state.settings.at_once} (use -n N for cells side by side)")
        config.pluginmanager.register(RoundsPlugin(state, config), "ponybench-rounds")
        if not hasattr(config, "workerinput"):
            config.pluginmanager.register(RoundsReport(state, config), "ponybench-rounds-report")
