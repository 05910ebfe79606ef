"""catalog._offer_with is dataclasses.replace for an Offer (issue 47: made without __init__, it
must be the very same value): every shipped offer, each field changed, compares equal, hashes
equal and reads the same; a field an Offer lacks is refused as replace refuses it."""

from __future__ import annotations

import dataclasses
from decimal import Decimal

import pytest

from gpuplan.market import catalog, tax
from gpuplan.planning.types import Offer


def test_offer_with_is_dataclasses_replace_for_every_shipped_offer():
    offers = catalog.load().offers
    assert len(offers) > 50
    for o in offers:
        for changes in ({"notes": "x"}, {"price_jpy_per_hour": Decimal("12.5"), "tax": "included"},
                        {"market": "spot", "price": Decimal(3), "source": "s", "as_of": "2026-11"}):
            made, want = catalog._offer_with(o, **changes), dataclasses.replace(o, **changes)
            assert type(made) is Offer and made == want and hash(made) == hash(want)
            assert dataclasses.asdict(made) == dataclasses.asdict(want) and made.key == want.key
        assert catalog._offer_with(o) == o and catalog._offer_with(o) is not o
    with pytest.raises(TypeError):
        catalog._offer_with(offers[0], no_such_field=1)
    with pytest.raises(dataclasses.FrozenInstanceError):
        catalog._offer_with(offers[0], notes="y").notes = "z"  # type: ignore[misc]


def test_the_taxed_catalog_is_what_replace_made():
    cat = catalog.load()
    rate = tax.rate_on(cat.date)
    for o in catalog.with_tax(cat, "included").offers:
        assert o.tax_rate == rate or o.tax == "unknown"
