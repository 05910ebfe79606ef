"""`gpuplan status --refresh`: ask each cluster's provider what its machines are now, bring the
state in line, and say what differed.

What the cloud says wins for what gpuplan cannot know on its own: a machine deleted outside
gpuplan (or stopped by its TTL) is marked gone and its ledger row closed, so `status` stops
counting yen for it; a changed address or status is written down. A machine the cloud has with
the cluster's tag but the state lacks is reported, never adopted or deleted: `gpuplan teardown
NAME` removes it with the rest. Each cluster is read and written under its lock.
"""

from __future__ import annotations

from dataclasses import dataclass

from gpuplan.errors import GpuplanError


@dataclass(frozen=True)
class Difference:
    cluster: str
    node: str  # node name, or the instance id of a machine the state does not know
    what: str  # "gone" | "status" | "address" | "unknown" | "unreadable"
    text: str  # one line for people


def refresh(state, get_provider, cluster: str | None = None) -> list[Difference]:
    """Reconcile every cluster of the state (or `cluster`) with its provider; the differences
    found, in cluster and node order (none: the state already matched)."""
    from gpuplan.fleet import locks
    from gpuplan.fleet.lifecycle import cluster_tags

    rows = [state.cluster(cluster)] if cluster else state.clusters()
    out: list[Difference] = []
    for c in rows:
        if c is None:
            continue
        try:
            prov = get_provider(c.provider)
            with locks.cluster(c.name):
                found = prov.machines(c.region, cluster_tags(c))  # this installation's, not a namesake's
                out += _apply(state, c, found)
        except GpuplanError as exc:
            out.append(Difference(c.name, "-", "unreadable", f"{c.name}: could not ask {c.provider}: {exc}"))
    return out


def _apply(state, c, found) -> list[Difference]:
    out = []
    known = set()
    for n in state.nodes(c.name):
        if n.status in ("deleted", "gone") or not n.provider_id:
            continue
        inst = found.get(n.name)
        known.add(n.name)
        if inst is None or inst.status == "terminated":
            state.update_node(c.name, n.name, status="gone")
            state.ledger_stop(c.name, n.name)
            out.append(Difference(c.name, n.name, "gone", f"{c.name}/{n.name} ({n.provider_id}): no longer in {c.provider};"
                                                          " marked gone, no more yen counted for it"))
            continue
        if inst.status != n.status:
            state.update_node(c.name, n.name, status=inst.status)
            out.append(Difference(c.name, n.name, "status", f"{c.name}/{n.name}: {n.status} -> {inst.status}"))
        if (inst.public_ip, inst.private_ip) != (n.public_ip, n.private_ip) and (inst.public_ip or inst.private_ip):
            state.update_node(c.name, n.name, public_ip=inst.public_ip, private_ip=inst.private_ip)
            out.append(Difference(c.name, n.name, "address", f"{c.name}/{n.name}: address {n.public_ip or n.private_ip}"
                                                             f" -> {inst.public_ip or inst.private_ip}"))
    for name, inst in sorted(found.items()):
        if name not in known and inst.status != "terminated":
            out.append(Difference(c.name, inst.id, "unknown", f"{c.name}: {c.provider} has {inst.id} ({name}, {inst.status})"
                                                              f" tagged with the cluster but the state does not;"
                                                              f" `gpuplan teardown {c.name}` removes it"))
    return out
