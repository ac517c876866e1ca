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
from pathlib import Path

import httpx
import pytest
from django.core.exceptions import ImproperlyConfigured

from groundcontrol import server
from tests.jobs.support import ROOT, free_port, laptop_env, manage, stop, wait_until_serving


def _clean(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("GC_BIND", "PORT", "WEB_CONCURRENCY", "GC_WEB_THREADS",
                 "GC_WEB_HEADER_TIMEOUT_S", "GC_WEB_GRACEFUL_TIMEOUT_S", "GC_WEB_ACCESS_LOG",
                 "GC_WEB_LOG_LEVEL"):
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


@pytest.mark.parametrize("raw", ["8000", "localhost", "127.0.0.1:", ":8000", "127.0.0.1:70000",
                                 "127.0.0.1:http"])
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


@pytest.fixture
def laptop(tmp_path: Path) -> tuple[dict[str, str], str]:
    """A migrated SQLite install with a supervisor key, and the environment to serve it."""
    env, _ = laptop_env(tmp_path)
    for name in ("GC_BIND", "GC_WEB_THREADS", "WEB_CONCURRENCY", "GC_WEB_HEADER_TIMEOUT_S"):
        env.pop(name, None)
    manage(env, "migrate", "--noinput", "-v", "0")
    made = manage(env, "bootstrap", "--workspace", "web", "--username", "admin",
                  "--password", "web-test-password-1", "--json")
    return env, json.loads(made)["supervisor_key"]


def _serve(env: dict[str, str], port: int, **extra: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "-m", "groundcontrol.server"],
        cwd=ROOT, env={**env, "PORT": str(port), **extra},
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
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
