"""The arm of a real cell, proven from its hook events.

A real run cannot read the requests the CLI sends (rehearsal does, in rehearsal/server.py), but
with `--include-hook-events` the stream holds every hook's `hook_response`: what it printed
(`stdout`, `output`), its `stderr`, `exit_code` and `outcome`. A plugin arm is proven in a
cell when:

- no hook of the arm's plugin failed (a non-zero exit or an outcome other than success means
  the plugin did not do its part: the cell ran as something else than the arm);
- each of the arm's `proof:` texts is in the output of one of its plugin's hooks, and each
  skill the plugin ships is in the init line's `skills` as `<plugin>:<skill>`;
- no other arm's proof text is in the output of any hook of the cell (a hook that fires in
  every arm, the mistake that once made a published baseline lie).

A hook event does not name the plugin it came from, so "the plugin's hooks" are the hook
events (SessionStart, PreToolUse, ...) that the plugin's `hooks/hooks.json` declares; with
the user's settings kept out (`--setting-sources project,local`), the only other source of
hooks is the workspace's own project settings.
"""
from __future__ import annotations

import json
import os


HOOKS_FILE = os.path.join("hooks", "hooks.json")
STDERR_EXCERPT = 300


def plugin_markers(plugin_dir: str | None) -> list[str]:
    """Text a plugin's skills put in front of the model: `<plugin>:<skill>` names."""
    if not plugin_dir:
        return []
    root = os.path.realpath(plugin_dir)
    try:
        with open(os.path.join(root, ".claude-plugin", "plugin.json"), encoding="utf-8") as fh:
            name = json.load(fh).get("name") or os.path.basename(root)
    except (OSError, ValueError):
        name = os.path.basename(root)
    skills_dir = os.path.join(root, "skills")
    skills = sorted(os.listdir(skills_dir)) if os.path.isdir(skills_dir) else []
    return [f"{name}:{skill}" for skill in skills if os.path.isfile(os.path.join(skills_dir, skill, "SKILL.md"))]


def plugin_hook_events(plugin_dir: str | None) -> set[str]:
    """The hook events (SessionStart, ...) a plugin declares in its hooks/hooks.json."""
    if not plugin_dir:
        return set()
    try:
        with open(os.path.join(plugin_dir, HOOKS_FILE), encoding="utf-8") as fh:
            data = json.load(fh)
    except (OSError, ValueError):
        return set()
    hooks = data.get("hooks") if isinstance(data, dict) else None
    return {str(event) for event in hooks} if isinstance(hooks, dict) else set()


def hook_text(hook: dict) -> str:
    """What a hook printed: its stdout and the CLI's `output` (which may hold both streams)."""
    return "\n".join(str(hook.get(key) or "") for key in ("stdout", "output"))


def failed(hook: dict) -> bool:
    return hook.get("exit_code") not in (0, None) or hook.get("outcome") not in ("success", None)


def _short(text: str, limit: int = 60) -> str:
    text = " ".join(str(text).split())
    return repr(text if len(text) <= limit else text[: limit - 3] + "...")


def failed_hook(arm_name: str, plugin_dir: str | None, hooks: list[dict]) -> str:
    """"" unless a hook of the arm's plugin failed in the cell; then one sentence quoting its
    stderr. Used by a real run's proof and by rehearsal's alike: a hook that fails is the
    reason the arm's text is missing, and says more than "the text is missing"."""
    events = plugin_hook_events(plugin_dir)
    for hook in (h for h in hooks if str(h.get("hook_event")) in events):
        if failed(hook):
            stderr = " ".join(str(hook.get("stderr") or "").split())[:STDERR_EXCERPT] or "(no stderr)"
            return (f"the hook {hook.get('hook_name') or hook.get('hook_event')} of the plugin of arm '{arm_name}' "
                    f"failed (exit code {hook.get('exit_code')}, outcome {hook.get('outcome')}), so the arm "
                    f"was not applied: {stderr}")
    return ""


def prove_by_hooks(arm_name: str, plugin_dir: str | None, proofs: list[str], hooks: list[dict],
                   init_skills: list[str], foreign: list[str]) -> str:
    """"" when the arm is proven by its cell's hook events, else one sentence saying why not.

    `proofs`: the arm's proof texts; `hooks`: the cell's hook_response lines; `init_skills`:
    the init line's `skills`; `foreign`: proof texts of the other arms."""
    proofs = [p for p in proofs if p and p.strip()]
    foreign = [f for f in foreign if f and f.strip()]
    if plugin_dir:
        events = plugin_hook_events(plugin_dir)
        own = [h for h in hooks if str(h.get("hook_event")) in events]
        broken = failed_hook(arm_name, plugin_dir, hooks)
        if broken:
            return broken
        skills = plugin_markers(plugin_dir)
        if not proofs and not skills:
            return (f"arm '{arm_name}' has nothing that can prove it reached the model: give it `proof:` "
                    f"strings (what its hooks print) or a plugin with skills")
        printed = "\n".join(hook_text(h) for h in own)
        for text in proofs:
            if text not in printed:
                ran = ", ".join(sorted({str(h.get("hook_name")) for h in own})) or "none ran"
                return (f"the proof text {_short(text)} of arm '{arm_name}' is in no output of its plugin's "
                        f"hooks ({ran}): the plugin never printed it")
        missing = [s for s in skills if s not in init_skills]
        if missing:
            return (f"the skill {missing[0]} of the plugin of arm '{arm_name}' is not among the skills the CLI "
                    f"loaded (the init line's `skills`)")
    for hook in hooks:
        text = hook_text(hook)
        for other in foreign:
            if other in text:
                return (f"another arm's proof text {_short(other)} is in the output of the hook "
                        f"{hook.get('hook_name') or hook.get('hook_event')}: this cell is not the arm alone")
    return ""


class HookProof:
    """The real-run default of `pytest_ponybench_prove_arm`, registered by plugin.py when a
    run is not a rehearsal: proves each finished cell's arm from its hook events."""

    def __init__(self, arms: dict, arms_dir):
        self.arms = arms
        self.arms_dir = arms_dir
        self._plugin_dirs: dict[str, str | None] = {}

    def _plugin_dir(self, arm) -> str | None:
        if arm.name not in self._plugin_dirs:
            from pytest_ponybench.specs.spec import SpecError, resolve_plugin_dir

            try:
                self._plugin_dirs[arm.name] = resolve_plugin_dir(arm, self.arms_dir)
            except SpecError:
                self._plugin_dirs[arm.name] = None
        return self._plugin_dirs[arm.name]

    def pytest_ponybench_prove_arm(self, cell, workspace, transcript) -> str:
        arm = cell.arm
        own = set(arm.proof) | ({arm.prompt} if arm.prompt else set())
        # Text another arm shares with this one proves nothing about either.
        foreign = [text for other in self.arms.values() if other.name != arm.name
                   for text in other.proof if text and not any(text in mine for mine in own)]
        init = transcript.init or {}
        skills = [str(s) for s in init.get("skills") or []]
        return prove_by_hooks(arm.name, self._plugin_dir(arm), list(arm.proof), transcript.hooks, skills, foreign)
