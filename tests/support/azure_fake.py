"""An in-process, stateful fake of the Azure Resource Manager REST API, mounted behind the real
SDK clients' HTTP transport (a requests adapter), so every byte the Azure provider sends goes
through the real azure-mgmt-* serializers and LRO pollers.

It knows only what gpuplan uses: resource groups, the generic resource listing, VNets, subnets,
NSGs, public IPs, NICs, VMs (create with a real async-operation poll, deallocate, generalize,
start, instance view, delete with deleteOption cascade), managed disks, images, DevTestLab
auto-shutdown schedules, compute usages and resource SKUs. Anything else gets a 400 ARM error
naming the request, never a silent success. Ids are matched lower-cased; api-version is
required but its value ignored (it differs per operation group).

Failure switches: `fail_vm_put_at` (the Nth new-VM PUT, 1-based, answers `fail_vm_error`),
`fail_deletes` (so many DELETEs of a type answer 500 InternalServerError),
`stockouts` (a size in a zone grants so many VMs, then answers 409 ZonalAllocationFailed),
`limits` (per-family and "cores" vCPU quota, enforced at VM PUT like ARM's 409
OperationNotAllowed), SKUs with a location restriction (answered with 409 SkuNotAvailable).
"""

from __future__ import annotations

import base64
import io
import itertools
import json
import threading
import time
import uuid
from dataclasses import dataclass, field
from urllib.parse import parse_qs, urlsplit

import requests
import urllib3
from requests.adapters import BaseAdapter, HTTPAdapter

HOST = "management.azure.com"
SUBSCRIPTION = "00000000-0000-0000-0000-0000000000aa"
REGIONS = ("japaneast", "eastus", "westus2")


@dataclass(frozen=True)
class FakeSku:
    name: str
    family: str
    vcpus: int
    gpus: int
    restricted: bool = False  # NotAvailableForSubscription in every region (a retired size)


SKUS = (
    FakeSku("Standard_NC4as_T4_v3", "standardNCASv3_T4Family", 4, 1),
    FakeSku("Standard_NC24ads_A100_v4", "standardNCADSA100v4Family", 24, 1),
    FakeSku("Standard_D2s_v5", "standardDSv5Family", 2, 0),
    FakeSku("Standard_NC6", "standardNCFamily", 6, 1, restricted=True),
)

TYPES = {
    "microsoft.network/virtualnetworks": "Microsoft.Network/virtualNetworks",
    "microsoft.network/virtualnetworks/subnets": "Microsoft.Network/virtualNetworks/subnets",
    "microsoft.network/networksecuritygroups": "Microsoft.Network/networkSecurityGroups",
    "microsoft.network/publicipaddresses": "Microsoft.Network/publicIPAddresses",
    "microsoft.network/networkinterfaces": "Microsoft.Network/networkInterfaces",
    "microsoft.compute/virtualmachines": "Microsoft.Compute/virtualMachines",
    "microsoft.compute/disks": "Microsoft.Compute/disks",
    "microsoft.compute/images": "Microsoft.Compute/images",
    "microsoft.devtestlab/schedules": "Microsoft.DevTestLab/schedules",
}


class ArmError(Exception):
    def __init__(self, status: int, code: str, message: str) -> None:
        super().__init__(f"{status} {code}: {message}")
        self.status, self.code, self.message = status, code, message


class FakeCredential:
    """Stands in for DefaultAzureCredential: no Entra ID call."""

    def get_token(self, *scopes, **kwargs):
        from azure.core.credentials import AccessToken

        return AccessToken("fake-token", int(time.time()) + 3600)


@dataclass
class _Op:
    polls_left: int
    done: callable = None
    kind: str = "async"  # "async" (Azure-AsyncOperation JSON) or "location" (202 until done)


LOW_PRIORITY = "lowPriorityCores"  # ARM's name for the regional Spot vCPU quota


def _quotas_of(vm_properties: dict, sku) -> tuple[str, ...]:
    """The quotas a VM counts against: Spot VMs only the regional Spot quota, others their
    family and the regional total."""
    if (vm_properties.get("priority") or "").lower() == "spot":
        return (LOW_PRIORITY,)
    return (sku.family, "cores")


@dataclass
class FakeARM(BaseAdapter):
    subscription: str = SUBSCRIPTION
    skus: tuple = SKUS
    limits: dict = field(default_factory=lambda: {"cores": 20})  # quota name -> vCPU limit; families default to default_family_limit
    default_family_limit: int = 20
    fail_vm_put_at: int | None = None
    # Zonal stockouts: (size lower-cased, zone) -> how many new VMs of the size the zone grants
    # before it answers ZonalAllocationFailed, as ARM does (0: it refuses outright).
    stockouts: dict = field(default_factory=dict)
    zones: tuple = ("1", "2", "3")  # every region's availability zones, as the SKU list reports them
    fail_vm_error: tuple = (409, "AllocationFailed", "Allocation failed. We do not have sufficient capacity for the requested VM size in this region.")
    # ARM type (as in TYPES' values, or "Microsoft.Resources/resourceGroups") -> how many DELETEs of
    # that type answer 500 InternalServerError before they work again (the resource stays).
    fail_deletes: dict = field(default_factory=dict)

    def __post_init__(self) -> None:
        super().__init__()
        self.store: dict[str, dict] = {}  # lower-cased id -> resource JSON (canonical-case id inside)
        self.power: dict[str, str] = {}  # vm key -> "running" | "deallocated"
        self.generalized: set[str] = set()
        self.custom_data: dict[str, str] = {}  # vm key -> decoded cloud-init (ARM never returns it)
        self.calls: list[tuple[str, str]] = []
        self.vm_puts = 0
        self._ops: dict[str, _Op] = {}
        self._ips = itertools.count(4)
        self._lock = threading.RLock()

    # --- wiring --------------------------------------------------------------------------

    def transport(self):
        """A RequestsTransport whose session sends everything to this fake."""
        from azure.core.pipeline.transport import RequestsTransport

        session = requests.Session()
        session.mount("https://", self)
        session.mount("http://", self)
        return RequestsTransport(session=session, session_owner=False)

    def close(self) -> None:
        pass

    # --- what a test asks ----------------------------------------------------------------

    def held(self) -> list[str]:
        """The id of every resource (resource groups included) the fake holds."""
        with self._lock:
            return sorted(r["id"] for r in self.store.values())

    def held_of(self, arm_type: str) -> list[dict]:
        with self._lock:
            return [r for r in self.store.values() if r.get("type", "").lower() == arm_type.lower()]

    def get(self, rid: str) -> dict | None:
        return self.store.get(rid.lower())

    def usage(self, region: str) -> dict[str, int]:
        used: dict[str, int] = {"cores": 0, LOW_PRIORITY: 0}
        for vm in self.held_of("Microsoft.Compute/virtualMachines"):
            if vm["location"] != region:
                continue
            sku = self._sku(vm["properties"]["hardwareProfile"]["vmSize"])
            for quota in _quotas_of(vm["properties"], sku):
                used[quota] = used.get(quota, 0) + sku.vcpus
        return used

    def limit(self, name: str) -> int:
        return self.limits.get(name, self.default_family_limit)

    # --- HTTP ----------------------------------------------------------------------------

    def send(self, request, **kwargs):
        url = urlsplit(request.url)
        query = {k: v[-1] for k, v in parse_qs(url.query).items()}
        body = request.body
        if isinstance(body, bytes):
            body = body.decode()
        with self._lock:
            self.calls.append((request.method, url.path))
            try:
                if url.hostname != HOST:
                    raise ArmError(400, "FakeUnknownHost", f"the fake ARM only answers {HOST}, not {url.hostname}")
                if "api-version" not in query:
                    raise ArmError(400, "MissingApiVersionParameter", "The api-version query parameter is required.")
                status, payload, headers = self._route(request.method, url.path, query, json.loads(body) if body else None)
            except ArmError as e:
                status, payload, headers = e.status, {"error": {"code": e.code, "message": e.message}}, {}
        return self._response(request, status, payload, headers)

    @staticmethod
    def _response(request, status: int, payload, headers: dict):
        data = b"" if payload is None else json.dumps(payload).encode()
        raw = urllib3.response.HTTPResponse(
            body=io.BytesIO(data), status=status, preload_content=False, reason="fake",
            headers={"Content-Type": "application/json", "Content-Length": str(len(data)), **headers},
        )
        return HTTPAdapter().build_response(request, raw)

    def _route(self, method: str, path: str, query: dict, body):
        parts = [p for p in path.split("/") if p]
        low = [p.lower() for p in parts]
        if len(low) < 2 or low[0] != "subscriptions" or low[1] != self.subscription.lower():
            raise ArmError(404, "SubscriptionNotFound", f"The subscription '{parts[1] if len(parts) > 1 else ''}' could not be found.")
        rest, lrest = parts[2:], low[2:]
        if lrest == ["resourcegroups"] and method == "GET":
            return 200, {"value": self._list_groups(query.get("$filter"))}, {}
        if len(lrest) == 2 and lrest[0] == "resourcegroups":
            return self._group(method, rest[1], body)
        if len(lrest) == 3 and lrest[0] == "resourcegroups" and lrest[2] == "resources" and method == "GET":
            if "$filter" in query:
                raise ArmError(400, "FakeUnsupported", "the fake does not filter resource listings")
            return 200, {"value": self._list_in_group(rest[1])}, {}
        if len(lrest) >= 5 and lrest[0] == "resourcegroups" and lrest[2] == "providers":
            return self._provider_path(method, rest[1], rest[3:], lrest[3:], query, body)
        if lrest[:3] == ["providers", "microsoft.compute", "skus"] and len(lrest) == 3 and method == "GET":
            return 200, {"value": self._sku_list(query.get("$filter"))}, {}
        if lrest[:3] == ["providers", "microsoft.compute", "locations"] and len(lrest) == 5 and lrest[4] == "usages":
            return 200, {"value": self._usages(lrest[3])}, {}
        if lrest[:3] == ["providers", "microsoft.compute", "locations"] and len(lrest) == 6 and lrest[4] == "operations":
            return self._poll(lrest[5])
        if lrest[:1] == ["operationresults"] and len(lrest) == 2:
            return self._poll(lrest[1])
        raise ArmError(400, "FakeUnsupported", f"the fake ARM does not know {method} {path}")

    # --- operations (LROs) ---------------------------------------------------------------

    def _new_op(self, region: str, done, kind: str = "async", polls: int = 1) -> dict:
        token = uuid.uuid4().hex
        self._ops[token] = _Op(polls, done, kind)
        if kind == "location":
            url = f"https://{HOST}/subscriptions/{self.subscription}/operationresults/{token}?api-version=2026-01-01"
            return {"Location": url, "Retry-After": "0"}
        url = (f"https://{HOST}/subscriptions/{self.subscription}/providers/Microsoft.Compute/locations/"
               f"{region}/operations/{token}?api-version=2026-01-01")
        return {"Azure-AsyncOperation": url, "Retry-After": "0"}

    def _poll(self, token: str):
        op = self._ops.get(token)
        if op is None:
            raise ArmError(404, "OperationNotFound", f"operation {token} not found")
        if op.polls_left > 0:
            op.polls_left -= 1
            if op.kind == "location":
                return 202, None, {"Location": f"https://{HOST}/subscriptions/{self.subscription}/operationresults/{token}?api-version=2026-01-01", "Retry-After": "0"}
            return 200, {"status": "InProgress"}, {}
        if op.done is not None:
            op.done()
            op.done = None
        if op.kind == "location":
            return 200, None, {}
        return 200, {"status": "Succeeded"}, {}

    # --- resource groups -----------------------------------------------------------------

    def _group_id(self, name: str) -> str:
        return f"/subscriptions/{self.subscription}/resourceGroups/{name}"

    def _group(self, method: str, name: str, body):
        key = self._group_id(name).lower()
        if method == "PUT":
            if not body or "location" not in body:
                raise ArmError(400, "LocationRequired", "The location property is required for this definition.")
            old = self.store.get(key)
            if old and old["location"] != body["location"]:
                raise ArmError(409, "InvalidResourceGroupLocation", f"Invalid resource group location '{body['location']}'. The Resource group already exists in location '{old['location']}'.")
            rg = {"id": old["id"] if old else self._group_id(name), "name": old["name"] if old else name,
                  "type": "Microsoft.Resources/resourceGroups", "location": body["location"],
                  "tags": body.get("tags") or {}, "properties": {"provisioningState": "Succeeded"}}
            self.store[key] = rg
            return (200 if old else 201), rg, {}
        rg = self.store.get(key)
        if method == "GET":
            if rg is None:
                raise ArmError(404, "ResourceGroupNotFound", f"Resource group '{name}' could not be found.")
            return 200, rg, {}
        if method == "HEAD":
            return (204 if rg else 404), None, {}
        if method == "DELETE":
            if rg is None:
                raise ArmError(404, "ResourceGroupNotFound", f"Resource group '{name}' could not be found.")
            self._failing_delete("Microsoft.Resources/resourceGroups")
            rg["properties"]["provisioningState"] = "Deleting"
            return 202, None, self._new_op(rg["location"], lambda: self._drop_group(key), kind="location")
        raise ArmError(400, "FakeUnsupported", f"the fake ARM does not know {method} on a resource group")

    def _drop_group(self, key: str) -> None:
        for k in [k for k in self.store if k == key or k.startswith(key + "/")]:
            del self.store[k]
            self.power.pop(k, None)
            self.generalized.discard(k)

    def _list_groups(self, flt: str | None) -> list[dict]:
        groups = [r for r in self.store.values() if r["type"] == "Microsoft.Resources/resourceGroups"]
        if not flt:
            return groups
        name, value = _tag_filter(flt)
        return [g for g in groups if g["tags"].get(name) == value]

    def _list_in_group(self, name: str) -> list[dict]:
        key = self._group_id(name).lower()
        if key not in self.store:
            raise ArmError(404, "ResourceGroupNotFound", f"Resource group '{name}' could not be found.")
        out = []
        for k, r in self.store.items():
            if k.startswith(key + "/") and r["type"].count("/") == 1:  # child resources (subnets) are not listed
                out.append({x: r[x] for x in ("id", "name", "type", "location", "tags") if x in r})
        return out

    # --- typed resources -----------------------------------------------------------------

    def _provider_path(self, method, group, parts, low, query, body):
        gkey = self._group_id(group).lower()
        if gkey not in self.store:
            raise ArmError(404, "ResourceGroupNotFound", f"Resource group '{group}' could not be found.")
        ns = low[0]
        type_path, names = [low[1]], [parts[2]] if len(parts) > 2 else []
        i = 3
        while i + 1 < len(low) and f"{ns}/{'/'.join(type_path)}/{low[i]}" in TYPES:
            type_path.append(low[i])
            names.append(parts[i + 1])
            i += 2
        arm_type = TYPES.get(f"{ns}/{'/'.join(type_path)}")
        if arm_type is None:
            raise ArmError(400, "FakeUnsupported", f"the fake ARM does not know resource type {ns}/{'/'.join(type_path)}")
        action = low[i:] if i < len(low) else []
        if len(parts) == 2:  # a collection: GET .../providers/Microsoft.Compute/virtualMachines
            if method != "GET":
                raise ArmError(400, "FakeUnsupported", f"{method} on a collection")
            return 200, {"value": [r for k, r in self.store.items() if k.startswith(gkey + "/") and r["type"] == arm_type]}, {}
        segs = [f"/subscriptions/{self.subscription}/resourceGroups/{self.store[gkey]['name']}/providers/{parts[0]}"]
        canon = arm_type.split("/")[1:]
        for t, n in zip(canon, names):
            segs.append(f"{t}/{n}")
        rid = "/".join(segs)
        key = rid.lower()
        if action:
            return self._action(method, arm_type, key, action)
        if method == "PUT":
            return self._put(arm_type, rid, key, names[-1], body or {})
        if method == "GET":
            if key not in self.store:
                raise ArmError(404, "ResourceNotFound", f"The Resource '{arm_type}/{names[-1]}' under resource group '{group}' was not found.")
            return 200, self.store[key], {}
        if method == "DELETE":
            return self._delete(arm_type, key)
        raise ArmError(400, "FakeUnsupported", f"the fake ARM does not know {method} on {arm_type}")

    def _ref(self, rid: str | None, arm_type: str, what: str) -> dict:
        r = self.store.get((rid or "").lower())
        if r is None or r["type"] != arm_type:
            raise ArmError(400, "InvalidResourceReference", f"Resource {rid} referenced by {what} was not found.")
        return r

    def _put(self, arm_type: str, rid: str, key: str, name: str, body: dict):
        old = self.store.get(key)
        props = dict(body.get("properties") or {})
        res = {"id": rid, "name": name, "type": arm_type}
        if arm_type != "Microsoft.Network/virtualNetworks/subnets":
            if "location" not in body:
                raise ArmError(400, "LocationRequired", "The location property is required for this definition.")
            res["location"] = body["location"]
            res["tags"] = body.get("tags") or {}
            if body.get("zones"):
                res["zones"] = list(body["zones"])
        headers: dict = {}
        if arm_type == "Microsoft.Network/virtualNetworks/subnets":
            parent = key.rsplit("/subnets/", 1)[0]
            if parent not in self.store:
                raise ArmError(404, "ResourceNotFound", f"virtual network of subnet {name} not found")
            if "addressPrefix" not in props:
                raise ArmError(400, "InvalidRequestFormat", "subnet addressPrefix is required")
        elif arm_type == "Microsoft.Network/virtualNetworks":
            if not (props.get("addressSpace") or {}).get("addressPrefixes"):
                raise ArmError(400, "InvalidRequestFormat", "addressSpace.addressPrefixes is required")
        elif arm_type == "Microsoft.Network/networkSecurityGroups":
            for rule in props.get("securityRules") or []:
                rp = rule.get("properties") or {}
                missing = [f for f in ("priority", "direction", "access", "protocol", "destinationPortRange") if f not in rp]
                if missing:
                    raise ArmError(400, "SecurityRuleInvalid", f"security rule {rule.get('name')} lacks {missing}")
        elif arm_type == "Microsoft.Network/publicIPAddresses":
            props["ipAddress"] = (old or {}).get("properties", {}).get("ipAddress") or f"20.48.0.{next(self._ips)}"
        elif arm_type == "Microsoft.Network/networkInterfaces":
            if old and (old["properties"].get("virtualMachine") or {}).get("id"):
                props["virtualMachine"] = old["properties"]["virtualMachine"]
            if props.get("networkSecurityGroup"):
                self._ref(props["networkSecurityGroup"].get("id"), "Microsoft.Network/networkSecurityGroups", name)
            configs = props.get("ipConfigurations") or []
            if not configs:
                raise ArmError(400, "InvalidRequestFormat", "a NIC needs an ipConfiguration")
            for cfg in configs:
                cp = cfg.setdefault("properties", {})
                self._ref((cp.get("subnet") or {}).get("id"), "Microsoft.Network/virtualNetworks/subnets", name)
                cfg["id"] = f"{rid}/ipConfigurations/{cfg.get('name')}"
                cp["privateIPAddress"] = f"10.0.0.{next(self._ips)}"
                if cp.get("publicIPAddress"):
                    pip = self._ref(cp["publicIPAddress"].get("id"), "Microsoft.Network/publicIPAddresses", name)
                    pip["properties"]["ipConfiguration"] = {"id": cfg["id"]}
        elif arm_type == "Microsoft.Compute/virtualMachines":
            return self._put_vm(rid, key, name, body, res, props, old)
        elif arm_type == "Microsoft.Compute/images":
            src = (props.get("sourceVirtualMachine") or {}).get("id")
            self._ref(src, "Microsoft.Compute/virtualMachines", name)
            if src.lower() not in self.generalized:
                raise ArmError(409, "OperationNotAllowed", f"The source virtual machine '{src}' must be generalized before an image is created from it.")
        elif arm_type == "Microsoft.DevTestLab/schedules":
            if not name.lower().startswith("shutdown-computevm-"):
                raise ArmError(400, "InvalidScheduleName", "an auto-shutdown schedule must be named shutdown-computevm-<vm>")
            self._ref(props.get("targetResourceId"), "Microsoft.Compute/virtualMachines", name)
            t = (props.get("dailyRecurrence") or {}).get("time", "")
            if props.get("taskType") != "ComputeVmShutdownTask" or len(t) != 4 or not t.isdigit() or int(t[:2]) > 23 or int(t[2:]) > 59:
                raise ArmError(400, "InvalidSchedule", f"bad shutdown schedule {props}")
        elif arm_type == "Microsoft.Compute/disks":
            raise ArmError(400, "FakeUnsupported", "the fake creates disks only as OS disks of VMs")
        props["provisioningState"] = "Succeeded"
        res["properties"] = props
        self.store[key] = res
        return (200 if old else 201), res, headers

    def _sku(self, size: str) -> FakeSku | None:
        return next((s for s in self.skus if s.name.lower() == size.lower()), None)

    def _put_vm(self, rid, key, name, body, res, props, old):
        size = (props.get("hardwareProfile") or {}).get("vmSize", "")
        sku = self._sku(size)
        if sku is None:
            raise ArmError(400, "InvalidParameter", f"The value {size} provided for the VM size is not valid. Find the valid VM sizes with `az vm list-sizes`.")
        if sku.restricted:
            raise ArmError(409, "SkuNotAvailable", f"The requested VM size {size} is currently not available in location '{body['location']}'. Please try another size or deploy to a different location.")
        if key in self.generalized:
            raise ArmError(409, "OperationNotAllowed", f"Operation 'Update' is not allowed on VM '{name}' since the VM is generalized.")
        if old:  # an idempotent re-PUT: nothing new is allocated
            return 200, old, {}
        self.vm_puts += 1
        if self.fail_vm_put_at is not None and self.vm_puts == self.fail_vm_put_at:
            raise ArmError(*self.fail_vm_error)
        zones = body.get("zones") or []
        if zones and zones[0] not in self.zones:
            raise ArmError(400, "InvalidParameter", f"The requested zone {zones[0]!r} is not available in location '{body['location']}'.")
        zone = zones[0] if zones else None
        stock = (size.lower(), zone)
        if stock in self.stockouts:
            if self.stockouts[stock] <= 0:
                raise ArmError(409, "ZonalAllocationFailed",
                               f"Allocation failed. We do not have sufficient capacity for the requested VM size {size} "
                               f"in this zone. Read more about improving likelihood of allocation success at "
                               f"http://aka.ms/allocation-guidance")
            self.stockouts[stock] -= 1
        used = self.usage(body["location"])
        for quota in _quotas_of(props, sku):
            limit = self.limit(quota)
            if used.get(quota, 0) + sku.vcpus > limit:
                raise ArmError(409, "OperationNotAllowed",
                               f"Operation could not be completed as it results in exceeding approved {quota} Cores quota. "
                               f"Additional details - Location: {body['location']}, Current Limit: {limit}, "
                               f"Current Usage: {used.get(quota, 0)}, Additional Required: {sku.vcpus}.")
        storage = props.get("storageProfile") or {}
        image = storage.get("imageReference") or {}
        if image.get("id"):
            self._ref(image["id"], "Microsoft.Compute/images", name)
        elif not all(image.get(f) for f in ("publisher", "offer", "sku", "version")):
            raise ArmError(400, "InvalidParameter", "storageProfile.imageReference needs id or publisher/offer/sku/version")
        osp = props.get("osProfile") or {}
        lin = osp.get("linuxConfiguration") or {}
        if not osp.get("adminUsername") or not lin.get("disablePasswordAuthentication") or not (lin.get("ssh") or {}).get("publicKeys"):
            raise ArmError(400, "InvalidParameter", "the fake expects SSH-key-only Linux VMs (adminUsername, disablePasswordAuthentication, ssh.publicKeys)")
        if osp.get("customData"):
            try:
                self.custom_data[key] = base64.b64decode(osp["customData"], validate=True).decode()
            except ValueError:
                raise ArmError(400, "InvalidParameter", "customData must be base64") from None
            osp = {k: v for k, v in osp.items() if k != "customData"}  # ARM never returns it
            props["osProfile"] = osp
        nics = (props.get("networkProfile") or {}).get("networkInterfaces") or []
        if not nics:
            raise ArmError(400, "InvalidParameter", "a VM needs a network interface")
        for ref in nics:
            nic = self._ref(ref.get("id"), "Microsoft.Network/networkInterfaces", name)
            owner = (nic["properties"].get("virtualMachine") or {}).get("id")
            if owner and owner.lower() != key:
                raise ArmError(400, "NicInUse", f"Network interface {nic['id']} is used by {owner}.")
            nic["properties"]["virtualMachine"] = {"id": rid}
        osd = storage.setdefault("osDisk", {})
        disk_name = osd.get("name") or f"{name}_OsDisk_1_{uuid.uuid4().hex[:32]}"
        gkey = key.split("/providers/")[0]
        disk_id = f"{self.store[gkey]['id']}/providers/Microsoft.Compute/disks/{disk_name}"
        self.store[disk_id.lower()] = {
            "id": disk_id, "name": disk_name, "type": "Microsoft.Compute/disks", "location": body["location"],
            "tags": {}, "managedBy": rid,
            "properties": {"diskSizeGB": osd.get("diskSizeGB", 30), "provisioningState": "Succeeded"},
        }
        osd["name"] = disk_name
        osd.setdefault("managedDisk", {})["id"] = disk_id
        props["storageProfile"] = storage
        props["vmId"] = str(uuid.uuid4())
        props["provisioningState"] = "Creating"
        res["properties"] = props
        self.store[key] = res
        self.power[key] = "starting"

        def finish() -> None:
            if key in self.store:
                self.store[key]["properties"]["provisioningState"] = "Succeeded"
                self.power[key] = "running"

        return 201, res, self._new_op(body["location"], finish)

    def _action(self, method, arm_type, key, action):
        if arm_type != "Microsoft.Compute/virtualMachines" or len(action) != 1:
            raise ArmError(400, "FakeUnsupported", f"the fake ARM does not know {method} {arm_type}/{'/'.join(action)}")
        vm = self.store.get(key)
        if vm is None:
            raise ArmError(404, "ResourceNotFound", f"The Resource '{key}' was not found.")
        verb = action[0]
        if verb == "instanceview" and method == "GET":
            state = vm["properties"]["provisioningState"].lower()
            return 200, {"computerName": vm["name"], "hyperVGeneration": "V2", "statuses": [
                {"code": f"ProvisioningState/{state}"}, {"code": f"PowerState/{self.power.get(key, 'unknown')}"}]}, {}
        if method != "POST":
            raise ArmError(400, "FakeUnsupported", f"{method} {verb}")
        if verb == "deallocate":
            def done() -> None:
                self.power[key] = "deallocated"
            self.power[key] = "deallocating"
            return 202, None, self._new_op(vm["location"], done)
        if verb == "generalize":
            if self.power.get(key) not in ("deallocated", "stopped"):
                raise ArmError(409, "OperationNotAllowed", f"Operation 'generalize' is not allowed on VM '{vm['name']}' since the VM is running. Stop or deallocate it first.")
            self.generalized.add(key)
            return 200, None, {}
        if verb == "start":
            if key in self.generalized:
                raise ArmError(409, "OperationNotAllowed", f"Operation 'start' is not allowed on VM '{vm['name']}' since the VM is generalized.")
            self.power[key] = "running"
            return 200, None, {}
        raise ArmError(400, "FakeUnsupported", f"the fake ARM does not know POST {verb}")

    def _in_use(self, key: str, arm_type: str) -> str | None:
        """Why ARM would refuse to delete this resource now, or None."""
        r = self.store[key]
        if arm_type == "Microsoft.Network/networkInterfaces":
            vm = (r["properties"].get("virtualMachine") or {}).get("id")
            if vm and vm.lower() in self.store:
                return f"400 NicInUse: Network Interface {r['id']} is used by existing resource {vm}."
        if arm_type == "Microsoft.Network/publicIPAddresses":
            cfg = (r["properties"].get("ipConfiguration") or {}).get("id", "")
            if cfg and cfg.lower().split("/ipconfigurations/")[0] in self.store:
                return f"400 PublicIPAddressInUse: Public IP address {r['id']} is in use by {cfg}."
        if arm_type == "Microsoft.Compute/disks":
            owner = r.get("managedBy")
            if owner and owner.lower() in self.store:
                return f"409 OperationNotAllowed: Disk {r['name']} is attached to VM {owner}."
        if arm_type in ("Microsoft.Network/networkSecurityGroups", "Microsoft.Network/virtualNetworks",
                        "Microsoft.Network/virtualNetworks/subnets"):
            for nic in self.held_of("Microsoft.Network/networkInterfaces"):
                refs = [(nic["properties"].get("networkSecurityGroup") or {}).get("id", "")]
                refs += [(c["properties"].get("subnet") or {}).get("id", "") for c in nic["properties"]["ipConfigurations"]]
                if any(x.lower() == key or x.lower().startswith(key + "/") for x in refs if x):
                    code = "InUseNetworkSecurityGroupCannotBeDeleted" if "Security" in arm_type else "InUseSubnetCannotBeDeleted"
                    return f"400 {code}: {r['id']} is in use by {nic['id']}."
        return None

    def _failing_delete(self, arm_type: str) -> None:
        if self.fail_deletes.get(arm_type, 0) > 0:
            self.fail_deletes[arm_type] -= 1
            raise ArmError(500, "InternalServerError", "An internal server error occurred. Please try again later.")

    def _delete(self, arm_type: str, key: str):
        if key not in self.store:
            return 204, None, {}
        self._failing_delete(arm_type)
        why = self._in_use(key, arm_type)
        if why:
            status, rest = why.split(" ", 1)
            code, message = rest.split(": ", 1)
            raise ArmError(int(status), code, message)
        r = self.store.pop(key)
        if arm_type == "Microsoft.Compute/virtualMachines":
            self.power.pop(key, None)
            self.generalized.discard(key)
            props = r["properties"]
            osd = props["storageProfile"]["osDisk"]
            disk = osd["managedDisk"]["id"].lower()
            if osd.get("deleteOption") == "Delete":
                self.store.pop(disk, None)
            elif disk in self.store:
                self.store[disk]["managedBy"] = None
            for ref in props["networkProfile"]["networkInterfaces"]:
                nic = self.store.get(ref["id"].lower())
                if nic is None:
                    continue
                if (ref.get("properties") or {}).get("deleteOption") == "Delete":
                    del self.store[ref["id"].lower()]
                else:
                    nic["properties"]["virtualMachine"] = None
        if arm_type == "Microsoft.Network/virtualNetworks":
            for k in [k for k in self.store if k.startswith(key + "/")]:
                del self.store[k]
        return 200, None, {}

    # --- quota and SKUs ------------------------------------------------------------------

    def _usages(self, region: str) -> list[dict]:
        used = self.usage(region)
        names = [("cores", "Total Regional vCPUs"), (LOW_PRIORITY, "Total Regional Spot vCPUs")] + [(s.family, s.family.replace("standard", "Standard ").replace("Family", " Family vCPUs")) for s in self.skus]
        seen, out = set(), []
        for value, local in names:
            if value in seen:
                continue
            seen.add(value)
            out.append({"unit": "Count", "currentValue": used.get(value, 0), "limit": self.limit(value),
                        "name": {"value": value, "localizedValue": local}})
        return out

    def _sku_list(self, flt: str | None) -> list[dict]:
        region = None
        if flt:
            head, _, value = flt.partition(" eq ")
            if head.strip() != "location" or not value.startswith("'") or not value.endswith("'"):
                raise ArmError(400, "InvalidFilter", f"the fake only filters SKUs by location eq '<region>', not {flt!r}")
            region = value.strip("'")
        regions = [region] if region else list(REGIONS)
        out = []
        for s in self.skus:
            restrictions = []
            if s.restricted:
                restrictions = [{"type": "Location", "values": regions, "reasonCode": "NotAvailableForSubscription",
                                 "restrictionInfo": {"locations": regions}}]
            out.append({
                "resourceType": "virtualMachines", "name": s.name, "tier": "Standard", "size": s.name.split("_", 1)[1],
                "family": s.family, "locations": regions,
                "locationInfo": [{"location": r, "zones": list(self.zones)} for r in regions],
                "capabilities": [{"name": "vCPUs", "value": str(s.vcpus)}, {"name": "GPUs", "value": str(s.gpus)}],
                "restrictions": restrictions,
            })
        out.append({"resourceType": "disks", "name": "Premium_LRS", "tier": "Premium", "locations": regions,
                    "capabilities": [], "restrictions": []})
        return out


def _tag_filter(flt: str) -> tuple[str, str]:
    """Parse ARM's one supported tag filter: tagName eq 'x' and tagValue eq 'y'."""
    left, sep, right = flt.partition(" and ")
    try:
        k1, v1 = (s.strip() for s in left.split(" eq "))
        k2, v2 = (s.strip() for s in right.split(" eq "))
    except ValueError:
        raise ArmError(400, "InvalidFilter", f"unsupported $filter {flt!r}") from None
    if not sep or k1 != "tagName" or k2 != "tagValue" or not (v1[0] == v1[-1] == "'" and v2[0] == v2[-1] == "'"):
        raise ArmError(400, "InvalidFilter", f"unsupported $filter {flt!r}")
    return v1[1:-1], v2[1:-1]


def make_provider(fake: FakeARM, config: dict | None = None, **kw):
    """An AzureProvider wired to `fake`: fake credential, fake transport, no sleeping, no retries."""
    from gpuplan.providers.azure import AzureProvider

    return AzureProvider(
        {"subscription_id": fake.subscription, **(config or {})},
        credential=FakeCredential(), transport=fake.transport(), polling_interval=0, retry_total=0, **kw,
    )


# --- over loopback HTTP (benchmarks/chaos.py: gpuplan in child processes, the fake in the parent) ---

class ArmServer:
    """Serves a FakeARM on http://127.0.0.1:<port>, so a gpuplan in another process reaches it
    through `loopback_transport(server.root)`; each request is handed to the fake as the
    https://management.azure.com request it stands for. `fake` may be swapped between requests."""

    def __init__(self, fake: FakeARM) -> None:
        self.fake = fake
        self._httpd = None
        self.root = ""

    def start(self) -> None:
        from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

        server = self

        class Handler(BaseHTTPRequestHandler):
            def _any(self) -> None:
                size = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(size) if size else None
                headers = {k: v for k, v in self.headers.items() if k.lower() not in ("host", "content-length")}
                request = requests.Request(self.command, f"https://{HOST}{self.path}", data=body, headers=headers).prepare()
                response = server.fake.send(request)
                data = response.content
                self.send_response(response.status_code)
                for k, v in response.headers.items():
                    if k.lower() not in ("content-length", "server", "date"):
                        self.send_header(k, v)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                if self.command != "HEAD":
                    self.wfile.write(data)

            do_GET = do_PUT = do_POST = do_DELETE = do_PATCH = do_HEAD = _any

            def log_message(self, *args) -> None:
                pass

        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._httpd.daemon_threads = True
        self.root = f"http://127.0.0.1:{self._httpd.server_address[1]}"
        threading.Thread(target=self._httpd.serve_forever, daemon=True).start()

    def stop(self) -> None:
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()
            self._httpd = None


class _Loopback(HTTPAdapter):
    """Sends every request (ARM's absolute URLs, LRO polls included) to an ArmServer's root."""

    def __init__(self, root: str) -> None:
        super().__init__()
        self.root = root

    def send(self, request, **kwargs):
        url = urlsplit(request.url)
        request = request.copy()
        request.url = self.root + url.path + (f"?{url.query}" if url.query else "")
        request.headers.pop("Host", None)
        return super().send(request, **kwargs)


def loopback_transport(root: str):
    """A RequestsTransport whose session sends everything to the ArmServer at `root`."""
    from azure.core.pipeline.transport import RequestsTransport

    session = requests.Session()
    adapter = _Loopback(root)
    session.mount("https://", adapter)
    session.mount("http://", adapter)
    return RequestsTransport(session=session, session_owner=False)
