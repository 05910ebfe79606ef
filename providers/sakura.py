"""Sakura Internet 高火力 VRT (Koukaryoku GPU plans of さくらのクラウド) over its REST API.

No maintained Python client exists, so this is a thin `requests` client over the paths that
sacloud/iaas-api-go calls (`zz_api_ops.go`, `zz_envelopes.go`):

- base `https://secure.sakura.ad.jp/cloud/zone/{zone}/api/cloud/1.1/`; the part before
  `/{zone}` can be replaced with env SAKURACLOUD_API_ROOT_URL (the usacloud/terraform variable);
- HTTP Basic auth `token:secret` from SAKURACLOUD_ACCESS_TOKEN / SAKURACLOUD_ACCESS_TOKEN_SECRET,
  else from the usacloud profile `~/.usacloud/<profile>/config.json`;
- bodies wrapped in an envelope keyed by the resource (`{"Server": {...}}`), GET parameters sent
  as JSON in the query string (`server?{"Filter":{"Tags":[...]}}`), 423/503 retried with backoff.

GPU plans (高火力 VRT) are sold in is1a only (the VRT manual; the price API also lists an H100
class in is1b). A node is a server plus one disk copied from an Ubuntu archive; the disk and
server carry the same tags, written as strings "gpuplan-cluster=<c>", "gpuplan-owner=<o>",
"gpuplan-installation=<i>", "gpuplan-node=<n>", and servers are found by all of cluster, owner and
installation; server and disk names carry the installation (`demo-0-<i>`), as two homes' `demo-0`
may share an account. Captured images are archives.

Network (issue 22). Every server's first NIC sits on the shared segment behind the cluster's
packet filter, which admits SSH only from the caller (NodeSpec.ssh_cidr, else config ssh_cidr),
replies to the server's own connections and ICMP, and drops the rest: Sakura filters are
stateless, so replies are admitted by their ephemeral destination ports. A packet filter has no
tags: its Description carries them ("gpuplan gpuplan-cluster=<c> ..."). A cluster of more than
one node also gets a switch (a private LAN, tagged); each server's second NIC is on it at
192.168.100.<11 + node number>/24 (configured by cloud-init, recorded as the NIC's
UserIPAddress), reported as Instance.private_ip, so torchrun and the batch engine talk over the
private LAN, not the public addresses (report B: over the public interface distributed training
did not speed up at all). Teardown deletes servers, then the switch, then the packet filter.

Scratch. The H100 plan has about 6.9 TiB of local NVMe that loses its contents when the server
powers off. cloud-init formats it (when it holds no file system) and mounts it at /scratch on
every boot; Instance.extra["scratch"] says so. Nothing there survives a power-off.

TTL: Sakura has no native expiry. Each node's cloud-init user data (sent with the boot request)
carries an absolute deadline; on every boot a `bootcmd` arms a systemd timer that powers the
server off at the deadline (falling back to `shutdown -h +N`), so a reboot during bootstrap does
not cancel it. A server powered off this way stops billing its plan, but its disk (and any
archive) is still billed until `gpuplan teardown` deletes it.

Host keys and SSH: the one-time host key rides in the boot request's cloud-init user data (the
boot call's body, not a property of the server that GETs return; not verified against the live
API), and gpuplan rotates it at the first login, so a copy read anywhere is worthless after that.

Quota: Sakura limits resources per account (サーバ数 and others), but no public API for reading
those limits was verified. `quota()` reports a tier (counted in servers) only when config
`quota_servers` is set. A 409 limit error from the API itself still becomes QuotaExceeded.

Sakura has no spot market: a request for spot machines is refused before anything is made.
"""

from __future__ import annotations

import json
import os
import re
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote

from gpuplan.errors import AuthMissing, CapacityUnavailable, GpuplanError, ProviderError, QuotaExceeded, UsageError, unreachable
from gpuplan.fleet import tags as tagging
from gpuplan.fleet.provider import Feature, HostKey, Image, Instance, NodeSpec, Provider, QuotaUsage, Resource
from gpuplan.fleet.tags import TAG_INSTALLATION, TAG_NODE

API_ROOT = "https://secure.sakura.ad.jp/cloud/zone"
ENV_TOKEN = "SAKURACLOUD_ACCESS_TOKEN"
ENV_SECRET = "SAKURACLOUD_ACCESS_TOKEN_SECRET"
ENV_ROOT = "SAKURACLOUD_API_ROOT_URL"
ENV_PROFILE = "SAKURACLOUD_PROFILE"
GPU_ZONES = ("is1a",)  # 高火力 VRT manual: GPU plans in is1a only
DEFAULT_ZONE = "is1a"
PRIVATE_NET = "192.168.100"  # the cluster switch's /24; node i is .(11 + i)
SCRATCH = "/scratch"
EPHEMERAL_PORTS = "32768-61000"  # Linux's default ip_local_port_range: where replies to the server arrive
SSD_PLAN_ID = 4
# Sizes the SSD disk plan offers (GB); a request is rounded up to the next one.
DISK_SIZES_GB = (20, 40, 60, 80, 100, 250, 500, 750, 1024, 2048, 4096)
# Ubuntu archive lookup, as iaas-api-go's ostype.Ubuntu criteria.
UBUNTU_FILTER = {"Scope": "shared", "Tags": ["current-stable", "distro-ubuntu"]}


@dataclass(frozen=True)
class PlanShape:
    """A GPU server plan as `product/server` describes it."""

    cpu: int
    memory_gb: int
    gpu: int
    gpu_model: str  # substring expected in the plan's GPUModel ("h100"), "" = any


# Short forms a user types; the catalog's "高火力 VRT 24Core-240GB-H100x1" and Sakura's own
# "GPUプラン/4Core-56GB-1GPU" are parsed by _shape() instead.
SIZES: dict[str, PlanShape] = {
    "h100x1": PlanShape(24, 240, 1, "h100"),
    "v100x1": PlanShape(4, 56, 1, "v100"),
}
_CATALOG_NAME = re.compile(r"(\d+)core-(\d+)gb-([a-z]\d+)x(\d+)$")
_SAKURA_NAME = re.compile(r"(\d+)core-(\d+)gb-(\d+)gpu$")

_RETRY_STATUS = (423, 503)


class _Gone(ProviderError):
    """404 from the API: callers that delete treat it as success."""


class _Conflict(ProviderError):
    """409 that is not a limit: e.g. powering off a server that is already going down."""


def send(session, method: str, url: str, *, unreachable_as: str, data: bytes | None = None,
         headers: Mapping[str, str] | None = None, retry_on: Sequence[int] = (), retries: int = 0,
         retry_base_s: float = 1.0, sleep: Callable[[float], None] = time.sleep) -> tuple[int, object]:
    """One request to a Sakura API (IaaS, 高火力 DOK or PHY, which share the key): the statuses in
    `retry_on` retried with backoff, a network failure raised as one line: `unreachable_as` with
    "{why}" replaced by the cause (DNS, refused, timeout). Returns the status and the JSON payload
    ({} when there is none or it is not JSON)."""
    import requests

    for attempt in range(retries + 1):
        try:
            r = session.request(method, url, data=data, headers=headers, timeout=60)
        except requests.RequestException as exc:
            raise ProviderError(unreachable_as.replace("{why}", unreachable(exc) or exc.__class__.__name__)) from exc
        if r.status_code in retry_on and attempt < retries:
            sleep(min(retry_base_s * 2**attempt, 30.0))
            continue
        break
    try:
        payload = r.json() if r.content else {}
    except ValueError:
        payload = {}
    return r.status_code, payload


def _shape(size: str) -> PlanShape | None:
    s = size.strip().lower().replace(" ", "")
    if s in SIZES:
        return SIZES[s]
    if m := _CATALOG_NAME.search(s):
        return PlanShape(int(m[1]), int(m[2]), int(m[4]), m[3])
    if m := _SAKURA_NAME.search(s):
        return PlanShape(int(m[1]), int(m[2]), int(m[3]), "")
    return None


def tag_strings(tags: Mapping[str, str]) -> list[str]:
    return [f"{k}={v}" for k, v in tags.items()]


def tag_dict(tags: Sequence[str] | None) -> dict[str, str]:
    out = {}
    for t in tags or ():
        if "=" in t:
            k, v = t.split("=", 1)
            out[k] = v
    return out


def private_address(name: str, others: Sequence[str]) -> str:
    """A node's address on the cluster switch: from its number ("demo-3" -> .14), else its place
    among the cluster's names."""
    m = re.search(r"(\d+)$", name)
    i = int(m[1]) if m else sorted(set(others) | {name}).index(name)
    if not 0 <= i <= 240:
        raise UsageError(f"sakura: node {name!r}: at most 241 nodes share a cluster switch")
    return f"{PRIVATE_NET}.{11 + i}"


def packet_filter_rules(ssh_cidr: str) -> list[dict]:
    """SSH from the caller only; replies to the server's own connections (stateless filter:
    by their ephemeral destination ports), ICMP and fragments; nothing else."""
    return [
        {"Protocol": "tcp", "SourceNetwork": ssh_cidr, "DestinationPort": "22", "Action": "allow",
         "Description": "SSH from gpuplan's caller"},
        {"Protocol": "tcp", "DestinationPort": EPHEMERAL_PORTS, "Action": "allow",
         "Description": "replies to the server's own TCP connections"},
        {"Protocol": "udp", "DestinationPort": EPHEMERAL_PORTS, "Action": "allow",
         "Description": "replies to the server's own UDP (DNS, NTP)"},
        {"Protocol": "icmp", "Action": "allow", "Description": "ICMP"},
        {"Protocol": "fragment", "Action": "allow", "Description": "fragments"},
        {"Protocol": "ip", "Action": "deny", "Description": "everything else"},
    ]


def cloud_init(spec: NodeSpec, name: str, host_key: HostKey | None, deadline_epoch: int | None,
               private_ip: str | None = None) -> str:
    """The #cloud-config sent with the boot request: pinned host key, login key, TTL timer, the
    private LAN address on the second NIC, and the local NVMe mounted at /scratch."""
    lines = ["#cloud-config", f"hostname: {name}"]
    if host_key is not None:
        lines += ["ssh_deletekeys: true", "ssh_keys:", "  ed25519_private: |"]
        lines += [f"    {ln}" for ln in host_key.private_openssh.strip().splitlines()]
        lines += [f"  ed25519_public: {host_key.public_openssh.strip()}"]
    lines += ["ssh_authorized_keys:", f"  - {spec.ssh_public_key.strip()}"]
    if private_ip is not None:
        netplan = ("network:\n  version: 2\n  ethernets:\n    eth1:\n"
                   f"      addresses: [{private_ip}/24]\n")
        lines += ["write_files:", "  - path: /etc/netplan/60-gpuplan-private.yaml", "    permissions: '0600'",
                  f"    content: {json.dumps(netplan)}", "runcmd:", "  - [netplan, apply]"]
    boot = []
    if deadline_epoch is not None:
        boot.append(
            f"left=$(( {deadline_epoch} - $(date +%s) )); [ $left -lt 60 ] && left=60; "
            "systemd-run --on-active=${left}s --unit=gpuplan-ttl systemctl poweroff "
            "|| shutdown -h +$(( left / 60 ))"
        )
    # the local NVMe is blank after every power-off: a file system is made when it has none
    boot.append(
        "d=$(ls /dev/nvme*n1 2>/dev/null | head -n 1); [ -z \"$d\" ] && exit 0; "
        f"mountpoint -q {SCRATCH} && exit 0; blkid \"$d\" >/dev/null || mkfs.ext4 -F -q \"$d\"; "
        f"mkdir -p {SCRATCH} && mount \"$d\" {SCRATCH} && chmod 1777 {SCRATCH}"
    )
    lines += ["bootcmd:"] + [f"  - [sh, -c, {json.dumps(b)}]" for b in boot]
    return "\n".join(lines) + "\n"


class SakuraProvider(Provider):
    """高火力 VRT servers. Region = Sakura zone (is1a, is1b for GPU plans).

    Config keys (all optional): zone, profile, archive (default Ubuntu archive id), quota_servers,
    disk_gb, poll_s, timeout_s, retries.
    """

    name = "sakura"
    default_ssh_user = "ubuntu"
    unsupported = {Feature.SPOT: "Sakura has no spot market; drop --spot"}
    opens_ssh_ingress = True  # the cluster's packet filter
    # Said with the machines a provision shows (launch.dry_run_notes / launch.check).
    create_notes = (
        "network: a packet filter lets SSH in from your address only; a cluster of 2 or more nodes also gets a "
        "switch, a private LAN (192.168.100.11, .12, ...) that torchrun and the batch engine use",
        "scratch: the plan's local NVMe (H100: about 6.9 TiB) is mounted at /scratch and loses its contents "
        "whenever a server powers off",
    )
    not_ready_hint = " (booting: check the control panel)"

    def __init__(
        self,
        config: Mapping[str, str] | None = None,
        *,
        env: Mapping[str, str] | None = None,
        home: Path | None = None,
        sleep: Callable[[float], None] = time.sleep,
        clock: Callable[[], float] = time.monotonic,
        wall_clock: Callable[[], float] = time.time,
        poll_s: float | None = None,
        retry_base_s: float = 1.0,
        max_workers: int = 8,
    ) -> None:
        self.config = dict(config or {})
        self._env = env if env is not None else os.environ
        self._home = home
        self.sleep = sleep
        self.monotonic = clock
        self._wall = wall_clock
        self.poll_s = poll_s if poll_s is not None else self._num("poll_s", 5)
        self.retry_base_s = retry_base_s
        self.retries = int(self._num("retries", 6))
        self.max_workers = max_workers
        self._local = threading.local()
        self._plans: dict[str, list[dict]] = {}

    def _num(self, key: str, default: float) -> float:
        raw = self.config.get(key)
        if raw in (None, ""):
            return default
        try:
            value = float(raw)
        except ValueError:
            value = -1
        if value < 0:
            raise UsageError(f"providers.sakura.{key} in config.yaml must be a number >= 0, not {raw!r}")
        return value

    # --- credentials and HTTP ---------------------------------------------------------

    def _profile(self) -> dict:
        base = (self._home or Path.home()) / ".usacloud"
        name = self.config.get("profile") or self._env.get(ENV_PROFILE, "")
        if not name and (base / "current").is_file():
            name = (base / "current").read_text().strip()
        path = base / (name or "default") / "config.json"
        if not path.is_file():
            return {}
        try:
            data = json.loads(path.read_text())
        except (OSError, ValueError) as exc:
            raise UsageError(f"{path}: not valid JSON ({exc.__class__.__name__}); fix or remove it") from exc
        return data if isinstance(data, dict) else {}

    def _credentials(self) -> tuple[str, str]:
        token, secret = self._env.get(ENV_TOKEN, ""), self._env.get(ENV_SECRET, "")
        if not (token and secret):
            prof = self._profile()
            token, secret = prof.get("AccessToken", ""), prof.get("AccessTokenSecret", "")
        if not (token and secret):
            raise AuthMissing(
                f"no Sakura API key: set {ENV_TOKEN} and {ENV_SECRET} "
                "(or create a usacloud profile ~/.usacloud/default/config.json)"
            )
        return token, secret

    def check_credentials(self) -> None:
        self._credentials()

    def api_key(self) -> tuple[str, str]:
        """(token, secret): the one API key さくらのクラウド, 高火力 DOK and PHY share."""
        return self._credentials()

    def api_root(self) -> str:
        """".../cloud/zone": the API root before the zone (SAKURACLOUD_API_ROOT_URL overrides it)."""
        return (self._env.get(ENV_ROOT) or API_ROOT).rstrip("/")

    def verify_credentials(self, region: str) -> None:
        self._call("GET", self._zone(region), "product/server")

    def _zone(self, region: str | None) -> str:
        return region or self.config.get("zone") or self._profile().get("Zone") or DEFAULT_ZONE

    def _session(self):
        s = getattr(self._local, "session", None)
        if s is None:
            import requests

            s = requests.Session()
            s.auth = self._credentials()
            s.headers.update({"Content-Type": "application/json; charset=UTF-8", "User-Agent": "gpuplan"})
            self._local.session = s
        return s

    def _url(self, zone: str, path: str) -> str:
        root = (self._env.get(ENV_ROOT) or API_ROOT).rstrip("/")
        return f"{root}/{zone}/api/cloud/1.1/{path}"

    def _call(self, method: str, zone: str, path: str, body: Mapping | None = None) -> dict:
        """One API call with 423/503 retries; errors become gpuplan exceptions."""
        url = self._url(zone, path)
        data = None
        if body is not None and method == "GET":
            url += "?" + quote(json.dumps(body, separators=(",", ":"), ensure_ascii=False), safe="")
        elif body is not None:
            data = json.dumps(body, ensure_ascii=False).encode()
        status, payload = send(self._session(), method, url, data=data, retry_on=_RETRY_STATUS, retries=self.retries,
                               retry_base_s=self.retry_base_s, sleep=self.sleep,
                               unreachable_as=f"sakura: cannot reach {self._url(zone, '')}: {{why}} ({ENV_ROOT} if set)")
        if status < 300:
            return payload  # type: ignore[return-value]
        raise self._error(method, path, status, payload if isinstance(payload, dict) else {})

    def _error(self, method: str, path: str, status: int, p: dict) -> GpuplanError:
        code, msg = p.get("error_code", ""), p.get("error_msg", "")
        where = f"sakura: {method} {path.split('?')[0]} failed: HTTP {status}"
        detail = f" {code}: {msg}".rstrip(": ") if code or msg else ""
        if status in (401, 403):
            return AuthMissing(f"{where}{detail}; check {ENV_TOKEN} and {ENV_SECRET} (key valid, access level)")
        if status == 404:
            return _Gone(f"{where}{detail}")
        if status == 409 and ("limit" in code or "上限" in msg):
            return QuotaExceeded(
                f"{where}{detail}; the account's resource limit (リソース上限) is reached: "
                "delete unused resources or ask Sakura support to raise the limit"
            )
        if status == 409:
            return _Conflict(f"{where}{detail}")
        if status == 503:
            return CapacityUnavailable(
                f"{where}{detail} after {self.retries} retries; try again later or use another zone")
        return ProviderError(f"{where}{detail}")

    def _find(self, zone: str, path: str, key: str, query: Mapping | None = None) -> list[dict]:
        out: list[dict] = []
        q = dict(query or {})
        while True:
            page = self._call("GET", zone, path, {**q, "From": len(out), "Count": 100})
            items = page.get(key) or []
            out += items
            if not items or len(out) >= int(page.get("Total", len(out))):
                return out

    # --- sizes and quota --------------------------------------------------------------

    def _gpu_plans(self, zone: str) -> list[dict]:
        if zone not in self._plans:
            plans = self._find(zone, "product/server", "ServerPlans", {"Filter": {"Availability": "available"}})
            self._plans[zone] = [p for p in plans if int(p.get("GPU") or 0) > 0]
        return self._plans[zone]

    def _plan(self, zone: str, size: str) -> dict:
        plans = self._gpu_plans(zone)
        shape = _shape(size)
        for p in plans:
            if p.get("Name") == size:
                return p
            if shape and (int(p.get("CPU", 0)), int(p.get("MemoryMB", 0)) // 1024, int(p.get("GPU", 0))) == (
                shape.cpu, shape.memory_gb, shape.gpu
            ) and (not shape.gpu_model or not p.get("GPUModel") or shape.gpu_model in p["GPUModel"].lower()):
                return p
        known = ", ".join(
            f"{p.get('Name')} ({p.get('CPU')} core, {int(p.get('MemoryMB', 0)) // 1024} GB, "
            f"{p.get('GPU')}x {p.get('GPUModel') or 'GPU'})" for p in plans
        ) or f"none here (GPU plans exist only in {', '.join(GPU_ZONES)})"
        raise UsageError(f"sakura: no GPU server plan matches {size!r} in {zone}; GPU plans: {known}")

    def vcpus(self, region: str, size: str) -> int:
        shape = _shape(size)
        return shape.cpu if shape else int(self._plan(self._zone(region), size)["CPU"])

    def quota(self, region: str, size: str, spot: bool = False) -> list[QuotaUsage]:
        limit = self._num("quota_servers", 0)
        if not limit:
            return []
        zone = self._zone(region)
        used = int(self._call("GET", zone, "server", {"From": 0, "Count": 1}).get("Total", 0))
        return [QuotaUsage(
            "servers", f"Sakura servers in {zone} (config quota_servers={int(limit)})", int(limit), used, "servers",
            how_to_raise="ask Sakura support to raise the account's server limit (サーバ数), "
                         "then raise providers.sakura.quota_servers in config.yaml",
        )]

    def default_regions(self) -> list[str]:
        return list(GPU_ZONES)

    # --- create -----------------------------------------------------------------------

    def _archive(self, zone: str, image: str | None) -> str:
        if image:
            return image
        if self.config.get("archive"):
            return self.config["archive"]
        found = self._find(zone, "archive", "Archives", {"Filter": UBUNTU_FILTER})
        if not found:
            raise ProviderError(
                f"sakura: no Ubuntu archive found in {zone}; set providers.sakura.archive in config.yaml")
        return str(max(found, key=lambda a: a.get("CreatedAt") or "")["ID"])

    def _servers(self, zone: str, tags: Mapping[str, str]) -> list[dict]:
        found = self._find(zone, "server", "Servers", {"Filter": {"Tags": tag_strings(tags)}})
        return [s for s in found if tags.items() <= tag_dict(s.get("Tags")).items()]

    def machines(self, region: str, match: Mapping[str, str]) -> dict[str, Instance]:
        zone = self._zone(region)
        return {i.name: i for i in (_instance(s, zone) for s in self._servers(zone, match))}

    def unfinished(self, inst: Instance) -> bool:
        """No disk yet, or powered down (never booted, or stopped): launch() completes and boots it."""
        return inst.extra.get("disks") == "0" or inst.status == "stopped"

    def launch(self, spec: NodeSpec, names: Sequence[str]) -> list[Instance]:
        """Create the servers concurrently (server, disk from the archive, boot with cloud-init),
        behind the cluster's packet filter, and on its switch when the cluster has more than one
        node. A server left half-made by an earlier run (no disk, or powered down) is completed
        rather than duplicated. When any server fails the others still finish, then the first
        error is raised; everything made so far stays tagged."""
        zone = self._zone(spec.region)
        plan = self._plan(zone, spec.size)
        archive = self._archive(zone, spec.image)
        existing = {tag_dict(s.get("Tags")).get(TAG_NODE): s for s in self._servers(zone, tagging.identity(spec.tags))}
        nodes = sorted((set(existing) - {None}) | set(names))
        packet_filter = self._packet_filter(zone, spec)
        switch = self._switch(zone, spec) if len(nodes) > 1 else None
        deadline = int(self._wall()) + spec.ttl_s if spec.ttl_s else None
        with ThreadPoolExecutor(max_workers=max(1, min(self.max_workers, len(names)))) as pool:
            futures = [pool.submit(self._ensure_node, zone, spec, plan, archive, n, existing.get(n), deadline,
                                   packet_filter, switch, private_address(n, nodes) if switch else None)
                       for n in names]
        errors = [f.exception() for f in futures if f.exception() is not None]
        if errors:
            raise errors[0]
        return [f.result() for f in futures]

    # --- the cluster's network ----------------------------------------------------------

    def ssh_cidr(self, spec: NodeSpec) -> str:
        """Where SSH may come from: the spec's (gpuplan fills it), else config ssh_cidr."""
        cidr = (spec.ssh_cidr or self.config.get("ssh_cidr", "")).strip()
        if not cidr:
            raise UsageError("no SSH source for the packet filter: set providers.sakura.ssh_cidr in config.yaml "
                             "(e.g. 203.0.113.5/32) or pass --ssh-from CIDR")
        return cidr if "/" in cidr else cidr + "/32"

    def _packet_filter(self, zone: str, spec: NodeSpec) -> str:
        """The cluster's packet filter (found by the tags in its Description, else created), with
        today's rules: a filter from an earlier run whose SSH source moved is updated."""
        rules = packet_filter_rules(self.ssh_cidr(spec))
        name = tagging.account_name(spec.tags)
        mine = dict(spec.tags)
        whose = tagging.identity(spec.tags)  # a resumed provision finds it whatever its creation time
        for pf in self._find(zone, "packetfilter", "PacketFilters", {"Filter": {"Name": name}}):
            if whose.items() <= _description_tags(pf.get("Description")).items():
                if [_rule(r) for r in pf.get("Expression") or []] != [_rule(r) for r in rules]:
                    self._call("PUT", zone, f"packetfilter/{pf['ID']}", {"PacketFilter": {"Expression": rules}})
                return str(pf["ID"])
        made = self._call("POST", zone, "packetfilter", {"PacketFilter": {
            "Name": name, "Description": "gpuplan " + " ".join(tag_strings(mine)), "Expression": rules}})
        return str(made["PacketFilter"]["ID"])

    def _switch(self, zone: str, spec: NodeSpec) -> str:
        """The cluster's switch (its private LAN), found by tag, else created."""
        mine, whose = dict(spec.tags), tagging.identity(spec.tags)
        found = self._find(zone, "switch", "Switches", {"Filter": {"Tags": tag_strings(whose)}})
        found = [w for w in found if whose.items() <= tag_dict(w.get("Tags")).items()]
        if found:
            return str(found[0]["ID"])
        made = self._call("POST", zone, "switch", {"Switch": {
            "Name": tagging.account_name(spec.tags), "Description": f"gpuplan cluster {spec.cluster}: private LAN",
            "Tags": tag_strings(mine)}})
        return str(made["Switch"]["ID"])

    def _ensure_node(self, zone: str, spec: NodeSpec, plan: dict, archive: str, name: str,
                     server: dict | None, deadline: int | None, packet_filter: str | None = None,
                     switch: str | None = None, private_ip: str | None = None) -> Instance:
        tags = tag_strings(tagging.for_node(spec.tags, name))
        # Names carry the installation, as on AWS and Azure: two homes' `demo-0` stay apart.
        installation = spec.tags.get(TAG_INSTALLATION)
        label = f"{name}-{installation}" if installation else name
        if server is None:
            server = self._call("POST", zone, "server", {"Server": {
                "Name": label, "HostName": name, "Description": f"gpuplan cluster {spec.cluster}",
                "ServerPlan": {k: plan[k] for k in ("ID", "CPU", "MemoryMB", "GPU", "GPUModel") if k in plan},
                "ConnectedSwitches": [{"Scope": "shared"}] + ([{"ID": switch}] if switch else []),
                "InterfaceDriver": "virtio", "Tags": tags,
            }})["Server"]
        sid = str(server["ID"])
        nics = server.get("Interfaces") or []
        if packet_filter and nics and str((nics[0].get("PacketFilter") or {}).get("ID", "")) != packet_filter:
            self._call("PUT", zone, f"interface/{nics[0]['ID']}/to/packetfilter/{packet_filter}")
        private = next((n for n in nics[1:] if str((n.get("Switch") or {}).get("ID")) == switch), None) if switch else None
        if private is not None and private.get("UserIPAddress") != private_ip:
            self._call("PUT", zone, f"interface/{private['ID']}", {"Interface": {"UserIPAddress": private_ip}})
        disks = [str(d["ID"]) for d in server.get("Disks") or []]
        if not disks:
            size_mb = _disk_mb(int(self._num("disk_gb", spec.disk_gib)))
            disk = self._call("POST", zone, "disk", {
                "Disk": {"Name": f"{label}-disk", "Plan": {"ID": SSD_PLAN_ID}, "SizeMB": size_mb, "Connection": "virtio",
                         "SourceArchive": {"ID": archive}, "Server": {"ID": sid}, "Tags": tags},
                "Config": {"SSHKeys": [{"PublicKey": spec.ssh_public_key}], "DisablePWAuth": True, "HostName": name},
            })["Disk"]
            disks = [str(disk["ID"])]
        for did in disks:
            self._wait(zone, f"disk/{did}", "Disk", lambda d: d.get("Availability") == "available",
                       f"disk of {name} to be copied from archive {archive}")
        if (server.get("Instance") or {}).get("Status", "down") == "down":
            user_data = cloud_init(spec, name, spec.host_keys.get(name), deadline,
                                   private_ip if private is not None else None)
            try:
                self._call("PUT", zone, f"server/{sid}/power",
                           {"UserBootVariables": {"CloudInit": {"UserData": user_data}}})
            except _Conflict:  # booted by an earlier run and still coming up: wait_ready checks
                pass
        return Instance(sid, name, "pending", extra={"zone": zone})

    def _wait(self, zone: str, path: str, key: str, done: Callable[[dict], bool], what: str,
              timeout_s: float | None = None) -> dict:
        limit = self.monotonic() + (timeout_s if timeout_s is not None else self._num("timeout_s", 1800))
        while True:
            item = self._call("GET", zone, path)[key]
            if item.get("Availability") == "failed":
                raise ProviderError(f"sakura: {path} failed while waiting for {what}")
            if done(item):
                return item
            if self.monotonic() >= limit:
                raise ProviderError(f"sakura: timed out waiting for {what} ({path}); check the control panel")
            self.sleep(self.poll_s)

    def describe(self, region: str, ids: Sequence[str]) -> list[Instance]:
        zone = self._zone(region)

        def one(sid: str) -> Instance | None:
            try:
                return _instance(self._call("GET", zone, f"server/{sid}")["Server"], zone)
            except _Gone:
                return None

        with ThreadPoolExecutor(max_workers=max(1, min(self.max_workers, len(ids) or 1))) as pool:
            return [i for i in pool.map(one, ids) if i is not None]

    # --- images -----------------------------------------------------------------------

    def capture(self, region: str, instance_id: str, image_name: str, tags: Mapping[str, str]) -> Image:
        """Power the server off (hard), then copy its first disk into an archive. The server
        itself stays usable (boot it again); the archive is billed for its size until deleted."""
        zone = self._zone(region)
        server = self._call("GET", zone, f"server/{instance_id}")["Server"]
        if (server.get("Instance") or {}).get("Status") != "down":
            self._power_off(zone, instance_id)
        disks = server.get("Disks") or []
        if not disks:
            raise ProviderError(f"sakura: server {instance_id} has no disk to capture")
        archive = self._call("POST", zone, "archive", {"Archive": {
            "Name": image_name, "Description": "gpuplan image", "SourceDisk": {"ID": str(disks[0]["ID"])},
            "Tags": tag_strings(tags),
        }})["Archive"]
        self._wait(zone, f"archive/{archive['ID']}", "Archive", lambda a: a.get("Availability") == "available",
                   f"archive {image_name} to be copied")
        return Image(str(archive["ID"]), image_name, zone)

    def _power_off(self, zone: str, sid: str) -> None:
        try:
            self._call("DELETE", zone, f"server/{sid}/power", {"Force": True})
        except _Conflict:  # already down or going down
            pass
        self._wait(zone, f"server/{sid}", "Server", lambda s: (s.get("Instance") or {}).get("Status") == "down",
                   f"server {sid} to power off", 600)

    # --- list and delete ----------------------------------------------------------------

    def list(self, region: str, tags: Mapping[str, str]) -> list[Resource]:
        zone = self._zone(region)
        query = {"Filter": {"Tags": tag_strings(tags)}}
        out: list[Resource] = []
        for path, key, kind in (("server", "Servers", "instance"), ("disk", "Disks", "disk"),
                                ("switch", "Switches", "switch"), ("archive", "Archives", "image")):
            q = {"Filter": {**query["Filter"], "Scope": "user"}} if kind == "image" else query
            for item in self._find(zone, path, key, q):
                t = tag_dict(item.get("Tags"))
                if tags.items() <= t.items():
                    name = t.get(TAG_NODE, item.get("Name", "")) if kind == "instance" else item.get("Name", "")
                    out.append(Resource(kind, str(item["ID"]), zone, t, name))
        # packet filters have no tags: theirs are in the Description
        for pf in self._find(zone, "packetfilter", "PacketFilters", {"Filter": {"Name": "gpuplan-"}}):
            t = _description_tags(pf.get("Description"))
            if t and tags.items() <= t.items():
                out.append(Resource("packet-filter", str(pf["ID"]), zone, t, pf.get("Name", "")))
        return out

    def delete(self, region: str, resources: Sequence[Resource]) -> None:
        """Servers first (hard power-off, then delete with their disks), then stray disks, the
        switch and the packet filter (which refuse while a server uses them), then archives.
        404 counts as deleted."""
        zone = self._zone(region)
        by_kind: dict[str, list[Resource]] = {}
        for r in resources:
            by_kind.setdefault(r.kind, []).append(r)
        unknown = set(by_kind) - {"instance", "disk", "switch", "packet-filter", "image"}
        if unknown:
            raise ProviderError(f"sakura: cannot delete resources of kind {', '.join(sorted(unknown))}")
        servers = by_kind.get("instance", [])
        if servers:
            with ThreadPoolExecutor(max_workers=max(1, min(self.max_workers, len(servers)))) as pool:
                list(pool.map(lambda r: self._delete_server(zone, r.id), servers))
        for r in by_kind.get("disk", []):
            self._delete(zone, f"disk/{r.id}")
        for r in by_kind.get("switch", []):
            self._delete(zone, f"switch/{r.id}")
        for r in by_kind.get("packet-filter", []):
            self._delete(zone, f"packetfilter/{r.id}")
        for r in by_kind.get("image", []):
            self._delete(zone, f"archive/{r.id}")

    def _delete_server(self, zone: str, sid: str) -> None:
        # A server still booting reads "down" but cannot be deleted (409) until it is up and
        # then stopped again, so retry until the deadline.
        limit = self.monotonic() + 600
        while True:
            try:
                server = self._call("GET", zone, f"server/{sid}")["Server"]
            except _Gone:
                return
            if (server.get("Instance") or {}).get("Status") != "down":
                self._power_off(zone, sid)
            try:
                self._delete(zone, f"server/{sid}", {"WithDisk": [str(d["ID"]) for d in server.get("Disks") or []]})
                return
            except _Conflict:
                if self.monotonic() >= limit:
                    raise
                self.sleep(self.poll_s)

    def _delete(self, zone: str, path: str, body: Mapping | None = None) -> None:
        try:
            self._call("DELETE", zone, path, body)
        except _Gone:
            pass


def _disk_mb(want_gb: int) -> int:
    return next((gb for gb in DISK_SIZES_GB if gb >= want_gb), DISK_SIZES_GB[-1]) * 1024


def _address(server: dict) -> str | None:
    nics = server.get("Interfaces") or []
    if not nics:
        return None
    return nics[0].get("IPAddress") or nics[0].get("UserIPAddress") or None


def _instance(server: dict, zone: str) -> Instance:
    status = {"up": "running", "down": "stopped"}.get((server.get("Instance") or {}).get("Status", ""), "pending")
    name = tag_dict(server.get("Tags")).get(TAG_NODE, server.get("Name", ""))
    private = next((n.get("UserIPAddress") for n in (server.get("Interfaces") or [])[1:] if n.get("UserIPAddress")), None)
    return Instance(str(server["ID"]), name, status, public_ip=_address(server), private_ip=private,
                    extra={"zone": zone, "disks": str(len(server.get("Disks") or [])),
                           "scratch": f"{SCRATCH}: local NVMe where the plan has one, lost at power-off"})


def _description_tags(description: str | None) -> dict[str, str]:
    """The tags gpuplan writes into a packet filter's Description ("gpuplan k=v k=v")."""
    words = (description or "").split()
    return tag_dict(words[1:]) if words[:1] == ["gpuplan"] else {}


def _rule(rule: Mapping) -> tuple:
    """A packet filter rule as compared: the fields that decide what it lets through."""
    return tuple(str(rule.get(k) or "") for k in ("Protocol", "SourceNetwork", "SourcePort", "DestinationPort", "Action"))
