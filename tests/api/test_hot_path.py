"""The hot views (leasing/hot.py) on PostgreSQL: a plain renew, acquire or renewing report is
answered by one statement, exactly as the endpoint's DRF view would answer it; everything else is
answered (and recorded) by that DRF view, counted once against the rate limit; and once the
statement has matched, nothing sends the call to the DRF view again.

Every other API test goes through the hot views too; here each answer is compared with the DRF
view's own (`hot_path=False`) for the same call."""

from __future__ import annotations

import copy
import threading
from collections.abc import Iterator
from datetime import datetime, timedelta
from unittest import mock

import pytest
from django.db import DatabaseError, OperationalError
from django.test import override_settings

from fleet.attempts import reports as report_services
from fleet.models import Report
from hands import selectors as hand_selectors
from hands import services as hand_services
from hands.models import HandKey, Lane
from leases import clock
from leases.models import Event, Lease
from leasing import hot
from tests.api.conftest import Api, error_of, mint, refusals
from tests.api.test_hand_calls import claim, report

pytestmark = pytest.mark.django_db

VOLATILE = {"X-Request-ID", "Content-Length"}
_served = threading.local()
_real_answer = hot._answer


def _answer_noting(request, call, kwargs):  # noqa: ANN001, ANN202
    answered = _real_answer(request, call, kwargs)
    _served.hot = answered is not None
    return answered


@pytest.fixture(autouse=True)
def _note_who_answers() -> Iterator[None]:
    with mock.patch.object(hot, "_answer", _answer_noting):
        yield


class _Noted:
    """A response, and whether the hot statement answered it."""

    def __init__(self, response, hot_answered: bool) -> None:  # noqa: ANN001
        self.response, self.hot_path = response, hot_answered

    def __getattr__(self, name: str):  # noqa: ANN204
        return getattr(self.response, name)

    def __getitem__(self, name: str):  # noqa: ANN204
        return self.response[name]


class NotingApi(Api):
    def post(self, path, body=None, headers=None):  # noqa: ANN001, ANN201
        _served.hot = False
        response = super().post(path, body, headers)
        return _Noted(response, _served.hot)


def noting(api: Api) -> NotingApi:
    return NotingApi(api.key, api.hand)


@pytest.fixture
def api_a(api_a: Api) -> NotingApi:
    return noting(api_a)


@pytest.fixture
def api_b(api_b: Api) -> NotingApi:
    return noting(api_b)


def django_twin(api: Api) -> Api:
    """The same caller and key, answered by the DRF view alone."""
    return Api(api.key, api.hand, hot_path=False)


def same_answer(fast, full) -> None:  # noqa: ANN001
    assert fast.status_code == full.status_code, (fast.content, full.content)
    headers = {k: v for k, v in fast.headers.items() if k not in VOLATILE}
    assert headers == {k: v for k, v in full.headers.items() if k not in VOLATILE}
    fast_body, full_body = copy.deepcopy(fast.json()), copy.deepcopy(full.json())
    if "error" in fast_body:  # each answer names its own request
        assert fast_body["error"].pop("request_id") == fast["X-Request-ID"]
        assert full_body["error"].pop("request_id") == full["X-Request-ID"]
    assert fast_body == full_body


def served_by_hot_path(response) -> bool:  # noqa: ANN001
    return getattr(response, "hot_path", False)


def test_a_plain_renew_and_acquire_answer_as_django_does(
    api_a: Api, frozen_clock: datetime
) -> None:
    full_api = django_twin(api_a)
    fast = api_a.post("/leases/acquire", {"resource": "a/", "ttl_s": 60, "process_id": "p1"})
    full = full_api.post("/leases/acquire", {"resource": "b/", "ttl_s": 60, "process_id": "p1"})
    assert served_by_hot_path(fast) and not served_by_hot_path(full)
    fast_body, full_body = fast.json(), full.json()
    assert (fast_body.pop("resource"), full_body.pop("resource")) == ("a/", "b/")
    assert fast.status_code == full.status_code == 201 and fast_body == full_body
    fast_event, full_event = Event.objects.filter(kind="lease_acquired").order_by("id")
    for field in ("workspace_id", "at", "actor", "hand", "fence", "data", "attempt_id"):
        assert getattr(fast_event, field) == getattr(full_event, field), field
    assert (fast_event.resource, full_event.resource) == ("a/", "b/")

    renew = {"resource": "a/", "fence": 1, "process_id": "p1"}
    fast = api_a.post("/leases/renew", renew)
    assert served_by_hot_path(fast)
    same_answer(fast, full_api.post("/leases/renew", renew))


def test_a_free_resource_is_taken_on_the_hot_path_with_the_next_fence(api_a: Api) -> None:
    body = {"resource": "db/migrate", "ttl_s": 60, "process_id": "p1"}
    assert api_a.post("/leases/acquire", body).json()["fence"] == 1
    released = api_a.post("/leases/release", {**body, "fence": 1, "reason": "done"})
    assert released.status_code == 200, released.content
    again = api_a.post("/leases/acquire", body)
    assert served_by_hot_path(again) and again.status_code == 201
    assert again.json()["fence"] == 2 and again.json()["state"] == "live"
    fences = list(
        Event.objects.filter(kind="lease_acquired", resource="db/migrate").values_list(
            "fence", flat=True
        )
    )
    assert fences == [1, 2]


def test_a_plain_report_answers_as_django_does(api_a: Api, run, frozen_clock: datetime) -> None:
    attempt = claim(api_a, run)
    body = {
        "fence": attempt["fence"],
        "process_id": "host-a:1",
        "kind": "progress",
        "message": "half",
        "percent": 50,
        "details": {"step": 2},
    }
    path = f"/attempts/{attempt['id']}/reports"
    fast = api_a.post(path, body)
    assert served_by_hot_path(fast)
    same_answer(fast, django_twin(api_a).post(path, body))
    fast_row, full_row = Report.objects.order_by("id")
    for field in ("kind", "message", "percent", "details", "renewed", "process_id", "at"):
        assert getattr(fast_row, field) == getattr(full_row, field), field
    assert fast_row.at == frozen_clock


def test_a_bare_heartbeat_answers_as_django_does_with_and_between_its_records(
    api_a: Api, boss: Api, run, frozen_clock: datetime
) -> None:
    """The hot path reads a heartbeat's answer straight off its row
    (`fleet.api.presenters.report_row_json`); Django builds it from the attempt's view. At each
    instant the fast heartbeat goes first, so it is the one that finds the once-a-minute record
    due when it is."""
    attempt = claim(api_a, run)
    full_api = django_twin(api_a)
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
        fast = report(api_a, attempt)
        assert served_by_hot_path(fast), label
        same_answer(fast, report(full_api, attempt))
        body = fast.json()["attempt"]
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
    assert served_by_hot_path(answer) and answer.status_code == 200
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


def test_refusals_are_answered_and_recorded_by_django(
    api_a: Api, api_b: Api, run, frozen_clock: datetime
) -> None:
    body = {"resource": "src/", "ttl_s": 60, "process_id": "p1"}
    api_a.post("/leases/acquire", body)
    held = api_b.post("/leases/acquire", body)
    assert not served_by_hot_path(held)
    same_answer(held, django_twin(api_b).post("/leases/acquire", body))
    error_of(held, 409, "lease_held")

    stale = {"resource": "src/", "fence": 7, "process_id": "p1"}
    refused = api_a.post("/leases/renew", stale)
    same_answer(refused, django_twin(api_a).post("/leases/renew", stale))
    error_of(refused, 409, "stale_fence")

    attempt = claim(api_a, run)
    clock.advance(run.heartbeat_interval_s + run.grace_s + 1)
    lost = {"fence": attempt["fence"], "process_id": "host-a:1", "kind": "heartbeat"}
    path = f"/attempts/{attempt['id']}/reports"
    same_answer(api_a.post(path, lost), django_twin(api_a).post(path, lost))
    assert len(refusals("lease_held")) == 2 and len(refusals("stale_fence")) == 2


def test_a_key_is_checked_on_the_hot_path_every_call(api_a: Api, api_b: Api, run) -> None:
    body = {"resource": "src/", "ttl_s": 60, "process_id": "p1"}
    assert api_a.post("/leases/acquire", body).status_code == 201
    renew = {"resource": "src/", "fence": 1, "process_id": "p1"}
    prefix = api_a.key.split("_")[1]
    hand_services.key_revoke(
        workspace_id=api_a.hand.workspace_id, prefix=prefix, actor="test", reason="gone"
    )
    error_of(api_a.post("/leases/renew", renew), 401, "key_revoked")

    wrong_secret = NotingApi(f"gc_{prefix}_{'x' * 43}", api_a.hand)
    error_of(wrong_secret.post("/leases/renew", renew), 401, "key_invalid")

    work_only = NotingApi(mint(api_b.hand, ["work"]), api_b.hand)
    error_of(work_only.post("/leases/acquire", {**body, "resource": "b/"}), 403, "scope_denied")
    assert not Lease.objects.filter(resource="b/").exists()


def test_each_hot_call_checks_its_own_scope(api_a: Api, run) -> None:
    attempt = claim(api_a, run)
    leases_only = NotingApi(mint(api_a.hand, ["leases"]), api_a.hand)
    refused = report(leases_only, attempt)
    assert not served_by_hot_path(refused)
    error_of(refused, 403, "scope_denied")
    work_only = NotingApi(mint(api_a.hand, ["work"]), api_a.hand)
    body = {"resource": "scoped/", "ttl_s": 60, "process_id": "p1"}
    refused = work_only.post("/leases/acquire", body)
    assert not served_by_hot_path(refused)
    error_of(refused, 403, "scope_denied")
    assert served_by_hot_path(report(work_only, attempt))
    assert served_by_hot_path(leases_only.post("/leases/acquire", body))


def test_a_lane_limited_key_reaches_only_its_lane_on_the_hot_path(
    api_a: Api, run, make_run, workspace
) -> None:
    other_lane, _ = hand_services.lane_create(workspace=workspace, slug="other")
    limited = NotingApi(mint(api_a.hand, ["work"], lane=other_lane), api_a.hand)
    attempt = claim(api_a, run)
    refused = report(limited, attempt)
    assert not served_by_hot_path(refused) and refused.status_code == 404, refused.content
    assert report(api_a, attempt).status_code == 200


def test_a_heartbeat_names_its_lease_as_remembered_and_a_wrong_one_matches_nothing(
    api_a: Api, run, make_run
) -> None:
    """The hot view remembers each attempt's lease from its reports' rows and names the lease by
    it (no second read of the attempt). The statement checks the pair: a wrong lease matches
    nothing and writes nothing, the DRF view answers, and the next report reads it afresh."""
    attempt = claim(api_a, run)
    hot.ATTEMPT_LEASES.pop(attempt["id"], None)
    assert served_by_hot_path(report(api_a, attempt))
    lease = Lease.objects.get(resource=attempt["lease"]["resource"])
    assert hot.ATTEMPT_LEASES[attempt["id"]] == lease.pk
    other = claim(api_a, make_run(title="another run"))
    other_lease = Lease.objects.get(resource=other["lease"]["resource"])
    renewed_at = other_lease.renewed_at
    hot.ATTEMPT_LEASES[attempt["id"]] = other_lease.pk
    answered = report(api_a, attempt)
    assert not served_by_hot_path(answered) and answered.status_code == 200, answered.content
    assert answered.json()["attempt"]["id"] == attempt["id"]
    other_lease.refresh_from_db()
    assert other_lease.renewed_at == renewed_at  # the other attempt's lease was not touched
    assert attempt["id"] not in hot.ATTEMPT_LEASES
    assert served_by_hot_path(report(api_a, attempt))
    assert hot.ATTEMPT_LEASES[attempt["id"]] == lease.pk


def test_a_report_names_the_keys_workspace_as_remembered_and_a_wrong_one_matches_nothing(
    api_a: Api, run, outsider_workspace
) -> None:
    """The hot view remembers each key's workspace (its hand's, for good) and every statement
    names the workspace by it, so that it reaches one workspace's rows (docs/scale.md). The
    statement still checks it: a wrong workspace matches nothing and writes nothing, the DRF
    view answers, and the next call reads the key's workspace afresh. A call with the key's
    prefix and a wrong secret leaves nothing remembered."""
    attempt = claim(api_a, run)
    prefix, secret = api_a.key.split("_", 2)[1:]
    hot.KEY_WORKSPACES.pop(prefix, None)
    forged = NotingApi(api_a.key[: -len(secret)] + "x" * len(secret), api_a.hand)
    refused = report(forged, attempt)
    assert not served_by_hot_path(refused) and refused.status_code == 401, refused.content
    assert prefix not in hot.KEY_WORKSPACES
    assert served_by_hot_path(report(api_a, attempt))
    assert hot.KEY_WORKSPACES[prefix] == run.workspace_id
    lease = Lease.objects.get(resource=attempt["lease"]["resource"])
    hot.KEY_WORKSPACES[prefix] = outsider_workspace.pk  # not this key's
    with mock.patch.object(hot, "run_statement", wraps=hot.run_statement) as statements:
        answered = report(api_a, attempt)
    assert statements.call_count == 1  # the statement ran, and matched nothing
    assert not served_by_hot_path(answered) and answered.status_code == 200, answered.content
    assert answered.json()["attempt"]["id"] == attempt["id"]
    assert prefix not in hot.KEY_WORKSPACES
    assert served_by_hot_path(report(api_a, attempt))
    assert hot.KEY_WORKSPACES[prefix] == run.workspace_id
    lease.refresh_from_db()
    assert lease.holder == api_a.hand.name and lease.status == "held"
    # A lease statement's key check holds the key to the workspace named: none in another.
    hot.KEY_WORKSPACES[prefix] = outsider_workspace.pk
    body = {"resource": "src/", "ttl_s": 60, "process_id": "p1"}
    acquired = api_a.post("/leases/acquire", body)
    assert not served_by_hot_path(acquired) and acquired.status_code == 201, acquired.content
    assert Lease.objects.get(resource="src/").workspace_id == run.workspace_id  # only there
    assert prefix not in hot.KEY_WORKSPACES
    renewed = api_a.post("/leases/renew", {**body, "fence": acquired.json()["fence"]})
    assert served_by_hot_path(renewed) and renewed.status_code == 200, renewed.content


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


def test_the_hot_path_stamps_last_used_at_once_a_minute(api_a: Api, frozen_clock) -> None:
    key = HandKey.objects.get(prefix=api_a.key.split("_")[1])
    HandKey.objects.filter(pk=key.pk).update(last_used_at=None)
    body = {"resource": "src/", "ttl_s": 60, "process_id": "p1"}
    assert served_by_hot_path(api_a.post("/leases/acquire", body))
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
def test_a_call_handed_to_django_is_counted_once(api_a: Api) -> None:
    api_a.post("/leases/acquire", {"resource": "src/", "ttl_s": 60, "process_id": "p1"})
    # A process id with surrounding spaces is not plain: the serializer trims it, in Django.
    body = {"resource": "src/", "fence": 1, "process_id": " p1 "}
    answer = api_a.post("/leases/renew", body)
    assert answer.status_code == 200 and not served_by_hot_path(answer)
    assert api_a.post("/leases/renew", body).status_code == 200
    error_of(api_a.post("/leases/renew", body), 429, "rate_limited")


@override_settings(GC_RATE_LIMIT_PER_MINUTE=2)
def test_a_caller_without_the_secret_cannot_spend_a_keys_rate_limit(api_a: Api) -> None:
    prefix = api_a.key.split("_")[1]
    impostor = NotingApi(f"gc_{prefix}_{'x' * 43}")
    renew = {"resource": "src/", "fence": 1, "process_id": "p1"}
    for _ in range(3):
        impostor.post("/leases/renew", renew)
    answer = api_a.post("/leases/acquire", {"resource": "src/", "ttl_s": 60, "process_id": "p1"})
    assert answer.status_code == 201 and served_by_hot_path(answer)


def test_calls_that_are_not_plain_go_to_django(api_a: Api) -> None:
    body = {"resource": "src/", "ttl_s": 60, "process_id": "p1"}
    answers = [
        api_a.post("/leases/acquire?format=json", body),
        api_a.post("/leases/acquire", {**body, "resource": "b/"}, {"Idempotency-Key": "k1"}),
        api_a.post("/leases/acquire", {**body, "resource": "c/"}, {"Accept": "text/html"}),
        api_a.post("/leases/acquire", {**body, "resource": "d/", "ttl_s": "60"}),
    ]
    assert [served_by_hot_path(a) for a in answers] == [False] * 4
    assert [a.status_code for a in answers] == [201, 201, 406, 400]


@pytest.mark.parametrize(
    ("raw", "status"),
    [
        # JSON Django's parser reads as it is and the hot path's does not (an integer beyond 64
        # bits, a lone surrogate) is answered by Django,
        (b'{"resource": "big/", "ttl_s": 1180591620717411303424, "process_id": "p1"}', 400),
        (b'{"resource": "sur/\\ud800", "ttl_s": 60, "process_id": "p1"}', 400),
        # and what neither reads is refused by Django.
        (b'{"resource": "nan/", "ttl_s": NaN, "process_id": "p1"}', 400),
        (b'{"resource": "cut/", "ttl_s": 6', 400),
    ],
)
def test_a_body_the_hot_path_does_not_parse_goes_to_django(
    api_a: Api, raw: bytes, status: int
) -> None:
    answer = api_a.client.post(
        "/api/v1/leases/acquire",
        data=raw,
        content_type="application/json",
        headers=api_a._headers(None),
    )
    assert not served_by_hot_path(answer)
    assert answer.status_code == status, answer.content


def test_a_statement_the_database_refuses_hands_the_call_to_the_drf_view(api_a: Api) -> None:
    body = {"resource": "src/", "ttl_s": 60, "process_id": "p1"}
    with mock.patch.object(hot, "run_statement", side_effect=DatabaseError("refused")):
        answer = api_a.post("/leases/acquire", body)
    assert answer.status_code == 201 and not served_by_hot_path(answer)
    assert Lease.objects.get(resource="src/").fence == 1


def test_a_database_out_of_reach_answers_503_and_is_not_tried_again(api_a: Api, run) -> None:
    attempt = claim(api_a, run)
    with mock.patch.object(hot, "run_statement", side_effect=OperationalError("gone")) as tried:
        error_of(report(api_a, attempt), 503, "dependency_unavailable")
    assert tried.call_count == 1
    assert not Report.objects.filter(attempt_id=attempt["id"]).exists()


@pytest.mark.parametrize("failing", ["heartbeat_record", "key_mark_used"])
def test_a_failure_after_the_statement_applies_nothing_twice(api_a: Api, run, failing: str) -> None:
    """The statement has renewed (and, for a report with a message, written the report) before
    the bookkeeping runs: a failure there is logged, and the DRF view never does the call again."""
    attempt = claim(api_a, run)
    HandKey.objects.filter(prefix=api_a.key.split("_")[1]).update(last_used_at=None)
    owner = {"heartbeat_record": report_services, "key_mark_used": hand_services}[failing]
    with mock.patch.object(owner, failing, side_effect=OperationalError("gone")) as broken:
        beat = report(api_a, attempt)
        noted = report(api_a, attempt, kind="note", message="one row only")
    assert broken.called
    assert (beat.status_code, noted.status_code) == (200, 200)
    assert served_by_hot_path(beat) and served_by_hot_path(noted)
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
def test_a_call_the_statement_left_to_the_drf_view_is_counted_once(api_a: Api) -> None:
    api_a.post("/leases/acquire", {"resource": "src/", "ttl_s": 60, "process_id": "p1"})
    stale = {"resource": "src/", "fence": 9, "process_id": "p1"}
    with mock.patch.object(hot, "run_statement", wraps=hot.run_statement) as statements:
        error_of(api_a.post("/leases/renew", stale), 409, "stale_fence")
    assert statements.call_count == 1 and len(refusals("stale_fence")) == 1
    # Counted once: the acquire and that call leave room for one more of three a minute.
    assert api_a.post("/leases/renew", stale).status_code == 409
    error_of(api_a.post("/leases/renew", stale), 429, "rate_limited")


@pytest.mark.parametrize("kind", [{}, [], 7, None])
def test_a_body_the_hot_view_cannot_read_is_answered_by_the_drf_view(api_a: Api, run, kind) -> None:
    attempt = claim(api_a, run)
    body = {"fence": attempt["fence"], "process_id": "host-a:1", "kind": kind}
    answer = api_a.post(f"/attempts/{attempt['id']}/reports", body)
    assert not served_by_hot_path(answer)
    error_of(answer, 400, "validation_error")
