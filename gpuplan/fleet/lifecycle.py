"""Provision, status and teardown: the services behind `gpuplan provision/status/teardown`.

The order of writes is the point of this module. For every cloud call the state store gets
an intent row first and the outcome after, so a crash, a kill -9 or a failed API call at any
moment leaves enough behind for `teardown` to find everything: node rows exist (with their
deterministic names) before the create call, every resource carries the cluster's tags, and
teardown asks the provider what exists by tag rather than trusting the state alone.

Every changing service here holds the cluster's lock (gpuplan.fleet.locks) for its whole run, so two
commands on one cluster never interleave: a second provision of a name waits, then resumes or
refuses what the first left, and a sweep re-checks each candidate under that lock.
"""

from __future__ import annotations

import ipaddress
import os
import re
import secrets
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import date, timedelta
from decimal import Decimal
from typing import TYPE_CHECKING

from gpuplan import config
from gpuplan.errors import Busy, GpuplanError, NotFound, ProviderError, RetiredType, UsageError
from gpuplan.fleet import locks
from gpuplan.fleet import provider as providers
from gpuplan.fleet import tags as tagging
from gpuplan.fleet.provider import Instance, NodeSpec, Provider, QuotaUsage, Resource, ZoneRefusal
from gpuplan.fleet.tags import TAG_CLUSTER, TAG_CREATED, TAG_IMAGE, TAG_INSTALLATION, TAG_NODE, TAG_OWNER
from gpuplan.hosts import keys
from gpuplan.market.billing import Terms, terms_for
from gpuplan.planning.types import Offer
from gpuplan.store.state import ClusterRow, NodeRow, State, now

if TYPE_CHECKING:
    from gpuplan.market.catalog import Catalog

Progress = Callable[[str], None]

_NAME = re.compile(r"^[a-z][a-z0-9-]{0,30}[a-z0-9]$|^[a-z]$")


def _quiet(_: str) -> None:
    pass


# What each provider does at a TTL, in its own terms (issue 42: GCP's was said to "stop" machines
# GCE deletes), as its module's docstring says it arms it: `provision`'s line, `status`'s words
# for the time left and a launch's line for a cluster it leaves up (run/launcher.py). AWS: a
# shutdown from inside with InstanceInitiatedShutdownBehavior=terminate; GCP: maxRunDuration with
# instanceTerminationAction DELETE; Azure: the auto-shutdown schedule, which deallocates; Sakura:
# a timer that powers the server off (stopped, its disk kept).
TTL_DOES = {
    "aws": ("each machine shuts itself down after that and EC2 terminates it (its root disk with it)",
            "EC2 terminates them in"),
    "gcp": ("GCE itself deletes the machines (and their disks) after that", "GCE deletes them in"),
    "azure": ("Azure's auto-shutdown deallocates the machines after that (compute stops billing; their disks and"
              " addresses bill until `gpuplan teardown`)", "Azure deallocates them in"),
    "sakura": ("each machine powers itself off (stops) after that; its disk bills until `gpuplan teardown`",
               "they stop (power off) in"),
    "": ("the cloud itself stops the machines after that", "released in"),
}


def ttl_does_at(provider: str) -> str:
    """What happens to the machines at their TTL moment, for "... at 13:30:00 UTC": "EC2
    terminates them", "GCE deletes them", "Azure deallocates them", "they stop (power off)"."""
    return TTL_DOES.get(provider, TTL_DOES[""])[1].removesuffix(" in")

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
    ssh_cidr: str | None = None  # None: from config, else detected (see ssh_source)
    idle_s: int | None = None  # --idle: each node stops itself after this long with no batch (fleet/idle.py)
    vcpus: int | None = None  # per machine, from the catalog row (None: the provider's own figure)
    billing: Terms | None = None  # how each machine is billed (the ledger charges by it); None: per second
    tax: str = "unknown"  # whether that price includes consumption tax, as its row lists it (market/tax.py)
    more: tuple[ProvisionRequest, ...] = ()  # a mixed fleet's other sizes: one cluster, machines numbered on

    @property
    def parts(self) -> tuple[ProvisionRequest, ...]:
        """Each size of the cluster with its own count (one part unless the fleet is mixed)."""
        return (self, *self.more)

    @property
    def total(self) -> int:
        """Machines of every size."""
        return sum(p.count for p in self.parts)


def new_cluster_name() -> str:
    return f"gp-{secrets.token_hex(3)}"


def check_name(name: str, what: str = "cluster") -> str:
    if not _NAME.fullmatch(name):  # fullmatch: `$` alone lets a trailing newline through
        raise UsageError(
            f"bad {what} name {name!r}: use 1-32 lowercase letters, digits and dashes, starting with a letter"
        )
    if what == "cluster":
        from gpuplan.run import backends

        if name in backends.pseudo_clusters():  # `gpuplan jobs dok` lists 高火力 DOK task batches
            raise UsageError(f"the cluster name {name} is kept for Sakura 高火力 DOK task batches (gpuplan run dok:PLAN);"
                             " choose another")
    return name


def check_not_retired(offer: Offer, today: date | None = None) -> None:
    today = today or date.today()
    if offer.retired(today):
        successor = f"; use {offer.successor} instead" if offer.successor else ""
        raise RetiredType(f"{offer.provider}:{offer.name} was retired on {offer.retired_on.isoformat()}{successor}")


def live_offer(cat: Catalog, offer: Offer, region: str | None = None, today: date | None = None) -> tuple[Offer, str]:
    """What to create for `offer`: itself, or when it is retired its successor (followed while
    that is retired too), in `region`, else the retired row's region where the successor is
    offered there, else the successor's default. Returns (offer, a line saying what was mapped,
    or ""). RetiredType when no live successor exists."""
    today = today or date.today()
    start, seen = offer, set()
    while offer.retired(today):
        seen.add(offer.name)
        if not offer.successor or offer.successor in seen:  # no live successor (none, or a loop)
            raise RetiredType(f"{offer.provider}:{offer.name} was retired on {offer.retired_on.isoformat()}")
        wanted = region or offer.region
        try:
            offer = cat.resolve(f"{offer.provider}:{offer.successor}", region=wanted)
        except UsageError:
            if region:
                raise UsageError(f"{start.provider}:{start.name} was retired on {start.retired_on.isoformat()} and its "
                                 f"successor {offer.successor} is not offered in {region}; leave out --region or name a "
                                 f"current size (`gpuplan catalog --provider {offer.provider}` lists them)") from None
            offer = cat.resolve(f"{offer.provider}:{offer.successor}")
    if offer is start:
        return offer, ""
    return offer, (f"{start.provider}:{start.name} was retired on {start.retired_on.isoformat()}; using its successor "
                   f"{offer.provider}:{offer.name} ({offer.gpu_count}x {offer.gpu}, {offer.region}) instead")


def request_from_offer(
    offer: Offer, count: int, name: str | None = None, image: str | None = None, ttl_s: int | None = None,
    spot: bool = False, region: str | None = None, ssh_cidr: str | None = None,
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
        ssh_cidr=ssh_cidr,
        vcpus=offer.vcpus or None,
        billing=_terms(offer),
        tax=offer.listed_tax or offer.tax,
    )


def _terms(offer: Offer) -> Terms | None:
    """The offer's billing terms where its row prices it by the hour (a monthly rent needs FX the
    request does not carry: its ledger counts the hourly equivalent by the second)."""
    try:
        return terms_for(offer)
    except ValueError:
        return None


def get_provider(name: str) -> Provider:
    return providers.get(name, config.provider_config(name))


def _trust_pins(state: State, prov: Provider) -> None:
    """Hand the provider the host keys the state has pinned (it never reads the state itself)."""
    prov.use_known_hosts(state.pinned_host_keys())


# --- who we are, and where SSH may come from --------------------------------------------


def owner(state: State) -> str:
    """The gpuplan-owner tag value: config `owner:` if set, else user-host plus this
    installation's id, so a sweep from another installation (another GPUPLAN_HOME, another
    state) never takes this one's resources for strays. On a team's shared state (PostgreSQL)
    the team is one installation: `team-<id>` for every member, so that any member's sweep
    finds what the team left behind."""
    if (configured := config.owner()) is not None:
        return configured
    if state.shared:
        return config.tag_value(f"team-{state.installation_id()}")
    return config.tag_value(f"{config.legacy_owner()[:50]}-{state.installation_id()}")


CHECKIP_URL = "https://checkip.amazonaws.com"  # answers with the caller's public IPv4 address


def ssh_source(prov: Provider, asked: str | None = None) -> str | None:
    """The CIDR a provider's firewall lets SSH in from: `asked` (--ssh-from), else config
    providers.<name>.ssh_cidr (or ssh_source), else the caller's own public address as
    CHECKIP_URL sees it (GPUPLAN_CHECKIP_URL overrides), as a /32. None for a provider that
    opens no firewall of its own. "0.0.0.0/0" only when asked for."""
    if not prov.opens_ssh_ingress:
        return None
    conf = config.provider_config(prov.name)
    raw = asked or conf.get("ssh_cidr") or conf.get("ssh_source")
    where = "--ssh-from" if asked else f"providers.{prov.name}.ssh_cidr in config.yaml"
    if raw:
        return _cidr(raw.strip(), where)
    url = os.environ.get("GPUPLAN_CHECKIP_URL") or CHECKIP_URL
    how = (f"set providers.{prov.name}.ssh_cidr in config.yaml (e.g. 203.0.113.5/32) or pass --ssh-from CIDR "
           "(--ssh-from 0.0.0.0/0 opens SSH to every address)")
    import urllib.request

    try:
        with urllib.request.urlopen(url, timeout=5) as answer:
            text = answer.read(100).decode(errors="replace").strip()
    except Exception as exc:  # URLError, timeouts, TLS errors: all mean "not detected"
        raise UsageError(f"cannot find your public address for the SSH rule ({url}: {exc}); {how}") from None
    try:  # one address only: an answer like "0.0.0.0/0" must never open SSH to everyone
        address = ipaddress.ip_address(text)
    except ValueError:
        raise UsageError(f"cannot find your public address for the SSH rule ({url} answered {text[:40]!r}, not one "
                         f"address); {how}") from None
    if address.is_unspecified or address.is_multicast:
        raise UsageError(f"cannot find your public address for the SSH rule ({url} answered {text[:40]!r}, not a "
                         f"host's address); {how}")
    return str(ipaddress.ip_network(address))


def check_ssh_from(asked: str | None) -> None:
    """--ssh-from's form, checked where nothing else is yet (a dry run, before any question)."""
    if asked is not None:
        _cidr(asked.strip(), "--ssh-from")


def _cidr(raw: str, where: str) -> str:
    try:
        net = ipaddress.ip_network(raw, strict=False)
    except ValueError:
        raise UsageError(f"bad SSH source {raw!r} ({where}): give an address or CIDR, e.g. 203.0.113.5/32") from None
    return str(net)


# --- provision ---------------------------------------------------------------------------


def preflight(prov: Provider, req: ProvisionRequest, identity: dict[str, str] | None = None
              ) -> list[tuple[QuotaUsage, int]]:
    """Credentials, features, then quota for the machines still to be made: raise before
    anything is created. Returns each quota tier checked with what they need of it, in the
    tier's own unit (QuotaUsage.wanted; for the confirmation). The provider's create checks the
    same rule again on what it finds by tag. `identity`: the cluster's tags (tags.identity); by
    default this installation's."""
    prov.check_credentials()
    prov.check_features(spot=req.spot, ttl_s=req.ttl_s)
    have = prov.machines(req.region, identity or {TAG_CLUSTER: req.name})
    needs: list[tuple[QuotaUsage, int]] = []
    for part, names in split_names(req):
        shortfall = len([n for n in names if n not in have])
        got, seen = prov.check_quota(part.region, part.size, shortfall, spot=part.spot, vcpus=part.vcpus)
        vcpus_each = got // shortfall if shortfall else 0  # check_quota's vCPUs where a tier counts them
        for tier in seen:  # a tier two sizes share (a family's vCPUs) sums both parts' need
            want = tier.wanted(shortfall, vcpus_each)
            at = next((i for i, (t, _) in enumerate(needs) if t == tier), None)
            if at is None:
                needs.append((tier, want))
            else:
                needs[at] = (tier, needs[at][1] + want)
    return needs


def split_names(req: ProvisionRequest) -> list[tuple[ProvisionRequest, list[str]]]:
    """Each part of the cluster with the names of its machines: the first size first, numbered on."""
    names = node_names(req.name, req.total)
    out, at = [], 0
    for part in req.parts:
        out.append((part, names[at:at + part.count]))
        at += part.count
    return out


def cluster_identity(state: State, name: str) -> dict[str, str]:
    """The tags every lookup of cluster `name` matches (tags.identity): what its state row
    recorded, or for a new cluster this installation's owner and id. A cluster made before
    installations were tagged keeps matching without that tag."""
    existing = state.cluster(name)
    if existing is not None and existing.status != "gone":
        return tagging.identity({TAG_CLUSTER: name, TAG_OWNER: existing.spec.get("owner") or owner(state),
                                 TAG_INSTALLATION: existing.spec.get("installation") or ""})
    return {TAG_CLUSTER: name, TAG_OWNER: owner(state), TAG_INSTALLATION: state.installation_id()}


def node_names(cluster: str, count: int) -> list[str]:
    return [f"{cluster}-{i}" for i in range(count)]


def provision(
    state: State,
    prov: Provider,
    req: ProvisionRequest,
    progress: Progress = _quiet,
    keep_on_failure: bool = False,
) -> ClusterRow:
    """Create the cluster's machines and wait until they answer, under the cluster's lock.
    Resumes an unfinished cluster of the same shape (create is idempotent by tag). On a failed
    create, what was made is removed again unless `keep_on_failure`; either way the journal
    tells what happened and the error says how to finish."""
    _trust_pins(state, prov)
    with locks.cluster(req.name):
        return _provision(state, prov, req, progress, keep_on_failure)


def resumable(state: State, req: ProvisionRequest) -> ClusterRow | None:
    """The unfinished cluster of this name and shape a provision resumes (None: a new one).
    Raises when the name belongs to a ready cluster or to one of another shape."""
    existing = state.cluster(req.name)
    if existing is None or existing.status == "gone":
        return None
    same = (existing.provider, existing.size, existing.region, existing.count) == (
        req.provider, req.size, req.region, req.total)
    if not same or existing.status == "ready":
        raise UsageError(
            f"cluster {req.name!r} already exists ({existing.count}x {existing.size}, {existing.status}); "
            "pick another --name or run `gpuplan teardown " + req.name + "` first"
        )
    return existing


def _provision(state: State, prov: Provider, req: ProvisionRequest, progress: Progress, keep: bool) -> ClusterRow:
    existing = resumable(state, req)
    if existing:
        progress(f"resuming cluster {req.name}")
    identity = cluster_identity(state, req.name)
    tag_owner, installation = identity[TAG_OWNER], identity.get(TAG_INSTALLATION)
    preflight(prov, req, identity)
    image_id = resolve_image(state, req)
    ssh_cidr = req.ssh_cidr or ssh_source(prov)

    ttl_expires = now() + timedelta(seconds=req.ttl_s) if req.ttl_s else None
    if not existing:
        if state.cluster(req.name):  # a gone cluster of this name: its rows make way
            state.forget_cluster(req.name)
        parts = [{"size": p.size, "count": p.count, "gpus_per_node": p.gpus_per_node} for p in req.parts]
        state.add_cluster(
            req.name, req.provider, req.region, req.size, req.total, image=req.image, ssh_user=prov.default_ssh_user,
            ttl_expires_at=ttl_expires, price_jpy_per_hour=req.price_jpy_per_hour,
            spec={"gpus_per_node": req.gpus_per_node, "spot": req.spot, "owner": tag_owner,
                  "installation": installation, "tax": req.tax,  # its price's basis: status says ¥/h on the estimate's
                  **({"parts": parts} if req.more else {})},
        )
    names = node_names(req.name, req.total)
    try:
        _, public_key = keys.cluster_login_key(state, req.name)
        host_keys = {n: keys.node_host_key(req.name, n) for n in names} if prov.injects_host_keys else {}
        for part, part_names in split_names(req):
            for n in part_names:
                state.add_node(req.name, n, gpus=part.gpus_per_node)
        made = []
        for part, part_names in split_names(req):  # a mixed fleet: one create per size, one cluster
            spec = NodeSpec(
                cluster=req.name, size=part.size, region=req.region, ssh_user=prov.default_ssh_user,
                ssh_public_key=public_key, host_keys=host_keys, image=image_id, ttl_s=req.ttl_s, spot=req.spot,
                self_stop=bool(req.idle_s),
                tags={**identity, TAG_CREATED: str(int(time.time()))},
                ssh_cidr=ssh_cidr, vcpus=part.vcpus,
            )
            progress(f"creating {part.count}x {part.size} in {req.provider}/{req.region}")
            for n in part_names:
                state.update_node(req.name, n, status="creating")
            with state.journaled("create-nodes", ",".join(part_names), req.name,
                                 f"{req.provider}:{part.size}@{req.region}"):
                prov.on_refusal = _refusal_noted(state, req.name, progress)
                try:
                    instances = prov.create(spec, part_names)
                finally:  # this cluster's: not a later create's on the same provider object
                    prov.on_refusal = None
            _record_instances(state, part, instances)
            made.append((part, instances))
        progress(f"waiting for {sum(len(i) for _, i in made)} machines to answer")
        with state.journaled("wait-ready", ",".join(names), req.name):
            for part, instances in made:
                ready = prov.wait_ready(req.region, [i.id for i in instances])
                _record_instances(state, part, ready, host_keys=host_keys, running=True)
        state.set_cluster_status(req.name, "ready")
    except Exception as exc:
        # A cloud error, or one of our own past the create (a full disk while recording what
        # was made): either way the machines are tagged and the create journaled.
        error = exc if isinstance(exc, GpuplanError) else GpuplanError(f"{type(exc).__name__}: {exc}")
        _after_failed_create(state, prov, req, error, progress, keep, identity)
        if error is exc:
            raise
        raise error from exc
    progress(f"cluster {req.name} ready")
    return state.cluster(req.name)


def _refusal_noted(state: State, cluster: str, progress: Progress) -> Callable[[ZoneRefusal], None]:
    """What create() does with a zone's refusal: a journal row (op zone-refused, target the zone),
    then its one line."""
    from gpuplan.fleet import refusals

    def noted(r: ZoneRefusal) -> None:
        entry = state.journal_intent("zone-refused", r.zone, cluster, refusals.journal_detail(r))
        state.journal_outcome(entry, False)
        refusals.remember(r)  # the region's last zone: the next estimate says so (issue 44)
        progress(refusals.render(r))

    return noted


def _after_failed_create(
    state: State, prov: Provider, req: ProvisionRequest, exc: GpuplanError, progress: Progress, keep: bool,
    identity: dict[str, str] | None = None,
) -> None:
    """After a failed create: keep what was made (`keep`), or remove it. The cloud is rolled
    back before anything is written, since the failure may be the state's own (a full disk):
    machines that bill must not wait on a state write."""
    if keep:
        try:
            state.set_cluster_status(req.name, "failed")
            made = sum(1 for r in reconcile(state, prov, state.cluster(req.name)) if r.kind == "instance")
            exc.args = (f"{exc} ({made} of {req.total} machines were created and kept; "
                        f"rerun the same provision to resume or `gpuplan teardown {req.name}` to remove them)",)
        except Exception as record_exc:  # noqa: BLE001 - whatever it was, the user's next step is the same
            exc.args = (f"{exc}; recording it also failed ({record_exc}): run `gpuplan teardown {req.name}` to remove "
                        "what was made",)
        return
    progress("create failed; removing what it made")
    try:
        made = _roll_back(state, prov, req.name, req.region, identity or {TAG_CLUSTER: req.name})
    except Exception as cloud_exc:  # noqa: BLE001
        exc.args = (f"{exc}; removing what was made also failed ({cloud_exc}): run `gpuplan teardown {req.name}` "
                    "to remove it",)
        return
    try:
        state.set_cluster_status(req.name, "failed")
        teardown(state, prov, req.name, progress=progress)  # finds nothing left; records that
        exc.args = (f"{exc} (nothing was left running: the {made} machines created were removed)",)
    except Exception as record_exc:  # noqa: BLE001
        exc.args = (f"{exc}; the {made} machines created were removed from {prov.name} first, but the state could "
                    f"not record it ({record_exc}): free some space, then run `gpuplan teardown {req.name}` to tidy "
                    "the state",)


def _roll_back(state: State, prov: Provider, cluster: str, region: str, identity: dict[str, str]) -> int:
    """Delete everything but images carrying the cluster's identity, machines first, straight
    from the cloud's own listing. Journaled where the state can still be written, deleted
    either way. Returns how many machines there were."""
    found = [r for r in prov.list(region, identity) if r.kind != "image"]
    machines = [r for r in found if r.kind == "instance"]
    for op, batch in (("delete-instances", machines), ("delete-resources", [r for r in found if r.kind != "instance"])):
        if not batch:
            continue
        try:
            entry = state.journal_intent(op, ",".join(r.id for r in batch)[:2000], cluster, f"{len(batch)} resources")
        except Exception:  # noqa: BLE001 - a full disk must not keep machines billing
            entry = None
        prov.delete(region, batch)
        if entry is not None:
            try:
                state.journal_outcome(entry, True)
            except Exception:  # noqa: BLE001
                pass
    return len(machines)


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
            own = inst.extra.get("host_key")
            injected = host_keys[inst.name].public_openssh if host_keys and inst.name in host_keys else None
            if address and (own or injected):
                state.pin_host_key(address, inst.ssh_port, own or injected, cluster=req.name, node=inst.name,
                                   origin="node" if own else "injected")
            state.ledger_start(req.name, inst.name, req.provider, req.size, req.price_jpy_per_hour or Decimal(0),
                               req.billing, req.tax)


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


def cluster_tags(cluster: ClusterRow) -> dict[str, str]:
    """The tags that find this cluster's resources: its name and, where recorded, its owner and
    installation (a cluster of the same name made by another installation is not ours)."""
    return tagging.identity({TAG_CLUSTER: cluster.name, TAG_OWNER: cluster.spec.get("owner") or "",
                             TAG_INSTALLATION: cluster.spec.get("installation") or ""})


def reconcile(state: State, prov: Provider, cluster: ClusterRow) -> list[Resource]:
    """Ask the provider what exists for this cluster and bring the node rows in line."""
    with state.journaled("list", cluster.name, cluster.name):
        found = prov.list(cluster.region, cluster_tags(cluster))
    instances = {r.name or r.tags.get(TAG_NODE, ""): r for r in found if r.kind == "instance"}
    for node in state.nodes(cluster.name):
        r = instances.get(node.name)
        if r is not None:
            state.update_node(cluster.name, node.name, provider_id=r.id)
        elif node.provider_id in prov.unreached:  # not asked: it still holds what it held
            continue
        elif node.status in ("intent", "creating", "running", "deleting"):
            state.update_node(cluster.name, node.name, status="failed" if node.status != "deleting" else "deleted")
            state.ledger_stop(cluster.name, node.name)
    return found


def settle_released(state: State) -> list[str]:
    """Clusters whose machines released themselves at a moment now past (owned hosts armed by a
    launch from its max_yen: launcher.backstop): the hosts did a teardown's part there (Ray and
    the items stopped, the login key and claim removed), this does the rest here: the ledger
    rows end at that moment, unfinished jobs end capped, the keys go, the cluster is gone.
    Called before what reads the ledger or the cluster (cost-report, status, teardown, launch
    --resume), so a client killed mid-batch leaves nothing billing in the figures either."""
    from gpuplan.run import items as run_items
    from gpuplan.store.state import parse_time

    t = now()
    settled = []
    for c in state.clusters():
        at = parse_time(c.spec.get("releases_itself_at")) if c.spec.get("releases_itself_at") else None
        if at is None or at > t:
            continue
        for node in state.nodes(c.name):
            state.ledger_stop(c.name, node.name, at=at)
            state.update_node(c.name, node.name, status="deleted")
        for job in state.jobs(c.name):
            if job.state not in run_items.JOB_STATES_OVER:
                state.close_job(job.id, "capped", at)
        state.unpin_cluster_host_keys(c.name)
        keys.remove_cluster_keys(state, c.name)
        state.set_cluster_status(c.name, "gone")
        state.release_commitments(cluster=c.name)  # its budget reservation ends with it
        settled.append(c.name)
    return settled


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
    settle_released(state)
    rows = [state.cluster(cluster)] if cluster else state.clusters()
    if cluster and rows[0] is None:
        raise NotFound(f"no cluster named {cluster!r}; `gpuplan status` lists them")
    out = []
    t = now()
    totals = state.ledger_totals(t, cluster)
    nodes = state.nodes_by_cluster() if cluster is None else {cluster: state.nodes(cluster)}
    for c in rows:
        seconds, yen = totals.get(c.name, (0, Decimal(0)))
        ttl_left = int((c.ttl_expires_at - t).total_seconds()) if c.ttl_expires_at else None
        out.append(ClusterStatus(c, nodes.get(c.name, []), int((t - c.created_at).total_seconds()), seconds, yen,
                                 ttl_left))
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
    """Delete everything the cluster owns, under its lock. Idempotent and resumable: it lists by
    tag every time, so a teardown cut off half way is finished by running it again. Once nothing
    is left, the cluster's key files go too."""
    _trust_pins(state, prov)
    with locks.cluster(cluster):
        if cluster in settle_released(state):
            progress(f"{cluster} released itself at its max_yen moment: nothing left to tear down")
            return TeardownReport(cluster)
        return _teardown(state, prov, cluster, include_images, progress)


def _teardown(state: State, prov: Provider, cluster: str, include_images: bool, progress: Progress) -> TeardownReport:
    row = state.cluster(cluster)
    if row is None:
        raise NotFound(f"no cluster named {cluster!r}; `gpuplan status` lists them")
    report = TeardownReport(cluster)
    from gpuplan.run.ray import engine

    not_stopped: dict[str, str] = {}  # node -> why Ray there could not be stopped (it was not reached)
    if state.jobs(cluster) or engine.was_started(state, cluster):
        # the run engine ran (or began to) here: owned machines outlive the teardown, its Ray must not
        progress(f"stopping Ray and its batches on {cluster}")
        stopped = engine.stop_all(state, cluster)
        for name, why in stopped.unreachable.items():
            progress(f"{name} could not be reached to stop Ray there: {why}")
        if stopped.left and prov.machines_outlive_teardown:  # released with Ray still on it, a host is claimed so
            raise engine.EngineError(f"Ray of {cluster} could not be stopped on {', '.join(stopped.left)}"
                                     f" ({'; '.join(f'{n}: {w}' for n, w in stopped.left.items())}); nothing was"
                                     f" released: stop it there, then `gpuplan teardown {cluster}` again")
        not_stopped = stopped.unreachable
    state.set_cluster_status(cluster, "tearing-down")
    from gpuplan.run import items as run_items

    for job in state.jobs(cluster):  # its engine is stopped: a batch that was running on it has ended
        if job.state not in run_items.JOB_STATES_OVER:
            state.close_job(job.id, "cancelled")
    found = reconcile(state, prov, row)
    # An owned host that is down (or could not be reached to stop Ray) keeps its claim: released
    # now, the next claim could find this cluster's Ray on it when it comes back. The rest go.
    held = _held_back(state, prov, cluster, not_stopped) if prov.machines_outlive_teardown else {}
    found = [r for r in found if r.name not in held]
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
        left = [r for r in prov.list(row.region, cluster_tags(row))
                if (r.kind != "image" or include_images) and r.name not in held]
        if left:
            raise GpuplanError(
                f"{len(left)} resource(s) of {cluster} still exist after delete "
                f"({', '.join(r.kind + ' ' + r.id for r in left[:3])}); "
                f"run `gpuplan teardown {cluster}` again"
            )
    for node in state.nodes(cluster):
        if node.name in held:  # still claimed; the next teardown, once the host answers, releases it
            state.update_node(cluster, node.name, status="lost")
            continue
        state.update_node(cluster, node.name, status="deleted")
        state.ledger_stop(cluster, node.name)
    if held:
        raise HostsHeld(
            f"{cluster}: {len(report.deleted)} resource(s) released or deleted, but "
            + "; ".join(f"{n} was not reached ({why})" for n, why in held.items())
            + f": {'its claim stays' if len(held) == 1 else 'their claims stay'} (Ray of {cluster} may still run"
            f" there); run `gpuplan teardown {cluster}` again once {'it is' if len(held) == 1 else 'they are'} back")
    state.unpin_cluster_host_keys(cluster)
    keys.remove_cluster_keys(state, cluster)
    state.set_cluster_status(cluster, "gone")
    state.release_commitments(cluster=cluster)  # its budget reservation ends with it
    return report


class HostsHeld(ProviderError):
    """A teardown did all it could, but owned hosts that did not answer keep their claims."""


def _held_back(state: State, prov: Provider, cluster: str, not_stopped: Mapping[str, str]) -> dict[str, str]:
    """The cluster's nodes whose hosts keep their claims through this teardown, with why: the
    listing could not ask them, or Ray there could not be reached to be stopped."""
    held = {}
    for n in state.nodes(cluster):
        if n.provider_id and n.provider_id in prov.unreached:
            held[n.name] = prov.unreached[n.provider_id]
        elif n.name in not_stopped:
            held[n.name] = not_stopped[n.name]
    return held


GRACE_S = 30 * 60  # a sweep leaves resources younger than this alone (a provision may be making them)


@dataclass(frozen=True)
class SweepPlan:
    """What a sweep found: strays to delete, and strays it leaves alone, with the reason."""

    strays: list[Resource]
    spared: list[tuple[Resource, str]]
    unreachable: list[str] = field(default_factory=list)  # what could not be listed, with why


@dataclass(frozen=True)
class SweepResult:
    deleted: list[Resource]
    spared: list[tuple[Resource, str]]  # candidates re-checked under the lock and left alone, with why


def sweep_owners(state: State, legacy: bool = False) -> list[str]:
    """Owner tag values a sweep looks for: this installation's, and with `legacy` also the
    user-host value older gpuplan versions wrote (shared by every installation of the user)."""
    mine = owner(state)
    return [mine] + ([config.legacy_owner()] if legacy and config.legacy_owner() != mine else [])


def sweep_find(
    state: State, prov: Provider, regions: Sequence[str], owners: Sequence[str], include_images: bool = False,
    grace_s: int = GRACE_S, take: Sequence[str] = (),
) -> SweepPlan:
    """Resources tagged with one of `owners` that no live cluster (or image) in the state knows.
    A cluster's resources younger than `grace_s` (by their gpuplan-created tag) are spared as a
    group: the youngest decides, so half of a cluster still being made is never taken.
    Resources another installation made (a shared owner) are spared unless their cluster is
    named in `take`."""
    _trust_pins(state, prov)
    mine = state.installation_id()
    known = {c.name for c in state.clusters()}
    known_images = {i.provider_id for i in state.images() if i.provider == prov.name}
    found: dict[str, Resource] = {}
    unreached: list[str] = []
    for region in regions:
        for tag in owners:
            with state.journaled("sweep-list", f"{prov.name}/{region}", None, tag):
                for r in prov.list(region, {TAG_OWNER: tag}):
                    found.setdefault(r.id, r)
            unreached = [u for u in prov.unreached.values() if u not in unreached] + unreached
    groups: dict[str, list[Resource]] = {}
    for r in found.values():
        if (r.kind == "image" and include_images and r.id not in known_images) or (
                r.kind != "image" and r.tags.get(TAG_CLUSTER) not in known):
            groups.setdefault(_sweep_group(r), []).append(r)
    strays: list[Resource] = []
    spared: list[tuple[Resource, str]] = []
    t = int(time.time())
    for group, members in groups.items():
        other = next((r.tags[TAG_INSTALLATION] for r in members if r.tags.get(TAG_INSTALLATION, mine) != mine), None)
        name = group.partition(":")[2]
        if other and name not in take:
            why = (f"made by another installation ({other}) under the shared owner; "
                   f"`gpuplan teardown --sweep --force {name}` takes it")
            spared += [(r, why) for r in members]
            continue
        stamps = [c for c in map(_created, members) if c is not None]
        age = t - max(stamps) if stamps else None
        if age is not None and age < grace_s:
            why = f"made {age // 60} min ago, within the {grace_s // 60}-min grace period (--force takes it)"
            spared += [(r, why) for r in members]
        else:
            strays += members
    return SweepPlan(strays, spared, unreached)


def sweep_delete(state: State, prov: Provider, strays: Sequence[Resource], progress: Progress = _quiet) -> SweepResult:
    """Delete strays from sweep_find, one cluster (or image) at a time, each re-checked right
    before its delete under that cluster's lock: a cluster a command holds, or one the state
    has learnt of since the listing, is spared. One sweep at a time per state."""
    deleted: list[Resource] = []
    spared: list[tuple[Resource, str]] = []
    groups: dict[tuple[str, str], list[Resource]] = {}
    for r in strays:
        groups.setdefault((r.region, _sweep_group(r)), []).append(r)
    _trust_pins(state, prov)
    with locks.sweep():
        for (region, group), batch in groups.items():
            kind, _, name = group.partition(":")
            lock = locks.cluster(name, wait_s=0) if kind == "cluster" else locks.image(name, wait_s=0)
            try:
                with lock:
                    why = _still_a_stray(state, prov, kind, name, batch)
                    if why:
                        spared += [(r, why) for r in batch]
                        continue
                    stop_engine = getattr(prov, "stop_engine", None)  # owned hosts outlive the sweep: their Ray must not
                    if kind == "cluster" and stop_engine is not None:
                        progress(f"stopping the run engine of {name} on its hosts")
                        stop_engine(batch)
                    progress(f"deleting {len(batch)} stray resource(s) of {group} in {prov.name}/{region}")
                    with state.journaled("sweep-delete", ",".join(r.id for r in batch)[:2000], None,
                                         f"{prov.name}/{region} {group}"):
                        prov.delete(region, batch)
                    deleted += batch
            except Busy as exc:
                spared += [(r, str(exc)) for r in batch]
    return SweepResult(deleted, spared)


def _created(r: Resource) -> int | None:
    try:
        return int(r.tags[TAG_CREATED])
    except (KeyError, ValueError):
        return None  # made before gpuplan stamped creation times: old


def _sweep_group(r: Resource) -> str:
    """"cluster:<name>" or "image:<name>": what a resource belongs to, and whose lock guards it."""
    if r.tags.get(TAG_CLUSTER):
        return f"cluster:{r.tags[TAG_CLUSTER]}"
    return f"image:{r.tags.get(TAG_IMAGE) or r.name or r.id}"


def _still_a_stray(state: State, prov: Provider, kind: str, name: str, batch: Sequence[Resource]) -> str:
    """Why this group is no longer a stray ("" when it still is), from a fresh read of the state."""
    if kind == "cluster":
        row = state.cluster(name)
        if row is not None and row.status != "gone":
            return f"the state now knows cluster {name} ({row.status})"
        return ""
    known = {i.provider_id for i in state.images() if i.provider == prov.name}
    return f"the state now knows image {name}" if any(r.id in known for r in batch) else ""


def sweep_regions(state: State, prov: Provider, extra: Sequence[str] = ()) -> list[str]:
    """Regions worth sweeping: the ones named, the ones the state has used, the provider's defaults."""
    seen = [c.region for c in state.clusters(include_gone=True) if c.provider == prov.name]
    seen += [i.region for i in state.images(include_deleted=True) if i.provider == prov.name]
    ordered: list[str] = []
    for r in [*extra, *seen, *prov.default_regions()]:
        if r and r not in ordered:
            ordered.append(r)
    return ordered
