"""`gpuplan cost-report`: yen per cluster and per month from the cost ledger, each machine billed
as its provider bills it (gpuplan/market/billing.py: granularity, minimum, daily and monthly
caps), the one rule the planner uses too.

A machine held across a month boundary is split exactly: the month's share is what the machine
had cost by the month's end less what it had cost by its start, so the months add up to the
machine's whole charge and a minimum or a started hour is billed once.

What the cloud taking machines back cost a batch (`interruptions`): its attempts stopped by a
node's drain, the nodes taken back, the item-seconds done twice (each such attempt from its last
saved checkpoint, or from its start, to its end) and the yen of the machine time they held: the
node's price per second (its ledger row's, as the planner prices a second: spot_risk's yen_per_s)
x those seconds / the node's slots (GPUs x per_gpu), exact. It is a share of the machines' bill
above, spent on work done twice, not a bill of its own (docs/operating.md).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timezone, tzinfo
from decimal import Decimal
from typing import TYPE_CHECKING

from gpuplan.market import billing
from gpuplan.run.ray.batch_rules import INTERRUPTED

if TYPE_CHECKING:
    from gpuplan.store.state import InterruptionRow, JobRow, State


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
    tax: str = "unknown"  # whether `yen` includes consumption tax, as the provider bills it (market/tax.py)
    user: str = "unknown"  # whose cluster it was (team.py; "unknown" on rows older than that)
    project: str = "default"


def terms_for_row(row: dict) -> tuple[billing.Terms, str]:
    """The billing terms of one ledger row, as the ledger recorded them when the machine started
    (rows from before the ledger kept terms read as per second, which is how they were counted),
    and those terms in words."""
    t = row["terms"]
    step = {1: "per second", 60: "per minute", 3600: "per hour"}.get(t.granularity_s, f"per {t.granularity_s} s")
    least = f", minimum {t.minimum_s} s" if t.minimum_s > t.granularity_s else ""
    caps = "".join(f", {w} cap ¥{c:,}" for w, c in (("daily", t.daily_cap_jpy), ("monthly", t.monthly_cap_jpy)) if c)
    return t, f"{step}{least}{caps}"


def _month_starts(start: datetime, stop: datetime, zone: tzinfo = timezone.utc) -> list[datetime]:
    """The first instant of every month (in `zone`) from start's to stop's, plus stop."""
    local = start.astimezone(zone)
    out, t = [], datetime(local.year, local.month, 1, tzinfo=zone)
    while t < stop:
        out.append(t)
        t = datetime(t.year + (t.month == 12), t.month % 12 + 1, 1, tzinfo=zone)
    return out + [stop]


def on_basis(lines: list[CostLine], basis: str) -> list[CostLine]:
    """The lines with their yen on one tax basis (market/tax.py), as estimates compare them: a line
    billed without consumption tax x 1.1 for "included"; one whose basis is unknown as billed."""
    from dataclasses import replace

    from gpuplan.market import tax

    return [replace(x, yen=tax.on_basis(x.yen, x.tax, basis)) for x in lines]


def cluster_yen(rows: list[dict], cluster: str, basis: str, at: datetime | None = None) -> Decimal:
    """The cluster's whole ledger up to `at` on tax `basis`, each row put there by its own basis:
    the figure cost-report totals for it."""
    return sum((x.yen for x in on_basis(report([r for r in rows if r["cluster"] == cluster], at=at), basis)), Decimal(0))


def report(rows: list[dict], month: str | None = None, at: datetime | None = None,
           zone: tzinfo = timezone.utc) -> list[CostLine]:
    """Cost lines per (month, cluster, provider, size), oldest month first; only `month`'s if given;
    each line's yen as the provider bills them (`tax` says whether with consumption tax: on_basis).
    Months are UTC's, or `zone`'s (a budget's: JST, team.BUDGET_ZONE)."""
    at = at or datetime.now(timezone.utc)
    lines: dict[tuple, dict] = {}
    for row in rows:
        start, stop = row["started_at"], row["stopped_at"] or at
        if stop <= start:
            continue
        terms, words = terms_for_row(row)
        edges = _month_starts(start, stop, zone)
        for a, b in zip(edges, edges[1:]):
            lo, hi = max(a, start), min(b, stop)
            if hi <= lo:
                continue
            before = int((lo - start).total_seconds())
            upto = int((hi - start).total_seconds())
            key = (lo.astimezone(zone).strftime("%Y-%m"), row["cluster"], row["provider"], row["size"],
                   row.get("user", "unknown"), row.get("project", "default"))
            line = lines.setdefault(key, {"machines": set(), "seconds": 0, "yen": Decimal(0), "running": False,
                                          "terms": words, "tax": row.get("tax") or "unknown"})
            line["machines"].add(row["node"])
            line["seconds"] += upto - before
            line["yen"] += billing.charge(upto, terms) - billing.charge(before, terms)
            line["running"] |= row["stopped_at"] is None
    out = [CostLine(m, c, p, s, len(v["machines"]), v["seconds"], v["yen"], v["running"], v["terms"], v["tax"], u, j)
           for (m, c, p, s, u, j), v in lines.items()]
    if month is not None:
        out = [line for line in out if line.month == month]
    return sorted(out, key=lambda line: (line.month, line.cluster))


@dataclass(frozen=True)
class Interruptions:
    """What the cloud taking machines back cost one batch (or a month's batches)."""

    attempts: int  # attempts stopped because their node was taken back (queued again, not failures)
    nodes: int  # nodes taken back (set aside with batch_rules' INTERRUPTED)
    redone_s: Decimal  # item-seconds done twice: each attempt from its last saved checkpoint (or its start) to its end
    yen: Decimal | None  # the machine time those seconds held, exact; None where a node's price is unknown


@dataclass(frozen=True)
class BatchInterruptions:
    """A batch's Interruptions as `cost-report` lists them: in the month (UTC) the batch started."""

    month: str
    cluster: str
    job: str
    interruptions: Interruptions


def redone_seconds(attempt: InterruptionRow) -> Decimal:
    """The attempt's work done twice: from its last saved checkpoint (none saved: its start) to its end."""
    since = attempt.saved_at or attempt.started_at
    if since is None or attempt.ended_at is None or attempt.ended_at <= since:
        return Decimal(0)
    gap = attempt.ended_at - since
    return Decimal(gap.days * 86400 + gap.seconds) + Decimal(gap.microseconds) / 1_000_000


def machine_share(terms: billing.Terms, seconds: Decimal, slots: int) -> Decimal:
    """The yen of one slot's share of a machine billed by `terms` for `seconds`: its price per
    second x seconds / its slots, exact (no granularity, minimum or cap: a share of machine time
    already billed, not a bill)."""
    return terms.price_jpy / max(1, terms.period_s) * seconds / max(1, slots)


def node_terms(ledger: Sequence[dict], cluster: str, node: str, at: datetime) -> tuple[billing.Terms, str] | None:
    """The billing terms and tax basis of `node` of `cluster` at `at`, from its ledger row then
    (a torn-down cluster's rows keep its name as "<name>@<created>"); else its latest row before."""
    rows = [r for r in ledger if r["node"] == node and r["cluster"].split("@", 1)[0] == cluster and r["started_at"] <= at]
    if not rows:
        return None
    held = [r for r in rows if r["stopped_at"] is None or at <= r["stopped_at"]]
    row = max(held or rows, key=lambda r: r["started_at"])
    return row["terms"], row["tax"]


def interruptions(state: State, row: JobRow, basis: str | None = None,
                  ledger: Sequence[dict] | None = None) -> Interruptions | None:
    """What the cloud taking machines back cost batch `row`; None where it took none and stopped
    no attempt. Each attempt's yen by its node's own ledger row (a replacement may be dearer), as
    billed, or on tax `basis` (market/tax.py) where given; a node with no ledger row by the
    cluster's hourly price."""
    from gpuplan.market import tax

    attempts = state.job_interruptions(row.id)
    nodes = sum(1 for q in state.job_quarantines(row.id) if q.code == INTERRUPTED)
    if not attempts and not nodes:
        return None
    if ledger is None:
        ledger = state.ledger_rows() if attempts else []
    cluster = state.cluster(row.cluster)
    per_gpu = int(row.options.get("per_gpu") or 1)
    redone, yen = Decimal(0), Decimal(0)
    priced = True
    for a in attempts:
        seconds = redone_seconds(a)
        redone += seconds
        found = node_terms(ledger, row.cluster, a.node, a.started_at) if a.started_at else None
        if found is None and cluster is not None and cluster.price_jpy_per_hour is not None:
            found = billing.per_second(cluster.price_jpy_per_hour), "unknown"
        if found is None:
            priced = priced and not seconds
            continue
        terms, listed = found
        share = machine_share(terms, seconds, max(1, a.node_gpus) * per_gpu)
        yen += tax.on_basis(share, listed, basis) if basis else share
    return Interruptions(len(attempts), nodes, redone, yen if priced else None)


def report_interruptions(state: State, month: str | None, basis: str) -> list[BatchInterruptions]:
    """Every batch the cloud interrupted (only those started in `month`, if given), its yen on tax `basis`."""
    out = []
    ledger = state.ledger_rows()
    for row in state.interrupted_jobs():
        started = row.started_at or row.submitted_at
        when = started.astimezone(timezone.utc).strftime("%Y-%m")
        if month is not None and when != month:
            continue
        figures = interruptions(state, row, basis, ledger)
        if figures is not None:
            out.append(BatchInterruptions(when, row.cluster, row.id, figures))
    return out
