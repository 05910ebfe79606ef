"""`gpuplan cost-report`: yen per cluster and per month from the cost ledger, each machine billed
as its provider bills it (gpuplan/planning/billing.py: granularity, minimum, daily and monthly
caps), the one rule the planner uses too.

A machine held across a month boundary is split exactly: the month's share is what the machine
had cost by the month's end less what it had cost by its start, so the months add up to the
machine's whole charge and a minimum or a started hour is billed once.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timezone
from decimal import Decimal

from gpuplan.planning import billing


@dataclass(frozen=True)
class CostLine:
    month: str  # "YYYY-MM" (UTC)
    cluster: str  # as provisioned (a torn-down cluster's reused name is told apart by `ended`)
    provider: str
    size: str
    machines: int
    seconds: int  # machine-seconds held in the month
    yen: Decimal  # exact; the table rounds once
    running: bool  # a machine of it is still held (the figure grows)
    terms: str  # how it is billed, in words
    tax: str = "unknown"  # whether `yen` includes consumption tax, as the provider bills it (planning/tax.py)


def terms_for_row(row: dict) -> tuple[billing.Terms, str]:
    """The billing terms of one ledger row, as the ledger recorded them when the machine started
    (rows from before the ledger kept terms read as per second, which is how they were counted),
    and those terms in words."""
    t = row["terms"]
    step = {1: "per second", 60: "per minute", 3600: "per hour"}.get(t.granularity_s, f"per {t.granularity_s} s")
    least = f", minimum {t.minimum_s} s" if t.minimum_s > t.granularity_s else ""
    caps = "".join(f", {w} cap ¥{c:,}" for w, c in (("daily", t.daily_cap_jpy), ("monthly", t.monthly_cap_jpy)) if c)
    return t, f"{step}{least}{caps}"


def _month_starts(start: datetime, stop: datetime) -> list[datetime]:
    """The first instant of every month from start's to stop's, plus stop."""
    out, t = [], datetime(start.year, start.month, 1, tzinfo=timezone.utc)
    while t < stop:
        out.append(t)
        t = datetime(t.year + (t.month == 12), t.month % 12 + 1, 1, tzinfo=timezone.utc)
    return out + [stop]


def on_basis(lines: list[CostLine], basis: str) -> list[CostLine]:
    """The lines with their yen on one tax basis (planning/tax.py), as estimates compare them: a line
    billed without consumption tax x 1.1 for "included"; one whose basis is unknown as billed."""
    from dataclasses import replace

    from gpuplan.planning import tax

    return [replace(x, yen=tax.on_basis(x.yen, x.tax, basis)) for x in lines]


def report(rows: list[dict], month: str | None = None, at: datetime | None = None) -> list[CostLine]:
    """Cost lines per (month, cluster, provider, size), oldest month first; only `month`'s if given;
    each line's yen as the provider bills them (`tax` says whether with consumption tax: on_basis)."""
    at = at or datetime.now(timezone.utc)
    lines: dict[tuple, dict] = {}
    for row in rows:
        start, stop = row["started_at"], row["stopped_at"] or at
        if stop <= start:
            continue
        terms, words = terms_for_row(row)
        edges = _month_starts(start, stop)
        for a, b in zip(edges, edges[1:]):
            lo, hi = max(a, start), min(b, stop)
            if hi <= lo:
                continue
            before = int((lo - start).total_seconds())
            upto = int((hi - start).total_seconds())
            key = (lo.strftime("%Y-%m"), row["cluster"], row["provider"], row["size"])
            line = lines.setdefault(key, {"machines": set(), "seconds": 0, "yen": Decimal(0), "running": False,
                                          "terms": words, "tax": row.get("tax") or "unknown"})
            line["machines"].add(row["node"])
            line["seconds"] += upto - before
            line["yen"] += billing.charge(upto, terms) - billing.charge(before, terms)
            line["running"] |= row["stopped_at"] is None
    out = [CostLine(m, c, p, s, len(v["machines"]), v["seconds"], v["yen"], v["running"], v["terms"], v["tax"])
           for (m, c, p, s), v in lines.items()]
    if month is not None:
        out = [line for line in out if line.month == month]
    return sorted(out, key=lambda line: (line.month, line.cluster))
