"""A stateful stand-in for the Sakura Cloud IaaS API (the parts gpuplan's provider calls),
served over real HTTP on 127.0.0.1 so an in-process provider and a CLI subprocess can share it.

Modelled on sacloud/iaas-api-go's fake (fake/ops_server.go, fake/timer.go, fake/init.go):
disks and archives are "migrating" for a few milliseconds before "available", booting a running
server is a 409 Conflict, deleting a running server is a 409, seeded plans include
"GPUプラン/4Core-56GB-1GPU". It fails closed: an unknown path answers 404 with error_code
"fake_unknown_path" and is recorded in `unknown`, an unsupported Filter key answers 400.

    fake = SakuraFake(); root = fake.start()   # set SAKURACLOUD_API_ROOT_URL=root
    fake.fail_server_create_at = 3             # the 3rd POST server answers 500
    fake.fail_503(2, "POST", "server")         # the next 2 matching requests answer 503
    fake.server_limit = 2                      # POST server beyond 2 servers: 409 limit
    fake.user_resources()                      # what is left (servers, disks, user archives,
                                               # switches, packet filters)

Switches and packet filters (issue 22) follow iaas-api-go's `switch`, `packetfilter` and
`interface/{id}/to/packetfilter/{pf}` operations: a server created with
`ConnectedSwitches: [{"Scope": "shared"}, {"ID": switch}]` gets a second NIC on the switch; a
switch with servers connected, or a packet filter attached to a NIC, cannot be deleted (409).
A packet filter holds at most 30 rules and has no tags (its Description carries them).
"""

from __future__ import annotations

import base64
import itertools
import json
import re
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import unquote

from support.fake_api import FakeApiServer

ZONES = ("is1a", "is1b", "is1c", "tk1a", "tk1b", "tk1v")
GPU_ZONES = ("is1a", "is1b")
_PATH = re.compile(r"^.*?/(?P<zone>[a-z0-9]+)/api/cloud/1\.1/(?P<path>[^?]*)$")
_FILTER_KEYS = {"Tags", "Scope", "Name", "Availability", "ID"}

PLANS = [
    {"Name": "プラン/2Core-4GB", "CPU": 2, "MemoryMB": 4 * 1024, "GPU": 0, "GPUModel": "", "gpu_only": False},
    {"Name": "GPUプラン/4Core-56GB-1GPU", "CPU": 4, "MemoryMB": 56 * 1024, "GPU": 1, "GPUModel": "", "gpu_only": True},
    {"Name": "GPUプラン/24Core-240GB-1GPU", "CPU": 24, "MemoryMB": 240 * 1024, "GPU": 1,
     "GPUModel": "nvidia_h100_80gbvram", "gpu_only": True},
]


class SakuraError(Exception):
    def __init__(self, status: int, code: str, msg: str) -> None:
        super().__init__(msg)
        self.status, self.code, self.msg = status, code, msg


class SakuraFake(FakeApiServer):
    def __init__(self, token: str = "fake-token", secret: str = "fake-secret", delay_s: float = 0.03) -> None:
        self.token, self.secret, self.delay_s = token, secret, delay_s
        self.lock = threading.RLock()
        self._ids = itertools.count(113000000001)
        self._ips = itertools.count(10)
        self.plans: dict[str, list[dict]] = {}
        self.servers: dict[str, dict] = {}
        self.disks: dict[str, dict] = {}
        self.archives: dict[str, dict] = {}
        self.switches: dict[str, dict] = {}
        self.packet_filters: dict[str, dict] = {}
        self.disk_config: dict[str, dict] = {}
        self.boot_user_data: dict[str, str] = {}
        self._due: list[tuple[float, dict, str, str]] = []  # (when, resource, field path, value)
        self.requests: list[tuple[str, str, str, object]] = []  # (method, zone, path, query or body)
        self.unknown: list[str] = []
        self.fail_server_create_at: int | None = None
        self.server_limit: int | None = None
        self.server_creates = 0
        self._fail_503: list[list] = []  # [remaining, method, path, status]
        for zone in ZONES:
            self.plans[zone] = [
                {"ID": str(next(self._ids)), "Availability": "available",
                 **{k: v for k, v in p.items() if k != "gpu_only"}}
                for p in PLANS if zone in GPU_ZONES or not p["gpu_only"]
            ]
            for name, tags in (("Ubuntu Server 24.04.1 LTS 64bit", ["current-stable", "distro-ubuntu", "os-linux"]),
                               ("Debian GNU/Linux 12.8 64bit", ["current-stable", "distro-debian", "os-linux"])):
                aid = str(next(self._ids))
                self.archives[aid] = {"ID": aid, "Name": name, "Scope": "shared", "Tags": tags, "SizeMB": 20480,
                                      "Availability": "available", "Zone": {"Name": zone},
                                      "CreatedAt": "2026-10-01T00:00:00+09:00"}
        self._httpd: ThreadingHTTPServer | None = None

    # --- control ------------------------------------------------------------------------

    def start(self) -> str:
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *a):  # quiet
                pass

            def _handle(self):
                status, payload = fake.handle(self.command, self.path, self.headers.get("Authorization", ""),
                                              self.rfile.read(int(self.headers.get("Content-Length") or 0)))
                data = json.dumps(payload, ensure_ascii=False).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json; charset=UTF-8")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            do_GET = do_POST = do_PUT = do_DELETE = _handle

        base = self._serve(Handler)
        return f"{base}/cloud/zone"


    def fail_503(self, times: int, method: str | None = None, path: str | None = None, status: int = 503) -> None:
        """The next `times` requests matching method/path (None = any) answer 503 (or `status`)."""
        with self.lock:
            self._fail_503.append([times, method, path, status])

    def user_resources(self, tag: str | None = None) -> dict[str, list[dict]]:
        """Everything an account owns (servers, disks, user archives), optionally only with `tag`."""
        with self.lock:
            self._tick()
            def pick(r: dict) -> bool:
                return tag is None or tag in r.get("Tags", [])

            return {"servers": [s for s in self.servers.values() if pick(s)],
                    "disks": [d for d in self.disks.values() if pick(d)],
                    "archives": [a for a in self.archives.values() if a["Scope"] == "user" and pick(a)],
                    "switches": [w for w in self.switches.values() if pick(w)],
                    "packet_filters": [f for f in self.packet_filters.values()
                                       if tag is None or tag in f.get("Description", "").split()]}

    def nics(self, server_id: str) -> list[dict]:
        """The server's interfaces as the API shows them (shared segment first)."""
        with self.lock:
            return [dict(n) for n in self.servers[server_id]["Interfaces"]]

    def count(self, method: str, path_prefix: str) -> int:
        return sum(1 for m, _, p, _ in self.requests if m == method and p.startswith(path_prefix))

    # --- dispatch -------------------------------------------------------------------------

    def handle(self, method: str, raw_path: str, auth: str, raw_body: bytes) -> tuple[int, dict]:
        path, _, query = raw_path.partition("?")
        m = _PATH.match(path)
        with self.lock:
            self._tick()
            try:
                if not m or m["zone"] not in ZONES:
                    self.unknown.append(f"{method} {raw_path}")
                    raise SakuraError(404, "fake_unknown_path", f"fake: no such path {path}")
                zone, rpath = m["zone"], m["path"].rstrip("/")
                self._auth(auth)
                try:
                    params = json.loads(unquote(query)) if query else {}
                    body = json.loads(raw_body) if raw_body else {}
                except ValueError as exc:
                    raise SakuraError(400, "bad_request", f"fake: not JSON ({exc})") from exc
                self.requests.append((method, zone, rpath, params if method == "GET" else body))
                for rule in self._fail_503:
                    if rule[0] > 0 and rule[1] in (None, method) and rule[2] in (None, rpath):
                        rule[0] -= 1
                        raise SakuraError(rule[3], "service_unavailable" if rule[3] == 503 else "locked",
                                          f"fake: injected {rule[3]}")
                return 200, self._route(method, zone, rpath, params, body)
            except SakuraError as e:
                return e.status, {"is_fatal": True, "serial": "fake", "status": f"{e.status}",
                                  "error_code": e.code, "error_msg": e.msg}

    def _auth(self, header: str) -> None:
        want = "Basic " + base64.b64encode(f"{self.token}:{self.secret}".encode()).decode()
        if header != want:
            raise SakuraError(401, "unauthorized", "認証に失敗しました (fake)")

    def _route(self, method: str, zone: str, path: str, params: dict, body: dict) -> dict:
        parts = path.split("/")
        table = {"server": self.servers, "disk": self.disks, "archive": self.archives, "switch": self.switches,
                 "packetfilter": self.packet_filters}
        keys = {"server": "Servers", "disk": "Disks", "archive": "Archives", "switch": "Switches",
                "packetfilter": "PacketFilters"}
        envelope = {"server": "Server", "disk": "Disk", "archive": "Archive", "switch": "Switch",
                    "packetfilter": "PacketFilter"}
        if method == "GET" and path == "product/server":
            return self._list(self.plans[zone], params, "ServerPlans")
        if parts[0] == "interface" and len(parts) >= 2:
            return self._interface(zone, method, parts, body)
        if len(parts) == 1 and parts[0] in table:
            if method == "GET":
                return self._list([self._out(parts[0], r) for r in table[parts[0]].values()
                                   if r["Zone"]["Name"] == zone], params, keys[parts[0]])
            if method == "POST":
                return getattr(self, f"_create_{parts[0]}")(zone, body)
        if len(parts) == 2 and parts[0] in table:
            item = table[parts[0]].get(parts[1])
            if item is None or item["Zone"]["Name"] != zone:
                raise SakuraError(404, "not_found", f"{parts[0]} {parts[1]} not found")
            if method == "GET":
                return {envelope[parts[0]]: self._out(parts[0], item), "Success": True, "is_ok": True}
            if method == "PUT" and parts[0] == "packetfilter":
                return self._update_packetfilter(item, body)
            if method == "DELETE":
                getattr(self, f"_delete_{parts[0]}")(item, body)
                return {"Success": True, "is_ok": True}
        if len(parts) == 3 and parts[0] == "server" and parts[2] == "power" and method in ("PUT", "DELETE"):
            server = self.servers.get(parts[1])
            if server is None or server["Zone"]["Name"] != zone:
                raise SakuraError(404, "not_found", f"server {parts[1]} not found")
            (self._boot if method == "PUT" else self._shutdown)(server, body)
            return {"Success": True, "is_ok": True}
        self.unknown.append(f"{method} {zone}/{path}")
        raise SakuraError(404, "fake_unknown_path", f"fake: no route for {method} {path}")

    def _list(self, items: list[dict], params: dict, key: str) -> dict:
        flt = params.get("Filter") or {}
        bad = set(flt) - _FILTER_KEYS
        if bad:
            raise SakuraError(400, "bad_request", f"fake: Filter key(s) {sorted(bad)} not supported")
        for k, v in flt.items():
            if k == "Tags":
                want = v if isinstance(v, list) else [v]
                items = [i for i in items if all(t in i.get("Tags", []) for t in want)]
            elif k == "Name":
                items = [i for i in items if str(v) in i.get("Name", "")]
            else:
                items = [i for i in items if str(i.get(k)) == str(v)]
        start, count = int(params.get("From", 0)), int(params.get("Count", 0)) or len(items)
        page = items[start:start + count]
        return {"From": start, "Count": len(page), "Total": len(items), key: page, "is_ok": True}

    # --- timers ---------------------------------------------------------------------------

    def _later(self, resource: dict, field: str, value: str) -> None:
        self._due.append((time.monotonic() + self.delay_s, resource, field, value))

    def _tick(self) -> None:
        now = time.monotonic()
        keep = []
        for when, res, field, value in self._due:
            if when > now:
                keep.append((when, res, field, value))
            elif field == "Instance.Status":
                res["Instance"] = {"Status": value}
                res.pop("_transition", None)
            else:
                res[field] = value
        self._due = keep

    # --- resources ------------------------------------------------------------------------

    def _out(self, kind: str, r: dict) -> dict:
        out = {k: v for k, v in r.items() if not k.startswith("_")}
        if kind == "switch":
            out["ServerCount"] = sum(1 for s in self.servers.values()
                                     for n in s["Interfaces"] if (n.get("Switch") or {}).get("ID") == r["ID"])
        if kind == "server":
            out["Disks"] = [{"ID": d, "Name": self.disks[d]["Name"], "Availability": self.disks[d]["Availability"]}
                            for d in r["_disks"] if d in self.disks]
        return out

    def _tags(self, body: dict) -> list[str]:
        tags = body.get("Tags") or []
        if not all(isinstance(t, str) for t in tags):
            raise SakuraError(400, "bad_request", "Tags must be strings")
        return list(tags)

    def _create_server(self, zone: str, body: dict) -> dict:
        s = body.get("Server") or {}
        if not s.get("Name"):
            raise SakuraError(400, "bad_request", "Server.Name is required")
        self.server_creates += 1
        if self.fail_server_create_at is not None and self.server_creates == self.fail_server_create_at:
            raise SakuraError(500, "unknown", "fake: injected failure creating a server")
        if self.server_limit is not None and len(self.servers) >= self.server_limit:
            raise SakuraError(409, "limit_count_in_account", "サーバ数が上限に達しています (fake)")
        want = s.get("ServerPlan") or {}
        plan = next((p for p in self.plans[zone]
                     if (want.get("ID") and want["ID"] == p["ID"])
                     or (not want.get("ID") and (want.get("CPU"), want.get("MemoryMB"), want.get("GPU", 0))
                         == (p["CPU"], p["MemoryMB"], p["GPU"]))), None)
        if plan is None:
            raise SakuraError(400, "bad_request", f"no server plan {want} in {zone}")
        switches = s.get("ConnectedSwitches") or []
        if not switches or switches[0] != {"Scope": "shared"}:
            raise SakuraError(400, "bad_request", "fake: the first NIC must be on the shared segment")
        nics = []
        for sw in switches[1:]:
            switch = self.switches.get(str(sw.get("ID", "")))
            if switch is None or switch["Zone"]["Name"] != zone:
                raise SakuraError(404, "not_found", f"switch {sw} not found in {zone}")
            nics.append({"ID": str(next(self._ids)), "IPAddress": None, "UserIPAddress": None,
                         "Switch": {"ID": switch["ID"], "Scope": "user"}, "PacketFilter": None})
        sid = str(next(self._ids))
        n = next(self._ips)
        server = {
            "ID": sid, "Name": s["Name"], "HostName": s.get("HostName", ""), "Description": s.get("Description", ""),
            "Tags": self._tags(s), "Availability": "available", "ServerPlan": dict(plan), "Zone": {"Name": zone},
            "Instance": {"Status": "down"}, "InterfaceDriver": s.get("InterfaceDriver", "virtio"),
            "Interfaces": [{"ID": str(next(self._ids)), "IPAddress": f"203.0.113.{n}", "Switch": {"Scope": "shared"},
                            "PacketFilter": None}] + nics,
            "_disks": [],
        }
        self.servers[sid] = server
        return {"Server": self._out("server", server), "Success": True, "is_ok": True}

    def _create_disk(self, zone: str, body: dict) -> dict:
        d = body.get("Disk") or {}
        src = self.archives.get(str((d.get("SourceArchive") or {}).get("ID", "")))
        if src is None or src["Zone"]["Name"] != zone:
            raise SakuraError(404, "not_found", f"source archive {d.get('SourceArchive')} not found in {zone}")
        if src["Availability"] != "available":
            raise SakuraError(409, "conflict", "source archive is not available yet")
        if (d.get("Plan") or {}).get("ID") not in (2, 4, "2", "4"):
            raise SakuraError(400, "bad_request", "Disk.Plan.ID must be 2 (HDD) or 4 (SSD)")
        if int(d.get("SizeMB", 0)) < src["SizeMB"]:
            raise SakuraError(400, "bad_request", "Disk.SizeMB is smaller than the source archive")
        server = None
        if d.get("Server"):
            server = self.servers.get(str(d["Server"].get("ID")))
            if server is None or server["Zone"]["Name"] != zone:
                raise SakuraError(404, "not_found", "server to connect the disk to not found")
            if server["Instance"]["Status"] != "down" or server.get("_transition"):
                raise SakuraError(409, "conflict", "server is running")
        did = str(next(self._ids))
        disk = {"ID": did, "Name": d.get("Name", ""), "Tags": self._tags(d), "SizeMB": int(d["SizeMB"]),
                "Availability": "migrating", "Plan": {"ID": int(d["Plan"]["ID"])}, "Zone": {"Name": zone},
                "SourceArchive": {"ID": src["ID"]}, "Server": {"ID": server["ID"]} if server else None}
        self.disks[did] = disk
        self.disk_config[did] = body.get("Config") or {}
        if server:
            server["_disks"].append(did)
        self._later(disk, "Availability", "available")
        return {"Disk": dict(disk), "Success": True, "is_ok": True}

    def _create_archive(self, zone: str, body: dict) -> dict:
        a = body.get("Archive") or {}
        disk = self.disks.get(str((a.get("SourceDisk") or {}).get("ID", "")))
        if disk is None or disk["Zone"]["Name"] != zone:
            raise SakuraError(404, "not_found", "source disk not found")
        server = self.servers.get((disk.get("Server") or {}).get("ID", ""))
        if server and (server["Instance"]["Status"] != "down" or server.get("_transition")):
            raise SakuraError(409, "conflict", "the server using the source disk is running")
        aid = str(next(self._ids))
        archive = {"ID": aid, "Name": a.get("Name", ""), "Tags": self._tags(a), "Scope": "user",
                   "SizeMB": disk["SizeMB"], "Availability": "migrating", "Zone": {"Name": zone},
                   "SourceDisk": {"ID": disk["ID"]}, "CreatedAt": "2026-11-22T00:00:00+09:00"}
        self.archives[aid] = archive
        self._later(archive, "Availability", "available")
        return {"Archive": dict(archive), "Success": True, "is_ok": True}

    def _running(self, server: dict) -> bool:
        return server["Instance"]["Status"] == "up" or bool(server.get("_transition"))

    def _boot(self, server: dict, body: dict) -> None:
        if self._running(server):
            raise SakuraError(409, "conflict", f"Server[{server['ID']}] is still running: Boot is failed")
        if not server["_disks"] or any(self.disks[d]["Availability"] != "available" for d in server["_disks"]):
            raise SakuraError(409, "disk_is_not_ready", "no available disk connected")
        ud = ((body.get("UserBootVariables") or {}).get("CloudInit") or {}).get("UserData")
        if ud is not None:
            self.boot_user_data[server["ID"]] = ud
        server["_transition"] = "booting"
        self._later(server, "Instance.Status", "up")

    def _shutdown(self, server: dict, body: dict) -> None:
        if server["Instance"]["Status"] != "up" or server.get("_transition"):
            raise SakuraError(409, "conflict", "Shutdown is failed")
        server["_transition"] = "stopping"
        self._later(server, "Instance.Status", "down")

    def _delete_server(self, server: dict, body: dict) -> None:
        if self._running(server):
            raise SakuraError(409, "conflict", f"Server[{server['ID']}] is still running")
        with_disk = [str(d) for d in body.get("WithDisk") or []]
        if any(d not in server["_disks"] for d in with_disk):
            raise SakuraError(400, "bad_request", "WithDisk names a disk not connected to the server")
        for d in server["_disks"]:
            if d in with_disk:
                self.disks.pop(d, None)
            elif d in self.disks:
                self.disks[d]["Server"] = None
        del self.servers[server["ID"]]

    def _delete_disk(self, disk: dict, body: dict) -> None:
        server = self.servers.get((disk.get("Server") or {}).get("ID", ""))
        if server and self._running(server):
            raise SakuraError(409, "conflict", "the disk is connected to a running server")
        if server:
            server["_disks"].remove(disk["ID"])
        del self.disks[disk["ID"]]

    def _create_switch(self, zone: str, body: dict) -> dict:
        w = body.get("Switch") or {}
        if not w.get("Name"):
            raise SakuraError(400, "bad_request", "Switch.Name is required")
        wid = str(next(self._ids))
        switch = {"ID": wid, "Name": w["Name"], "Description": w.get("Description", ""), "Tags": self._tags(w),
                  "Scope": "user", "Zone": {"Name": zone}}
        self.switches[wid] = switch
        return {"Switch": self._out("switch", switch), "Success": True, "is_ok": True}

    def _delete_switch(self, switch: dict, body: dict) -> None:
        if self._out("switch", switch)["ServerCount"]:
            raise SakuraError(409, "conflict", "スイッチにサーバが接続されています (fake: servers still connected)")
        del self.switches[switch["ID"]]

    def _expression(self, body: dict) -> list[dict]:
        rules = (body.get("PacketFilter") or {}).get("Expression") or []
        if len(rules) > 30:
            raise SakuraError(400, "bad_request", "a packet filter holds at most 30 rules")
        for r in rules:
            if r.get("Protocol") not in ("tcp", "udp", "icmp", "fragment", "ip") or r.get("Action") not in ("allow", "deny"):
                raise SakuraError(400, "bad_request", f"bad packet filter rule {r}")
        return [dict(r) for r in rules]

    def _create_packetfilter(self, zone: str, body: dict) -> dict:
        f = body.get("PacketFilter") or {}
        if not f.get("Name"):
            raise SakuraError(400, "bad_request", "PacketFilter.Name is required")
        if "Tags" in f:
            raise SakuraError(400, "bad_request", "fake: packet filters have no Tags")
        fid = str(next(self._ids))
        pf = {"ID": fid, "Name": f["Name"], "Description": f.get("Description", ""),
              "Expression": self._expression(body), "Zone": {"Name": zone}}
        self.packet_filters[fid] = pf
        return {"PacketFilter": dict(pf), "Success": True, "is_ok": True}

    def _update_packetfilter(self, pf: dict, body: dict) -> dict:
        pf["Expression"] = self._expression(body)
        return {"PacketFilter": dict(pf), "Success": True, "is_ok": True}

    def _delete_packetfilter(self, pf: dict, body: dict) -> None:
        if any((n.get("PacketFilter") or {}).get("ID") == pf["ID"] for s in self.servers.values() for n in s["Interfaces"]):
            raise SakuraError(409, "conflict", "fake: the packet filter is connected to an interface")
        del self.packet_filters[pf["ID"]]

    def _interface(self, zone: str, method: str, parts: list[str], body: dict) -> dict:
        nic = next((n for s in self.servers.values() if s["Zone"]["Name"] == zone for n in s["Interfaces"]
                    if n["ID"] == parts[1]), None)
        if nic is None:
            raise SakuraError(404, "not_found", f"interface {parts[1]} not found")
        if len(parts) == 2 and method == "PUT":
            want = (body.get("Interface") or {})
            if "UserIPAddress" in want:
                if not (nic.get("Switch") or {}).get("ID"):
                    raise SakuraError(400, "bad_request", "fake: UserIPAddress is for NICs on a switch")
                nic["UserIPAddress"] = want["UserIPAddress"]
            return {"Interface": dict(nic), "Success": True, "is_ok": True}
        if len(parts) == 4 and parts[2:3] == ["to"] and parts[3] == "packetfilter":
            raise SakuraError(404, "not_found", "fake: name the packet filter")
        if len(parts) == 5 and parts[2] == "to" and parts[3] == "packetfilter" and method in ("PUT", "DELETE"):
            pf = self.packet_filters.get(parts[4])
            if pf is None or pf["Zone"]["Name"] != zone:
                raise SakuraError(404, "not_found", f"packet filter {parts[4]} not found")
            nic["PacketFilter"] = {"ID": pf["ID"], "Name": pf["Name"]} if method == "PUT" else None
            return {"Success": True, "is_ok": True}
        self.unknown.append(f"{method} {zone}/{'/'.join(parts)}")
        raise SakuraError(404, "fake_unknown_path", f"fake: no route for {method} {'/'.join(parts)}")

    def _delete_archive(self, archive: dict, body: dict) -> None:
        if archive["Scope"] != "user":
            raise SakuraError(403, "forbidden", "shared archives cannot be deleted")
        del self.archives[archive["ID"]]


def provider_for(fake: SakuraFake, root: str, config: dict | None = None, **kw):
    """A SakuraProvider pointed at the fake, polling every 5 ms and backing off 1 ms."""
    from gpuplan.providers.sakura import SakuraProvider

    kw.setdefault("poll_s", 0.005)
    kw.setdefault("retry_base_s", 0.001)
    return SakuraProvider(config or {}, env=fake.env(root), **kw)
