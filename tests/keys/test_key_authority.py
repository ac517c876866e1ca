"""No key outranks or outlives the key that issued it, and a lane-limited key acts only inside its
lane (issue 18, item 2). Each case failed before: a `hands`-only key revoked the all-scope
supervisor key, children outlived their parents, and a lane key reached other lanes."""

from __future__ import annotations

from datetime import timedelta

import pytest

from hands import services as hand_services
from hands.models import HandKey, Lane, Workspace
from leases.models import Event
from tests.support.api import Api, error_of, mint

pytestmark = pytest.mark.django_db


def prefix(api: Api) -> str:
    return api.key.split("_")[1]


def issue(api: Api, hand: str, **body: object) -> dict:
    answer = api.post(f"/hands/{hand}/keys", {"scopes": ["work"], **body})
    assert answer.status_code == 201, answer.json()
    return answer.json()


@pytest.fixture
def keeper(workspace: Workspace) -> Api:
    """A key with only the `hands` scope."""
    hand, _ = hand_services.hand_create(workspace=workspace, name="keeper")
    return Api(mint(hand, ["hands"]), hand)


def test_a_hands_only_key_cannot_revoke_the_supervisor_key(keeper: Api, boss: Api) -> None:
    error = error_of(keeper.post(f"/keys/{prefix(boss)}/revoke", {}), 403, "scope_denied")
    assert "lacks" in error["message"]
    assert HandKey.objects.get(prefix=prefix(boss)).revoked_at is None
    assert boss.get("/me").status_code == 200


def test_a_key_mints_and_revokes_only_keys_within_its_own_scopes(keeper: Api, boss: Api) -> None:
    error_of(keeper.post("/hands/boss/keys", {"scopes": ["work"]}), 403, "scope_denied")
    error_of(keeper.post("/hands/boss/keys", {"scopes": ["hands", "plan"]}), 403, "scope_denied")
    own = keeper.post("/hands/keeper/keys", {"scopes": ["hands"]})
    assert own.status_code == 201 and own.json()["issued_by"] == prefix(keeper)
    child = own.json()["prefix"]
    assert keeper.post(f"/keys/{child}/revoke", {}).status_code == 200


def test_a_child_key_never_outlives_its_parent(workspace: Workspace, boss: Api) -> None:
    parent_hand, _ = hand_services.hand_create(workspace=workspace, name="parent")
    parent = Api(mint(parent_hand, ["hands", "work"], expires_in_s=600, revoke_when_done=True))
    parent_key = HandKey.objects.get(prefix=prefix(parent))
    longer = issue(parent, "parent", expires_in_s=86_400)
    unset = issue(parent, "parent")
    shorter = issue(parent, "parent", expires_in_s=60)
    for answer in (longer, unset):
        key = HandKey.objects.get(prefix=answer["prefix"])
        assert key.expires_at == parent_key.expires_at
        assert key.revoke_when_done, "revoke_when_done is inherited"
    key = HandKey.objects.get(prefix=shorter["prefix"])
    assert key.expires_at < parent_key.expires_at - timedelta(seconds=500)


def test_revoking_a_key_revokes_every_key_it_issued_with_the_reason(
    workspace: Workspace, boss: Api
) -> None:
    middle_hand, _ = hand_services.hand_create(workspace=workspace, name="middle")
    leaf_hand, _ = hand_services.hand_create(workspace=workspace, name="leaf")
    # `supervise`: a key mints keys for another hand only with it (test_no_impersonation.py).
    middle = Api(issue(boss, "middle", scopes=["hands", "work", "supervise"])["key"], middle_hand)
    leaf = Api(issue(middle, "leaf")["key"], leaf_hand)
    sibling = issue(boss, "leaf")  # issued by boss, not by middle: untouched
    assert leaf.get("/me").status_code == 200

    assert boss.post(f"/keys/{prefix(middle)}/revoke", {"reason": "rotated"}).status_code == 200

    for api in (middle, leaf):
        error_of(api.get("/me"), 401, "key_revoked")
    revoked = HandKey.objects.get(prefix=prefix(leaf))
    assert revoked.revoke_reason == f"its issuer {prefix(middle)} was revoked"
    assert revoked.revoked_by == "boss"
    assert HandKey.objects.get(prefix=sibling["prefix"]).revoked_at is None
    reasons = {e.data["prefix"]: e.data["reason"] for e in Event.objects.filter(kind="key_revoked")}
    assert reasons == {
        prefix(middle): "rotated",
        prefix(leaf): f"its issuer {prefix(middle)} was revoked",
    }


def test_a_key_revoked_meanwhile_mints_nothing(workspace: Workspace, boss: Api) -> None:
    """The issuer is checked in the minting transaction, not only when its call came in."""
    issuer = HandKey.objects.select_related("hand").get(prefix=prefix(boss))
    hand_services.key_revoke(workspace_id=workspace.pk, prefix=issuer.prefix, actor="admin")
    before = HandKey.objects.count()
    with pytest.raises(Exception) as refused:
        hand_services.key_issue_by(issuer=issuer, hand=issuer.hand, scopes=["work"])
    assert getattr(refused.value, "code", None) == "key_revoked"
    assert HandKey.objects.count() == before


@pytest.fixture
def other_lane(workspace: Workspace) -> Lane:
    return hand_services.lane_create(workspace=workspace, slug="other", name="Other")[0]


@pytest.fixture
def lane_key(workspace: Workspace, lane: Lane) -> Api:
    hand, _ = hand_services.hand_create(workspace=workspace, name="lane-boss", lane=lane)
    return Api(mint(hand, hand_services.ALL_SCOPES, lane=lane), hand)


def test_a_lane_key_creates_no_lanes_and_no_hands_outside_its_lane(
    lane_key: Api, other_lane: Lane, boss: Api
) -> None:
    error_of(lane_key.post("/lanes", {"slug": "mine-now"}), 403, "scope_denied")
    error_of(lane_key.post("/hands", {"name": "loose"}), 403, "scope_denied")
    # Another lane is not found by a lane key, as if it did not exist (issue 33, item 6).
    error_of(lane_key.post("/hands", {"name": "other", "lane": "other"}), 404, "not_found")
    assert lane_key.post("/hands", {"name": "inside", "lane": "rewalk"}).status_code == 201
    # A name taken outside the lane is not handed back as if it were the lane's.
    error_of(lane_key.post("/hands", {"name": "boss", "lane": "rewalk"}), 403, "scope_denied")


def test_a_lane_key_sees_only_its_lanes_hands_keys_events_and_refusals(
    lane_key: Api, boss: Api, keeper: Api
) -> None:
    issue(boss, "boss")  # a lane-less key of a lane-less hand, with its event
    error_of(keeper.post(f"/keys/{prefix(boss)}/revoke", {}), 403, "scope_denied")
    names = {hand["name"] for hand in lane_key.get("/hands").json()}
    assert names == {"lane-boss"}
    # A hand outside the lane is not found, as if it did not exist: not an empty list of its
    # keys, which said it existed (issue 33, item 6).
    error_of(lane_key.get("/hands/boss/keys"), 404, "not_found")
    events = lane_key.get("/events").json()
    assert events and all(event["hand"] == "lane-boss" for event in events)
    error_of(lane_key.post("/lanes", {"slug": "x"}), 403, "scope_denied")
    refusals = lane_key.get("/refusals").json()
    assert refusals and all(r["hand"] == "lane-boss" for r in refusals)


def test_a_lane_key_breaks_only_its_lanes_leases(
    lane_key: Api, boss: Api, api_a: Api, workspace: Workspace, lane: Lane
) -> None:
    assert (
        api_a.post(
            "/leases/acquire", {"resource": "src/", "ttl_s": 60, "process_id": "p"}
        ).status_code
        == 201
    )
    error_of(
        lane_key.post("/leases/break", {"resource": "src/", "reason": "mine"}), 404, "not_found"
    )
    inside, _ = hand_services.hand_create(workspace=workspace, name="inside", lane=lane)
    insider = Api(mint(inside, ["leases"], lane=lane), inside)
    assert (
        insider.post(
            "/leases/acquire", {"resource": "lane/", "ttl_s": 60, "process_id": "p"}
        ).status_code
        == 201
    )
    broken = lane_key.post("/leases/break", {"resource": "lane/", "reason": "stuck"})
    assert broken.status_code == 200 and broken.json()["holder"] is None
    assert boss.post("/leases/break", {"resource": "src/", "reason": "boss"}).status_code == 200
