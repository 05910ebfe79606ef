"""How figures read, in one place: yen, durations and counts for people (JSON keeps exact values).

- Yen: integer yen with thousands separators ("¥14,602"), rounded half up once; `places=2` where
  a breakdown must show sen ("¥14,601.81").
- Hourly prices in a price list (`gpuplan catalog`): sen kept under ¥1,000 ("¥83.21").
- Durations: seconds under a minute ("45 s", "<1 s"), whole minutes under two hours ("86 min"), hours
  and minutes from two hours on ("3:00 h", "92:25 h").
- Counts: thousands separators ("20,000").
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


def duration(seconds: int | float | Decimal | None) -> str:
    if seconds is None:
        return "?"
    if 0 < seconds < 0.5:
        return "<1 s"  # a step that ran is not "0 s"
    s = int(Decimal(seconds).quantize(Decimal(1), rounding=ROUND_HALF_UP))
    if s < 60:
        return f"{s} s"
    minutes = int((Decimal(s) / 60).quantize(Decimal(1), rounding=ROUND_HALF_UP))
    if s < 7200:
        return f"{minutes} min"
    h, m = divmod(minutes, 60)
    return f"{h:,}:{m:02d} h"


def count(n: int) -> str:
    return f"{n:,}"
