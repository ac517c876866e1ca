"""The production web server as configured (`python -m groundcontrol.server`): it binds loopback
unless told otherwise, and a client that sends its headers slowly is cut off while everyone else
is answered. Real processes on 127.0.0.1 only, each bounded in time."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from django.core.exceptions import ImproperlyConfigured

from groundcontrol import embedded_postgres, server
from tests.support.processes import ROOT, free_port, laptop_env, manage, stop, wait_until_serving


def _clean(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in (
        "GC_BIND",
        "PORT",
        "WEB_CONCURRENCY",
        "GC_WEB_THREADS",
        "GC_WEB_HEADER_TIMEOUT_S",
        "GC_WEB_GRACEFUL_TIMEOUT_S",
        "GC_WEB_ACCESS_LOG",
        "GC_WEB_LOG_LEVEL",
    ):
        monkeypatch.delenv(name, raising=False)


def test_it_binds_loopback_on_port_8000_unless_told_otherwise(monkeypatch) -> None:
    _clean(monkeypatch)
    assert server.bind_address() == ("127.0.0.1", 8000)
    monkeypatch.setenv("PORT", "9001")
    assert server.bind_address() == ("127.0.0.1", 9001)
    monkeypatch.setenv("GC_BIND", "0.0.0.0:8080")
    assert server.bind_address() == ("0.0.0.0", 8080)
    monkeypatch.setenv("GC_BIND", "[::1]:8081")
    assert server.bind_address() == ("::1", 8081)


@pytest.mark.parametrize(
    "raw", ["8000", "localhost", "127.0.0.1:", ":8000", "127.0.0.1:70000", "127.0.0.1:http"]
)
def test_it_refuses_a_malformed_bind(monkeypatch, raw: str) -> None:
    _clean(monkeypatch)
    monkeypatch.setenv("GC_BIND", raw)
    with pytest.raises(ImproperlyConfigured, match="GC_BIND"):
        server.bind_address()


def test_its_defaults_time_out_slow_headers_and_bound_the_threads(monkeypatch) -> None:
    _clean(monkeypatch)
    options = server.options()
    assert (options["address"], options["port"]) == ("127.0.0.1", 8000)
    assert options["http1_settings"].header_read_timeout == 10_000
    assert options["blocking_threads"] == 12
    assert options["respawn_failed_workers"] is True
    assert options["http"] == "1" and options["interface"] == "wsgi"
    monkeypatch.setenv("GC_WEB_HEADER_TIMEOUT_S", "61")
    with pytest.raises(ImproperlyConfigured, match="GC_WEB_HEADER_TIMEOUT_S"):
        server.options()
    monkeypatch.setenv("GC_WEB_HEADER_TIMEOUT_S", "2.5")
    monkeypatch.setenv("GC_WEB_THREADS", "0")
    with pytest.raises(ImproperlyConfigured, match="GC_WEB_THREADS"):
        server.options()
    monkeypatch.setenv("GC_WEB_THREADS", "3")
    options = server.options()
    assert options["http1_settings"].header_read_timeout == 2_500
    assert options["blocking_threads"] == 3


def _listening_addresses(port: int) -> set[str]:
    """The local addresses of the sockets listening on `port` (/proc/net/tcp and tcp6)."""
    found = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            local, state = line.split()[1], line.split()[3]
            address, _, hex_port = local.partition(":")
            if state == "0A" and int(hex_port, 16) == port:  # 0A: LISTEN
                found.add(address)
    return found


@pytest.fixture(scope="module")
def laptop(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[dict[str, str], str]]:
    """A migrated laptop install (the embedded PostgreSQL) with a supervisor key, and the
    environment to serve it: one for the module, each test's server its own."""
    var = tmp_path_factory.mktemp("laptop")
    env, _ = laptop_env(var, stopped_by_caller=True)
    try:
        for name in ("GC_BIND", "GC_WEB_THREADS", "WEB_CONCURRENCY", "GC_WEB_HEADER_TIMEOUT_S"):
            env.pop(name, None)
        manage(env, "migrate", "--noinput", "-v", "0")
        made = manage(
            env,
            "bootstrap",
            "--workspace",
            "web",
            "--username",
            "admin",
            "--password",
            "web-test-password-1",
            "--json",
        )
        yield env, json.loads(made)["supervisor_key"]
    finally:
        embedded_postgres.stop(var)


def _serve(env: dict[str, str], port: int, **extra: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "-m", "groundcontrol.server"],
        cwd=ROOT,
        env={**env, "PORT": str(port), **extra},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )


def test_the_server_listens_on_loopback_only_by_default(laptop) -> None:
    env, _ = laptop
    port = free_port()
    web = _serve(env, port, WEB_CONCURRENCY="1", GC_WEB_THREADS="2")
    try:
        wait_until_serving(f"http://127.0.0.1:{port}/healthz", web, timeout=30)
        # 0100007F is 127.0.0.1 in /proc's byte order; nothing else listens on the port.
        assert _listening_addresses(port) == {"0100007F"}
    finally:
        stop(web)


def _slow_header_client(port: int, line_every_s: float, give_up_s: float, out: list) -> None:
    """Send a request head one header line every `line_every_s`, never finishing it; record
    after how long the server closed the connection (None if it never did within give_up_s)."""
    started = time.monotonic()
    with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
        sock.sendall(b"GET /api/v1/me HTTP/1.1\r\nHost: 127.0.0.1\r\n")
        sock.settimeout(line_every_s)
        n = 0
        while time.monotonic() - started < give_up_s:
            try:
                if sock.recv(4096) == b"":
                    out.append(time.monotonic() - started)
                    return
            except TimeoutError:
                pass
            except OSError:
                out.append(time.monotonic() - started)
                return
            try:
                sock.sendall(f"X-Slow-{n}: y\r\n".encode())
            except OSError:
                out.append(time.monotonic() - started)
                return
            n += 1
    out.append(None)


def test_slow_header_connections_are_cut_off_and_others_answered_meanwhile(laptop) -> None:
    env, key = laptop
    port = free_port()
    # One worker with two threads against twenty slow clients: were a slow head to hold a
    # thread, nobody else would be answered.
    web = _serve(env, port, WEB_CONCURRENCY="1", GC_WEB_THREADS="2", GC_WEB_HEADER_TIMEOUT_S="2")
    try:
        base = f"http://127.0.0.1:{port}"
        wait_until_serving(f"{base}/healthz", web, timeout=30)
        closed: list[float | None] = []
        slow = [
            threading.Thread(target=_slow_header_client, args=(port, 0.5, 8.0, closed))
            for _ in range(20)
        ]
        for thread in slow:
            thread.start()
        time.sleep(0.5)  # every slow client is connected and sending
        took = []
        with httpx.Client(base_url=base, headers={"Authorization": f"Bearer {key}"}) as api:
            for _ in range(5):
                started = time.monotonic()
                me = api.get("/api/v1/me", timeout=3)
                took.append(time.monotonic() - started)
                assert me.status_code == 200, me.text
                time.sleep(0.2)
        for thread in slow:
            thread.join(15)
        assert not any(thread.is_alive() for thread in slow)
    finally:
        stop(web)
    assert max(took) < 1.5, took
    # Each slow client was cut off at the header timeout (2 s), well before it gave up (8 s).
    assert len(closed) == 20 and None not in closed, closed
    assert all(1.5 <= seconds <= 4.0 for seconds in closed), closed


# --- Connection: close after an answer that leaves its body unread (apikit/api.py) ---------------


class RawConnection:
    """One HTTP/1.1 connection, spoken by hand: what the server says about it, and whether it
    closes it."""

    def __init__(self, port: int) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=10)
        self.buffer = b""
        self.senders: list[threading.Thread] = []

    def send(self, method: str, path: str, body: bytes = b"", **headers: str) -> None:
        lines = [f"{method} {path} HTTP/1.1", "Host: 127.0.0.1"]
        lines += [f"{name.replace('_', '-')}: {value}" for name, value in headers.items()]
        if body and "Content_Length" not in headers:
            lines.append(f"Content-Length: {len(body)}")
        data = ("\r\n".join(lines) + "\r\n\r\n").encode() + body

        def send_all() -> None:
            try:
                self.sock.sendall(data)
            except OSError:
                pass  # the server stopped reading: what the test is about

        # A large body is sent beside the reading, as a client does, so that neither side
        # waits for the other.
        sender = threading.Thread(target=send_all)
        sender.start()
        self.senders.append(sender)

    def response(self) -> tuple[int, dict[str, str], bytes]:
        head = self._read(b"\r\n\r\n")
        status_line, *header_lines = head.decode("latin-1").split("\r\n")
        headers = {}
        for line in header_lines:
            name, _, value = line.partition(":")
            headers[name.strip().lower()] = value.strip()
        if headers.get("transfer-encoding") == "chunked":
            body = b""
            while (size := int(self._read(b"\r\n"), 16)) > 0:
                body += self._exactly(size + 2)[:-2]
            self._read(b"\r\n")  # the (empty) trailer
        else:
            body = self._exactly(int(headers.get("content-length", "0")))
        return int(status_line.split()[1]), headers, body

    def _read(self, until: bytes) -> bytes:
        while until not in self.buffer:
            self._fill()
        found, _, self.buffer = self.buffer.partition(until)
        return found

    def _exactly(self, size: int) -> bytes:
        while len(self.buffer) < size:
            self._fill()
        found, self.buffer = self.buffer[:size], self.buffer[size:]
        return found

    def closed_by_server(self, within_s: float = 5.0) -> bool:
        """True when the server closes the connection within `within_s` (sending nothing more)."""
        deadline = time.monotonic() + within_s
        while (left := deadline - time.monotonic()) > 0:
            self.sock.settimeout(left)
            try:
                chunk = self.sock.recv(65536)
            except ConnectionResetError:
                return True
            except TimeoutError:
                return False
            if not chunk:
                return True
            self.buffer += chunk
            raise AssertionError(f"more after the answer: {self.buffer[:200]!r}")
        return False

    def close(self) -> None:
        for sender in self.senders:
            sender.join(10)
        self.sock.close()

    def _fill(self) -> None:
        chunk = self.sock.recv(65536)
        assert chunk, f"the server closed the connection mid-answer: {self.buffer[:200]!r}"
        self.buffer += chunk


@pytest.fixture
def served(laptop) -> Iterator[tuple[int, str]]:
    env, key = laptop
    port = free_port()
    web = _serve(env, port, WEB_CONCURRENCY="1", GC_WEB_THREADS="2")
    try:
        wait_until_serving(f"http://127.0.0.1:{port}/healthz", web, timeout=30)
        yield port, key
    finally:
        stop(web)


_FORM = "application/x-www-form-urlencoded"


def _acquire_body(resource: str) -> bytes:
    return json.dumps({"resource": resource, "ttl_s": 30, "process_id": "web:1"}).encode()


def test_ordinary_answers_keep_the_connection_open(served) -> None:
    port, key = served
    connection = RawConnection(port)
    try:
        auth = {"Authorization": f"Bearer {key}"}
        calls = [
            ("GET", "/api/v1/me", b"", auth),
            ("POST", "/api/v1/leases/acquire", _acquire_body("keep/1"), auth),
            # A body with a field the endpoint does not know: still read and answered.
            ("POST", "/api/v1/leases/acquire", _acquire_body("keep/2")[:-1] + b', "x": 1}', auth),
            ("GET", "/login/", b"", {}),
            ("GET", "/healthz", b"", {}),
        ]
        for method, path, body, headers in calls:
            extra = {"Content_Type": "application/json"} if body else {}
            connection.send(method, path, body, **headers, **extra)
            status, answer, _ = connection.response()
            assert status < 300 or status == 400, (path, status)
            assert "close" not in answer.get("connection", ""), (path, answer)
        # Still open: the server waits for the next request.
        assert not connection.closed_by_server(within_s=0.5)
    finally:
        connection.close()


@pytest.mark.parametrize(
    ("method", "path", "body", "headers", "status"),
    [
        # A declared length over GC_MAX_BODY_BYTES (256 KiB): refused before a byte is read.
        ("POST", "/api/v1/leases/acquire", b"x" * 300_000, {}, 413),
        # The same with the body withheld: the answer does not wait for it.
        ("POST", "/api/v1/leases/acquire", b"", {"Content_Length": "10000000"}, 413),
        # Refused before the body was parsed: an unknown key, 100 KB of body unread.
        ("POST", "/api/v1/leases/acquire", b" " * 100_000, {"Authorization": "Bearer x"}, 401),
        # A NUL in the path: refused before anything looks at the request.
        ("POST", "/api/v1/leases/acquire%00", b" " * 100_000, {}, 400),
        # A dashboard form without its CSRF cookie: refused before the form is read.
        ("POST", "/login/", b"a=" + b"b" * 300_000, {"Content_Type": _FORM}, 403),
    ],
    ids=["413", "413-unsent", "401", "nul", "csrf"],
)
def test_an_answer_that_leaves_its_body_unread_says_close_and_closes(
    served, method: str, path: str, body: bytes, headers: dict[str, str], status: int
) -> None:
    port, key = served
    headers = {"Authorization": f"Bearer {key}", "Content_Type": "application/json", **headers}
    connection = RawConnection(port)
    try:
        connection.send(method, path, body, **headers)
        answered, answer, content = connection.response()
        assert answered == status, content[:300]
        assert answer.get("connection") == "close", answer
        if status == 413:
            assert json.loads(content)["error"]["code"] == "payload_too_large"
        assert connection.closed_by_server()
    finally:
        connection.close()


@pytest.mark.django_db
def test_the_application_itself_says_close_on_a_413_and_only_on_unread_bodies(owner) -> None:  # noqa: ANN001
    # granian adds `connection: close` of its own to some of these answers, not all (it depends
    # on how much of the body has arrived): the application says it every time.
    from django.test import Client

    from hands import services as hand_services

    key = hand_services.key_issue(hand=owner, scopes=["leases"], actor="test").plaintext
    api = Client(headers={"Authorization": f"Bearer {key}"})
    too_large = api.post("/api/v1/leases/acquire", b"x" * 300_000, content_type="application/json")
    assert too_large.status_code == 413 and too_large["Connection"] == "close"
    granted = api.post("/api/v1/leases/acquire", _acquire_body("app/1"), "application/json")
    assert granted.status_code == 201 and "Connection" not in granted
    assert "Connection" not in api.get("/api/v1/me")


# --- The embedded default on a fresh machine, and GC_TLS behind a proxy ---------------------------


def test_a_fresh_laptop_serves_with_a_key_of_its_own(tmp_path: Path) -> None:
    env, _ = laptop_env(tmp_path)
    for name in ("SECRET_KEY", "DEBUG", "GC_BIND", "GC_WEB_THREADS", "WEB_CONCURRENCY"):
        env.pop(name, None)
    port = free_port()
    # Two workers start at once on a directory with no key yet.
    web = _serve(env, port, WEB_CONCURRENCY="2", GC_WEB_THREADS="2")
    try:
        base = f"http://127.0.0.1:{port}"
        wait_until_serving(f"{base}/healthz", web, timeout=30)
        manage(env, "migrate", "--noinput", "-v", "0")
        manage(
            env,
            "bootstrap",
            "--workspace",
            "web",
            "--username",
            "admin",
            "--password",
            "web-test-password-1",
        )
        with httpx.Client(base_url=base, timeout=10) as browser:
            form = browser.get("/login/")
            assert form.status_code == 200
            done = browser.post(
                "/login/",
                data={
                    "username": "admin",
                    "password": "web-test-password-1",
                    "csrfmiddlewaretoken": form.cookies["csrftoken"],
                },
            )
            assert (done.status_code, done.headers["location"]) == (302, "/")
            # Sessions are signed with the key: each of these connections may reach either
            # worker, and both know the session, so both have the same key.
            for _ in range(8):
                board = httpx.get(f"{base}/", cookies=browser.cookies, timeout=10)
                assert board.status_code == 200 and "Fleet board" in board.text
    finally:
        stop(web)
    key = tmp_path / "secret_key"
    assert key.stat().st_mode & 0o777 == 0o600 and len(key.read_text().strip()) > 60


def test_with_GC_TLS_it_trusts_the_proxy_sends_hsts_and_secure_cookies(laptop) -> None:
    env, _ = laptop
    port = free_port()
    web = _serve(env, port, WEB_CONCURRENCY="1", GC_WEB_THREADS="2", GC_TLS="1")
    try:
        base = f"http://127.0.0.1:{port}"
        wait_until_serving(f"{base}/healthz", web, timeout=30)
        # What the proxy forwards from an HTTPS client.
        login = httpx.get(f"{base}/login/", headers={"X-Forwarded-Proto": "https"}, timeout=5)
        assert login.status_code == 200
        assert login.headers["strict-transport-security"] == "max-age=31536000; includeSubDomains"
        cookie = login.headers["set-cookie"]
        assert cookie.startswith("csrftoken=") and "; Secure" in cookie
        # Plain HTTP is sent to HTTPS, except the health checks and the scrape.
        plain = httpx.get(f"{base}/login/", timeout=5)
        assert plain.status_code == 301
        assert plain.headers["location"] == f"https://127.0.0.1:{port}/login/"
        assert "strict-transport-security" not in plain.headers
        assert httpx.get(f"{base}/healthz", timeout=5).status_code == 200
        assert httpx.get(f"{base}/readyz", timeout=5).status_code == 200
    finally:
        stop(web)
