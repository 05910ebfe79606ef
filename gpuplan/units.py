"""Parsing of the small units users type: durations ("90m", "3h", "1h30m", "2d") and counts ("x4")."""

from __future__ import annotations

import re

from gpuplan.errors import UsageError

_DURATION_PART = re.compile(r"(\d+)([smhd])")
_SECONDS = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def parse_duration(text: str, what: str = "duration") -> int:
    """Seconds in "90m", "3h", "1h30m", "2d" or "45s"; a bare number is minutes."""
    t = text.strip().lower()
    if t.isdigit():
        return int(t) * 60
    parts = _DURATION_PART.findall(t)
    if not parts or "".join(n + u for n, u in parts) != t:
        raise UsageError(f"bad {what} {text!r}: use forms like 90m, 3h, 1h30m or 2d")
    seconds = sum(int(n) * _SECONDS[u] for n, u in parts)
    if seconds <= 0:
        raise UsageError(f"bad {what} {text!r}: it must be longer than zero")
    return seconds


def parse_count(text: str) -> int:
    """The machine count in "x4", "×4" or "4"."""
    t = text.strip().lower().lstrip("x×")
    if not t.lstrip("-").isdigit():
        raise UsageError(f"bad count {text!r}: write it as x4 (four machines)")
    n = int(t)
    if n < 1:
        raise UsageError(f"bad count {text!r}: at least one machine")
    return n


def format_duration(seconds: int) -> str:
    h, rem = divmod(int(seconds), 3600)
    m, s = divmod(rem, 60)
    if h:
        return f"{h}h{m:02d}m"
    return f"{m}m{s:02d}s" if s else f"{m}m"
