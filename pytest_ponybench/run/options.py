"""Command-line options and their ini equivalents.

Each option reads the same on the command line and in `[tool.pytest.ini_options]`
(`--ponybench-timeout 120` or `ponybench_timeout = 120`); the command line wins. Bad values
are rejected by argparse types (argtypes.py) at parse time, before anything runs.

OPTIONS is the one table: `addoption` declares each row's option and ini twin from it,
`resolved` reads each row's value from it, and tests/test_readme.py holds docs/options.md's
table to it.
"""
from __future__ import annotations

import argparse
import os
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any, Callable

from pytest_ponybench.specs.argtypes import (DEFAULT_JUDGE_MODEL, DEFAULT_VOTES, agent_memory, agent_pids,
                                             confine_mode, csv_names, existing_dir, odd_votes, positive_int,
                                             positive_seconds, positive_usd, probability, ratio, rehearsal_fault,
                                             rehearsal_judge, retry_count, usd_guess, wait_seconds)


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


@dataclass(frozen=True)
class Option:
    """One row of OPTIONS: a command-line option, its ini twin, or both.

    `type` parses the command line's value and the ini's string (for a flag, store_const or
    bool ini, only the ini's); `default` is what holds where neither says: the ini's default
    (a string, as in a pyproject) where there is an ini twin, else the option's. An option
    with an ini twin defaults to None on the command line, so "not given" is never a value."""

    flag: str | None  # None: ini only
    ini: str | None = None  # None: command line only
    type: Callable[[str], Any] | None = None
    action: str | None = None  # store_true, store_const, append; None: a value
    ini_type: str = "string"  # pytest's addini type: string, bool, linelist
    default: Any = None
    metavar: str | None = None
    help: str = ""  # the option's help (--help lists it with the option)
    ini_help: str = ""  # the ini key's help (--help lists it under the ini keys)
    dest: str | None = None  # only where two flags share one (--ponybench-no-confine)
    const: Any = None
    choices: tuple[str, ...] | None = None

    @property
    def name(self) -> str:
        """The option's dest, or for an ini-only row its ini name: what `resolved` looks up."""
        if self.dest:
            return self.dest
        if self.flag:
            return self.flag.lstrip("-").replace("-", "_")
        assert self.ini
        return self.ini


def round_option(name: str, kind: Callable[[str], Any] | None, ini_type: str, default: str | bool,
                 help_text: str, metavar: str | None = None) -> Option:
    """A --ponybench-plan / --ponybench-until-decided row (rounds.py): flag and ini named alike."""
    return Option("--ponybench-" + name.replace("_", "-"), f"ponybench_{name}", kind,
                  "store_true" if kind is None else None, ini_type, default, metavar,
                  f"{help_text} [ini ponybench_{name}]", help_text)


OPTIONS: tuple[Option, ...] = (
    Option("--ponybench", action="store_true", default=False,
           help="collect and run benchmark cells (without it nothing can spend)"),
    Option("--models", "ponybench_models", csv_names, default="haiku", metavar="M1,M2",
           help="models: aliases (haiku, sonnet, opus) or full ids [ini ponybench_models, default haiku]",
           ini_help="models to run, comma-separated aliases or full ids"),
    Option("--arms", "ponybench_arms_list", csv_names, default="", metavar="A1,A2",
           help="arms to run [ini ponybench_arms_list, default: all in arms/]",
           ini_help="arms to run, comma-separated (default: every arm in the arms folder)"),
    Option("--runs", "ponybench_runs", positive_int, default="1", metavar="N",
           help="runs per task x arm x model [ini ponybench_runs, default 1]",
           ini_help="runs per task x arm x model"),
    Option("--ponybench-timeout", "ponybench_timeout", positive_seconds, default="300", metavar="SECONDS",
           help="per-cell agent timeout; the whole process tree is killed [ini ponybench_timeout, default 300]",
           ini_help="seconds one cell's agent may run before its process tree is killed"),
    Option("--ponybench-retries", "ponybench_retries", retry_count, default="2", metavar="N",
           help="run a cell again (from a fresh seed) up to N times when the model API failed it "
                "[ini ponybench_retries, default 2]",
           ini_help="times a cell that ended as an infra error (the model API failed) runs again"),
    Option(None, "ponybench_retry_wait", wait_seconds, default="10",
           ini_help="seconds before the first retry of an infra error (doubling each time); "
                    "also how long a 429 pauses every worker's next cell"),
    Option("--ponybench-at-once", "ponybench_at_once", positive_int, default="", metavar="N",
           help="cells one pytest process runs at once, in threads: 32 cells at once need one "
                "process, not 32 xdist workers [ini ponybench_at_once, default 1; for "
                "--ponybench-rescore twice the machine's cores]",
           ini_help="cells one pytest process runs at once (threads; their agents wait on the model); "
                    "default 1, for a rescore twice the machine's cores"),
    Option("--ponybench-rehearse", action="store_true", default=False,
           help="run every cell through the real CLI against a scripted model on 127.0.0.1: "
                "zero spend, no credentials; proves each arm reached the model"),
    Option("--ponybench-rehearse-ref", choices=("good", "bad"), default="good",
           help="which reference the scripted model writes (bad shows the gates catch it) [default good]"),
    Option("--ponybench-rehearse-fault", type=rehearsal_fault, metavar="SPEC",
           help="the scripted model fails every cell: 429, 529, 500, 401 or 403 (an API error), stall "
                "or cut (a stream cut mid-message), with ':N' for the first N requests only (e.g. 529:1); "
                "a task's rehearsal_fault field does the same for its cells"),
    Option("--ponybench-resume", type=existing_dir, metavar="RUN_DIR",
           help="finish a kept run: run only its cells without a finished result, report the rest as kept"),
    Option("--ponybench-max-cost", "ponybench_max_cost", positive_usd, default="", metavar="USD",
           help="stop starting cells once finished cells of this run spent this much [ini ponybench_max_cost]",
           ini_help="US dollars the whole run may spend; no cell starts once finished cells reach it"),
    Option("--ponybench-max-cell-cost", "ponybench_max_cell_cost", positive_usd, default="", metavar="USD",
           help="per-cell spend cap passed to the CLI as --max-budget-usd [ini ponybench_max_cell_cost]",
           ini_help="US dollars one cell may spend (passed to the CLI as --max-budget-usd)"),
    Option("--ponybench-confine", "ponybench_confine", confine_mode, "store_const", default="auto", const=True,
           help="run the agent under bubblewrap (it sees the system, its tools, the CLI and its workspace, "
                "the only folder it writes; not the run, the task library or the harness) or stop where it "
                "cannot [ini ponybench_confine, default auto: confined where bubblewrap works]",
           ini_help="run the agent under bubblewrap: auto (where it works, else one line "
                    "saying why not), true (fail where it does not) or false"),
    Option("--ponybench-no-confine", action="store_const", const=False, dest="ponybench_confine",
           help="run the agent unconfined, as this user [ini ponybench_confine = false]"),
    Option("--ponybench-agent-memory", "ponybench_agent_memory", agent_memory, default="4G", metavar="SIZE",
           help="memory one cell's agent (the CLI and all it starts) may use together, e.g. 4G or 512M; "
                "past it the kernel kills a process and the cell fails, naming the limit "
                "[ini ponybench_agent_memory, default 4G]",
           ini_help="memory one cell's agent (the CLI and all it starts) may use together, "
                    "in a cgroup of its own where the machine has cgroups"),
    Option("--ponybench-agent-pids", "ponybench_agent_pids", agent_pids, default="1024", metavar="N",
           help="processes and threads one cell's agent may hold at once; past it a fork is refused and "
                "the cell fails, naming the limit [ini ponybench_agent_pids, default 1024]",
           ini_help="processes and threads one cell's agent may hold at once, in the same cgroup"),
    Option("--ponybench-dir", "ponybench_dir", default="runs", metavar="DIR",
           help="where runs are kept [ini ponybench_dir, default runs/]",
           ini_help="where runs (workspaces, results, summaries) are kept"),
    Option("--ponybench-claude", "ponybench_claude", default="", metavar="PATH",
           help="the claude CLI [ini ponybench_claude, default: PATH, then node_modules/.bin/claude]",
           ini_help="the claude executable (default: claude on PATH, then node_modules/.bin/claude)"),
    Option("--ponybench-rescore", type=existing_dir, metavar="RUN_DIR",
           help="recompute every metric and score of a kept run, with no agent call"),
    Option("--ponybench-rescore-drop-judged", action="store_true", default=False,
           help="with --ponybench-rescore and without --ponybench-judge: leave out the judgements kept in the "
                "run (judged axes and judged graders), which a rescore otherwise keeps"),
    Option("--ponybench-plots", "ponybench_plots", action="store_true", ini_type="bool", default=False,
           help="draw the plots of report.html (needs matplotlib; costs seconds at the end) "
                "[ini ponybench_plots, default false]",
           ini_help="draw the plots of report.html (needs matplotlib)"),
    Option("--ponybench-remote-workers", action="store_true", default=False,
           help="treat every xdist worker as on another host: it gets the tasks, arms and fixtures "
                "from the controller and sends each workspace back (gateways with chdir= or ssh= "
                "always are)"),
    Option("--ponybench-reference", "ponybench_reference", default="", metavar="ARM",
           help="the arm the reports compare every other arm against [ini ponybench_reference, default baseline]",
           ini_help="the arm every other arm is compared against in the reports (default baseline)"),
    Option(None, "ponybench_model_ids", ini_type="linelist", default=[],
           ini_help="model aliases: lines of 'alias = full-model-id'"),
    Option(None, "ponybench_tasks", default="tasks", ini_help="folder of task YAML files, relative to the rootdir"),
    Option(None, "ponybench_arms", default="arms", ini_help="folder of arm YAML files, relative to the rootdir"),
    Option(None, "ponybench_fixtures", default="fixtures",
           ini_help="folder of fixture repositories, relative to the rootdir"),
    Option("--ponybench-library", "ponybench_library", library_mode, default="replace", metavar="replace|add|off",
           help="how the project's own tasks/ and arms/ combine with the shipped library: replace "
                "(the project's folder when it has one, else the shipped one), add (both), off "
                "(the project's only) [ini ponybench_library, default replace]",
           ini_help="how the project's tasks/ and arms/ combine with the shipped library: replace, add or off"),
    Option("--ponybench-plugin", type=plugin_dir, action="append", metavar="PATH",
           help="an arm from a Claude Code plugin folder, no YAML needed (repeatable); its evals/ "
                "cases become tasks run with it and with baseline"),
    # the judge (judging.py runs it)
    Option("--ponybench-judge", "ponybench_judge", action="store_true", ini_type="bool", default=False,
           help="judged axes: over_engineering (0-3) of every cell that delivered code, completeness "
                "(0-3) of open and fixture tasks, by a model proven on judge pairs first [ini ponybench_judge]",
           ini_help="judge every cell on over_engineering and completeness (judge.py)"),
    Option("--ponybench-judge-model", "ponybench_judge_model", default=DEFAULT_JUDGE_MODEL, metavar="MODEL",
           help=f"the judge's model [ini ponybench_judge_model, default {DEFAULT_JUDGE_MODEL}]",
           ini_help="the judge's model: an alias or a full claude-... id"),
    Option("--ponybench-judge-votes", "ponybench_judge_votes", odd_votes, default=str(DEFAULT_VOTES), metavar="N",
           help=f"judge answers per axis, the median counts [ini ponybench_judge_votes, default {DEFAULT_VOTES}]",
           ini_help="judge answers per axis; the median counts (odd)"),
    Option("--ponybench-rehearse-judge", type=rehearsal_judge, metavar="SCRIPT",
           help="rehearsal: what the scripted judge does: agree (default), disagree, malformed, "
                "malformed:N, or a fault (529, 429:1, ...)"),
    # rounds (rounds.py): --ponybench-plan, --ponybench-until-decided and their settings
    round_option("plan", None, "bool", False, "print the runs per arm needed and their cost for the selected "
                 "tasks, arms and models, and run nothing"),
    round_option("plan_difference", probability, "string", "0.2",
                 "the rate difference (0-1) the plan detects [default 0.2]"),
    round_option("plan_loc_ratio", ratio, "string", "1.25",
                 "the LOC ratio (arm / reference) the plan detects [default 1.25]"),
    round_option("plan_power", probability, "string", "0.8",
                 "the chance of detecting it the plan aims for [default 0.8]"),
    round_option("plan_cell_cost", usd_guess, "string", "", "a guessed cost per cell in USD where no earlier "
                 "kept run of the task and model has one"),
    round_option("plan_loc_sd", probability, "string", "0.5", "a guessed spread (standard deviation of log LOC) "
                 "where no earlier kept run has one [default 0.5]"),
    round_option("until_decided", None, "bool", False, "run in rounds; stop giving runs to comparisons the data "
                 "decided (sequential.py); caps: --ponybench-max-runs, --ponybench-max-cost"),
    round_option("max_runs", positive_int, "string", "20",
                 "with --ponybench-until-decided: the most rounds [default 20]"),
    round_option("alpha", probability, "string", "0.05", "error rate of the sequential decisions [default 0.05]"),
    round_option("margin", probability, "string", "0.1", "equivalence margin of a rate difference: inside it, "
                 "the arms count as equivalent [default 0.1]"),
)
BY_NAME = {row.name: row for row in OPTIONS if row.ini or not row.dest}  # --ponybench-no-confine: via its twin


def addoption(parser) -> None:
    """Every row's option and ini twin, in the table's order."""
    group = parser.getgroup("ponybench", "benchmark Claude Code arms by the code the agent writes")
    for row in OPTIONS:
        if row.flag:
            kwargs: dict[str, Any] = {"help": row.help}
            if row.action:
                kwargs["action"] = row.action
            if row.action in (None, "append") and row.type:
                kwargs["type"] = row.type
            if row.action == "store_const":
                kwargs["const"] = row.const
            for key in ("dest", "metavar", "choices"):
                if getattr(row, key) is not None:
                    kwargs[key] = getattr(row, key)
            if row.action != "store_const" or row.ini:  # the twin sharing a dest keeps its default
                kwargs["default"] = None if row.ini else row.default
            group.addoption(row.flag, **kwargs)
        if row.ini:
            parser.addini(row.ini, help=row.ini_help, type=row.ini_type, default=row.default)


def resolved(config, name: str) -> Any:
    """One row's value: the command line's, else the ini's (parsed by the row's type), else the
    default. The one place an option is resolved. An ini string left blank where the default is
    blank is None (not set); an empty string on the command line counts as not given."""
    import pytest

    row = BY_NAME[name]
    given = getattr(config.option, row.name) if row.flag else None
    if (given is not None and given != "") or row.ini is None:
        return given
    raw = config.getini(row.ini)
    if row.ini_type == "bool":
        return bool(raw)
    if row.ini_type != "string":
        return list(raw)
    if not raw.strip() and not row.default:
        return None
    try:
        return row.type(raw) if row.type else raw
    except argparse.ArgumentTypeError as exc:
        raise pytest.UsageError(f"ini option {row.ini} = {raw!r}: {exc}") from None


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
    names = RoundSettings.__dataclass_fields__
    return RoundSettings(**{name: resolved(config, f"ponybench_{name}") for name in names})


def round_runs(config, runs: int) -> int:
    """The runs collected per cell: the cap of rounds under --ponybench-until-decided."""
    s = round_settings(config)
    return s.max_runs if s.until_decided else runs


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


def equals_form(args: list[str] | tuple[str, ...], here: Path) -> list[str] | None:
    """The command line again with every `--ponybench-x VALUE` of ours written
    `--ponybench-x=VALUE`, when one such VALUE names an existing path other than `here` (the
    invocation directory); else None.

    pytest decides its rootdir and ini file before any plugin registers its options, from the
    arguments that look like existing paths; in `--ponybench-plugin ../plug` it takes `../plug`
    for one, and the rootdir moves (to the common parent) and the project's pytest.ini is
    dropped, silently changing which cells run (pytest issue 8846: known, not fixed there). The
    plugin runs the session again from the '=' form, which pytest reads as it should."""
    valued = {row.flag for row in OPTIONS if row.flag and row.action not in ("store_true", "store_const")}
    out, moved, i = [], False, 0
    while i < len(args):
        arg = str(args[i])
        if arg in valued and i + 1 < len(args) and not str(args[i + 1]).startswith("-"):
            value = str(args[i + 1])
            moved = moved or (os.path.exists(value) and Path(value).resolve() != here.resolve())
            out.append(f"{arg}={value}")
            i += 2
            continue
        out.append(arg)
        i += 1
    return out if moved else None


def settings(config) -> Settings:
    opt = config.option
    root = Path(config.rootpath)

    value = partial(resolved, config)
    # --ponybench-until-decided collects its cap of rounds; --ponybench-plan is a run's plan
    runs, planning = round_runs(config, value("runs")), round_settings(config).plan
    reference = value("ponybench_reference")
    return Settings(
        enabled=bool(opt.ponybench or opt.ponybench_rescore or opt.ponybench_resume or planning),
        models=value("models"), arms=value("arms"), runs=runs, timeout=value("ponybench_timeout"),
        # A path on the command line is relative to where pytest was started, one in ini to the rootdir.
        dir=Path(opt.ponybench_dir).resolve() if opt.ponybench_dir else (root / value("ponybench_dir")).resolve(),
        claude=value("ponybench_claude"),
        rescore=opt.ponybench_rescore,
        rehearse=bool(opt.ponybench_rehearse),
        rehearse_ref=opt.ponybench_rehearse_ref,
        reference=reference or "baseline",
        reference_given=bool(reference),
        resume=opt.ponybench_resume,
        max_cost=value("ponybench_max_cost"),
        max_cell_cost=value("ponybench_max_cell_cost"),
        confine=value("ponybench_confine"),
        at_once=value("ponybench_at_once") or default_at_once(rescoring=opt.ponybench_rescore is not None),
        plots=value("ponybench_plots"),
        retries=value("ponybench_retries"),
        retry_wait=value("ponybench_retry_wait"),
        rehearse_fault=opt.ponybench_rehearse_fault,
        remote_workers=bool(opt.ponybench_remote_workers),
        model_ids=value("ponybench_model_ids"),
        tasks_dir=(root / value("ponybench_tasks")).resolve(),
        arms_dir=(root / value("ponybench_arms")).resolve(),
        fixtures_dir=(root / value("ponybench_fixtures")).resolve(),
        library=value("ponybench_library"),
        plugins=tuple(dict.fromkeys(opt.ponybench_plugin or ())),
        agent_memory=value("ponybench_agent_memory"),
        agent_pids=value("ponybench_agent_pids"),
    )
