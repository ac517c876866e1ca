"""Trees, modes and the queue over REST (issue 20)."""

from __future__ import annotations

import pytest

from leases import queue
from tests.support.api import Api

pytestmark = pytest.mark.django_db


def acquire(api: Api, resource: str, **extra):  # noqa: ANN003
    return api.post(
        "/leases/acquire", {"resource": resource, "ttl_s": 60, "process_id": "p1", **extra}
    )


def test_a_directory_lease_denies_a_file_below_it_and_names_itself(api_a: Api, api_b: Api) -> None:
    a, b = api_a, api_b
    assert acquire(a, "src/auth/").status_code == 201
    denied = acquire(b, "src/auth/login.py")
    assert denied.status_code == 409
    error = denied.json()["error"]
    assert error["code"] == "lease_held"
    assert (error["resource"], error["holder"], error["mode"], error["others"]) == (
        "src/auth/",
        "hand-a",
        "exclusive",
        0,
    )
    assert (error["position"], error["ahead"]) == (1, ["hand-a"])
    assert acquire(b, "src/authz.py").status_code == 201


def test_shared_leases_are_granted_side_by_side_with_their_own_fences(
    api_a: Api, api_b: Api
) -> None:
    first = acquire(api_a, "docs/", mode="shared").json()
    second = acquire(api_b, "docs/", mode="shared").json()
    assert (first["mode"], first["fence"], second["fence"]) == ("shared", 1, 2)
    renewed = api_a.post("/leases/renew", {"resource": "docs/", "fence": 1, "process_id": "p1"})
    assert renewed.status_code == 200 and renewed.json()["fence"] == 1
    assert api_a.post("/leases/check", {"resource": "docs/", "fence": 1}).status_code == 200


def test_a_mode_the_contract_does_not_name_is_a_validation_error(api_a: Api) -> None:
    response = acquire(api_a, "x", mode="upgrade")
    assert response.status_code == 400
    assert response.json()["error"]["code"] == "validation_error"


def test_pool_members_are_not_taken_as_resources(api_a: Api) -> None:
    for name in ("pool/ports/8001", "pool"):
        response = acquire(api_a, name)
        assert response.status_code == 400, name
        assert "pool" in response.json()["error"]["message"]


def test_the_queue_is_listed_and_a_wait_that_ends_says_where_it_stood(
    api_a: Api, api_b: Api
) -> None:
    assert acquire(api_a, "tests").status_code == 201
    queue.join(
        workspace_id=api_a.hand.workspace_id,
        resource="tests",
        holder="hand-z",
        process_id="z",
        mode="exclusive",
    )
    listed = api_b.get("/leases/queue", {"resource": "tests"})
    assert listed.status_code == 200
    assert [(w["holder"], w["position"]) for w in listed.json()] == [("hand-z", 1)]
    denied = acquire(api_b, "tests", wait_s=0.2)
    assert denied.status_code == 409
    error = denied.json()["error"]
    assert (error["position"], error["ahead"]) == (2, ["hand-a", "hand-z"])
    # The wait left the line when it ended; its place is kept, dormant, for its ticket.
    assert [w["holder"] for w in api_b.get("/leases/queue").json()] == ["hand-z"]
    assert error["ticket"] and error["ticket_kept_s"] == queue.TICKET_KEEP_S
    assert api_b.get("/leases/queue", {"resource": "a\x00b"}).status_code == 400
