"""A stand-in for the 高火力 PHY API over real HTTP on 127.0.0.1 (the parts gpuplan calls), shaped
after sacloud/phy-api-go's fake server: `GET /servers/` -> {"meta": {"count"}, "servers"},
`GET /servers/{id}/` -> {"server"}, `GET /servers/{id}/os_images/` -> {"os_images"},
`POST /servers/{id}/os_install/` -> 204 (409 while the server is locked), `POST
/servers/{id}/power_control/`. Calls that change something need `X-Requested-With:
XMLHttpRequest` (else 400). There is no create call. Every request is counted in `requests`;
past `rate_limit` an hour it answers 429, as the account's limit would.

    fake = PhyFake(); root = fake.start()     # SAKURACLOUD_API_ROOT_URL=root (".../cloud/zone")
    fake.add_server("100000000001", "gpu-a", "高火力 PHY H100 80GB x8", "127.0.0.1")
"""

from __future__ import annotations

import base64
import json
import re
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs

from support.fake_api import FakeApiServer

_PATH = re.compile(r"^/cloud/api/dedicated-phy/1\.0/(?P<path>[^?]*)(?:\?(?P<query>.*))?$")


class PhyFake(FakeApiServer):
    def __init__(self, token: str = "fake-token", secret: str = "fake-secret") -> None:
        self.token, self.secret = token, secret
        self.lock = threading.RLock()
        self.servers: dict[str, dict] = {}
        self.installs: list[tuple[str, dict]] = []
        self.power_calls: list[tuple[str, str]] = []
        self.requests: list[tuple[str, str]] = []
        self.unknown: list[str] = []
        self.rate_limit = 300
        self._httpd: ThreadingHTTPServer | None = None

    def start(self) -> str:
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *a):
                pass

            def _handle(self):
                raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                status, payload = fake.handle(self.command, self.path, dict(self.headers), raw)
                data = b"" if status == 204 else json.dumps(payload, ensure_ascii=False).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            do_GET = do_POST = do_PATCH = do_PUT = do_DELETE = _handle

        base = self._serve(Handler)
        return f"{base}/cloud/zone"


    def add_server(self, server_id: str, nickname: str, plan: str, address: str | None) -> None:
        with self.lock:
            self.servers[server_id] = {
                "server_id": server_id, "service": {"service_id": f"s{server_id}", "nickname": nickname,
                                                    "plan": {"name": plan}},
                "ipv4": {"ip_address": address} if address else None, "lock_status": None,
                "power_status": {"status": "on"},
                "_images": [{"os_image_id": "ubuntu2204", "name": "Ubuntu 22.04"},
                            {"os_image_id": "ubuntu2404", "name": "Ubuntu 24.04"}],
            }

    def finish_installs(self) -> None:
        with self.lock:
            for s in self.servers.values():
                s["lock_status"] = None

    def handle(self, method: str, raw_path: str, headers: dict, raw: bytes) -> tuple[int, dict]:
        with self.lock:
            m = _PATH.match(raw_path)
            if not m:
                self.unknown.append(f"{method} {raw_path}")
                return 404, {"error": "fake: no such path"}
            want = "Basic " + base64.b64encode(f"{self.token}:{self.secret}".encode()).decode()
            if headers.get("Authorization") != want:
                return 401, {"error_msg": "unauthorized (fake)"}
            self.requests.append((method, m["path"]))
            if len(self.requests) > self.rate_limit:
                return 429, {"error_msg": "rate limit (fake)"}
            if method != "GET" and headers.get("X-Requested-With") != "XMLHttpRequest":
                return 400, {"error_msg": "X-Requested-With: XMLHttpRequest is required"}
            parts = [p for p in m["path"].split("/") if p]
            query = {k: v[0] for k, v in parse_qs(m["query"] or "").items()}
            try:
                body = json.loads(raw) if raw else {}
            except ValueError:
                return 400, {"error_msg": "not JSON"}
            return self._route(method, parts, query, body)

    def _out(self, s: dict) -> dict:
        return {k: v for k, v in s.items() if not k.startswith("_")}

    def _route(self, method: str, parts: list[str], query: dict, body: dict) -> tuple[int, dict]:
        if parts == ["servers"] and method == "GET":
            items = [self._out(s) for s in self.servers.values()]
            start, limit = int(query.get("offset", 0)), int(query.get("limit", 20))
            return 200, {"meta": {"count": len(items)}, "servers": items[start:start + limit]}
        if len(parts) >= 2 and parts[0] == "servers":
            s = self.servers.get(parts[1])
            if s is None:
                return 404, {"error_msg": f"server {parts[1]} not found"}
            if len(parts) == 2 and method == "GET":
                return 200, {"server": self._out(s)}
            if parts[2:] == ["os_images"] and method == "GET":
                return 200, {"os_images": s["_images"]}
            if parts[2:] == ["os_install"] and method == "POST":
                if s["lock_status"]:
                    return 409, {"error_msg": "server is locked"}
                if body.get("os_image_id") not in {i["os_image_id"] for i in s["_images"]} or not body.get("password"):
                    return 400, {"error_msg": "os_image_id and password are required"}
                s["lock_status"] = "os_installing"
                self.installs.append((s["server_id"], body))
                return 204, {}
            if parts[2:] == ["power_control"] and method == "POST":
                self.power_calls.append((s["server_id"], body.get("operation")))
                return 204, {}
        self.unknown.append(f"{method} {'/'.join(parts)}")
        return 404, {"error_msg": "fake: no route"}
