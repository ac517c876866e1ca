"""The hot calls (leasing/hot.py) on PostgreSQL: a renew, an acquire, a renew-all or a report is
answered one way, by its statement (the key checked and the change made together), whatever the
request's shape; a statement that matches nothing is explained (and recorded) from one read of
the key and of the lease or attempt as it stands, never by running the change again; each call
is counted once against the rate limit; and once the statement has matched, nothing runs the
call again."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime, timedelta
from unittest import mock

import psycopg
import pytest
from django.db import DatabaseError, OperationalError
from django.test import override_settings

from fleet.attempts import reports as report_services
from fleet.models import Report
from hands import keys
from hands import selectors as hand_selectors
from hands import services as hand_services
from hands.models import HandKey, Lane
from leases import clock
from leases.models import Event, Lease
from leasing import hot
from tests.support.api import Api, claim, error_of, mint, refusals, report

pytestmark = pytest.mark.django_db


@pytest.fixture
def statements() -> Iterator[mock.MagicMock]:
    """Every hot statement run, counted (`hot.run_statement`)."""
    with mock.patch.object(hot, "run_statement", wraps=hot.run_statement) as run:
        yield run


def ran(statements: mock.MagicMock) -> int:
    """How many statements ran since the last ask, and start counting again."""
    count = statements.call_count
    statements.reset_mock()
    return count


def test_an_acquire_and_a_renewal_are_answered_by_one_statement_each(
    api_a: Api, frozen_clock: datetime, statements: mock.MagicMock
) -> None:
    acquired = api_a.post("/leases/acquire", {"resource": "a/", "ttl_s": 60, "process_id": "p1"})
    assert acquired.status_code == 201 and ran(statements) == 1, acquired.content
    lease = acquired.json()
    assert (lease["resource"], lease["holder"], lease["fence"]) == ("a/", api_a.hand.name, 1)
    assert (lease["state"], lease["mode"], lease["process_id"]) == ("live", "exclusive", "p1")
    assert acquired["Content-Type"] == "application/json" and acquired["Allow"] == "POST, OPTIONS"
    (event,) = Event.objects.filter(kind="lease_acquired")
    assert (event.resource, event.fence, event.hand, event.at) == (
        "a/",
        1,
        api_a.hand.name,
        frozen_clock,
    )
    assert event.data == {"ttl_s": 60.0, "process_id": "p1", "mode": "exclusive"}

    clock.advance(10)
    renewed = api_a.post("/leases/renew", {"resource": "a/", "fence": 1, "process_id": "p1"})
    assert renewed.status_code == 200 and ran(statements) == 1, renewed.content
    body = renewed.json()
    assert (body["fence"], body["state"], body["handoff_requests"]) == (1, "live", [])
    assert body["renewed_at"] == clock.db_now().isoformat().replace("+00:00", "Z")


def test_a_free_resource_is_taken_with_the_next_fence(api_a: Api) -> None:
    body = {"resource": "db/migrate", "ttl_s": 60, "process_id": "p1"}
    assert api_a.post("/leases/acquire", body).json()["fence"] == 1
    released = api_a.post("/leases/release", {**body, "fence": 1, "reason": "done"})
    assert released.status_code == 200, released.content
    again = api_a.post("/leases/acquire", body)
    assert again.status_code == 201
    assert again.json()["fence"] == 2 and again.json()["state"] == "live"
    fences = list(
        Event.objects.filter(kind="lease_acquired", resource="db/migrate").values_list(
            "fence", flat=True
        )
    )
    assert fences == [1, 2]


def test_a_report_is_one_statement_and_kept_as_sent(
    api_a: Api, run, frozen_clock: datetime, statements: mock.MagicMock
) -> None:
    attempt = claim(api_a, run)
    body = {
        "fence": attempt["fence"],
        "process_id": "host-a:1",
        "kind": "progress",
        "message": "half",
        "percent": 50,
        "details": {"step": 2},
    }
    answer = api_a.post(f"/attempts/{attempt['id']}/reports", body)
    assert answer.status_code == 200 and ran(statements) == 1, answer.content
    shown = answer.json()
    assert shown["renewed"] is True and shown["handoff_requests"] == []
    assert shown["attempt"]["id"] == attempt["id"]
    assert shown["attempt"]["progress_percent"] == 50
    assert shown["attempt"]["last_report_at"] == frozen_clock.isoformat().replace("+00:00", "Z")
    (row,) = Report.objects.filter(attempt_id=attempt["id"])
    assert (row.kind, row.message, row.percent, row.details) == (
        "progress",
        "half",
        50,
        {"step": 2},
    )
    assert (row.renewed, row.process_id, row.at) == (True, "host-a:1", frozen_clock)


def test_a_bare_heartbeat_is_recorded_once_a_minute_and_renews_between_its_records(
    api_a: Api, boss: Api, run, frozen_clock: datetime, statements: mock.MagicMock
) -> None:
    """A heartbeat's answer is read straight off its row (`fleet.api.presenters.report_row_json`);
    the first of each minute also writes the record."""
    attempt = claim(api_a, run)
    instants = {
        # A renewal at the claim's own instant is no report: only the record says there was one.
        "recorded (the first), at the claim's instant": 0,
        "renewed only, within the minute": 10,
        "paused by its supervisor": 20,
        "recorded again, a minute on": 80,
    }
    for label, seconds in instants.items():
        clock.freeze(frozen_clock + timedelta(seconds=seconds))
        if label.startswith("paused"):
            directive = {"directive": "pause"}
            assert boss.post(f"/attempts/{attempt['id']}/directive", directive).status_code == 200
        ran(statements)
        beat = report(api_a, attempt)
        assert beat.status_code == 200 and ran(statements) == 1, label
        body = beat.json()["attempt"]
        assert body["last_report_at"] == clock.db_now().isoformat().replace("+00:00", "Z"), label
        assert body["state"] == "live" and body["lease"]["fence"] == attempt["fence"], label
    assert body["directive"] == "pause"
    recorded = Report.objects.filter(attempt_id=attempt["id"]).values_list("at", flat=True)
    assert sorted(recorded) == [frozen_clock + timedelta(seconds=s) for s in (0, 80)]


def test_a_reports_details_are_kept_exactly_as_sent(api_a: Api, run) -> None:
    attempt = claim(api_a, run)
    details = {"big": 2**70, "small": -(2**63), "ratio": 0.1, "text": "1234567890123456789"}
    body = {"fence": attempt["fence"], "process_id": "host-a:1", "kind": "progress"}
    answer = api_a.post(f"/attempts/{attempt['id']}/reports", {**body, "details": details})
    assert answer.status_code == 200
    row = Report.objects.get(attempt_id=attempt["id"], kind="progress")
    assert row.details == details
    assert type(row.details["big"]) is int


def test_a_heartbeat_and_a_renewal_are_one_statement_each(
    api_a: Api, run, django_assert_num_queries
) -> None:
    attempt = claim(api_a, run)
    api_a.post("/leases/acquire", {"resource": "src/", "ttl_s": 60, "process_id": "p1"})
    # The first heartbeat of a minute also writes its record (the stamp and the report row),
    # the first this process answers for the lane reads the lane's slug, and the first for the
    # key reads the key's workspace.
    hand_selectors.forget_lane(Lane.objects.get(pk=run.work_package.lane_id))
    hot.KEY_WORKSPACES.clear()
    with (
        mock.patch.object(hot, "run_statement", wraps=hot.run_statement) as statements,
        django_assert_num_queries(3),
    ):
        first = report(api_a, attempt)
    assert first.status_code == 200 and statements.call_count == 1
    assert first.json()["attempt"]["lane"] == run.work_package.lane.slug
    with (
        mock.patch.object(hot, "run_statement", wraps=hot.run_statement) as statements,
        django_assert_num_queries(0),
    ):
        beat = report(api_a, attempt)
        renewed = api_a.post("/leases/renew", {"resource": "src/", "fence": 1, "process_id": "p1"})
    assert beat.status_code == 200 and beat.json()["renewed"] is True
    assert renewed.status_code == 200
    assert statements.call_count == 2
    assert Report.objects.filter(attempt_id=attempt["id"], renewed=True).count() == 1


def test_a_refusal_is_explained_and_recorded_once_without_running_the_change_again(
    api_a: Api, api_b: Api, run, frozen_clock: datetime, statements: mock.MagicMock
) -> None:
    body = {"resource": "src/", "ttl_s": 60, "process_id": "p1"}
    api_a.post("/leases/acquire", body)
    ran(statements)
    held = api_b.post("/leases/acquire", body)
    error = error_of(held, 409, "lease_held")
    assert error["holder"] == api_a.hand.name and error["caller"]["hand"] == api_b.hand.name
    # The grant's statement missed; the service read what stands in the way (and, had the way
    # cleared meanwhile, would have granted through its own statement).
    assert ran(statements) == 1

    stale = {"resource": "src/", "fence": 7, "process_id": "p1"}
    error = error_of(api_a.post("/leases/renew", stale), 409, "stale_fence")
    assert error["current_fence"] == 1 and ran(statements) == 1

    attempt = claim(api_a, run)
    clock.advance(run.heartbeat_interval_s + run.grace_s + 1)
    lost = {"fence": attempt["fence"], "process_id": "host-a:1", "kind": "heartbeat"}
    ran(statements)
    error_of(api_a.post(f"/attempts/{attempt['id']}/reports", lost), 409, "lease_lost")
    assert ran(statements) == 1
    assert len(refusals("lease_held")) == 1 and len(refusals("stale_fence")) == 1
    assert len(refusals("lease_lost")) == 1


def test_a_key_is_checked_every_call(api_a: Api, api_b: Api, run) -> None:
    body = {"resource": "src/", "ttl_s": 60, "process_id": "p1"}
    assert api_a.post("/leases/acquire", body).status_code == 201
    renew = {"resource": "src/", "fence": 1, "process_id": "p1"}
    prefix = api_a.key.split("_")[1]
    hand_services.key_revoke(
        workspace_id=api_a.hand.workspace_id, prefix=prefix, actor="test", reason="gone"
    )
    error_of(api_a.post("/leases/renew", renew), 401, "key_revoked")

    wrong_secret = Api(f"gc_{prefix}_{'x' * 43}", api_a.hand)
    error_of(wrong_secret.post("/leases/renew", renew), 401, "key_invalid")

    work_only = Api(mint(api_b.hand, ["work"]), api_b.hand)
    error_of(work_only.post("/leases/acquire", {**body, "resource": "b/"}), 403, "scope_denied")
    assert not Lease.objects.filter(resource="b/").exists()


def test_each_hot_call_checks_its_own_scope(api_a: Api, run) -> None:
    attempt = claim(api_a, run)
    leases_only = Api(mint(api_a.hand, ["leases"]), api_a.hand)
    error_of(report(leases_only, attempt), 403, "scope_denied")
    work_only = Api(mint(api_a.hand, ["work"]), api_a.hand)
    body = {"resource": "scoped/", "ttl_s": 60, "process_id": "p1"}
    error_of(work_only.post("/leases/acquire", body), 403, "scope_denied")
    assert not Lease.objects.filter(resource="scoped/").exists()
    assert report(work_only, attempt).status_code == 200
    assert leases_only.post("/leases/acquire", body).status_code == 201


def test_a_lane_limited_key_reaches_only_its_lane(api_a: Api, run, make_run, workspace) -> None:
    other_lane, _ = hand_services.lane_create(workspace=workspace, slug="other")
    limited = Api(mint(api_a.hand, ["work"], lane=other_lane), api_a.hand)
    attempt = claim(api_a, run)
    refused = report(limited, attempt)
    assert refused.status_code == 404, refused.content
    assert report(api_a, attempt).status_code == 200


def test_a_heartbeat_names_its_lease_as_remembered_and_a_wrong_one_matches_nothing(
    api_a: Api, run, make_run, statements: mock.MagicMock
) -> None:
    """The hot view remembers each attempt's lease from its reports' rows and names the lease by
    it (no second read of the attempt). The statement checks the pair: a wrong lease matches
    nothing and writes nothing, the miss proves nothing, so the service renews the report, and
    the next report reads it afresh."""
    attempt = claim(api_a, run)
    hot.ATTEMPT_LEASES.pop(attempt["id"], None)
    assert report(api_a, attempt).status_code == 200
    lease = Lease.objects.get(resource=attempt["lease"]["resource"])
    assert hot.ATTEMPT_LEASES[attempt["id"]] == lease.pk
    other = claim(api_a, make_run(title="another run"))
    other_lease = Lease.objects.get(resource=other["lease"]["resource"])
    renewed_at = other_lease.renewed_at
    hot.ATTEMPT_LEASES[attempt["id"]] = other_lease.pk
    ran(statements)
    answered = report(api_a, attempt)
    assert answered.status_code == 200, answered.content
    assert answered.json()["attempt"]["id"] == attempt["id"]
    assert answered.json()["renewed"] is True and ran(statements) == 1
    other_lease.refresh_from_db()
    assert other_lease.renewed_at == renewed_at  # the other attempt's lease was not touched
    assert attempt["id"] not in hot.ATTEMPT_LEASES
    assert report(api_a, attempt).status_code == 200
    assert hot.ATTEMPT_LEASES[attempt["id"]] == lease.pk


def test_a_report_names_the_keys_workspace_as_remembered_and_a_wrong_one_matches_nothing(
    api_a: Api, run, outsider_workspace, statements: mock.MagicMock
) -> None:
    """The hot view remembers each key's workspace (its hand's, for good) and every statement
    names the workspace by it, so that it reaches one workspace's rows (docs/scale.md). The
    statement still checks it: a wrong workspace matches nothing and writes nothing, and the
    statement runs once more in the workspace read afresh. A call with the key's prefix and a
    wrong secret leaves nothing remembered."""
    attempt = claim(api_a, run)
    prefix, secret = api_a.key.split("_", 2)[1:]
    remembered = (prefix, keys.hash_secret(secret))
    hot.KEY_WORKSPACES.pop(remembered, None)
    forged = Api(api_a.key[: -len(secret)] + "x" * len(secret), api_a.hand)
    error_of(report(forged, attempt), 401, "key_invalid")
    assert not any(known[0] == prefix for known in hot.KEY_WORKSPACES)
    assert report(api_a, attempt).status_code == 200
    assert hot.KEY_WORKSPACES[remembered] == run.workspace_id
    lease = Lease.objects.get(resource=attempt["lease"]["resource"])
    hot.KEY_WORKSPACES[remembered] = outsider_workspace.pk  # not this key's
    ran(statements)
    answered = report(api_a, attempt)
    # The statement ran in the wrong workspace and matched nothing, then in the key's.
    assert answered.status_code == 200 and ran(statements) == 2, answered.content
    assert answered.json()["attempt"]["id"] == attempt["id"]
    assert hot.KEY_WORKSPACES[remembered] == run.workspace_id
    lease.refresh_from_db()
    assert lease.holder == api_a.hand.name and lease.status == "held"
    # A lease statement's key check holds the key to the workspace named: none in another.
    hot.KEY_WORKSPACES[remembered] = outsider_workspace.pk
    body = {"resource": "src/", "ttl_s": 60, "process_id": "p1"}
    acquired = api_a.post("/leases/acquire", body)
    assert acquired.status_code == 201, acquired.content
    assert Lease.objects.get(resource="src/").workspace_id == run.workspace_id  # only there
    assert not Lease.objects.filter(workspace_id=outsider_workspace.pk).exists()
    assert hot.KEY_WORKSPACES[remembered] == run.workspace_id
    renewed = api_a.post("/leases/renew", {**body, "fence": acquired.json()["fence"]})
    assert renewed.status_code == 200, renewed.content


def test_a_lanes_slug_is_remembered_by_id_and_forgotten_when_the_lane_is_saved(
    workspace, django_assert_num_queries
) -> None:
    lane, _ = hand_services.lane_create(workspace=workspace, slug="docs")
    with django_assert_num_queries(1):
        assert hand_selectors.lane_slug(workspace_id=workspace.pk, lane_id=lane.pk) == "docs"
        assert hand_selectors.lane_slug(workspace_id=workspace.pk, lane_id=lane.pk) == "docs"
    # Nothing in Ground Control renames a lane; a row saved under the same id is read afresh
    # all the same.
    lane.slug = "renamed"
    lane.save()
    assert hand_selectors.lane_slug(workspace_id=workspace.pk, lane_id=lane.pk) == "renamed"
    lane_id = lane.pk
    lane.delete()
    assert lane_id not in hand_selectors._LANE_SLUGS


def test_a_hot_call_stamps_last_used_at_once_a_minute(api_a: Api, frozen_clock) -> None:
    key = HandKey.objects.get(prefix=api_a.key.split("_")[1])
    HandKey.objects.filter(pk=key.pk).update(last_used_at=None)
    body = {"resource": "src/", "ttl_s": 60, "process_id": "p1"}
    assert api_a.post("/leases/acquire", body).status_code == 201
    key.refresh_from_db()
    assert key.last_used_at == frozen_clock
    clock.advance(30)
    api_a.post("/leases/renew", {"resource": "src/", "fence": 1, "process_id": "p1"})
    key.refresh_from_db()
    assert key.last_used_at == frozen_clock
    clock.advance(31)
    api_a.post("/leases/renew", {"resource": "src/", "fence": 1, "process_id": "p1"})
    key.refresh_from_db()
    assert key.last_used_at == clock.db_now()


@override_settings(GC_RATE_LIMIT_PER_MINUTE=3)
def test_a_value_the_serializer_trims_is_one_call_counted_once(api_a: Api) -> None:
    api_a.post("/leases/acquire", {"resource": "src/", "ttl_s": 60, "process_id": "p1"})
    # A process id with surrounding spaces is trimmed by the serializer, like any field's.
    body = {"resource": "src/", "fence": 1, "process_id": " p1 "}
    answer = api_a.post("/leases/renew", body)
    assert answer.status_code == 200 and answer.json()["process_id"] == "p1"
    assert api_a.post("/leases/renew", body).status_code == 200
    error_of(api_a.post("/leases/renew", body), 429, "rate_limited")


@override_settings(GC_RATE_LIMIT_PER_MINUTE=2)
def test_a_caller_without_the_secret_cannot_spend_a_keys_rate_limit(api_a: Api) -> None:
    prefix = api_a.key.split("_")[1]
    impostor = Api(f"gc_{prefix}_{'x' * 43}")
    renew = {"resource": "src/", "fence": 1, "process_id": "p1"}
    for _ in range(3):
        impostor.post("/leases/renew", renew)
    answer = api_a.post("/leases/acquire", {"resource": "src/", "ttl_s": 60, "process_id": "p1"})
    assert answer.status_code == 201


def test_a_call_of_any_shape_takes_the_one_way(api_a: Api, statements: mock.MagicMock) -> None:
    """A query string, an Idempotency-Key (which a hot call does not take) or a Content-Type
    with its charset change nothing: the statement answers; an Accept without JSON is 406, and
    a value of the wrong type the serializer's refusal, before any statement."""
    body = {"resource": "src/", "ttl_s": 60, "process_id": "p1"}
    answers = [
        api_a.post("/leases/acquire?format=json", body),
        api_a.post("/leases/acquire", {**body, "resource": "b/"}, {"Idempotency-Key": "k1"}),
        api_a.client.post(
            "/api/v1/leases/acquire",
            data=b'{"resource": "c/", "ttl_s": 60, "process_id": "p1"}',
            content_type="application/json; charset=utf-8",
            headers=api_a._headers(None),
        ),
    ]
    assert [a.status_code for a in answers] == [201, 201, 201]
    assert ran(statements) == 3
    error_of(
        api_a.post("/leases/acquire", {**body, "resource": "d/"}, {"Accept": "text/html"}),
        406,
        "not_acceptable",
    )
    error_of(
        api_a.post("/leases/acquire", {**body, "resource": "e/", "ttl_s": "60"}),
        400,
        "validation_error",
    )
    sent_as_text = api_a.client.post(
        "/api/v1/leases/acquire",
        data="resource=f/",
        content_type="text/plain",
        headers=api_a._headers(None),
    )
    error_of(sent_as_text, 415, "unsupported_media_type")
    assert ran(statements) == 0
    assert not Lease.objects.filter(resource__in=["d/", "e/", "f/"]).exists()


@pytest.mark.parametrize(
    "raw",
    [
        # JSON the fast parser does not read as the strict one does (an integer beyond 64 bits,
        # a lone surrogate, NaN): read strictly, and refused by the serializer or the names,
        b'{"resource": "big/", "ttl_s": 1180591620717411303424, "process_id": "p1"}',
        b'{"resource": "sur/\\ud800", "ttl_s": 60, "process_id": "p1"}',
        b'{"resource": "nan/", "ttl_s": NaN, "process_id": "p1"}',
        # and what is not JSON at all.
        b'{"resource": "cut/", "ttl_s": 6',
    ],
)
def test_a_body_refused_by_the_parser_or_the_serializer_is_400(api_a: Api, raw: bytes) -> None:
    answer = api_a.client.post(
        "/api/v1/leases/acquire",
        data=raw,
        content_type="application/json",
        headers=api_a._headers(None),
    )
    error_of(answer, 400, "validation_error")
    assert not Lease.objects.exists()


def test_a_statement_the_database_refuses_is_a_bug_answered_500_with_nothing_written(
    api_a: Api,
) -> None:
    body = {"resource": "src/", "ttl_s": 60, "process_id": "p1"}
    with mock.patch.object(hot, "run_statement", side_effect=DatabaseError("refused")):
        error_of(api_a.post("/leases/acquire", body), 500, "internal_error")
    assert not Lease.objects.exists() and not Event.objects.filter(kind="lease_acquired").exists()


def test_a_database_out_of_reach_answers_503_and_is_not_tried_again(api_a: Api, run) -> None:
    attempt = claim(api_a, run)
    with mock.patch.object(hot, "run_statement", side_effect=OperationalError("gone")) as tried:
        error_of(report(api_a, attempt), 503, "dependency_unavailable")
    assert tried.call_count == 1
    assert not Report.objects.filter(attempt_id=attempt["id"]).exists()


@pytest.mark.parametrize("failing", ["heartbeat_record", "key_mark_used"])
def test_a_failure_after_the_statement_applies_nothing_twice(api_a: Api, run, failing: str) -> None:
    """The statement has renewed (and, for a report with a message, written the report) before
    the bookkeeping runs: a failure there is logged, and nothing does the call again."""
    attempt = claim(api_a, run)
    HandKey.objects.filter(prefix=api_a.key.split("_")[1]).update(last_used_at=None)
    owner = {"heartbeat_record": report_services, "key_mark_used": hand_services}[failing]
    with mock.patch.object(owner, failing, side_effect=OperationalError("gone")) as broken:
        beat = report(api_a, attempt)
        noted = report(api_a, attempt, kind="note", message="one row only")
    assert broken.called
    assert (beat.status_code, noted.status_code) == (200, 200)
    assert Report.objects.filter(attempt_id=attempt["id"], kind="note").count() == 1
    assert Report.objects.filter(attempt_id=attempt["id"], kind="heartbeat").count() == (
        0 if failing == "heartbeat_record" else 1
    )


def test_the_hot_views_serve_only_posts(api_a: Api) -> None:
    assert api_a.client.get("/api/v1/leases/renew").status_code in (401, 405)
    assert api_a.post("/attempts/0/reports", {"fence": 1, "kind": "heartbeat"}).status_code in (
        400,
        404,
    )


def test_the_schema_still_describes_the_hot_endpoints(api_a: Api) -> None:
    schema = api_a.client.get("/api/v1/schema/", {"format": "json"}).json()
    for path in (
        "/api/v1/leases/renew",
        "/api/v1/leases/acquire",
        "/api/v1/attempts/{attempt_id}/reports",
    ):
        assert "post" in schema["paths"][path], path


@override_settings(GC_RATE_LIMIT_PER_MINUTE=3)
def test_a_refused_call_is_counted_once(api_a: Api, statements: mock.MagicMock) -> None:
    api_a.post("/leases/acquire", {"resource": "src/", "ttl_s": 60, "process_id": "p1"})
    ran(statements)
    stale = {"resource": "src/", "fence": 9, "process_id": "p1"}
    error_of(api_a.post("/leases/renew", stale), 409, "stale_fence")
    assert ran(statements) == 1 and len(refusals("stale_fence")) == 1
    # Counted once: the acquire and that call leave room for one more of three a minute.
    assert api_a.post("/leases/renew", stale).status_code == 409
    error_of(api_a.post("/leases/renew", stale), 429, "rate_limited")


@pytest.mark.parametrize("kind", [{}, [], 7, None])
def test_a_report_of_no_kind_is_refused_before_any_statement(
    api_a: Api, run, kind, statements: mock.MagicMock
) -> None:
    attempt = claim(api_a, run)
    ran(statements)
    body = {"fence": attempt["fence"], "process_id": "host-a:1", "kind": kind}
    error_of(api_a.post(f"/attempts/{attempt['id']}/reports", body), 400, "validation_error")
    assert ran(statements) == 0


def test_a_bad_key_is_told_before_a_bad_body(api_a: Api) -> None:
    """The key's refusal comes first: a caller without a usable key learns nothing of the body."""
    body = {"resource": "src/", "ttl_s": "sixty", "process_id": "p1"}
    prefix = api_a.key.split("_")[1]
    error_of(Api(f"gc_{prefix}_{'x' * 43}").post("/leases/acquire", body), 401, "key_invalid")
    error_of(Api(None).post("/leases/acquire", body), 401, "key_invalid")
    work_only = Api(mint(api_a.hand, ["work"]), api_a.hand)
    error_of(work_only.post("/leases/acquire", body), 403, "scope_denied")
    error_of(api_a.post("/leases/acquire", body), 400, "validation_error")


def test_a_hot_statement_busy_on_every_try_is_a_503_that_names_the_caller(
    api_a: Api,
) -> None:
    """A conflict on every try is the service's `busy`, recorded against the caller's workspace
    and naming it in its body, as every refusal of a key whose secret matched does."""
    conflict = OperationalError("deadlock detected")
    conflict.__cause__ = psycopg.errors.DeadlockDetected()
    renew = {"resource": "src/", "fence": 1, "process_id": "p1"}
    with mock.patch.object(hot, "run_statement", side_effect=conflict):
        answer = api_a.post("/leases/renew", renew)
    error = error_of(answer, 503, "busy")
    assert answer["Retry-After"] and answer["Allow"] == "POST, OPTIONS"
    assert error["caller"] == {"hand": api_a.hand.name, "key_prefix": api_a.key.split("_")[1]}
    assert len(refusals("busy")) == 1


@pytest.mark.parametrize("number", ["NaN", "Infinity", "-Infinity", "1e999"])
def test_a_number_jsonb_cannot_hold_is_refused_before_any_statement(
    api_a: Api, run, number: str, statements: mock.MagicMock
) -> None:
    attempt = claim(api_a, run)
    raw = (
        f'{{"fence": {attempt["fence"]}, "kind": "progress", "process_id": "host-a:1", '
        f'"details": {{"x": {number}}}}}'
    )
    ran(statements)
    path = f"/api/v1/attempts/{attempt['id']}/reports"
    answer = api_a.client.post(
        path, data=raw, content_type="application/json", headers=api_a._headers(None)
    )
    error_of(answer, 400, "validation_error")
    # A wrong secret of a key whose prefix the process knows is refused as a key, first.
    forged = Api(api_a.key[:-4] + "xxxx")
    answer = forged.client.post(
        path, data=raw, content_type="application/json", headers=forged._headers(None)
    )
    error_of(answer, 401, "key_invalid")
    assert ran(statements) == 0
    assert not Report.objects.filter(attempt_id=attempt["id"], kind="progress").exists()


def test_a_refusal_says_what_the_endpoint_allows_and_a_body_without_a_type_is_415(
    api_a: Api,
) -> None:
    refused = Api(None).post("/leases/renew", {"resource": "src/", "fence": 1, "process_id": "p"})
    error_of(refused, 401, "key_invalid")
    assert refused["Allow"] == "POST, OPTIONS" and refused["WWW-Authenticate"]
    untyped = api_a.client.generic(
        "POST",
        "/api/v1/leases/acquire",
        data=b'{"resource": "src/", "ttl_s": 60, "process_id": "p1"}',
        content_type="",
        headers=api_a._headers(None),
    )
    error_of(untyped, 415, "unsupported_media_type")
    assert not Lease.objects.exists()
