"""A Django test client whose requests pass through the hot path first, as in production
(`groundcontrol.wsgi.application` is `HotPath(Django)`), so every API test covers both: a call the
hot path answers, and a call it hands to Django."""

from __future__ import annotations

from typing import Any

from django.core.handlers.wsgi import WSGIRequest
from django.http import HttpResponse
from django.test import Client
from django.test.client import ClientHandler

from fleet.hotpath import HotPath


class HotPathClientHandler(ClientHandler):
    hot_path = HotPath(app=None)  # type: ignore[arg-type]  # only `respond` is used

    def __call__(self, environ: dict[str, Any]) -> HttpResponse:
        answered = self.hot_path.respond(environ)
        if answered is None:
            return super().__call__(environ)
        status, headers, body = answered
        response = HttpResponse(body, status=int(status.split(" ", 1)[0]))
        for name, value in headers:
            response[name] = value
        response.wsgi_request = WSGIRequest(environ)  # type: ignore[attr-defined]
        response.hot_path = True  # type: ignore[attr-defined]  # for the tests that ask
        return response


class HotPathClient(Client):
    def __init__(self, **defaults: Any) -> None:
        super().__init__(**defaults)
        self.handler = HotPathClientHandler(enforce_csrf_checks=False)
