"""The cloud's interruption notice (issue 35): on an AWS cluster every node watches its own
instance metadata (IMDSv2: a session token, then spot/instance-action); the node announced is
drained (set aside, its running items told to stop with SIGTERM), and its items run again on
the other node from their checkpoints, not counted as failures.

Two loopback sshd hosts recorded as an AWS cluster, real Ray on them, and a loopback stand-in of
each node's instance metadata service (the node's AWS_EC2_METADATA_SERVICE_ENDPOINT, as the AWS
SDKs read it). The notice is given once items run on the second node."""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

pytestmark = pytest.mark.sshd
CLUSTER = "spotty"
# 30 steps of 0.5 s, each written to the checkpoint (the notice is looked for every 5 s); says
# where it began
ITEM = ('f="$GPUPLAN_CHECKPOINT_DIR/step"; s=$(cat "$f" 2>/dev/null || echo 0); start=$s; '
        'while [ "$s" -lt 30 ]; do s=$((s+1)); echo $s > "$f"; sleep 0.5; done; '
        'echo "{item} $GPUPLAN_NODE from $start" > {out}/result')


class Metadata(ThreadingHTTPServer):
    """One node's instance metadata service: tokens for PUT /latest/api/token; the spot notice
    404 until `announce()`, and only with a token it gave."""

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.notice: dict | None = None
        self.tokens: set[str] = set()
        self.asked = 0
        threading.Thread(target=self.serve_forever, daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"

    def announce(self) -> None:
        self.notice = {"action": "terminate", "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() + 120))}


class _Handler(BaseHTTPRequestHandler):
    server: Metadata

    def log_message(self, *args) -> None:
        pass

    def do_PUT(self) -> None:
        if self.path != "/latest/api/token" or not self.headers.get("X-aws-ec2-metadata-token-ttl-seconds"):
            self.send_error(400)
            return
        token = f"t{len(self.server.tokens)}"
        self.server.tokens.add(token)
        self._send(200, token.encode())

    def do_GET(self) -> None:
        if self.headers.get("X-aws-ec2-metadata-token") not in self.server.tokens:
            self.send_error(401)  # IMDSv2 only: no token, no answer
            return
        self.server.asked += 1
        if self.path == "/latest/meta-data/spot/instance-action" and self.server.notice:
            self._send(200, json.dumps(self.server.notice).encode())
        else:
            self.send_error(404)

    def _send(self, code: int, body: bytes) -> None:
        self.send_response(code)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


def test_a_notice_drains_the_node_and_its_items_finish_elsewhere_from_their_checkpoints(tmp_path):
    from support.cli import run_cli
    from support.ray_env import loopback_ray_cluster

    servers = [Metadata(), Metadata()]
    env = [{"AWS_EC2_METADATA_SERVICE_ENDPOINT": s.url} for s in servers]
    try:
        with loopback_ray_cluster(tmp_path, CLUSTER, "10", provider="aws", host_env=env) as (state, hosts, _home):
            second = hosts[1].fake_root / "root/.gpuplan/jobs"

            def announce_once_items_run_there() -> None:
                deadline = time.monotonic() + 300
                while time.monotonic() < deadline:
                    if any(p.read_text().strip() not in ("", "0") for p in second.glob("*/checkpoints/*/step")):
                        servers[1].announce()
                        return
                    time.sleep(0.2)

            watcher = threading.Thread(target=announce_once_items_run_there, daemon=True)
            watcher.start()
            (tmp_path / "items.txt").write_text("a\nb\nc\nd\n")
            r = run_cli("run", CLUSTER, "--items", str(tmp_path / "items.txt"), "--checkpoint-every", "2s", "--",
                        "sh", "-c", ITEM)
            watcher.join(1)
            assert r.code == 0, r.out + r.err
            assert "4 ok of 4 items" in " ".join(r.out.split())
            [job] = state.jobs(CLUSTER)
            [q] = state.job_quarantines(job.id)
            assert (q.node, q.code) == (f"{CLUSTER}-1", "interrupted") and "terminate" in q.reason
            items = state.job_items(job.id)
            assert {it.status for it in items} == {"ok"}
            assert {it.node for it in items} == {f"{CLUSTER}-0"}  # every item ended on the node that stayed
            first = hosts[0].fake_root / "root/.gpuplan/jobs" / job.id / "out"
            results = sorted(p.read_text().split() for p in first.glob("*/result"))
            resumed = [res for res in results if res[3] != "0"]
            assert resumed, results  # the drained node's items went on from their checkpoints
            assert servers[0].asked > 0 and servers[0].notice is None  # the head watched too, and stayed
    finally:
        for s in servers:
            s.shutdown()
