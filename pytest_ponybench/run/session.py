"""The session's state: what every process of the session knows (settings, arms, the run
directory), kept in pytest's stash under `STATE` by plugin.py's pytest_configure.

Collection, the controller, the pool and the plugin-eval suites read it from the config; it
answers what a cell needs from the session (its cells, its budget, its context).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import pytest

from pytest_ponybench.cell import agent, confine as confinement, lifecycle
from pytest_ponybench.cell.lifecycle import Cell, CellContext
from pytest_ponybench.run import options
from pytest_ponybench.run.collect import arm_placeholder
from pytest_ponybench.run.fleet import WorkerFleet
from pytest_ponybench.specs import library
from pytest_ponybench.specs.spec import ArmSpec, TaskSpec
from pytest_ponybench.store.rundir import RunDir

STATE = pytest.StashKey["PonybenchState"]()


@dataclass
class PonybenchState:
    """What every process of the session knows: the settings, the arms, the run directory."""

    settings: options.Settings
    arms: dict[str, ArmSpec] = field(default_factory=dict)
    model_ids: dict[str, str] = field(default_factory=dict)
    run_dir: RunDir | None = None
    claude: str | None = None
    claude_version: str = ""
    is_worker: bool = False  # an xdist worker: other cells run beside this process's
    fleet: WorkerFleet | None = None  # a remote worker: the run's spend comes from the controller
    task_folders: list = field(default_factory=list)  # library.TaskFolder: the project's, the shipped
    default_arms: list[str] | None = None  # with --ponybench-plugin: the reference arm and the plugins'
    evals: object = None  # plugin_evals.EvalSuites: the imported claude plugin eval cases
    rescore_kept: list | None = None  # a rescore's cell.rescore_survey of the run, made once

    def selected_arms(self) -> list[ArmSpec]:
        names = self.settings.arms or self.default_arms or sorted(self.arms)
        return [self.arms[name] for name in names]

    def arms_for(self, task: TaskSpec) -> list[ArmSpec]:
        """An imported eval case runs with its plugin's arm and the reference arm only (those
        of them --arms selects); a task with every selected arm."""
        selected = self.selected_arms()
        own = self.evals.arms_for(task.name, self.settings.reference) if self.evals is not None else None
        return selected if own is None else [a for a in selected if a.name in own]

    def cells_for(self, task: TaskSpec) -> list[Cell]:
        return [Cell(task, arm, model, self.model_ids.get(model, model), run)
                for arm in self.arms_for(task)
                for model in self.settings.models
                for run in range(self.settings.runs)]

    def all_tasks(self) -> list[tuple[Path, Path | None]]:
        """Every task file of the run with its fixtures folder, then every imported case
        (fixtures None): what the controller validates and the run is made of."""
        found = library.all_task_files(self.task_folders)
        if self.evals is not None:
            found += [(case.task.path, None) for case in self.evals.cases.values()]
        return found

    def rescore_cells(self, task: TaskSpec) -> list[tuple[Cell, Path]]:
        """The kept cells of `task` whose records verify under the run's key (the controller
        names the others, once: cell.refused_lines)."""
        found = []
        for kept in self.rescore_survey():
            ident, ws = kept.identity, kept.ws
            if ident.get("task") != task.name or ident.get("cell") != ws.name:
                continue  # another task's, or a stale copy kept aside by a resume
            if kept.problem is not None:
                continue
            arm = self.arms.get(ident.get("arm")) or arm_placeholder(str(ident.get("arm")))
            found.append((Cell(task, arm, str(ident["model"]), str(ident["model_id"]), int(ident["run"])), ws))
        return found

    def rescore_survey(self) -> list:
        """The run's kept cells with their records verified (cell.rescore_survey), once per
        process: the controller's refused lines and every task's collection read it."""
        if self.rescore_kept is None:
            self.rescore_kept = lifecycle.rescore_survey(self.run_dir)
        return self.rescore_kept

    def kept_result(self, cell: Cell) -> dict | None:
        """Under --ponybench-resume, this cell's finished record from the kept run (never paid
        twice); a remote worker has the controller's, sent with its shipment."""
        if self.fleet is not None:
            return self.fleet.kept_result(cell)
        if self.settings.resume is None:
            return None
        return lifecycle.kept_result(cell, self.run_dir)

    def spent(self) -> float:
        """What the run has spent so far, as far as this process can know."""
        return self.fleet.spent() if self.fleet is not None else self.run_dir.spent()

    def cell_budget(self) -> float | None:
        """The CLI's --max-budget-usd for the next cell: the per-cell cap, and never more than
        what is left of the run's budget."""
        return self.cell_caps()[0]

    def cell_caps(self) -> tuple[float | None, bool]:
        """(the CLI's --max-budget-usd for the next cell, whether it is the run's remainder).

        The remainder binds when it is below the per-cell cap (or there is none): a cell the CLI
        then stops is cut by the run's budget, an accident of the order cells ran in
        (`budget_cut`, left out of the rates). A cell stopped by the per-cell cap, which every
        cell of the run ran under alike, stays a failed run of its arm (`cli_error`)."""
        cell_cap = self.settings.max_cell_cost
        if self.settings.max_cost is None:
            return cell_cap, False
        left = max(self.settings.max_cost - self.spent(), 0.0)
        if cell_cap is not None and cell_cap <= left:
            return cell_cap, False
        return left, True

    def confined(self) -> bool:
        """Whether this process's cells run the agent in the sandbox: always with
        --ponybench-confine (which stops where bubblewrap cannot), never with
        --ponybench-no-confine, else where the trial sandbox of this host worked."""
        if self.settings.confine is False:
            return False
        box = confinement.sandbox()
        if self.settings.confine is True and not box.works:
            raise agent.CliMissing(f"--ponybench-confine: {box.problem}")
        return box.works

    def agent_limits(self):
        """The cgroup limits of each cell's agent (agent.AgentLimits)."""
        return agent.AgentLimits(memory=self.settings.agent_memory, pids=self.settings.agent_pids)

    def cell_context(self, hook) -> CellContext:
        budget, run_cut = self.cell_caps()
        return CellContext(run_dir=self.run_dir, claude=self.claude, timeout=self.settings.timeout,
                           arms_dir=self.settings.arms_dir, hook=hook, rehearsal=self.settings.rehearse,
                           max_budget_usd=budget, run_cut=run_cut, confine=self.confined(),
                           agent_limits=self.agent_limits(),
                           exclusive=not self.is_worker and self.settings.at_once == 1,
                           retries=self.settings.retries, retry_wait=self.settings.retry_wait,
                           max_cost=self.settings.max_cost, spent=self.spent)


def state_of(config) -> PonybenchState:
    return config.stash[STATE]
