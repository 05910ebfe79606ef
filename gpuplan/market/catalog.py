"""The dated, sourced catalog: instance types, GPUs, exchange rates and provider facts.

Data lives in `catalog/` (installed as the package `gpuplan.catalog_data`) as CSV files, one
folder per snapshot (`snapshots/YYYY-MM/offers.csv`, `providers.csv`, `quotas.csv`) plus the
snapshot-independent `gpus.csv` and `fx.csv`. `gpuplan catalog refresh` writes dated snapshots
(`YYYY-MM-DD/`, with their own `fx.csv`) into the user's data dir (`user_snapshots_dir()`);
the loader sees both, and the newest wins unless `as_of` says otherwise. A user's
`prices.yaml` (in the config dir, or the file named by `GPUPLAN_PRICES`) overrides or adds
offers, FX rates and power prices:

    fx:
      USD: 150.0                          # or {jpy_per_unit: 150.0, date: 2026-11-20, source: my bank}
    providers:
      baremetal: {power_price_jpy_per_kwh: 31}
    offers:
      - {provider: azure, name: Standard_NC4as_T4_v3, region: eastus, price: 80, currency: JPY}
      - {provider: sakura, name: my-h100, region: is1a, gpu: H100 SXM, gpu_count: 1,
         price: 990, currency: JPY, price_unit: hour, snapshot: 2026-11}

An offers entry that names an existing provider:name (and region, if given) changes only the
fields it lists; any other entry is a new offer and needs at least provider, name, region, gpu,
gpu_count, price and currency. `snapshot` limits an entry to one snapshot.

Only the csv module and Decimal: `load` runs in `gpuplan estimate` and must stay fast.
"""

from __future__ import annotations

import csv
import dataclasses
import io
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import date, timedelta
from decimal import Decimal, InvalidOperation
from functools import cache, lru_cache
from importlib import resources
from pathlib import Path
from types import MappingProxyType
from typing import Any, Literal, overload

from gpuplan.errors import UsageError
from gpuplan.market import tax
from gpuplan.planning.types import Interruption, Offer

NAMES_LISTED = 6  # sizes a name that fits several lists at most (then "and N more")
_PER_MACHINE_RE = re.compile(r"^(.+?)x(\d+)$")  # "t4x4": a GPU and how many a machine (normalized: no spaces)
HOURS_PER_MONTH = Decimal(730)  # 8760 / 12: the hourly equivalent of a month's rent
PRICES_ENV = "GPUPLAN_PRICES"
_SNAPSHOT_RE = re.compile(r"^(\d{4})-(\d{2})(?:-(\d{2}))?$", re.ASCII)  # shipped YYYY-MM, refreshed YYYY-MM-DD


@dataclass(frozen=True)
class GpuInfo:
    name: str
    memory_gib: Decimal
    rel_speed: Mapping[str, Decimal]  # workload class -> speed relative to V100 (1.0): {"cnn-train": ...}
    confidence: str
    source: str
    architecture: str = ""  # NVIDIA's architecture ("Ampere"): a measured GPU's speed scales within one
    speed_sources: Mapping[str, str] = field(default_factory=dict)  # workload class -> where its figure comes from
    # workload class -> how the figure reaches the reference V100 (SPEED_BASES): "same-suite", "bridged", ...
    speed_basis: Mapping[str, str] = field(default_factory=dict)


# how a class figure of gpus.csv reaches the reference V100 (docs/catalog.md, "Speed classes")
SPEED_BASES = {
    "same-suite": "measured in the table that measured the V100",
    "bridged": "two published tables joined through a GPU both measured",
    "cross-suite": "the same benchmark, the V100 from another release or suite",
    "proxy": "another product on the same chip, measured in one of the above",
}


@dataclass(frozen=True)
class FxRate:
    """Yen per one unit of `currency`, as of `date`, with where the figure came from."""

    currency: str
    jpy_per_unit: Decimal
    date: str
    source: str
    notes: str = ""  # e.g. how old the rate is against the snapshot that uses it


@dataclass(frozen=True)
class ProviderFacts:
    """Per-provider facts of one snapshot: quota defaults, setup/capture/launch times in seconds."""

    name: str
    default_region: str
    default_quota_vcpus: int | None  # total regional quota on a default account, in quota_unit; None = unknown/none
    family_quota_vcpus: Mapping[str, int]  # quota family -> default vCPUs (Azure GPU families: 0)
    quota_name: str
    how_to_raise: str
    setup_s: int
    capture_s: int
    launch_s: int
    builder_is_worker: bool  # can the machine an image was captured from keep working?
    power_price_jpy_per_kwh: Decimal | None
    source: str
    notes: str
    task_start_s: int = 0  # a container task's image pull and start (kind "task" offers): wall time, not billed
    quota_unit: str = "vCPUs"  # what default_quota_vcpus counts: "vCPUs", or "GPUs" (GCP's GPUS_ALL_REGIONS)


@dataclass(frozen=True)
class Link:
    """The links a data-parallel job's gradients cross on one instance type (catalog/links.csv):
    between the GPUs of one machine (intra) and between machines (inter). Bandwidths in Gbit/s
    (10^9 bits) per direction, per GPU (intra) or per machine (inter); `*_effective` is the share
    an allreduce achieves. None = not sourced."""

    provider: str
    name: str
    intra_node_link: str
    intra_node_gbps: Decimal | None
    intra_node_effective: Decimal | None
    inter_node_link: str
    inter_node_gbps: Decimal | None
    inter_node_effective: Decimal | None
    source: str
    as_of: str
    notes: str
    # each in-node pass of the gradients around a host-staged allreduce (NCCL reduce and broadcast
    # inside the machine, device-to-host and host-to-device copies), Gbit/s; None: no such passes
    in_node_pass_gbps: Decimal | None = None
    # where inter_node_gbps is an "up to" (burst) figure: the sustained baseline, Gbit/s
    inter_node_baseline_gbps: Decimal | None = None
    # the machine's local disk read rate, MB/s (10^6 bytes); None: not sourced
    disk_read_mb_per_s: Decimal | None = None

    def sustained_network_gbps(self) -> tuple[Decimal | None, str]:
        """The machine's network bandwidth for hours of traffic, Gbit/s, and what it is: the line
        rate, or where that is an "up to" (burst) figure its baseline (a burst lasts minutes);
        None where not sourced."""
        if self.inter_node_gbps is None:
            return None, ""
        if self.inter_node_baseline_gbps is not None:
            return self.inter_node_baseline_gbps, (f"{self.inter_node_link}: 'up to' {self.inter_node_gbps} Gbit/s is a"
                                                   " burst, its sustained baseline is used")
        return self.inter_node_gbps, self.inter_node_link


@dataclass(frozen=True)
class ImageRule:
    """What a provider's images can do in one era (catalog/images.csv): capture at all, and which
    sizes an image may start ("any", "same-gpu", "same-size")."""

    provider: str
    start: str  # first month "YYYY-MM" the rule holds
    until: str  # last month, "" = still
    capture: bool
    usable_by: str
    source: str
    notes: str


@dataclass(frozen=True)
class Catalog:
    snapshot: str  # "2017-08"
    date: date  # last day of the snapshot's month: retirement checks when planning "as of" it
    offers: tuple[Offer, ...]
    gpus: Mapping[str, GpuInfo]
    fx: Mapping[str, FxRate]
    providers: Mapping[str, ProviderFacts]
    prices_file: Path | None = field(default=None, compare=False)  # the user overrides applied, if any
    links: Mapping[tuple[str, str], Link] = field(default_factory=dict)  # (provider, instance type) -> links
    image_rules: tuple[ImageRule, ...] = ()

    def link(self, offer: Offer) -> Link | None:
        """The interconnect figures of the offer's instance type, or None where none are sourced."""
        return self.links.get((offer.provider, offer.name))

    def image_rule(self, provider: str, month: str) -> ImageRule | None:
        """The provider's image rule for the month "YYYY-MM", or None where the catalog has none."""
        for rule in self.image_rules:
            if rule.provider == provider and rule.start <= month and (not rule.until or month <= rule.until):
                return rule
        return None

    def provider_names(self) -> list[str]:
        return sorted({o.provider for o in self.offers} | set(self.providers))

    def _check_provider(self, provider: str | None) -> str | None:
        if provider is None:
            return None
        p = provider.strip().lower()
        if p not in self.provider_names():
            raise UsageError(
                f"unknown provider {provider!r} in catalog {self.snapshot}; "
                f"known: {', '.join(self.provider_names())}"
            )
        return p

    def resolve(self, text: str, provider: str | None = None, region: str | None = None) -> Offer:
        """The one offer `text` names: "nc6", "Standard_NC6", "azure:Standard_NC6", "aws:g4dn.xlarge",
        or a GPU ("t4", "aws:h100", "a100x8"): see `resolve_named`."""
        return self.resolve_named(text, provider, region)[0]

    def resolve_named(self, text: str, provider: str | None = None, region: str | None = None) -> tuple[Offer, str]:
        """The one offer `text` names, and a line saying which size a GPU name was read as ("" where
        `text` named the size itself).

        A size's name or alias: case, "Standard_" and punctuation are forgiven ("NC4as_T4_v3",
        "g4dn-XLARGE"). Else a GPU ("t4", "h100", "a100-80"; "t4x4": four a machine): the sizes
        with that GPU, of one GPU a machine where any has one and no count is given, sold by the
        hour where any is, neither retired nor a 高火力 DOK task where any other fits; exactly one
        such size is taken, several are listed (cheapest first, with their yen/h) and refused:
        `aws:t4` names the provider too. Else the start of exactly one size's name ("nc24ads" is
        Standard_NC24ads_A100_v4); a name that fits several lists them. Among several regions:
        `region` if given, else the provider's default region, else the first row.
        """
        raw = text.strip()
        if ":" in raw:
            prefix, _, raw = raw.partition(":")
            if provider is not None and provider.strip().lower() != prefix.strip().lower():
                raise UsageError(f"{text!r} names provider {prefix!r} but --provider is {provider!r}")
            provider = prefix
        provider = self._check_provider(provider)
        if not _norm_size(raw):
            raise UsageError("empty instance type; name one such as nc6 (gpuplan catalog lists them)")
        pool = [o for o in self.offers if (provider is None or o.provider == provider) and o.market == "on-demand"]
        want = _norm_size(raw)
        matches = [o for o in pool if want in {_norm_size(n) for n in (o.name, *o.aliases)}]
        if not matches:  # a GPU's name, or the start of one ("h100"), before the start of a size's name
            by_gpu = self._gpu_sizes(raw, pool, provider, region, loose=False)
            if by_gpu is not None:
                return by_gpu
            matches = [o for o in pool if any(_norm_size(n).startswith(want) for n in (o.name, *o.aliases))]
        if not matches:  # a part of a GPU's name ("1080ti"): only where no size's name starts with it ("nv")
            by_gpu = self._gpu_sizes(raw, pool, provider, region, loose=True)
            if by_gpu is not None:
                return by_gpu
        if not matches:
            names = sorted({n for o in pool for n in (o.name, *o.aliases)})
            import difflib

            close = difflib.get_close_matches(raw.strip().lower(), [n.lower() for n in names], n=3, cutoff=0.6)
            pretty = [next(n for n in names if n.lower() == c) for c in close]
            hint = f"; did you mean {' or '.join(pretty)}?" if pretty else ""
            where = f" at {provider}" if provider else ""
            gpus = self.match_gpus(raw) if provider else []
            if gpus and not hint:  # a GPU this provider has no size of ("aws:a10")
                raise UsageError(f"no {provider} size has {' or '.join(gpus[:3])} GPUs (catalog {self.snapshot});"
                                 f" `gpuplan catalog --gpu {raw.strip()}` lists the sizes that do")
            raise UsageError(f"unknown instance type {raw!r}{where}{hint} (gpuplan catalog lists them)")
        kinds = sorted({(o.provider, o.name) for o in matches})
        if len(kinds) > 1:
            choices = ", ".join(f"{p}:{n}" for p, n in kinds[:8]) + (f" and {len(kinds) - 8} more" if len(kinds) > 8 else "")
            raise UsageError(f"instance type {raw!r} fits several: {choices}; write one of them")
        return self._in_region(matches, region), ""

    def _in_region(self, matches: list[Offer], region: str | None) -> Offer:
        """The row of one size (`matches`: its rows) in `region`, else in its provider's default region, else the first."""
        prov, name = matches[0].provider, matches[0].name
        if region is not None:
            in_region = [o for o in matches if o.region.lower() == region.strip().lower()]
            if not in_region:
                regions = ", ".join(sorted({o.region for o in matches}))
                hint = ""
                if not self.find(provider=prov, region=region):  # none of the provider's rows there: say what adds them
                    from gpuplan.market import regions as known

                    if known.owner(region) == prov:
                        hint = f"; {known.no_offers([region], self.snapshot)}"
                raise UsageError(
                    f"{prov}:{name} is not offered in {region} (catalog {self.snapshot}); regions: {regions}{hint}"
                )
            return in_region[0]
        facts = self.providers.get(prov)
        if facts is not None:
            for o in matches:
                if o.region == facts.default_region:
                    return o
        return matches[0]

    def _gpu_sizes(self, raw: str, pool: list[Offer], provider: str | None, region: str | None,
                   loose: bool) -> tuple[Offer, str] | None:
        """`raw` read as a GPU ("t4", "h100", "t4x4": four a machine) among `pool`: the one size that
        fits and the line that says so; None where `raw` is no GPU any row of `pool` has. A GPU's
        name or its start; `loose`: a part of it too (`match_gpus`). Several sizes that fit are
        refused with their list."""
        def named(text: str) -> list[str]:
            hits = self.match_gpus(text)
            if not loose and not all(_norm_gpu(g).startswith(_norm_gpu(text)) for g in hits):
                return []
            return [g for g in hits if any(o.gpu == g for o in pool)]

        per: int | None = None
        gpus = named(raw)
        if not gpus:
            split = _PER_MACHINE_RE.match(_norm_gpu(raw))
            if split is None:
                return None
            gpus = named(split.group(1))
            per = int(split.group(2))
            if not gpus:
                return None
        rows = [o for o in pool if o.gpu in gpus]
        if per is not None:
            rows = [o for o in rows if o.gpu_count == per]
        elif any(o.gpu_count == 1 for o in rows):
            rows = [o for o in rows if o.gpu_count == 1]
        for keep in (lambda o: o.kind == "cloud", lambda o: o.kind != "task", lambda o: not o.retired(self.date)):
            if any(keep(o) for o in rows):  # by the hour, then what can be provisioned, then what is still sold
                rows = [o for o in rows if keep(o)]
        which = " or ".join(gpus) if len(gpus) <= 3 else f"{', '.join(gpus[:3])} ..."
        if per is None and rows and all(o.gpu_count == 1 for o in rows):
            per = 1
        gpu_words = f"{per}x {which}" if per is not None else f"{which} GPUs"
        at = f"{provider} " if provider else ""
        if region is not None:
            there = [o for o in rows if o.region.lower() == region.strip().lower()]
            if rows and not there:
                hint = ""
                if not self.find(region=region):  # no rows there at all: say what adds them, where something can
                    from gpuplan.market import regions as known

                    hint = f"; {known.no_offers([region], self.snapshot)}" if known.owner(region) else ""
                raise UsageError(f"no {at}size with {gpu_words} is offered in {region} (catalog {self.snapshot});"
                                 f" `gpuplan catalog --gpu {gpus[0].lower().replace(' ', '-')}` lists where they are{hint}")
            rows = there
        if not rows:
            raise UsageError(f"no {at}size has {gpu_words} (catalog {self.snapshot}); `gpuplan catalog --gpu"
                             f" {gpus[0].lower().replace(' ', '-')}` lists the sizes with that GPU")
        sizes: dict[tuple[str, str], list[Offer]] = {}
        for o in rows:
            sizes.setdefault((o.provider, o.name), []).append(o)
        picks = [self._in_region(same, region) for same in sizes.values()]
        if len(picks) == 1:
            o = picks[0]
            typed = f"{provider}:{raw}" if provider else raw
            within = f" in {region.strip()}" if region is not None else ""
            return o, f"{typed!r} is {o.provider}:{o.name}: the only {at}size with {gpu_words}{within}"
        hourly = {id(o): offer_with_tax(o, "included").price_jpy_per_hour for o in picks}
        picks.sort(key=lambda o: (hourly[id(o)] is None, hourly[id(o)] or 0, o.provider, o.name))
        from gpuplan.planning import fmt

        listed = ", ".join(f"{o.provider}:{o.name} {fmt.rate(hourly[id(o)])}/h" for o in picks[:NAMES_LISTED])
        more = f" and {len(picks) - NAMES_LISTED} more" if len(picks) > NAMES_LISTED else ""
        name_one = "" if provider else f", or name a provider too ({picks[0].provider}:{raw})"
        raise UsageError(f"{raw!r} fits {len(picks)} {at}sizes with {gpu_words}: {listed}{more} (yen/h with 10 %"
                         f" consumption tax); write one of them{name_one}")

    def match_gpus(self, text: str) -> list[str]:
        """The GPU names `text` means, forgiving case, spaces and suffixes: "t4" is T4, "h100" is
        H100 NVL, H100 PCIe and H100 SXM, "a100-80" is A100 80GB. An exact name wins over names
        it starts, which win over names it is part of ("1080ti"); [] when nothing fits."""
        want = _norm_gpu(text)
        if not want:
            return []
        names = sorted(set(self.gpus) | {o.gpu for o in self.offers})
        for fits in (lambda n: n == want, lambda n: n.startswith(want), lambda n: want in n):
            hits = [g for g in names if fits(_norm_gpu(g))]
            if hits:
                return hits
        return []

    def find(self, provider: str | None = None, gpu: str | None = None, region: str | None = None,
             spot: bool = False) -> list[Offer]:
        """Offers matching every filter given (case-insensitive; a GPU as `match_gpus` reads it),
        retired ones included; the spot rows too when `spot`."""
        provider = self._check_provider(provider)
        gpus = set(self.match_gpus(gpu)) if gpu else None
        r = region.strip().lower() if region else None
        return [
            o for o in self.offers
            if (provider is None or o.provider == provider)
            and (gpus is None or o.gpu in gpus)
            and (r is None or o.region.lower() == r)
            and (spot or o.market == "on-demand")
        ]

    def spot_offer(self, offer: Offer) -> Offer | None:
        """The spot row of an on-demand offer, where the snapshot prices one."""
        return next((o for o in self.offers if o.market == "spot" and o.key == offer.key + "#spot"), None)

    def offer_status(self, offer: Offer) -> str:
        """'active', 'retired 2023-09-06 -> Standard_NC4as_T4_v3' or 'price not sourced'."""
        if offer.retired(self.date):
            arrow = f" -> {offer.successor}" if offer.successor else ""
            return f"retired {offer.retired_on.isoformat() if offer.retired_on else '?'}{arrow}"
        if offer.price is None and offer.price_jpy_per_hour is None:  # an inventory host has no price, only power
            return "price not sourced"
        return "active"


def _norm_gpu(text: str) -> str:
    return re.sub(r"[\s_\-.()]+", "", text or "").lower()


def _norm_size(text: str) -> str:
    """A size name as people type it: no case, no "Standard_" prefix, no punctuation."""
    t = (text or "").strip().lower()
    t = t[len("standard_"):] if t.startswith("standard_") else t
    return re.sub(r"[\s_\-.]+", "", t)


# ---------------------------------------------------------------------------------------------
# public functions


def snapshots() -> list[str]:
    """The snapshot names gpuplan can load, oldest first: ["2017-08", "2026-11", "2026-11-23"]:
    the shipped ones and those `gpuplan catalog refresh` wrote into the user's data dir."""
    return sorted(_snapshot_folders())


def load(as_of: str | None = None, prices_file: Path | None = None, *, user_prices: bool = True) -> Catalog:
    """The catalog of the newest snapshot not after `as_of` ("YYYY-MM" or "YYYY-MM-DD"; default:
    the newest), with the user's prices.yaml applied (`prices_file`, else $GPUPLAN_PRICES, else
    <config_dir>/prices.yaml when it exists) unless `user_prices` is False."""
    name = _pick_snapshot(as_of)
    base = _load_base(name)
    if not user_prices:
        return base
    path, explicit = _prices_path(prices_file)
    if path is None or (not explicit and not path.exists()):
        return base
    if not path.exists():
        raise UsageError(f"prices file {path} not found; create it or unset {PRICES_ENV}")
    return _apply_overrides(base, path, _read_yaml(path))


FX_STALE_DAYS = 90

_EVERY_OFFER_FIELD = frozenset(f.name for f in dataclasses.fields(Offer))


def _offer_with(o: Offer, **changes) -> Offer:
    """dataclasses.replace(o, **changes), the same Offer, made without calling its __init__ with
    every field again (an Offer has no __post_init__ nor fields outside __init__): one per row,
    three times a load, was a tenth of a second of a 1,162-row catalog (issue 47)."""
    unknown = changes.keys() - _EVERY_OFFER_FIELD
    if unknown:
        raise TypeError(f"Offer has no field {sorted(unknown)[0]!r}")
    made = object.__new__(Offer)
    made.__dict__.update(o.__dict__)
    made.__dict__.update(changes)
    return made


def with_tax(cat: Catalog, basis: str, unknown_as: str = tax.ASSUMED_UNKNOWN) -> Catalog:
    """The catalog with every price on one tax basis (market/tax.py) at the rate in force on the
    catalog's date (8 % for 2017-08, 10 % since 2019-10): "included" adds the tax to rows listed
    without it, "excluded" takes it out of rows listed with it, "as-listed" changes nothing. A row
    whose source does not say ("unknown") is planned as if listed `unknown_as` (the estimate
    plans it on the other reading too and says whether the pick depends on it)."""
    if basis == "as-listed":
        return cat
    if basis not in tax.BASES:
        raise UsageError(f"bad --tax {basis!r}: use included or excluded")
    rate = tax.rate_on(cat.date)
    return dataclasses.replace(cat, offers=tuple(offer_with_tax(o, basis, rate, unknown_as) for o in cat.offers))


def offer_with_tax(o: Offer, basis: str, rate: Decimal | None = None, unknown_as: str = "") -> Offer:
    """One offer on `basis` at `rate` (with_tax; None: today's): its price, hourly price and caps
    times the same factor. An "unknown" row is taken as listed `unknown_as` ("": left as listed,
    as one offer is compared with its own saved price)."""
    rate = tax.CONSUMPTION_TAX if rate is None else rate
    if o.tax == "unknown" and not unknown_as:
        return o
    listed = o.tax if o.tax != "unknown" else unknown_as
    assumed = unknown_as if o.tax == "unknown" else ""
    factor = tax.factor(listed, basis, rate)
    pct = tax.percent(rate)
    said = f"listed {o.tax}" + (f", planned as {assumed}" if assumed else "")
    if factor == (1, 1):
        if not assumed:
            return _offer_with(o, tax_rate=rate) if o.tax_rate != rate else o
        return _offer_with(o, tax=basis, listed_tax=o.listed_tax or o.tax, tax_rate=rate, tax_assumed=assumed,
                           notes=f"{o.notes}; {said}" if o.notes else said)
    return _offer_with(
        o, price=_times(o.price, factor), price_jpy_per_hour=_times(o.price_jpy_per_hour, factor),
        daily_cap_jpy=_times(o.daily_cap_jpy, factor), monthly_cap_jpy=_times(o.monthly_cap_jpy, factor), tax=basis,
        listed_tax=o.listed_tax or o.tax, tax_rate=rate, tax_assumed=assumed,
        notes=f"{o.notes}; shown with {pct} consumption tax {basis} ({said})" if o.notes
        else f"shown with {pct} consumption tax {basis} ({said})")


def _times(x: Decimal | None, factor: tuple[Decimal, Decimal]) -> Decimal | None:
    """x times factor[0] / factor[1] (dividing by 1.1 exactly rather than multiplying by its inverse)."""
    return None if x is None else x * factor[0] / factor[1]


def in_regions(cat: Catalog, regions: list[str]) -> Catalog:
    """The catalog with only the offers in `regions` (case-insensitive); all of them for []."""
    if not regions:
        return cat
    wanted = {r.lower() for r in regions}
    return dataclasses.replace(cat, offers=tuple(o for o in cat.offers if o.region.lower() in wanted))


def stale_fx(cat: Catalog, today: date | None = None) -> list[FxRate]:
    """The exchange rates an offer of `cat` is priced through that are older than FX_STALE_DAYS
    on `today` (default: the real today)."""
    day = today or date.today()
    used = {o.currency for o in cat.offers if o.currency != "JPY"}
    out = []
    for code in sorted(used):
        rate = cat.fx.get(code)
        if rate is not None and rate.date and (day - date.fromisoformat(rate.date)).days > FX_STALE_DAYS:
            out.append(rate)
    return out


def user_snapshots_dir() -> Path:
    """Where `gpuplan catalog refresh` writes its snapshots: <data dir>/snapshots."""
    from gpuplan import paths

    return paths.data_dir() / "snapshots"


def snapshot_folder(name: str):
    """The folder of snapshot `name`: a Path (user snapshot) or a Traversable inside the package."""
    folders = _snapshot_folders()
    if name not in folders:
        raise UsageError(f"no catalog snapshot {name!r}; snapshots: {', '.join(sorted(folders))}")
    return folders[name]


def load_snapshot_dir(folder: Path, name: str) -> Catalog:
    """The catalog in `folder` (offers.csv, providers.csv, quotas.csv, optional fx.csv) read as
    snapshot `name`, without user prices: how a new snapshot is checked before it is published."""
    return _load_folder(name, folder, str(folder))


# ---------------------------------------------------------------------------------------------
# snapshots and files


def _data_root():
    return resources.files("gpuplan.catalog_data")


@lru_cache(maxsize=1)
def _shipped_snapshots() -> tuple[tuple[str, Any], ...]:
    root = _data_root() / "snapshots"
    return tuple(sorted((e.name, e) for e in root.iterdir()
                        if e.is_dir() and _SNAPSHOT_RE.match(e.name) and (e / "offers.csv").is_file()))


def _snapshot_folders() -> dict[str, Any]:
    """Snapshot name -> its folder; a user snapshot replaces a shipped one of the same name."""
    folders = dict(_shipped_snapshots())
    user = user_snapshots_dir()
    if user.is_dir():
        for e in user.iterdir():
            if e.is_dir() and _SNAPSHOT_RE.match(e.name) and (e / "offers.csv").is_file():
                folders[e.name] = e
    return folders


def _pick_snapshot(as_of: str | None) -> str:
    names = snapshots()
    if as_of is None:
        return names[-1]
    text = as_of.strip()
    m = _SNAPSHOT_RE.match(text)
    if not m or not 1 <= int(m.group(2)) <= 12 or (m.group(3) and not _is_day(text)):
        raise UsageError(f"bad --as-of {as_of!r}: write a month as YYYY-MM (e.g. 2017-08) or a day as YYYY-MM-DD")
    # "2026-11" takes every snapshot of November 2026; "2026-11-05" the month's own and those dated up to the 5th
    eligible = [n for n in names if n[:len(text)] <= text]
    if not eligible:
        raise UsageError(
            f"no catalog snapshot on or before {text}; snapshots: {', '.join(names)}"
        )
    return eligible[-1]


def _is_day(text: str) -> bool:
    try:
        date.fromisoformat(text)
    except ValueError:
        return False
    return True


def _snapshot_date(name: str) -> date:
    """A refreshed snapshot's own day; a shipped YYYY-MM snapshot's last day of its month."""
    if len(name) == len("YYYY-MM-DD"):
        return date.fromisoformat(name)
    y, m = (int(x) for x in name.split("-"))
    return (date(y + m // 12, m % 12 + 1, 1)) - timedelta(days=1)


def _rows(rel: str) -> list[tuple[int, dict[str, str]]]:
    """(line number, row) pairs of a shipped CSV file."""
    return _read_rows((_data_root() / rel).read_text(encoding="utf-8"))


def _read_rows(text: str) -> list[tuple[int, dict[str, str]]]:
    reader = csv.DictReader(io.StringIO(text))
    return [(reader.line_num, {k: (v or "").strip() for k, v in row.items()}) for row in reader]


class _Where:
    """Names a place in a data file for error messages: 'catalog/x.csv line 4'."""

    def __init__(self, label: str):
        self.label = label

    def bad(self, fieldname: str, value: Any, expected: str) -> UsageError:
        return UsageError(f"{self.label}: bad {fieldname} {value!r}: expected {expected}")


# no price, rate, cap or size in a catalog comes near it; past 28 digits Decimal stops being exact
CATALOG_NUMBER_LIMIT = Decimal(10) ** 12


@overload
def _dec(where: _Where, fieldname: str, value: Any, required: Literal[True]) -> Decimal: ...
@overload
def _dec(where: _Where, fieldname: str, value: Any, required: bool = False) -> Decimal | None: ...
def _dec(where: _Where, fieldname: str, value: Any, required: bool = False) -> Decimal | None:
    if value is None or (isinstance(value, str) and value.strip() == ""):
        if required:
            raise where.bad(fieldname, "", "a number")
        return None
    if isinstance(value, bool) or isinstance(value, float) and value != value:
        raise where.bad(fieldname, value, "a number")
    try:
        d = Decimal(str(value).strip())
    except InvalidOperation:
        raise where.bad(fieldname, value, "a number") from None
    if not d.is_finite() or d < 0:
        raise where.bad(fieldname, value, "a number zero or above")
    if d >= CATALOG_NUMBER_LIMIT:
        raise where.bad(fieldname, value, f"a number below {CATALOG_NUMBER_LIMIT:,}")
    return d


@overload
def _int(where: _Where, fieldname: str, value: Any, default: int) -> int: ...
@overload
def _int(where: _Where, fieldname: str, value: Any, default: None = None) -> int | None: ...
def _int(where: _Where, fieldname: str, value: Any, default: int | None = None) -> int | None:
    if value is None or (isinstance(value, str) and value.strip() == ""):
        return default
    if isinstance(value, bool):
        raise where.bad(fieldname, value, "a whole number")
    try:
        n = int(str(value).strip())
    except ValueError:
        raise where.bad(fieldname, value, "a whole number") from None
    if n < 0:
        raise where.bad(fieldname, value, "a whole number zero or above")
    return n


def _date(where: _Where, fieldname: str, value: Any) -> date | None:
    if value is None or value == "":
        return None
    return _required_date(where, fieldname, value)


def _required_date(where: _Where, fieldname: str, value: Any) -> date:
    if value is None or value == "":
        raise where.bad(fieldname, value, "a date YYYY-MM-DD")
    if isinstance(value, date):
        return value
    try:
        return date.fromisoformat(str(value).strip())
    except ValueError:
        raise where.bad(fieldname, value, "a date YYYY-MM-DD") from None


def _bool(where: _Where, fieldname: str, value: Any) -> bool:
    if isinstance(value, bool):
        return value
    v = str(value).strip().lower()
    if v in ("true", "yes", "1"):
        return True
    if v in ("false", "no", "0", ""):
        return False
    raise where.bad(fieldname, value, "true or false")


_KINDS = {"cloud": "hour", "monthly": "month", "owned": "purchase", "task": "hour"}
TAX_BASES = ("included", "excluded", "unknown")


def _market(where: _Where, value: Any) -> str:
    market = str(value or "on-demand").strip().lower()
    if market not in ("on-demand", "spot"):
        raise where.bad("market", value, "on-demand or spot")
    return market
_UNITS = {"hour", "month", "purchase"}


def _check_names(where: _Where, row: Mapping[str, Any]) -> None:
    """Names are printed, matched and sent to clouds: one holding a control character is refused.
    Free text (source, notes) is kept, on one printable line (userfiles.one_line)."""
    from gpuplan.userfiles import check_plain

    for name in ("provider", "name", "region", "gpu", "quota_family", "successor", "market", "kind", "currency"):
        check_plain(str(row.get(name) or ""), f"{where.label}: {name}")


def _offer(where: _Where, row: Mapping[str, Any]) -> Offer:
    """An Offer from a CSV row or a prices.yaml entry (price_jpy_per_hour filled in later)."""
    from gpuplan.userfiles import check_plain, one_line

    for required in ("provider", "name", "region", "gpu", "currency"):
        if not str(row.get(required) or "").strip():
            raise UsageError(f"{where.label}: missing {required}")
    _check_names(where, row)
    kind = str(row.get("kind") or "cloud").strip().lower()
    if kind not in _KINDS:
        raise where.bad("kind", row.get("kind"), "cloud, monthly, owned or task")
    unit = str(row.get("price_unit") or _KINDS[kind]).strip().lower()
    if unit not in _UNITS:
        raise where.bad("price_unit", row.get("price_unit"), "hour, month or purchase")
    aliases = row.get("aliases") or ()
    if isinstance(aliases, str):
        aliases = [a for a in aliases.split(";")]
    elif not isinstance(aliases, (list, tuple)):
        raise where.bad("aliases", aliases, "names separated by ';' or a list")
    for alias in aliases:
        check_plain(str(alias), f"{where.label}: alias")
    gpu_count = _int(where, "gpu_count", row.get("gpu_count"))
    if gpu_count is None or gpu_count < 1:
        raise where.bad("gpu_count", row.get("gpu_count"), "a whole number of GPUs, at least 1")
    currency = str(row["currency"]).strip().upper()
    if not re.fullmatch(r"[A-Z]{3}", currency):
        raise where.bad("currency", row["currency"], "a 3-letter currency code such as JPY or USD")
    price = _dec(where, "price", row.get("price"))
    caps = {k: _dec(where, k, row.get(k)) for k in ("daily_cap_jpy", "monthly_cap_jpy")}
    if currency != "JPY" and any(v is not None for v in caps.values()):
        raise UsageError(f"{where.label}: daily_cap_jpy / monthly_cap_jpy are yen: give the price in JPY too")
    tax = str(row.get("tax") or "unknown").strip().lower()
    if tax not in TAX_BASES:
        raise where.bad("tax", row.get("tax"), "included, excluded or unknown (does the price include consumption tax?)")
    notes = one_line(str(row.get("notes") or ""))
    if price is None and "price not sourced" not in notes:
        notes = "price not sourced; set it in your config" + (f"; {notes}" if notes else "")
    return Offer(
        provider=str(row["provider"]).strip().lower(),
        name=str(row["name"]).strip(),
        aliases=tuple(str(a).strip() for a in aliases if str(a).strip()),
        region=str(row["region"]).strip(),
        gpu=str(row["gpu"]).strip(),
        gpu_count=gpu_count,
        gpu_memory_gib=_dec(where, "gpu_memory_gib", row.get("gpu_memory_gib")) or Decimal(0),
        vcpus=_int(where, "vcpus", row.get("vcpus"), default=0),
        ram_gib=_dec(where, "ram_gib", row.get("ram_gib")) or Decimal(0),
        price=price,
        currency=currency,
        price_unit=unit,
        price_jpy_per_hour=None,
        billing_granularity_s=max(1, _int(where, "billing_granularity_s", row.get("billing_granularity_s"), default=1)),
        billing_minimum_s=_int(where, "billing_minimum_s", row.get("billing_minimum_s"), default=0),
        quota_family=str(row.get("quota_family") or "").strip(),
        available_from=_date(where, "available_from", row.get("available_from")),
        retired_on=_date(where, "retired_on", row.get("retired_on")),
        successor=str(row.get("successor") or "").strip(),
        kind=kind,
        market=_market(where, row.get("market")),
        power_watts=_int(where, "power_watts", row.get("power_watts")),
        source=one_line(str(row.get("source") or "")),
        as_of=one_line(str(row.get("as_of") or "")),
        notes=notes,
        daily_cap_jpy=caps["daily_cap_jpy"],
        monthly_cap_jpy=caps["monthly_cap_jpy"],
        tax=tax,
        tax_source=one_line(str(row.get("tax_source") or "")),
    )


def _price_jpy_per_hour(offer: Offer, fx: Mapping[str, FxRate], facts: ProviderFacts | None) -> Decimal | None:
    """Hourly yen: hour prices converted; month prices / 730; owned hardware = its power cost only."""
    if offer.price_unit == "purchase":
        power = facts.power_price_jpy_per_kwh if facts else None
        if offer.power_watts is None or power is None:
            return None
        return Decimal(offer.power_watts) / 1000 * power
    if offer.price is None:
        return None
    rate = fx.get(offer.currency)
    if rate is None:
        return None
    jpy = offer.price * rate.jpy_per_unit
    return jpy / HOURS_PER_MONTH if offer.price_unit == "month" else jpy


def _fx_for(on: date, rows: list[tuple[str, dict[str, str]]]) -> dict[str, FxRate]:
    """Per currency, the newest rate dated on or before `on` (else the oldest one there is).
    `rows` are (where, row) pairs: 'catalog/fx.csv line 3' and the row's fields."""
    best: dict[str, FxRate] = {"JPY": FxRate("JPY", Decimal(1), "", "identity")}
    for label, row in rows:
        where = _Where(label)
        d = _required_date(where, "date", row["date"])
        rate = FxRate(row["currency"].upper(), _dec(where, "jpy_per_unit", row["jpy_per_unit"], required=True),
                      d.isoformat(), row["source"], row.get("notes", ""))
        cur = best.get(rate.currency)
        if cur is None:
            best[rate.currency] = rate
            continue
        cur_d = date.fromisoformat(cur.date)
        if (d <= on and (cur_d > on or d > cur_d)) or (d > on and cur_d > on and d < cur_d):
            best[rate.currency] = rate
    return best


@cache
def _gpus() -> Mapping[str, GpuInfo]:
    out = {}
    for line, row in _rows("gpus.csv"):
        where = _Where(f"catalog/gpus.csv line {line}")
        speeds, sources, bases = {}, {}, {}
        # one column per workload class (rel_speed_cnn_train, ...), each with its basis_ and source_: a
        # figure names both; a class without a published figure for the GPU is empty in all three
        for column in row:
            if column.startswith("rel_speed_"):
                suffix = column.removeprefix("rel_speed_")
                kind = suffix.replace("_", "-")
                speed = _dec(where, column, row[column])
                basis = (row.get(f"basis_{suffix}") or "").strip()
                source = (row.get(f"source_{suffix}") or "").strip()
                if speed is None:
                    if basis or source:
                        raise where.bad(column, row[column], f"a figure, since basis_{suffix} or source_{suffix} is set")
                    continue
                if basis not in SPEED_BASES:
                    raise where.bad(f"basis_{suffix}", basis, ", ".join(SPEED_BASES))
                if not source:
                    raise where.bad(f"source_{suffix}", source, f"where the {kind} figure comes from")
                speeds[kind], sources[kind], bases[kind] = speed, source, basis
        out[row["gpu"]] = GpuInfo(
            name=row["gpu"],
            memory_gib=_dec(where, "memory_gib", row["memory_gib"], required=True),
            rel_speed=MappingProxyType(speeds),
            confidence=row["confidence"],
            source=row["source"],
            architecture=row.get("architecture", ""),
            speed_sources=MappingProxyType(sources),
            speed_basis=MappingProxyType(bases),
        )
    return MappingProxyType(out)


def _quota_unit(where: _Where, value: str | None) -> str:
    """What a provider's default total quota counts: vCPUs (AWS, Azure; the default) or GPUs (GCP's
    GPUS_ALL_REGIONS)."""
    if value in (None, "", "vCPUs"):
        return "vCPUs"
    if value != "GPUs":
        raise where.bad("quota_unit", value, "vCPUs or GPUs")
    return value


def _providers(folder, label: str) -> dict[str, ProviderFacts]:
    families: dict[str, dict[str, int]] = {}
    for line, row in _read_rows((folder / "quotas.csv").read_text(encoding="utf-8")):
        n = _int(_Where(f"{label}/quotas.csv line {line}"), "default_vcpus", row["default_vcpus"])
        if n is not None:
            families.setdefault(row["provider"], {})[row["family"]] = n
    out = {}
    for line, row in _read_rows((folder / "providers.csv").read_text(encoding="utf-8")):
        where = _Where(f"{label}/providers.csv line {line}")
        p = row["provider"]
        out[p] = ProviderFacts(
            name=p,
            default_region=row["default_region"],
            default_quota_vcpus=_int(where, "default_quota_vcpus", row["default_quota_vcpus"]),
            family_quota_vcpus=MappingProxyType(families.get(p, {})),
            quota_name=row["quota_name"],
            how_to_raise=row["how_to_raise"],
            setup_s=_int(where, "setup_minutes", row["setup_minutes"], default=0) * 60,
            capture_s=_int(where, "capture_minutes", row["capture_minutes"], default=0) * 60,
            launch_s=_int(where, "launch_minutes", row["launch_minutes"], default=0) * 60,
            builder_is_worker=_bool(where, "builder_is_worker", row["builder_is_worker"]),
            power_price_jpy_per_kwh=_dec(where, "power_price_jpy_per_kwh", row["power_price_jpy_per_kwh"]),
            source=row["source"],
            notes=row["notes"],
            task_start_s=_int(where, "task_start_minutes", row.get("task_start_minutes"), default=0) * 60,
            quota_unit=_quota_unit(where, row.get("quota_unit")),
        )
    return out


def _finish(snapshot: str, offers: list[Offer], fx: Mapping[str, FxRate],
            providers: Mapping[str, ProviderFacts], prices_file: Path | None = None) -> Catalog:
    priced = tuple(
        _offer_with(o, price_jpy_per_hour=_price_jpy_per_hour(o, fx, providers.get(o.provider)))
        for o in offers
    )
    return Catalog(
        snapshot=snapshot,
        date=_snapshot_date(snapshot),
        offers=priced,
        gpus=_gpus(),
        fx=MappingProxyType(dict(fx)),
        providers=MappingProxyType(dict(providers)),
        prices_file=prices_file,
        links=_links(),
        image_rules=_image_rules(),
    )


def link_of(offer: Offer) -> Link | None:
    """The interconnect and I/O figures of the offer's instance type (catalog/links.csv, the same
    for every snapshot), or None where none are sourced."""
    return _links().get((offer.provider, offer.name))


@lru_cache(maxsize=1)
def _links() -> Mapping[tuple[str, str], Link]:
    out = {}
    for line, row in _rows("links.csv"):
        where = _Where(f"catalog/links.csv line {line}")
        values = {k: _dec(where, k, row.get(k, "")) for k in ("intra_node_gbps", "intra_node_effective",
                                                               "inter_node_gbps", "inter_node_effective",
                                                               "in_node_pass_gbps", "inter_node_baseline_gbps",
                                                               "disk_read_mb_per_s")}
        for k in ("intra_node_effective", "inter_node_effective"):
            share = values[k]
            if share is not None and not 0 < share <= 1:
                raise where.bad(k, row[k], "a share above 0 and at most 1")
        out[(row["provider"], row["name"])] = Link(
            provider=row["provider"], name=row["name"], intra_node_link=row["intra_node_link"],
            inter_node_link=row["inter_node_link"], source=row["source"], as_of=row["as_of"], notes=row["notes"],
            **values)
    return MappingProxyType(out)


@lru_cache(maxsize=1)
def _image_rules() -> tuple[ImageRule, ...]:
    out = []
    for line, row in _rows("images.csv"):
        where = _Where(f"catalog/images.csv line {line}")
        for k in ("from", "until"):
            if row[k] and not _SNAPSHOT_RE.match(row[k]):
                raise where.bad(k, row[k], "a month YYYY-MM")
        capture = _bool(where, "capture", row["capture"])
        if capture and row["usable_by"] not in ("any", "same-gpu", "same-size"):
            raise where.bad("usable_by", row["usable_by"], "any, same-gpu or same-size")
        out.append(ImageRule(row["provider"], row["from"], row["until"], capture, row["usable_by"],
                             row["source"], row["notes"]))
    return tuple(out)


def _load_base(name: str) -> Catalog:
    folder = snapshot_folder(name)
    if dict(_shipped_snapshots()).get(name) is folder:
        return _load_shipped(name)
    # a user snapshot is read again when its files change (a same-day refresh replaces it)
    stamp = tuple(sorted((f.name, f.stat().st_mtime_ns) for f in folder.iterdir() if f.is_file()))
    return _load_user(name, str(folder), stamp)


@cache
def _load_shipped(name: str) -> Catalog:
    return _load_folder(name, dict(_shipped_snapshots())[name], f"catalog/snapshots/{name}")


@lru_cache(maxsize=8)
def _load_user(name: str, folder: str, stamp: tuple) -> Catalog:
    return _load_folder(name, Path(folder), folder)


def _load_folder(name: str, folder, label: str) -> Catalog:
    """Snapshot `name` from `folder`; `label` names the folder in error messages."""
    offers: list[Offer] = []
    seen: set[str] = set()
    for line, row in _read_rows((folder / "offers.csv").read_text(encoding="utf-8")):
        where = _Where(f"{label}/offers.csv line {line}")
        offer = _offer(where, row)
        if offer.key in seen:
            raise UsageError(f"{where.label}: duplicate offer {offer.key}")
        seen.add(offer.key)
        offers.append(offer)
    spot = {o.key[:-len("#spot")]: o for o in _spot_offers(folder, label, offers)}
    offers = [x for o in offers for x in ((o, spot[o.key]) if o.key in spot else (o,))]  # spot after its row
    fx_rows = [(f"catalog/fx.csv line {line}", row) for line, row in _rows("fx.csv")]
    own_fx = folder / "fx.csv"
    if own_fx.is_file():  # a refreshed snapshot carries the rate fetched with its prices
        fx_rows += [(f"{label}/fx.csv line {line}", row) for line, row in _read_rows(own_fx.read_text(encoding="utf-8"))]
    return _finish(name, offers, _fx_for(_snapshot_date(name), fx_rows), _providers(folder, label))


# AWS counts spot vCPUs against quotas of their own, apart from the on-demand ones (EC2 User Guide,
# "Spot Instance quotas": docs.aws.amazon.com/AWSEC2/latest/UserGuide/using-spot-limits.html, each
# 0 vCPUs by default for GPU families); their Service Quotas codes by the on-demand code of the
# same families. A spot row is planned against its spot quota.
SPOT_QUOTA = {"L-DB2E81BA": "L-3819A6DF",  # All G and VT Spot Instance Requests
              "L-417A185B": "L-7212CCBC",  # All P Spot Instance Requests
              "L-1216C47A": "L-34B43A08"}  # All Standard (A, C, D, H, I, M, R, T, Z) Spot Instance Requests


def _spot_offers(folder, label: str, offers: list[Offer]) -> list[Offer]:
    """The snapshot's spot.csv (where it has one): each row is its on-demand offer again, at the
    spot price, with the provider's interruption rule in its notes and its interruption figure
    (spot_interruptions.csv) where the snapshot has one."""
    path = folder / "spot.csv"
    if not path.is_file():
        return []
    by_key = {o.key: o for o in offers}
    figures = _interruptions(folder, label)
    out = []
    for line, row in _read_rows(path.read_text(encoding="utf-8")):
        where = _Where(f"{label}/spot.csv line {line}")
        base = by_key.get(f"{row['provider']}:{row['name']}@{row['region']}")
        if base is None:
            raise UsageError(f"{where.label}: no on-demand offer {row['provider']}:{row['name']} in {row['region']} "
                             "to price as spot")
        out.append(_offer_with(
            base, market="spot", price=_dec(where, "spot_price", row["spot_price"], required=True),
            quota_family=SPOT_QUOTA.get(base.quota_family, base.quota_family),
            currency=row["currency"].upper(), source=row["source"], as_of=row["as_of"],
            notes=f"spot: {row['interruption']}" + (f"; {row['notes']}" if row["notes"] else ""),
            interruption=figures.get(base.key)))
    return out


def _interruptions(folder, label: str) -> dict[str, Interruption]:
    """The snapshot's spot_interruptions.csv (where it has one): each spot row's interruption
    frequency a month as a range, with its source and date, by its on-demand offer's key. A row
    nobody publishes a figure for says `unknown` with the range assumed (docs/model.md)."""
    path = folder / "spot_interruptions.csv"
    if not path.is_file():
        return {}
    out = {}
    for line, row in _read_rows(path.read_text(encoding="utf-8")):
        where = _Where(f"{label}/spot_interruptions.csv line {line}")
        low = _dec(where, "low_pct", row["low_pct"], required=True)
        high = _dec(where, "high_pct", row["high_pct"], required=True)
        if not Decimal(0) <= low <= high <= Decimal(100):
            raise UsageError(f"{where.label}: low_pct {low} and high_pct {high}: 0 <= low <= high <= 100")
        if not row["source"].strip():
            raise UsageError(f"{where.label}: no source: a figure says where it comes from (or that it is unknown)")
        out[f"{row['provider']}:{row['name']}@{row['region']}"] = Interruption(
            frequency=row["frequency"].strip() or "unknown", low_pct=low, high_pct=high, source=row["source"],
            as_of=row["as_of"], notes=row.get("notes") or "", publisher=row.get("publisher") or "")
    return out


# ---------------------------------------------------------------------------------------------
# user overrides


def _prices_path(prices_file: Path | None) -> tuple[Path | None, bool]:
    if prices_file is not None:
        from gpuplan.userfiles import expand

        return expand(prices_file, "prices file"), True
    env = os.environ.get(PRICES_ENV)
    if env:
        from gpuplan.userfiles import expand

        return expand(env, PRICES_ENV), True
    from gpuplan import paths

    return paths.config_dir() / "prices.yaml", False


def _read_yaml(path: Path) -> dict[str, Any]:
    import yaml

    from gpuplan.userfiles import load_yaml, read_text

    text = read_text(path, "prices file", "fix the file or remove it (docs/catalog.md)")
    try:
        data = load_yaml(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        at = f" line {mark.line + 1}" if mark is not None else ""
        problem = getattr(exc, "problem", None) or exc.__class__.__name__
        raise UsageError(f"{path}{at}: not valid YAML ({problem}); fix the file or remove it") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise UsageError(f"{path}: expected a mapping with fx, providers and/or offers at the top level")
    unknown = set(data) - {"fx", "offers", "providers"}
    if unknown:
        raise UsageError(f"{path}: unknown section {sorted(unknown)[0]!r}; use fx, providers or offers")
    return data


# listed_tax: set by with_tax; interruption: a spot row's, from spot_interruptions.csv
_OFFER_FIELDS = {f.name for f in dataclasses.fields(Offer)} - {"price_jpy_per_hour", "listed_tax", "interruption",
                                                                "tax_rate", "tax_assumed"}


def _apply_overrides(base: Catalog, path: Path, data: Mapping[str, Any]) -> Catalog:
    from gpuplan.userfiles import one_line, printable

    fx = dict(base.fx)
    fx_section = data.get("fx") or {}
    if not isinstance(fx_section, dict):
        raise UsageError(f"{path}: fx must map a currency to its yen rate, e.g. fx: {{USD: 150}}")
    for cur, value in fx_section.items():
        where = _Where(f"{path}: fx.{cur}")
        spec = value if isinstance(value, dict) else {"jpy_per_unit": value}
        rate = _dec(where, "jpy_per_unit", spec.get("jpy_per_unit"), required=True)
        if rate == 0:
            raise where.bad("jpy_per_unit", spec.get("jpy_per_unit"), "a rate above zero")
        d = _date(where, "date", spec.get("date"))
        code = str(cur).strip().upper()
        if not re.fullmatch(r"[A-Z]{3}", code):
            raise UsageError(f"{path}: fx: {printable(str(cur))!r} is not a 3-letter currency code such as USD")
        fx[code] = FxRate(code, rate, d.isoformat() if d else "",
                          one_line(str(spec.get("source") or f"user prices file {path}")))

    providers = dict(base.providers)
    prov_section = data.get("providers") or {}
    if not isinstance(prov_section, dict):
        raise UsageError(f"{path}: providers must map a provider name to its settings")
    for name, spec in prov_section.items():
        where = _Where(f"{path}: providers.{name}")
        if not isinstance(spec, dict) or set(spec) - {"power_price_jpy_per_kwh"}:
            raise UsageError(f"{where.label}: only power_price_jpy_per_kwh can be set here")
        facts = providers.get(str(name))
        if facts is None:
            raise UsageError(f"{where.label}: unknown provider {name!r}; known: {', '.join(sorted(providers))}")
        providers[str(name)] = dataclasses.replace(
            facts, power_price_jpy_per_kwh=_dec(where, "power_price_jpy_per_kwh", spec["power_price_jpy_per_kwh"]))

    offers = list(base.offers)
    entries = data.get("offers") or []
    if not isinstance(entries, list):
        raise UsageError(f"{path}: offers must be a list of entries (- provider: ..., name: ...)")
    for i, entry in enumerate(entries):
        where = _Where(f"{path}: offers[{i}]")
        if not isinstance(entry, dict):
            raise UsageError(f"{where.label}: expected a mapping with provider, name and the fields to set")
        entry = {str(k): v for k, v in entry.items()}
        _check_names(where, entry)
        if entry.get("name"):
            where.label += f" ({entry.get('provider', '?')}:{entry['name']})"
        unknown = set(entry) - _OFFER_FIELDS - {"snapshot"}
        if unknown:
            raise UsageError(f"{where.label}: unknown field {sorted(unknown)[0]!r}")
        if "snapshot" in entry and str(entry["snapshot"]) != base.snapshot:
            continue
        entry.pop("snapshot", None)
        prov = str(entry.get("provider") or "").strip().lower()
        name = str(entry.get("name") or "").strip()
        if not prov or not name:
            raise UsageError(f"{where.label}: provider and name are required")
        region = str(entry["region"]).strip() if entry.get("region") is not None else None
        market = str(entry.get("market") or "on-demand").strip().lower()
        hits = [j for j, o in enumerate(offers)
                if o.provider == prov and o.name.lower() == name.lower() and (region is None or o.region == region)
                and o.market == market]
        if hits:
            for j in hits:
                merged = _offer_row(offers[j])
                merged.update(entry)
                merged["provider"], merged["name"] = offers[j].provider, offers[j].name
                if "price" in entry and "notes" not in entry:
                    merged["notes"] = _strip_unsourced(merged["notes"])
                if "source" not in entry:
                    merged["source"] = f"user prices file {path}"
                offers[j] = _offer(where, merged)
        else:
            for required in ("region", "gpu", "gpu_count", "price", "currency"):
                if entry.get(required) in (None, ""):
                    raise UsageError(f"{where.label}: a new offer needs {required}")
            entry.setdefault("source", f"user prices file {path}")
            entry.setdefault("as_of", "user")
            if entry.get("gpu_memory_gib") in (None, ""):
                # a new offer without its memory takes its GPU's from the GPU table, never 0 GiB
                info = base.gpus.get(str(entry["gpu"]).strip())
                if info is None:
                    raise UsageError(f"{where.label}: a new offer needs gpu_memory_gib (GPU {entry['gpu']!r} is not in"
                                     f" the GPU table to take it from; known: {', '.join(sorted(base.gpus))})")
                entry["gpu_memory_gib"] = info.memory_gib
            offers.append(_offer(where, entry))
        for o in offers[-1:] if not hits else [offers[j] for j in hits]:  # a price gpuplan cannot turn into yen
            if o.currency != "JPY" and o.price is not None and o.currency not in fx:
                raise UsageError(f"{where.label}: currency {o.currency} has no exchange rate; give one in the same file"
                                 f" (fx: {{{o.currency}: YEN_PER_UNIT}}) or the price in JPY")
    return _finish(base.snapshot, offers, fx, providers, prices_file=path)


def _offer_row(o: Offer) -> dict[str, Any]:
    row = {f: getattr(o, f) for f in _OFFER_FIELDS}
    row["aliases"] = list(o.aliases)
    return row


def _strip_unsourced(notes: str) -> str:
    return re.sub(r"^price not sourced; set it in your config(; )?", "", notes)
