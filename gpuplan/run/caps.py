"""A batch's yen cap as one value, and the one way a cap becomes a moment to stop.

A cap is given on a tax basis (a batch file's `tax:`, by default "included": Japan's 10 %
consumption tax on every provider; `run --max-yen` as the provider lists its prices), while the
cost ledger counts yen as each provider bills them (AWS, Azure, GCP without tax; Sakura and
owned hosts' power with it). `Cap.billed` is the cap on the ledger's basis: every comparison of a
cap with spent yen (the driver's stop time, a replacement's check, the follower's watch) uses it,
never `yen` as written. `Cap.stop_moment` is the one way a cap becomes a moment (stop_time, on
`billed`, with the cap's own scope and allowance): `run --max-yen`, `launch` and `run --recover`
each ask it, and each words its own refusal where the moment has passed.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from decimal import Decimal
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from gpuplan.market.billing import Terms
    from gpuplan.store.state import JobRow, State

AS_LISTED = "as-listed"  # the yen as the provider lists (and bills) them: the ledger's basis
GONE = ("intent", "deleted", "deleting", "failed")  # node states that bill nothing
TEARDOWN_ALLOWANCE_S = 120  # a launch's cap stops the batch this long before the yen would reach it: fetch and teardown bill too
BATCH, CLUSTER = "batch", "cluster"  # what a cap holds: the batch's machine time, or its cluster's whole ledger


@dataclass(frozen=True)
class Cap:
    """`yen` as the user gave it, on basis `tax`, for a fleet whose prices are listed on `listed`;
    `billed`: the same cap in the yen the provider bills and the ledger counts; `stop_at`: the
    moment the batch stops to stay within it (UTC; None: not set, or a fleet that bills nothing);
    `scope`: what it holds, the batch's machine time (`run --max-yen`) or the cluster's whole
    ledger from claim to teardown (a launch's max_yen)."""

    yen: Decimal
    tax: str = AS_LISTED
    listed: str = AS_LISTED
    billed: Decimal = Decimal(0)
    stop_at: datetime | None = None
    scope: str = BATCH

    @classmethod
    def on(cls, yen: Decimal, tax: str = AS_LISTED, listed: str = AS_LISTED, scope: str = BATCH) -> Cap:
        """A cap of `yen` on basis `tax`, for a fleet whose prices are listed on `listed`
        (market/tax.py: included, excluded or unknown)."""
        return cls(yen, tax, listed, _moved(yen, listed, tax, AS_LISTED), scope=scope)

    def said(self, billed_yen: Decimal) -> Decimal:
        """Ledger yen on the cap's own basis (what a line next to the cap says)."""
        return _moved(billed_yen, self.listed, AS_LISTED, self.tax)

    @property
    def allowance_s(self) -> int:
        return TEARDOWN_ALLOWANCE_S if self.scope == CLUSTER else 0

    def at(self, stop_at: datetime | None) -> Cap:
        return replace(self, stop_at=stop_at)

    def stop_moment(self, state: State, cluster: str, *, now: datetime, since: datetime | None = None,
                    gone: Sequence[str] = (), joining: Terms | None = None) -> datetime | None:
        """The latest whole second the batch may run to and the cluster's bill stay within the cap
        (in ledger yen, `billed`), fetch and teardown (`allowance_s`) billed too: stop_time from
        `since` (a batch's start, for a cap on the batch's machine time; a cluster's cap holds its
        whole ledger), a node lost (or in `gone`) billed only until `now`, a machine billed by
        `joining` from `now`. None: never (a fleet that bills nothing); a moment before `now`:
        not even the bill so far fits."""
        from gpuplan.units import MAX_DURATION_S

        t = stop_time(state, cluster, self.billed, now=now, since=None if self.scope == CLUSTER else since,
                      gone=gone, joining=joining, allowance_s=self.allowance_s)
        return None if t == MAX_DURATION_S else now + timedelta(seconds=t)

    def reached(self, spent_billed: Decimal | None) -> bool:
        """Have yen spent (as the ledger counts them) reached the cap?"""
        return spent_billed is not None and spent_billed >= self.billed

    def options(self) -> dict[str, Any]:
        """The cap as a job row keeps it (options["cap"])."""
        return {"yen": str(self.yen), "tax": self.tax, "listed": self.listed, "billed": str(self.billed),
                "stop_at": self.stop_at.isoformat() if self.stop_at is not None else None, "scope": self.scope}


def _moved(yen: Decimal, listed: str, start: str, basis: str) -> Decimal:
    from gpuplan.market import tax as taxes

    if start == basis:
        return yen
    if start == AS_LISTED:
        return taxes.on_basis(yen, listed, basis)
    return taxes.moved(yen, listed, start, basis)


def of_job(row: JobRow) -> Cap | None:
    """The batch's cap (None: it has none). Rows written before caps said their basis: the
    max_yen they kept, as listed; a launch's over its cluster's whole ledger."""
    kept = row.options.get("cap")
    if kept:
        stop = kept.get("stop_at")
        return Cap(Decimal(kept["yen"]), kept.get("tax") or AS_LISTED, kept.get("listed") or AS_LISTED,
                   Decimal(kept["billed"]), datetime.fromisoformat(stop) if stop else None, kept.get("scope") or BATCH)
    launch = row.options.get("launch") or {}
    if launch.get("max_yen") is not None:  # a launch's cap holds its cluster's whole ledger, claim to teardown
        return Cap.on(Decimal(str(launch["max_yen"])), launch.get("tax") or AS_LISTED,
                      scope=CLUSTER if launch.get("cluster") else BATCH)
    yen = row.options.get("max_yen")
    return Cap.on(Decimal(str(yen))) if yen is not None else None


def stop_time(state: State, cluster: str, billed: Decimal, *, now: datetime, since: datetime | None = None,
              gone: Sequence[str] = (), joining: Terms | None = None, allowance_s: int = 0) -> int:
    """The most whole seconds from `now` the cluster may go on billing and its bill stay within
    `billed` (ledger yen) once `allowance_s` more are billed too (a launch's fetch and teardown):
    -1 where even now it does not; units.MAX_DURATION_S where it never stops fitting (a fleet that
    bills nothing).

    The bill: every ledger row of the cluster by its own terms (billing.charge), from `since` (or
    its own start, where later; None: from its start, the cluster's whole ledger), until it
    stopped; a node lost (or in `gone`) only until `now`; a node without a ledger row at the
    cluster's hourly price by the second; and a machine billed by `joining` from `now`."""
    from gpuplan.market import billing
    from gpuplan.units import MAX_DURATION_S

    row = state.cluster(cluster)
    status = {n.name: n.status for n in state.nodes(cluster)}
    windows: list[tuple[Terms, datetime, datetime | None]] = []  # terms, from, until (None: still held)

    def until_of(node: str, stopped: datetime | None) -> datetime | None:
        if stopped is not None:
            return stopped
        return now if status.get(node) == "lost" or node in gone else None

    held = set()
    for r in state.ledger_rows():
        if r["cluster"] != cluster:
            continue
        held.add(r["node"])
        start = r["started_at"] if since is None else max(since, min(r["started_at"], now))
        windows.append((r["terms"], start, until_of(r["node"], r["stopped_at"])))
    price = row.price_jpy_per_hour if row is not None else None
    if price is not None:
        for node, st in status.items():
            if node not in held and st not in GONE:
                windows.append((billing.per_second(price), since or now, until_of(node, None)))
    if joining is not None:
        windows.append((joining, now, None))

    def bill(t: int) -> Decimal:
        end = now + timedelta(seconds=t + allowance_s)
        return sum((billing.charge(max(0, int((min(end, until or end) - start).total_seconds())), terms)
                    for terms, start, until in windows), Decimal(0))

    return billing.seconds_within(bill, billed, MAX_DURATION_S)
