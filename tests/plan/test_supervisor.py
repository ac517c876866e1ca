"""Supervisor calls over HTTP: the plan, hands and keys, attempts, refusals and events."""

from __future__ import annotations

from datetime import datetime

import pytest

from fleet.models import Attempt, Run, Slot, WorkPackage
from hands.models import Hand, HandKey, Lane
from leases import clock
from leases.models import Event, Lease
from tests.support.api import Api, error_of, refusals

pytestmark = pytest.mark.django_db


def test_it_creates_and_lists_lanes(boss: Api, workspace) -> None:
    response = boss.post(
        "/lanes",
        {"slug": "payments", "name": "Payments", "heartbeat_interval_s": 30, "grace_s": 10},
    )
    assert response.status_code == 201
    body = response.json()
    assert (body["slug"], body["name"], body["heartbeat_interval_s"], body["grace_s"]) == (
        "payments",
        "Payments",
        30,
        10,
    )
    again = boss.post("/lanes", {"slug": "payments"})
    assert again.status_code == 200
    assert again.json()["id"] == body["id"]
    assert Lane.objects.filter(workspace=workspace).count() == 1
    assert [lane["slug"] for lane in boss.get("/lanes").json()] == ["payments"]
    error = error_of(boss.post("/lanes", {"slug": "Not A Slug!"}), 400, "validation_error")
    assert "slug" in error["fields"]
    bad = boss.post("/lanes", {"slug": "x", "heartbeat_interval_s": 0, "grace_s": 86_401})
    assert set(error_of(bad, 400, "validation_error")["fields"]) == {
        "heartbeat_interval_s",
        "grace_s",
    }


def test_creating_a_work_package_whose_key_exists_returns_the_existing_one(boss: Api, lane) -> None:
    body = {"title": "Daily rewalk 2030-01-01", "key": "daily-2030-01-01", "external_ref": "GC-7"}
    first = boss.post("/lanes/rewalk/work-packages", body)
    assert first.status_code == 201
    package = first.json()
    assert (package["key"], package["lane"], package["external_ref"], package["state"]) == (
        "daily-2030-01-01",
        "rewalk",
        "GC-7",
        "open",
    )
    # A retry after an outage, even without an Idempotency-Key, never makes a second.
    retry = boss.post("/lanes/rewalk/work-packages", body)
    assert retry.status_code == 200
    assert retry.json()["id"] == package["id"]
    assert WorkPackage.objects.filter(lane=lane).count() == 1
    assert [p["id"] for p in boss.get("/lanes/rewalk/work-packages").json()] == [package["id"]]
    error_of(boss.post("/lanes/nowhere/work-packages", body), 404, "not_found")
    error = error_of(
        boss.post("/lanes/rewalk/work-packages", {"key": "k"}), 400, "validation_error"
    )
    assert "title" in error["fields"]


def test_it_creates_a_run_with_its_slots_and_closes_it(
    boss: Api, lane, frozen_clock: datetime
) -> None:
    package = boss.post("/lanes/rewalk/work-packages", {"title": "T", "key": "k"}).json()
    response = boss.post(
        f"/work-packages/{package['id']}/runs",
        {
            "title": "Rewalk the auth module",
            "brief": "# Task\n\nWalk it again.",
            "slots": 2,
            "evidence_required": ["pull_request"],
            "heartbeat_interval_s": 5,
            "grace_s": 4,
        },
    )
    assert response.status_code == 201, response.content
    run = response.json()
    assert (run["slots"], run["heartbeat_interval_s"], run["grace_s"], run["state"]) == (
        2,
        5,
        4,
        "open",
    )
    assert run["evidence_required"] == ["pull_request"]
    assert Slot.objects.filter(run_id=run["id"]).count() == 2
    assert Lease.objects.filter(resource__startswith=f"run/{run['id']}/slot/").count() == 2
    assert boss.get(f"/runs/{run['id']}").json()["title"] == "Rewalk the auth module"
    assert [r["id"] for r in boss.get(f"/work-packages/{package['id']}/runs").json()] == [run["id"]]
    closed = boss.patch(f"/runs/{run['id']}", {"state": "closed"})
    assert closed.status_code == 200
    assert closed.json()["state"] == "closed"
    assert closed.json()["closed_at"] == "2030-01-01T12:00:00Z"
    assert Run.objects.get(pk=run["id"]).state == "closed"
    assert Event.objects.filter(kind="run_closed").count() == 1
    error_of(boss.patch(f"/runs/{run['id']}", {"state": "paused"}), 400, "validation_error")
    too_many = boss.post(f"/work-packages/{package['id']}/runs", {"title": "x", "slots": 1001})
    assert "slots" in error_of(too_many, 400, "validation_error")["fields"]
    error_of(boss.get("/runs/999999"), 404, "not_found")


def test_it_creates_hands_mints_keys_lists_and_revokes_them(
    boss: Api, workspace, lane, frozen_clock: datetime
) -> None:
    response = boss.post("/hands", {"name": "rewalk-3", "lane": "rewalk"})
    assert response.status_code == 201
    assert (response.json()["name"], response.json()["lane"]) == ("rewalk-3", "rewalk")
    assert boss.post("/hands", {"name": "rewalk-3"}).status_code == 200
    assert Hand.objects.filter(workspace=workspace, name="rewalk-3").count() == 1
    issued = boss.post("/hands/rewalk-3/keys", {"scopes": ["work"], "expires_in_s": 3600})
    assert issued.status_code == 201
    key = issued.json()
    assert key["key"].startswith(f"gc_{key['prefix']}_")
    assert (key["hand"], key["scopes"], key["expires_at"]) == (
        "rewalk-3",
        ["work"],
        "2030-01-01T13:00:00Z",
    )
    stored = HandKey.objects.get(prefix=key["prefix"])
    assert key["key"].split("_", 2)[2] not in stored.secret_hash
    assert Event.objects.filter(kind="key_issued", hand="rewalk-3").count() == 1
    assert Api(key["key"]).get("/me").json()["hand"] == "rewalk-3"
    listed = boss.get("/hands/rewalk-3/keys").json()
    assert [k["prefix"] for k in listed] == [key["prefix"]]
    assert "key" not in listed[0]
    assert "rewalk-3" in [h["name"] for h in boss.get("/hands").json()]
    revoked = boss.post(f"/keys/{key['prefix']}/revoke", {"reason": "rotated"})
    assert revoked.status_code == 200
    assert Event.objects.filter(kind="key_revoked").count() == 1
    error_of(Api(key["key"]).get("/me"), 401, "key_revoked")
    error_of(boss.post("/keys/nope/revoke", {}), 404, "not_found")
    error_of(boss.post("/hands/nobody/keys", {"scopes": ["work"]}), 404, "not_found")
    bad = boss.post("/hands/rewalk-3/keys", {"scopes": ["root"]})
    assert "scopes" in error_of(bad, 400, "validation_error")["fields"]


def test_it_lists_attempts_by_state_lane_and_hand(
    boss: Api, api_a: Api, api_b: Api, make_run, frozen_clock: datetime
) -> None:
    fast = make_run(heartbeat_interval_s=10, grace_s=10)
    slow = make_run(heartbeat_interval_s=1000, grace_s=10)
    a = api_a.post(f"/runs/{fast.pk}/claim", {"process_id": "a"}).json()
    b = api_b.post(f"/runs/{slow.pk}/claim", {"process_id": "b"}).json()
    done = api_b.post(f"/runs/{slow.pk}/claim", {"process_id": "b"}).json()
    api_b.post(
        f"/attempts/{done['id']}/release",
        {"fence": done["fence"], "process_id": "b", "reason": "x"},
    )

    def ids(**params: str) -> list[int]:
        response = boss.get("/attempts", params)
        assert response.status_code == 200
        return [attempt["id"] for attempt in response.json()]

    assert ids() == [done["id"], b["id"], a["id"]]
    assert ids(hand="hand-a") == [a["id"]]
    assert ids(lane="rewalk") == [done["id"], b["id"], a["id"]]
    assert ids(state="released") == [done["id"]]
    assert ids(state="live") == [b["id"], a["id"]]
    clock.advance(12)
    assert ids(state="late") == [a["id"]]
    clock.advance(5)
    assert ids(state="stalled") == [a["id"]]
    clock.advance(4)
    assert ids(state="lost") == [a["id"]]
    assert ids(state="live") == [b["id"]]
    error_of(boss.get("/attempts", {"state": "asleep"}), 400, "validation_error")


def test_a_directive_reaches_only_an_open_attempt(boss: Api, api_a: Api, run) -> None:
    attempt = api_a.post(f"/runs/{run.pk}/claim", {"process_id": "a"}).json()
    response = boss.post(f"/attempts/{attempt['id']}/directive", {"directive": "stop"})
    assert response.json()["directive"] == "stop"
    assert Attempt.objects.get(pk=attempt["id"]).directive == "stop"
    error_of(
        boss.post(f"/attempts/{attempt['id']}/directive", {"directive": "x"}),
        400,
        "validation_error",
    )
    api_a.post(
        f"/attempts/{attempt['id']}/release", {"fence": 1, "process_id": "a", "reason": "told to"}
    )
    error_of(
        boss.post(f"/attempts/{attempt['id']}/directive", {"directive": "continue"}),
        409,
        "lease_lost",
    )


def test_it_lists_refusals_filtered_by_code_and_hand(
    boss: Api, api_a: Api, api_b: Api, run
) -> None:
    api_a.get("/attempts/424242")
    api_b.get("/attempts/434343", **{"X-Request-ID": "b-1"})
    api_b.get("/refusals")
    everything = boss.get("/refusals").json()
    assert [(r["code"], r["hand"]) for r in everything] == [
        ("scope_denied", "hand-b"),
        ("not_found", "hand-b"),
        ("not_found", "hand-a"),
    ]
    newest = everything[1]
    assert (newest["method"], newest["path"], newest["request_id"]) == (
        "GET",
        "/api/v1/attempts/434343",
        "b-1",
    )
    assert newest["key_prefix"] == api_b.key.split("_")[1]
    assert newest["at"]
    assert [r["hand"] for r in boss.get("/refusals", {"code": "not_found"}).json()] == [
        "hand-b",
        "hand-a",
    ]
    assert [r["code"] for r in boss.get("/refusals", {"hand": "hand-a"}).json()] == ["not_found"]
    assert (
        boss.get("/refusals", {"code": "not_found", "hand": "hand-b"}).json()[0]["request_id"]
        == "b-1"
    )


def test_it_lists_events_by_kind_and_since(
    boss: Api, api_a: Api, run, frozen_clock: datetime
) -> None:
    attempt = api_a.post(f"/runs/{run.pk}/claim", {"process_id": "a"}).json()
    clock.advance(60)
    api_a.post("/leases/acquire", {"resource": "migrations", "ttl_s": 30, "process_id": "a"})
    events = boss.get("/events").json()
    assert [e["kind"] for e in events[:2]] == ["lease_acquired", "claimed"]
    claimed = events[1]
    assert claimed == {
        "id": claimed["id"],
        "workspace": run.workspace_id,
        "kind": "claimed",
        "at": "2030-01-01T12:00:00Z",
        "actor": "hand-a",
        "actor_key": api_a.key.split("_")[1],  # the key that acted
        "hand": "hand-a",
        "attempt": attempt["id"],
        "resource": f"run/{run.pk}/slot/0",
        "fence": 1,
        "data": {"run": run.pk, "slot": 0, "process_id": "a"},
    }
    assert [e["kind"] for e in boss.get("/events", {"kind": "claimed"}).json()] == ["claimed"]
    since = boss.get("/events", {"since": "2030-01-01T12:00:30Z"}).json()
    assert [e["kind"] for e in since] == ["lease_acquired"]
    after = boss.get("/events", {"since": str(claimed["id"])}).json()
    assert [e["kind"] for e in after] == ["lease_acquired"]
    error_of(boss.get("/events", {"since": "yesterday"}), 400, "validation_error")
    error_of(boss.get("/events", {"kind": "exploded"}), 400, "validation_error")
    assert len(refusals("validation_error")) == 2


def test_lists_paginate_with_cursors_newest_first(boss: Api, workspace) -> None:
    for i in range(5):
        boss.post("/hands", {"name": f"h-{i}"})
    first = boss.get("/hands", {"limit": 2})
    names = [h["name"] for h in first.json()]
    assert names == ["h-4", "h-3"]
    cursor = first["X-Next-Cursor"]
    assert 'rel="next"' in first["Link"]
    second = boss.get("/hands", {"limit": 2, "cursor": cursor})
    assert [h["name"] for h in second.json()] == ["h-2", "h-1"]
    third = boss.get("/hands", {"limit": 2, "cursor": second["X-Next-Cursor"]})
    assert [h["name"] for h in third.json()] == ["h-0", "boss"]
    # The last page says so by carrying no next cursor.
    assert "X-Next-Cursor" not in third
    assert "Link" not in third
    error_of(boss.get("/hands", {"cursor": "garbage!"}), 400, "validation_error")
    error_of(boss.get("/hands", {"limit": 0}), 400, "validation_error")
    # Cursors are opaque, but a made-up one is refused, never a 500 or another page.
    import base64

    for made_up in ("p=abc", "r=1&p=5", "o=5&p=3", f"p={2**64}", "p=-1", "x=1"):
        forged = base64.b64encode(made_up.encode()).decode()
        error_of(boss.get("/hands", {"cursor": forged}), 400, "validation_error")


def test_listing_attempts_costs_the_same_queries_for_one_or_many(
    boss: Api, workspace, make_run, django_assert_num_queries
) -> None:
    from fleet.attempts import services as attempt_services
    from hands import services as hand_services

    run = make_run(slots=6)
    hand, _ = hand_services.hand_create(workspace=workspace, name="solo")
    attempt_services.attempt_claim(hand=hand, run_id=run.pk, process_id="p")
    boss.get("/attempts")
    # key; the database's time; one page of attempts joined with lease, hand, run, lane, slot.
    with django_assert_num_queries(3):
        assert len(boss.get("/attempts").json()) == 1
    for i in range(5):
        attempt_services.attempt_claim(hand=hand, run_id=run.pk, process_id=f"p{i}")
    with django_assert_num_queries(3):
        assert len(boss.get("/attempts").json()) == 6
