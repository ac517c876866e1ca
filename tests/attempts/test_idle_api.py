"""Idle over HTTP: a run's progress timeout and idle directive (create, update, refuse), and the
idle flag on the attempt views (`GET /attempts`, `?idle=`, `/attempts/<id>`)."""

from __future__ import annotations

from datetime import datetime

import pytest

from fleet.attempts.idle_sweep import attempts_flag_idle
from fleet.models import Run
from leases import clock
from tests.support.api import Api, claim, error_of, report

pytestmark = pytest.mark.django_db


def new_run(boss: Api, **body) -> dict:  # noqa: ANN003
    package = boss.post("/lanes/rewalk/work-packages", {"title": "T", "key": "k"}).json()
    response = boss.post(
        f"/work-packages/{package['id']}/runs",
        {"title": "R", "slots": 2, "heartbeat_interval_s": 100, "grace_s": 60, **body},
    )
    assert response.status_code == 201, response.content
    return response.json()


def test_a_run_takes_and_changes_its_idle_settings(lane, boss: Api) -> None:  # noqa: ANN001
    plain = new_run(boss)
    assert (plain["progress_timeout_s"], plain["idle_directive"]) == (None, "none")
    run = new_run(boss, progress_timeout_s=600, idle_directive="pause")
    assert (run["progress_timeout_s"], run["idle_directive"]) == (600, "pause")
    changed = boss.patch(
        f"/runs/{run['id']}", {"progress_timeout_s": None, "idle_directive": "stop"}
    )
    assert changed.status_code == 200, changed.content
    assert (changed.json()["progress_timeout_s"], changed.json()["idle_directive"]) == (
        None,
        "stop",
    )
    assert changed.json()["state"] == "open"
    both = boss.patch(f"/runs/{run['id']}", {"progress_timeout_s": 120, "state": "closed"})
    assert (both.json()["progress_timeout_s"], both.json()["state"]) == (120, "closed")
    row = Run.objects.get(pk=run["id"])
    assert (row.progress_timeout_s, row.idle_directive, row.state) == (120, "stop", "closed")


@pytest.mark.parametrize(
    "body",
    [
        {"progress_timeout_s": 59},
        {"progress_timeout_s": 7 * 86400 + 1},
        {"progress_timeout_s": "600"},
        {"progress_timeout_s": True},
        {"idle_directive": "continue"},
        {},
    ],
)
def test_it_refuses_bad_idle_settings_and_changes_nothing(lane, boss: Api, body) -> None:  # noqa: ANN001
    run = new_run(boss, progress_timeout_s=600)
    error_of(boss.patch(f"/runs/{run['id']}", body), 400, "validation_error")
    assert Run.objects.get(pk=run["id"]).progress_timeout_s == 600
    if body:
        package = run["work_package"]
        error_of(
            boss.post(f"/work-packages/{package}/runs", {"title": "x", **body}),
            400,
            "validation_error",
        )


def test_the_attempt_views_show_the_idle_flag_and_filter_by_it(
    boss: Api, api_a: Api, api_b: Api, make_run, frozen_clock: datetime
) -> None:
    run = make_run(slots=2, heartbeat_interval_s=100, grace_s=60, progress_timeout_s=60)
    quiet, busy = claim(api_a, run), claim(api_b, run, process="host-b:1")
    assert quiet["idle"] is False and quiet["progress_timeout_s"] == 60
    clock.advance(61)
    report(api_b, busy, process="host-b:1", kind="progress", percent=10)
    report(api_a, quiet)
    attempts_flag_idle()
    one = boss.get(f"/attempts/{quiet['id']}").json()
    assert (one["idle"], one["idle_since"], one["last_progress_at"]) == (
        True,
        "2030-01-01T12:01:01Z",
        None,
    )
    listed = {a["id"]: a["idle"] for a in boss.get("/attempts").json()}
    assert listed == {quiet["id"]: True, busy["id"]: False}
    assert [a["id"] for a in boss.get("/attempts", {"idle": "true"}).json()] == [quiet["id"]]
    assert [a["id"] for a in boss.get("/attempts", {"idle": "false"}).json()] == [busy["id"]]
    error_of(boss.get("/attempts", {"idle": "maybe"}), 400, "validation_error")
    # The hand reads it too.
    assert api_a.get(f"/attempts/{quiet['id']}").json()["idle"] is True


def test_listing_idle_attempts_costs_the_same_queries_however_many(
    boss: Api, owner, make_run, django_assert_num_queries, frozen_clock
) -> None:  # noqa: ANN001
    from fleet.attempts import services as attempt_services

    run = make_run(slots=8, heartbeat_interval_s=100, grace_s=60, progress_timeout_s=60)
    for i in range(8):
        attempt_services.attempt_claim(hand=owner, run_id=run.pk, process_id=f"p{i}")
    clock.advance(61)
    boss.get("/me")
    # The key and its hand; the clock; the page (attempts with their leases, runs, hands).
    with django_assert_num_queries(3):
        assert len(boss.get("/attempts", {"idle": "true"}).json()) == 8
