"""The fake clock a check runs the agent's code under (`fake_clock`, in every check's namespace).

time.time, time.monotonic (and their _ns forms), datetime.now, utcnow and date.today read a
`Clock` that moves only when the check says `clock.advance(seconds)`. The fake datetime
classes read time.time, so in a host process (remote.py), where time.time calls the check's
clock back, they follow it too; remote.py puts them in the host's datetime module. Imports
nothing of the package: both the trust boundary (remote.py) and the helper API (checklib.py)
stand on it.
"""
from __future__ import annotations

import contextlib
import datetime as _datetime
import time
from dataclasses import dataclass, field
from typing import Any


@dataclass
class Clock:
    """A clock that moves only when told: `now` is seconds since the epoch (UTC)."""

    now: float
    monotonic: float = 10_000.0
    calls: int = field(default=0)

    def advance(self, seconds: float) -> None:
        self.now += seconds
        self.monotonic += seconds


_REAL_DATETIME = _datetime.datetime
_REAL_DATE = _datetime.date


# They read time.time, not a clock of their own: in a host process (remote.py) time.time calls
# the check's clock back, while a copy of the check's Clock there would never move.
class FakeDatetime(_REAL_DATETIME):
    @classmethod
    def now(cls, tz=None):
        return _REAL_DATETIME.fromtimestamp(time.time(), tz) if tz else _REAL_DATETIME.fromtimestamp(time.time())

    @classmethod
    def utcnow(cls):
        return _REAL_DATETIME.fromtimestamp(time.time(), _datetime.timezone.utc).replace(tzinfo=None)

    @classmethod
    def today(cls):
        return cls.now()


class FakeDate(_REAL_DATE):
    @classmethod
    def today(cls):
        return _REAL_DATE.fromtimestamp(time.time())


@contextlib.contextmanager
def fake_clock(start: float = 1_704_067_200.0):
    """Run the block with time.time, time.monotonic (and their _ns forms), datetime.now,
    utcnow and date.today reading `Clock.now`; default start 2024-01-01T00:00:00Z. Load the
    delivered module inside the block: `from datetime import datetime` then takes the fake."""
    clock = Clock(now=start)
    real_datetime, real_date = _datetime.datetime, _datetime.date
    patches: dict[str, Any] = {"time": lambda: clock.now, "time_ns": lambda: int(clock.now * 1e9),
               "monotonic": lambda: clock.monotonic, "monotonic_ns": lambda: int(clock.monotonic * 1e9)}
    for function in patches.values():
        function._ponybench_check_side = True  # a host calls it back (host._check_side)
    saved = {name: getattr(time, name) for name in patches}
    try:
        for name, function in patches.items():
            setattr(time, name, function)
        # Replacing the module's classes is the point of the patch, which mypy forbids.
        _datetime.datetime, _datetime.date = FakeDatetime, FakeDate  # type: ignore[misc]
        yield clock
    finally:
        for name, function in saved.items():
            setattr(time, name, function)
        _datetime.datetime, _datetime.date = real_datetime, real_date  # type: ignore[misc]
