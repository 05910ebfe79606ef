"""A local stand-in for checkip.amazonaws.com (gpuplan asks it for the caller's address, the
default SSH source), and the SSH sources a cluster's security group admits in moto."""

from __future__ import annotations

import http.server
import threading
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def serve(answer: list[str], monkeypatch) -> Iterator[None]:
    """Answer every GET with `answer[0]` (the test may change it) while the block runs;
    GPUPLAN_CHECKIP_URL points gpuplan at it."""

    class Answer(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            body = answer[0].encode()
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    server = http.server.HTTPServer(("127.0.0.1", 0), Answer)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    monkeypatch.setenv("GPUPLAN_CHECKIP_URL", f"http://127.0.0.1:{server.server_port}/")
    try:
        yield
    finally:
        server.shutdown()


def ssh_ranges(moto, cluster: str) -> list[str]:
    """The source ranges the cluster's security group lets in on port 22, sorted."""
    [group] = moto.ec2().describe_security_groups(
        Filters=[{"Name": "tag:gpuplan-cluster", "Values": [cluster]}])["SecurityGroups"]
    return sorted(r["CidrIp"] for p in group["IpPermissions"] if p.get("FromPort") == 22 for r in p["IpRanges"])
