"""The hand calls over HTTP: claim, read, report, finish and release, and every refusal."""

from __future__ import annotations

from datetime import datetime

import pytest

from evidence.models import Evidence
from fleet.models import Attempt, Report
from hands import services as hand_services
from leases import clock
from leases.models import Event, Lease, Refusal
from tests.support.api import PR_URL, Api, claim, error_of, finish, refusals, release, report

pytestmark = pytest.mark.django_db


def test_it_tells_a_hand_who_it_is(api_a: Api) -> None:
    response = api_a.get("/me")
    assert response.status_code == 200
    body = response.json()
    assert body["hand"] == "hand-a"
    assert body["workspace"] == "acme"
    assert body["scopes"] == ["work", "leases"]
    assert body["key_prefix"] == api_a.key.split("_")[1]
    assert body["lane"] is None


def test_it_lists_slots_and_filters_open_ones(
    api_a: Api, api_b: Api, run, frozen_clock: datetime
) -> None:
    claim(api_a, run)
    clock.advance(10)
    assert api_b.get(f"/runs/{run.pk}/slots").json() == [
        {"index": 0, "state": "held", "holder": "hand-a", "fence": 1, "expires_in_s": 90},
        {"index": 1, "state": "open", "holder": None, "fence": 0, "expires_in_s": None},
    ]
    assert [s["index"] for s in api_b.get(f"/runs/{run.pk}/slots", {"state": "open"}).json()] == [1]
    error = error_of(api_b.get(f"/runs/{run.pk}/slots", {"state": "busy"}), 400, "validation_error")
    assert "state" in error["fields"]


def test_it_claims_a_slot_with_the_contract_attempt_shape(
    api_a: Api, run, frozen_clock: datetime
) -> None:
    attempt = claim(api_a, run)
    assert attempt["run"] == run.pk
    assert (attempt["slot"], attempt["hand"], attempt["process_id"]) == (0, "hand-a", "host-a:1")
    assert (attempt["state"], attempt["directive"], attempt["fence"]) == ("live", "continue", 1)
    lease = attempt["lease"]
    assert lease["resource"] == f"run/{run.pk}/slot/0"
    assert (lease["fence"], lease["holder"]) == (1, "hand-a")
    assert (lease["heartbeat_interval_s"], lease["grace_s"]) == (100, 60)
    assert lease["server_time"] == "2030-01-01T12:00:00Z"
    assert lease["expires_at"] == "2030-01-01T12:01:40Z"
    assert lease["expires_in_s"] == 100
    assert lease["late_at"] == "2030-01-01T12:01:40Z"
    assert lease["stalled_at"] == "2030-01-01T12:02:10Z"
    assert lease["lost_at"] == "2030-01-01T12:02:40Z"
    assert attempt["claimed_at"] == "2030-01-01T12:00:00Z"
    assert attempt["last_report_at"] is None
    assert (attempt["ended_at"], attempt["end_reason"]) == (None, None)
    stored = Attempt.objects.get(pk=attempt["id"])
    assert (stored.hand.name, stored.fence, stored.end) == ("hand-a", 1, None)
    assert Event.objects.filter(kind="claimed", attempt_id=attempt["id"], fence=1).count() == 1


def test_a_claim_of_a_named_slot_that_is_taken_answers_slot_taken(
    api_a: Api, api_b: Api, run
) -> None:
    claim(api_a, run, slot=1)
    error = error_of(
        api_b.post(f"/runs/{run.pk}/claim", {"process_id": "b:1", "slot": 1}), 409, "slot_taken"
    )
    assert (error["holder"], error["fence"], error["state"]) == ("hand-a", 1, "live")
    assert error["expires_in_s"] > 0
    assert [r.hand for r in refusals("slot_taken")] == ["hand-b"]


def test_a_full_run_answers_no_open_slot(api_a: Api, api_b: Api, run) -> None:
    claim(api_a, run)
    claim(api_a, run, "host-a:2")
    error_of(api_b.post(f"/runs/{run.pk}/claim", {"process_id": "b:1"}), 409, "no_open_slot")
    refusal = Refusal.objects.get(code="no_open_slot")
    assert (refusal.hand, refusal.method, refusal.path) == (
        "hand-b",
        "POST",
        f"/api/v1/runs/{run.pk}/claim",
    )
    assert refusal.key_prefix == api_b.key.split("_")[1]
    assert refusal.workspace_id == run.workspace_id
    assert Attempt.objects.count() == 2


def test_a_closed_run_answers_run_closed(api_a: Api, boss: Api, run) -> None:
    assert boss.patch(f"/runs/{run.pk}", {"state": "closed"}).status_code == 200
    error_of(api_a.post(f"/runs/{run.pk}/claim", {"process_id": "a:1"}), 409, "run_closed")
    assert Attempt.objects.count() == 0


def test_a_claim_without_a_process_id_is_a_validation_error(api_a: Api, run) -> None:
    error = error_of(api_a.post(f"/runs/{run.pk}/claim", {"slot": -1}), 400, "validation_error")
    assert set(error["fields"]) == {"process_id", "slot"}
    assert Attempt.objects.count() == 0
    assert len(refusals("validation_error")) == 1


def test_it_reads_an_attempt_and_its_brief(api_a: Api, run) -> None:
    attempt = claim(api_a, run)
    again = api_a.get(f"/attempts/{attempt['id']}")
    assert again.status_code == 200
    assert again.json()["id"] == attempt["id"]
    brief = api_a.get(f"/attempts/{attempt['id']}/brief").json()
    assert brief["attempt"]["id"] == attempt["id"]
    assert brief["run"] == {
        "id": run.pk,
        "title": "Run",
        "brief": "Do the thing",
        "evidence_required": ["pull_request"],
        "evidence_grades": {},
    }
    assert brief["work_package"]["key"] == run.work_package.key
    assert brief["lane"] == {"slug": "rewalk", "name": "Rewalk"}


def test_a_report_with_the_claims_process_renews_the_lease(
    api_a: Api, run, frozen_clock: datetime
) -> None:
    attempt = claim(api_a, run)
    clock.advance(130)  # late
    assert api_a.get(f"/attempts/{attempt['id']}").json()["state"] == "late"
    response = report(api_a, attempt, kind="progress", message="half way", percent=50)
    assert response.status_code == 200
    body = response.json()
    assert body["renewed"] is True
    assert body["attempt"]["state"] == "live"
    assert body["attempt"]["lease"]["expires_in_s"] == 100
    assert body["attempt"]["progress_percent"] == 50
    assert body["attempt"]["directive"] == "continue"
    stored = Report.objects.get()
    assert (stored.kind, stored.renewed, stored.message, stored.percent) == (
        "progress",
        True,
        "half way",
        50,
    )


def test_a_report_without_a_process_id_is_recorded_but_does_not_renew(
    api_a: Api, run, frozen_clock: datetime
) -> None:
    attempt = claim(api_a, run)
    clock.advance(30)
    body = report(api_a, attempt, process=None, kind="note", message="from a helper").json()
    assert body["renewed"] is False
    assert body["attempt"]["lease"]["expires_in_s"] == 70
    assert Report.objects.get().renewed is False


def test_a_report_from_another_process_is_refused(api_a: Api, run) -> None:
    attempt = claim(api_a, run)
    error = error_of(report(api_a, attempt, process="host-z:9"), 409, "process_mismatch")
    assert "host-a:1" in error["message"]
    assert Report.objects.count() == 0
    assert [r.hand for r in refusals("process_mismatch")] == ["hand-a"]


def test_a_hand_cannot_report_finish_or_release_another_hands_attempt(
    api_a: Api, api_b: Api, run
) -> None:
    attempt = claim(api_a, run)
    error_of(report(api_b, attempt), 403, "not_holder")
    error_of(finish(api_b, attempt), 403, "not_holder")
    error_of(release(api_b, attempt), 403, "not_holder")
    assert [r.hand for r in refusals("not_holder")] == ["hand-b"] * 3
    assert Attempt.objects.get(pk=attempt["id"]).end is None
    assert Report.objects.count() == 0


def test_a_stale_fence_answers_stale_fence_with_the_current_fence(
    api_a: Api, boss: Api, run
) -> None:
    attempt = claim(api_a, run)
    stale = {**attempt, "fence": attempt["fence"] + 5}
    error = error_of(report(api_a, stale), 409, "stale_fence")
    assert error["current_fence"] == 1
    error_of(finish(api_a, stale), 409, "stale_fence")
    error_of(release(api_a, stale), 409, "stale_fence")
    assert len(refusals("stale_fence")) == 3


def test_a_lost_attempt_is_refused_on_every_call(
    api_a: Api, api_b: Api, run, frozen_clock: datetime
) -> None:
    attempt = claim(api_a, run)
    clock.advance(100 + 60 + 1)  # past deadline + grace: lost, with no sweep having run
    assert api_a.get(f"/attempts/{attempt['id']}").json()["state"] == "lost"
    error_of(report(api_a, attempt), 409, "lease_lost")
    error_of(report(api_a, attempt, process=None), 409, "lease_lost")
    error_of(finish(api_a, attempt), 409, "lease_lost")
    error_of(release(api_a, attempt), 409, "lease_lost")
    # Its slot is open at once; the newcomer's claim ends the old tenure for good.
    assert claim(api_b, run, "b:1", slot=0)["fence"] == 2
    error_of(report(api_a, attempt), 409, "lease_lost")
    assert len(refusals("lease_lost")) == 5
    assert Attempt.objects.get(pk=attempt["id"]).end == "lost"
    assert Evidence.objects.count() == 0


def test_it_finishes_with_evidence(api_a: Api, run) -> None:
    attempt = claim(api_a, run)
    response = finish(api_a, attempt)
    assert response.status_code == 200, response.content
    body = response.json()
    assert body["state"] == "finished"
    assert body["ended_at"] is not None
    assert body["summary"] == "ok"
    assert [(e["kind"], e["url"], e["note"]) for e in body["evidence"]] == [
        ("pull_request", PR_URL, "the fix")
    ]
    # The slot is done, not free: its work is never handed out again (issue 17.1).
    assert Lease.objects.get(resource=f"run/{run.pk}/slot/0").status == "retired"
    assert Evidence.objects.get().url == PR_URL
    assert Event.objects.filter(kind="finished", attempt_id=attempt["id"]).count() == 1
    listed = api_a.get(f"/attempts/{attempt['id']}/evidence").json()
    assert [e["url"] for e in listed] == [PR_URL]
    # A retried finish (the answer was lost on the way) answers as the first did.
    again = finish(api_a, attempt)
    assert again.status_code == 200
    assert again.json()["state"] == "finished"
    assert Evidence.objects.count() == 1
    assert Event.objects.filter(kind="finished").count() == 1


def test_finish_without_the_required_evidence_answers_evidence_missing(api_a: Api, run) -> None:
    attempt = claim(api_a, run)
    error = error_of(finish(api_a, attempt, evidence=[]), 422, "evidence_missing")
    assert error["missing"] == ["pull_request"]
    stored = Attempt.objects.get(pk=attempt["id"])
    assert stored.end is None
    assert Lease.objects.get(resource=f"run/{run.pk}/slot/0").status == "held"
    assert refusals("evidence_missing")[0].details == {"missing": ["pull_request"]}


@pytest.mark.parametrize(
    "url",
    ["javascript:alert(1)", "data:text/html,hi", "file:///etc/passwd", "/relative", "ftp://x/y"],
)
def test_an_evidence_url_that_is_not_http_is_refused(api_a: Api, run, url: str) -> None:
    attempt = claim(api_a, run)
    error = error_of(
        finish(api_a, attempt, evidence=[{"kind": "pull_request", "url": url}]),
        400,
        "validation_error",
    )
    assert "evidence[0].url" in error["fields"]
    assert Evidence.objects.count() == 0
    assert Attempt.objects.get(pk=attempt["id"]).end is None


def test_it_releases_with_a_reason_and_the_slot_opens(api_a: Api, api_b: Api, run) -> None:
    attempt = claim(api_a, run, slot=0)
    response = release(api_a, attempt)
    assert response.status_code == 200
    body = response.json()
    assert (body["state"], body["end_reason"]) == ("released", "out of budget")
    assert body["lease"]["expires_at"] is None
    assert Event.objects.filter(kind="released", attempt_id=attempt["id"]).count() == 1
    assert claim(api_b, run, "b:1", slot=0)["fence"] == 2
    error = error_of(
        api_a.post(f"/attempts/{attempt['id']}/release", {"fence": 1, "process_id": "host-a:1"}),
        400,
        "validation_error",
    )
    assert "reason" in error["fields"]


def test_a_paused_hand_reads_the_directive_in_its_heartbeat(api_a: Api, boss: Api, run) -> None:
    attempt = claim(api_a, run)
    response = boss.post(f"/attempts/{attempt['id']}/directive", {"directive": "pause"})
    assert response.status_code == 200
    assert response.json()["directive"] == "pause"
    body = report(api_a, attempt).json()
    assert body["renewed"] is True
    assert body["attempt"]["directive"] == "pause"
    assert Event.objects.filter(kind="directive_set", attempt_id=attempt["id"]).count() == 1


def test_an_attempt_of_another_workspace_is_not_found_and_not_revealed(
    api_a: Api, api_outsider: Api, run
) -> None:
    attempt = claim(api_a, run)
    for response in (
        api_outsider.get(f"/attempts/{attempt['id']}"),
        api_outsider.get(f"/attempts/{attempt['id']}/brief"),
        report(api_outsider, attempt),
        api_outsider.post(f"/runs/{run.pk}/claim", {"process_id": "x:1"}),
        api_outsider.get(f"/runs/{run.pk}/slots"),
    ):
        error = error_of(response, 404, "not_found")
        assert "hand-a" not in error["message"]
    assert Attempt.objects.count() == 1
    assert all(r.workspace_id != run.workspace_id for r in refusals("not_found"))


def test_a_report_costs_a_bounded_number_of_queries(
    api_a: Api, run, django_assert_max_num_queries
) -> None:
    attempt = claim(api_a, run)
    report(api_a, attempt)  # last_used_at was written on the first call of the minute
    # key (1); attempt with its lease, run, lane, slot, hand (1); savepoint/transaction and
    # renew (1-3); report insert (1); attempt update (1).
    with django_assert_max_num_queries(8):
        assert report(api_a, attempt).status_code == 200


def test_it_refuses_a_claim_on_a_key_without_the_work_scope(boss: Api, owner, run) -> None:
    leases_only = Api(hand_services.key_issue(hand=owner, scopes=["leases"], actor="t").plaintext)
    error = error_of(
        leases_only.post(f"/runs/{run.pk}/claim", {"process_id": "a"}), 403, "scope_denied"
    )
    assert error["required_scope"] == "work"
    assert refusals("scope_denied")[0].details == {"required_scope": "work"}


def test_last_report_at_is_the_latest_heartbeat_even_between_records(
    api_a: Api, run, frozen_clock: datetime
) -> None:
    attempt = claim(api_a, run)
    assert report(api_a, attempt).status_code == 200  # on record: the attempt's first
    clock.advance(20)
    beat = report(api_a, attempt)  # within the minute: a renewal without a record
    assert beat.status_code == 200 and beat.json()["renewed"] is True
    latest = frozen_clock.replace(second=20).isoformat().replace("+00:00", "Z")
    assert beat.json()["attempt"]["last_report_at"] == latest
    assert api_a.get(f"/attempts/{attempt['id']}").json()["last_report_at"] == latest
    assert Report.objects.filter(attempt_id=attempt["id"]).count() == 1
    assert Attempt.objects.get(pk=attempt["id"]).last_report_at == frozen_clock


def test_an_attempt_shows_the_interval_and_grace_of_its_tenure(api_a: Api, run) -> None:
    """The lease keeps the run's settings as they were at the claim; an edit of the run
    afterwards (the admin site allows one) governs later tenures, so the attempt shows the
    tenure's own, on every path that answers it."""
    attempt = claim(api_a, run)
    type(run).objects.filter(pk=run.pk).update(heartbeat_interval_s=5, grace_s=2)
    beat = report(api_a, attempt).json()["attempt"]
    progress = report(api_a, attempt, kind="progress", message="m").json()["attempt"]
    read = api_a.get(f"/attempts/{attempt['id']}").json()
    for answer in (beat, progress, read):
        assert (answer["lease"]["heartbeat_interval_s"], answer["lease"]["grace_s"]) == (100, 60)
        assert answer["lease"]["expires_in_s"] > 90
