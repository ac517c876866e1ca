"""A small WSGI application for the gunicorn worker's tests: answers of every framing HTTP/1.1
has (a known length, chunked, no body) without Django."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from typing import Any


def application(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
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
