"""Hand-made offers and a small catalog for planner unit tests (no snapshot files involved)."""

from __future__ import annotations

from datetime import date
from decimal import Decimal
from types import MappingProxyType

from gpuplan.market.catalog import Catalog, FxRate, GpuInfo, ProviderFacts
from gpuplan.planning.types import Offer


def offer(name="vm1", provider="azure", gpu="K80", gpus=1, price="100", granularity=60, minimum=60, vcpus=6,
          memory="12", family="fam", retired_on=None, successor="", kind="cloud", power_watts=None, as_of="2017-08",
          region="r1", purchase=None) -> Offer:
    p = Decimal(price) if price is not None else None
    return Offer(
        provider=provider, name=name, aliases=(), region=region, gpu=gpu, gpu_count=gpus,
        gpu_memory_gib=Decimal(memory), vcpus=vcpus, ram_gib=Decimal(56),
        price=Decimal(purchase) if purchase else p, currency="JPY",
        price_unit="purchase" if kind == "owned" else "hour", price_jpy_per_hour=p,
        billing_granularity_s=granularity, billing_minimum_s=minimum, quota_family=family,
        available_from=None, retired_on=retired_on, successor=successor, kind=kind, power_watts=power_watts,
        source="test", as_of=as_of,
    )


def facts(name="azure", setup_min=60, capture_min=0, launch_min=0, builder_is_worker=False, quota=20, family=None):
    return ProviderFacts(
        name=name, default_region="r1", default_quota_vcpus=quota, family_quota_vcpus=MappingProxyType(family or {}),
        quota_name="Total Regional vCPUs", how_to_raise="ask", setup_s=setup_min * 60, capture_s=capture_min * 60,
        launch_s=launch_min * 60, builder_is_worker=builder_is_worker, power_price_jpy_per_kwh=Decimal(30),
        source="test facts", notes="",
    )


GPUS = MappingProxyType({
    "K80": GpuInfo("K80", Decimal(12), {"cnn-train": Decimal("0.13")}, "low", "t"),
    "V100": GpuInfo("V100", Decimal(16), {"cnn-train": Decimal("1.0")}, "high", "t"),
    "T4": GpuInfo("T4", Decimal(16), {"cnn-train": Decimal("0.39")}, "low", "t"),
})


def catalog(offers, providers=None, snapshot="2017-08", on=date(2017, 8, 31)) -> Catalog:
    return Catalog(
        snapshot=snapshot, date=on, offers=tuple(offers), gpus=GPUS,
        fx=MappingProxyType({"JPY": FxRate("JPY", Decimal(1), "", "identity")}),
        providers=MappingProxyType(providers or {"azure": facts()}),
    )
