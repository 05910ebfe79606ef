"""The provider contract and the registry that finds provider plugins.

A provider drives one cloud (or a set of owned hosts). It never prints, never touches the
state store and never imports anything of gpuplan but this module, gpuplan.types and
gpuplan.errors. Its SDK is imported inside its own module, which the registry imports only
when the provider is asked for, so the core never loads a cloud SDK at start-up.

Everything a provider creates carries the tags in `NodeSpec.tags` (at least
`gpuplan-cluster`, `gpuplan-owner` and `gpuplan-created`) so that `list()` can find it even
when the state store has lost track of it, and a sweep can tell a young resource from an old one.

No private key goes into anything the cloud API or the machine's metadata service can return
later. A provider either reads the machine's own host key from an authenticated channel (AWS:
the console output, where cloud-init prints it) and reports it as `Instance.extra["host_key"]`,
or injects the one-time key in `NodeSpec.host_keys` through a channel the API does not return
(Azure customData, Sakura boot variables); gpuplan rotates such a key at the first login.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from gpuplan.errors import UsageError

TAG_CLUSTER = "gpuplan-cluster"
TAG_OWNER = "gpuplan-owner"
TAG_NODE = "gpuplan-node"
TAG_CREATED = "gpuplan-created"  # Unix seconds when the provision that made the resource started
TAG_IMAGE = "gpuplan-image"  # on captured images (and their snapshots) instead of TAG_CLUSTER


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
    host_keys: Mapping[str, "HostKey"] = field(default_factory=dict)
    image: str | None = None  # provider image id; None = the provider's default Ubuntu LTS
    ttl_s: int | None = None  # the cloud itself stops/releases the machine after this long
    spot: bool = False
    tags: Mapping[str, str] = field(default_factory=dict)
    disk_gib: int = 128
    # Where SSH may come from ("203.0.113.5/32"); only "0.0.0.0/0" opens it to everyone.
    # None: the provider's own config (ssh_cidr / ssh_source), else it refuses to open SSH.
    ssh_cidr: str | None = None


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

    kind: str  # "instance", "disk", "public-ip", "nic", "security-group", "key-pair", "image", "snapshot", "resource-group", "archive", ...
    id: str
    region: str
    tags: Mapping[str, str] = field(default_factory=dict)
    name: str = ""


@dataclass(frozen=True)
class Image:
    id: str
    name: str
    region: str


@dataclass(frozen=True)
class QuotaUsage:
    """One quota tier that applies to a size: the exact name the provider uses, and how to raise it."""

    name: str  # e.g. "standardNCFamily" or "cores" (Azure), "L-DB2E81BA" (AWS)
    description: str  # "Standard NC Family vCPUs in westus2"
    limit: int
    used: int
    unit: str = "vCPUs"
    how_to_raise: str = ""

    @property
    def free(self) -> int:
        return self.limit - self.used


class Provider(ABC):
    """The contract every provider keeps. Constructors take config plus injectable transports
    and never touch the network."""

    name: str = ""
    default_ssh_user: str = "ubuntu"
    # Whether create() puts NodeSpec.host_keys on the machines (one-time keys, rotated at the
    # first login); False where the machine's own key comes back in Instance.extra["host_key"].
    injects_host_keys: bool = True
    # Whether create() opens SSH in a firewall of its own (then NodeSpec.ssh_cidr matters).
    opens_ssh_ingress: bool = False
    # Run over SSH on a builder just before capture_image (Azure: deprovision the agent's user).
    capture_prep_command: str | None = None

    @abstractmethod
    def check_credentials(self) -> None:
        """Raise AuthMissing naming the exact variable/file when credentials are absent.
        No network call, no side effect."""

    @abstractmethod
    def quota(self, region: str, size: str) -> list[QuotaUsage]:
        """Every quota tier that a new machine of `size` in `region` counts against."""

    @abstractmethod
    def vcpus(self, region: str, size: str) -> int:
        """vCPUs of one machine of `size` (what quota is counted in)."""

    @abstractmethod
    def create(self, spec: NodeSpec, names: Sequence[str]) -> list[Instance]:
        """Create one machine per name, concurrently, plus any shared per-cluster resources.

        Idempotent: a name that already exists (found by tag) is returned, not created again.
        Raises QuotaExceeded, CapacityUnavailable, RetiredType, AuthMissing or ProviderError.
        On a partial failure the machines that were created stay tagged for teardown.
        """

    @abstractmethod
    def wait_ready(self, region: str, ids: Sequence[str], timeout_s: float = 900) -> list[Instance]:
        """Block until every id is running with an address; return them."""

    @abstractmethod
    def capture_image(self, region: str, instance_id: str, image_name: str, tags: Mapping[str, str]) -> Image:
        """Turn a set-up machine into a reusable image. On Azure the machine is generalized
        and can no longer be used itself."""

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


def missing_extra(provider: str, exc: ImportError) -> UsageError:
    """The one line for a provider whose SDK is not installed: which pip extra brings it."""
    return UsageError(
        f"provider {provider!r} needs an extra package ({exc.name or exc}); install it with: pip install 'gpuplan[{provider}]'"
    )
