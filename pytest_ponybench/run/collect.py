"""Collection: task YAML files become pytest items.

Following pytest's own YAML example: a `File` collector per task yields `Item`s in a fixed,
sorted order (every xdist worker must collect the same items), and `repr_failure` prints a
plain sentence for an expected failure instead of a traceback.

- `SelftestItem` (marker `selftest`): one reference of a gated task scores as it must.
- `HarnessItem` (marker `selftest`): one of the harness's own instruments holds.
- `ReviewItem` (marker `ponybench_quality`): every line of a task's `review:` list names a check.
- `MutantsItem` (marker `ponybench_quality`): a gated task's checks kill 90% of its good
  reference's mutants, every survivor listed as equivalent (mutation.py).

`selftest` is what a run needs proven, and what a user's first `pytest -m selftest` pays for:
the references and the harness, remembered by the proof cache (gate.py). `ponybench_quality`
is the library's own quality work (minutes of CPU on a cold cache): its CI runs it, and anyone
changing a task (`pytest -m ponybench_quality`).
- `CellItem` (marker `ponybench` and the task's tags): one task x arm x model x run.
"""
from __future__ import annotations

import functools
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from pytest_ponybench.cell import transcript as transcripts
from pytest_ponybench.cell import lifecycle as cells
from pytest_ponybench.instruments import gate as instruments
from pytest_ponybench.run.controller import BUDGET_REACHED, never_ran_record
from pytest_ponybench.run.options import QUALITY
from pytest_ponybench.specs.spec import ArmSpec, SpecError, TaskSpec, load_task
from pytest_ponybench.store import record as records
from pytest_ponybench.store.record import CellRecord, RecordError
from pytest_ponybench.store.rundir import disk_full, disk_full_sentence, usd


class CellFailed(Exception):
    """A cell's expected failure: one line saying which gate failed and why."""


class _PlainFailure:
    def repr_failure(self, excinfo, style=None):
        if isinstance(excinfo.value, (CellFailed, SpecError)):
            return str(excinfo.value)
        return super().repr_failure(excinfo, style)


class TaskFile(pytest.File):
    """One task file. `state` is the session's PonybenchState (session.py), handed over when
    the collector is made, so items get what they need without reaching back for it."""

    def __init__(self, *, state, fixtures_dir: Path | None = None, **kwargs):
        super().__init__(**kwargs)
        self.state = state
        self.fixtures_dir = fixtures_dir if fixtures_dir is not None else state.settings.fixtures_dir

    def load(self) -> TaskSpec:
        return load_task(self.path, self.fixtures_dir)

    def collect(self):
        state = self.state
        try:
            task = self.load()
        except SpecError as exc:
            raise self.CollectError(str(exc)) from None
        for tag in task.tags:
            self.config.addinivalue_line("markers", f"{tag}: ponybench task tag")
        if task.gated:
            for side in ("good", "bad"):
                yield SelftestItem.from_parent(self, name=f"selftest-{side}", task=task, side=side)
            yield MutantsItem.from_parent(self, name="selftest-mutants", task=task)
        if task.review:
            yield ReviewItem.from_parent(self, name="selftest-review", task=task)
        if state.settings.rescore is not None:
            for cell, ws in state.rescore_cells(task):
                yield CellItem.from_parent(self, name=cell.id, cell=cell, state=state, rescore_workspace=ws)
        elif state.settings.enabled:
            for cell in state.cells_for(task):
                yield CellItem.from_parent(self, name=cell.id, cell=cell, state=state)


class EvalCaseFile(TaskFile):
    """One imported `claude plugin eval` case (plugin_evals.py): its case.yaml or prompt.md."""

    def load(self) -> TaskSpec:
        return self.state.evals.cases[self.path.parent.name].task


class EvalsDir(pytest.Dir):
    """A plugin's evals/ folder: one collector per case, named like the case's folder."""

    state = None

    @classmethod
    def from_parent(cls, parent, *, path, state):
        node = super().from_parent(parent, path=path)
        node.state = state
        return node

    def collect(self):
        for name, case in sorted(self.state.evals.cases.items()):
            if Path(case.task.path).parent.resolve().is_relative_to(Path(self.path).resolve()):
                yield EvalCaseFile.from_parent(self, path=case.task.path, state=self.state)


class TasksDir(pytest.Dir):
    """A tasks folder: its task files, plus (in the first one) the proofs of the harness's
    own instruments."""

    harness = True

    @classmethod
    def from_parent(cls, parent, *, path, harness: bool = True):
        node = super().from_parent(parent, path=path)
        node.harness = harness
        return node

    def collect(self):
        yield from super().collect()
        if not self.harness:
            return
        for name in ("tree-kill", "plugin-resolution"):
            yield HarnessItem.from_parent(self, name=f"harness-{name}")


_PROOFS = pytest.StashKey[dict]()


def proven_ahead(item) -> str | None:
    """The item's proof (`item.prove()`). Without xdist, the first proof item starts every
    selected one in threads, gate.proofs_at_once() at a time as the run's gate does, and each
    item reports its own: a selftest without `-n` overlaps its proofs too. Under xdist each
    worker proves its own items: the workers overlap them."""
    if hasattr(item.config, "workerinput"):
        return item.prove()
    futures = item.config.stash.get(_PROOFS, None)
    if futures is None:
        pool = ThreadPoolExecutor(max_workers=instruments.proofs_at_once())
        futures = {i.nodeid: pool.submit(i.prove) for i in item.session.items if isinstance(i, (SelftestItem, HarnessItem))}
        pool.shutdown(wait=False)
        item.config.stash[_PROOFS] = futures
    return futures[item.nodeid].result()


class SelftestItem(_PlainFailure, pytest.Item):
    def __init__(self, *, task: TaskSpec, side: str, **kwargs):
        super().__init__(**kwargs)
        self.task, self.side = task, side
        self.add_marker("selftest")

    def prove(self) -> str | None:
        key = instruments.reference_proof_key(instruments.harness_fingerprint(""), self.task, self.side)
        return instruments.proven(instruments.prove_reference, (self.task, self.side), key, instruments.cache_dir())

    def runtest(self):
        problem = proven_ahead(self)
        if problem:
            raise CellFailed(problem)

    def reportinfo(self):
        return self.path, 0, f"{self.task.name}: {self.side} reference"


class ReviewItem(_PlainFailure, pytest.Item):
    """What the reviewer checks, written down: a `review:` line that names no check is a
    requirement nothing enforces."""

    def __init__(self, *, task: TaskSpec, **kwargs):
        super().__init__(**kwargs)
        self.task = task
        self.add_marker(QUALITY)

    def runtest(self):
        uncovered = [line.requirement for line in self.task.review if not line.checks]
        self.user_properties.extend([("review_lines", len(self.task.review)), ("review_uncovered", len(uncovered))])
        if uncovered:
            raise CellFailed(f"{self.task.path}: {len(uncovered)} review line(s) name no check: "
                             + "; ".join(repr(u) for u in uncovered)
                             + " (give each a `check: axis.name` of a function decorated with @check)")

    def reportinfo(self):
        return self.path, 0, f"{self.task.name}: review lines covered"


class MutantsItem(_PlainFailure, pytest.Item):
    """The mutation score of a gated task's checks (mutation.py), remembered by the proof
    cache like a reference proof: a rerun judges only the mutants whose inputs changed."""

    def __init__(self, *, task: TaskSpec, **kwargs):
        super().__init__(**kwargs)
        self.task = task
        self.add_marker(QUALITY)

    def runtest(self):
        from pytest_ponybench.instruments import mutation

        result = mutation.score(self.task, cache=instruments.cache_dir(),
                                harness=instruments.harness_fingerprint(""))
        self.user_properties.append(("mutation_score", mutation.line(result)))
        if result.problem.startswith("no mutable"):
            pytest.skip(f"{self.task.name}: mutation score not measured: {result.problem}")
        problems = mutation.problems(result)
        if problems:
            raise CellFailed(f"{self.task.path}: mutation score {mutation.line(result)}:\n  " + "\n  ".join(problems))

    def reportinfo(self):
        return self.path, 0, f"{self.task.name}: mutation score of the checks"


class HarnessItem(_PlainFailure, pytest.Item):
    """One of gate.harness_proofs(), by the name after `harness-`."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.add_marker("selftest")

    def prove(self) -> str | None:
        proof = self.name.removeprefix("harness-")
        key = instruments.proof_key(instruments.harness_fingerprint(""), proof)
        return instruments.proven(instruments.harness_proofs()[proof], (), key, instruments.cache_dir())

    def runtest(self):
        problem = proven_ahead(self)
        if problem:
            raise CellFailed(problem)

    def reportinfo(self):
        return self.path, 0, f"harness instrument: {self.name}"


class CellItem(_PlainFailure, pytest.Item):
    def __init__(self, *, cell: cells.Cell, state, rescore_workspace: Path | None = None, **kwargs):
        super().__init__(**kwargs)
        self.cell = cell
        self.state = state
        self.rescore_workspace = rescore_workspace
        for mark in _cell_marks(cell.task.tags):
            self.add_marker(mark)
        # -k selects by task, arm and model name as well as by the cell id.
        self.extra_keyword_matches.update({cell.task.name, cell.arm.name, cell.model})

    @property
    def identity(self) -> dict:
        return cells.identity(self.cell)

    def runtest(self):
        state = self.state
        try:
            if state.settings.at_once > 1:  # several cells at once in this process (pool.py)
                from pytest_ponybench.run import pool

                record = pool.record_for(self, state)
            else:
                record = self.produce_record(state)
        except pytest.skip.Exception:
            raise
        except BaseException as exc:
            if disk_full(exc):
                # The run directory's disk is full: every later cell would fail the same way.
                # One sentence, the run stops; what is finished and spent is kept.
                sentence = disk_full_sentence(state.run_dir.path, exc)
                self.user_properties.extend(never_ran_record(self.identity, sentence).to_json().items())
                self.session.shouldstop = sentence
                raise CellFailed(sentence) from None
            # A pytest-timeout, a Ctrl-C or a harness bug: the agent's tree is already dead
            # (procs' finally); keep a record that says this cell never finished.
            self.user_properties.extend(
                never_ran_record(self.identity, f"interrupted: {type(exc).__name__}: {exc}").to_json().items())
            raise
        # Other plugins add or change fields of the JSON form; from here on only it travels.
        data = self.with_plugin_fields(record.to_json())
        self.user_properties.extend(data.items())
        fatal = transcripts.auth_failure(data)
        if fatal:  # every later cell would fail the same way: stop before the next one
            self.session.shouldstop = fatal
        if records.skipped_apart(data):
            # The model API failed, the run's budget cut the cell or an instrument failed, not
            # the agent: neither a pass nor a failure of the arm.
            pytest.skip(f"{records.status_of(data)}: {data['error']}")
        if not data["passed"]:
            raise CellFailed(data["failure"])

    def with_plugin_fields(self, record: dict) -> dict:
        """`record` after every `pytest_ponybench_cell_record`, checked here, on the worker, as
        the controller reads it (`CellRecord.from_json`): a value that cannot travel or a field
        of the wrong type fails this cell in one sentence naming the field, and the harness's
        own record is kept, instead of an INTERNALERROR that loses the run's results."""
        changed = dict(record)
        self.config.hook.pytest_ponybench_cell_record(cell=self.cell, record=changed)
        try:
            CellRecord.from_json(changed)
        except RecordError as exc:
            self.user_properties.extend(record.items())
            raise CellFailed(f"a pytest_ponybench_cell_record hook left a record that is not one: {exc}") from None
        return changed

    def produce_record(self, state) -> CellRecord:
        """Rescore, reuse or run this cell: its record. Runs in a pool thread with
        --ponybench-at-once above 1."""
        if self.rescore_workspace is not None:
            # With the run's key: the cell's kept verdicts are reused while their key holds.
            return cells.score_cell(self.cell, self.rescore_workspace, state.run_dir.key)
        if (kept := state.kept_result(self.cell)) is not None:
            return kept  # finished in an earlier session: reported, never paid twice
        self.check_budget(state)
        ctx = state.cell_context(self.config.hook)
        if ctx.max_budget_usd is not None and ctx.max_budget_usd <= 0:
            # Another worker's cell finished since the check and used up the budget:
            # skip, never start the CLI with --max-budget-usd 0 (which it rejects).
            self.check_budget(state)
        return cells.run_cell(self.cell, ctx)

    def check_budget(self, state) -> None:
        cap = state.settings.max_cost
        if cap is not None and (so_far := state.spent()) >= cap:
            pytest.skip(f"{BUDGET_REACHED}: {usd(so_far)} of {usd(cap)} spent")

    def reportinfo(self):
        return self.path, 0, f"cell {self.cell.id}"


@functools.lru_cache(maxsize=None)
def _cell_marks(tags: tuple[str, ...]) -> tuple:
    """The marks of a task's cells, made once per task instead of once per cell."""
    return tuple(getattr(pytest.mark, name) for name in ("ponybench", *tags))


def arm_placeholder(name: str) -> ArmSpec:
    """An arm that no longer has a YAML file, for rescoring an old run's cells."""
    return ArmSpec(name=name, path=None)
