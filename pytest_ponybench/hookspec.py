"""Hooks other plugins and conftest files can implement (registered by the plugin)."""


def pytest_ponybench_cell_record(cell, record):
    """Called on the worker after a cell is scored, before its record becomes the item's
    user properties. Add or change keys in ``record`` in place; values must stay JSON-safe
    scalars (str, int, float, bool, None), since they travel to the xdist controller and
    into --junitxml."""


def pytest_ponybench_rehearsal_script(cell, script):
    """Rehearsal only: adjust the ``rehearsal.CellScript`` the scripted model plays for this
    cell (the files it writes, its answer, the usage it reports, ``stall_seconds``) in place."""
