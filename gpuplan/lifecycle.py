"""Provision, status and teardown: the services behind `gpuplan provision/status/teardown`.

The order of writes is the point of this module. For every cloud call the state store gets
an intent row first and the outcome after, so a crash, a kill -9 or a failed API call at any
moment leaves enough behind for `teardown` to find everything: node rows exist (with their
deterministic names) before the create call, every resource carries the cluster's tags, and
teardown asks the provider what exists by tag rather than trusting the state alone.
"""

from __future__ import annotations

import re
import secrets
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import date, timedelta
from decimal import Decimal
from pathlib import Path

from gpuplan import config, paths
from gpuplan import provider as providers
from gpuplan.keys import ed25519_pair
from gpuplan.errors import GpuplanError, NotFound, QuotaExceeded, RetiredType, UsageError
from gpuplan.provider import TAG_CLUSTER, TAG_NODE, TAG_OWNER, HostKey, Instance, NodeSpec, Provider, Resource
from gpuplan.state import ClusterRow, NodeRow, State, now
from gpuplan.types import Offer

Progress = Callable[[str], None]

_NAME = re.compile(r"^[a-z][a-z0-9-]{0,30}[a-z0-9]$|^[a-z]$")


def _quiet(_: str) -> None:
    pass


@dataclass(frozen=True)
class ProvisionRequest:
    """Everything needed to create a cluster, resolved from the catalog and the command line."""

    provider: str
    size: str
    region: str
    count: int
    name: str
    gpus_per_node: int
    price_jpy_per_hour: Decimal | None
    image: str | None = None  # gpuplan image name (from `gpuplan image build`) or provider image id
    ttl_s: int | None = None
    spot: bool = False


def new_cluster_name() -> str:
    return f"gp-{secrets.token_hex(3)}"


def check_name(name: str) -> str:
    if not _NAME.fullmatch(name):  # fullmatch: `$` alone lets a trailing newline through
        raise UsageError(
            f"bad cluster name {name!r}: use 1-32 lowercase letters, digits and dashes, starting with a letter"
        )
    return name


def check_not_retired(offer: Offer, today: date | None = None) -> None:
    today = today or date.today()
    if offer.retired(today):
        successor = f"; use {offer.successor} instead" if offer.successor else ""
        raise RetiredType(f"{offer.provider}:{offer.name} was retired on {offer.retired_on.isoformat()}{successor}")


def request_from_offer(
    offer: Offer, count: int, name: str | None = None, image: str | None = None, ttl_s: int | None = None,
    spot: bool = False, region: str | None = None,
) -> ProvisionRequest:
    check_not_retired(offer)
    if count < 1:
        raise UsageError(f"bad count {count}: at least one machine")
    return ProvisionRequest(
        provider=offer.provider,
        size=offer.name,
        region=region or offer.region,
        count=count,
        name=check_name(name) if name else new_cluster_name(),
        gpus_per_node=offer.gpu_count,
        price_jpy_per_hour=offer.price_jpy_per_hour,
        image=image,
        ttl_s=ttl_s,
        spot=spot,
    )


def get_provider(name: str) -> Provider:
    return providers.get(name, config.provider_config(name))


# --- keys --------------------------------------------------------------------------------


def cluster_ssh_key(state: State, cluster: str) -> tuple[Path, str]:
    """The cluster's login key (created once, 0600, beside the state database)."""
    existing = state.ssh_key(cluster)
    if existing and existing[0].exists():
        return existing
    private, public = ed25519_pair()
    keydir = paths.state_dir() / "keys"
    keydir.mkdir(parents=True, exist_ok=True)
    keydir.chmod(0o700)
    path = keydir / cluster
    path.touch(mode=0o600, exist_ok=True)
    path.chmod(0o600)
    path.write_text(private)
    public_line = f"{public} gpuplan-{cluster}"
    state.save_ssh_key(cluster, path, public_line)
    return path, public_line


def node_host_key(cluster: str, node: str) -> HostKey:
    """The SSH host key gpuplan generates for a node and injects at creation. Kept (0600) so a
    resumed provision injects and pins the same key a half-made machine may already have."""
    from cryptography.hazmat.primitives import serialization

    path = paths.state_dir() / "keys" / f"{cluster}.hostkeys" / node
    if path.exists():
        private = path.read_text()
        key = serialization.load_ssh_private_key(private.encode(), password=None)
        public = key.public_key().public_bytes(
            serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH).decode()
        return HostKey(private, public)
    private, public = ed25519_pair()
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    path.touch(mode=0o600)
    path.write_text(private)
    return HostKey(private, public)


# --- provision ---------------------------------------------------------------------------


def preflight(prov: Provider, req: ProvisionRequest) -> None:
    """Credentials, then quota: raise before anything is created."""
    prov.check_credentials()
    need = prov.vcpus(req.region, req.size) * req.count
    for tier in prov.quota(req.region, req.size):
        if tier.free < need:
            how = f"; {tier.how_to_raise}" if tier.how_to_raise else ""
            raise QuotaExceeded(
                f"{req.count}x {req.size} needs {need} {tier.unit} of quota {tier.name!r} ({tier.description}) "
                f"in {req.region}, but only {tier.free} are free (limit {tier.limit}, used {tier.used}){how}"
            )


def node_names(cluster: str, count: int) -> list[str]:
    return [f"{cluster}-{i}" for i in range(count)]


def provision(
    state: State,
    prov: Provider,
    req: ProvisionRequest,
    progress: Progress = _quiet,
    keep_on_failure: bool = False,
) -> ClusterRow:
    """Create the cluster's machines and wait until they answer. Resumes an unfinished cluster of
    the same shape (create is idempotent by tag). On a failed create, what was made is removed
    again unless `keep_on_failure`; either way the journal tells what happened."""
    existing = state.cluster(req.name)
    if existing and existing.status != "gone":
        same = (existing.provider, existing.size, existing.region, existing.count) == (
            req.provider, req.size, req.region, req.count)
        if not same or existing.status == "ready":
            raise UsageError(
                f"cluster {req.name!r} already exists ({existing.count}x {existing.size}, {existing.status}); "
                "pick another --name or run `gpuplan teardown " + req.name + "` first"
            )
        progress(f"resuming cluster {req.name}")
    preflight(prov, req)
    image_id = resolve_image(state, req)

    owner = config.owner()
    ttl_expires = now() + timedelta(seconds=req.ttl_s) if req.ttl_s else None
    if not existing or existing.status == "gone":
        if existing:
            state.forget_cluster(req.name)
        state.add_cluster(
            req.name, req.provider, req.region, req.size, req.count, image=req.image, ssh_user=prov.default_ssh_user,
            ttl_expires_at=ttl_expires, price_jpy_per_hour=req.price_jpy_per_hour,
            spec={"gpus_per_node": req.gpus_per_node, "spot": req.spot, "owner": owner},
        )
    key_path, public_key = cluster_ssh_key(state, req.name)
    names = node_names(req.name, req.count)
    host_keys = {n: node_host_key(req.name, n) for n in names}
    for n in names:
        state.add_node(req.name, n, gpus=req.gpus_per_node)
    spec = NodeSpec(
        cluster=req.name, size=req.size, region=req.region, ssh_user=prov.default_ssh_user,
        ssh_public_key=public_key, host_keys=host_keys, image=image_id, ttl_s=req.ttl_s, spot=req.spot,
        tags={TAG_CLUSTER: req.name, TAG_OWNER: owner},
    )
    progress(f"creating {req.count}x {req.size} in {req.provider}/{req.region}")
    for n in names:
        state.update_node(req.name, n, status="creating")
    try:
        with state.journaled("create-nodes", ",".join(names), req.name, f"{req.provider}:{req.size}@{req.region}"):
            instances = prov.create(spec, names)
        _record_instances(state, req, instances)
        progress(f"waiting for {len(instances)} machines to answer")
        with state.journaled("wait-ready", ",".join(names), req.name):
            ready = prov.wait_ready(req.region, [i.id for i in instances])
        _record_instances(state, req, ready, host_keys=host_keys, running=True)
    except GpuplanError as exc:
        _after_failed_create(state, prov, req, exc, progress, keep_on_failure)
        raise
    state.set_cluster_status(req.name, "ready")
    progress(f"cluster {req.name} ready")
    return state.cluster(req.name)


def _after_failed_create(
    state: State, prov: Provider, req: ProvisionRequest, exc: Exception, progress: Progress, keep: bool
) -> None:
    state.set_cluster_status(req.name, "failed")
    found = reconcile(state, prov, state.cluster(req.name))
    made = sum(1 for r in found if r.kind == "instance")
    if keep:
        exc.args = (f"{exc} ({made} of {req.count} machines were created and kept; "
                    f"rerun the same provision to resume or `gpuplan teardown {req.name}` to remove them)",)
        return
    progress(f"create failed; removing the {made} machine(s) it made")
    try:
        teardown(state, prov, req.name, progress=progress)
        exc.args = (f"{exc} (nothing was left running: the {made} machine(s) created were removed)",)
    except GpuplanError as cleanup_exc:
        exc.args = (f"{exc}; cleanup also failed ({cleanup_exc}): run `gpuplan teardown {req.name}`",)


def _record_instances(
    state: State, req: ProvisionRequest, instances: Sequence[Instance], host_keys: dict | None = None,
    running: bool = False,
) -> None:
    for inst in instances:
        fields: dict = {"provider_id": inst.id, "status": "running" if running else "creating"}
        if inst.public_ip or inst.private_ip:
            fields.update(public_ip=inst.public_ip, private_ip=inst.private_ip, ssh_port=inst.ssh_port)
        state.update_node(req.name, inst.name, **fields)
        if running:
            address = inst.public_ip or inst.private_ip
            pinned = inst.extra.get("host_key") or (host_keys[inst.name].public_openssh if host_keys else None)
            if address and pinned:
                state.pin_host_key(address, inst.ssh_port, pinned, cluster=req.name, node=inst.name)
            state.ledger_start(req.name, inst.name, req.provider, req.size, req.price_jpy_per_hour or Decimal(0))


def resolve_image(state: State, req: ProvisionRequest) -> str | None:
    """A gpuplan image name (state) becomes the provider's image id; anything else passes through."""
    if not req.image:
        return None
    row = state.image(req.image)
    if row is None:
        return req.image
    if row.status != "ready" or not row.provider_id:
        raise UsageError(f"image {req.image!r} is {row.status}, not ready; rebuild it with `gpuplan image build`")
    if (row.provider, row.region) != (req.provider, req.region):
        raise UsageError(
            f"image {req.image!r} lives in {row.provider}/{row.region}, not {req.provider}/{req.region}"
        )
    return row.provider_id


def reconcile(state: State, prov: Provider, cluster: ClusterRow) -> list[Resource]:
    """Ask the provider what exists for this cluster and bring the node rows in line."""
    with state.journaled("list", cluster.name, cluster.name):
        found = prov.list(cluster.region, {TAG_CLUSTER: cluster.name})
    instances = {r.name or r.tags.get(TAG_NODE, ""): r for r in found if r.kind == "instance"}
    for node in state.nodes(cluster.name):
        r = instances.get(node.name)
        if r is not None:
            state.update_node(cluster.name, node.name, provider_id=r.id)
        elif node.status in ("intent", "creating", "running", "deleting"):
            state.update_node(cluster.name, node.name, status="failed" if node.status != "deleting" else "deleted")
            state.ledger_stop(cluster.name, node.name)
    return found


# --- status ------------------------------------------------------------------------------


@dataclass(frozen=True)
class ClusterStatus:
    cluster: ClusterRow
    nodes: list[NodeRow]
    uptime_s: int
    machine_seconds: int
    yen_so_far: Decimal  # unrounded; the CLI rounds to integer yen for display
    ttl_left_s: int | None


def status(state: State, cluster: str | None = None) -> list[ClusterStatus]:
    rows = [state.cluster(cluster)] if cluster else state.clusters()
    if cluster and rows[0] is None:
        raise NotFound(f"no cluster named {cluster!r}; `gpuplan status` lists them")
    out = []
    t = now()
    for c in rows:
        seconds, yen = state.ledger_seconds_and_yen(c.name, t)
        ttl_left = int((c.ttl_expires_at - t).total_seconds()) if c.ttl_expires_at else None
        out.append(ClusterStatus(c, state.nodes(c.name), int((t - c.created_at).total_seconds()), seconds, yen, ttl_left))
    return out


# --- teardown ----------------------------------------------------------------------------


@dataclass
class TeardownReport:
    cluster: str
    deleted: list[Resource] = field(default_factory=list)
    kept_images: int = 0


def teardown(
    state: State, prov: Provider, cluster: str, include_images: bool = False, progress: Progress = _quiet
) -> TeardownReport:
    """Delete everything the cluster owns. Idempotent and resumable: it lists by tag every time,
    so a teardown cut off half way is finished by running it again."""
    row = state.cluster(cluster)
    if row is None:
        raise NotFound(f"no cluster named {cluster!r}; `gpuplan status` lists them")
    report = TeardownReport(cluster)
    state.set_cluster_status(cluster, "tearing-down")
    found = reconcile(state, prov, row)
    doomed = [r for r in found if r.kind != "image" or include_images]
    report.kept_images = len(found) - len(doomed)
    for node in state.nodes(cluster):
        state.update_node(cluster, node.name, status="deleting")
    # Machines first (they are what bills most), then what they used: a teardown cut off
    # between the two has already stopped the meter.
    machines = [r for r in doomed if r.kind == "instance"]
    rest = [r for r in doomed if r.kind != "instance"]
    for op, batch in (("delete-instances", machines), ("delete-resources", rest)):
        if batch:
            progress(f"deleting {len(batch)} {'machine' if batch is machines else 'resource'}(s) of {cluster}")
            with state.journaled(op, ",".join(r.id for r in batch)[:2000], cluster, f"{len(batch)} resources"):
                prov.delete(row.region, batch)
    report.deleted = doomed
    with state.journaled("verify-gone", cluster, cluster):
        left = [r for r in prov.list(row.region, {TAG_CLUSTER: cluster}) if r.kind != "image" or include_images]
        if left:
            raise GpuplanError(
                f"{len(left)} resource(s) of {cluster} still exist after delete ({', '.join(r.kind + ' ' + r.id for r in left[:3])}); "
                f"run `gpuplan teardown {cluster}` again"
            )
    for node in state.nodes(cluster):
        state.update_node(cluster, node.name, status="deleted")
        state.ledger_stop(cluster, node.name)
    state.unpin_cluster_host_keys(cluster)
    state.set_cluster_status(cluster, "gone")
    return report


def sweep(
    state: State, prov: Provider, regions: Sequence[str], include_images: bool = False, delete: bool = True,
    progress: Progress = _quiet,
) -> list[Resource]:
    """Find this owner's gpuplan-tagged resources that no live cluster in the state knows, and
    delete them (unless `delete` is False). Images are kept unless `include_images`."""
    known = {c.name for c in state.clusters()}
    known_images = {i.provider_id for i in state.images() if i.provider == prov.name}
    strays: list[tuple[str, Resource]] = []
    for region in regions:
        with state.journaled("sweep-list", f"{prov.name}/{region}"):
            found = prov.list(region, {TAG_OWNER: config.owner()})
        for r in found:
            if r.kind == "image":
                if include_images and r.id not in known_images:
                    strays.append((region, r))
            elif r.tags.get(TAG_CLUSTER) not in known:
                strays.append((region, r))
    if delete:
        for region in {reg for reg, _ in strays}:
            batch = [r for reg, r in strays if reg == region]
            progress(f"deleting {len(batch)} stray resource(s) in {prov.name}/{region}")
            with state.journaled("sweep-delete", ",".join(r.id for r in batch)[:2000], None, f"{prov.name}/{region}"):
                prov.delete(region, batch)
    return [r for _, r in strays]


def sweep_regions(state: State, prov: Provider, extra: Sequence[str] = ()) -> list[str]:
    """Regions worth sweeping: the ones named, the ones the state has used, the provider's defaults."""
    seen = [c.region for c in state.clusters(include_gone=True) if c.provider == prov.name]
    seen += [i.region for i in state.images(include_deleted=True) if i.provider == prov.name]
    ordered: list[str] = []
    for r in [*extra, *seen, *prov.default_regions()]:
        if r and r not in ordered:
            ordered.append(r)
    return ordered
