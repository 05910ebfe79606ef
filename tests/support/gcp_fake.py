"""A stateful stand-in for the Compute Engine REST API (v1), served over real HTTP on 127.0.0.1, so
the real google-cloud-compute clients (REST transport, `api_endpoint` pointed here) send every
byte through their own serializers and extended-operation pollers.

It knows only what gpuplan's GCP provider calls: projects.get (project quotas), regions.get
(zones, regional quotas), machineTypes.get, acceleratorTypes.get, instances
insert/get/aggregatedList/delete/stop/getSerialPortOutput, disks aggregatedList/delete,
firewalls insert/get/list/patch/delete, images insert/get/list/delete, and zone and global
operations. Anything else answers 404 with reason "fakeUnknownPath" (recorded in `unknown`), never a
silent success.

Operations are RUNNING for `delay_s` after they are made and then DONE. An instance exists
from its insert on: PROVISIONING (no address, counted in no quota) until the insert's operation
is done, then RUNNING with an external address, and its serial console shows cloud-init's
host-key block one more `delay_s` later; an insert that fails removes it, as GCE does. Failure
switches:

    fake.fail_insert_at = 3                   # the 3rd instance insert's operation fails ...
    fake.fail_error = ("ZONE_RESOURCE_POOL_EXHAUSTED", "The zone ... does not have enough resources ...", 503)
    fake.fail_next("firewalls.delete", 2)     # the 2nd firewall delete from now fails (its operation)
    fake.stockouts["asia-northeast1-a"] = 2   # that zone grants 2 more inserts, then stocks out
    fake.new_project()                        # every GPU quota 0, as in a new project
    fake.quotas["asia-northeast1"]["NVIDIA_T4_GPUS"] = 2

fail_next knows instances.insert, instances.delete and firewalls.delete; what a failed delete
targeted stays (an instance RUNNING again).

Quota is enforced when an insert's operation completes (QUOTA_EXCEEDED, as GCE reports it in the
operation's error); usage is counted from the instances the fake holds. The error codes and the
HTTP status of failed operations are the fake's reading of the Compute Engine docs, not captured
from the live API.
"""

from __future__ import annotations

import itertools
import json
import re
import threading
import time
from http.server import BaseHTTPRequestHandler
from urllib.parse import parse_qs, urlsplit

from support.fake_api import FakeApiServer

PROJECT = "gpuplan-test"
ZONES = {
    "asia-northeast1": ("asia-northeast1-a", "asia-northeast1-b", "asia-northeast1-c"),
    "asia-northeast2": ("asia-northeast2-a", "asia-northeast2-b", "asia-northeast2-c"),
    "us-central1": ("us-central1-a", "us-central1-b", "us-central1-c", "us-central1-f"),
}
# Where each accelerator is offered (zones per skypilot-org/skypilot-catalog catalogs/v8/gcp/vms.csv
# @8427bbff; asia-northeast2 has none there).
ACCELERATORS = {
    "nvidia-tesla-t4": ("asia-northeast1-a", "asia-northeast1-c", "us-central1-a", "us-central1-b", "us-central1-c",
                        "us-central1-f"),
    "nvidia-l4": ("asia-northeast1-a", "asia-northeast1-b", "asia-northeast1-c", "us-central1-a", "us-central1-b",
                  "us-central1-c"),
    "nvidia-tesla-a100": ("asia-northeast1-a", "asia-northeast1-c", "us-central1-a", "us-central1-b", "us-central1-c",
                          "us-central1-f"),
    "nvidia-h100-80gb": ("asia-northeast1-b", "us-central1-a", "us-central1-b", "us-central1-c"),
}
# machine type -> (vCPUs, built-in accelerator, count)
MACHINE_TYPES = {
    "n1-standard-4": (4, "", 0), "n1-standard-8": (8, "", 0), "n1-standard-16": (16, "", 0),
    "g2-standard-4": (4, "nvidia-l4", 1), "g2-standard-8": (8, "nvidia-l4", 1), "g2-standard-24": (24, "nvidia-l4", 2),
    "a2-highgpu-1g": (12, "nvidia-tesla-a100", 1), "a3-highgpu-8g": (208, "nvidia-h100-80gb", 8),
}
GPU_METRIC = {"nvidia-tesla-t4": "NVIDIA_T4_GPUS", "nvidia-l4": "NVIDIA_L4_GPUS",
              "nvidia-tesla-a100": "NVIDIA_A100_GPUS", "nvidia-h100-80gb": "NVIDIA_H100_GPUS"}
_BASE = re.compile(r"^/compute/v1/projects/(?P<project>[^/]+)(?:/(?P<rest>.*))?$")


class GceError(Exception):
    def __init__(self, status: int, reason: str, message: str) -> None:
        super().__init__(message)
        self.status, self.reason, self.message = status, reason, message


def _default_quotas() -> dict[str, dict[str, int]]:
    regional = {"CPUS": 96, "PREEMPTIBLE_CPUS": 0, "A2_CPUS": 48, "G2_CPUS": 48, "A3_CPUS": 208,
                **{m: 8 for m in GPU_METRIC.values()}}
    return {"global": {"GPUS_ALL_REGIONS": 16}, **{r: dict(regional) for r in ZONES}}


class GceFake(FakeApiServer):
    def __init__(self, project: str = PROJECT, delay_s: float = 0.02) -> None:
        self.project, self.delay_s = project, delay_s
        self.token = self.secret = ""
        self.lock = threading.RLock()
        self._ids = itertools.count(4_100_000_000_000_000_001)
        self._ips = itertools.count(10)
        self.quotas = _default_quotas()
        self.instances: dict[tuple[str, str], dict] = {}  # (zone, name) -> resource
        self.disks: dict[tuple[str, str], dict] = {}
        self.firewalls: dict[str, dict] = {}
        self.images: dict[str, dict] = {}
        self.operations: dict[str, dict] = {}
        self._pending: list[tuple[float, object]] = []  # (when, callable) run by _tick
        self.requests: list[tuple[str, str]] = []
        self.unknown: list[str] = []
        self.fail_insert_at: int | None = None
        self.fail_error: tuple[str, str, int] = (
            "ZONE_RESOURCE_POOL_EXHAUSTED",
            "The zone 'projects/{project}/zones/{zone}' does not have enough resources available to fulfill the request.",
            503)
        # Zonal stockouts: zone -> how many more instance inserts it grants before their operations
        # fail with ZONE_RESOURCE_POOL_EXHAUSTED (0: it refuses outright).
        self.stockouts: dict[str, int] = {}
        self.inserts = 0
        self.insert_bodies: list[dict] = []  # each instances.insert body as received, in order
        self._failing: dict[str, tuple[int, tuple[str, str, int]]] = {}  # kind -> (calls to go, error)
        self.root = ""

    # --- wiring ------------------------------------------------------------------------------

    def start(self) -> str:
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *a):  # quiet
                pass

            def _handle(self):
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                status, payload = fake.handle(self.command, self.path, body)
                data = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json; charset=UTF-8")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = _handle

        self.root = self._serve(Handler)
        return self.root

    def provider(self, config: dict | None = None, **kw):
        """A GcpProvider wired to this fake: anonymous credentials, 2 ms polls."""
        from google.auth.credentials import AnonymousCredentials

        from gpuplan.providers.gcp import GcpProvider

        kw.setdefault("poll_s", 0.002)
        return GcpProvider({"project": self.project, **(config or {})}, credentials=AnonymousCredentials(),
                           api_endpoint=self.root, **kw)

    # --- what a test asks or sets --------------------------------------------------------------

    def new_project(self) -> None:
        """Every GPU quota 0, as Compute Engine grants a new project."""
        with self.lock:
            self.quotas["global"]["GPUS_ALL_REGIONS"] = 0
            for region in ZONES:
                for metric in GPU_METRIC.values():
                    self.quotas[region][metric] = 0

    def held(self) -> list[str]:
        """Every billable or blocking thing the fake holds (instances, disks, firewall rules, images)."""
        with self.lock:
            self._tick()
            return sorted([f"zones/{z}/instances/{n}" for z, n in self.instances]
                          + [f"zones/{z}/disks/{n}" for z, n in self.disks]
                          + [f"global/firewalls/{n}" for n in self.firewalls]
                          + [f"global/images/{n}" for n in self.images])

    def count(self, method: str, fragment: str) -> int:
        return sum(1 for m, p in self.requests if m == method and fragment in p)

    def fail_next(self, kind: str, nth: int = 1, error: tuple[str, str, int] | None = None) -> None:
        """Make the nth operation of `kind` (instances.insert, instances.delete, firewalls.delete)
        from now end in `error` (default: the insert's stockout, or a delete's internal error)."""
        if kind not in ("instances.insert", "instances.delete", "firewalls.delete"):
            raise ValueError(f"fake: cannot fail {kind}")
        default = self.fail_error if kind == "instances.insert" else (
            "INTERNAL_ERROR", "Internal error. Please try again or contact Google Support. (injected)", 500)
        with self.lock:
            self._failing[kind] = (nth, error or default)

    def clear_failures(self) -> None:
        with self.lock:
            self._failing.clear()
            self.fail_insert_at = None
            self.stockouts = {}

    def _failure(self, kind: str) -> tuple[str, str, int] | None:
        """The error this call of `kind` ends in, counting it against fail_next."""
        if kind not in self._failing:
            return None
        left, error = self._failing[kind]
        if left > 1:
            self._failing[kind] = (left - 1, error)
            return None
        del self._failing[kind]
        return error

    # --- dispatch ------------------------------------------------------------------------------

    def handle(self, method: str, raw_path: str, raw_body: bytes) -> tuple[int, dict]:
        url = urlsplit(raw_path)
        query = {k: v[0] for k, v in parse_qs(url.query).items()}
        with self.lock:
            self._tick()
            self.requests.append((method, url.path))
            try:
                m = _BASE.match(url.path)
                if not m:
                    raise GceError(404, "fakeUnknownPath", f"fake: no such path {url.path}")
                body = json.loads(raw_body) if raw_body else {}
                if m["project"] == "ubuntu-os-cloud":
                    raise GceError(404, "fakeUnknownPath", f"fake: public images are not served ({url.path})")
                if m["project"] != self.project:
                    raise GceError(403, "forbidden", f"Required 'compute.instances.list' permission for 'projects/{m['project']}'")
                return 200, self._route(method, (m["rest"] or "").strip("/").split("/"), query, body)
            except GceError as e:
                if e.reason == "fakeUnknownPath":
                    self.unknown.append(f"{method} {raw_path}")
                return e.status, {"error": {"code": e.status, "message": e.message,
                                            "errors": [{"message": e.message, "domain": "global", "reason": e.reason}]}}

    def _route(self, method: str, p: list[str], query: dict, body: dict) -> dict:
        if p == [""] or not p:
            if method == "GET":
                return {"kind": "compute#project", "name": self.project, "quotas": self._quota_list("global")}
        if len(p) == 2 and p[0] == "regions" and method == "GET":
            return self._region(p[1])
        if p[:1] == ["zones"] and len(p) >= 3:
            zone = p[1]
            if not any(zone in zs for zs in ZONES.values()):
                raise GceError(404, "notFound", f"The resource 'projects/{self.project}/zones/{zone}' was not found")
            return self._zonal(method, zone, p[2:], query, body)
        if p[:1] == ["global"] and len(p) >= 2:
            return self._global(method, p[1:], query, body)
        if p[:1] == ["aggregated"] and len(p) == 2 and method == "GET":
            return self._aggregated(p[1], query)
        raise GceError(404, "fakeUnknownPath", f"fake: no route for {method} {'/'.join(p)}")

    # --- regions, quotas, types ------------------------------------------------------------------

    def _usage(self, scope: str) -> dict[str, int]:
        used: dict[str, int] = {}
        for (zone, _), vm in self.instances.items():
            region = zone.rsplit("-", 1)[0]
            if scope != "global" and region != scope or vm["status"] in ("PROVISIONING", "TERMINATED", "STOPPED"):
                continue
            for metric, n in vm["_counts"].items():
                if metric == "GPUS_ALL_REGIONS" or scope != "global":
                    used[metric] = used.get(metric, 0) + n
        return used

    def _quota_list(self, scope: str) -> list[dict]:
        used = self._usage(scope)
        return [{"metric": m, "limit": float(limit), "usage": float(used.get(m, 0))}
                for m, limit in self.quotas[scope].items()]

    def _region(self, region: str) -> dict:
        if region not in ZONES:
            raise GceError(404, "notFound", f"The resource 'projects/{self.project}/regions/{region}' was not found")
        return {"kind": "compute#region", "name": region, "status": "UP",
                "zones": [f"{self.root}/compute/v1/projects/{self.project}/zones/{z}" for z in ZONES[region]],
                "quotas": self._quota_list(region)}

    def _machine_type(self, zone: str, name: str) -> dict:
        shape = MACHINE_TYPES.get(name)
        if shape is None or shape[1] and zone not in ACCELERATORS[shape[1]]:
            raise GceError(404, "notFound", f"The resource 'projects/{self.project}/zones/{zone}/machineTypes/{name}' was not found")
        cpus, acc, n = shape
        out = {"kind": "compute#machineType", "name": name, "zone": zone, "guestCpus": cpus, "memoryMb": cpus * 3840}
        if acc:
            out["accelerators"] = [{"guestAcceleratorType": acc, "guestAcceleratorCount": n}]
        return out

    # --- operations --------------------------------------------------------------------------------

    def _op(self, kind: str, target: str, zone: str | None, done, error: tuple[str, str, int] | None = None) -> dict:
        name = f"operation-{next(self._ids)}"
        op = {"kind": "compute#operation", "id": str(next(self._ids)), "name": name, "operationType": kind,
              "targetLink": target, "status": "RUNNING", "progress": 0}
        if zone:
            op["zone"] = f"{self.root}/compute/v1/projects/{self.project}/zones/{zone}"
        self.operations[name] = op

        def finish() -> None:
            err = error
            if err is None and done is not None:
                err = done()
            op["status"], op["progress"] = "DONE", 100
            if err is not None:
                code, message, http = err
                op["error"] = {"errors": [{"code": code, "message": message}]}
                op["httpErrorStatusCode"], op["httpErrorMessage"] = http, {
                    403: "FORBIDDEN", 409: "CONFLICT", 500: "INTERNAL SERVER ERROR", 503: "SERVICE UNAVAILABLE"}.get(http, "BAD REQUEST")

        self._pending.append((time.monotonic() + self.delay_s, finish))
        return dict(op)

    def _tick(self) -> None:
        now = time.monotonic()
        due = [p for p in self._pending if p[0] <= now]
        self._pending = [p for p in self._pending if p[0] > now]
        for _, fn in sorted(due, key=lambda p: p[0]):
            fn()

    def _get_op(self, name: str) -> dict:
        op = self.operations.get(name)
        if op is None:
            raise GceError(404, "notFound", f"The resource 'operations/{name}' was not found")
        return dict(op)

    # --- zonal ---------------------------------------------------------------------------------------

    def _zonal(self, method: str, zone: str, p: list[str], query: dict, body: dict) -> dict:
        kind = p[0]
        if kind == "operations" and len(p) == 2 and method == "GET":
            return self._get_op(p[1])
        if kind == "machineTypes" and len(p) == 2 and method == "GET":
            return self._machine_type(zone, p[1])
        if kind == "acceleratorTypes" and len(p) == 2 and method == "GET":
            if zone not in ACCELERATORS.get(p[1], ()):
                raise GceError(404, "notFound", f"The resource 'projects/{self.project}/zones/{zone}/acceleratorTypes/{p[1]}' was not found")
            return {"kind": "compute#acceleratorType", "name": p[1], "zone": zone}
        if kind == "instances":
            if len(p) == 1 and method == "POST":
                return self._insert(zone, body)
            if len(p) == 1 and method == "GET":
                return {"kind": "compute#instanceList", "items": [self._out(v) for (z, _), v in self.instances.items() if z == zone]}
            vm = self.instances.get((zone, p[1]))
            if vm is None:
                raise GceError(404, "notFound", f"The resource 'projects/{self.project}/zones/{zone}/instances/{p[1]}' was not found")
            if len(p) == 2 and method == "GET":
                return self._out(vm)
            if len(p) == 2 and method == "DELETE":
                return self._delete_instance(zone, vm)
            if len(p) == 3 and p[2] == "stop" and method == "POST":
                vm["status"] = "STOPPING"
                return self._op("stop", vm["selfLink"], zone, lambda: vm.update(status="TERMINATED"))
            if len(p) == 3 and p[2] == "serialPort" and method == "GET":
                return {"kind": "compute#serialPortOutput", "contents": vm["_console"] if vm["_console_at"] <= time.monotonic() else "",
                        "start": "0", "next": "1"}
        if kind == "disks" and len(p) == 2 and method == "DELETE":
            disk = self.disks.get((zone, p[1]))
            if disk is None:
                raise GceError(404, "notFound", f"The resource 'projects/{self.project}/zones/{zone}/disks/{p[1]}' was not found")
            if disk.get("users"):
                raise GceError(400, "resourceInUseByAnotherResource",
                               f"The disk resource '{p[1]}' is already being used by '{disk['users'][0]}'")
            return self._op("delete", disk["selfLink"], zone, lambda: (self.disks.pop((zone, p[1]), None), None)[1])
        raise GceError(404, "fakeUnknownPath", f"fake: no route for {method} zones/{zone}/{'/'.join(p)}")

    def _insert(self, zone: str, body: dict) -> dict:
        name = body.get("name", "")
        if not re.fullmatch(r"[a-z]([-a-z0-9]{0,61}[a-z0-9])?", name):
            raise GceError(400, "invalid", f"Invalid value for field 'resource.name': '{name}'.")
        if (zone, name) in self.instances:
            raise GceError(409, "alreadyExists", f"The resource 'projects/{self.project}/zones/{zone}/instances/{name}' already exists")
        for key, value in (body.get("labels") or {}).items():
            if not re.fullmatch(r"[a-z][a-z0-9_-]{0,62}", key) or not re.fullmatch(r"[a-z0-9_-]{0,63}", value):
                raise GceError(400, "invalid", f"Invalid value for field 'resource.labels': '{key}={value}'.")
        mt = _tail(body.get("machineType", ""))
        shape = self._machine_type(zone, mt)
        cpus = shape["guestCpus"]
        accs = [(_tail(a["acceleratorType"]), int(a.get("acceleratorCount", 1))) for a in body.get("guestAccelerators") or []]
        accs += [(a["guestAcceleratorType"], a["guestAcceleratorCount"]) for a in shape.get("accelerators", [])]
        for acc, _ in accs:
            if zone not in ACCELERATORS.get(acc, ()):
                raise GceError(400, "invalid", f"Invalid value for field 'resource.guestAccelerators[0].acceleratorType': '{acc}'")
        scheduling = body.get("scheduling") or {}
        if accs and scheduling.get("onHostMaintenance") != "TERMINATE":
            raise GceError(400, "invalid", "Instances with guest accelerators do not support live migration.")
        _check_scheduling(scheduling)
        [boot] = [d for d in body.get("disks") or [] if d.get("boot")]
        image = (boot.get("initializeParams") or {}).get("sourceImage", "")
        if not (image.startswith("projects/ubuntu-os-cloud/global/images/") or _tail(image) in self.images):
            raise GceError(404, "notFound", f"The resource '{image}' was not found")
        spot = (body.get("scheduling") or {}).get("provisioningModel") == "SPOT"
        region = zone.rsplit("-", 1)[0]
        counts: dict[str, int] = {}
        family = mt.split("-", 1)[0].upper()
        cpu_metric = f"{family}_CPUS" if f"{family}_CPUS" in self.quotas[region] else "CPUS"
        counts[("PREEMPTIBLE_" if spot and self.quotas[region].get("PREEMPTIBLE_" + cpu_metric, 0) > 0 else "") + cpu_metric] = cpus
        for acc, n in accs:
            metric = GPU_METRIC[acc]
            if spot and self.quotas[region].get("PREEMPTIBLE_" + metric, 0) > 0:
                metric = "PREEMPTIBLE_" + metric
            counts[metric] = counts.get(metric, 0) + n
            counts["GPUS_ALL_REGIONS"] = counts.get("GPUS_ALL_REGIONS", 0) + n
        self.inserts += 1
        self.insert_bodies.append(body)
        link = f"{self.root}/compute/v1/projects/{self.project}/zones/{zone}/instances/{name}"
        fail = self._failure("instances.insert")
        if self.fail_insert_at == self.inserts:
            fail = self.fail_error
        if zone in self.stockouts:
            if self.stockouts[zone] <= 0:
                fail = fail or (
                    "ZONE_RESOURCE_POOL_EXHAUSTED",
                    "The zone 'projects/{project}/zones/{zone}' does not have enough resources available to fulfill "
                    "the request.  Try a different zone, or try again later.", 503)
            else:
                self.stockouts[zone] -= 1
        vm = {"kind": "compute#instance", "id": str(next(self._ids)), "name": name, "zone": zone,
              "machineType": f"{self.root}/compute/v1/projects/{self.project}/zones/{zone}/machineTypes/{mt}",
              "status": "PROVISIONING", "labels": body.get("labels") or {}, "description": body.get("description", ""),
              "tags": body.get("tags") or {}, "metadata": body.get("metadata") or {}, "scheduling": body.get("scheduling") or {},
              "guestAccelerators": body.get("guestAccelerators") or [], "selfLink": link,
              "networkInterfaces": [{"network": (body.get("networkInterfaces") or [{}])[0].get("network", ""),
                                     "networkIP": f"10.146.0.{next(self._ips)}", "accessConfigs": []}],
              "disks": [{"boot": True, "autoDelete": bool(boot.get("autoDelete")), "deviceName": name,
                         "source": f"{self.root}/compute/v1/projects/{self.project}/zones/{zone}/disks/{name}"}],
              "_counts": counts, "_boot": boot, "_console": "", "_console_at": 0.0}

        def done():
            if self.instances.get((zone, name)) is not vm:
                return None  # deleted while it was provisioning
            if fail is not None:
                del self.instances[(zone, name)]
                code, message, http = fail
                return code, message.format(project=self.project, zone=zone), http
            over = self._over_quota(region, counts)
            if over:
                del self.instances[(zone, name)]
                return over
            ip = f"203.0.113.{next(self._ips)}"
            if vm["status"] == "PROVISIONING":  # not a delete under way
                vm["status"] = "RUNNING"
            vm["networkInterfaces"][0]["accessConfigs"] = [{"type": "ONE_TO_ONE_NAT", "name": "External NAT", "natIP": ip}]
            key = _ed25519_blob(f"{zone}/{name}/{vm['id']}")
            vm["_console"] = (f"[   12.3] cloud-init[812]: Cloud-init v. 24.4 running 'modules:final'\n"
                              f"-----BEGIN SSH HOST KEY KEYS-----\necdsa-sha2-nistp256 AAAAE2VjZHNh root@{name}\n"
                              f"ssh-ed25519 {key} root@{name}\n-----END SSH HOST KEY KEYS-----\n")
            vm["_console_at"] = time.monotonic() + self.delay_s
            init = boot.get("initializeParams") or {}
            self.disks[(zone, name)] = {
                "kind": "compute#disk", "id": str(next(self._ids)), "name": name, "zone": zone,
                "sizeGb": str(init.get("diskSizeGb", 10)), "labels": init.get("labels") or {},
                "description": init.get("description", ""), "sourceImage": image, "status": "READY",
                "selfLink": vm["disks"][0]["source"], "users": [link], "_auto_delete": bool(boot.get("autoDelete"))}
            return None

        self.instances[(zone, name)] = vm
        return self._op("insert", link, zone, done)

    def _over_quota(self, region: str, counts: dict[str, int]) -> tuple[str, str, int] | None:
        for metric, n in counts.items():
            scope = "global" if metric == "GPUS_ALL_REGIONS" else region
            limit = self.quotas[scope].get(metric, 0)
            used = self._usage(scope).get(metric, 0)
            if used + n > limit:
                where = "globally" if scope == "global" else f"in region {region}"
                return "QUOTA_EXCEEDED", f"Quota '{metric}' exceeded.  Limit: {float(limit)} {where}.", 403
        return None

    def _delete_instance(self, zone: str, vm: dict) -> dict:
        was, vm["status"] = vm["status"], "STOPPING"
        fail = self._failure("instances.delete")

        def done():
            if fail is not None:
                vm["status"] = "RUNNING" if vm["networkInterfaces"][0]["accessConfigs"] else was
                return fail
            self.instances.pop((zone, vm["name"]), None)
            disk = self.disks.get((zone, vm["name"]))
            if disk is not None:
                disk["users"] = []
                if disk["_auto_delete"]:
                    self.disks.pop((zone, vm["name"]), None)
            return None

        return self._op("delete", vm["selfLink"], zone, done)

    # --- global ------------------------------------------------------------------------------------

    def _global(self, method: str, p: list[str], query: dict, body: dict) -> dict:
        kind = p[0]
        if kind == "operations" and len(p) == 2 and method == "GET":
            return self._get_op(p[1])
        if kind == "firewalls":
            return self._firewall(method, p[1:], body)
        if kind == "images":
            return self._image(method, p[1:], query, body)
        raise GceError(404, "fakeUnknownPath", f"fake: no route for {method} global/{'/'.join(p)}")

    def _firewall(self, method: str, p: list[str], body: dict) -> dict:
        if not p and method == "GET":
            return {"kind": "compute#firewallList", "items": [dict(f) for f in self.firewalls.values()]}
        if not p and method == "POST":
            name = body.get("name", "")
            if name in self.firewalls:
                raise GceError(409, "alreadyExists", f"The resource 'projects/{self.project}/global/firewalls/{name}' already exists")
            if not body.get("targetTags") or not (body.get("sourceRanges") or body.get("sourceTags")):
                raise GceError(400, "invalid", "fake: a gpuplan rule has target tags and a source")
            link = f"{self.root}/compute/v1/projects/{self.project}/global/firewalls/{name}"
            rule = {**body, "kind": "compute#firewall", "id": str(next(self._ids)), "selfLink": link}
            return self._op("insert", link, None, lambda: (self.firewalls.__setitem__(name, rule), None)[1])
        rule = self.firewalls.get(p[0]) if p else None
        if rule is None:
            raise GceError(404, "notFound", f"The resource 'projects/{self.project}/global/firewalls/{p[0] if p else ''}' was not found")
        if method == "GET":
            return dict(rule)
        if method == "PATCH":
            return self._op("patch", rule["selfLink"], None, lambda: (rule.update(body), None)[1])
        if method == "DELETE":
            fail = self._failure("firewalls.delete")
            return self._op("delete", rule["selfLink"], None, lambda: fail or (self.firewalls.pop(p[0], None), None)[1])
        raise GceError(404, "fakeUnknownPath", f"fake: no route for {method} firewalls")

    def _image(self, method: str, p: list[str], query: dict, body: dict) -> dict:
        if not p and method == "GET":
            want = _label_filter(query.get("filter", ""))
            return {"kind": "compute#imageList", "items": [
                dict(i) for i in self.images.values() if all(i.get("labels", {}).get(k) == v for k, v in want.items())]}
        if not p and method == "POST":
            name = body.get("name", "")
            if name in self.images:
                raise GceError(409, "alreadyExists", f"The resource 'projects/{self.project}/global/images/{name}' already exists")
            zone, disk = _zone_of(body.get("sourceDisk", ""))
            source = self.disks.get((zone, disk))
            if source is None:
                raise GceError(404, "notFound", f"The resource '{body.get('sourceDisk')}' was not found")
            users = [u for u in source["users"] if self.instances.get((zone, _tail(u)), {}).get("status") == "RUNNING"]
            if users:
                raise GceError(400, "resourceInUseByAnotherResource",
                               f"The disk resource '{disk}' is already being used by '{users[0]}'")
            link = f"{self.root}/compute/v1/projects/{self.project}/global/images/{name}"
            image = {**body, "kind": "compute#image", "id": str(next(self._ids)), "status": "READY", "selfLink": link}
            return self._op("insert", link, None, lambda: (self.images.__setitem__(name, image), None)[1])
        image = self.images.get(p[0]) if p else None
        if image is None:
            raise GceError(404, "notFound", f"The resource 'projects/{self.project}/global/images/{p[0] if p else ''}' was not found")
        if method == "GET":
            return dict(image)
        if method == "DELETE":
            return self._op("delete", image["selfLink"], None, lambda: (self.images.pop(p[0], None), None)[1])
        raise GceError(404, "fakeUnknownPath", f"fake: no route for {method} images")

    # --- aggregated ----------------------------------------------------------------------------------

    def _aggregated(self, kind: str, query: dict) -> dict:
        want = _label_filter(query.get("filter", ""))
        table = {"instances": self.instances, "disks": self.disks}.get(kind)
        if table is None:
            raise GceError(404, "fakeUnknownPath", f"fake: no aggregated {kind}")
        items: dict[str, dict] = {}
        for (zone, _), r in table.items():
            if all(r.get("labels", {}).get(k) == v for k, v in want.items()):
                items.setdefault(f"zones/{zone}", {kind: []})[kind].append(self._out(r))
        return {"kind": f"compute#{kind[:-1]}AggregatedList", "items": items}

    def _out(self, r: dict) -> dict:
        return {k: v for k, v in r.items() if not k.startswith("_")}


def _check_scheduling(scheduling: dict) -> None:
    """What Compute Engine documents for Spot and time limits: a preemptible machine's only
    onHostMaintenance is TERMINATE (the Scheduling.OnHostMaintenance reference); a time limit
    (maxRunDuration) runs the instanceTerminationAction, 30 s to 120 days ("Limit the run time
    of a VM"). That a Spot machine must not restart automatically is the fake's reading (Google's
    Spot sample sets automatic_restart false)."""
    spot = scheduling.get("provisioningModel") == "SPOT"
    if spot and scheduling.get("onHostMaintenance", "TERMINATE") != "TERMINATE":
        raise GceError(400, "invalid", "Invalid value for field 'resource.scheduling.onHostMaintenance': 'MIGRATE'. "
                                       "Spot VMs can only be terminated on host maintenance.")
    if spot and scheduling.get("automaticRestart"):
        raise GceError(400, "invalid", "Invalid value for field 'resource.scheduling.automaticRestart': 'true'. "
                                       "Spot VMs cannot be restarted automatically.")
    action = scheduling.get("instanceTerminationAction")
    if action is not None and action not in ("STOP", "DELETE"):
        raise GceError(400, "invalid", f"Invalid value for field 'resource.scheduling.instanceTerminationAction': '{action}'.")
    run = scheduling.get("maxRunDuration")
    if run is not None:
        seconds = int(run.get("seconds", 0))
        if action is None:
            raise GceError(400, "invalid", "maxRunDuration needs an instanceTerminationAction.")
        if not 30 <= seconds <= 120 * 24 * 3600:
            raise GceError(400, "invalid", f"Invalid value for field 'resource.scheduling.maxRunDuration.seconds': '{seconds}'.")


def _ed25519_blob(seed: str) -> str:
    """A well-formed OpenSSH ed25519 public key blob (base64), its 32 key bytes derived from `seed`."""
    import base64
    import hashlib
    import struct

    kind = b"ssh-ed25519"
    raw = hashlib.sha256(seed.encode()).digest()
    return base64.b64encode(struct.pack(">I", len(kind)) + kind + struct.pack(">I", len(raw)) + raw).decode()


def _tail(url: str) -> str:
    return url.rstrip("/").rsplit("/", 1)[-1]


def _zone_of(url: str) -> tuple[str, str]:
    parts = url.rstrip("/").split("/")
    i = parts.index("zones") if "zones" in parts else -1
    return (parts[i + 1], parts[i + 3]) if i >= 0 and len(parts) > i + 3 else ("", "")


def _label_filter(flt: str) -> dict[str, str]:
    """labels.KEY = "VALUE" terms joined by AND (all the provider sends); anything else is a 400."""
    if not flt.strip():
        return {}
    out = {}
    for term in re.split(r"\s+AND\s+", flt.strip()):
        m = re.fullmatch(r'labels\.([a-z][a-z0-9_-]*)\s*=\s*"([^"]*)"', term.strip())
        if not m:
            raise GceError(400, "invalid", f"fake: unsupported filter term {term!r}")
        out[m[1]] = m[2]
    return out
