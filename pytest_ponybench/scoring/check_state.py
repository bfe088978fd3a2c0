"""Where a check's process runs: its workspace, the good reference's copy, whether the
agent's code is behind the trust boundary, and the check code's namespace.

Set at run time, in the check's process by checks.run_here (and checklib.namespace), and in a
host process by host.start_host; read at call time by host, check_boundary and checklib
(which shows them as `checklib.WORKSPACE`, ...). The one place these values live, so no layer
keeps a copy of its own that goes stale; it imports nothing of the package, so every layer
may read it.
"""
from __future__ import annotations

from pathlib import Path

WORKSPACE = Path.cwd()  # the check's working directory (checks.run_here sets it per check)
# True in a check's process (checks.run_here): the agent's code runs only in host processes
# (remote.py); `load` and `agent_module` return proxies of what they import there.
BEHIND_BOUNDARY = False
CHECK_GLOBALS: dict | None = None  # the check code's namespace: the modules it names are those it may patch
REFERENCE: Path | None = None  # the good reference's own copy, when the task has one (checks.run_here)
