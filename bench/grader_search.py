"""How long Python's regular expressions take over the texts a grader reads, to back the rule
that makes a grader's timeout the instrument's failure (graders.py, `SHORT_TEXT`).

    python bench/grader_search.py

Prints, in seconds on this machine: a linear search over 8 MiB (`MAX_READ`, the most a grader
reads of one text), the worst quadratic search (a greedy `\\w+` that backtracks at every start)
over `SHORT_TEXT` characters and over 4 times that, and a catastrophic pattern over a few dozen
characters. A check's time (30 s for an imported case) runs out inside a search over at most
`SHORT_TEXT` characters only when the pattern is worse than quadratic: its own fault, whatever
the text.
"""
from __future__ import annotations

import multiprocessing
import re
import time

from pytest_ponybench.graders import MAX_READ, SHORT_TEXT

LIMIT = 10.0  # seconds a catastrophic search is given before it is reported as "more than"


def timed(pattern: str, text: str) -> float:
    start = time.perf_counter()
    re.findall(pattern, text)
    return time.perf_counter() - start


def _search(pattern: str, text: str) -> None:
    re.findall(pattern, text)


def bounded(pattern: str, text: str) -> str:
    """The search's time, or "> LIMIT" when it runs past it (in a child, killed: Python's
    regular expressions cannot be interrupted)."""
    child = multiprocessing.get_context("fork").Process(target=_search, args=(pattern, text))
    start = time.perf_counter()
    child.start()
    child.join(LIMIT)
    if child.is_alive():
        child.kill()
        child.join()
        return f"> {LIMIT:g}"
    return f"{time.perf_counter() - start:.3f}"


EMAIL = r"\w+@\w+\.com"  # linear over words, quadratic over one long run of letters
NESTED = r"^(a+)+$"  # exponential over a run of a's that ends in something else


def main() -> None:
    words = "hello " * (MAX_READ // 6)
    print(f"linear /{EMAIL}/ over {len(words)} characters of words: {timed(EMAIL, words):.3f} s")
    for n in (SHORT_TEXT, 4 * SHORT_TEXT):
        print(f"quadratic /{EMAIL}/ over {n} letters: {timed(EMAIL, 'a' * n):.3f} s")
    for n in (20, 24, 28):
        print(f"catastrophic /{NESTED}/ over {n + 1} characters: {bounded(NESTED, 'a' * n + 'b')} s")


if __name__ == "__main__":
    main()
