"""Forty connections without a key send their request's head and then trickle its body, a byte
a second, at the real web server (granian, one worker of four threads): the hot calls with no
key, one that cannot be a key, a made-up key or a wrong secret, and GitHub deliveries without a
signature. Each is refused on its headers and counted against its address, so none holds a
thread while its body trickles, and a keyed call sent while they hang is answered before any of
their bodies has finished (issue 33, item 4). Judged by the order of events, never by a time:
before the fix the keyed call waited behind the slow bodies, answered only once some had
finished (or not at all)."""

from __future__ import annotations

import json
import select
import socket
import threading
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from django.conf import settings

from hands import services as hand_services
from hands.models import Hand
from leases.models import AddressRefusal
from tests.reliability.live import WebServer, database_url, server_env

pytestmark = [pytest.mark.hostile, pytest.mark.slow, pytest.mark.django_db(transaction=True)]

SLOW = 40
BODY_BYTES = 30  # sent one a second: a slow body takes this many seconds to finish
TICK_S = 1.0


@dataclass
class SlowBody:
    """One connection that sends its head, then its body a byte per tick until it is answered."""

    label: str
    sock: socket.socket
    sent: int = 0
    finished_at: float | None = None  # when the last byte of the body was sent
    answered_at: float | None = None  # when the answer's status line arrived
    status: int | None = None
    received: bytes = b""

    @property
    def open(self) -> bool:
        return self.answered_at is None and self.finished_at is None


def _attacks(real_prefix: str) -> list[tuple[str, str, dict[str, str]]]:
    made_up = f"Bearer gc_{uuid.uuid4().hex[:12]}_{'s' * 43}"
    return [
        ("acquire, no key", "/api/v1/leases/acquire", {}),
        ("acquire, not a key", "/api/v1/leases/acquire", {"Authorization": "Bearer nonsense"}),
        ("renew, made-up key", "/api/v1/leases/renew", {"Authorization": made_up}),
        ("renew-all, made-up key", "/api/v1/leases/renew-all", {"Authorization": made_up}),
        ("report, made-up key", "/api/v1/attempts/1/reports", {"Authorization": made_up}),
        (
            "acquire, wrong secret",
            "/api/v1/leases/acquire",
            {"Authorization": f"Bearer gc_{real_prefix}_{'w' * 43}"},
        ),
        ("delivery, no signature", "/api/v1/integrations/github/1", {}),
        (
            "delivery, no signature's shape",
            "/api/v1/integrations/github/1",
            {"X-Hub-Signature-256": "sha256=nope"},
        ),
    ]


def _open(port: int, label: str, path: str, headers: dict[str, str]) -> SlowBody:
    sock = socket.create_connection(("127.0.0.1", port), timeout=10)
    lines = [
        f"POST {path} HTTP/1.1",
        "Host: 127.0.0.1",
        "Content-Type: application/json",
        f"Content-Length: {BODY_BYTES}",
        *(f"{name}: {value}" for name, value in headers.items()),
    ]
    sock.sendall(("\r\n".join(lines) + "\r\n\r\n{").encode())
    sock.setblocking(False)
    return SlowBody(label, sock, sent=1)


def _read(slow: SlowBody) -> None:
    try:
        chunk = slow.sock.recv(65536)
    except (BlockingIOError, InterruptedError):
        return
    except OSError:
        chunk = b""
    slow.received += chunk
    if b"\r\n" in slow.received and slow.answered_at is None:
        slow.answered_at = time.monotonic()
        slow.status = int(slow.received.split(b"\r\n", 1)[0].split()[1])
    elif not chunk and slow.answered_at is None:
        slow.answered_at = time.monotonic()  # closed without an answer: noted as status None


def _trickle(slow: SlowBody) -> None:
    try:
        slow.sock.send(b" ")
    except (BlockingIOError, InterruptedError):
        return
    except OSError:
        return  # the server closed it: its answer is read by `_read`
    slow.sent += 1
    if slow.sent == BODY_BYTES:
        slow.finished_at = time.monotonic()


def test_forty_slow_bodies_without_keys_do_not_delay_a_keyed_call(
    owner: Hand, tmp_path: Path
) -> None:
    key = hand_services.key_issue(hand=owner, scopes=["leases"], actor="test").plaintext
    env = server_env(database_url(settings.DATABASES["default"]), GC_RATE_LIMIT_PER_MINUTE="0")
    with WebServer(env=env, log=tmp_path / "server.log", workers=1, threads=4) as server:
        attacks = _attacks(key.split("_")[1])
        slow = [_open(server.port, *attacks[n % len(attacks)]) for n in range(SLOW)]
        keyed: dict[str, Any] = {}

        def keyed_call() -> None:
            try:
                response = httpx.post(
                    f"{server.url}/api/v1/leases/acquire",
                    content=json.dumps({"resource": "src/", "ttl_s": 30, "process_id": "p"}),
                    headers={"Authorization": f"Bearer {key}", "Content-Type": "application/json"},
                    timeout=BODY_BYTES * 3,
                )
                keyed["status"] = response.status_code
            except httpx.HTTPError as error:
                keyed["error"] = repr(error)
            keyed["at"] = time.monotonic()

        # Sent while every slow body hangs (each has sent its head and one byte of its body).
        caller = threading.Thread(target=keyed_call)
        caller.start()
        try:
            while caller.is_alive() or any(s.open for s in slow):
                pending = [s for s in slow if s.open]
                if not pending:
                    caller.join(TICK_S)
                    continue
                tick_ends = time.monotonic() + TICK_S
                while (left := tick_ends - time.monotonic()) > 0 and pending:
                    readable, _, _ = select.select([s.sock for s in pending], [], [], left)
                    for s in pending:
                        if s.sock in readable:
                            _read(s)
                    pending = [s for s in pending if s.open]
                for s in pending:
                    _trickle(s)
        finally:
            caller.join(BODY_BYTES * 3)
            for s in slow:
                s.sock.close()
        log = server.tail()

    assert keyed.get("status") == 201, (keyed, log)
    finished = sorted(s.finished_at for s in slow if s.finished_at is not None)
    # The keyed call was answered while the slow bodies hung: none had finished.
    assert not finished or keyed["at"] < finished[0], (
        f"the keyed call was answered after {sum(f < keyed['at'] for f in finished)} slow "
        "bodies had finished"
    )
    # Each slow call was refused on its headers: answered before its body was sent.
    for s in slow:
        assert s.finished_at is None and s.status == 401, (s.label, s.status, s.received[:300])
    # And each was counted against the address (one row per code and minute).
    counted = AddressRefusal.objects.filter(address="127.0.0.1")
    assert sum(row.count for row in counted) == SLOW
    assert {row.code for row in counted} == {"key_invalid", "signature_invalid"}
