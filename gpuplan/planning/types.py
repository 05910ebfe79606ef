"""The nouns of gpuplan as frozen dataclasses. This module imports nothing else of gpuplan.

Money is Decimal yen (or Decimal in the row's own currency before FX); durations are
integer seconds; dates are ISO strings "YYYY-MM-DD" or datetime.date.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import date
from decimal import Decimal


@dataclass(frozen=True)
class Interruption:
    """How often a spot row's capacity is reclaimed: a share of machines a month, as a range
    (low_pct to high_pct: a published bucket such as AWS's "10-15 %", or the range assumed where
    nobody publishes one, `known` False), with its source and the date of the figure."""

    frequency: str  # as published: "<5 %", "10-15 %", ">20 %"; "unknown" where none is
    low_pct: Decimal
    high_pct: Decimal
    source: str
    as_of: str = ""
    notes: str = ""
    publisher: str = ""  # who publishes the figure, in a few words ("AWS Spot Instance Advisor"); "" where none

    @property
    def known(self) -> bool:
        return self.frequency != "unknown"


@dataclass(frozen=True)
class Offer:
    """One rentable (or owned) machine shape at one provider and region, from one snapshot row.

    kind: "cloud" (billed by time), "monthly" (flat monthly rent), "owned" (bought up front,
    then power), "task" (a container task billed by time with nothing to set up, one running
    at a time per project: Sakura 高火力 DOK). price is per `price_unit` ("hour", "month" or "purchase") in `currency`;
    None where no source gives one (then `notes` says so and plans on it are infeasible).
    price_jpy_per_hour is the hourly price in yen after FX (None where unknown).
    """

    provider: str  # "azure", "aws", "sakura", "onprem", ...
    name: str  # provider's own size name: "Standard_NC6", "g4dn.xlarge"
    aliases: tuple[str, ...]  # short names a user types: ("nc6",)
    region: str
    gpu: str  # key into the GPU table: "K80", "T4", "H100 SXM"
    gpu_count: int
    gpu_memory_gib: Decimal  # per GPU
    vcpus: int
    ram_gib: Decimal
    price: Decimal | None
    currency: str  # "JPY", "USD"
    price_unit: str  # "hour" | "month" | "purchase"
    price_jpy_per_hour: Decimal | None
    billing_granularity_s: int  # 60 for per-minute, 1 per-second, 3600 hourly
    billing_minimum_s: int
    quota_family: str  # "standardNCFamily", "G-and-VT" ..., "" if none
    available_from: date | None
    retired_on: date | None
    successor: str  # name of the replacement size where retired
    kind: str = "cloud"
    market: str = "on-demand"  # or "spot": interruptible capacity at the spot price (notes say how it is interrupted)
    power_watts: int | None = None  # owned hardware: draw under load
    source: str = ""
    as_of: str = ""
    notes: str = ""
    # Caps on what a day / a month of use costs, in yen after FX (Sakura VRT: "the lesser of
    # hourly + daily, and monthly"); None where the provider has none. See market/billing.py.
    daily_cap_jpy: Decimal | None = None
    monthly_cap_jpy: Decimal | None = None
    # Whether `price` includes Japan's consumption tax: "included", "excluded" or "unknown"
    # (the source does not say); `tax_source` says how the row's source states it. Every estimate
    # puts every row on one basis at the rate of the catalog's date (catalog.with_tax,
    # market/tax.py): `listed_tax` then keeps the row's own ("": as `tax`), `tax_rate` the rate
    # applied (None: today's) and `tax_assumed` the basis an "unknown" row was planned on.
    tax: str = "unknown"
    listed_tax: str = ""
    tax_source: str = ""
    tax_rate: Decimal | None = None
    tax_assumed: str = ""
    # a spot row's interruption figure (catalog spot_interruptions.csv); None: none in the
    # snapshot (the model then assumes the unknown range, market/spot_risk.py)
    interruption: Interruption | None = None

    @property
    def key(self) -> str:
        """Unique within a snapshot: provider:name@region (and "#spot" for the spot row)."""
        return f"{self.provider}:{self.name}@{self.region}" + ("#spot" if self.market == "spot" else "")

    def retired(self, on: date) -> bool:
        return self.retired_on is not None and on >= self.retired_on
