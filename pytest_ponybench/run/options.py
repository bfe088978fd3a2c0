"""Command-line options and their ini equivalents.

Each option reads the same on the command line and in `[tool.pytest.ini_options]`
(`--ponybench-timeout 120` or `ponybench_timeout = 120`); the command line wins. Bad values
are rejected by argparse types (argtypes.py) at parse time, before anything runs.
"""
from __future__ import annotations

import argparse
import os
from dataclasses import dataclass
from pathlib import Path

from pytest_ponybench.specs.argtypes import (DEFAULT_JUDGE_MODEL, DEFAULT_VOTES, agent_memory, agent_pids,
                                             confine_mode, csv_names, existing_dir, odd_votes, positive_int,
                                             positive_seconds, positive_usd, probability, ratio, rehearsal_fault,
                                             rehearsal_judge, retry_count, usd_guess, wait_seconds)


INI = {
    "ponybench_timeout": ("string", "300", "seconds one cell's agent may run before its process tree is killed"),
    "ponybench_dir": ("string", "runs", "where runs (workspaces, results, summaries) are kept"),
    "ponybench_claude": ("string", "", "the claude executable (default: claude on PATH, then node_modules/.bin/claude)"),
    "ponybench_models": ("string", "haiku", "models to run, comma-separated aliases or full ids"),
    "ponybench_arms_list": ("string", "", "arms to run, comma-separated (default: every arm in the arms folder)"),
    "ponybench_runs": ("string", "1", "runs per task x arm x model"),
    "ponybench_model_ids": ("linelist", [], "model aliases: lines of 'alias = full-model-id'"),
    "ponybench_tasks": ("string", "tasks", "folder of task YAML files, relative to the rootdir"),
    "ponybench_arms": ("string", "arms", "folder of arm YAML files, relative to the rootdir"),
    "ponybench_fixtures": ("string", "fixtures", "folder of fixture repositories, relative to the rootdir"),
    "ponybench_reference": ("string", "", "the arm every other arm is compared against in the reports (default baseline)"),
    "ponybench_max_cost": ("string", "", "US dollars the whole run may spend; no cell starts once finished cells reach it"),
    "ponybench_max_cell_cost": ("string", "", "US dollars one cell may spend (passed to the CLI as --max-budget-usd)"),
    "ponybench_plots": ("bool", False, "draw the plots of report.html (needs matplotlib)"),
    "ponybench_at_once": ("string", "", "cells one pytest process runs at once (threads; their agents wait on the model); "
                                        "default 1, for a rescore twice the machine's cores"),
    "ponybench_library": ("string", "replace", "how the project's tasks/ and arms/ combine with the shipped library: "
                                               "replace, add or off"),
    "ponybench_confine": ("string", "auto", "run the agent under bubblewrap: auto (where it works, else one line "
                                           "saying why not), true (fail where it does not) or false"),
    "ponybench_agent_memory": ("string", "4G", "memory one cell's agent (the CLI and all it starts) may use together, "
                                               "in a cgroup of its own where the machine has cgroups"),
    "ponybench_agent_pids": ("string", "1024", "processes and threads one cell's agent may hold at once, in the same "
                                               "cgroup"),
    "ponybench_retries": ("string", "2", "times a cell that ended as an infra error (the model API failed) runs again"),
    "ponybench_retry_wait": ("string", "10", "seconds before the first retry of an infra error (doubling each time); "
                                             "also how long a 429 pauses every worker's next cell"),
    "ponybench_judge": ("bool", False, "judge every cell on over_engineering and completeness (judge.py)"),
    "ponybench_judge_model": ("string", DEFAULT_JUDGE_MODEL, "the judge's model: an alias or a full claude-... id"),
    "ponybench_judge_votes": ("string", str(DEFAULT_VOTES), "judge answers per axis; the median counts (odd)"),
}


def add_run_options(group) -> None:
    group.addoption("--ponybench", action="store_true", default=False,
                    help="collect and run benchmark cells (without it nothing can spend)")
    group.addoption("--models", type=csv_names, default=None, metavar="M1,M2",
                    help="models: aliases (haiku, sonnet, opus) or full ids [ini ponybench_models, default haiku]")
    group.addoption("--arms", type=csv_names, default=None, metavar="A1,A2",
                    help="arms to run [ini ponybench_arms_list, default: all in arms/]")
    group.addoption("--runs", type=positive_int, default=None, metavar="N",
                    help="runs per task x arm x model [ini ponybench_runs, default 1]")
    group.addoption("--ponybench-timeout", type=positive_seconds, default=None, metavar="SECONDS",
                    help="per-cell agent timeout; the whole process tree is killed [ini ponybench_timeout, default 300]")
    group.addoption("--ponybench-retries", type=retry_count, default=None, metavar="N",
                    help="run a cell again (from a fresh seed) up to N times when the model API failed it "
                         "[ini ponybench_retries, default 2]")
    group.addoption("--ponybench-at-once", type=positive_int, default=None, metavar="N",
                    help="cells one pytest process runs at once, in threads: 32 cells at once need one "
                         "process, not 32 xdist workers [ini ponybench_at_once, default 1; for "
                         "--ponybench-rescore twice the machine's cores]")


def plugin_dir(value: str) -> Path:
    """A Claude Code plugin directory: it holds .claude-plugin/plugin.json (or plugin.json)."""
    path = Path(value).expanduser()
    if not path.is_dir():
        raise argparse.ArgumentTypeError(f"{value} is not a directory; give the folder of a Claude Code plugin")
    if not ((path / ".claude-plugin" / "plugin.json").is_file() or (path / "plugin.json").is_file()):
        raise argparse.ArgumentTypeError(
            f"{value} is not a Claude Code plugin: it has no .claude-plugin/plugin.json; give the plugin's root folder")
    return path.resolve()


def library_mode(value: str) -> str:
    from pytest_ponybench.specs.library import MODES

    if value not in MODES:
        raise argparse.ArgumentTypeError(f"'{value}' is not one of {', '.join(MODES)}")
    return value


def add_library_options(group) -> None:
    group.addoption("--ponybench-library", type=library_mode, default=None, metavar="replace|add|off",
                    help="how the project's own tasks/ and arms/ combine with the shipped library: replace "
                         "(the project's folder when it has one, else the shipped one), add (both), off "
                         "(the project's only) [ini ponybench_library, default replace]")
    group.addoption("--ponybench-plugin", type=plugin_dir, action="append", default=None, metavar="PATH",
                    help="an arm from a Claude Code plugin folder, no YAML needed (repeatable); its evals/ "
                         "cases become tasks run with it and with baseline")


def add_rehearsal_options(group) -> None:
    group.addoption("--ponybench-rehearse", action="store_true", default=False,
                    help="run every cell through the real CLI against a scripted model on 127.0.0.1: "
                         "zero spend, no credentials; proves each arm reached the model")
    group.addoption("--ponybench-rehearse-ref", choices=("good", "bad"), default="good",
                    help="which reference the scripted model writes (bad shows the gates catch it) [default good]")
    group.addoption("--ponybench-rehearse-fault", type=rehearsal_fault, default=None, metavar="SPEC",
                    help="the scripted model fails every cell: 429, 529, 500, 401 or 403 (an API error), stall "
                         "or cut (a stream cut mid-message), with ':N' for the first N requests only (e.g. 529:1); "
                         "a task's rehearsal_fault field does the same for its cells")


def add_safety_options(group) -> None:
    group.addoption("--ponybench-resume", type=existing_dir, default=None, metavar="RUN_DIR",
                    help="finish a kept run: run only its cells without a finished result, report the rest as kept")
    group.addoption("--ponybench-max-cost", type=positive_usd, default=None, metavar="USD",
                    help="stop starting cells once finished cells of this run spent this much [ini ponybench_max_cost]")
    group.addoption("--ponybench-max-cell-cost", type=positive_usd, default=None, metavar="USD",
                    help="per-cell spend cap passed to the CLI as --max-budget-usd [ini ponybench_max_cell_cost]")
    group.addoption("--ponybench-confine", action="store_const", const=True, default=None,
                    help="run the agent under bubblewrap (it sees the system, its tools, the CLI and its workspace, "
                         "the only folder it writes; not the run, the task library or the harness) or stop where it cannot [ini ponybench_confine, default auto: "
                         "confined where bubblewrap works]")
    group.addoption("--ponybench-no-confine", action="store_const", const=False, dest="ponybench_confine",
                    help="run the agent unconfined, as this user [ini ponybench_confine = false]")
    group.addoption("--ponybench-agent-memory", type=agent_memory, default=None, metavar="SIZE",
                    help="memory one cell's agent (the CLI and all it starts) may use together, e.g. 4G or 512M; "
                         "past it the kernel kills a process and the cell fails, naming the limit "
                         "[ini ponybench_agent_memory, default 4G]")
    group.addoption("--ponybench-agent-pids", type=agent_pids, default=None, metavar="N",
                    help="processes and threads one cell's agent may hold at once; past it a fork is refused and "
                         "the cell fails, naming the limit [ini ponybench_agent_pids, default 1024]")


def add_storage_options(group) -> None:
    group.addoption("--ponybench-dir", default=None, metavar="DIR",
                    help="where runs are kept [ini ponybench_dir, default runs/]")
    group.addoption("--ponybench-claude", default=None, metavar="PATH",
                    help="the claude CLI [ini ponybench_claude, default: PATH, then node_modules/.bin/claude]")
    group.addoption("--ponybench-rescore", type=existing_dir, default=None, metavar="RUN_DIR",
                    help="recompute every metric and score of a kept run, with no agent call")
    group.addoption("--ponybench-plots", action="store_true", default=False,
                    help="draw the plots of report.html (needs matplotlib; costs seconds at the end) "
                         "[ini ponybench_plots, default false]")
    group.addoption("--ponybench-remote-workers", action="store_true", default=False,
                    help="treat every xdist worker as on another host: it gets the tasks, arms and fixtures "
                         "from the controller and sends each workspace back (gateways with chdir= or ssh= "
                         "always are)")
    group.addoption("--ponybench-reference", default=None, metavar="ARM",
                    help="the arm the reports compare every other arm against [ini ponybench_reference, default baseline]")


def add_judge_options(group) -> None:
    """--ponybench-judge and its settings (judging.py runs the judge)."""
    group.addoption("--ponybench-judge", action="store_true", default=False,
                    help="judged axes: over_engineering (0-3) of every cell that delivered code, completeness "
                         "(0-3) of open and fixture tasks, by a model proven on judge pairs first [ini ponybench_judge]")
    group.addoption("--ponybench-judge-model", default=None, metavar="MODEL",
                    help=f"the judge's model [ini ponybench_judge_model, default {DEFAULT_JUDGE_MODEL}]")
    group.addoption("--ponybench-judge-votes", type=odd_votes, default=None, metavar="N",
                    help=f"judge answers per axis, the median counts [ini ponybench_judge_votes, default {DEFAULT_VOTES}]")
    group.addoption("--ponybench-rehearse-judge", type=rehearsal_judge, default=None, metavar="SCRIPT",
                    help="rehearsal: what the scripted judge does: agree (default), disagree, malformed, "
                         "malformed:N, or a fault (529, 429:1, ...)")


# option name -> (argparse type, ini type, default, help)
ROUND_OPTIONS = {
    "plan": (None, "bool", False, "print the runs per arm needed and their cost for the selected tasks, arms "
                                  "and models, and run nothing"),
    "plan_difference": (probability, "string", "0.2", "the rate difference (0-1) the plan detects [default 0.2]"),
    "plan_loc_ratio": (ratio, "string", "1.25", "the LOC ratio (arm / reference) the plan detects [default 1.25]"),
    "plan_power": (probability, "string", "0.8", "the chance of detecting it the plan aims for [default 0.8]"),
    "plan_cell_cost": (usd_guess, "string", "", "a guessed cost per cell in USD where no earlier kept run "
                                               "of the task and model has one"),
    "plan_loc_sd": (probability, "string", "0.5", "a guessed spread (standard deviation of log LOC) where "
                                                  "no earlier kept run has one [default 0.5]"),
    "until_decided": (None, "bool", False, "run in rounds; stop giving runs to comparisons the data "
                                           "decided (sequential.py); caps: --ponybench-max-runs, "
                                           "--ponybench-max-cost"),
    "max_runs": (positive_int, "string", "20", "with --ponybench-until-decided: the most rounds [default 20]"),
    "alpha": (probability, "string", "0.05", "error rate of the sequential decisions [default 0.05]"),
    "margin": (probability, "string", "0.1", "equivalence margin of a rate difference: inside it, the arms "
                                             "count as equivalent [default 0.1]"),
}


def add_round_options(group, parser) -> None:
    """--ponybench-plan and --ponybench-until-decided, with their settings (rounds.py)."""
    for name, (kind, ini_kind, default, help_text) in ROUND_OPTIONS.items():
        flag = "--ponybench-" + name.replace("_", "-")
        if kind is None:
            group.addoption(flag, action="store_true", default=None, help=f"{help_text} [ini ponybench_{name}]")
        else:
            group.addoption(flag, type=kind, default=None, help=f"{help_text} [ini ponybench_{name}]")
        parser.addini(f"ponybench_{name}", help=help_text, type=ini_kind, default=default)


@dataclass(frozen=True)
class RoundSettings:
    plan: bool
    plan_difference: float
    plan_loc_ratio: float
    plan_power: float
    plan_cell_cost: float | None
    plan_loc_sd: float
    until_decided: bool
    max_runs: int
    alpha: float
    margin: float


def round_settings(config) -> RoundSettings:
    values = {}
    for name, (kind, ini_kind, default, _) in ROUND_OPTIONS.items():
        given = getattr(config.option, f"ponybench_{name}", None)
        if given is not None:
            values[name] = given
            continue
        raw = config.getini(f"ponybench_{name}")
        if ini_kind == "bool":
            values[name] = bool(raw)
        elif isinstance(raw, str) and not raw.strip():
            values[name] = None
        else:
            try:
                values[name] = kind(str(raw))
            except argparse.ArgumentTypeError as exc:
                import pytest

                raise pytest.UsageError(f"ini option ponybench_{name} = {raw!r}: {exc}") from None
    return RoundSettings(**values)


def round_runs(config, runs: int) -> int:
    """The runs collected per cell: the cap of rounds under --ponybench-until-decided."""
    s = round_settings(config)
    return s.max_runs if s.until_decided else runs


def add_ini(parser) -> None:
    for name, (kind, default, help_text) in INI.items():
        parser.addini(name, help=help_text, type=kind, default=default)


def addoption(parser) -> None:
    group = parser.getgroup("ponybench", "benchmark Claude Code arms by the code the agent writes")
    add_run_options(group)
    add_rehearsal_options(group)
    add_safety_options(group)
    add_storage_options(group)
    add_library_options(group)
    add_judge_options(group)
    add_round_options(group, parser)
    add_ini(parser)


@dataclass(frozen=True)
class Settings:
    """Every option resolved once: CLI value, else ini value, else default."""

    enabled: bool
    models: list[str]
    arms: list[str] | None
    runs: int
    timeout: float
    dir: Path
    claude: str | None
    rescore: Path | None
    rehearse: bool
    rehearse_ref: str
    reference: str
    reference_given: bool  # named on the command line or in ini, not the default
    resume: Path | None
    max_cost: float | None
    max_cell_cost: float | None
    confine: bool | None  # True: confined or stop; False: never; None: where it works (confine.sandbox)
    at_once: int
    plots: bool
    retries: int
    retry_wait: float
    rehearse_fault: object  # rehearsal.Fault or None
    remote_workers: bool  # every xdist worker is treated as on another host (fleet.py)
    model_ids: list[str]
    tasks_dir: Path
    arms_dir: Path
    fixtures_dir: Path
    library: str = "replace"  # --ponybench-library (library.py)
    plugins: tuple[Path, ...] = ()  # --ponybench-plugin folders (plugin_arm.py)
    agent_memory: int = 4 * 1024 ** 3  # --ponybench-agent-memory: bytes of the agent's cgroup
    agent_pids: int = 1024  # --ponybench-agent-pids: processes of the agent's cgroup


QUALITY = "ponybench_quality"  # the marker of the library's quality gates (collect.py)
SELFTEST_MARKERS = ("selftest", QUALITY)


def names_selftest(markexpr: str | None) -> bool:
    """A `-m` expression that names the selftest or the quality gates: the session asks for
    the tasks' proofs."""
    return any(name in (markexpr or "") for name in SELFTEST_MARKERS)


def quality_asked(config) -> bool:
    """`-m ponybench_quality` (alone or in an expression): the library's quality gates run, and
    the check-strength section is printed."""
    return QUALITY in (config.option.markexpr or "")


def asked(config) -> bool:
    """Whether this session asked for the plugin at all: a benchmark run, a rescore, a resume,
    a plan, or a selftest. Without it the plugin is inert (plugin.py). Reads the options only,
    never the tasks: an inert session must not pay for them."""
    opt = config.option
    if opt.ponybench or opt.ponybench_rescore or opt.ponybench_resume or names_selftest(opt.markexpr):
        return True
    return bool(opt.ponybench_plan or config.getini("ponybench_plan"))


def default_at_once(rescoring: bool) -> int:
    """Cells at once when neither the option nor the ini says: one for a run, where each cell
    spends money and meets the model's rate limits; for a rescore, which calls no model and
    is bound by its checks' CPU, twice the cores (a cell's harness work and its checks
    overlap; on 2 cores 4 at once rescored 1,000 cells in half the time of 1)."""
    return 2 * (os.cpu_count() or 1) if rescoring else 1


def _ini_parsed(config, name: str, parse):
    import pytest

    raw = config.getini(name)
    try:
        return parse(raw)
    except argparse.ArgumentTypeError as exc:
        raise pytest.UsageError(f"ini option {name} = {raw!r}: {exc}") from None


def _ini_optional(config, name: str, parse):
    return _ini_parsed(config, name, parse) if config.getini(name).strip() else None


def check_rootdir(config, flag: str, path: Path | None) -> None:
    """pytest decides its rootdir before plugins register their options, so in
    `--ponybench-rescore /elsewhere/run` the path is taken for a test path and becomes the
    rootdir: the ini file and testpaths are then silently lost. Say so instead."""
    import pytest

    if path is None:
        return
    root, here = Path(config.rootpath).resolve(), Path(config.invocation_params.dir).resolve()
    if (path == root or root in path.parents) and root != here and root not in here.parents:
        raise pytest.UsageError(
            f"{flag} {path}: pytest took the path for a test path and chose {root} as rootdir; "
            f"write it with '=': {flag}={path}"
        )


def settings(config) -> Settings:
    opt = config.option
    root = Path(config.rootpath)
    models = opt.models or _ini_parsed(config, "ponybench_models", csv_names)
    arms_ini = config.getini("ponybench_arms_list")
    arms = opt.arms or (_ini_parsed(config, "ponybench_arms_list", csv_names) if arms_ini.strip() else None)
    runs = opt.runs or _ini_parsed(config, "ponybench_runs", positive_int)
    # --ponybench-until-decided collects its cap of rounds; --ponybench-plan is a run's plan
    runs, planning = round_runs(config, runs), round_settings(config).plan
    timeout = opt.ponybench_timeout or _ini_parsed(config, "ponybench_timeout", positive_seconds)
    check_rootdir(config, "--ponybench-rescore", opt.ponybench_rescore)
    check_rootdir(config, "--ponybench-resume", opt.ponybench_resume)
    check_rootdir(config, "--ponybench-dir", Path(opt.ponybench_dir).resolve() if opt.ponybench_dir else None)
    # `--ponybench-claude /path/to/claude` (space form) is taken for a test path the same way.
    if opt.ponybench_claude and "--ponybench-claude" in config.invocation_params.args \
            and Path(opt.ponybench_claude).exists():
        check_rootdir(config, "--ponybench-claude", Path(opt.ponybench_claude).absolute())
    return Settings(
        enabled=bool(opt.ponybench or opt.ponybench_rescore or opt.ponybench_resume or planning),
        models=models, arms=arms, runs=runs, timeout=timeout,
        # A path on the command line is relative to where pytest was started, one in ini to the rootdir.
        dir=Path(opt.ponybench_dir).resolve() if opt.ponybench_dir else (root / config.getini("ponybench_dir")).resolve(),
        claude=opt.ponybench_claude or config.getini("ponybench_claude") or None,
        rescore=opt.ponybench_rescore,
        rehearse=bool(opt.ponybench_rehearse),
        rehearse_ref=opt.ponybench_rehearse_ref,
        reference=opt.ponybench_reference or config.getini("ponybench_reference") or "baseline",
        reference_given=bool(opt.ponybench_reference or config.getini("ponybench_reference")),
        resume=opt.ponybench_resume,
        max_cost=opt.ponybench_max_cost or _ini_optional(config, "ponybench_max_cost", positive_usd),
        max_cell_cost=opt.ponybench_max_cell_cost or _ini_optional(config, "ponybench_max_cell_cost", positive_usd),
        confine=(opt.ponybench_confine if opt.ponybench_confine is not None
                 else _ini_parsed(config, "ponybench_confine", confine_mode)),
        at_once=(opt.ponybench_at_once or _ini_optional(config, "ponybench_at_once", positive_int)
                 or default_at_once(rescoring=opt.ponybench_rescore is not None)),
        plots=bool(opt.ponybench_plots or config.getini("ponybench_plots")),
        retries=(opt.ponybench_retries if opt.ponybench_retries is not None
                 else _ini_parsed(config, "ponybench_retries", retry_count)),
        retry_wait=_ini_parsed(config, "ponybench_retry_wait", wait_seconds),
        rehearse_fault=opt.ponybench_rehearse_fault,
        remote_workers=bool(opt.ponybench_remote_workers),
        model_ids=list(config.getini("ponybench_model_ids")),
        tasks_dir=(root / config.getini("ponybench_tasks")).resolve(),
        arms_dir=(root / config.getini("ponybench_arms")).resolve(),
        fixtures_dir=(root / config.getini("ponybench_fixtures")).resolve(),
        library=opt.ponybench_library or _ini_parsed(config, "ponybench_library", library_mode),
        plugins=tuple(dict.fromkeys(opt.ponybench_plugin or ())),
        agent_memory=opt.ponybench_agent_memory or _ini_parsed(config, "ponybench_agent_memory", agent_memory),
        agent_pids=opt.ponybench_agent_pids or _ini_parsed(config, "ponybench_agent_pids", agent_pids),
    )
