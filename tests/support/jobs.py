"""Fixtures for the periodic jobs: quiet notifications, a claim through the service, and a real
HTTP receiver for webhooks."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from django.test import override_settings


@pytest.fixture
def quiet_notifications() -> Iterator[None]:
    """Jobs that write events enqueue delivery on commit when Celery workers run; tests that
    call the jobs directly send nothing to a broker unless they ask for it."""
    with override_settings(GC_NOTIFY_ON_COMMIT=False):
        yield


@pytest.fixture
def claim():  # noqa: ANN201
    from fleet.attempts import services as attempt_services

    def claim(hand, run, process: str = "host:1", **kwargs):  # noqa: ANN001, ANN202
        return attempt_services.attempt_claim(
            hand=hand, run_id=run.pk, process_id=process, **kwargs
        )

    return claim


@dataclass
class Receiver:
    url: str
    received: list[tuple[dict[str, str], bytes]] = field(default_factory=list)
    statuses: list[int] = field(default_factory=list)  # answers to give, in order; then 200


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    """A real HTTP server on 127.0.0.1 that records every request."""
    state = Receiver(url="")

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802 - the stdlib's name
            body = self.rfile.read(int(self.headers["Content-Length"]))
            state.received.append(({k.lower(): v for k, v in self.headers.items()}, body))
            status = state.statuses.pop(0) if state.statuses else 200
            answer = b"thanks" if status < 300 else b"try later"
            self.send_response(status)
            self.send_header("Content-Length", str(len(answer)))
            self.end_headers()
            self.wfile.write(answer)

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    state.url = f"http://127.0.0.1:{server.server_port}/hooks/gc"
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    yield state
    server.shutdown()
    server.server_close()
