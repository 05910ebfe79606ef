"""Which provider a region or zone name belongs to, also for regions the catalog has no rows in:
so that `gpuplan catalog refresh --region` asks the right source, and a region without offers
names the command that would add them. No I/O, no imports beyond the standard library."""

from __future__ import annotations

import re
from collections.abc import Sequence

# Azure's public regions by programmatic name (learn.microsoft.com/azure/reliability/regions-list;
# the same names `az account list-locations` prints); the Retail Prices API's armRegionName
AZURE_REGIONS = frozenset({
    "australiacentral", "australiacentral2", "australiaeast", "australiasoutheast", "austriaeast", "belgiumcentral",
    "brazilsouth", "brazilsoutheast", "canadacentral", "canadaeast", "centralindia", "centralus", "chilecentral",
    "eastasia", "eastus", "eastus2", "francecentral", "francesouth", "germanynorth", "germanywestcentral",
    "indonesiacentral", "israelcentral", "italynorth", "japaneast", "japanwest", "jioindiacentral", "jioindiawest",
    "koreacentral", "koreasouth", "malaysiawest", "mexicocentral", "newzealandnorth", "northcentralus",
    "northeurope", "norwayeast", "norwaywest", "polandcentral", "qatarcentral", "southafricanorth",
    "southafricawest", "southcentralus", "southeastasia", "southindia", "spaincentral", "swedencentral",
    "switzerlandnorth", "switzerlandwest", "uaecentral", "uaenorth", "uksouth", "ukwest", "westcentralus",
    "westeurope", "westindia", "westus", "westus2", "westus3",
})
# Sakura Cloud's zones (Ishikari 1/2, Tokyo 1/2), as sacloud/usacloud's end-to-end tests create
# servers in them; tk1v, the sandbox, sells nothing
SAKURA_ZONES = ("is1a", "is1b", "tk1a", "tk1b")
# AWS region codes: area, direction, number ("ap-northeast-1", "us-gov-west-1"); whether the
# price list has one is for its region index to say
_AWS_REGION = re.compile(r"^[a-z]{2}(-gov|-iso[a-z]?)?-[a-z]+-\d{1,2}$")
_NAMES = {"azure": "Azure", "aws": "AWS", "sakura": "Sakura"}


def owner(region: str) -> str | None:
    """The cloud provider whose region or zone `region` is (azure, aws, sakura), or None."""
    name = region.strip().lower()
    if name in AZURE_REGIONS:
        return "azure"
    if name in SAKURA_ZONES:
        return "sakura"
    if _AWS_REGION.match(name):
        return "aws"
    return None


def refresh_command(regions: Sequence[str]) -> str | None:
    """The command that asks the providers of `regions` for the prices of the sizes the catalog
    knows there: "gpuplan catalog refresh --provider azure --region japaneast,japanwest"."""
    names = [r.strip().lower() for r in regions if owner(r)]
    if not names:
        return None
    providers = {owner(r) for r in names}
    only = f" --provider {providers.pop()}" if len(providers) == 1 else ""
    return f"gpuplan catalog refresh{only} --region {','.join(dict.fromkeys(names))}"


def no_offers(regions: Sequence[str], snapshot: str) -> str:
    """Why catalog `snapshot` has no offers in `regions` and what adds them, in one clause: "the
    catalog shipped with gpuplan (2026-11) has no sourced price in japaneast (Azure); `gpuplan
    catalog refresh --provider azure --region japaneast` adds the sizes Azure lists there (needs
    the network)"."""
    shipped = re.fullmatch(r"\d{4}-\d{2}", snapshot) is not None  # refresh writes day-named snapshots
    where = f"the catalog shipped with gpuplan ({snapshot})" if shipped else f"catalog {snapshot}"
    known = [r for r in regions if owner(r)]
    unknown = [r for r in regions if not owner(r)]
    parts = []
    if known:
        named = ", ".join(f"{r} ({_NAMES[owner(r) or '']})" for r in known)
        sellers = " and ".join(dict.fromkeys(_NAMES[owner(r) or ""] for r in known))
        verb = "list" if " and " in sellers else "lists"
        parts.append(f"{where} has no sourced price in {named}; `{refresh_command(known)}` adds the sizes "
                     f"{sellers} {verb} there (needs the network)")
    if unknown:
        parts.append(f"{', '.join(unknown)}: not a region of Azure, AWS or Sakura that gpuplan knows")
    return "; ".join(parts)
