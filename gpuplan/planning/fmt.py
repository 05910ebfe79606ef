"""How figures read, in one place: yen, durations and counts for people (JSON keeps exact values).

- Yen: integer yen with thousands separators ("¥14,602"), rounded half up once; `places=2` where
  a breakdown must show sen ("¥14,601.81").
- Hourly prices in a price list (`gpuplan catalog`): sen kept under ¥1,000 ("¥83.21").
- Durations: seconds under a minute ("45 s", "<1 s"), whole minutes under two hours ("86 min"), hours
  and minutes from two hours on ("3:00 h", "47:59 h"), days and hours from two days on ("3 d 20 h").
  A column of durations reads in one unit, the one its longest needs (`durations`, `scale_of`), and
  days only where every figure of it is two days or more: a column with a shorter one reads in hours
  and minutes ("1:57 h" beside "84:00 h"), where days would round 1:57 h to "0 d 2 h" beside the
  same figure written "1:57 h" elsewhere (issue 42). `estimate`'s table writes wall, billed and the
  wall range all in one.
- Counts: thousands separators ("20,000"); a counted noun agrees with its number ("1 job", "2 jobs").
"""

from __future__ import annotations

from decimal import ROUND_HALF_UP, Decimal


def yen(amount: Decimal | int | None, places: int = 0) -> str:
    if amount is None:
        return "?"
    q = Decimal(amount).quantize(Decimal(1).scaleb(-places), rounding=ROUND_HALF_UP)
    return f"¥{q:,.{places}f}" if places else f"¥{int(q):,}"


def rate(amount: Decimal | int | None) -> str:
    """An hourly price in a price list: sen kept under ¥1,000 ("¥83.21"), where they tell offers apart."""
    if amount is None:
        return "?"
    return yen(amount, 2) if Decimal(amount) < 1000 and Decimal(amount) != int(amount) else yen(amount)


_SCALES = ("s", "min", "h", "d")


def _scale(s: int) -> str:
    return "s" if s < 60 else "min" if s < 7200 else "h" if s < 2 * 86400 else "d"


def _whole(seconds: int | float | Decimal, per: int) -> int:
    return int((Decimal(seconds) / per).quantize(Decimal(1), rounding=ROUND_HALF_UP))


def duration(seconds: int | float | Decimal | None, scale: str | None = None) -> str:
    """`scale` ("s", "min", "h" or "d") writes it in that unit whatever its length (a column's)."""
    if seconds is None:
        return "?"
    if 0 < seconds < 0.5 and scale in (None, "s"):
        return "<1 s"  # a step that ran is not "0 s"
    s = _whole(seconds, 1)
    scale = scale or _scale(s)
    if scale == "s":
        return f"{s:,} s"
    minutes = _whole(s, 60)
    if scale == "min":
        return f"{minutes:,} min"
    if scale == "h":
        h, m = divmod(minutes, 60)
        return f"{h:,}:{m:02d} h"
    d, h = divmod(_whole(s, 3600), 24)
    return f"{d:,} d {h} h"


def scale_of(values) -> str | None:
    """The unit ("s", "min", "h" or "d") the longest of `values` (seconds; None skipped) needs:
    durations read together (a table's columns, a line's pair) are written in it; None where
    none is known. "d" only where the shortest is two days or more too: days and hours round off
    the minutes a shorter figure needs ("1:57 h", not "0 d 2 h")."""
    known = [v for v in values if v is not None]
    if not known:
        return None
    scale = _scale(_whole(max(known), 1))
    return "h" if scale == "d" and _scale(_whole(min(known), 1)) != "d" else scale


def durations(values: list) -> list[str]:
    """A column of durations in one unit: the one its longest figure needs ("1:26 h" beside "3:00 h",
    never "86 min"); days and hours only where every figure is two days or more, hours and minutes
    where one is shorter ("1:57 h" beside "84:00 h"); seconds stay as written while everything is
    under a minute."""
    scale = scale_of(values)
    return [duration(v, scale) for v in values]


def count(n: int) -> str:
    return f"{n:,}"


def plural(n: int, noun: str, many: str | None = None) -> str:
    """"1 job", "2 jobs", "20,000 jobs"; `many` for a plural not made with -s."""
    return f"{n:,} {noun if n == 1 else many or noun + 's'}"
