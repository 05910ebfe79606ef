"""One tax basis for every yen gpuplan compares (issue 31).

Catalog rows say whether their price includes Japan's 10 % consumption tax (`Offer.tax`:
"included", "excluded" or "unknown"). Sakura lists prices with it, AWS and Azure without: yen
compared as listed are biased 10 % against Sakura. Every comparison (ranking, frontier, budget,
deadline, settle line, a launch's max_yen, cost-report) therefore puts all yen on one basis first:
by default "included", what a Japanese company pays for all of them; "excluded" for the view
without it. A row whose source does not say ("unknown") is counted as listed in both views.

Only Decimal: imports nothing else of gpuplan but errors.
"""

from __future__ import annotations

from decimal import Decimal

from gpuplan.errors import UsageError

CONSUMPTION_TAX = Decimal("0.10")  # Japan's standard consumption tax rate since 2019-10-01
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


def factor(listed: str, basis: str) -> tuple[Decimal, Decimal]:
    """(multiply, divide) taking a price listed on `listed` to `basis`: 1.1 / 1 adds the tax,
    1 / 1.1 takes it out (dividing exactly rather than by an inverse), 1 / 1 where nothing
    changes ("unknown" rows, or a row already on the basis). `basis` may be "as-listed"."""
    up = 1 + CONSUMPTION_TAX
    if listed == "excluded" and basis == "included":
        return up, Decimal(1)
    if listed == "included" and basis == "excluded":
        return Decimal(1), up
    return Decimal(1), Decimal(1)


def on_basis(yen: Decimal, listed: str, basis: str) -> Decimal:
    """`yen` of a price listed on `listed`, put on `basis`."""
    times, over = factor(listed, basis)
    return yen * times / over if (times, over) != (1, 1) else yen


def moved(yen: Decimal, listed: str, start: str, basis: str) -> Decimal:
    """Yen on basis `start` of a price listed on `listed`, put on `basis` (a saved plan's yen
    on a launch's basis; "as-listed" for a plan written before plans said their basis)."""
    if start == basis:
        return yen
    times, over = factor(listed, start)
    return on_basis(yen * over / times, listed, basis)


def said(basis: str) -> str:
    """The basis in words, for a header or a note line."""
    return {"included": "yen include Japan's 10 % consumption tax",
            "excluded": "yen exclude consumption tax"}.get(basis, "yen as each price is listed")
