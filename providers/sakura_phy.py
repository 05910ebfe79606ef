"""Sakura 高火力 PHY: bare-metal GPU servers rented by the month, found through the PHY API and
then used like owned hosts.

There is no create call: PHY servers are ordered on the web (a monthly contract of at least two
months, usable about 10 minutes after ordering). So "provisioning" `sakura-phy:phy-h100x8` claims
a server the account already has, exactly as `baremetal` claims an inventory host (a no-clobber
claim file over SSH, the cluster's login key, GPUs counted), and teardown releases the claim;
nothing is deleted and nothing stops the monthly bill. The inventory is the API's server list:

- `GET /servers/` (`{"meta": {"count"}, "servers": [...]}`), `GET /servers/{id}/`,
  `GET /servers/{id}/os_images/`, `POST /servers/{id}/os_install/` {os_image_id, password},
  `POST /servers/{id}/power_control/` {operation: on | soft | reset | off}, under
  `https://secure.sakura.ad.jp/cloud/api/dedicated-phy/1.0` (SAKURACLOUD_API_ROOT_URL's
  `/zone` replaced), HTTP Basic with the さくらのクラウド API key, plus `X-Requested-With:
  XMLHttpRequest` on calls that change something (sacloud/phy-api-go, libphy swagger.yaml);
- the account may make 300 API requests an hour: every request first takes a slot from a
  budget kept in `<data dir>/sakura-phy-requests.json` (shared by gpuplan's processes), and a
  request past the budget is refused with the wait, before it is sent.

Config (providers.sakura-phy): user (default root), key (the SSH private key that logs in),
ssh_port (default 22), accept_host_keys (fingerprints checked on the console; a PHY host's key
is not known before first contact). Server fields beyond those the notes name (`service.plan`,
`ipv4.ip_address`, `lock_status`) follow phy-api-go's fake and are not verified live.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from gpuplan.errors import AuthMissing, ProviderError, UsageError
from gpuplan.providers.baremetal import BaremetalProvider, InventoryHost

RATE_LIMIT = 300  # API requests per account per hour (PHY API manual)
RATE_WINDOW_S = 3600
POWER_OPERATIONS = ("on", "soft", "reset", "off")
# The GPU servers 高火力 PHY sells, by what their plan name says: catalog name, GPU, count.
MODELS = (("B200", "phy-b200x8", "B200", 8), ("H200", "phy-h200x8", "H200", 8), ("H100", "phy-h100x8", "H100 SXM", 8))


class RequestBudget:
    """At most `limit` requests in any `window_s`: the timestamps of those sent, kept in a file so
    that every gpuplan process of this user spends the same budget."""

    def __init__(self, path: Path, limit: int = RATE_LIMIT, window_s: int = RATE_WINDOW_S,
                 clock: Callable[[], float] = time.time) -> None:
        self.path, self.limit, self.window_s, self.clock = path, limit, window_s, clock

    def _recent(self, now: float) -> list[float]:
        try:
            stamps = json.loads(self.path.read_text())
        except (OSError, ValueError):
            stamps = []
        return sorted(float(t) for t in stamps if isinstance(t, (int, float)) and now - self.window_s < t <= now)

    def left(self) -> int:
        return self.limit - len(self._recent(self.clock()))

    def take(self) -> None:
        now = self.clock()
        recent = self._recent(now)
        if len(recent) >= self.limit:
            wait = int(recent[0] + self.window_s - now) + 1
            raise ProviderError(
                f"sakura PHY: {self.limit} API requests in the last hour, the account's limit; the next is allowed in "
                f"{wait // 60} min {wait % 60} s (nothing was sent)")
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_name(f".{self.path.name}.{os.getpid()}")
        tmp.write_text(json.dumps(recent + [now]))
        os.replace(tmp, self.path)


@dataclass(frozen=True)
class PhyServer:
    id: str
    nickname: str
    plan: str
    address: str | None
    catalog_name: str  # "phy-h100x8"; "" for a server that is not a GPU plan gpuplan knows
    gpu_model: str
    gpu_count: int
    locked: str  # why the server cannot be used now ("os_installing"), "" when it can


def _server(raw: Mapping) -> PhyServer:
    service = raw.get("service") or {}
    plan = str((service.get("plan") or {}).get("name") or raw.get("plan") or "")
    name, model, count = "", "", 0
    for key, cat_name, gpu, n in MODELS:
        if key.lower() in plan.lower():
            name, model, count = cat_name, gpu, n
            break
    lock = raw.get("lock_status")
    return PhyServer(
        id=str(raw["server_id"]), nickname=str(service.get("nickname") or raw.get("server_id")), plan=plan,
        address=((raw.get("ipv4") or {}).get("ip_address") or None), catalog_name=name, gpu_model=model,
        gpu_count=count, locked=str(lock or ""),
    )


class SakuraPhyProvider(BaremetalProvider):
    """Claims 高火力 PHY servers the account rents; see the module docstring."""

    name = "sakura-phy"

    def __init__(self, config: Mapping[str, str] | None = None, *, env: Mapping[str, str] | None = None,
                 home: Path | None = None, budget: RequestBudget | None = None, max_workers: int = 32) -> None:
        super().__init__(dict(config or {}), max_workers=max_workers)
        from gpuplan.providers.sakura import SakuraProvider

        self._vrt = SakuraProvider(self.config, env=env, home=home)  # the key and the API root, shared
        if budget is None:
            from gpuplan import paths

            budget = RequestBudget(paths.data_dir() / "sakura-phy-requests.json")
        self.budget = budget
        self._http = None

    # --- the PHY API --------------------------------------------------------------------

    def base_url(self) -> str:
        return f"{self._vrt.api_root().removesuffix('/zone')}/api/dedicated-phy/1.0"

    def _call(self, method: str, path: str, body: Mapping | None = None) -> dict:
        import requests

        from gpuplan.providers.sakura import send

        if self._http is None:
            s = requests.Session()
            s.auth = self._vrt.api_key()
            s.headers.update({"Content-Type": "application/json", "User-Agent": "gpuplan"})
            self._http = s
        self.budget.take()
        headers = {"X-Requested-With": "XMLHttpRequest"} if method != "GET" else {}
        data = json.dumps(body).encode() if body is not None else None
        status, payload = send(self._http, method, f"{self.base_url()}/{path}", data=data, headers=headers,
                               unreachable_as=f"sakura PHY: cannot reach {self.base_url()} ({{why}})")
        if status < 300:
            return payload if isinstance(payload, dict) else {}
        where = f"sakura PHY: {method} /{path} failed: HTTP {status}"
        if status in (401, 403):
            raise AuthMissing(f"{where}; check the API key and that it may use the PHY API")
        if status == 429:
            raise ProviderError(f"{where}: the account's API rate limit ({RATE_LIMIT} an hour); retry later")
        detail = (payload.get("error_msg") or payload.get("detail") or payload.get("error")) if isinstance(payload, dict) else ""
        raise ProviderError(where + (f": {detail}" if detail else ""))

    def servers(self) -> list[PhyServer]:
        """Every server the account rents (the API pages by 100)."""
        out: list[PhyServer] = []
        while True:
            page = self._call("GET", f"servers/?offset={len(out)}&limit=100")
            items = page.get("servers") or []
            out += [_server(s) for s in items]
            if not items or len(out) >= int((page.get("meta") or {}).get("count", len(out))):
                return out

    def server(self, server_id: str) -> PhyServer:
        return _server(self._call("GET", f"servers/{server_id}/").get("server") or {})

    def os_images(self, server_id: str) -> list[dict]:
        return list(self._call("GET", f"servers/{server_id}/os_images/").get("os_images") or [])

    def reinstall(self, server_id: str, os_image: str, password: str) -> None:
        """Install `os_image` (an os_image_id, or a name it starts) afresh: everything on the disk is
        lost. Refused for a server a cluster has claimed (tear that down first)."""
        images = self.os_images(server_id)
        hit = [i for i in images if str(i.get("os_image_id")) == os_image] or \
              [i for i in images if str(i.get("name", "")).lower().startswith(os_image.lower())]
        if len(hit) != 1:
            names = ", ".join(f"{i.get('os_image_id')} ({i.get('name')})" for i in images) or "none"
            raise UsageError(f"sakura PHY: server {server_id} offers no single OS image {os_image!r}; images: {names}")
        if len(password) < 8:
            raise UsageError("sakura PHY: give a root password of at least 8 characters for the reinstall")
        host = next((h for h in self.inventory() if h.name == server_id), None)
        if host is not None:
            claim = self._claims_of([host])[0]
            if isinstance(claim, dict):
                cluster = (claim.get("tags") or {}).get("gpuplan-cluster", "?")
                raise UsageError(f"sakura PHY: server {server_id} belongs to cluster {cluster}; "
                                 f"`gpuplan teardown {cluster}` first, then reinstall")
        self._call("POST", f"servers/{server_id}/os_install/",
                   {"os_image_id": hit[0]["os_image_id"], "password": password})

    def power(self, server_id: str, operation: str) -> None:
        if operation not in POWER_OPERATIONS:
            raise UsageError(f"sakura PHY: power operation {operation!r}; use {', '.join(POWER_OPERATIONS)}")
        self._call("POST", f"servers/{server_id}/power_control/", {"operation": operation})

    # --- the inventory, from the API ----------------------------------------------------

    def inventory_path(self) -> Path:
        return Path("the 高火力 PHY server list")

    def inventory(self) -> list[InventoryHost]:
        if self._inventory is None:
            key = self.config.get("key")
            try:
                port = int(self.config.get("ssh_port") or 22)
            except ValueError:
                raise UsageError("providers.sakura-phy.ssh_port in config.yaml must be a port number") from None
            self._inventory = [
                InventoryHost(name=s.id, address=s.address, port=port, user=self.config.get("user") or "root",
                              key_path=str(Path(key).expanduser()) if key else None, gpu_model=s.gpu_model,
                              gpu_count=s.gpu_count, group=s.catalog_name)
                for s in self.servers() if s.catalog_name and s.address and not s.locked
            ]
        return self._inventory

    def check_credentials(self) -> None:
        self._vrt.check_credentials()
        key = self.config.get("key")
        if key and not Path(key).expanduser().is_file():
            raise UsageError(f"SSH key {key} for 高火力 PHY servers not found; fix providers.sakura-phy.key in config.yaml")

    def default_regions(self) -> list[str]:
        return ["jp"]

