"""`gpuplan catalog refresh`: today's public prices for the offers the catalog knows, written as
a new dated snapshot, and how they differ from the snapshot before.

Every source is public and needs no credentials:

- Azure: the Retail Prices API (`AZURE_PRICES_URL`), one query per region the catalog knows,
  for the sizes it knows, in yen (`currencyCode='JPY'`), pages followed through NextPageLink.
  Only Linux pay-as-you-go meters count: Windows products (" Windows", and " Win" as some H100
  series spell it), Cloud Services, Spot and Low Priority meters are dropped, as SkyPilot's
  fetcher does. Microsoft prices in USD; its yen figures are its own reference conversion.
- AWS: the Price List bulk files. `region_index.json` names each region's current offer file;
  its CSV form (hundreds of MB to GB) is streamed and a line is parsed only when it names a
  wanted instance type, so memory stays flat. OnDemand, Linux, shared tenancy, no
  pre-installed software, capacity status "Used", the plain RunInstances operation.
- Sakura: `GET .../api/cloud/1.1/public/price` per zone the catalog knows; a plan matches by
  the tail of its DisplayName ("高火力 VRT/24Core-240GB-H100x1"). Its Hourly figure is the price,
  its Daily and Monthly figures the caps (Sakura bills the lesser of hourly + daily, and
  monthly). A GPU plan is taken only in the zones the VRT manual sells it in (`VRT_GPU_ZONES`):
  the price API also lists an H100 class in is1b that cannot be ordered there.
- Sakura 高火力 DOK: `GET .../managed-container/1.0/unit_prices/?year=&month=&day=` (today's
  unit price per plan, yen a second, paged by `meta`): the one source that needs credentials
  (the さくらのクラウド API key in SAKURACLOUD_ACCESS_TOKEN / _SECRET); without them the DOK
  rows are kept as they were and the report says why. An account-specific price
  (`is_overridden`) is marked so in the row's source.
- FX: the ECB euro foreign exchange reference rates (`ECB_URL`); USD/JPY is their cross rate
  (yen per euro / dollars per euro).

Each source is asked about the regions its provider has rows in, and about the regions the
user names (`--region`, else config `preferred_regions:`) that are its own (market/regions.py):
that is how Azure japaneast / japanwest rows come to be, which no offline source prices.
Rows of other providers, owned or monthly hardware and retired sizes are copied unchanged; a
row the source no longer lists is dropped (the diff says "removed"); a known size the source
lists in another region asked about is added, its fields other than price and region copied
from a known row of that size. Nothing is written until every fetch
has succeeded, and the snapshot is built in a temporary folder beside its destination and
renamed into place only after it loads as a catalog. Planning never calls this: `requests`
is imported here, lazily, and only `gpuplan catalog refresh` imports this module.
"""

from __future__ import annotations

import csv
import io
import json
import os
import re
import shutil
import tempfile
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import date
from decimal import Decimal, InvalidOperation
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlsplit

from gpuplan.errors import ProviderError, UsageError
from gpuplan.market import catalog
from gpuplan.market.catalog import Catalog, FxRate
from gpuplan.planning.types import Offer

AZURE_PRICES_URL = "https://prices.azure.com/api/retail/prices"
AWS_PRICING_ROOT = "https://pricing.us-east-1.amazonaws.com"
AWS_REGION_INDEX_URL = AWS_PRICING_ROOT + "/offers/v1.0/aws/AmazonEC2/current/region_index.json"
SAKURA_PRICE_URL = "https://secure.sakura.ad.jp/cloud/zone/{zone}/api/cloud/1.1/public/price"
DOK_UNIT_PRICES_URL = "https://secure.sakura.ad.jp/cloud/zone/is1a/api/managed-container/1.0/unit_prices/"
ECB_URL = "https://www.ecb.europa.eu/stats/eurofxref/eurofxref-daily.xml"
PROVIDERS = ("azure", "aws", "sakura")
VRT_GPU_ZONES = ("is1a",)  # Sakura 高火力 VRT manual: GPU plans in is1a only
TIMEOUT_S = 60
MAX_PAGES = 200  # Azure answers 100 items a page; a known region and ~20 sizes take one or two
OFFER_FIELDS = (
    "provider", "name", "aliases", "region", "gpu", "gpu_count", "gpu_memory_gib", "vcpus", "ram_gib", "price",
    "currency", "price_unit", "billing_granularity_s", "billing_minimum_s", "quota_family", "available_from",
    "retired_on", "successor", "kind", "power_watts", "source", "as_of", "notes", "daily_cap_jpy", "monthly_cap_jpy",
    "tax",
)
FX_FIELDS = ("date", "currency", "jpy_per_unit", "source", "notes")


@dataclass(frozen=True)
class Quote:
    """One price a public source gave for an instance type in a region, per hour."""

    provider: str
    name: str
    region: str
    price: Decimal
    currency: str
    source: str  # the URL and what in its answer the price is
    daily_cap: Decimal | None = None  # the most a day / a month costs, where the source caps them
    monthly_cap: Decimal | None = None

    @property
    def key(self) -> str:
        return f"{self.provider}:{self.name}@{self.region}"


@dataclass(frozen=True)
class PriceChange:
    """One line of the diff: an offer added, removed or repriced between two snapshots."""

    key: str  # provider:name@region
    change: str  # "added" | "removed" | "changed" (its own price or currency) | "fx" (only the yen, with the rate)
    before: Offer | None
    after: Offer | None
    percent: Decimal | None  # yen per hour, after against before (FX moves included)


@dataclass(frozen=True)
class RefreshResult:
    snapshot: str  # the new snapshot's name, today's date: "2026-11-23"
    previous: str  # the snapshot it was compared with
    path: Path | None  # where it was written; None on --dry-run
    catalog: Catalog  # the new snapshot as the loader reads it
    fx_before: FxRate | None
    fx_after: FxRate
    changes: tuple[PriceChange, ...]
    unchanged: int  # refreshed rows whose price did not move
    kept: int  # rows copied as they were: other providers, owned/monthly hardware, retired sizes
    fetched: tuple[str, ...]  # every URL asked, in order
    notes: tuple[str, ...] = ()  # what was not refreshed and why (DOK without an API key)
    asked: tuple[tuple[str, str], ...] = ()  # (provider, region) asked besides the catalog's own regions

    def added_in(self, provider: str, region: str) -> list[str]:
        """The instance types this refresh added in `region` of `provider`."""
        return sorted(c.after.name for c in self.changes if c.change == "added" and c.after is not None
                      and c.after.provider == provider and c.after.region.lower() == region.lower())

    def offers_in(self, provider: str, region: str) -> int:
        """How many on-demand offers of `provider` the new snapshot has in `region`."""
        return len(self.catalog.find(provider=provider, region=region))


def new_session():
    """The HTTP session refresh uses (tests mount a recorded-answer adapter on it)."""
    import requests

    session = requests.Session()
    session.headers["User-Agent"] = "gpuplan-catalog-refresh"
    return session


def today() -> date:
    return date.today()


# ---------------------------------------------------------------------------------------------
# the refresh


def refresh(providers: Sequence[str] | None = None, out_dir: Path | None = None, dry_run: bool = False,
            session=None, regions: Sequence[str] | None = None, preferred: Sequence[str] = ()) -> RefreshResult:
    """Fetch today's prices for the known offers of `providers` (default: azure, aws, sakura) and a
    dated USD/JPY rate, write them as snapshot <today> under `out_dir` (default: the user's
    snapshot dir, where the loader finds it) unless `dry_run`, and diff against the newest snapshot.

    Each provider's source is asked about the regions it has rows in, plus those of `regions`
    (each must be a region of a provider asked) and of `preferred` (config `preferred_regions:`;
    those of other providers are passed over) that are its own.

    Raises UsageError for an unknown provider or region and ProviderError (exit 3) when a source
    cannot be reached or answers an error; then nothing has been written."""
    wanted = _providers_arg(providers)
    extra = _regions_arg(regions, preferred, wanted)
    day = today()
    name = day.isoformat()
    previous = catalog.load(user_prices=False)
    prev_rows = _offer_rows(catalog.snapshot_folder(previous.snapshot))
    session = session or new_session()
    fetcher = _Fetcher(session)

    dok_key = _dok_key() if "sakura" in wanted else None
    notes = []
    if "sakura" in wanted and dok_key is None and any((r.get("kind") or "") == "task" for r in prev_rows):
        notes.append("高火力 DOK rows kept as they were: its unit prices need the API key (set "
                     "SAKURACLOUD_ACCESS_TOKEN and SAKURACLOUD_ACCESS_TOKEN_SECRET)")
    by_provider: dict[str, list[dict[str, str]]] = {p: [] for p in wanted}
    for row in prev_rows:
        if _refreshable(row, wanted, day, tasks=dok_key is not None):
            by_provider[row["provider"]].append(row)
    quotes: list[Quote] = []
    for provider, rows in by_provider.items():
        machines = [r for r in rows if (r.get("kind") or "cloud") == "cloud"]
        if machines:
            names = sorted({r["name"] for r in machines})
            asked = sorted({r["region"] for r in machines} | set(extra.get(provider, ())))
            quotes.extend(_FETCHERS[provider](fetcher, names, asked, day))
        tasks = [r for r in rows if r.get("kind") == "task"]
        if tasks and dok_key is not None:
            quotes.extend(_dok_quotes(fetcher, sorted({r["name"] for r in tasks}), day, dok_key))
    fx_row = _fetch_fx(fetcher, day)

    new_rows, kept = _merge(prev_rows, quotes, wanted, day, tasks=dok_key is not None)
    target = Path(out_dir).expanduser() if out_dir is not None else catalog.user_snapshots_dir()
    target.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{name}.", dir=target))
    try:
        _write_snapshot(tmp, new_rows, fx_row, catalog.snapshot_folder(previous.snapshot))
        fresh = catalog.load_snapshot_dir(tmp, name)
        changes, unchanged = _diff(previous, fresh, {q.key for q in quotes})
        path = None
        if not dry_run:
            path = target / name
            _publish(tmp, path)
        return RefreshResult(
            snapshot=name, previous=previous.snapshot, path=path, catalog=fresh,
            fx_before=previous.fx.get("USD"), fx_after=fresh.fx["USD"], changes=tuple(changes),
            unchanged=unchanged, kept=kept, fetched=tuple(fetcher.fetched), notes=tuple(notes + fetcher.notes),
            asked=tuple((p, r) for p, rs in extra.items() for r in rs),
        )
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)


# Providers in the catalog whose prices have no source refresh can read yet, with what to do.
NO_SOURCE = {"gcp": "GCP prices have no refresh source yet (the Cloud Billing Catalog API needs an API key): the"
                    " shipped rows stay (skypilot-catalog, dated); put your own in prices.yaml to plan on newer ones"}


def _providers_arg(providers: Sequence[str] | None) -> tuple[str, ...]:
    if not providers:
        return PROVIDERS
    out = []
    for p in providers:
        name = p.strip().lower()
        if name in NO_SOURCE:
            raise UsageError(f"catalog refresh: {NO_SOURCE[name]}")
        if name not in PROVIDERS:
            raise UsageError(f"catalog refresh: unknown --provider {p!r}; use azure, aws or sakura "
                             "(owned hardware has no public price source)")
        out.append(name)
    return tuple(dict.fromkeys(out))


def _regions_arg(regions: Sequence[str] | None, preferred: Sequence[str],
                 wanted: Sequence[str]) -> dict[str, list[str]]:
    """Provider -> the regions to ask its source about besides those it has rows in: every one of
    `regions` (a region no provider asked has is a usage error), and the ones of `preferred` that
    belong to a provider asked."""
    from gpuplan.market import regions as known

    out: dict[str, list[str]] = {}
    for raw in regions or ():
        for region in (r.strip().lower() for r in raw.split(",")):
            if not region:
                continue
            provider = known.owner(region)
            if provider is None:
                raise UsageError(f"catalog refresh: --region {region!r} is not an Azure, AWS or Sakura region gpuplan "
                                 "knows (e.g. japaneast, ap-northeast-1, is1a)")
            if provider not in wanted:
                raise UsageError(f"catalog refresh: --region {region} is {provider}'s, and --provider asks only "
                                 f"{', '.join(wanted)}: add --provider {provider}")
            out.setdefault(provider, []).append(region)
    for raw in preferred:
        region = raw.strip().lower()
        provider = known.owner(region)
        if provider is not None and provider in wanted:
            out.setdefault(provider, []).append(region)
    return {p: list(dict.fromkeys(rs)) for p, rs in out.items()}


def _offer_rows(folder) -> list[dict[str, str]]:
    text = (folder / "offers.csv").read_text(encoding="utf-8")
    return [{k: v or "" for k, v in row.items()} for row in csv.DictReader(io.StringIO(text))]


def _refreshable(row: Mapping[str, str], wanted: Sequence[str], day: date, tasks: bool = False) -> bool:
    """A row refresh asks a source about: a cloud offer priced by the hour (or, with `tasks`, a
    Sakura DOK task plan), not retired by `day`."""
    retired = row.get("retired_on") or ""
    kinds = ("cloud", "task") if tasks and row["provider"] == "sakura" else ("cloud",)
    return (row["provider"] in wanted and (row.get("kind") or "cloud") in kinds
            and (row.get("price_unit") or "hour") == "hour"
            and not (retired and date.fromisoformat(retired) <= day))


def _merge(prev_rows: list[dict[str, str]], quotes: Iterable[Quote], wanted: Sequence[str],
           day: date, tasks: bool = False) -> tuple[list[dict[str, str]], int]:
    """The new snapshot's rows, in the previous file's order (added rows after their template)."""
    by_key = {q.key: q for q in quotes}
    known = {f"{r['provider']}:{r['name']}@{r['region']}" for r in prev_rows}
    out: list[dict[str, str]] = []
    kept = 0
    templated: set[tuple[str, str]] = set()
    for row in prev_rows:
        if not _refreshable(row, wanted, day, tasks):
            out.append(dict(row))
            kept += 1
            continue
        quote_ = by_key.get(f"{row['provider']}:{row['name']}@{row['region']}")
        if quote_ is not None:
            out.append(_priced(row, quote_, day))
        ident = (row["provider"], row["name"])
        if ident in templated:
            continue
        templated.add(ident)
        for q in sorted(by_key.values(), key=lambda q: q.region):
            if (q.provider, q.name) == ident and q.key not in known:
                added = _priced(row, q, day)
                added["region"] = q.region
                added["notes"] = (f"added by catalog refresh {day}: {q.name} is listed in {q.region}; "
                                  f"fields other than price and region copied from its {row['region']} row")
                out.append(added)
    return out, kept


def _priced(row: Mapping[str, str], q: Quote, day: date) -> dict[str, str]:
    new = dict(row)
    new["price"] = _plain_decimal(q.price)
    new["currency"] = q.currency
    new["source"] = q.source
    new["as_of"] = day.isoformat()
    if q.daily_cap is not None or q.monthly_cap is not None:
        new["daily_cap_jpy"] = _plain_decimal(q.daily_cap) if q.daily_cap is not None else ""
        new["monthly_cap_jpy"] = _plain_decimal(q.monthly_cap) if q.monthly_cap is not None else ""
    earlier = f"{row['price'] or 'unpriced'} {row['currency']}/h as of {row['as_of'] or '?'}"
    old_notes = re.sub(r"^price not sourced; set it in your config(; )?", "", row.get("notes") or "")
    new["notes"] = f"price refreshed {day} (earlier: {earlier})" + (f"; {old_notes}" if old_notes else "")
    return new


def _plain_decimal(d: Decimal) -> str:
    return format(d.normalize(), "f")  # 1.0060000000 -> "1.006", 990 -> "990"


def _write_snapshot(folder: Path, rows: list[dict[str, str]], fx_row: Mapping[str, str], previous_folder) -> None:
    with open(folder / "offers.csv", "w", encoding="utf-8", newline="") as f:
        w = csv.DictWriter(f, fieldnames=OFFER_FIELDS, lineterminator="\n", extrasaction="ignore")
        w.writeheader()
        w.writerows(rows)
    with open(folder / "fx.csv", "w", encoding="utf-8", newline="") as f:
        w = csv.DictWriter(f, fieldnames=FX_FIELDS, lineterminator="\n")
        w.writeheader()
        w.writerow(fx_row)
    # providers and quota facts are not prices: they carry over from the snapshot before
    for extra in ("providers.csv", "quotas.csv"):
        (folder / extra).write_text((previous_folder / extra).read_text(encoding="utf-8"), encoding="utf-8")
    # spot prices are not fetched: the previous snapshot's dated rows carry over where their
    # on-demand row still exists
    spot = previous_folder / "spot.csv"
    if spot.is_file():
        kept = {(r["provider"], r["name"], r["region"]) for r in rows}
        reader = csv.DictReader(spot.read_text(encoding="utf-8").splitlines())
        with open(folder / "spot.csv", "w", encoding="utf-8", newline="") as f:
            w = csv.DictWriter(f, fieldnames=reader.fieldnames or (), lineterminator="\n")
            w.writeheader()
            w.writerows(r for r in reader if (r["provider"], r["name"], r["region"]) in kept)


def _publish(tmp: Path, path: Path) -> None:
    """Rename the finished snapshot into place; a same-day snapshot already there is replaced."""
    if not path.exists():
        os.rename(tmp, path)
        return
    old = path.with_name(f".{path.name}.replaced-{os.getpid()}")
    os.rename(path, old)
    os.rename(tmp, path)
    shutil.rmtree(old, ignore_errors=True)


def _diff(before: Catalog, after: Catalog, refreshed: set[str]) -> tuple[list[PriceChange], int]:
    old = {o.key: o for o in before.offers}
    new = {o.key: o for o in after.offers}
    changes: list[PriceChange] = []
    unchanged = 0
    for key in sorted(old.keys() | new.keys()):
        a, b = old.get(key), new.get(key)
        if a is None:
            changes.append(PriceChange(key, "added", None, b, None))
        elif b is None:
            changes.append(PriceChange(key, "removed", a, None, None))
        elif (a.price, a.currency) != (b.price, b.currency):
            changes.append(PriceChange(key, "changed", a, b, _percent(a, b)))
        elif a.price_jpy_per_hour != b.price_jpy_per_hour:
            changes.append(PriceChange(key, "fx", a, b, _percent(a, b)))
        elif key in refreshed:
            unchanged += 1
    return changes, unchanged


def _percent(a: Offer, b: Offer) -> Decimal | None:
    if not a.price_jpy_per_hour or b.price_jpy_per_hour is None:
        return None
    return ((b.price_jpy_per_hour - a.price_jpy_per_hour) / a.price_jpy_per_hour * 100).quantize(Decimal("0.1"))


# ---------------------------------------------------------------------------------------------
# HTTP


class _Fetcher:
    """GETs with one clear error line for every way a public source can fail."""

    def __init__(self, session) -> None:
        self.session = session
        self.fetched: list[str] = []
        self.notes: list[str] = []  # what a source said it does not have (a region missing from its index)

    def get(self, url: str, what: str, stream: bool = False, auth: tuple[str, str] | None = None):
        import requests

        self.fetched.append(url)
        host = urlsplit(url).netloc
        try:
            response = self.session.get(url, timeout=TIMEOUT_S, stream=stream, auth=auth)
        except requests.Timeout:
            raise _failed(f"{host} did not answer within {TIMEOUT_S} s ({what})") from None
        except requests.RequestException as exc:
            raise _failed(f"cannot reach {host} ({what}: {type(exc).__name__})") from None
        if response.status_code != 200:
            response.close()
            raise _failed(f"{host} answered HTTP {response.status_code} ({what})")
        return response

    def json(self, url: str, what: str, auth: tuple[str, str] | None = None) -> Any:
        response = self.get(url, what, auth=auth)
        try:
            return json.loads(response.content.decode("utf-8-sig"), parse_float=Decimal)
        except (ValueError, UnicodeDecodeError):
            raise _failed(f"{urlsplit(url).netloc} answered something that is not JSON ({what})") from None


def _failed(reason: str) -> ProviderError:
    return ProviderError(f"catalog refresh: {reason}; nothing was written, the catalog is as it was; retry later")


def _malformed(source: str, detail: str) -> ProviderError:
    return _failed(f"{source} answered in a shape gpuplan does not know ({detail})")


# ---------------------------------------------------------------------------------------------
# Azure Retail Prices API

_AZURE_NOT_LINUX_PAYG = re.compile(r" Win| Cloud ?Services", re.IGNORECASE)


def _azure_url(region: str, names: Sequence[str]) -> str:
    skus = " or ".join(f"armSkuName eq '{n}'" for n in names)
    odata = (f"serviceName eq 'Virtual Machines' and priceType eq 'Consumption' "
             f"and armRegionName eq '{region}' and ({skus})")
    return f"{AZURE_PRICES_URL}?currencyCode=%27JPY%27&$filter={quote(odata, safe='')}"


def _azure_quotes(fetcher: _Fetcher, names: Sequence[str], regions: Sequence[str], day: date) -> list[Quote]:
    wanted = set(names)
    best: dict[tuple[str, str], dict] = {}
    for region in regions:
        url: str | None = _azure_url(region, names)
        pages = 0
        while url:
            pages += 1
            if pages > MAX_PAGES:
                raise _malformed("prices.azure.com", f"more than {MAX_PAGES} pages for {region}")
            page = fetcher.json(url, f"Azure retail prices, {region}, page {pages}")
            items = page.get("Items") if isinstance(page, dict) else None
            if not isinstance(items, list):
                raise _malformed("prices.azure.com", "no Items list")
            for item in items:
                if not _azure_linux_payg(item, wanted, region):
                    continue
                start = str(item.get("effectiveStartDate") or "")[:10]
                if start and start > day.isoformat():
                    continue  # announced, not yet in force
                k = (item["armSkuName"], region)
                if k not in best or start >= str(best[k].get("effectiveStartDate") or "")[:10]:
                    best[k] = item
            url = page.get("NextPageLink") or None
    out = []
    for (name, region), item in sorted(best.items()):
        out.append(Quote(
            "azure", name, region, Decimal(str(item["retailPrice"])), "JPY",
            f"Azure Retail Prices API {AZURE_PRICES_URL} ({region}, {item.get('productName')}, meter "
            f"{item.get('meterName')!r}, effective {str(item.get('effectiveStartDate') or '?')[:10]}), retrieved {day}",
        ))
    return out


def _azure_linux_payg(item: Any, wanted: set[str], region: str) -> bool:
    if not isinstance(item, dict) or item.get("armSkuName") not in wanted:
        return False
    sku_name = str(item.get("skuName") or "")
    try:
        price = Decimal(str(item.get("retailPrice")))
    except InvalidOperation:
        return False
    return (item.get("type") == "Consumption" and item.get("currencyCode") == "JPY"
            and str(item.get("armRegionName") or "").lower() == region.lower()
            and item.get("unitOfMeasure") == "1 Hour"
            and not _AZURE_NOT_LINUX_PAYG.search(str(item.get("productName") or ""))
            and "Spot" not in sku_name and "Low Priority" not in sku_name
            and price.is_finite() and price > 0)


# ---------------------------------------------------------------------------------------------
# AWS Price List bulk files

_AWS_META_ROWS = 5  # FormatVersion, Disclaimer, Publication Date, Version, OfferCode; then the header


def _aws_quotes(fetcher: _Fetcher, names: Sequence[str], regions: Sequence[str], day: date) -> list[Quote]:
    index = fetcher.json(AWS_REGION_INDEX_URL, "AWS EC2 region index")
    known = index.get("regions") if isinstance(index, dict) else None
    if not isinstance(known, dict):
        raise _malformed("pricing.us-east-1.amazonaws.com", "region index without regions")
    out: list[Quote] = []
    for region in regions:
        entry = known.get(region)
        if not isinstance(entry, dict) or not str(entry.get("currentVersionUrl") or "").endswith(".json"):
            # gone from the price list (its rows show as removed), or never in it
            fetcher.notes.append(f"{region}: not in the AWS price list's region index, nothing priced there")
            continue
        url = AWS_PRICING_ROOT + entry["currentVersionUrl"][: -len(".json")] + ".csv"
        out.extend(_aws_region_quotes(fetcher, url, region, names, day))
    return out


def _aws_region_quotes(fetcher: _Fetcher, url: str, region: str, names: Sequence[str], day: date) -> list[Quote]:
    import requests

    response = fetcher.get(url, f"AWS EC2 price list, {region}", stream=True)
    # a wanted row names its instance type as a quoted field; most of the file never reaches csv
    needle = re.compile(rb'"(?:' + b"|".join(re.escape(n.encode()) for n in names) + rb')"')
    meta: dict[str, str] = {}
    header: dict[str, int] | None = None
    prices: dict[str, set[Decimal]] = {}
    try:
        for n, raw in enumerate(response.iter_lines(chunk_size=1 << 20)):
            if n < _AWS_META_ROWS:
                cells = next(csv.reader([raw.decode("utf-8", "replace")]), [])
                if len(cells) >= 2:
                    meta[cells[0]] = cells[1]
                continue
            if header is None:
                header = {c.lower(): i for i, c in enumerate(next(csv.reader([raw.decode("utf-8")])))}
                missing = {"termtype", "instance type", "priceperunit", "operating system", "tenancy"} - set(header)
                if missing:
                    raise _malformed("pricing.us-east-1.amazonaws.com", f"price list without {sorted(missing)[0]!r}")
                continue
            if not needle.search(raw):
                continue
            cells = next(csv.reader([raw.decode("utf-8")]), [])
            hit = _aws_on_demand_linux(cells, header, set(names))
            if hit is not None:
                prices.setdefault(hit[0], set()).add(hit[1])
    except requests.RequestException as exc:
        raise _failed(f"pricing.us-east-1.amazonaws.com broke off the {region} price list ({type(exc).__name__})") from None
    finally:
        response.close()
    if header is None:
        raise _malformed("pricing.us-east-1.amazonaws.com", f"empty price list for {region}")
    published = meta.get("Publication Date", "?")
    out = []
    for name, found in sorted(prices.items()):
        if len(found) != 1:
            continue  # two on-demand Linux prices for one type: the filter is not tight enough; say nothing
        out.append(Quote("aws", name, region, found.pop(), "USD",
                         f"AWS Price List bulk file {url} (published {published}; OnDemand, Linux, shared tenancy), "
                         f"retrieved {day}"))
    return out


def _aws_on_demand_linux(cells: list[str], col: Mapping[str, int], names: set[str]) -> tuple[str, Decimal] | None:
    def get(column: str, default: str = "") -> str:
        i = col.get(column)
        return cells[i] if i is not None and i < len(cells) else default

    name = get("instance type")
    if name not in names:
        return None
    if (get("termtype") != "OnDemand" or get("unit", "Hrs") != "Hrs" or get("currency", "USD") != "USD"
            or get("operating system") != "Linux" or get("tenancy") != "Shared"
            or get("pre installed s/w", "NA") not in ("NA", "") or get("capacitystatus", "Used") not in ("Used", "")
            or get("operation", "RunInstances") != "RunInstances"
            or get("marketoption", "OnDemand") not in ("OnDemand", "")
            or get("license model", "No License required") not in ("No License required", "")
            or get("product family", "Compute Instance") != "Compute Instance"):
        return None
    try:
        price = Decimal(get("priceperunit"))
    except InvalidOperation:
        return None
    if not price.is_finite() or price <= 0:
        return None
    return name, price


# ---------------------------------------------------------------------------------------------
# Sakura Cloud public price API


def _sakura_quotes(fetcher: _Fetcher, names: Sequence[str], zones: Sequence[str], day: date) -> list[Quote]:
    wanted = set(names)
    out = []
    for zone in zones:
        url = SAKURA_PRICE_URL.format(zone=zone)
        body = fetcher.json(url, f"Sakura public price, {zone}")
        classes = body.get("ServiceClasses") if isinstance(body, dict) else None
        if isinstance(classes, dict):  # some recordings show an object keyed "0", "1", ...
            classes = list(classes.values())
        if not isinstance(classes, list):
            raise _malformed("secure.sakura.ad.jp", "no ServiceClasses")
        for c in classes:
            if not isinstance(c, dict):
                continue
            plan = str(c.get("DisplayName") or "").rpartition("/")[2].strip()
            price = c.get("Price")
            if plan not in wanted or not isinstance(price, dict) or price.get("Hourly") in (None, "", 0):
                continue
            if price.get("Zone") not in (None, "", zone):
                continue
            if zone not in VRT_GPU_ZONES and "gpu" in str(c.get("ServiceClassPath") or "").lower():
                continue  # listed by the price API, not sold there (VRT manual)
            out.append(Quote("sakura", plan, zone, Decimal(str(price["Hourly"])), "JPY",
                             f"Sakura Cloud public price API {url} ({c.get('DisplayName')}, "
                             f"{c.get('ServiceClassPath')}: Hourly, Daily, Monthly), retrieved {day}",
                             _cap(price.get("Daily")), _cap(price.get("Monthly"))))
    return out


def _cap(value: Any) -> Decimal | None:
    try:
        d = Decimal(str(value))
    except (InvalidOperation, ValueError):
        return None
    return d if d.is_finite() and d > 0 else None


def _dok_key() -> tuple[str, str] | None:
    token = os.environ.get("SAKURACLOUD_ACCESS_TOKEN", "")
    secret = os.environ.get("SAKURACLOUD_ACCESS_TOKEN_SECRET", "")
    return (token, secret) if token and secret else None


def _dok_quotes(fetcher: _Fetcher, names: Sequence[str], day: date, key: tuple[str, str]) -> list[Quote]:
    """Today's DOK unit price per plan (yen a second) as an hourly quote for row "dok-<plan>"."""
    wanted = set(names)
    out: list[Quote] = []
    page = 1
    while True:
        url = f"{DOK_UNIT_PRICES_URL}?year={day.year}&month={day.month}&day={day.day}&page={page}&page_size=100"
        body = fetcher.json(url, "Sakura 高火力 DOK unit prices", auth=key)
        meta = body.get("meta") if isinstance(body, dict) else None
        rows = body.get("results") if isinstance(body, dict) else None
        if not isinstance(meta, dict) or not isinstance(rows, list):
            raise _malformed("secure.sakura.ad.jp", "DOK unit_prices without meta and results")
        for row in rows:
            if not isinstance(row, dict):
                continue
            name = f"dok-{row.get('plan')}"
            try:
                per_s = Decimal(str(row.get("price")))
            except InvalidOperation:
                raise _malformed("secure.sakura.ad.jp", f"DOK unit price {row.get('price')!r}") from None
            if name not in wanted or not per_s.is_finite() or per_s <= 0:
                continue
            mine = ", your account's own price" if row.get("is_overridden") else ""
            out.append(Quote("sakura", name, "is1a", per_s * 3600, "JPY",
                             f"Sakura 高火力 DOK API GET {DOK_UNIT_PRICES_URL} (plan {row.get('plan')}: "
                             f"{per_s} JPY a second{mine}), retrieved {day}"))
        if page >= int(meta.get("total_pages") or 1):
            return out
        page += 1


# ---------------------------------------------------------------------------------------------
# FX: ECB euro reference rates


def _fetch_fx(fetcher: _Fetcher, day: date) -> dict[str, str]:
    import xml.etree.ElementTree as ET

    response = fetcher.get(ECB_URL, "ECB euro reference rates")
    try:
        root = ET.fromstring(response.content)
    except ET.ParseError:
        raise _malformed("www.ecb.europa.eu", "not XML") from None
    for cube in root.iter():
        when = cube.get("time")
        if not when:
            continue
        rates = {c.get("currency"): c.get("rate") for c in cube if c.get("currency")}
        try:
            usd, jpy = Decimal(rates["USD"] or ""), Decimal(rates["JPY"] or "")
            date.fromisoformat(when)
        except (KeyError, TypeError, InvalidOperation, ValueError):
            raise _malformed("www.ecb.europa.eu", f"no USD and JPY rates for {when}") from None
        if usd <= 0 or jpy <= 0:
            raise _malformed("www.ecb.europa.eu", f"rates for {when} not above zero")
        cross = (jpy / usd).quantize(Decimal("0.0001"))
        return {
            "date": when, "currency": "USD", "jpy_per_unit": str(cross),
            "source": (f"ECB euro foreign exchange reference rates of {when} ({ECB_URL}): EUR 1 = USD {usd} = "
                       f"JPY {jpy}; USD/JPY is their cross rate {jpy}/{usd}"),
            "notes": f"retrieved {day} by gpuplan catalog refresh; ECB reference rates are for information only",
        }
    raise _malformed("www.ecb.europa.eu", "no dated Cube of rates")


_FETCHERS = {"azure": _azure_quotes, "aws": _aws_quotes, "sakura": _sakura_quotes}
