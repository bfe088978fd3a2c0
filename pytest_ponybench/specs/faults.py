"""The faults a rehearsal's scripted model can play, in their written form.

`--ponybench-rehearse-fault`, a task's `rehearsal_fault:` and `--ponybench-judge-rehearse-fault`
all take this form ('529', '429:2', 'stall', 'cut:1'); the spec and the options validate it here,
and the scripted server (rehearsal/server.py) plays what it parses to. Stdlib only.
"""
from __future__ import annotations

from dataclasses import dataclass


# The error type the Messages API names for each status a fault can answer with.
FAULT_STATUSES = {429: "rate_limit_error", 529: "overloaded_error", 500: "api_error",
                  401: "authentication_error", 403: "permission_error"}
FAULT_SYNTAX = ("429, 529, 500, 401 or 403 (an API error), 'stall' (never answer) or 'cut' (end the "
                "stream mid-message), optionally followed by ':N' for the first N requests only "
                "(e.g. 529:1); without it, every request")


@dataclass(frozen=True)
class Fault:
    """What the scripted model does wrong: ``kind`` is an HTTP status as text ("529"),
    "stall" or "cut"; ``first`` limits it to the first N /v1/messages requests of the cell
    (None: all of them). Registering a cell again starts the count afresh, so a retried cell
    meets the same fault."""

    kind: str
    first: int | None = None

    @property
    def status(self) -> int | None:
        return int(self.kind) if self.kind.isdigit() else None

    def applies(self, request_number: int) -> bool:
        """Whether the request_number-th (1-based) request of a cell meets the fault."""
        return self.first is None or request_number <= self.first

    def __str__(self) -> str:
        return self.kind if self.first is None else f"{self.kind}:{self.first}"


def parse_fault(text: str) -> Fault:
    """A fault from its written form ('529', '429:2', 'stall', 'cut:1'); ValueError naming
    what is allowed when it is none of them."""
    kind, _, first = str(text).strip().partition(":")
    allowed = {str(s) for s in FAULT_STATUSES} | {"stall", "cut"}
    if kind not in allowed:
        raise ValueError(f"'{text}' is not a fault: give {FAULT_SYNTAX}")
    if not first:
        return Fault(kind)
    if not first.isdigit() or int(first) < 1:
        raise ValueError(f"'{text}': the count after ':' must be a whole number of 1 or more")
    return Fault(kind, int(first))
