"""Sakura Internet 高火力 VRT (Koukaryoku GPU plans of さくらのクラウド) over its REST API.

No maintained Python client exists, so this is a thin `requests` client over the paths that
sacloud/iaas-api-go calls (`zz_api_ops.go`, `zz_envelopes.go`):

- base `https://secure.sakura.ad.jp/cloud/zone/{zone}/api/cloud/1.1/`; the part before
  `/{zone}` can be replaced with env SAKURACLOUD_API_ROOT_URL (the usacloud/terraform variable);
- HTTP Basic auth `token:secret` from SAKURACLOUD_ACCESS_TOKEN / SAKURACLOUD_ACCESS_TOKEN_SECRET,
  else from the usacloud profile `~/.usacloud/<profile>/config.json`;
- bodies wrapped in an envelope keyed by the resource (`{"Server": {...}}`), GET parameters sent
  as JSON in the query string (`server?{"Filter":{"Tags":[...]}}`), 423/503 retried with backoff.

GPU plans exist only in the Ishikari zones (is1a, is1b). A node is a server plus one disk copied
from an Ubuntu archive; the disk and server carry the same tags, written as strings
"gpuplan-cluster=<c>", "gpuplan-owner=<o>", "gpuplan-installation=<i>", "gpuplan-node=<n>", and
servers are found by all of cluster, owner and installation; server and disk names carry the
installation (`demo-0-<i>`), as two homes' `demo-0` may share an account. Captured images are archives.

TTL: Sakura has no native expiry. Each node's cloud-init user data (sent with the boot request)
carries an absolute deadline; on every boot a `bootcmd` arms a systemd timer that powers the
server off at the deadline (falling back to `shutdown -h +N`), so a reboot during bootstrap does
not cancel it. A server powered off this way stops billing its plan, but its disk (and any
archive) is still billed until `gpuplan teardown` deletes it.

Host keys and SSH: the one-time host key rides in the boot request's cloud-init user data (the
boot call's body, not a property of the server that GETs return; not verified against the live
API), and gpuplan rotates it at the first login, so a copy read anywhere is worthless after that.
No Sakura packet filter is created: SSH on the shared segment is guarded by sshd alone
(public-key only, host key pinned), not by a source-address rule as on AWS and Azure.

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
from gpuplan.operating import tags as tagging
from gpuplan.operating.provider import Feature, HostKey, Image, Instance, NodeSpec, Provider, QuotaUsage, Resource
from gpuplan.operating.tags import TAG_INSTALLATION, TAG_NODE

API_ROOT = "https://secure.sakura.ad.jp/cloud/zone"
ENV_TOKEN = "SAKURACLOUD_ACCESS_TOKEN"
ENV_SECRET = "SAKURACLOUD_ACCESS_TOKEN_SECRET"
ENV_ROOT = "SAKURACLOUD_API_ROOT_URL"
ENV_PROFILE = "SAKURACLOUD_PROFILE"
GPU_ZONES = ("is1a", "is1b")
DEFAULT_ZONE = "is1a"
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


def cloud_init(spec: NodeSpec, name: str, host_key: HostKey | None, deadline_epoch: int | None) -> str:
    """The #cloud-config sent with the boot request: pinned host key, login key, TTL timer."""
    lines = ["#cloud-config", f"hostname: {name}"]
    if host_key is not None:
        lines += ["ssh_deletekeys: true", "ssh_keys:", "  ed25519_private: |"]
        lines += [f"    {ln}" for ln in host_key.private_openssh.strip().splitlines()]
        lines += [f"  ed25519_public: {host_key.public_openssh.strip()}"]
    lines += ["ssh_authorized_keys:", f"  - {spec.ssh_public_key.strip()}"]
    if deadline_epoch is not None:
        script = (
            f"left=$(( {deadline_epoch} - $(date +%s) )); [ $left -lt 60 ] && left=60; "
            "systemd-run --on-active=${left}s --unit=gpuplan-ttl systemctl poweroff "
            "|| shutdown -h +$(( left / 60 ))"
        )
        lines += ["bootcmd:", f"  - [sh, -c, {json.dumps(script)}]"]
    return "\n".join(lines) + "\n"


class SakuraProvider(Provider):
    """高火力 VRT servers. Region = Sakura zone (is1a, is1b for GPU plans).

    Config keys (all optional): zone, profile, archive (default Ubuntu archive id), quota_servers,
    disk_gb, poll_s, timeout_s, retries.
    """

    name = "sakura"
    default_ssh_user = "ubuntu"
    unsupported = {Feature.SPOT: "Sakura has no spot market; drop --spot"}
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
        import requests

        url = self._url(zone, path)
        data = None
        if body is not None and method == "GET":
            url += "?" + quote(json.dumps(body, separators=(",", ":"), ensure_ascii=False), safe="")
        elif body is not None:
            data = json.dumps(body, ensure_ascii=False).encode()
        for attempt in range(self.retries + 1):
            try:
                r = self._session().request(method, url, data=data, timeout=60)
            except requests.RequestException as exc:
                raise ProviderError(
                    f"sakura: cannot reach {self._url(zone, '')}: {unreachable(exc) or exc.__class__.__name__} "
                    f"({ENV_ROOT} if set)"
                ) from exc
            if r.status_code in _RETRY_STATUS and attempt < self.retries:
                self.sleep(min(self.retry_base_s * 2**attempt, 30.0))
                continue
            break
        try:
            payload = r.json() if r.content else {}
        except ValueError:
            payload = {}
        if r.status_code < 300:
            return payload
        raise self._error(method, path, r.status_code, payload if isinstance(payload, dict) else {})

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
        """Create the servers concurrently (server, disk from the archive, boot with cloud-init).
        A server left half-made by an earlier run (no disk, or powered down) is completed
        rather than duplicated. When any server fails the others still finish, then the first
        error is raised; everything made so far stays tagged."""
        zone = self._zone(spec.region)
        plan = self._plan(zone, spec.size)
        archive = self._archive(zone, spec.image)
        existing = {tag_dict(s.get("Tags")).get(TAG_NODE): s for s in self._servers(zone, tagging.identity(spec.tags))}
        deadline = int(self._wall()) + spec.ttl_s if spec.ttl_s else None
        with ThreadPoolExecutor(max_workers=max(1, min(self.max_workers, len(names)))) as pool:
            futures = [pool.submit(self._ensure_node, zone, spec, plan, archive, n, existing.get(n), deadline)
                       for n in names]
        errors = [f.exception() for f in futures if f.exception() is not None]
        if errors:
            raise errors[0]
        return [f.result() for f in futures]

    def _ensure_node(self, zone: str, spec: NodeSpec, plan: dict, archive: str, name: str,
                     server: dict | None, deadline: int | None) -> Instance:
        tags = tag_strings(tagging.for_node(spec.tags, name))
        # Names carry the installation, as on AWS and Azure: two homes' `demo-0` stay apart.
        installation = spec.tags.get(TAG_INSTALLATION)
        label = f"{name}-{installation}" if installation else name
        if server is None:
            server = self._call("POST", zone, "server", {"Server": {
                "Name": label, "HostName": name, "Description": f"gpuplan cluster {spec.cluster}",
                "ServerPlan": {k: plan[k] for k in ("ID", "CPU", "MemoryMB", "GPU", "GPUModel") if k in plan},
                "ConnectedSwitches": [{"Scope": "shared"}], "InterfaceDriver": "virtio", "Tags": tags,
            }})["Server"]
        sid = str(server["ID"])
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
            user_data = cloud_init(spec, name, spec.host_keys.get(name), deadline)
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
                                ("archive", "Archives", "image")):
            q = {"Filter": {**query["Filter"], "Scope": "user"}} if kind == "image" else query
            for item in self._find(zone, path, key, q):
                t = tag_dict(item.get("Tags"))
                if tags.items() <= t.items():
                    name = t.get(TAG_NODE, item.get("Name", "")) if kind == "instance" else item.get("Name", "")
                    out.append(Resource(kind, str(item["ID"]), zone, t, name))
        return out

    def delete(self, region: str, resources: Sequence[Resource]) -> None:
        """Servers first (hard power-off, then delete with their disks), then stray disks,
        then archives. 404 counts as deleted."""
        zone = self._zone(region)
        by_kind: dict[str, list[Resource]] = {}
        for r in resources:
            by_kind.setdefault(r.kind, []).append(r)
        unknown = set(by_kind) - {"instance", "disk", "image"}
        if unknown:
            raise ProviderError(f"sakura: cannot delete resources of kind {', '.join(sorted(unknown))}")
        servers = by_kind.get("instance", [])
        if servers:
            with ThreadPoolExecutor(max_workers=max(1, min(self.max_workers, len(servers)))) as pool:
                list(pool.map(lambda r: self._delete_server(zone, r.id), servers))
        for r in by_kind.get("disk", []):
            self._delete(zone, f"disk/{r.id}")
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
    return Instance(str(server["ID"]), name, status, public_ip=_address(server),
                    extra={"zone": zone, "disks": str(len(server.get("Disks") or []))})
