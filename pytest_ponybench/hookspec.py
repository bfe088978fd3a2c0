"""Hooks other plugins and conftest files can implement (registered by the plugin)."""
import pytest



def pytest_ponybench_cell_record(cell, record):
    """Called on the worker after a cell is scored, before its record becomes the item's
    user properties. ``record`` is the record's JSON form (``CellRecord.to_json()``): add or
    change keys in place; values must stay JSON-safe scalars (str, int, float, bool, None),
    and the harness's fields keep their types (``RECORD_FIELDS``), since they travel to the
    xdist controller and into --junitxml. A record this leaves broken fails its cell in one
    sentence naming the field, and the harness's own record is kept."""


def pytest_ponybench_rehearsal_script(cell, script, workspace):
    """Rehearsal only: adjust the ``rehearsal.CellScript`` the scripted model plays for this
    cell (the files it writes, its answer, the usage it reports, ``stall_seconds``) in place.
    ``workspace`` is the cell's workspace: ``script.writes`` take absolute paths under it."""


@pytest.hookspec(firstresult=True)
def pytest_ponybench_agent_env(cell, workspace):
    """The environment a cell's CLI runs with, over the harness's own: a dict of strings.

    The plugin's default (a real run) adds nothing; rehearsal points the CLI at the scripted
    model. The first implementation that returns a dict wins."""


@pytest.hookspec(firstresult=True)
def pytest_ponybench_prove_arm(cell, workspace, transcript):
    """Whether the arm of a cell that finished reached the model, after the init line showed
    the right plugin: "" when proven, else one sentence saying why not (the cell is then
    `arm_unproven` and counts in no rate). ``transcript`` is the parsed ``transcript.Transcript``.
    A real run's default (``proof.HookProof``) reads the cell's hook events; rehearsal reads
    the scripted model's records.
    The first implementation that returns a string wins."""
