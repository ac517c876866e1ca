"""The OpenAPI schema: valid OpenAPI 3, every contract endpoint, every error documented, and
real answers that match the documented shapes."""

from __future__ import annotations

from typing import Any

import jsonschema
import pytest
from drf_spectacular.validation import validate_schema

from tests.support.api import API, Api, json_schema_of

pytestmark = pytest.mark.django_db

CONTRACT = [
    ("get", "/me"),
    ("get", "/runs/{run_id}/slots"),
    ("post", "/runs/{run_id}/claim"),
    ("get", "/attempts/{attempt_id}"),
    ("get", "/attempts/{attempt_id}/brief"),
    ("post", "/attempts/{attempt_id}/reports"),
    ("post", "/attempts/{attempt_id}/finish"),
    ("post", "/attempts/{attempt_id}/release"),
    ("post", "/leases/acquire"),
    ("post", "/leases/renew"),
    ("post", "/leases/release"),
    ("post", "/leases/check"),
    ("get", "/leases"),
    ("get", "/lanes"),
    ("post", "/lanes"),
    ("get", "/lanes/{slug}/work-packages"),
    ("post", "/lanes/{slug}/work-packages"),
    ("get", "/work-packages/{work_package_id}/runs"),
    ("post", "/work-packages/{work_package_id}/runs"),
    ("get", "/runs/{run_id}"),
    ("patch", "/runs/{run_id}"),
    ("get", "/hands"),
    ("post", "/hands"),
    ("post", "/hands/{name}/keys"),
    ("post", "/keys/{prefix}/revoke"),
    ("get", "/attempts"),
    ("post", "/attempts/{attempt_id}/directive"),
    ("post", "/leases/break"),
    ("get", "/refusals"),
    ("get", "/events"),
    ("post", "/attestations"),
    ("get", "/attestations"),
]


@pytest.fixture
def schema(anonymous: Api) -> dict[str, Any]:
    response = anonymous.client.get(f"{API}/schema/", {"format": "json"})
    assert response.status_code == 200
    return response.json()


def test_the_schema_is_valid_openapi_3(schema: dict[str, Any]) -> None:
    assert schema["openapi"].startswith("3.")
    validate_schema(schema)


def test_every_contract_endpoint_is_documented_with_its_errors(schema: dict[str, Any]) -> None:
    paths = schema["paths"]
    for method, path in CONTRACT:
        operation = paths[f"{API}{path}"][method]
        responses = operation["responses"]
        success = [status for status in responses if status.startswith("2")]
        assert success, (method, path)
        assert {"401", "429", "503"} <= set(responses), (method, path)
        if path != "/me":
            assert "403" in responses, (method, path)
        if method in ("post", "patch"):
            assert {"400", "413"} <= set(responses), (method, path)
        for status, response in responses.items():
            if not status.startswith("2"):
                ref = response["content"]["application/json"]["schema"]["$ref"]
                assert ref == "#/components/schemas/Error", (method, path, status)
                assert "`" in response["description"]
        assert operation["security"] == [{"handKey": []}]


def test_the_interactive_docs_are_served(anonymous: Api) -> None:
    response = anonymous.client.get(f"{API}/docs/")
    assert response.status_code == 200
    page = response.content.decode()
    assert "swagger-ui" in page
    # Served by this server (the sidecar), so the docs work without a CDN.
    assert "cdn.jsdelivr.net" not in page
    assert "/static/drf_spectacular_sidecar/swagger-ui-dist/swagger-ui-bundle.js" in page
    asset = anonymous.client.get("/static/drf_spectacular_sidecar/swagger-ui-dist/swagger-ui.css")
    assert asset.status_code == 200


def test_real_answers_match_their_documented_schemas(
    schema: dict[str, Any], api_a: Api, boss: Api, run
) -> None:
    def check(name: str, body: Any) -> None:
        jsonschema.validate(body, json_schema_of(schema, name))

    attempt = api_a.post(f"/runs/{run.pk}/claim", {"process_id": "a"}).json()
    check("ClaimOut", attempt)
    check("BriefOut", api_a.get(f"/attempts/{attempt['id']}/brief").json())
    check(
        "ReportOut",
        api_a.post(
            f"/attempts/{attempt['id']}/reports",
            {"fence": 1, "process_id": "a", "kind": "heartbeat"},
        ).json(),
    )
    check("SlotOut", api_a.get(f"/runs/{run.pk}/slots").json()[0])
    lease = api_a.post("/leases/acquire", {"resource": "r", "ttl_s": 5, "process_id": "a"}).json()
    check("LeaseOut", lease)
    check("ReleasedOut", api_a.post("/leases/release", {"resource": "r", "fence": 1}).json())
    check("MeOut", api_a.get("/me").json())
    check("RunOut", boss.get(f"/runs/{run.pk}").json())
    check("LaneOut", boss.get("/lanes").json()[0])
    check("HandOut", boss.get("/hands").json()[0])
    check("IssuedKeyOut", boss.post("/hands/hand-a/keys", {"scopes": ["work"]}).json())
    check("EventOut", boss.get("/events").json()[0])
    attested = boss.post(
        "/attestations", {"url": "https://x.example/pull/1", "result": "pass", "kind": "ci"}
    )
    check("AttestedOut", attested.json())
    check("AttestationOut", boss.get("/attestations").json()[0])
    check(
        "FinishedOut",
        api_a.post(
            f"/attempts/{attempt['id']}/finish",
            {
                "fence": 1,
                "process_id": "a",
                "evidence": [{"kind": "pull_request", "url": "https://x.example/pull/1"}],
            },
        ).json(),
    )
    api_a.get("/refusals")
    check("RefusalOut", boss.get("/refusals").json()[0])
    check("Error", api_a.get("/refusals").json())


def test_error_bodies_match_the_documented_error_schema(
    schema: dict[str, Any], api_a: Api, api_b: Api, boss: Api, run, anonymous: Api
) -> None:
    error_schema = json_schema_of(schema, "Error")
    attempt = api_a.post(f"/runs/{run.pk}/claim", {"process_id": "a"}).json()
    api_a.post("/leases/acquire", {"resource": "r", "ttl_s": 50, "process_id": "a"})
    bodies = [
        anonymous.get("/me"),
        api_b.post("/leases/acquire", {"resource": "r", "ttl_s": 5, "process_id": "b"}),
        api_a.post(f"/runs/{run.pk}/claim", {"process_id": "a", "slot": 0}),
        api_a.post(
            f"/attempts/{attempt['id']}/reports", {"fence": 1, "process_id": "z", "kind": "note"}
        ),
        api_a.post(
            f"/attempts/{attempt['id']}/finish", {"fence": 9, "process_id": "a", "evidence": []}
        ),
        api_a.post(
            f"/attempts/{attempt['id']}/finish", {"fence": 1, "process_id": "a", "evidence": []}
        ),
        api_a.post("/leases/acquire", {"resource": "", "ttl_s": -1}),
        api_a.get("/events"),
        boss.get("/attempts/0"),
    ]
    codes = []
    for response in bodies:
        jsonschema.validate(response.json(), error_schema)
        codes.append(response.json()["error"]["code"])
    assert codes == [
        "key_invalid",
        "lease_held",
        "slot_taken",
        "process_mismatch",
        "stale_fence",
        "evidence_missing",
        "validation_error",
        "scope_denied",
        "not_found",
    ]
