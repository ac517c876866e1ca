"""The API's callers (a supervisor, two hands and an outsider, each calling with its own key),
the uniform error body, and the hand's calls as a harness makes them."""

from __future__ import annotations

import copy
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


# The hand's calls, as a harness makes them.

PR = [{"kind": "pull_request", "url": PR_URL, "note": "the fix"}]


def claim(api: Api, run, process: str = "host-a:1", **body) -> dict:
    response = api.post(f"/runs/{run.pk}/claim", {"process_id": process, **body})
    assert response.status_code == 201, response.content
    return response.json()


def report(api: Api, attempt: dict, process: str | None = "host-a:1", **body):
    payload = {"fence": attempt["fence"], "kind": "heartbeat", **body}
    if process is not None:
        payload["process_id"] = process
    return api.post(f"/attempts/{attempt['id']}/reports", payload)


def finish(api: Api, attempt: dict, process: str = "host-a:1", evidence=PR):
    return api.post(
        f"/attempts/{attempt['id']}/finish",
        {"fence": attempt["fence"], "process_id": process, "evidence": evidence, "summary": "ok"},
    )


def release(api: Api, attempt: dict, process: str = "host-a:1"):
    return api.post(
        f"/attempts/{attempt['id']}/release",
        {"fence": attempt["fence"], "process_id": process, "reason": "out of budget"},
    )


def acquire(api: Api, resource: str = "dev-server", ttl: float = 30, **extra):
    body = {"resource": resource, "ttl_s": ttl, "process_id": f"{api.hand.name}:1", **extra}
    return api.post("/leases/acquire", body)


def json_schema_of(schema: dict[str, Any], name: str) -> dict[str, Any]:
    """An OpenAPI 3.0 component as JSON Schema: `nullable` becomes a null type; no extras."""
    components = copy.deepcopy(schema["components"]["schemas"])

    def convert(node: Any) -> Any:
        if isinstance(node, dict):
            node = {key: convert(value) for key, value in node.items()}
            if "$ref" in node:
                node["$ref"] = node["$ref"].replace("#/components/schemas/", "#/$defs/")
            if node.pop("nullable", False):
                if "type" in node:
                    node["type"] = [node["type"], "null"]
                if "enum" in node:
                    node["enum"] = [*node["enum"], None]
                if "allOf" in node:
                    node = {"anyOf": [node, {"type": "null"}]}
            if node.get("type") == "object" and "properties" in node:
                node.setdefault("additionalProperties", False)
            return node
        if isinstance(node, list):
            return [convert(item) for item in node]
        return node

    defs = convert(components)
    return {"$ref": f"#/$defs/{name}", "$defs": defs}
