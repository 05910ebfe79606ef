"""`gpuplan check`: is each provider ready to use? Credentials, region and GPU quota, read only.

Like `sky check`, it creates nothing: it asks each provider for its credentials (no network) and
then, where they are found, for the quota tiers that the catalog's GPU sizes in the region count
against (the same `Provider.quota` calls a provision makes before it creates anything).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from gpuplan.errors import GpuplanError, UsageError

if TYPE_CHECKING:
    from gpuplan.fleet.provider import Provider
    from gpuplan.market.catalog import Catalog


@dataclass(frozen=True)
class QuotaLine:
    """One quota tier as the provider reports it, with a size of the catalog that counts against it."""

    name: str
    description: str
    example_size: str
    limit: int | None
    used: int | None
    unit: str
    how_to_raise: str = ""
    error: str = ""  # the one-line reason the provider could not say

    @property
    def free(self) -> int | None:
        return None if self.limit is None or self.used is None else self.limit - self.used


@dataclass(frozen=True)
class ProviderCheck:
    provider: str
    region: str
    credentials: str  # "found", or the one line saying what is missing and how to set it
    quotas: tuple[QuotaLine, ...] = ()

    @property
    def ready(self) -> bool:
        """Credentials found and every quota readable. A quota of 0 free is reported, not a failure:
        it names the tier to raise, which is what the user came to learn."""
        return self.credentials == "found" and not any(q.error for q in self.quotas)


def _sizes(provider: str, region: str, catalog: Catalog) -> list[str]:
    """One active catalog size per quota family in the region (every size where there are no
    families); owned hosts are selected by "any" (every host of the inventory)."""
    if provider == "baremetal":
        return ["any"]
    seen: dict[str, str] = {}
    for o in catalog.find(provider=provider, region=region):
        if o.retired(catalog.date) or o.kind != "cloud":
            continue
        seen.setdefault(o.quota_family or o.name, o.name)
    return list(seen.values())


def _region(provider: str, prov: Provider, region: str | None, catalog: Catalog) -> str:
    """The region named, else the catalog's default region where it has cloud offers, else the
    provider's own first default (owned hosts live in the provider's one pseudo-region)."""
    if region:
        return region
    facts = catalog.providers.get(provider)
    if facts is not None and any(o.kind == "cloud" for o in catalog.find(provider=provider, region=facts.default_region)):
        return facts.default_region
    defaults = prov.default_regions()
    return defaults[0] if defaults else ""


def check_provider(name: str, region: str | None, catalog: Catalog) -> ProviderCheck:
    """What `gpuplan check NAME` shows for one provider."""
    from gpuplan.fleet import lifecycle

    where = region or ""
    try:
        prov = lifecycle.get_provider(name)
        where = _region(name, prov, region, catalog)
        missing = prov.missing_sdk()
        if missing is not None:  # before credentials: without the SDK nothing else can be asked
            return ProviderCheck(name, where, str(missing))
        prov.check_credentials()
        # one authenticated call: refused credentials or an unreachable cloud are said once,
        # here, instead of once per quota call below
        prov.verify_credentials(where)
    except ImportError as exc:  # an SDK the provider imports lazily is missing
        return ProviderCheck(name, where, f"{exc.name} is not installed: pip install 'gpuplan[{name}]'")
    except GpuplanError as exc:
        return ProviderCheck(name, where, str(exc))
    lines: list[QuotaLine] = []
    shown: set[str] = set()
    for size in _sizes(name, where, catalog):
        try:
            tiers = prov.quota(where, size)
        except ImportError as exc:
            return ProviderCheck(name, where, f"{exc.name} is not installed: pip install 'gpuplan[{name}]'")
        except GpuplanError as exc:
            lines.append(QuotaLine("?", f"quota for {size}", size, None, None, "", error=str(exc)))
            continue
        for t in tiers:
            if t.name in shown:  # e.g. Azure's regional "cores" tier applies to every family
                continue
            shown.add(t.name)
            lines.append(QuotaLine(t.name, t.description, size, t.limit, t.used, t.unit, t.how_to_raise))
    return ProviderCheck(name, where, "found", tuple(lines))


def check(names: Sequence[str], region: str | None, catalog: Catalog) -> list[ProviderCheck]:
    """Every named provider (all installed ones when none is named), in the order given."""
    from gpuplan.fleet import provider as registry

    known = registry.available()
    for n in names:
        if n not in known:
            raise UsageError(f"unknown provider {n!r}; known providers: {', '.join(known)}")
    return [check_provider(n, region, catalog) for n in (names or known)]
