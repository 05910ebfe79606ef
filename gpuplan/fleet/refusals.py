"""A zone's refusal (provider.ZoneRefusal) in words: the one line shown as create() moves on,
and what the journal keeps of it; and the offers every zone of a region refused, remembered for
an hour in the state folder (refused.json) so that the next estimate says so and a launch's next
plan leaves them out. Decisions read the values' fields, never these words."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone

from gpuplan import paths
from gpuplan.fleet.provider import ZoneRefusal


def render(r: ZoneRefusal) -> str:
    """ "us-east-1a: no g4dn.xlarge capacity; trying us-east-1c", with what a partial grant kept."""
    left = r.asked - r.granted
    said = (f"{r.granted} of {r.asked} {r.size} granted, no capacity for {left} more" if r.granted
            else f"no {r.size} capacity")
    if r.next_zone:
        then = f"trying {r.next_zone}" + (f" for {left}" if r.granted else "")
    elif left:
        then = f"no zone of {r.region} left to try"
    else:
        then = "all granted"
    return f"{r.zone}: {said} ({r.code or 'no capacity'}); {then}"


def journal_detail(r: ZoneRefusal) -> str:
    """What the journal's row keeps: the figures, plainly."""
    return (f"{r.provider}:{r.size}@{r.zone} {r.code or 'capacity'} granted={r.granted}/{r.asked} "
            f"next={r.next_zone or '-'}")


# --- remembered for a while: an offer every zone of its region refused --------------------------

REMEMBER_S = 3600  # capacity comes back; a refusal older than this is forgotten
_FILE = "refused.json"


@dataclass(frozen=True)
class Remembered:
    """An offer (provider, size, region) that every zone of its region refused, and when."""

    provider: str
    size: str
    region: str
    code: str
    at: datetime

    @property
    def until(self) -> datetime:
        return self.at + timedelta(seconds=REMEMBER_S)

    def line(self) -> str:
        return (f"{self.provider}:{self.size} {self.region} had no capacity in any zone at "
                f"{self.at.strftime('%Y-%m-%d %H:%M')} UTC ({self.code or 'no capacity'}); a launch's next plan leaves it "
                f"out until {self.until.strftime('%H:%M')} UTC")


def remember(r: ZoneRefusal, now: datetime | None = None) -> None:
    """Keep a refusal that ended the region (no zone left) in the state folder for REMEMBER_S."""
    if r.next_zone is not None or r.granted >= r.asked:
        return
    now = now or datetime.now(timezone.utc)
    kept = [x for x in recent(now) if (x.provider, x.size, x.region) != (r.provider, r.size, r.region)]
    kept.append(Remembered(r.provider, r.size, r.region, r.code, now))
    _write(kept)


def recent(now: datetime | None = None) -> list[Remembered]:
    """The refusals remembered and not yet forgotten (an unreadable file counts as none)."""
    now = now or datetime.now(timezone.utc)
    path = paths.state_dir() / _FILE
    try:
        rows = json.loads(path.read_text())
        found = [Remembered(x["provider"], x["size"], x["region"], x.get("code", ""), datetime.fromisoformat(x["at"]))
                 for x in rows]
    except (OSError, ValueError, KeyError, TypeError):
        return []
    return [x for x in found if x.at <= now < x.until]


def _write(rows: list[Remembered]) -> None:
    path = paths.state_dir() / _FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{_FILE}.{os.getpid()}")
    tmp.write_text(json.dumps([{"provider": x.provider, "size": x.size, "region": x.region, "code": x.code,
                                "at": x.at.isoformat()} for x in rows]))
    os.replace(tmp, path)
