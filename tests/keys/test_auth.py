"""Key authentication, scopes, lanes and workspaces over HTTP."""

from __future__ import annotations

from datetime import datetime

import pytest

from fleet.models import Attempt
from fleet.plan import services as plan_services
from hands import services as hand_services
from hands.models import HandKey
from leases import clock
from leases.models import AddressRefusal, Refusal
from tests.support.api import API, Api, error_of, mint, refusals

pytestmark = pytest.mark.django_db


def test_a_call_without_a_key_answers_key_invalid_with_no_workspace(anonymous: Api) -> None:
    response = anonymous.get("/me")
    error = error_of(response, 401, "key_invalid")
    assert "Bearer" in error["message"]
    assert response["WWW-Authenticate"].startswith("Bearer")
    # No workspace: counted per client address and minute, not a row per call (issue 18, item 5).
    assert not Refusal.objects.exists()
    counted = AddressRefusal.objects.get()
    assert (counted.code, counted.address, counted.count, counted.key_prefix) == (
        "key_invalid",
        "127.0.0.1",
        1,
        "",
    )
    assert (counted.method, counted.path) == ("GET", "/api/v1/me")


@pytest.mark.parametrize(
    "header",
    ["Bearer", "Token gc_abc_def", "Bearer not-a-key", "Bearer gc_abc", "Bearer gc__secret"],
)
def test_a_malformed_authorization_header_answers_key_invalid(header: str) -> None:
    response = Api(None).client.get("/api/v1/me", headers={"Authorization": header})
    error_of(response, 401, "key_invalid")
    assert not Refusal.objects.exists()
    assert (AddressRefusal.objects.get().code, AddressRefusal.objects.get().count) == (
        "key_invalid",
        1,
    )


def test_an_unknown_key_or_a_wrong_secret_answers_key_invalid(api_a: Api) -> None:
    prefix = api_a.key.split("_")[1]

    def call(key: str, address: str):  # noqa: ANN202
        headers = {"Authorization": f"Bearer {key}"}
        return Api(None).client.get(f"{API}/me", headers=headers, REMOTE_ADDR=address)

    # From two addresses: each is counted in a row of its own, with its call's key prefix.
    error_of(call("gc_000000000000_secret", "10.0.0.1"), 401, "key_invalid")
    error_of(call(f"gc_{prefix}_wrong-secret", "10.0.0.2"), 401, "key_invalid")
    # The prefix is recorded, the secret never is.
    counted = AddressRefusal.objects.filter(code="key_invalid").order_by("address")
    assert [(r.address, r.key_prefix, r.count) for r in counted] == [
        ("10.0.0.1", "000000000000", 1),
        ("10.0.0.2", prefix, 1),
    ]
    assert all("wrong-secret" not in (r.path + r.key_prefix) for r in counted)
    assert not Refusal.objects.exists()


def test_a_revoked_key_is_refused_on_its_very_next_call(api_a: Api, boss: Api) -> None:
    prefix = api_a.key.split("_")[1]
    assert api_a.get("/me").status_code == 200
    response = boss.post(f"/keys/{prefix}/revoke", {"reason": "leaked"})
    assert response.status_code == 200
    assert response.json()["revoked_at"] is not None
    assert response.json()["revoke_reason"] == "leaked"
    error = error_of(api_a.get("/me"), 401, "key_revoked")
    assert error["revoked_at"]
    refusal = Refusal.objects.get(code="key_revoked")
    # The secret matched, so the refusal names the revoked key's hand and workspace.
    assert (refusal.hand, refusal.key_prefix) == ("hand-a", prefix)
    assert refusal.workspace_id == api_a.hand.workspace_id
    assert HandKey.objects.get(prefix=prefix).revoked_by == "boss"


def test_an_expired_key_is_refused_on_the_first_call_past_its_expiry(
    owner, frozen_clock: datetime
) -> None:
    api = Api(mint(owner, ["work"], expires_in_s=60))
    clock.advance(59)
    assert api.get("/me").status_code == 200
    clock.advance(1)
    error_of(api.get("/me"), 401, "key_expired")
    assert Refusal.objects.get().hand == "hand-a"


def test_last_used_at_is_written_at_most_once_a_minute(api_a: Api, frozen_clock: datetime) -> None:
    key = HandKey.objects.get(prefix=api_a.key.split("_")[1])
    assert key.last_used_at is None
    api_a.get("/me")
    key.refresh_from_db()
    assert key.last_used_at == frozen_clock
    clock.advance(59)
    api_a.get("/me")
    key.refresh_from_db()
    assert key.last_used_at == frozen_clock
    later = clock.advance(2)
    api_a.get("/me")
    key.refresh_from_db()
    assert key.last_used_at == later


def test_authentication_is_one_query_once_last_used_at_is_fresh(
    api_a: Api, django_assert_num_queries
) -> None:
    api_a.get("/me")
    # The key joined with its hand, workspace and lane, and the database's time.
    with django_assert_num_queries(1):
        assert api_a.get("/me").status_code == 200


def test_each_scope_guards_its_endpoints(owner, run) -> None:
    work_only = Api(mint(owner, ["work"]))
    cases = [
        (
            work_only.post("/leases/acquire", {"resource": "r", "ttl_s": 5, "process_id": "p"}),
            "leases",
        ),
        (work_only.get("/lanes"), "plan"),
        (work_only.post("/lanes", {"slug": "x"}), "plan"),
        (work_only.post("/hands", {"name": "x"}), "hands"),
        (work_only.get("/attempts"), "supervise"),
        (work_only.get("/refusals"), "supervise"),
        (work_only.get("/events"), "supervise"),
        (work_only.post("/leases/break", {"resource": "r", "reason": "x"}), "supervise"),
        (work_only.patch(f"/runs/{run.pk}", {"state": "closed"}), "plan"),
    ]
    for response, scope in cases:
        assert error_of(response, 403, "scope_denied")["required_scope"] == scope
    assert [r.details["required_scope"] for r in refusals("scope_denied")] == [s for _, s in cases]
    leases_only = Api(mint(owner, ["leases"]))
    error = error_of(
        leases_only.post(f"/runs/{run.pk}/claim", {"process_id": "p"}), 403, "scope_denied"
    )
    assert error["required_scope"] == "work"


def test_a_key_can_grant_only_scopes_it_holds(workspace, owner) -> None:
    minter, _ = hand_services.hand_create(workspace=workspace, name="minter")
    hands_only = Api(mint(minter, ["hands"]))
    error = error_of(
        hands_only.post("/hands/hand-a/keys", {"scopes": ["work", "supervise"]}),
        403,
        "scope_denied",
    )
    assert error["required_scope"] == "work"
    assert HandKey.objects.filter(hand=owner).count() == 0
    # Its own hand: a key for another hand needs `supervise` too (test_no_impersonation.py).
    assert hands_only.post("/hands/minter/keys", {"scopes": ["hands"]}).status_code == 201


def test_a_lane_limited_key_sees_and_claims_only_its_lane(
    workspace, owner, boss: Api, make_run, lane
) -> None:
    other_lane, _ = hand_services.lane_create(workspace=workspace, slug="payments")
    package, _ = plan_services.work_package_create(lane=other_lane, key="p-1", title="P")
    elsewhere = plan_services.run_create(work_package=package, title="Elsewhere", slots=1)
    mine = make_run()
    response = boss.post(
        "/hands/hand-a/keys", {"scopes": ["work", "plan", "supervise"], "lane": "rewalk"}
    )
    assert response.status_code == 201
    assert response.json()["lane"] == "rewalk"
    limited = Api(response.json()["key"])
    assert limited.get("/me").json()["lane"] == "rewalk"
    error_of(limited.post(f"/runs/{elsewhere.pk}/claim", {"process_id": "a"}), 404, "not_found")
    error_of(limited.get(f"/runs/{elsewhere.pk}/slots"), 404, "not_found")
    error_of(limited.get(f"/runs/{elsewhere.pk}"), 404, "not_found")
    error_of(limited.get("/lanes/payments/work-packages"), 404, "not_found")
    assert [lane["slug"] for lane in limited.get("/lanes").json()] == ["rewalk"]
    attempt = limited.post(f"/runs/{mine.pk}/claim", {"process_id": "a"}).json()
    assert attempt["lane"] == "rewalk"
    other = boss.post(f"/runs/{elsewhere.pk}/claim", {"process_id": "boss"}).json()
    assert [a["id"] for a in limited.get("/attempts").json()] == [attempt["id"]]
    error_of(limited.get(f"/attempts/{other['id']}"), 404, "not_found")
    error_of(
        limited.post(f"/attempts/{other['id']}/directive", {"directive": "stop"}), 404, "not_found"
    )
    assert Attempt.objects.get(pk=other["id"]).directive == "continue"


def test_objects_of_another_workspace_answer_not_found(
    api_outsider: Api, boss: Api, run, api_a: Api
) -> None:
    prefix = api_a.key.split("_")[1]
    for response in (
        api_outsider.get(f"/runs/{run.pk}"),
        api_outsider.get("/lanes/rewalk/work-packages"),
        api_outsider.get(f"/work-packages/{run.work_package_id}/runs"),
        api_outsider.post("/hands/hand-b/keys", {"scopes": ["work"]}),
        api_outsider.post(f"/keys/{prefix}/revoke", {"reason": "x"}),
    ):
        error_of(response, 404, "not_found")
    assert api_a.get("/me").status_code == 200
    assert api_outsider.get("/attempts").json() == []
    assert boss.get("/refusals").json() == []


def test_a_lane_limited_key_revokes_only_keys_of_its_own_lane(
    workspace, owner, teammate, boss: Api, lane
) -> None:
    hand_services.lane_create(workspace=workspace, slug="payments")
    # `work` too: a key revokes only keys whose scopes it holds (tests/keys/test_key_authority.py);
    # `supervise`: these are another hand's keys (tests/keys/test_no_impersonation.py).
    limited = Api(
        boss.post(
            "/hands/hand-a/keys", {"scopes": ["hands", "work", "supervise"], "lane": "rewalk"}
        ).json()["key"]
    )
    in_lane = boss.post("/hands/hand-b/keys", {"scopes": ["work"], "lane": "rewalk"}).json()
    other_lane = boss.post("/hands/hand-b/keys", {"scopes": ["work"], "lane": "payments"}).json()
    unlimited = boss.post("/hands/hand-b/keys", {"scopes": ["work"]}).json()
    for key in (other_lane, unlimited):
        error_of(limited.post(f"/keys/{key['prefix']}/revoke", {"reason": "x"}), 404, "not_found")
        assert HandKey.objects.get(prefix=key["prefix"]).revoked_at is None
    response = limited.post(f"/keys/{in_lane['prefix']}/revoke", {"reason": "done"})
    assert response.status_code == 200
    assert HandKey.objects.get(prefix=in_lane["prefix"]).revoked_at is not None
