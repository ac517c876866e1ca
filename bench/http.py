"""A minimal HTTP/1.1 keep-alive client for the load generator, used alike for Ground Control and
etcd's JSON gateway.

Why not httpx: on this two-core machine httpx spent about 550 µs of CPU per request on the
client side, as much as the server's whole request, so a run measured the load generator as
much as the system under test (and the machine's two cores are shared by both). This client
sends a prepared request and reads one answer (Content-Length or chunked), nothing more; pass
`--http-client httpx` to `bench/run` to measure through httpx instead.
"""

from __future__ import annotations

import json
import socket
from typing import Any
from urllib.parse import urlsplit

import httpx


class Answer:
    __slots__ = ("status_code", "content")

    def __init__(self, status_code: int, content: bytes) -> None:
        self.status_code = status_code
        self.content = content

    def json(self) -> Any:
        return json.loads(self.content)


class RawClient:
    """One keep-alive connection; `post(path, content=...)` like httpx's."""

    def __init__(self, base_url: str, headers: dict[str, str], timeout: float) -> None:
        parts = urlsplit(base_url)
        self.address = (parts.hostname or "127.0.0.1", parts.port or 80)
        self.host = f"{self.address[0]}:{self.address[1]}"
        self.timeout = timeout
        self.extra = "".join(f"{name}: {value}\r\n" for name, value in headers.items())
        self.sock: socket.socket | None = None
        self.buffer = b""

    def _connect(self) -> socket.socket:
        sock = socket.create_connection(self.address, timeout=self.timeout)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.sock, self.buffer = sock, b""
        return sock

    def post(self, path: str, content: bytes) -> Answer:
        head = (
            f"POST {path} HTTP/1.1\r\nHost: {self.host}\r\n{self.extra}"
            f"Content-Length: {len(content)}\r\n\r\n"
        ).encode()
        sock = self.sock or self._connect()
        try:
            sock.sendall(head + content)
            return self._read(sock)
        except OSError:
            # The server closed an idle keep-alive connection: reconnect once.
            self.close()
            sock = self._connect()
            sock.sendall(head + content)
            return self._read(sock)

    def _fill(self, sock: socket.socket) -> None:
        chunk = sock.recv(65536)
        if not chunk:
            raise ConnectionResetError("server closed the connection")
        self.buffer += chunk

    def _read(self, sock: socket.socket) -> Answer:
        while b"\r\n\r\n" not in self.buffer:
            self._fill(sock)
        head, _, self.buffer = self.buffer.partition(b"\r\n\r\n")
        lines = head.split(b"\r\n")
        status = int(lines[0].split(b" ", 2)[1])
        headers = {}
        for line in lines[1:]:
            name, _, value = line.partition(b":")
            headers[name.strip().lower()] = value.strip()
        if headers.get(b"transfer-encoding", b"").lower() == b"chunked":
            body = self._chunked(sock)
        else:
            length = int(headers.get(b"content-length", b"0"))
            while len(self.buffer) < length:
                self._fill(sock)
            body, self.buffer = self.buffer[:length], self.buffer[length:]
        if headers.get(b"connection", b"").lower() == b"close":
            self.close()
        return Answer(status, body)

    def _chunked(self, sock: socket.socket) -> bytes:
        body = b""
        while True:
            while b"\r\n" not in self.buffer:
                self._fill(sock)
            size_line, _, self.buffer = self.buffer.partition(b"\r\n")
            size = int(size_line.split(b";")[0], 16)
            while len(self.buffer) < size + 2:
                self._fill(sock)
            body, self.buffer = body + self.buffer[:size], self.buffer[size + 2 :]
            if size == 0:
                return body

    def close(self) -> None:
        if self.sock is not None:
            self.sock.close()
        self.sock, self.buffer = None, b""


def client(kind: str, base_url: str, headers: dict[str, str], timeout: float) -> Any:
    """A client with `post(path, content=bytes)` and `close()`: `raw` or `httpx`."""
    if kind == "raw":
        return RawClient(base_url, headers, timeout)
    return httpx.Client(
        base_url=base_url,
        headers=headers,
        limits=httpx.Limits(max_connections=1, max_keepalive_connections=1),
        timeout=timeout,
    )
