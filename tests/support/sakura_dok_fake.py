"""A stateful stand-in for the 高火力 DOK API (tasks, cancel, artifacts), over real HTTP on
127.0.0.1, built from the published API shapes (shared/notes/sakura-koukaryoku.md):

- `POST /tasks/` validates what the spec states: name and containers required, plan one of
  v100-32gb / h100-80gb / h100-8gpu-80gb, command and entrypoint lists, environment under 8,192
  characters and no SAKURA_ names, execution_time_limit_sec null or at least 600;
- one running task per project: a new task waits while another runs; `advance()` ends the
  running task (done, with an artifact) and starts the oldest waiting one, as time would;
- `POST /tasks/{id}/cancel/` cancels a waiting or running task (409 once it has finished);
- `GET /artifacts/{id}/download/` answers {"url": ...}, a link this server also serves;
- `POST /tasks/{id}/containers/0/stream/` answers {"url": "ws://...", "token"} for a running
  task (403 "task is not running" otherwise); that address is a real WebSocket (RFC 6455) that
  sends the task's `logs` lines from the start as text messages, then each new one, and closes
  once the task has ended and every line was sent. `log(task_id, line)` adds a line;
- a finished task reports its container's `execution_seconds` (set by `advance(seconds=...)`)
  and `exit_code`, as a third-party DOK CLI reads them; `GET /tasks/?tag=` filters by tag;
- `DokFake(execute=True)`: `advance()` really runs the running task's container command here
  (entrypoint then command, as Docker does; the image is not pulled: the command runs on this
  machine) with its environment, SAKURA_ARTIFACT_DIR a fresh folder and a stand-in `nvidia-smi`
  listing the plan's GPUs (8 for h100-8gpu-80gb) first on PATH. Its exit code decides done /
  error, its output becomes the task's log, and the folder, as tar.gz, its artifact (kept also
  when it failed). Without `execute`, nothing runs and only a done task has a (dummy) artifact.

Assumed where the notes do not say: the list envelope {"meta": {page, page_size, count,
total_pages}, "results"} (as `unit_prices/` answers) and the task's "artifact": {"id": ...}. Unknown paths answer 404 and are recorded in `unknown`.

    fake = DokFake(); root = fake.start()   # set SAKURACLOUD_API_ROOT_URL=root
"""

from __future__ import annotations

import base64
import itertools
import json
import re
import threading
import time
import uuid
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs

from support.fake_api import FakeApiServer

PLANS = ("v100-32gb", "h100-80gb", "h100-8gpu-80gb")
_PATH = re.compile(r"^.*?/is1a/api/managed-container/1\.0/(?P<path>[^?]*)$")


class _Err(Exception):
    def __init__(self, status: int, detail: str) -> None:
        super().__init__(detail)
        self.status, self.detail = status, detail


class DokFake(FakeApiServer):
    def __init__(self, token: str = "fake-token", secret: str = "fake-secret", execute: bool = False) -> None:
        self.token, self.secret, self.execute = token, secret, execute
        self.lock = threading.RLock()
        self.tasks: dict[str, dict] = {}
        self.artifacts: dict[str, bytes] = {}
        self.logs: dict[str, list[str]] = {}
        self.streams: dict[str, str] = {}  # token -> task id
        self.requests: list[tuple[str, str, object]] = []
        self.unknown: list[str] = []
        self._order = itertools.count()
        self._httpd: ThreadingHTTPServer | None = None
        self.base = ""

    # --- control ------------------------------------------------------------------------

    def start(self) -> str:
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *a):
                pass

            def _handle(self):
                if self.path.startswith("/ws/") and self.headers.get("Upgrade", "").lower() == "websocket":
                    fake.serve_stream(self)
                    return
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                status, payload, ctype = fake.handle(self.command, self.path, self.headers.get("Authorization", ""), body)
                data = payload if isinstance(payload, bytes) else json.dumps(payload, ensure_ascii=False).encode()
                self.send_response(status)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            do_GET = do_POST = do_PUT = do_DELETE = _handle

        base = self._serve(Handler)
        self.base = base
        return f"{base}/cloud/zone"


    def running(self) -> list[dict]:
        with self.lock:
            return [t for t in self.tasks.values() if t["status"] == "running"]

    def log(self, task_id: str, line: str) -> None:
        with self.lock:
            self.logs.setdefault(task_id, []).append(line)

    def serve_stream(self, handler) -> None:
        """One log stream over WebSocket: the handshake, every line so far, each new one while the
        task runs, then a close frame."""
        from gpuplan.providers import wsread

        token = handler.path.removeprefix("/ws/")
        with self.lock:
            task_id = self.streams.get(token)
        if task_id is None or handler.headers.get("Authorization") != f"Bearer {token}":
            handler.send_response(401)
            handler.send_header("Content-Length", "0")
            handler.end_headers()
            return
        handler.send_response(101)
        handler.send_header("Upgrade", "websocket")
        handler.send_header("Connection", "Upgrade")
        handler.send_header("Sec-WebSocket-Accept", wsread.accept_key(handler.headers["Sec-WebSocket-Key"]))
        handler.end_headers()
        sent = 0
        while True:
            with self.lock:
                lines = list(self.logs.get(task_id, []))
                over = self.tasks[task_id]["status"] != "running"
            for line in lines[sent:]:
                handler.wfile.write(wsread.frame(wsread.TEXT, line.encode(), mask=False))
            handler.wfile.flush()
            sent = len(lines)
            if over:
                handler.wfile.write(wsread.frame(wsread.CLOSE, b"\x03\xe8", mask=False))
                handler.wfile.flush()
                return
            time.sleep(0.01)

    def advance(self, status: str = "done", seconds: int = 600, exit_code: int | None = None) -> None:
        """The running task ends (`status`; "done" leaves an artifact) after `seconds` of
        execution, the oldest waiting one starts."""
        with self.lock:
            for t in self.running():
                if self.execute:
                    code = self._run(t)
                    status, exit_code = ("done" if code == 0 else "error"), code
                t["status"] = status
                t["containers"][0]["execution_seconds"] = seconds
                t["containers"][0]["exit_code"] = exit_code if exit_code is not None else (0 if status == "done" else 1)
                if self.execute:
                    continue  # _run left its artifact
                if status == "done":
                    aid = str(uuid.uuid4())
                    self.artifacts[aid] = b"\x1f\x8b fake tar.gz of " + t["name"].encode()
                    t["artifact"] = {"id": aid}
            self._schedule()

    def _run(self, task: dict) -> int:
        """Run the task's container command here; its artifact folder becomes its artifact."""
        import io
        import os
        import subprocess
        import tarfile
        import tempfile
        from pathlib import Path

        c = task["containers"][0]
        gpus = 8 if c["plan"] == "h100-8gpu-80gb" else 1
        with tempfile.TemporaryDirectory(prefix="dok-fake-") as tmp:
            artifact, bin_dir = Path(tmp, "artifact"), Path(tmp, "bin")
            artifact.mkdir()
            bin_dir.mkdir()
            smi = bin_dir / "nvidia-smi"
            smi.write_text("#!/bin/sh\n" + "".join(f"echo 'GPU {g}: NVIDIA H100 80GB HBM3 (UUID: GPU-fake-{g})'\n"
                                                   for g in range(gpus)))
            smi.chmod(0o755)
            env = {"PATH": f"{bin_dir}:{os.environ.get('PATH', '/usr/bin:/bin')}", "HOME": tmp,
                   **{k: str(v) for k, v in (c.get("environment") or {}).items()},
                   "SAKURA_ARTIFACT_DIR": str(artifact), "SAKURA_TASK_ID": task["id"]}
            argv = list(c["entrypoint"]) + list(c["command"])
            r = subprocess.run(argv, env=env, cwd=tmp, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, timeout=300)
            for line in r.stdout.decode(errors="replace").splitlines(keepends=True):
                self.logs.setdefault(task["id"], []).append(line)
            buf = io.BytesIO()
            with tarfile.open(fileobj=buf, mode="w:gz") as tar:
                for path in sorted(artifact.rglob("*")):
                    tar.add(path, arcname=str(path.relative_to(artifact)), recursive=False)
        aid = str(uuid.uuid4())
        self.artifacts[aid] = buf.getvalue()
        task["artifact"] = {"id": aid}
        return r.returncode

    def _schedule(self) -> None:
        if not self.running():
            waiting = sorted((t for t in self.tasks.values() if t["status"] == "waiting"), key=lambda t: t["_order"])
            if waiting:
                waiting[0]["status"] = "running"

    # --- dispatch -----------------------------------------------------------------------

    def handle(self, method: str, raw_path: str, auth: str, raw: bytes) -> tuple[int, object, str]:
        path = raw_path.partition("?")[0]
        with self.lock:
            try:
                if path.startswith("/blob/"):
                    data = self.artifacts.get(path.removeprefix("/blob/"))
                    if data is None:
                        raise _Err(404, "no such artifact")
                    return 200, data, "application/gzip"
                m = _PATH.match(path)
                if not m:
                    self.unknown.append(f"{method} {raw_path}")
                    raise _Err(404, f"fake: no such path {path}")
                want = "Basic " + base64.b64encode(f"{self.token}:{self.secret}".encode()).decode()
                if auth != want:
                    raise _Err(401, "認証に失敗しました (fake)")
                body = json.loads(raw) if raw else None
                self.requests.append((method, m["path"], body))
                query = {k: v[0] for k, v in parse_qs(raw_path.partition("?")[2]).items()}
                status, payload = self._route(method, m["path"], body, query)
                return status, payload, "application/json"
            except _Err as e:
                return e.status, {"detail": e.detail}, "application/json"
            except ValueError:
                return 400, {"detail": "fake: body is not JSON"}, "application/json"

    def _route(self, method: str, path: str, body, query: dict) -> tuple[int, object]:
        parts = [p for p in path.split("/") if p]
        if parts == ["tasks"] and method == "POST":
            return 201, self._create(body or {})
        if parts == ["tasks"] and method == "GET":
            items = [self._out(t) for t in sorted(self.tasks.values(), key=lambda t: t["_order"])
                     if "tag" not in query or query["tag"] in t["tags"]]
            size = int(query.get("page_size", 20))
            page = int(query.get("page", 1))
            pages = max(1, -(-len(items) // size))
            return 200, {"meta": {"page": page, "page_size": size, "count": len(items), "total_pages": pages},
                         "results": items[(page - 1) * size:page * size]}
        if len(parts) >= 2 and parts[0] == "tasks":
            task = self.tasks.get(parts[1])
            if task is None:
                raise _Err(404, f"task {parts[1]} not found")
            if len(parts) == 2 and method == "GET":
                return 200, self._out(task)
            if len(parts) == 5 and parts[2] == "containers" and parts[4] == "stream" and method == "POST":
                if task["status"] != "running":
                    raise _Err(403, "Task is not running")
                token = str(uuid.uuid4())
                self.streams[token] = parts[1]
                return 200, {"url": f"ws://{self.base.removeprefix('http://')}/ws/{token}", "token": token}
            if parts[2:] == ["cancel"] and method == "POST":
                if task["status"] not in ("waiting", "running"):
                    raise _Err(409, f"task is {task['status']}: nothing to cancel")
                task["status"] = "canceled"
                self._schedule()
                return 200, self._out(task)
        if len(parts) == 3 and parts[0] == "artifacts" and parts[2] == "download" and method == "GET":
            if parts[1] not in self.artifacts:
                raise _Err(404, "artifact not found")
            return 200, {"url": f"{self.base}/blob/{parts[1]}"}
        self.unknown.append(f"{method} {path}")
        raise _Err(404, f"fake: no route for {method} {path}")

    def _out(self, task: dict) -> dict:
        return {k: v for k, v in task.items() if not k.startswith("_")}

    def _create(self, body: dict) -> dict:
        if not body.get("name") or not isinstance(body.get("containers"), list) or not body["containers"]:
            raise _Err(400, "name and containers are required")
        limit = body.get("execution_time_limit_sec", 1_728_000)
        if limit is not None and (not isinstance(limit, int) or limit < 600):
            raise _Err(400, "execution_time_limit_sec must be at least 600")
        for c in body["containers"]:
            if not c.get("image") or c.get("plan") not in PLANS:
                raise _Err(400, f"container needs an image and a plan of {PLANS}")
            if not isinstance(c.get("command"), list) or not isinstance(c.get("entrypoint"), list):
                raise _Err(400, "command and entrypoint must be lists")
            if not all(isinstance(w, str) for w in c["command"] + c["entrypoint"]):
                raise _Err(400, "command and entrypoint hold strings")
            env = c.get("environment") or {}
            if sum(len(k) + len(str(v)) for k, v in env.items()) >= 8192:
                raise _Err(400, "environment is too long")
            if any(k.startswith("SAKURA_") for k in env):
                raise _Err(400, "SAKURA_ names are reserved")
        tid = str(uuid.uuid4())
        task = {"id": tid, "name": body["name"], "tags": list(body.get("tags") or []), "status": "waiting",
                "containers": body["containers"], "execution_time_limit_sec": limit, "artifact": None,
                "_order": next(self._order)}
        self.tasks[tid] = task
        self._schedule()
        return self._out(task)


def client_for(fake: DokFake, root: str, **kw):
    from gpuplan.providers.sakura_dok import DokClient

    kw.setdefault("poll_s", 0.001)
    kw.setdefault("retry_base_s", 0.001)
    return DokClient({}, env=fake.env(root), **kw)


def run_the_queue(fake, count, end_the_running_one, limit_s=120.0):
    """Time passing for a followed batch: once all `count` tasks are queued, end the running one
    whenever there is one, until every task has finished (or `limit_s`)."""
    import time

    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        time.sleep(0.05)
        if len(fake.tasks) < count:
            continue
        if fake.running():
            end_the_running_one()
        elif not any(t["status"] == "waiting" for t in fake.tasks.values()):
            return


@contextmanager
def serving(monkeypatch, execute: bool = False):
    """A started fake with gpuplan's DOK settings pointing at it and a quick follower; stopped
    after, and no request it did not know."""
    fake = DokFake(execute=execute)
    fake.root = fake.start()
    for k, v in fake.env(fake.root).items():
        monkeypatch.setenv(k, v)
    monkeypatch.setenv("GPUPLAN_POLL_S", "0.05")
    try:
        yield fake
    finally:
        fake.stop()
    assert fake.unknown == []
