"""argparse types: a bad flag is rejected at parse time, with a sentence saying what to give.

The plugin's options (options.py, rounds.py) and the console scripts
(ponybench-compare, ponybench-history) share them, so a number, a size or a duration reads the
same everywhere and is refused the same way.
"""
from __future__ import annotations

import argparse
import math
import os
import re
from pathlib import Path

from pytest_ponybench.specs.faults import parse_fault

# A name is part of a cell id and a directory name: `<task>__<arm>__<model>__<run>`. Here, not
# in spec.py, so that declaring the options imports no YAML (plugin.py: inert until asked).
NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")
DEFAULT_JUDGE_MODEL = "sonnet"  # an alias of spec.DEFAULT_MODEL_IDS, or a full claude-... id
DEFAULT_VOTES = 3  # judge answers per axis


def csv_names(value: str) -> list[str]:
    names = [v.strip() for v in value.split(",") if v.strip()]
    if not names:
        raise argparse.ArgumentTypeError("give one or more names separated by commas")
    for name in names:
        if not NAME_RE.match(name) or "__" in name:
            raise argparse.ArgumentTypeError(f"'{name}' is not a valid name (letters, digits, '.', '-', '_')")
    # A name given twice makes two items with one cell id: one workspace for two runs (raced
    # under xdist), two records of one cell. --runs N is how a cell is repeated.
    repeated = sorted({name for name in names if names.count(name) > 1})
    if repeated:
        raise argparse.ArgumentTypeError(f"'{repeated[0]}' is given twice; use --runs to repeat cells")
    return names


def parse_number(value: str, convert, what: str):
    """`convert(value)`, or an argparse error saying what was expected."""
    try:
        return convert(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"'{value}' is not {what}") from None


def positive_int(value: str) -> int:
    number = parse_number(value, int, "a whole number")
    if number < 1:
        raise argparse.ArgumentTypeError(f"must be 1 or more, got {number}")
    return number


MAX_SECONDS = 7 * 24 * 3600


def positive_seconds(value: str) -> float:
    number = parse_number(value, float, "a number of seconds")
    if not number > 0:
        raise argparse.ArgumentTypeError(f"must be more than 0 seconds, got {value}")
    if not number <= MAX_SECONDS:  # inf or 1e12 overflow pytest-timeout's alarm: an INTERNALERROR
        raise argparse.ArgumentTypeError(f"must be at most {MAX_SECONDS} seconds (a week), got {value}")
    return number


def retry_count(value: str) -> int:
    number = parse_number(value, int, "a whole number of retries")
    if not 0 <= number <= 20:
        raise argparse.ArgumentTypeError(f"must be from 0 to 20, got {number}")
    return number


def wait_seconds(value: str) -> float:
    number = parse_number(value, float, "a number of seconds")
    if not 0 <= number <= 3600:
        raise argparse.ArgumentTypeError(f"must be from 0 to 3600 seconds, got {value}")
    return number


def confine_mode(value: str) -> bool | None:
    """ponybench_confine: True (confine or stop), False (never), None (auto: where it works)."""
    word = value.strip().lower()
    if word in ("", "auto"):
        return None
    if word in ("true", "yes", "on", "1"):
        return True
    if word in ("false", "no", "off", "0"):
        return False
    raise argparse.ArgumentTypeError(f"'{value}' is not auto, true or false")


SIZE_UNITS = {"": 1, "k": 1024, "m": 1024 ** 2, "g": 1024 ** 3, "t": 1024 ** 4}
MIN_AGENT_MEMORY = 64 * 1024 ** 2  # below this not even the CLI starts
MIN_AGENT_PIDS = 16


def agent_memory(value: str) -> int:
    """Bytes the agent's processes may use together: a number with an optional K, M, G or T
    (powers of 1024, an ending 'B' or 'iB' allowed): 4G, 512MiB, 1073741824."""
    text = value.strip().lower().removesuffix("ib").removesuffix("b").strip()
    unit = text[-1:] if text[-1:] in SIZE_UNITS and text[-1:] else ""
    number = parse_number(text[: len(text) - len(unit)].strip(), float, "a size such as 4G, 512M or a number of bytes")
    if not math.isfinite(number):
        raise argparse.ArgumentTypeError(f"'{value}' is not a size such as 4G, 512M or a number of bytes")
    size = int(number * SIZE_UNITS[unit])
    if size < MIN_AGENT_MEMORY:
        raise argparse.ArgumentTypeError(f"must be at least 64M (the CLI alone needs more), got {value}")
    return size


def agent_pids(value: str) -> int:
    number = parse_number(value, int, "a whole number of processes")
    if number < MIN_AGENT_PIDS:
        raise argparse.ArgumentTypeError(f"must be at least {MIN_AGENT_PIDS} (the CLI alone starts several), got {number}")
    return number


def rehearsal_fault(value: str):
    try:
        return parse_fault(value)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def positive_usd(value: str) -> float:
    number = parse_number(value, float, "an amount in US dollars")
    if not number > 0:
        raise argparse.ArgumentTypeError(f"must be more than 0 dollars, got {value}")
    if not math.isfinite(number):
        raise argparse.ArgumentTypeError(f"must be a finite amount of dollars, got {value}")
    return number


def existing_dir(value: str) -> Path:
    path = Path(value).expanduser()
    if not path.is_dir() and os.environ.get("PYTEST_XDIST_WORKER"):
        # An xdist worker parses the controller's arguments, and a worker on another host has
        # no such folder: the controller checked it, and a remote worker never opens it.
        return Path(os.path.abspath(path))
    if not path.is_dir():
        raise argparse.ArgumentTypeError(f"{value} is not a directory")
    return path.resolve()


# name, ini type, default, help. The CLI flag is --<name with dashes>, the ini key <name>.


def odd_votes(value: str) -> int:
    try:
        n = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"'{value}' is not a whole number") from None
    if n < 1 or n % 2 == 0 or n > 9:
        raise argparse.ArgumentTypeError(f"{n}: give an odd number of votes from 1 to 9 (the median must be a vote)")
    return n


def rehearsal_judge(value: str) -> tuple[str, int, object]:
    """(script, malformed first N, fault) from 'agree', 'disagree', 'malformed', 'malformed:N'
    (N malformed answers, then agreeing ones) or a fault as for --ponybench-rehearse-fault."""
    kind, _, count = value.partition(":")
    if kind in ("agree", "disagree") and not count:
        return kind, 0, None
    if kind == "malformed":
        if not count:
            return "malformed", 0, None
        if count.isdigit() and int(count) >= 1:
            return "agree", int(count), None
        raise argparse.ArgumentTypeError(f"'{value}': the count after 'malformed:' must be 1 or more")
    try:
        return "agree", 0, parse_fault(value)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"'{value}' is not agree, disagree, malformed, malformed:N or a fault ({exc})") from None


def probability(value: str) -> float:
    number = parse_number(value, float, "a number")
    if not 0 < number < 1:
        raise argparse.ArgumentTypeError(f"must be between 0 and 1 (exclusive), got {value}")
    return number


def ratio(value: str) -> float:
    number = parse_number(value, float, "a ratio")
    if not (number > 0 and number != 1 and math.isfinite(number)):
        raise argparse.ArgumentTypeError(f"must be a positive ratio other than 1 (say 1.25), got {value}")
    return number


def usd_guess(value: str) -> float:
    number = parse_number(value, float, "an amount in USD")
    if not (number >= 0 and math.isfinite(number)):
        raise argparse.ArgumentTypeError(f"must be 0 or more USD, got {value}")
    return number
