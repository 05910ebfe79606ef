"""A zone's refusal (provider.ZoneRefusal) in words: the one line shown as create() moves on,
and what the journal keeps of it. Decisions read the value's fields, never these words."""

from __future__ import annotations

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
