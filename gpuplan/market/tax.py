"""One tax basis for every yen gpuplan compares (issues 31 and 42).

Catalog rows say whether their price includes Japan's consumption tax (`Offer.tax`: "included",
"excluded" or "unknown") and, in `tax_source`, where that comes from. Sakura lists prices with it,
AWS and Azure without: yen compared as listed are biased against Sakura. Every comparison
(ranking, frontier, budget, deadline, settle line, a launch's max_yen, cost-report) therefore puts
all yen on one basis first: by default "included", what a Japanese company pays for all of them;
"excluded" for the view without it.

The rate is the one in force on the date of the prices (`rate_on`): 5 % before 2014-04-01, 8 %
from 2014-04-01, 10 % from 2019-10-01 (RATES). A row whose source does not say ("unknown") is
planned as listed before tax (ASSUMED_UNKNOWN: the dearer reading in the "included" view) and the
estimate plans it again on the other reading and says whether the pick depends on it.

Only Decimal and date: imports nothing else of gpuplan but errors.
"""

from __future__ import annotations

from datetime import date
from decimal import Decimal

from gpuplan.errors import UsageError

# Japan's consumption tax (national and local together, the standard rate) from each date on.
# Source: National Tax Agency, Tax Answer No.6303 「消費税及び地方消費税の税率」,
# https://www.nta.go.jp/taxes/shiraberu/taxanswer/shohi/6303.htm (5 % to 2014-03-31, 8 % from
# 2014-04-01, 10 % from 2019-10-01); the same dates in moneyforward/jct's rate table
# (rubydoc.info/gems/jct, `Jct.rate`). The reduced 8 % rate (food, newspapers) applies to no GPU.
RATES: tuple[tuple[date, Decimal], ...] = (
    (date(1997, 4, 1), Decimal("0.05")),
    (date(2014, 4, 1), Decimal("0.08")),
    (date(2019, 10, 1), Decimal("0.10")),
)
SOURCE = "National Tax Agency, Tax Answer No.6303 (https://www.nta.go.jp/taxes/shiraberu/taxanswer/shohi/6303.htm)"
CONSUMPTION_TAX = RATES[-1][1]  # the rate today (since 2019-10-01)
ASSUMED_UNKNOWN = "excluded"  # how an "unknown" row is planned first; the estimate plans the other reading too
DEFAULT = "included"
BASES = ("included", "excluded")
_SPELLINGS = {"included": "included", "include": "included", "excluded": "excluded", "exclude": "excluded"}


def parse(text: str | None, what: str = "--tax") -> str:
    """"included" or "excluded" from what a user typed (include / exclude too); None: the default."""
    if text is None:
        return DEFAULT
    basis = _SPELLINGS.get(str(text).strip().lower())
    if basis is None:
        raise UsageError(f"bad {what} {text!r}: {what} takes a basis: included (the default: what a Japanese company"
                         " pays) or excluded")
    return basis


def rate_on(day: date | None) -> Decimal:
    """The consumption tax rate in force on `day` (None: today's)."""
    if day is None:
        return CONSUMPTION_TAX
    if day < RATES[0][0]:
        raise UsageError(f"no consumption tax rate for {day.isoformat()} in gpuplan (it knows them from"
                         f" {RATES[0][0].isoformat()} on)")
    return next(r for start, r in reversed(RATES) if day >= start)


def rate_of_snapshot(snapshot: str) -> Decimal:
    """The rate on the last day of a catalog snapshot's month ("2017-08": 8 %); today's for a
    name that is not a month."""
    import calendar

    try:
        year, month = (int(x) for x in snapshot.split("-")[:2])
        return rate_on(date(year, month, calendar.monthrange(year, month)[1]))
    except (ValueError, UsageError):
        return CONSUMPTION_TAX


def percent(rate: Decimal) -> str:
    """0.08 -> "8 %"."""
    return f"{(rate * 100).normalize():f} %"


def factor(listed: str, basis: str, rate: Decimal = CONSUMPTION_TAX) -> tuple[Decimal, Decimal]:
    """(multiply, divide) taking a price listed on `listed` to `basis` at `rate`: 1.1 / 1 adds the
    tax, 1 / 1.1 takes it out (dividing exactly rather than by an inverse), 1 / 1 where nothing
    changes ("unknown" rows, or a row already on the basis). `basis` may be "as-listed"."""
    up = 1 + rate
    if listed == "excluded" and basis == "included":
        return up, Decimal(1)
    if listed == "included" and basis == "excluded":
        return Decimal(1), up
    return Decimal(1), Decimal(1)


def on_basis(yen: Decimal, listed: str, basis: str, rate: Decimal = CONSUMPTION_TAX) -> Decimal:
    """`yen` of a price listed on `listed`, put on `basis` at `rate`."""
    times, over = factor(listed, basis, rate)
    return yen * times / over if (times, over) != (1, 1) else yen


def moved(yen: Decimal, listed: str, start: str, basis: str, rate: Decimal = CONSUMPTION_TAX) -> Decimal:
    """Yen on basis `start` of a price listed on `listed`, put on `basis` (a saved plan's yen
    on a launch's basis; "as-listed" for a plan written before plans said their basis)."""
    if start == basis:
        return yen
    times, over = factor(listed, start, rate)
    return on_basis(yen * over / times, listed, basis, rate)


def said(basis: str, rate: Decimal = CONSUMPTION_TAX) -> str:
    """The basis in words, for a header or a note line."""
    return {"included": f"yen include Japan's {percent(rate)} consumption tax",
            "excluded": "yen exclude consumption tax"}.get(basis, "yen as each price is listed")
