"""A WebSocket client that only reads (RFC 6455), on the standard library: enough to follow a
log stream (高火力 DOK's task logs) without a dependency.

It opens the connection (ws:// or wss://, with the caller's headers), checks the server's
handshake, then yields each text or binary message as text (UTF-8, undecodable bytes replaced).
It answers pings, and a close with a close. Frames it sends are masked, as a client's must be.
No proxy support, no extensions, no compression.
"""

from __future__ import annotations

import base64
import hashlib
import os
import socket
import ssl
import struct
from collections.abc import Iterator, Mapping
from urllib.parse import urlsplit

from gpuplan.errors import ProviderError

GUID = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"  # RFC 6455 section 1.3
MAX_MESSAGE = 16 * 2**20  # a log message larger than this is not a log line
TEXT, BINARY, CLOSE, PING, PONG, CONTINUATION = 1, 2, 8, 9, 10, 0


def accept_key(key: str) -> str:
    """The Sec-WebSocket-Accept a server must answer to `key`."""
    return base64.b64encode(hashlib.sha1((key + GUID).encode()).digest()).decode()


def frame(opcode: int, payload: bytes = b"", mask: bool = True) -> bytes:
    """One final frame; masked (a client's) unless `mask` is False (a server's)."""
    head = bytes([0x80 | opcode])
    n = len(payload)
    bit = 0x80 if mask else 0
    if n < 126:
        head += bytes([bit | n])
    elif n < 2**16:
        head += bytes([bit | 126]) + struct.pack("!H", n)
    else:
        head += bytes([bit | 127]) + struct.pack("!Q", n)
    if not mask:
        return head + payload
    key = os.urandom(4)
    return head + key + bytes(b ^ key[i % 4] for i, b in enumerate(payload))


class _Conn:
    def __init__(self, sock: socket.socket) -> None:
        self.sock, self.buf = sock, b""

    def read(self, n: int) -> bytes:
        while len(self.buf) < n:
            chunk = self.sock.recv(65536)
            if not chunk:
                raise EOFError
            self.buf += chunk
        out, self.buf = self.buf[:n], self.buf[n:]
        return out

    def read_head(self) -> bytes:
        while b"\r\n\r\n" not in self.buf:
            chunk = self.sock.recv(4096)
            if not chunk:
                raise EOFError
            self.buf += chunk
            if len(self.buf) > 65536:
                raise ProviderError("websocket: the server's handshake answer is over 64 KiB")
        head, _, self.buf = self.buf.partition(b"\r\n\r\n")
        return head


def messages(url: str, headers: Mapping[str, str] | None = None, *, connect_timeout_s: float = 30.0,
             idle_s: float | None = None) -> Iterator[str]:
    """Each message the server sends, until it closes the stream; with `idle_s`, also stop once
    no message came for that long (what has been sent so far, then return)."""
    parts = urlsplit(url)
    if parts.scheme not in ("ws", "wss") or not parts.hostname:
        raise ProviderError(f"websocket: not a ws:// or wss:// address: {url}")
    port = parts.port or (443 if parts.scheme == "wss" else 80)
    try:
        sock = socket.create_connection((parts.hostname, port), timeout=connect_timeout_s)
        if parts.scheme == "wss":
            sock = ssl.create_default_context().wrap_socket(sock, server_hostname=parts.hostname)
    except OSError as exc:
        raise ProviderError(f"websocket: cannot reach {parts.hostname}:{port} ({exc.__class__.__name__})") from exc
    try:
        yield from _read(sock, parts, port, headers or {}, connect_timeout_s, idle_s)
    finally:
        sock.close()


def _read(sock, parts, port: int, headers: Mapping[str, str], connect_timeout_s: float, idle_s: float | None):
    key = base64.b64encode(os.urandom(16)).decode()
    path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    host = parts.hostname if port in (80, 443) else f"{parts.hostname}:{port}"
    lines = [f"GET {path} HTTP/1.1", f"Host: {host}", "Upgrade: websocket", "Connection: Upgrade",
             f"Sec-WebSocket-Key: {key}", "Sec-WebSocket-Version: 13", *(f"{k}: {v}" for k, v in headers.items())]
    conn = _Conn(sock)
    try:
        sock.sendall(("\r\n".join(lines) + "\r\n\r\n").encode())
        status, *fields = conn.read_head().decode("latin-1").split("\r\n")
    except (OSError, EOFError) as exc:
        raise ProviderError(f"websocket: no handshake answer from {parts.hostname} ({exc.__class__.__name__})") from exc
    answer = {k.strip().lower(): v.strip() for k, _, v in (f.partition(":") for f in fields)}
    if status.split(" ")[1:2] != ["101"]:
        raise ProviderError(f"websocket: {parts.hostname} refused the stream: {status.strip()}")
    if answer.get("sec-websocket-accept") != accept_key(key):
        raise ProviderError(f"websocket: {parts.hostname} answered a wrong Sec-WebSocket-Accept")
    sock.settimeout(idle_s)
    parts_of: list[bytes] = []
    while True:
        try:
            b0, b1 = conn.read(2)
            n = b1 & 0x7F
            if n == 126:
                n = struct.unpack("!H", conn.read(2))[0]
            elif n == 127:
                n = struct.unpack("!Q", conn.read(8))[0]
            if n > MAX_MESSAGE:
                raise ProviderError(f"websocket: a message of {n:,} bytes; at most {MAX_MESSAGE:,} are read")
            mask = conn.read(4) if b1 & 0x80 else b""
            payload = conn.read(n)
        except TimeoutError:
            return  # quiet for idle_s: what was sent so far has been read
        except EOFError:
            return  # the server went away without a close frame
        if mask:
            payload = bytes(b ^ mask[i % 4] for i, b in enumerate(payload))
        fin, opcode = b0 & 0x80, b0 & 0x0F
        if opcode == CLOSE:
            try:
                sock.sendall(frame(CLOSE, payload[:2]))
            except OSError:
                pass
            return
        if opcode == PING:
            sock.sendall(frame(PONG, payload))
            continue
        if opcode == PONG:
            continue
        parts_of.append(payload)
        if sum(map(len, parts_of)) > MAX_MESSAGE:
            raise ProviderError(f"websocket: a message over {MAX_MESSAGE:,} bytes")
        if fin:
            yield b"".join(parts_of).decode("utf-8", errors="replace")
            parts_of = []
