"""How a machine is billed, in one place: the planner, the cost ledger, `status` and `run`'s
measured yen all count money through `charge`, so a predicted and a measured yen figure are
the same rule applied to different seconds.

A provider bills a machine for the seconds it is held:
- rounded up to its granularity (1 s, 60 s, 3600 s, or a month) and at least its minimum;
- at a price per period (an hourly price per 3600 s; a monthly rent per month);
- and, where the provider caps what a day or a month can cost (Sakura 高火力 VRT bills "the lesser
  of hourly + daily, and monthly": hours within a day never cost more than the day's price, days
  within a month never more than the month's), capped day by day and month by month.

Money is Decimal yen, never float. The month of a cap is 30 days: a calendar month is never
shorter than 28 days nor longer than 31, and a planner cannot know which month a run falls in;
the period is a field of `Terms` so a caller that knows better can say so.
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from decimal import ROUND_CEILING, Decimal
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from gpuplan.planning.types import Offer

HOUR_S = 3600
DAY_S = 86400
MONTH_S = 30 * DAY_S


@dataclass(frozen=True)
class Terms:
    """The billing terms of one machine.

    price_jpy: yen per `period_s` (an hourly price: period 3600; a monthly rent: its month).
    granularity_s / minimum_s: the usage is rounded up to the granularity and is at least the
    minimum (a machine that ran at all).
    daily_cap_jpy / monthly_cap_jpy: the most one day (86,400 s) / one month (`cap_month_s`)
    of use can cost; None where the provider has no such cap.
    """

    price_jpy: Decimal
    period_s: int = HOUR_S
    granularity_s: int = 1
    minimum_s: int = 0
    daily_cap_jpy: Decimal | None = None
    monthly_cap_jpy: Decimal | None = None
    cap_month_s: int = MONTH_S

    @property
    def capped(self) -> bool:
        return self.daily_cap_jpy is not None or self.monthly_cap_jpy is not None

    @property
    def hourly(self) -> Decimal:
        """Its price for an hour before granularity, minimum and caps (a rent spread over its period)."""
        return self.price_jpy * HOUR_S / self.period_s


def billed_seconds(seconds: int, granularity_s: int, minimum_s: int) -> int:
    """Seconds billed for `seconds` of use: rounded up to the granularity, at least the minimum
    (nothing for a machine never held)."""
    if seconds <= 0:
        return 0
    g = max(1, granularity_s)
    return max(-(-seconds // g) * g, minimum_s)


def _uncapped(seconds: int, t: Terms) -> Decimal:
    return t.price_jpy * billed_seconds(seconds, t.granularity_s, t.minimum_s) / max(1, t.period_s)


def _day_capped(seconds: int, t: Terms) -> Decimal:
    """Whole days at the lesser of 24 h of use and the day's price; the rest likewise."""
    if t.daily_cap_jpy is None:
        return _uncapped(seconds, t)
    days, rest = divmod(seconds, DAY_S)
    full_day = min(_uncapped(DAY_S, t), t.daily_cap_jpy)
    tail = min(_uncapped(rest, t), t.daily_cap_jpy) if rest else Decimal(0)
    if days == 0:
        return tail
    return full_day * days + tail


def charge(seconds: int, terms: Terms) -> Decimal:
    """Yen for holding one machine `seconds` under `terms` (exact Decimal, not rounded)."""
    if seconds <= 0:
        return Decimal(0)
    if not terms.capped:
        return _uncapped(seconds, terms)
    if terms.monthly_cap_jpy is None:
        return _day_capped(seconds, terms)
    months, rest = divmod(seconds, terms.cap_month_s)
    full_month = min(_day_capped(terms.cap_month_s, terms), terms.monthly_cap_jpy)
    tail = min(_day_capped(rest, terms), terms.monthly_cap_jpy) if rest else Decimal(0)
    return full_month * months + tail


def charges(seconds: Sequence[int], terms: Terms) -> list[Decimal]:
    """[charge(x, terms) for x in seconds], the same figures, with what every hold shares (a full
    day's and a full month's charge) worked out once and each length charged once: a capped plan
    of 20,000 jobs holds thousands of machines, many for the same seconds."""
    if not terms.capped:
        return [charge(x, terms) for x in seconds]
    price, per, g, least = terms.price_jpy, max(1, terms.period_s), terms.granularity_s, terms.minimum_s
    daily, monthly, month_s = terms.daily_cap_jpy, terms.monthly_cap_jpy, terms.cap_month_s
    full_day = min(_uncapped(DAY_S, terms), daily) if daily is not None else None

    def day_capped(x: int) -> Decimal:  # _day_capped, its full day worked out once
        if full_day is None or daily is None:
            return _uncapped(x, terms)
        days, rest = divmod(x, DAY_S)
        tail = min(price * billed_seconds(rest, g, least) / per, daily) if rest else Decimal(0)
        return tail if days == 0 else full_day * days + tail

    full_month = min(day_capped(month_s), monthly) if monthly is not None else None
    memo: dict[int, Decimal] = {}
    out = []
    for x in seconds:
        yen = memo.get(x)
        if yen is None:
            if x <= 0:
                yen = Decimal(0)
            elif monthly is None or full_month is None:
                yen = day_capped(x)
            else:
                months, rest = divmod(x, month_s)
                yen = full_month * months + (min(day_capped(rest), monthly) if rest else Decimal(0))
            memo[x] = yen
        out.append(yen)
    return out


def charge_sum(head: int, seconds: Sequence[int], counts: Sequence[int], terms: Terms) -> Decimal:
    """Sum of charge(head + s, terms) x n over `seconds` and `counts` (n machines held head + s
    seconds each), as the planner sums a plan's yen: billed seconds first, priced once, where the
    price alone decides (no cap, or holds under a day that cost less than every cap); each hold
    charged on its own where a cap may bind. Plans of 20,000 jobs hold thousands of kinds of
    machine."""
    g, least = max(1, terms.granularity_s), terms.minimum_s
    per = max(1, terms.period_s)
    if not seconds:
        return Decimal(0)
    if not terms.capped:
        if g == 1 and head + min(seconds) >= max(least, 1):  # by the second, none under the minimum
            billed = head * sum(counts) + sum(map(operator.mul, seconds, counts))
        else:
            billed = sum(map(operator.mul, billed_each(head, seconds, g, least), counts))
        return terms.price_jpy * billed / per
    caps = [c for c in (terms.daily_cap_jpy, terms.monthly_cap_jpy) if c is not None]
    most = min(caps) * per  # a hold billed b seconds costs less than every cap while b x price <= this
    limit = int(most / terms.price_jpy) if terms.price_jpy > 0 else -1
    while terms.price_jpy > 0 and (limit + 1) * terms.price_jpy <= most:
        limit += 1
    while limit >= 0 and limit * terms.price_jpy > most:
        limit -= 1
    under = min(DAY_S, terms.cap_month_s) - head
    linear = 0
    total = Decimal(0)
    for s, n, b in zip(seconds, counts, billed_each(head, seconds, g, least)):
        if s < under and b <= limit:
            linear += b * n
        else:
            total += charge(head + s, terms) * n
    return total + terms.price_jpy * linear / per


def floor_rate(terms: Terms) -> Decimal:
    """The fewest yen a second any hold is billed at under `terms`: charge(T) >= T x floor_rate
    for every T (a day never costs less than its cap over 86,400 s, a month than its cap over
    its seconds, any other hold than the price over its period). For lower bounds."""
    rates = [terms.price_jpy / max(1, terms.period_s)]
    if terms.daily_cap_jpy is not None:
        rates.append(terms.daily_cap_jpy / DAY_S)
    if terms.monthly_cap_jpy is not None:
        rates.append(terms.monthly_cap_jpy / terms.cap_month_s)
    return min(rates)


def charge_yen(seconds: int, terms: Terms) -> int:
    """`charge` in whole yen, rounded up as an invoice rounds a machine's line."""
    return int(charge(seconds, terms).to_integral_value(rounding=ROUND_CEILING))  # Decimal // truncates toward 0


def terms_for(offer: Offer, month_price_jpy: Decimal | None = None) -> Terms:
    """The terms an offer is billed on. An hourly offer bills its yen-per-hour price with its
    row's granularity, minimum and caps; a monthly one (price_unit "month") bills
    `month_price_jpy` (its rent after FX, which the caller knows) per started billing period."""
    g, least = max(1, offer.billing_granularity_s), offer.billing_minimum_s
    if offer.price_unit == "month":
        if month_price_jpy is None:
            raise ValueError(f"{offer.key}: a monthly offer needs its rent in yen")
        return Terms(month_price_jpy, g, g, least)
    if offer.price_jpy_per_hour is None:
        raise ValueError(f"{offer.key}: no price")
    return Terms(offer.price_jpy_per_hour, HOUR_S, g, least, offer.daily_cap_jpy, offer.monthly_cap_jpy)


def charge_tasks(seconds: Sequence[int], terms: Terms) -> Decimal:
    """Yen for a queue of container tasks (Sakura 高火力 DOK): each task billed on its own for its
    seconds, so each pays its own minimum (four 20-s tasks at a 60-s minimum bill 240 s, not 80 s)."""
    return sum((charge(s, terms) for s in seconds), Decimal(0))


def billed_tasks(seconds: Sequence[int], granularity_s: int, minimum_s: int) -> int:
    """Seconds billed for a queue of tasks, each rounded and held to the minimum on its own."""
    return sum(billed_seconds(s, granularity_s, minimum_s) for s in seconds)


def billed_each(head: int, seconds: Sequence[int], granularity_s: int, minimum_s: int) -> list[int]:
    """billed_seconds(head + s) for each s, in one pass (plans of thousands of machines need it)."""
    g, least = max(1, granularity_s), minimum_s
    if g == 1:
        return [x if (x := head + s) >= least else (least if x > 0 else 0) for s in seconds]
    # max() written out: this list is built for every plan's machines, thousands of times an estimate
    return [(y if (y := -(-x // g) * g) > least else least) if (x := head + s) > 0 else 0 for s in seconds]


def per_second(price_jpy_per_hour: Decimal) -> Terms:
    """The terms of a machine whose provider's terms were never recorded (a state file older than
    the ledger's terms columns): its hourly price by the second, no minimum, as it was counted."""
    return Terms(price_jpy_per_hour)


def measured_yen(seconds: float | Decimal, machines: int, terms: Terms | None) -> Decimal | None:
    """What `machines` machines held for `seconds` (a run's measured wall time) are billed, each
    by `terms`: the same rule the plan's prediction used. None where the price is unknown."""
    if terms is None:
        return None
    whole = int(Decimal(str(seconds)).to_integral_value(rounding=ROUND_CEILING))
    return charge(whole, terms) * machines


def seconds_within(charge_at: Callable[[int], Decimal], cap: Decimal, horizon_s: int) -> int:
    """The most whole seconds (0..horizon_s) whose charge stays within `cap`: where a yen cap
    must stop what bills by `charge_at` (any of this module's charges: they never fall as time
    goes on, so the last such second is found by halving). horizon_s when even it stays within;
    -1 when not even 0 seconds do."""
    if charge_at(horizon_s) <= cap:
        return horizon_s
    if charge_at(0) > cap:
        return -1
    low, high = 0, horizon_s  # within at low, over at high
    while high - low > 1:
        mid = (low + high) // 2
        low, high = (mid, high) if charge_at(mid) <= cap else (low, mid)
    return low
