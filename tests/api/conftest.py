"""HTTP fixtures: a supervisor, two hands and an outsider, each calling with its own key."""

from __future__ import annotations

import json
from typing import Any

import pytest
from django.test import Client

from fleet.models import Run
from hands import services as hand_services
from hands.models import Hand, Workspace
from leases.models import Refusal

API = "/api/v1"
PR_URL = "https://github.com/acme/app/pull/7"


class Api:
    """One caller: a test client that sends its key and JSON, and reads JSON back. Every call
    goes the one way production does (a hot call through its view in leasing/hot.py)."""

    def __init__(self, key: str | None, hand: Hand | None = None) -> None:
        self.client = Client()
        self.key = key
        self.hand = hand

    def _headers(self, headers: dict[str, str] | None) -> dict[str, str]:
        out = {"Authorization": f"Bearer {self.key}"} if self.key else {}
        out.update(headers or {})
        return out

    def get(self, path: str, params: dict[str, Any] | None = None, **headers: str) -> Any:
        return self.client.get(API + path, params or {}, headers=self._headers(headers))

    def post(self, path: str, body: Any = None, headers: dict[str, str] | None = None) -> Any:
        return self.client.post(
            API + path,
            data=json.dumps({} if body is None else body),
            content_type="application/json",
            headers=self._headers(headers),
        )

    def patch(self, path: str, body: Any) -> Any:
        return self.client.patch(
            API + path,
            data=json.dumps(body),
            content_type="application/json",
            headers=self._headers(None),
        )


def error_of(response: Any, status: int, code: str) -> dict[str, Any]:
    """The uniform error body, after checking the status, the code and the request id."""
    assert response.status_code == status, response.content
    body = response.json()
    assert set(body) == {"error"}, body
    error = body["error"]
    assert error["code"] == code, error
    assert error["message"]
    assert error["request_id"] == response["X-Request-ID"]
    return error


def refusals(code: str) -> list[Refusal]:
    return list(Refusal.objects.filter(code=code).order_by("id"))


def mint(hand: Hand, scopes: list[str], **kwargs: Any) -> str:
    return hand_services.key_issue(hand=hand, scopes=scopes, actor="test", **kwargs).plaintext


@pytest.fixture
def boss(workspace: Workspace) -> Api:
    hand, _ = hand_services.hand_create(workspace=workspace, name="boss")
    return Api(mint(hand, hand_services.ALL_SCOPES), hand)


@pytest.fixture
def api_a(owner: Hand) -> Api:
    return Api(mint(owner, ["work", "leases"]), owner)


@pytest.fixture
def api_b(teammate: Hand) -> Api:
    return Api(mint(teammate, ["work", "leases"]), teammate)


@pytest.fixture
def api_outsider(outsider: Hand) -> Api:
    return Api(mint(outsider, hand_services.ALL_SCOPES), outsider)


@pytest.fixture
def anonymous() -> Api:
    return Api(None)


@pytest.fixture
def run(make_run: Any) -> Run:
    return make_run(heartbeat_interval_s=100, grace_s=60, evidence_required=["pull_request"])
