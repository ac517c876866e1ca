"""`GET /runs?ready=true`: the runs a hand could claim now (open, of an open package, waiting for
nothing, with an open slot), by priority, then age, then id; paginated by its own order; in one
query for the page whatever its size; and a lane-limited key's queue holds only its lane."""

from __future__ import annotations

from typing import Any

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from fleet.models import PlanState, Run, WorkPackage
from leases import clock
from tests.support.api import Api, claim, error_of, finish

pytestmark = pytest.mark.django_db


def ready(api: Api, **params: Any) -> list[int]:
    response = api.get("/runs", {"ready": "true", **params})
    assert response.status_code == 200, response.content
    return [run["id"] for run in response.json()]


def test_the_queue_orders_by_priority_then_age_then_id(plan: Any, boss: Api) -> None:
    late_urgent = plan("late urgent", priority=0)
    normal_old = plan("normal old")
    normal_new = plan("normal new")
    low = plan("low", priority=4)
    urgent_newer = plan("urgent newer", priority=0)
    # Age is the run's own: one created earlier comes first even with a higher id.
    Run.objects.filter(pk=urgent_newer["id"]).update(
        created_at=Run.objects.get(pk=late_urgent["id"]).created_at.replace(year=2020)
    )
    assert ready(boss) == [
        urgent_newer["id"],
        late_urgent["id"],
        normal_old["id"],
        normal_new["id"],
        low["id"],
    ]
    # As before without it (newest first), and with ready=false.
    everything = [run["id"] for run in boss.get("/runs").json()]
    assert everything == [run["id"] for run in boss.get("/runs", {"ready": "false"}).json()]
    assert everything == sorted(everything, reverse=True)
    error_of(boss.get("/runs", {"ready": "yes"}), 400, "validation_error")


def test_the_queue_holds_only_what_can_be_claimed_now(
    plan: Any, boss: Api, api_a: Api, api_b: Api
) -> None:
    build = plan("build", slots=1)
    waiting = plan("waits", depends_on=[build["id"]])
    full = plan("full", slots=1)
    closed = plan("closed")
    plan("done-soon", slots=1)
    boss.patch(f"/runs/{closed['id']}", {"state": "closed"})
    claim(api_b, Run.objects.get(pk=full["id"]), process="host-b:1")
    queue = ready(boss)
    assert build["id"] in queue
    assert waiting["id"] not in queue and full["id"] not in queue and closed["id"] not in queue
    # The dependency done, the waiting run joins the queue, and the done one leaves it.
    attempt = claim(api_a, Run.objects.get(pk=build["id"]))
    assert build["id"] not in ready(boss)  # its one slot is held
    assert finish(api_a, attempt).status_code == 200
    queue = ready(boss)
    assert waiting["id"] in queue and build["id"] not in queue


def test_a_slot_whose_holder_is_lost_is_open_in_the_queue(
    plan: Any, api_b: Api, boss: Api, frozen_clock: Any
) -> None:
    run = plan("short", slots=1, heartbeat_interval_s=10, grace_s=5)
    claim(api_b, Run.objects.get(pk=run["id"]), process="host-b:1")
    assert run["id"] not in ready(boss)
    clock.advance(16)
    assert run["id"] in ready(boss)


def test_a_closed_package_takes_its_runs_out_of_the_queue(
    plan: Any, boss: Api, package: dict[str, Any]
) -> None:
    run = plan("r")
    assert ready(boss) == [run["id"]]
    WorkPackage.objects.filter(pk=package["id"]).update(state=PlanState.CLOSED)
    assert ready(boss) == []


def test_the_queue_pages_by_its_own_order(plan: Any, boss: Api) -> None:
    runs = [plan(f"r{i}", priority=i % 3)["id"] for i in range(7)]
    expected = ready(boss)
    assert sorted(expected) == sorted(runs)
    seen: list[int] = []
    cursor = None
    pages = 0
    while True:
        params = {"ready": "true", "limit": "3", **({"cursor": cursor} if cursor else {})}
        response = boss.get("/runs", params)
        assert response.status_code == 200, response.content
        seen += [run["id"] for run in response.json()]
        pages += 1
        cursor = response.get("X-Next-Cursor")
        if not cursor:
            break
        assert 'rel="next"' in response["Link"] and "ready=true" in response["Link"]
    assert seen == expected and pages == 3
    for bad in ("nope", "WzEsMl0=", "W1tdLCIiLDFd"):
        error_of(boss.get("/runs", {"ready": "true", "cursor": bad}), 400, "validation_error")


def test_the_queue_costs_the_same_queries_for_3_runs_or_23(plan: Any, boss: Api) -> None:
    first = plan("first")
    for i in range(2):
        plan(f"r{i}", depends_on=[first["id"]] if i else [])
    boss.get("/me")  # the key's once-a-minute last_used_at stamp, out of the count
    # The key, the page of runs (readiness, order and dependencies in SQL), their slots.
    with CaptureQueriesContext(connection) as few:
        assert len(ready(boss)) == 2
    for i in range(20):
        plan(f"more{i}", depends_on=[first["id"]] if i % 2 else [], priority=i % 5)
    with CaptureQueriesContext(connection) as many:
        assert len(ready(boss)) == 12
    assert len(many) == len(few) <= 4, [q["sql"] for q in many.captured_queries]
    with CaptureQueriesContext(connection) as listed:
        assert len(boss.get("/runs").json()) == 23
    assert len(listed) == len(few), [q["sql"] for q in listed.captured_queries]
