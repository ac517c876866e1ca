"""Hostile input, case by case: oversized bodies, wrong types, huge numbers, unicode and control
characters, resource names with `..` and NUL, very long strings, non-positive TTLs, fences from
the future. Each is answered 400/404/409/413 with the uniform body and writes nothing but its
refusal; none is a 5xx."""

from __future__ import annotations

import json
from typing import Any

import pytest

from leases.models import Event, Lease
from tests.support.api import Api, error_of

pytestmark = [pytest.mark.hostile, pytest.mark.django_db]


def acquire(api: Api, **fields: Any) -> Any:
    body = {"resource": "build", "ttl_s": 30, "process_id": "p:1", **fields}
    return api.post("/leases/acquire", body)


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("resource", "a\x00b"),  # NUL: PostgreSQL text cannot hold it
        ("resource", "line\nbreak"),
        ("resource", "bell\x07"),
        ("resource", "c1\x85control"),
        ("resource", "x" * 513),
        ("resource", ""),
        ("resource", ["src/"]),
        ("resource", None),
        # Not canonical (leases.names; every spelling in tests/leases/test_resource_names.py):
        ("resource", "../../etc/passwd"),
        ("resource", "src/../.."),
        ("resource", "\u202eevil"),
        ("ttl_s", 0),
        ("ttl_s", -5),
        ("ttl_s", 86_401),
        ("ttl_s", 1e308),
        ("ttl_s", "NaN"),
        ("ttl_s", "Infinity"),
        ("wait_s", -1),
        ("wait_s", 61),
        ("process_id", "p" * 201),
        ("process_id", "tab\there"),
        ("process_id", {"nested": 1}),
    ],
)
def test_a_malformed_acquire_is_a_validation_error_that_writes_nothing(
    api_a: Api, field: str, value: Any
) -> None:
    error = error_of(acquire(api_a, **{field: value}), 400, "validation_error")
    assert field in error["fields"], error
    assert not Lease.objects.exists()
    assert not Event.objects.exclude(kind="key_issued").exists()


@pytest.mark.parametrize(
    "resource",
    [
        "a..b/.../.hidden",
        "ünïcødé/文件/🚀",
        "<script>alert(1)</script>",
        "'; DROP TABLE leases_lease; --",
        "a" * 512,
        "%00",
        "src/app.py",
    ],
    ids=["dots-inside", "unicode", "html", "sql", "max-length", "percent-nul", "file"],
)
def test_odd_but_printable_names_are_just_names(api_a: Api, api_b: Api, resource: str) -> None:
    # A resource is an opaque name, never a path on any disk: dots inside segments are letters
    # (`.` and `..` as whole segments are refused, tests/leases/test_resource_names.py).
    granted = acquire(api_a, resource=resource)
    assert granted.status_code == 201, granted.content
    assert granted.json()["resource"] == resource
    assert error_of(acquire(api_b, resource=resource), 409, "lease_held")["resource"] == resource
    assert Lease.objects.get().resource == resource


@pytest.mark.parametrize("fence", [2, 10**6, 2**62, 2**63 - 1])
def test_a_fence_from_the_future_is_stale_and_changes_nothing(api_a: Api, fence: int) -> None:
    acquire(api_a)
    for path in ("/leases/renew", "/leases/release", "/leases/check"):
        body = {"resource": "build", "fence": fence, "process_id": "p:1"}
        if path != "/leases/renew":
            body.pop("process_id")
        error = error_of(api_a.post(path, body), 409, "stale_fence")
        assert error["current_fence"] == 1
    lease = Lease.objects.get()
    assert (lease.fence, lease.status) == (1, "held")


@pytest.mark.parametrize("fence", [-1, 2**63, 10**30, 1.5, None, "one"])
def test_a_fence_that_is_not_a_64_bit_count_is_a_validation_error(api_a: Api, fence: Any) -> None:
    acquire(api_a)
    error = error_of(
        api_a.post("/leases/check", {"resource": "build", "fence": fence}), 400, "validation_error"
    )
    assert "fence" in error["fields"]


def test_huge_numbers_in_plan_and_claims_are_refused(boss: Api, api_a: Api, run) -> None:  # noqa: ANN001
    for body in (
        {"slots": 10**12},
        {"slots": 0},
        {"heartbeat_interval_s": -1},
        {"grace_s": 10**40},
        {"heartbeat_interval_s": 1.5},
    ):
        response = boss.post(f"/work-packages/{run.work_package_id}/runs", {"title": "t", **body})
        assert error_of(response, 400, "validation_error")["fields"], body
    error_of(
        api_a.post(f"/runs/{run.pk}/claim", {"process_id": "p", "slot": 2**70}),
        400,
        "validation_error",
    )
    error_of(api_a.get(f"/runs/{10**30}"), 404, "not_found")
    error_of(api_a.get("/attempts/99999999999999999999999"), 404, "not_found")


def test_very_long_strings_are_refused_with_their_limits(api_a: Api, run) -> None:  # noqa: ANN001
    attempt = api_a.post(f"/runs/{run.pk}/claim", {"process_id": "p"}).json()
    report = api_a.post(
        f"/attempts/{attempt['id']}/reports",
        {"fence": 1, "process_id": "p", "kind": "note", "message": "m" * 2001},
    )
    assert "message" in error_of(report, 400, "validation_error")["fields"]
    release = api_a.post(
        f"/attempts/{attempt['id']}/release", {"fence": 1, "process_id": "p", "reason": "r" * 2001}
    )
    assert "reason" in error_of(release, 400, "validation_error")["fields"]
    assert api_a.get(f"/attempts/{attempt['id']}").json()["state"] == "live"


def test_an_oversized_body_is_413_before_it_is_parsed(api_a: Api) -> None:
    body = json.dumps({"resource": "r", "ttl_s": 5, "process_id": "p", "pad": "x" * 300_000})
    response = api_a.client.post(
        "/api/v1/leases/acquire",
        data=body,
        content_type="application/json",
        headers={"Authorization": f"Bearer {api_a.key}"},
    )
    error_of(response, 413, "payload_too_large")
    assert not Lease.objects.exists()


@pytest.mark.parametrize(
    "raw",
    [
        b"{",
        b"[]",
        b"null",
        b'"string"',
        b"\xff\xfe",
        b'{"resource": "r", "ttl_s": 1e999}',
        b'{"resource": "r\\u0000", "ttl_s": 5, "process_id": "p"}',
        b"{" * 5000 + b"}" * 5000,
    ],
    ids=["open", "array", "null", "string", "not-utf8", "huge-float", "escaped-nul", "deep"],
)
def test_a_body_that_is_not_an_acquire_is_refused_in_the_uniform_body(
    api_a: Api, raw: bytes
) -> None:
    response = api_a.client.post(
        "/api/v1/leases/acquire",
        data=raw,
        content_type="application/json",
        headers={"Authorization": f"Bearer {api_a.key}"},
    )
    assert response.status_code == 400, (raw[:40], response.status_code, response.content)
    assert response.json()["error"]["code"] == "validation_error"
    assert not Lease.objects.exists()


def test_unicode_in_names_and_messages_round_trips(api_a: Api, boss: Api, run) -> None:  # noqa: ANN001
    attempt = api_a.post(f"/runs/{run.pk}/claim", {"process_id": "προcess-🚀"}).json()
    assert attempt["process_id"] == "προcess-🚀"
    report = api_a.post(
        f"/attempts/{attempt['id']}/reports",
        {"fence": 1, "process_id": "προcess-🚀", "kind": "note", "message": "ok ✓ 日本語 \u200b"},
    )
    assert report.status_code == 200
    hand = boss.post("/hands", {"name": "hånd-名前"})
    assert hand.status_code == 201 and hand.json()["name"] == "hånd-名前"


@pytest.mark.parametrize(
    ("field", "value"),
    [("resource", 42), ("ttl_s", "30"), ("ttl_s", True), ("process_id", 7), ("wait_s", "1")],
)
def test_a_value_of_the_wrong_json_type_is_refused_not_coerced(
    api_a: Api, field: str, value: object
) -> None:
    """JSON has types and the API keeps them: no number read as a name, no "30" as seconds."""
    response = acquire(api_a, **{field: value})
    assert field in error_of(response, 400, "validation_error")["fields"]
    assert not Lease.objects.exists()


def test_a_fence_of_the_wrong_json_type_is_refused(api_a: Api) -> None:
    fence = acquire(api_a).json()["fence"]
    for wrong in (str(fence), float(fence), True):
        check = api_a.post("/leases/check", {"resource": "build", "fence": wrong})
        assert "fence" in error_of(check, 400, "validation_error")["fields"], wrong
