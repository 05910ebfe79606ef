"""Spot prices: dated, sourced catalog rows beside their on-demand offer, never mistaken for it."""

from __future__ import annotations

from decimal import Decimal

import yaml

from gpuplan.market import catalog


def test_spot_row_follows_its_offer_with_its_own_price_source_and_interruption_rule():
    cat = catalog.load("2026-11")
    od = cat.resolve("aws:g4dn.xlarge", region="us-east-1")
    assert od.market == "on-demand"  # a size name never resolves to the spot row
    spot = cat.spot_offer(od)
    assert spot.key == "aws:g4dn.xlarge@us-east-1#spot"
    assert spot.price == Decimal("0.2158") and spot.price_jpy_per_hour == Decimal("0.2158") * cat.fx["USD"].jpy_per_unit
    assert "SpotPrice" in spot.source and spot.as_of == "2025"
    assert spot.notes.startswith("spot: EC2 may stop or terminate a Spot Instance with a two-minute notice")
    assert spot not in cat.find(provider="aws") and spot in cat.find(provider="aws", spot=True)
    # placeholders (spot == on-demand in the source) are left out: no spot row rather than a wrong one
    assert cat.spot_offer(cat.resolve("azure:Standard_NC40ads_H100_v5")) is None


def test_a_price_override_changes_the_on_demand_row_only(tmp_path):
    prices = tmp_path / "prices.yaml"
    prices.write_text(yaml.safe_dump({"offers": [{"provider": "aws", "name": "g4dn.xlarge", "region": "us-east-1",
                                                  "price": 100, "currency": "JPY"}]}))
    cat = catalog.load("2026-11", prices_file=prices)
    od = cat.resolve("aws:g4dn.xlarge", region="us-east-1")
    assert od.price_jpy_per_hour == 100
    assert cat.spot_offer(od).price == Decimal("0.2158")
