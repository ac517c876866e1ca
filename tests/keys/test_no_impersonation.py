"""No key acts as another hand: minting a key for any hand other than the caller's own needs
`supervise` (and, as before, never above the caller's scopes or outside its lane), and every
event and refusal names the key that acted beside the hand. Before, a key with `hands`, `leases`
and `work` but not `supervise` minted itself a key for the supervisor's hand and released that
hand's lease, and minted a lane-less key for a lane's hand and finished its attempt, and the
record named only the impersonated hand."""

from __future__ import annotations

from typing import Any

import pytest

from fleet.models import Attempt, Run
from hands import services as hand_services
from hands.models import Hand, HandKey, Lane, Workspace
from leases.models import Event, Lease, LeaseStatus, Refusal
from tests.support.api import Api, error_of, mint

pytestmark = pytest.mark.django_db


def prefix(api: Api) -> str:
    assert api.key is not None
    return api.key.split("_")[1]


@pytest.fixture
def mallory(workspace: Workspace) -> Api:
    """A key with hands, leases and work, but not supervise."""
    hand, _ = hand_services.hand_create(workspace=workspace, name="mallory")
    return Api(mint(hand, ["hands", "leases", "work"]), hand)


def refused_mint(api: Api, hand: str, body: dict[str, Any]) -> dict[str, Any]:
    before = HandKey.objects.count()
    error = error_of(api.post(f"/hands/{hand}/keys", body), 403, "scope_denied")
    assert error["required_scope"] == "supervise"
    assert HandKey.objects.count() == before
    return error


def test_it_refuses_a_key_minting_itself_the_supervisors_hand(mallory: Api, boss: Api) -> None:
    taken = boss.post("/leases/acquire", {"resource": "deploy", "ttl_s": 600, "process_id": "b"})
    assert taken.status_code == 201
    refused_mint(mallory, "boss", {"scopes": ["leases"]})
    lease = Lease.objects.get(resource="deploy")
    assert (lease.status, lease.holder) == (LeaseStatus.HELD, "boss")


def test_it_refuses_a_lane_less_key_for_a_lanes_hand(
    mallory: Api, workspace: Workspace, lane: Lane, make_run: Any
) -> None:
    worker, _ = hand_services.hand_create(workspace=workspace, name="worker", lane=lane)
    run: Run = make_run(slots=1)
    worker_api = Api(mint(worker, ["work"], lane=lane), worker)
    claimed = worker_api.post(f"/runs/{run.pk}/claim", {"process_id": "w"})
    assert claimed.status_code == 201
    refused_mint(mallory, "worker", {"scopes": ["work"]})
    assert Attempt.objects.get(pk=claimed.json()["id"]).end is None


def test_the_refusal_names_the_calling_key_not_the_hand_it_aimed_at(
    mallory: Api, boss: Api
) -> None:
    error = refused_mint(mallory, "boss", {"scopes": ["work"]})
    assert error["caller"] == {"hand": "mallory", "key_prefix": prefix(mallory)}
    assert "boss" in error["message"] and "supervise" in error["message"]
    row = Refusal.objects.get(code="scope_denied")
    assert (row.hand, row.key_prefix) == ("mallory", prefix(mallory))


def test_a_key_still_mints_for_its_own_hand_within_its_scopes(mallory: Api) -> None:
    minted = mallory.post("/hands/mallory/keys", {"scopes": ["work"]})
    assert minted.status_code == 201, minted.json()
    error_of(mallory.post("/hands/mallory/keys", {"scopes": ["plan"]}), 403, "scope_denied")


def test_a_supervising_key_mints_for_other_hands_and_the_record_names_it(
    workspace: Workspace, boss: Api, owner: Hand
) -> None:
    supervisor, _ = hand_services.hand_create(workspace=workspace, name="sup")
    sup = Api(mint(supervisor, ["hands", "supervise", "work", "leases"]), supervisor)
    minted = sup.post(f"/hands/{owner.name}/keys", {"scopes": ["leases"]})
    assert minted.status_code == 201, minted.json()
    issued = Event.objects.get(kind="key_issued", data__prefix=minted.json()["prefix"])
    assert (issued.actor, issued.actor_key, issued.hand) == ("sup", prefix(sup), owner.name)
    # Still never above its own scopes.
    error = error_of(
        sup.post(f"/hands/{owner.name}/keys", {"scopes": ["plan"]}), 403, "scope_denied"
    )
    assert error["required_scope"] == "plan"
    # What the minted key then does is recorded with its own prefix, beside its hand.
    as_owner = Api(minted.json()["key"], owner)
    assert (
        as_owner.post(
            "/leases/acquire", {"resource": "x", "ttl_s": 60, "process_id": "o"}
        ).status_code
        == 201
    )
    acquired = Event.objects.get(kind="lease_acquired", resource="x")
    assert (acquired.hand, acquired.actor_key) == (owner.name, minted.json()["prefix"])
    listed = boss.get("/events", {"kind": "lease_acquired"}).json()
    assert listed[0]["actor_key"] == minted.json()["prefix"]


def test_a_lane_limited_key_still_mints_only_within_its_lane(
    workspace: Workspace, lane: Lane
) -> None:
    lead, _ = hand_services.hand_create(workspace=workspace, name="lead", lane=lane)
    lead_api = Api(mint(lead, ["hands", "supervise", "work"], lane=lane), lead)
    hand_services.hand_create(workspace=workspace, name="inside", lane=lane)
    hand_services.hand_create(workspace=workspace, name="outside")
    inside = lead_api.post("/hands/inside/keys", {"scopes": ["work"], "lane": "rewalk"})
    assert inside.status_code == 201, inside.json()
    error_of(lead_api.post("/hands/inside/keys", {"scopes": ["work"]}), 403, "scope_denied")
    # A hand outside its lane is not found by it, as if it did not exist (issue 33, item 6).
    error_of(
        lead_api.post("/hands/outside/keys", {"scopes": ["work"], "lane": "rewalk"}),
        404,
        "not_found",
    )


def test_it_refuses_a_key_revoking_another_hands_key(mallory: Api, teammate: Hand) -> None:
    """A revocation ends the key's tenures at once: without `supervise`, revoking another hand's
    key would be a break by another name."""
    victim = Api(mint(teammate, ["work", "leases"]), teammate)
    held = {"resource": "prod/db-migration", "ttl_s": 600, "process_id": "v"}
    assert victim.post("/leases/acquire", held).status_code == 201
    error = error_of(
        mallory.post(f"/keys/{prefix(victim)}/revoke", {"reason": "mine now"}), 403, "scope_denied"
    )
    assert error["required_scope"] == "supervise"
    assert HandKey.objects.get(prefix=prefix(victim)).revoked_at is None
    assert Lease.objects.get(resource="prod/db-migration").status == LeaseStatus.HELD
    # Its own hand's keys it revokes as before.
    own = Api(mint(mallory.hand, ["leases"]), mallory.hand)
    assert mallory.post(f"/keys/{prefix(own)}/revoke", {"reason": "done"}).status_code == 200
