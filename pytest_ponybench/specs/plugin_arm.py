"""An arm made from a plugin folder (`--ponybench-plugin PATH`), with no YAML to write.

The arm is named after the plugin (`name` in its manifest) and loads exactly that folder
with `--plugin-dir`. Its proof texts, what rehearsal looks for in every request, are what
its SessionStart hooks put in front of the model: the literal `additionalContext` text found
in each hook's command, or in the script the command runs. A plugin whose hooks print nothing
literal (a context built at run time) is proven by its skills' names, `<plugin>:<skill>`,
which the CLI lists to the model in every session.
"""
from __future__ import annotations

import hashlib
import json
import os
import re
import shlex
from pathlib import Path

from pytest_ponybench.specs.spec import NAME_RE, ArmSpec, SpecError

MANIFESTS = (".claude-plugin/plugin.json", "plugin.json")
# A JSON string value of "additionalContext", as written in a script or inside a shell-quoted
# command, where its quotes may be escaped once (\") or not at all.
CONTEXT_RE = re.compile(r'\\?"additionalContext\\?"\s*:\s*\\?"((?:[^"\\]|\\.)*?)\\?"')
MIN_PROOF = 12  # shorter literal runs could appear in any arm's requests
MAX_SCRIPT = 256 * 1024  # a hook script larger than this is not read for proof texts
PLUGIN_PARTS = (".claude-plugin", "plugin.json", "hooks", "skills", "commands", "agents", "output-styles",
                ".mcp.json", "bin", "scripts")
PLUGIN_ROOT_VARS = ("${CLAUDE_PLUGIN_ROOT}", "$CLAUDE_PLUGIN_ROOT")


def manifest(plugin: Path) -> dict:
    for rel in MANIFESTS:
        path = plugin / rel
        if path.is_file():
            try:
                data = json.loads(path.read_text(encoding="utf-8"))
            except (OSError, ValueError) as exc:
                raise SpecError(f"--ponybench-plugin {plugin}: {path} is not valid JSON: {exc}") from None
            if not isinstance(data, dict):
                raise SpecError(f"--ponybench-plugin {plugin}: {path} must hold a JSON object")
            return data
    raise SpecError(f"--ponybench-plugin {plugin}: not a Claude Code plugin (no .claude-plugin/plugin.json)")


def manifest_path(plugin: Path) -> Path:
    return next((plugin / rel for rel in MANIFESTS if (plugin / rel).is_file()), plugin / MANIFESTS[0])


def plugin_name(plugin: Path) -> str:
    name = manifest(plugin).get("name")
    if name is None or name == "":
        # The CLI loads no plugin without a name: every cell of its arm would run without it.
        raise SpecError(f"{manifest_path(plugin)}: no \"name\": the CLI does not load a plugin without one, so "
                        f"every cell of its arm would run without it; add \"name\": \"{plugin.name}\"")
    if not isinstance(name, str) or not NAME_RE.match(name) or "__" in name:
        raise SpecError(f"--ponybench-plugin {plugin}: the plugin name {name!r} must be letters, digits, '.', "
                        f"'-' or '_' without '__' to name an arm")
    return name


def _hook_sources(plugin: Path, problems: list[str] | None = None) -> list[tuple[Path, dict]]:
    """(file, {event: [groups]}) of every hooks declaration: hooks/hooks.json, and the
    manifest's `hooks` (inline, or a path to another hooks file). A file that is not valid
    JSON is named in `problems` when given."""
    files = [plugin / "hooks" / "hooks.json"]
    inline = manifest(plugin).get("hooks") if manifest_path(plugin).is_file() else None
    found = []
    if isinstance(inline, dict):
        found.append((manifest_path(plugin), inline.get("hooks", inline)))
    for extra in inline if isinstance(inline, list) else [inline] if isinstance(inline, str) else []:
        if isinstance(extra, str):
            rel = extra.replace("${CLAUDE_PLUGIN_ROOT}/", "")
            files.append(plugin / (rel[2:] if rel.startswith("./") else rel))
    for path in files:
        if not path.is_file():
            if path != files[0] and problems is not None:
                problems.append(f"{manifest_path(plugin)}: \"hooks\" names {path}, which does not exist")
            continue
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            if problems is not None:
                problems.append(f"{path}: not valid JSON ({exc}), so the CLI loads none of its hooks")
            continue
        if isinstance(data, dict):
            found.append((path, data.get("hooks", data)))
    return [(path, events) for path, events in found if isinstance(events, dict)]


def _command_hooks(plugin: Path, problems: list[str] | None = None) -> list[tuple[Path, str, str]]:
    """(declaring file, event, command) of every command hook of the plugin."""
    out = []
    for path, events in _hook_sources(plugin, problems):
        for event, groups in events.items():
            for group in groups if isinstance(groups, list) else []:
                for hook in (group.get("hooks") or []) if isinstance(group, dict) else []:
                    if isinstance(hook, dict) and hook.get("type") == "command" and isinstance(hook.get("command"), str):
                        out.append((path, str(event), hook["command"]))
    return out


def plugin_problems(plugin: Path) -> list[str]:
    """What would keep the CLI from loading the plugin as it is, or make its hooks fail: one
    sentence each, naming the file. Checked before any cell, so a broken plugin costs nothing."""
    plugin = Path(plugin).resolve()
    problems: list[str] = []
    if manifest_path(plugin).is_file():  # without one the CLI names the plugin after its folder
        try:
            plugin_name(plugin)
        except SpecError as exc:
            return [str(exc)]
    root = str(plugin)
    for path, event, command in _command_hooks(plugin, problems):
        text = command
        for var in PLUGIN_ROOT_VARS:
            text = text.replace(var, root)
        try:
            words = shlex.split(text)
        except ValueError:
            continue  # shell syntax shlex cannot read: the CLI's shell decides
        for i, word in enumerate(words):
            if not (word == root or word.startswith(root + os.sep)):
                continue  # only the plugin's own files are checked: the rest is the user's machine
            target = Path(word)
            if not target.exists():
                problems.append(f"{path}: the {event} hook runs {word}, which does not exist in the plugin")
            elif i == 0 and target.is_file() and not os.access(target, os.X_OK):
                problems.append(f"{target}: not executable, so the {event} hook of {path} fails (Permission "
                                f"denied); run chmod +x on it, or start the command with its interpreter")
    return problems


def _hook_commands(plugin: Path) -> list[str]:
    """The command of every SessionStart hook, from hooks/hooks.json or the manifest's `hooks`."""
    return [command for _path, event, command in _command_hooks(plugin) if event == "SessionStart"]


def _scripts(plugin: Path, command: str) -> list[Path]:
    """Files of the plugin a hook command names (`${CLAUDE_PLUGIN_ROOT}/hooks/start.sh`)."""
    for var in PLUGIN_ROOT_VARS:
        command = command.replace(var, str(plugin))
    found = []
    for word in re.findall(r"""[^\s'"]+""", command):
        path = Path(word) if word.startswith("/") else plugin / word
        try:
            if path.is_file() and plugin.resolve() in path.resolve().parents and path.stat().st_size <= MAX_SCRIPT:
                found.append(path)
        except OSError:
            continue
    return found


def _literal_runs(value: str) -> list[str]:
    """The parts of a context string that are fixed text: a `$VAR` or `$(...)` in it is only
    known when the hook runs, so only the literal stretches around it can be looked for."""
    text = value.replace('\\"', '"').replace("\\n", "\n").replace("\\\\", "\\")
    parts = re.split(r"\$\{[^}]*\}|\$\([^)]*\)|\$\w+|\n", text)
    return [p.strip() for p in parts if len(p.strip()) >= MIN_PROOF]


def proof_texts(plugin: Path) -> list[str]:
    """What the plugin's SessionStart hooks print, as literal text, longest stretch per hook."""
    texts = []
    for command in _hook_commands(plugin):
        bodies = [command] + [p.read_text(encoding="utf-8", errors="replace") for p in _scripts(plugin, command)]
        for body in bodies:
            for match in CONTEXT_RE.finditer(body):
                runs = _literal_runs(match.group(1))
                if runs:
                    texts.append(max(runs, key=len))
    return list(dict.fromkeys(texts))


def skill_names(plugin: Path, name: str) -> list[str]:
    skills = plugin / "skills"
    if not skills.is_dir():
        return []
    return [f"{name}:{d.name}" for d in sorted(skills.iterdir()) if (d / "SKILL.md").is_file()]


def _content_hash(plugin: Path) -> str:
    """Changes when any file of the plugin changes: a kept result of an older plugin is
    never reused by a resume."""
    digest = hashlib.sha256()
    # What the CLI loads from a plugin; never its evals/, a runs/ folder or a node_modules/
    # beside them, which change with every run or weigh hundreds of megabytes.
    parts = [plugin / name for name in PLUGIN_PARTS]
    files = [p for part in parts for p in ([part] if part.is_file() else sorted(part.rglob("*")) if part.is_dir() else [])]
    for path in (p for p in files if p.is_file()):
        digest.update(str(path.relative_to(plugin)).encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()[:12]


def plugin_arm(plugin: Path) -> ArmSpec:
    """The arm of one plugin folder. Raises SpecError naming the folder when it is no plugin
    or when nothing it sends the model could prove that it was loaded."""
    plugin = Path(plugin).resolve()
    name = plugin_name(plugin)
    proof = proof_texts(plugin) or skill_names(plugin, name)
    if not proof:
        raise SpecError(f"--ponybench-plugin {plugin}: nothing could prove the plugin reached the model: its "
                        f"SessionStart hooks print no literal additionalContext and it has no skills/*/SKILL.md")
    return ArmSpec(name=name, path=None, plugin=str(plugin), proof=tuple(proof),
                   description=f"plugin {name} from {plugin}", spec_hash=_content_hash(plugin))


def plugin_arms(folders, yaml_arms: dict[str, ArmSpec]) -> dict[str, ArmSpec]:
    """The arms of every --ponybench-plugin folder; a name taken by a YAML arm or another
    plugin is an error naming both."""
    arms: dict[str, ArmSpec] = {}
    for folder in folders:
        arm = plugin_arm(folder)
        other = yaml_arms.get(arm.name) or arms.get(arm.name)
        if other is not None:
            where = other.path or other.plugin
            raise SpecError(f"--ponybench-plugin {folder}: the arm name '{arm.name}' is taken by {where}; "
                            f"rename the plugin or that arm")
        arms[arm.name] = arm
    return arms
