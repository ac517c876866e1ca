"""A small WSGI application for the gunicorn worker's tests: answers of every framing HTTP/1.1
has (a known length, chunked, no body) without Django, behind a stand-in for the hot path that
the worker's front door serves."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterable
from typing import Any


def plain_application(
    environ: dict[str, Any], start_response: Callable[..., Any]
) -> Iterable[bytes]:
    path = environ["PATH_INFO"]
    body = environ["wsgi.input"].read()
    if path == "/echo":
        answer = b"echo:" + body
        start_response(
            "200 OK", [("Content-Type", "text/plain"), ("Content-Length", str(len(answer)))]
        )
        return [answer]
    if path == "/parts":
        # A known length, written in two pieces.
        start_response("200 OK", [("Content-Type", "text/plain"), ("Content-Length", "10")])
        return [b"01234", b"56789"]
    if path == "/chunked":
        start_response("200 OK", [("Content-Type", "text/plain")])
        return [b"alpha-", b"beta-", b"gamma"]
    if path == "/empty":
        start_response("204 No Content", [])
        return []
    if path == "/slow":
        time.sleep(float(environ.get("QUERY_STRING") or "0.2"))
        start_response("200 OK", [("Content-Type", "text/plain"), ("Content-Length", "4")])
        return [b"slow"]
    start_response("404 Not Found", [("Content-Length", "0")])
    return []


# What the front door carries to the application when the hot path leaves a call to it.
COUNTED = "test.counted"
TRIED = "test.tried"


class HotPathStandIn:
    """What the front door asks of an application, as `fleet.hotpath.HotPath` offers it. POSTs
    under /hot/ are its calls: /hot/echo it answers itself, with the environ it was given;
    /hot/refuse it counts and leaves to the application, like a refused renewal."""

    carried = (COUNTED, TRIED)

    def __init__(self, app: Callable[..., Iterable[bytes]]) -> None:
        self.app = app

    def serves(self, path: str) -> bool:
        return path.startswith("/hot/")

    def respond(self, environ: dict[str, Any]) -> tuple[str, list[tuple[str, str]], bytes] | None:
        if environ["REQUEST_METHOD"] != "POST" or not self.serves(environ["PATH_INFO"]):
            return None
        environ[TRIED] = True
        environ[COUNTED] = environ.get(COUNTED, 0) + 1
        if environ["PATH_INFO"] != "/hot/echo":
            return None
        # gunicorn's own path gives every request an early-hints callback; the front door not.
        via = "gunicorn" if "wsgi.early_hints" in environ else "front door"
        text = {k: v for k, v in environ.items() if type(v) is str}
        body = json.dumps(
            {"via": via, "body": environ["wsgi.input"].read().decode(), "environ": text}
        ).encode()
        headers = [("Content-Type", "application/json"), ("Content-Length", str(len(body)))]
        return "200 OK", headers, body

    def __call__(
        self, environ: dict[str, Any], start_response: Callable[..., Any]
    ) -> Iterable[bytes]:
        answered = None if environ.get(TRIED) else self.respond(environ)
        if answered is None:
            return self.app(environ, start_response)
        status, headers, body = answered
        start_response(status, headers)
        return [body]


def _refusals(app: Callable[..., Iterable[bytes]]) -> Callable[..., Iterable[bytes]]:
    """The application's answer to a call the hot path left to it: what it was carried."""

    def application(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        if environ["PATH_INFO"] != "/hot/refuse":
            return app(environ, start_response)
        body = json.dumps({"counted": environ.get(COUNTED), "tried": environ.get(TRIED, False)})
        body = body.encode()
        start_response("409 Conflict", [("Content-Length", str(len(body)))])
        return [body]

    return application


application = HotPathStandIn(_refusals(plain_application))
