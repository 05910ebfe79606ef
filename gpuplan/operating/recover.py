"""`gpuplan run --recover`: a node lost mid-batch gets a replacement of the same kind.

The replacement is made as `provision` makes machines (tagged with the cluster's identity,
journaled before the cloud call, its host key pinned, its cost in the ledger), then gets the
playbooks the cluster was bootstrapped with and Ray, and joins the running batch: the driver
adds every gpuplan node that joins Ray while it runs (ray_driver.py).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from decimal import Decimal
from typing import TYPE_CHECKING

from gpuplan.errors import UsageError
from gpuplan.operating.provider import NodeSpec

if TYPE_CHECKING:
    from gpuplan.operating.state import State
    from gpuplan.planning.billing import Terms

SETUP_GUESS_S = 600  # a replacement's create, bootstrap and Ray start, for the yen shown before asking
SKIPPED_PLAYBOOKS = ("ray", "idle-stop")  # ensure_up installs Ray; the idle watchdog's settings are not kept


@dataclass(frozen=True)
class Cost:
    what: str  # "1x aws:g4dn.xlarge"
    price_jpy_per_hour: Decimal | None
    yen: Decimal | None  # for `seconds`, by the cluster's billing terms
    seconds: float


def cost(state: State, cluster: str, seconds: float) -> Cost:
    """What one replacement machine costs for `seconds` (the batch's ETA plus its setup), by the
    one billing rule and the cluster's terms."""
    from gpuplan.operating import runner

    row = state.cluster(cluster)
    if row is None:
        raise UsageError(f"no cluster named {cluster!r}; `gpuplan status` lists them")
    terms: Terms | None = state.ledger_terms(cluster)
    return Cost(f"1x {row.provider}:{row.size}", row.price_jpy_per_hour,
                runner.yen_for(terms, row.price_jpy_per_hour, 1, seconds), seconds)


def next_node_name(state: State, cluster: str) -> str:
    taken = {n.name for n in state.nodes(cluster)}
    numbers = [int(n.rsplit("-", 1)[1]) for n in taken if n.rsplit("-", 1)[-1].isdigit()]
    return f"{cluster}-{max(numbers, default=-1) + 1}"


def replace_node(state: State, cluster: str, lost: str, progress: Callable[[str], None] = lambda _m: None) -> str:
    """Mark `lost` as lost, create one machine of the cluster's kind in its place, bootstrap it
    and start Ray on it (it joins the head). Returns the new node's name."""
    from gpuplan.operating import engine, keys, lifecycle, locks, playbook
    from gpuplan.operating.tags import TAG_CREATED

    row = state.cluster(cluster)
    if row is None:
        raise UsageError(f"no cluster named {cluster!r}; `gpuplan status` lists them")
    prov = lifecycle.get_provider(row.provider)
    gpus = int(row.spec.get("gpus_per_node") or max((n.gpus for n in state.nodes(cluster)), default=0))
    with locks.cluster(cluster):
        name = next_node_name(state, cluster)
        state.update_node(cluster, lost, status="lost")
        identity = lifecycle.cluster_identity(state, cluster)
        _, public_key = keys.cluster_login_key(state, cluster)
        host_keys = {name: keys.node_host_key(cluster, name)} if prov.injects_host_keys else {}
        req = lifecycle.ProvisionRequest(row.provider, row.size, row.region, 1, cluster, gpus, row.price_jpy_per_hour,
                                         image=row.image, spot=bool(row.spec.get("spot")),
                                         billing=state.ledger_terms(cluster))
        spec = NodeSpec(cluster=cluster, size=row.size, region=row.region, ssh_user=row.ssh_user, ssh_public_key=public_key,
                        host_keys=host_keys, image=lifecycle.resolve_image(state, req), spot=req.spot,
                        tags={**identity, TAG_CREATED: str(int(time.time()))}, ssh_cidr=lifecycle.ssh_source(prov))
        state.add_node(cluster, name, gpus=gpus)
        state.update_node(cluster, name, status="creating")
        progress(f"creating {name} ({req.size}) in place of {lost}")
        with state.journaled("create-nodes", name, cluster, f"{row.provider}:{row.size}@{row.region} (replaces {lost})"):
            instances = prov.create(spec, [name])
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
