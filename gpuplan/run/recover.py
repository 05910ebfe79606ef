"""`gpuplan run --recover`: a node lost mid-batch gets a replacement of the same kind.

The replacement is made as `provision` makes machines (tagged with the cluster's identity,
journaled before the cloud call, its host key pinned, its cost in the ledger), then gets the
playbooks the cluster was bootstrapped with and Ray, and joins the running batch: the driver
adds every gpuplan node that joins Ray while it runs (ray_driver.py).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from datetime import datetime, timezone
from decimal import Decimal
from typing import TYPE_CHECKING

from gpuplan.errors import CapacityUnavailable, UsageError
from gpuplan.fleet.provider import NodeSpec

if TYPE_CHECKING:
    from gpuplan.fleet import lifecycle
    from gpuplan.market.billing import Terms
    from gpuplan.run.caps import Cap
    from gpuplan.store.state import JobRow, State

SETUP_GUESS_S = 600  # a replacement's create, bootstrap and Ray start, for the yen shown before asking
SKIPPED_PLAYBOOKS = ("ray", "idle-stop")  # ensure_up installs Ray; the idle watchdog's settings are not kept


SPOT, ON_DEMAND = "spot", "on-demand"  # the market a replacement is bought in


@dataclass(frozen=True)
class Cost:
    what: str  # "1x aws:g4dn.xlarge"
    price_jpy_per_hour: Decimal | None
    yen: Decimal | None  # for `seconds`, by the replacement's billing terms
    seconds: float
    market: str = ON_DEMAND
    terms: Terms | None = None  # how the replacement is billed (None: its hourly price by the second)


def request(state: State, cluster: str, market: str | None = None) -> lifecycle.ProvisionRequest:
    """What a replacement in `cluster` is bought as: the cluster's own kind, price and terms; or,
    for a spot cluster's replacement in `market` on-demand, the same size at its on-demand catalog
    row (price, terms and tax basis as `provision` takes them)."""
    from gpuplan.fleet import lifecycle, provision

    row = state.cluster(cluster)
    if row is None:
        raise UsageError(f"no cluster named {cluster!r}; `gpuplan status` lists them")
    gpus = int(row.spec.get("gpus_per_node") or max((n.gpus for n in state.nodes(cluster)), default=0))
    spot = bool(row.spec.get("spot"))
    if market == ON_DEMAND and spot:
        offer, _ = provision.live(f"{row.provider}:{row.size}", row.region)
        return replace(lifecycle.request_from_offer(offer, 1, name=cluster, image=row.image, region=row.region),
                       gpus_per_node=gpus)
    listed = next((r["tax"] for r in reversed(state.ledger_rows()) if r["cluster"] == cluster), "unknown")
    return lifecycle.ProvisionRequest(row.provider, row.size, row.region, 1, cluster, gpus, row.price_jpy_per_hour,
                                      image=row.image, spot=spot, billing=state.ledger_terms(cluster),
                                      tax=listed)  # billed on the basis its peers are: one basis in the ledger


def cost(state: State, cluster: str, seconds: float, market: str | None = None) -> Cost:
    """What one replacement machine (request's) costs for `seconds` (the batch's ETA plus its
    setup), by the one billing rule and its terms."""
    from gpuplan.market import billing
    from gpuplan.run import items as run_items

    req = request(state, cluster, market)
    terms = req.billing or (billing.per_second(req.price_jpy_per_hour) if req.price_jpy_per_hour is not None else None)
    return Cost(f"1x {req.provider}:{req.size}{' (spot)' if req.spot else ''}", req.price_jpy_per_hour,
                run_items.yen_for(terms, req.price_jpy_per_hour, 1, seconds), seconds, SPOT if req.spot else ON_DEMAND, terms)


def job_cap(row: JobRow) -> Cap | None:
    """The batch's yen cap (`run --max-yen`, a launch's max_yen) as one value: its yen on its tax
    basis and in ledger yen (caps.Cap); None: it has none."""
    from gpuplan.run import caps

    return caps.of_job(row)


def cap_time(state: State, row: JobRow, gone: Sequence[str] = (), joining: Terms | None = None,
             now: datetime | None = None) -> datetime | None:
    """When the batch must stop for its nodes' bill to stay within its cap, compared in ledger
    yen (Cap.stop_moment from the batch's start; a launch's: the cluster's whole ledger, teardown
    allowance kept), a node lost (or in `gone`) billed only until `now`, and a machine billed by
    `joining` from `now`. What `run --recover` checks a replacement against, and the cap it then
    moves the driver to (a dearer machine brings the stop earlier). `now` itself where not even
    the bill so far fits; None: no cap, or a fleet that bills nothing."""
    cap = job_cap(row)
    if cap is None or state.cluster(row.cluster) is None:
        return None
    now = now or datetime.now(timezone.utc)
    stop = cap.stop_moment(state, row.cluster, now=now, since=row.submitted_at, gone=gone, joining=joining)
    return None if stop is None else max(stop, now)


def move_cap(state: State, row: JobRow, now: datetime | None = None) -> datetime | None:
    """After a replacement joined: the driver's cap moved to cap_time, where that is earlier than
    the one it runs to. Returns the new stop (None: the cap did not move)."""
    from gpuplan.run.ray import engine

    stop = cap_time(state, row, now=now)
    submitted = row.options.get("stop_at")
    if stop is None or (submitted and stop >= datetime.fromisoformat(submitted)):
        return None
    engine.move_cap(engine.engine_of(state, row.cluster), row.id, stop)  # the driver keeps the earliest it is given
    return stop


def next_node_name(state: State, cluster: str) -> str:
    taken = {n.name for n in state.nodes(cluster)}
    numbers = [int(n.rsplit("-", 1)[1]) for n in taken if n.rsplit("-", 1)[-1].isdigit()]
    return f"{cluster}-{max(numbers, default=-1) + 1}"


def replace_node(state: State, cluster: str, lost: str, progress: Callable[[str], None] = lambda _m: None,
                 market: str | None = None) -> str:
    """Mark `lost` as lost, create one machine of the cluster's kind in its place (a spot
    cluster's in `market` on-demand: see request), bootstrap it and start Ray on it (it joins the
    head). Returns the new node's name. The provider's CapacityUnavailable passes through, the
    node it would have been left "failed", so that the caller may try the other market."""
    from gpuplan.fleet import lifecycle, locks
    from gpuplan.fleet.tags import TAG_CREATED
    from gpuplan.hosts import keys, playbook
    from gpuplan.run.ray import engine

    row = state.cluster(cluster)
    if row is None:
        raise UsageError(f"no cluster named {cluster!r}; `gpuplan status` lists them")
    prov = lifecycle.get_provider(row.provider)
    req = request(state, cluster, market)
    gpus = req.gpus_per_node
    with locks.cluster(cluster):
        name = next_node_name(state, cluster)
        state.update_node(cluster, lost, status="lost")
        identity = lifecycle.cluster_identity(state, cluster)
        _, public_key = keys.cluster_login_key(state, cluster)
        host_keys = {name: keys.node_host_key(cluster, name)} if prov.injects_host_keys else {}
        spec = NodeSpec(cluster=cluster, size=row.size, region=row.region, ssh_user=row.ssh_user, ssh_public_key=public_key,
                        host_keys=host_keys, image=lifecycle.resolve_image(state, req), spot=req.spot,
                        tags={**identity, TAG_CREATED: str(int(time.time()))}, ssh_cidr=lifecycle.ssh_source(prov))
        state.add_node(cluster, name, gpus=gpus)
        state.update_node(cluster, name, status="creating")
        progress(f"creating {name} ({req.size}) in place of {lost}")
        try:
            with state.journaled("create-nodes", name, cluster,
                                 f"{row.provider}:{row.size}@{row.region} (replaces {lost})"):
                instances = prov.create(spec, [name])
        except CapacityUnavailable:  # nothing was made: the name is not a machine to bill or wait for
            state.update_node(cluster, name, status="failed")
            raise
        lifecycle._record_instances(state, req, instances)
        with state.journaled("wait-ready", name, cluster):
            ready = prov.wait_ready(row.region, [i.id for i in instances])
            lifecycle._record_instances(state, req, ready, host_keys=host_keys, running=True)
    for books, params in bootstraps(state, cluster):  # on the new node alone, as its peers got them
        progress(f"bootstrapping {name}: {', '.join(books)}")
        playbook.bootstrap_cluster(state, cluster, books, params, progress=progress, only=[name])
    engine.ensure_up(state, cluster, progress)
    return name


def bootstraps(state: State, cluster: str) -> list[tuple[list[str], dict[str, str]]]:
    """The playbooks the cluster was bootstrapped with, in order, each with the parameters it was
    given (recorded with the cluster); Ray and the idle watchdog left out (SKIPPED_PLAYBOOKS).
    A cluster bootstrapped before parameters were recorded: the journal's names, no parameters."""
    row = state.cluster(cluster)
    recorded = (row.spec.get("bootstrapped") if row is not None else None) or []
    if recorded:
        pairs = [(list(b["playbooks"]), dict(b.get("params") or {})) for b in recorded]
    else:
        names: list[str] = []
        for j in state.journal(cluster):
            if j.op == "bootstrap" and j.phase == "ok" and j.target not in names:
                names.append(j.target)
        pairs = [(t.split(","), {}) for t in names]
    out = []
    for books, params in pairs:
        kept = [b for b in books if b not in SKIPPED_PLAYBOOKS]
        if kept:
            out.append((kept, params))
    return out
