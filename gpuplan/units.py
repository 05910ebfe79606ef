"""Parsing of the small units users type: durations ("90m", "3h", "1h30m", "2d") and counts ("x4")."""

from __future__ import annotations

import re
from decimal import Decimal, InvalidOperation

from gpuplan.errors import UsageError

_DURATION_PART = re.compile(r"([0-9]+)([smhd])")  # ASCII digits: int() would read "４" too
_SECONDS = {"s": 1, "m": 60, "h": 3600, "d": 86400}
MAX_DURATION_S = 366 * 86400  # a deadline or TTL over a year is a typo (and a TTL that long protects nothing)
MAX_MACHINES = 1000  # one cluster: each machine is its own create call, journal rows and SSH session
# 高火力 DOK stops a task at its execution_time_limit_sec, 1,728,000 s (20 days) unless the task sets
# another; the largest it accepts is not documented (the project's notes (not shipped)), so gpuplan
# never asks for more
DOK_TASK_LIMIT_S = 1_728_000
# a trillion yen: a budget or cap past it is a typo, and past 28 digits Decimal's arithmetic is no
# longer exact (a yen figure that large failed deep in the planner with InvalidOperation)
MAX_YEN = Decimal(10) ** 12


def yen(text: object) -> Decimal | None:
    """A number of yen as users type it ("5000", "¥5,000", "5000 JPY", 5000), above 0 and at
    most MAX_YEN; None where it is not one (each caller says what it expected, in its own words)."""
    if isinstance(text, bool) or text is None:
        return None
    raw = str(text).strip().removeprefix("¥").removesuffix("JPY").replace(",", "").strip()
    try:
        value = Decimal(raw)
    except (InvalidOperation, ValueError):
        return None
    return value if value.is_finite() and 0 < value <= MAX_YEN else None


def parse_duration(text: str | int, what: str = "duration", bare_meant: str = "minutes") -> int:
    """Seconds in "90m", "3h", "1h30m", "2d" or "45s". Longer than zero and at most MAX_DURATION_S.
    A bare number is refused with the units to use (issue 46): it meant minutes in --ttl and
    --idle but seconds in `run --timeout` and a batch file's `timeout:`, so "30" was read two ways;
    `bare_meant` says what it meant where it is refused."""
    if isinstance(text, bool) or not isinstance(text, (str, int)):
        raise UsageError(f"bad {what} {text!r}: a duration such as 30m, 2h, 1h30m or 90s")
    text = str(text)
    t = text.strip().lower()
    if len(t) > 40:
        raise UsageError(f"bad {what} {text[:40]!r}...: use forms like 90m, 3h, 1h30m or 2d")
    if t.isascii() and t.isdecimal():
        n = int(t)
        other = "minutes in --ttl" if bare_meant == "seconds" else "seconds in `run --timeout`"
        raise UsageError(f"bad {what} {text!r}: give the unit, such as {n}m, {n}h or {n}s (a bare number meant"
                         f" {bare_meant} here but {other}, so it is refused)")
    else:
        parts = _DURATION_PART.findall(t)
        if not parts or "".join(n + u for n, u in parts) != t:
            raise UsageError(f"bad {what} {text!r}: use forms like 90m, 3h, 1h30m or 2d")
        seconds = sum(int(n) * _SECONDS[u] for n, u in parts)
    if seconds <= 0:
        raise UsageError(f"bad {what} {text!r}: it must be longer than zero")
    if seconds > MAX_DURATION_S:
        raise UsageError(f"bad {what} {text!r}: at most {MAX_DURATION_S // 86400}d")
    return seconds


def parse_count(text: str) -> int:
    """The machine count in "x4", "×4" or "4": 1 to MAX_MACHINES."""
    t = text.strip().lower().lstrip("x×")
    if not (t.isascii() and t.lstrip("-").isdecimal()) or len(t) > 12:
        raise UsageError(f"bad count {text!r}: write it as x4 (four machines)")
    n = int(t)
    if n < 1:
        raise UsageError(f"bad count {text!r}: at least one machine")
    if n > MAX_MACHINES:
        raise UsageError(f"bad count {text!r}: gpuplan makes at most {MAX_MACHINES:,} machines per cluster; split the fleet")
    return n


def format_duration(seconds: int) -> str:
    h, rem = divmod(int(seconds), 3600)
    m, s = divmod(rem, 60)
    if h:
        return f"{h}h{m:02d}m"
    return f"{m}m{s:02d}s" if s else f"{m}m"
