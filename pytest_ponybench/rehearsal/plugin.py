"""Rehearsal as a pytest plugin: each cell's CLI pointed at the scripted model, each arm proven.

Registered under `--ponybench-rehearse` in every process that runs cells. It starts one
ScriptedModel (rehearsal/server.py) with the first cell, gives each cell's CLI an environment
that reaches only that server, and proves each cell's arm from the server's records through
the cell hooks of hookspec.py.
"""
from __future__ import annotations

import os
import shutil
import tempfile
import threading

from pytest_ponybench.cell.lifecycle import append_text
from pytest_ponybench.cell.proof import failed_hook, plugin_markers
from pytest_ponybench.rehearsal.server import CellScript, ScriptedModel, prove_arm
from pytest_ponybench.specs.faults import Fault, parse_fault
from pytest_ponybench.specs.spec import SpecError, resolve_plugin_dir
# --- Rehearsing a cell ---------------------------------------------------------------------
# The scripted model plays each task and the server's records prove each arm. One server per
# process (the single process, or each xdist worker), started with the first cell.

REHEARSAL_KEY = "ponybench-rehearsal-not-a-real-key"
REHEARSAL_MAX_RETRIES = 2
# A plausible small file for open and fixture tasks that declare no `rehearsal:` files.
DEFAULT_FILES = {"solution.py": 'def main():\n    """Entry point."""\n    return 0\n'}
# Credentials that must never reach a rehearsal's CLI: it talks to the scripted model only.
CREDENTIAL_VARS = ("ANTHROPIC_AUTH_TOKEN", "CLAUDE_CODE_OAUTH_TOKEN", "CLAUDE_CODE_USE_BEDROCK",
                   "CLAUDE_CODE_USE_VERTEX", "ANTHROPIC_MODEL", "ANTHROPIC_SMALL_FAST_MODEL")


def rehearsal_files(task, side: str = "good") -> dict[str, str]:
    """What the scripted model writes for a task. Good (the default): its `rehearsal:` files,
    else its good reference, else a small plausible file. Bad: its bad reference, to show the
    gates catch it (a task without references has nothing bad to play and writes as for good)."""
    if side == "bad" and task.refs is not None:
        return dict(task.refs.bad)
    if task.rehearsal:
        return dict(task.rehearsal)
    if task.refs is not None:
        return dict(task.refs.good)
    return dict(DEFAULT_FILES)




class RehearsalPlugin:
    """Rehearsal as a pytest plugin, registered under --ponybench-rehearse in every process
    that runs cells: it points each cell's CLI at one ScriptedModel (started with the first
    cell) and proves the arm from the model's records, through the cell hooks of hookspec.py."""

    def __init__(self, config, arms: dict, arms_dir, side: str = "good", fault: Fault | None = None):
        self.config = config  # its hook lets a conftest adjust each cell's script
        self.arms = arms
        self.arms_dir = arms_dir
        self.side = side
        self.fault = fault  # --ponybench-rehearse-fault: played in every cell
        self.home: str | None = None  # a private HOME for the CLI, made with the server
        self.model = ScriptedModel()
        self._started = False
        self._texts: dict = {}  # arm -> (appended, context), see _arm_texts
        self._lock = threading.Lock()

    def _server(self) -> ScriptedModel:
        with self._lock:
            if not self._started:
                self.home = tempfile.mkdtemp(prefix="ponybench-rehearsal-home-")
                self.model.start()
                self._started = True
        return self.model

    def pytest_unconfigure(self, config):
        if self._started:
            self.model.stop()
            shutil.rmtree(self.home, ignore_errors=True)
            self._started = False

    def pytest_ponybench_agent_env(self, cell, workspace) -> dict[str, str]:
        files = rehearsal_files(cell.task, self.side)
        # The run's fault wins over the task's: the run option is the more deliberate choice.
        fault = self.fault or (parse_fault(cell.task.rehearsal_fault) if cell.task.rehearsal_fault else None)
        script = CellScript(writes=[(str(os.path.join(workspace, rel)), content) for rel, content in files.items()],
                            answer="Done: the change is written.", fault=fault)
        self.config.hook.pytest_ponybench_rehearsal_script(cell=cell, script=script, workspace=workspace)
        url = self._server().register(cell.id, script)
        env = {"ANTHROPIC_BASE_URL": url, "ANTHROPIC_API_KEY": REHEARSAL_KEY, "IS_SANDBOX": "1",
               # A played API error ends after 2 quick retries (about 3 s) instead of 10 slow ones.
               "CLAUDE_CODE_MAX_RETRIES": str(REHEARSAL_MAX_RETRIES),
               # The user's own ~/.claude (credentials, settings, history) stays out of a rehearsal.
               "HOME": self.home, "CLAUDE_CONFIG_DIR": os.path.join(self.home, ".claude")}
        env.update({var: "" for var in CREDENTIAL_VARS})
        return env

    def _arm_texts(self, arm) -> tuple[str | None, list[str]]:
        """(appended text, context strings) of an arm; worked out once per session, since
        proving one cell reads every arm's (plugin lookup, skills on disk)."""
        if arm not in self._texts:
            try:
                plugin_dir = resolve_plugin_dir(arm, self.arms_dir)
            except SpecError:
                plugin_dir = None
            self._texts[arm] = (append_text(arm), list(arm.proof) + plugin_markers(plugin_dir))
        return self._texts[arm]

    def pytest_ponybench_prove_arm(self, cell, workspace, transcript) -> str:
        appended, context = self._arm_texts(cell.arm)
        if cell.arm.plugin:
            try:
                plugin_dir = resolve_plugin_dir(cell.arm, self.arms_dir)
            except SpecError:
                plugin_dir = None
            broken = failed_hook(cell.arm.name, plugin_dir, getattr(transcript, "hooks", None) or [])
            if broken:  # quoted as in a real run: why the arm's text never reached the model
                self.model.forget(cell.id)
                return broken
        if cell.arm.plugin and not context:
            return (f"arm '{cell.arm.name}' has nothing that can prove it reached the model: give it "
                    f"`proof:` strings (its SessionStart context) or a plugin with skills")
        own = " ".join([appended or ""] + context)
        foreign = []
        for other in self.arms.values():
            if other.name == cell.arm.name:
                continue
            _, other_context = self._arm_texts(other)
            candidates = ([other.prompt] if other.prompt else []) + other_context
            # Text another arm shares with this one (a prompt that is a prefix of ours) proves nothing.
            foreign += [text for text in candidates if text and text not in own]
        ok, reason = prove_arm(self.model.requests(cell.id), appended, context, foreign)
        self.model.forget(cell.id)
        return "" if ok else reason
