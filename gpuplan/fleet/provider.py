"""The provider contract, the steps every provider shares, and the registry that finds plugins.

A provider drives one cloud (or a set of owned hosts). It never prints, never touches the
state store and never imports anything of gpuplan but this module, gpuplan.fleet.tags,
gpuplan.planning.types and gpuplan.errors (baremetal also gpuplan.hosts.remote). Its SDK is imported inside
its own module, which the registry imports only when the provider is asked for, so the core
never loads a cloud SDK at start-up.

`Provider` is a base class in the Libcloud manner: what every cloud shares is written once
here (the feature check at request time, the quota check, creating only the shortfall found
by tag, waiting until ready, image tags), and a provider implements only its cloud's
primitives (machines by tag, launch a batch, describe, list by tag, delete, capture).

Everything a provider creates carries the tags in `NodeSpec.tags` (see gpuplan.fleet.tags) so that
`list()` can find it even when the state store has lost track of it.

No private key goes into anything the cloud API or the machine's metadata service can return
later. A provider either reads the machine's own host key from an authenticated channel (AWS:
the console output, where cloud-init prints it) and reports it as `Instance.extra["host_key"]`,
or injects the one-time key in `NodeSpec.host_keys` through a channel the API does not return
(Azure customData, Sakura boot variables); gpuplan rotates such a key at the first login.
"""

from __future__ import annotations

import enum
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace

from gpuplan.errors import CapacityUnavailable, ProviderError, QuotaExceeded, UsageError
from gpuplan.fleet import tags as tagging
from gpuplan.fleet.tags import TAG_CLUSTER, TAG_CREATED, TAG_IMAGE, TAG_NODE, TAG_OWNER

__all__ = ["TAG_CLUSTER", "TAG_CREATED", "TAG_IMAGE", "TAG_NODE", "TAG_OWNER", "Feature", "HostKey", "Image",
           "Instance", "NEW_LIMIT", "NodeSpec", "Provider", "QuotaUsage", "Resource", "ZoneRefusal", "available",
           "get", "missing_extra", "override"]


@dataclass(frozen=True)
class NodeSpec:
    """What to create: N machines of one size, for one cluster, in one region."""

    cluster: str
    size: str  # the provider's own size name, e.g. "Standard_NC6", "g4dn.xlarge"
    region: str
    ssh_user: str
    ssh_public_key: str  # OpenSSH "ssh-ed25519 AAAA..." line installed for ssh_user
    # Host keys generated locally and injected at creation (cloud-init ssh_keys etc.) so
    # the first SSH connection is already pinned. Keyed by node name.
    host_keys: Mapping[str, HostKey] = field(default_factory=dict)
    image: str | None = None  # provider image id; None = the provider's default Ubuntu LTS
    # the cloud itself ends the machine after this long (AWS terminates, GCP deletes, Azure deallocates, Sakura stops)
    ttl_s: int | None = None
    self_stop: bool = False  # --idle: a shutdown from inside the machine must end its billing
    spot: bool = False
    tags: Mapping[str, str] = field(default_factory=dict)
    disk_gib: int = 128
    # Where SSH may come from ("203.0.113.5/32"); only "0.0.0.0/0" opens it to everyone.
    # None: the provider's own config (ssh_cidr / ssh_source), else it refuses to open SSH.
    ssh_cidr: str | None = None
    # vCPUs of one machine as the catalog row states them; counted against quota where the
    # cloud's own API does not describe the size. None: only the cloud's answer counts.
    vcpus: int | None = None
    # The zone to launch in (set by create() as it tries the region's zones in turn); None: the
    # provider's own choice in the region.
    zone: str | None = None


@dataclass(frozen=True)
class ZoneRefusal:
    """One zone's "no capacity" as create() met it, as a value (the CLI words it, the journal
    keeps it): how many of the machines asked for there it granted before it refused, and the
    zone asked next (None: none left in the region)."""

    provider: str
    region: str
    zone: str
    size: str
    asked: int
    granted: int
    code: str  # the cloud's own word: InsufficientInstanceCapacity, ZonalAllocationFailed, ...
    next_zone: str | None


@dataclass(frozen=True)
class HostKey:
    """An SSH host key pair in OpenSSH formats."""

    private_openssh: str  # "-----BEGIN OPENSSH PRIVATE KEY-----..."
    public_openssh: str  # "ssh-ed25519 AAAA..."


@dataclass(frozen=True)
class Instance:
    """A machine as the provider reports it."""

    id: str  # provider resource id
    name: str  # gpuplan's node name, e.g. "demo-0"
    status: str  # "pending" | "running" | "stopped" | "terminated"
    public_ip: str | None = None
    private_ip: str | None = None
    ssh_port: int = 22
    extra: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Resource:
    """Anything a provider created that may cost money or block a teardown."""

    # "instance", "disk", "public-ip", "nic", "security-group", "key-pair", "image", "snapshot", "resource-group", ...
    kind: str
    id: str
    region: str
    tags: Mapping[str, str] = field(default_factory=dict)
    name: str = ""


@dataclass(frozen=True)
class Image:
    id: str
    name: str
    region: str


NEW_LIMIT = "<new limit>"  # in QuotaUsage.how_to_raise: replaced by the limit a refused request needs


@dataclass(frozen=True)
class QuotaUsage:
    """One quota tier that applies to a size: the exact name the provider uses, and how to raise
    it (a command may hold NEW_LIMIT where the limit to ask for goes)."""

    name: str  # e.g. "standardNCFamily" or "cores" (Azure), "L-DB2E81BA" (AWS)
    description: str  # "Standard NC Family vCPUs in westus2"
    limit: int
    used: int
    unit: str = "vCPUs"  # "vCPUs", or what one machine counts as one of ("servers", "hosts")
    how_to_raise: str = ""

    @property
    def free(self) -> int:
        return self.limit - self.used

    def wanted(self, machines: int, vcpus_each: int) -> int:
        """What `machines` new machines take of this tier, in its own unit: their vCPUs for a vCPU
        tier, else one each (a server, a host; a GPU tier of 1-GPU machines counts their GPUs, one of
        g-GPU machines is expressed in machines of g GPUs). Issue 42: GCP's NVIDIA_L4_GPUS tier said
        "8 GPUs needed" for two 1-GPU machines of 4 vCPUs."""
        return machines * vcpus_each if self.unit == "vCPUs" else machines


class Feature(enum.Enum):
    """What a request may ask for that not every provider offers (as SkyPilot's
    CloudImplementationFeatures): a provider names the ones it lacks in `unsupported`."""

    SPOT = "spot machines (--spot)"
    TTL = "a TTL the machines enforce themselves (--ttl)"
    IMAGE_CAPTURE = "capturing an image (gpuplan image build)"


class Provider(ABC):
    """The contract every provider keeps. Constructors take config plus injectable transports
    and never touch the network.

    Concrete here: `check_features`, `check_quota`, `create` (only the shortfall found by tag),
    `wait_ready` and `capture_image`. Abstract: the cloud primitives `machines`, `launch`,
    `describe`, `capture`, `list`, `delete`, plus `check_credentials` and `quota`.
    """

    name: str = ""
    default_ssh_user: str = "ubuntu"
    # Features this provider lacks, each with the one line that says why and what to do.
    unsupported: Mapping[Feature, str] = {}
    # Whether create() puts NodeSpec.host_keys on the machines (one-time keys, rotated at the
    # first login); False where the machine's own key comes back in Instance.extra["host_key"].
    injects_host_keys: bool = True
    # Whether create() opens SSH in a firewall of its own (then NodeSpec.ssh_cidr matters).
    opens_ssh_ingress: bool = False
    # Whether teardown releases the machines instead of deleting them (owned hosts, 高火力 PHY):
    # whatever ran on them must be stopped first, or the next claim finds it still there.
    machines_outlive_teardown: bool = False
    # The machines the last list() could not ask (owned hosts that are down), id -> why in words.
    # The listing goes on without them; a teardown keeps what they hold, a sweep names them.
    unreached: Mapping[str, str] = {}
    # The SDK modules the provider imports when it works (lazily): a missing one is named, with
    # the pip extra that brings it, before anything else is checked (`missing_sdk`).
    sdk_modules: tuple[str, ...] = ()
    # Run over SSH on a builder just before capture_image (Azure: deprovision the agent's user).
    capture_prep_command: str | None = None
    # How wait_ready paces itself; providers set these from their config and tests inject them.
    poll_s: float = 5.0
    sleep: Callable[[float], None] = staticmethod(time.sleep)
    monotonic: Callable[[], float] = staticmethod(time.monotonic)
    # Host keys gpuplan has pinned, "address:port" -> "ssh-ed25519 AAAA...": the lifecycle hands
    # them over (use_known_hosts) before any call, since a provider never reads the state itself.
    known_hosts: Mapping[str, str] = {}
    # Where create() reports each zone's refusal when no `on_refusal` is passed to it: the
    # lifecycle hands over its own (journal row and line) before the create, as with known_hosts.
    on_refusal: Callable[[ZoneRefusal], None] | None = None

    # --- the steps every provider shares -------------------------------------------------

    def missing_sdk(self) -> UsageError | None:
        """The one line for an SDK module this provider needs that is not installed (None: all
        there). Looked up without importing anything."""
        from importlib.util import find_spec

        for module in self.sdk_modules:
            try:
                found = find_spec(module) is not None
            except ModuleNotFoundError:  # its parent package is missing
                found = False
            if not found:
                return missing_extra(self.name, ModuleNotFoundError(name=module))
        return None

    def use_known_hosts(self, pinned: Mapping[str, str]) -> None:
        """Pinned host keys (from the state) for providers that reach machines over SSH themselves."""
        self.known_hosts = dict(pinned)

    def check_features(self, spot: bool = False, ttl_s: int | None = None, capture: bool = False) -> None:
        """Refuse, before anything is made, a request for a feature this provider lacks."""
        asked = [f for f, on in ((Feature.SPOT, spot), (Feature.TTL, bool(ttl_s)), (Feature.IMAGE_CAPTURE, capture)) if on]
        for feature in asked:
            if feature in self.unsupported:
                raise UsageError(f"{self.name} does not offer {feature.value}: {self.unsupported[feature]}")

    def check_quota(self, region: str, size: str, count: int, spot: bool = False,
                    vcpus: int | None = None) -> tuple[int, list[QuotaUsage]]:
        """The one quota rule: `count` new machines (only the shortfall, never what exists)
        must fit in every tier that applies (Spot tiers for spot machines where the cloud has
        them). Returns what they need, in the tiers' unit, and the tiers; raises QuotaExceeded
        naming the tier and how to raise it."""
        tiers = self.quota(region, size, spot=spot)
        per = 1
        if any(t.unit == "vCPUs" for t in tiers):
            per = self.vcpus(region, size) or vcpus or 0
            if not per:
                raise UsageError(f"{self.name} size {size!r} is unknown in {region}; check the name or pick another region")
        need = per * count
        for tier in tiers:
            want = tier.wanted(count, per)
            if tier.free < want:
                how = f"; {tier.how_to_raise.replace(NEW_LIMIT, str(tier.used + want))}" if tier.how_to_raise else ""
                raise QuotaExceeded(
                    f"{count}x {size} needs {want} {tier.unit} of quota {tier.name!r} ({tier.description}) "
                    f"in {region}, but only {tier.free} are free (limit {tier.limit}, used {tier.used}){how}"
                )
        return (need if any(t.unit == "vCPUs" for t in tiers) else count), tiers

    def create(self, spec: NodeSpec, names: Sequence[str],
               on_refusal: Callable[[ZoneRefusal], None] | None = None) -> list[Instance]:
        """Make sure one machine per name exists, plus any shared per-cluster resources.

        Idempotent: a name already found by tag is returned, not created again; only the
        shortfall is checked against quota and launched. Zones first: where the provider names
        the region's zones (`zones`), a zone that has no capacity is reported to `on_refusal`
        and the machines it did not grant are asked of the next zone; what it granted stays
        (a partial grant is kept). A quota refusal is not retried in another zone (a regional
        quota is the same there). Raises UsageError for a feature the provider lacks,
        QuotaExceeded, CapacityUnavailable (every zone refused; its `refusals` say how),
        AuthMissing or ProviderError. On a partial failure the machines that were made stay
        tagged for teardown.
        """
        self.check_features(spot=spec.spot, ttl_s=spec.ttl_s)
        on_refusal = on_refusal or self.on_refusal
        match = tagging.identity(spec.tags)
        have = {n: i for n, i in self.machines(spec.region, match).items() if n in names}
        missing = [n for n in names if n not in have]
        if missing:  # what exists already counts in the quota's `used`
            self.check_quota(spec.region, spec.size, len(missing), spot=spec.spot, vcpus=spec.vcpus)

        def todo() -> list[str]:
            return [n for n in names if n not in have or self.unfinished(have[n])]

        if not todo():
            return [have[n] for n in names if n in have]
        zones: list[str | None] = [spec.zone] if spec.zone else list(self.zones(spec.region, spec.size)) or [None]
        refused: list[ZoneRefusal] = []
        for i, zone in enumerate(zones):
            asked = todo()
            try:
                have.update((inst.name, inst) for inst in self.launch(replace(spec, zone=zone), asked))
                break
            except CapacityUnavailable as exc:
                if zone is None:  # the provider places machines itself: nothing to try next
                    raise
                have = {n: m for n, m in self.machines(spec.region, match).items() if n in names}
                left = todo()
                nxt = zones[i + 1] if i + 1 < len(zones) else None
                refusal = ZoneRefusal(self.name, spec.region, zone, spec.size, len(asked), len(asked) - len(left),
                                      exc.code, nxt if left else None)
                refused.append(refusal)
                if on_refusal is not None:
                    on_refusal(refusal)
                if not left:
                    break
                if nxt is None:
                    tried = ", ".join(r.zone for r in refused)
                    got = sum(r.granted for r in refused)
                    kept = f"; {got} of {len(names)} machines were granted and are kept" if got else ""
                    raise CapacityUnavailable(
                        f"{exc} (every zone of {spec.region} refused: {tried}{kept})", code=exc.code,
                        refusals=tuple(refused)) from exc
        return [have[n] for n in names if n in have]

    def zones(self, region: str, size: str) -> list[str]:
        """The zones of `region` that offer `size`, in the order create() tries them (each passed
        to launch as NodeSpec.zone). [] where the provider places machines itself or the user
        pinned one (a subnet, a zone): then create() asks once."""
        return []

    def wait_ready(self, region: str, ids: Sequence[str], timeout_s: float = 900) -> list[Instance]:
        """Block until every id is ready (`is_ready`: running with an address); return them in
        the order of `ids`. `describe` raises for a machine that will never be ready."""
        deadline = self.monotonic() + timeout_s
        ready: dict[str, Instance] = {}
        while True:
            waiting = [i for i in dict.fromkeys(ids) if i not in ready]
            ready.update((inst.id, inst) for inst in self.describe(region, waiting) if self.is_ready(inst))
            if len(ready) == len(set(ids)):
                return [ready[i] for i in ids]
            if self.monotonic() >= deadline:
                late = ", ".join(i for i in ids if i not in ready)
                raise ProviderError(f"{self.name}: machine(s) {late} not ready after {timeout_s:.0f}s"
                                    f"{self.not_ready_hint}; retry, or tear the cluster down")
            self.sleep(self.poll_s)

    not_ready_hint = ""  # said after "not ready after N s" (e.g. where a missing host key comes from)

    def is_ready(self, inst: Instance) -> bool:
        return inst.status == "running" and bool(inst.public_ip or inst.private_ip)

    def capture_image(self, region: str, instance_id: str, image_name: str, tags: Mapping[str, str]) -> Image:
        """Turn a set-up machine into a reusable image tagged gpuplan-image (never with a
        cluster or node tag, so a cluster's teardown keeps it). Idempotent by name. On Azure the
        machine is generalized and can no longer be used itself."""
        self.check_features(capture=True)
        return self.capture(region, instance_id, image_name, tagging.for_image(tags, image_name))

    # --- the cloud primitives ------------------------------------------------------------

    @abstractmethod
    def check_credentials(self) -> None:
        """Raise AuthMissing naming the exact variable/file when credentials are absent.
        No network call, no side effect."""

    def verify_credentials(self, region: str) -> None:
        """One authenticated, read-only call (`gpuplan check`): AuthMissing when the cloud
        refuses the credentials, ProviderError saying why when it cannot be reached (DNS,
        refused, timed out). Providers without remote credentials leave it as it is."""
        return None

    @abstractmethod
    def quota(self, region: str, size: str, spot: bool = False) -> list[QuotaUsage]:
        """Every quota tier that a new machine of `size` in `region` counts against (the
        Spot tiers when `spot`)."""

    def vcpus(self, region: str, size: str) -> int | None:
        """vCPUs of one machine of `size` as the cloud describes it; None where it does not
        (then NodeSpec.vcpus counts). Only providers with vCPU quota tiers need it."""
        return None

    @abstractmethod
    def machines(self, region: str, match: Mapping[str, str]) -> dict[str, Instance]:
        """The cluster's machines (not terminated) carrying every tag of `match` (its identity:
        cluster, owner, installation; see tags.identity), keyed by node name. A machine with the
        cluster's name but another owner or installation is not the cluster's."""

    @abstractmethod
    def launch(self, spec: NodeSpec, names: Sequence[str]) -> list[Instance]:
        """Make one machine per name and the cluster's shared resources, concurrently,
        everything tagged from birth; a name whose machine exists but is `unfinished` is
        finished instead. On failures the first error is raised after the others finish; what
        was made stays tagged."""

    def unfinished(self, inst: Instance) -> bool:
        """Whether a machine found by tag was left half-made by an earlier run (launch finishes it)."""
        return False

    @abstractmethod
    def describe(self, region: str, ids: Sequence[str]) -> list[Instance]:
        """The current state of these machines (an id the cloud does not know is left out).
        Raises ProviderError for one that will never become ready (terminated, failed)."""

    def capture(self, region: str, instance_id: str, image_name: str, tags: Mapping[str, str]) -> Image:
        """The cloud's image capture; `tags` are already the image's (see capture_image). Only
        a provider that lists Feature.IMAGE_CAPTURE in `unsupported` may leave it out."""
        raise NotImplementedError(f"{type(self).__name__} offers image capture but does not implement capture()")

    @abstractmethod
    def list(self, region: str, tags: Mapping[str, str]) -> list[Resource]:
        """Every resource carrying all of `tags`, of every kind, including images."""

    @abstractmethod
    def delete(self, region: str, resources: Sequence[Resource]) -> None:
        """Delete these resources, in a safe order. Idempotent: not found counts as deleted."""

    def default_regions(self) -> list[str]:
        """Regions a tag sweep looks in when the user names none."""
        return []


ProviderFactory = Callable[..., Provider]

_overrides: dict[str, ProviderFactory] = {}


def override(name: str, factory: ProviderFactory | None) -> None:
    """Replace a provider's factory (tests inject fake transports this way); None restores it."""
    if factory is None:
        _overrides.pop(name, None)
    else:
        _overrides[name] = factory


def available() -> list[str]:
    from importlib.metadata import entry_points

    names = {ep.name for ep in entry_points(group="gpuplan.providers")}
    return sorted(names | set(_overrides))


def get(name: str, config: Mapping[str, str] | None = None) -> Provider:
    """The provider plugin called `name`, found through the entry-point group gpuplan.providers."""
    if name in _overrides:
        return _overrides[name](config or {})
    from importlib.metadata import entry_points

    matches = [ep for ep in entry_points(group="gpuplan.providers") if ep.name == name]
    if not matches:
        raise UsageError(f"unknown provider {name!r}; known providers: {', '.join(available())}")
    try:
        cls = matches[0].load()
    except ImportError as exc:
        raise missing_extra(name, exc) from exc
    return cls(config or {})


class MissingExtra(UsageError):
    """A provider's SDK is not installed; the line names the pip extra that brings it."""


def missing_extra(provider: str, exc: ImportError) -> UsageError:
    """The one line for a provider whose SDK is not installed: which pip extra brings it."""
    return MissingExtra(
        f"provider {provider!r} needs an extra package ({exc.name or exc}); install it with: pip install 'gpuplan[{provider}]'"
    )


def console_host_key(output: str) -> str | None:
    """The ed25519 key line in the last host-key block cloud-init printed to the console (AWS's
    console output, GCE's serial port): the machine's own host key, to pin."""
    blocks = output.split("-----BEGIN SSH HOST KEY KEYS-----")
    if len(blocks) < 2:
        return None
    for line in blocks[-1].split("-----END SSH HOST KEY KEYS-----")[0].splitlines():
        words = line.split()
        if "ssh-ed25519" in words[:-1]:
            i = words.index("ssh-ed25519")
            return f"{words[i]} {words[i + 1]}"
    return None


def cloud_config(doc: dict) -> str:
    """A cloud-init `#cloud-config` document: multi-line strings (scripts, keys) as YAML
    literal blocks, so that what lands on the machine is byte for byte what was written."""
    import yaml

    class Dumper(yaml.SafeDumper):
        pass

    Dumper.add_representer(str, lambda d, s: d.represent_scalar(
        "tag:yaml.org,2002:str", s, style="|" if "\n" in s else None))
    return "#cloud-config\n" + yaml.dump(doc, Dumper=Dumper, sort_keys=False)
