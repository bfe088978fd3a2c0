"""pytest-ponybench: benchmark Claude Code arms by the code the agent writes.

The public surface, all of it here (docs/architecture.md, "What other code may import"):

- `checklib`: the check API a task's check code uses (also importable as
  `pytest_ponybench.checklib`, the name task files use); `assert_graders`, what the checks
  generated for imported plugin evals call (`pytest_ponybench.graders`);
- `hookspec`: the hooks a plugin or a conftest implements (`pytest_ponybench_cell_record`,
  `pytest_ponybench_agent_env`, `pytest_ponybench_prove_arm`, `pytest_ponybench_rehearsal_script`),
  and the types their arguments have: `Cell`, `Transcript`, `CellScript`;
- the record: `RECORD_FIELDS` (every field of a cell record and the types its value may have),
  `STATUSES` and the sets that say which cells count (`MEASURED`, `NEVER_RAN`, `INFRA`, `CUT`,
  `INSTRUMENT`), `AXES`.

Everything else (the subpackages) is the plugin's own and may change in any release.

Each name is imported when first read: a check's process imports `pytest_ponybench.checklib`,
which imports this package first, and must not pay for the rest of the plugin.
"""
import importlib

__version__ = "0.1.0"

# name -> (module, attribute); None: the module itself
_PUBLIC = {
    "checklib": ("pytest_ponybench.scoring.checklib", None),
    "assert_graders": ("pytest_ponybench.scoring.graders", "assert_graders"),
    "hookspec": ("pytest_ponybench.hookspec", None),
    "Cell": ("pytest_ponybench.cell.lifecycle", "Cell"),
    "Transcript": ("pytest_ponybench.cell.transcript", "Transcript"),
    "CellScript": ("pytest_ponybench.rehearsal.server", "CellScript"),
    "RECORD_FIELDS": ("pytest_ponybench.store.record", "FIELDS"),
    "STATUSES": ("pytest_ponybench.store.record", "STATUSES"),
    "MEASURED": ("pytest_ponybench.store.record", "MEASURED"),
    "NEVER_RAN": ("pytest_ponybench.store.record", "NEVER_RAN"),
    "INFRA": ("pytest_ponybench.store.record", "INFRA"),
    "CUT": ("pytest_ponybench.store.record", "CUT"),
    "INSTRUMENT": ("pytest_ponybench.store.record", "INSTRUMENT"),
    "AXES": ("pytest_ponybench.store.record", "AXES"),
}
__all__ = ["__version__", *_PUBLIC]


def __getattr__(name):
    if name not in _PUBLIC:
        raise AttributeError(f"module 'pytest_ponybench' has no attribute {name!r}")
    module, attribute = _PUBLIC[name]
    value = importlib.import_module(module)
    return value if attribute is None else getattr(value, attribute)


def __dir__():
    return sorted(__all__)
