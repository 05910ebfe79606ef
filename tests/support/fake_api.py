"""What the Sakura API fakes (sakura_fake, sakura_dok_fake, sakura_phy_fake) share: a threaded
HTTP server on loopback, its stop, and the environment that points gpuplan at it."""

from __future__ import annotations

import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class FakeApiServer:
    token: str
    secret: str
    _httpd: ThreadingHTTPServer | None = None

    def _serve(self, handler: type[BaseHTTPRequestHandler]) -> str:
        """Serve `handler` on a free loopback port; returns "http://host:port"."""
        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self._httpd.daemon_threads = True
        threading.Thread(target=self._httpd.serve_forever, kwargs={"poll_interval": 0.01}, daemon=True).start()
        host, port = self._httpd.server_address[:2]
        return f"http://{host}:{port}"

    def stop(self) -> None:
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()
            self._httpd = None

    def env(self, root: str) -> dict[str, str]:
        return {"SAKURACLOUD_API_ROOT_URL": root, "SAKURACLOUD_ACCESS_TOKEN": self.token,
                "SAKURACLOUD_ACCESS_TOKEN_SECRET": self.secret}
