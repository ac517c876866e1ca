"""Friction reports over REST (issue 22.1): filing one with the refused calls it refers to,
who may file for which lane, the list, its filters and query budget, and the export."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from fleet.models import Run
from fleet.plan import services as plan_services
from friction.models import FrictionRefusal, FrictionReport
from hands import services as hand_services
from hands.models import Hand, Workspace
from leases import clock
from leases.models import Event, Refusal
from tests.support.api import Api, error_of, mint

pytestmark = pytest.mark.django_db


def refused_call(api: Api, run: Run | None = None, request_id: str = "") -> str:
    """A refused call of `api`'s hand (a claim on a missing run, or a bad one), its request id."""
    headers = {"X-Request-ID": request_id} if request_id else None
    response = api.post("/runs/999999/claim", {"process_id": "x:1"}, headers=headers)
    assert response.status_code == 404
    return response["X-Request-ID"]


def file(api: Api, **body: Any) -> Any:
    return api.post("/friction", {"what": "the lock was held", **body})


@pytest.fixture
def claimed(api_a: Api, run: Run) -> dict[str, Any]:
    response = api_a.post(f"/runs/{run.pk}/claim", {"process_id": "a:1"})
    assert response.status_code == 201
    return response.json()


def test_a_hand_files_a_report_linking_its_refused_calls(
    api_a: Api, owner: Hand, run: Run, claimed: dict[str, Any]
) -> None:
    first, second = refused_call(api_a), refused_call(api_a)
    response = file(
        api_a,
        what="migrations lock held for 20 minutes",
        instead="worked on the docs",
        minutes=20,
        attempt=claimed["id"],
        refusals=[first, second, first],
    )
    assert response.status_code == 201, response.content
    body = response.json()
    assert body["lane"] == "rewalk" and body["run"] == run.pk and body["attempt"] == claimed["id"]
    assert (body["hand"], body["minutes"], body["instead"]) == ("hand-a", 20, "worked on the docs")
    assert [link["request_id"] for link in body["refusals"]] == [first, second]
    assert {link["code"] for link in body["refusals"]} == {"not_found"}
    assert all(
        link["at"] and link["path"] == "/api/v1/runs/999999/claim" for link in body["refusals"]
    )
    report = FrictionReport.objects.get()
    assert report.workspace_id == owner.workspace_id and report.lane.slug == "rewalk"
    links = FrictionRefusal.objects.filter(report=report).order_by("id")
    assert [link.refusal_id for link in links] == [
        Refusal.objects.get(request_id=first).pk,
        Refusal.objects.get(request_id=second).pk,
    ]
    event = Event.objects.get(kind="friction")
    assert (event.hand, event.attempt_id, event.at) == ("hand-a", claimed["id"], report.at)
    assert event.data["report"] == report.pk and event.data["minutes"] == 20
    assert [r["request_id"] for r in event.data["refusals"]] == [first, second]


def test_a_report_survives_its_refusals_retention(api_a: Api, boss: Api) -> None:
    request_id = refused_call(api_a)
    assert file(api_a, refusals=[request_id]).status_code == 201
    Refusal.objects.filter(request_id=request_id).delete()
    [listed] = boss.get("/friction").json()
    assert listed["refusals"][0]["code"] == "not_found"


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"what": ""}, "what"),
        ({"what": "x" * 2001}, "what"),
        ({"instead": "x" * 2001}, "instead"),
        ({"minutes": -1}, "minutes"),
        ({"minutes": 2001}, "minutes"),
        ({"minutes": "3"}, "minutes"),
        ({"minutes": 1.5}, "minutes"),
        ({"refusals": "abc"}, "refusals"),
        ({"refusals": [f"id{i}" for i in range(21)]}, "refusals"),
        ({"refusals": ["has space"]}, "refusals"),
        ({"refusals": ["x" * 129]}, "refusals"),
        ({"what": "nul\x00"}, "what"),
    ],
)
def test_it_refuses_bad_input_and_writes_nothing(api_a: Api, body: Any, field: str) -> None:
    error = error_of(api_a.post("/friction", {"what": "w", **body}), 400, "validation_error")
    assert field in error["fields"]
    assert not FrictionReport.objects.exists() and not Event.objects.filter(kind="friction")


def test_the_sizes_at_their_bounds_are_accepted(api_a: Api) -> None:
    ids = [refused_call(api_a, request_id=f"req-{i}") for i in range(20)]
    response = file(api_a, what="w" * 2000, instead="i" * 2000, minutes=2000, refusals=ids)
    assert response.status_code == 201, response.content
    assert len(response.json()["refusals"]) == 20


def test_an_unknown_request_id_is_a_clear_400_naming_it(api_a: Api) -> None:
    known = refused_call(api_a)
    error = error_of(file(api_a, refusals=[known, "no-such-call"]), 400, "validation_error")
    assert "no-such-call" in error["message"]
    assert "no-such-call" in " ".join(error["fields"]["refusals"])
    assert not FrictionReport.objects.exists()


def test_another_workspaces_request_id_is_unknown(api_a: Api, api_outsider: Api, boss: Api) -> None:
    theirs = refused_call(api_outsider)
    error = error_of(file(boss, refusals=[theirs]), 400, "validation_error")
    assert theirs in error["message"]
    error_of(file(api_a, refusals=[theirs]), 400, "validation_error")
    assert not FrictionReport.objects.exists()


def test_a_hand_links_only_its_own_refusals_a_supervisor_any_of_the_workspace(
    api_a: Api, api_b: Api, boss: Api
) -> None:
    bs = refused_call(api_b)
    error_of(file(api_a, refusals=[bs]), 400, "validation_error")
    response = file(boss, refusals=[bs])
    assert response.status_code == 201, response.content
    assert response.json()["refusals"][0]["hand"] == "hand-b"


def test_a_reused_request_id_links_its_latest_refusal(api_a: Api) -> None:
    refused_call(api_a, request_id="retry-1")
    api_a.post("/friction", {"what": ""}, headers={"X-Request-ID": "retry-1"})
    body = file(api_a, refusals=["retry-1"]).json()
    assert body["refusals"][0]["code"] == "validation_error"


def test_a_hand_files_for_the_lanes_its_key_works_in(
    workspace: Workspace, lane: Any, owner: Hand, api_a: Api, make_run: Any
) -> None:
    other, _ = hand_services.lane_create(workspace=workspace, slug="payments")
    # A key without a lane works in every lane, and files for any.
    assert file(api_a).json()["lane"] is None  # no lane of its own, none given
    assert file(api_a, lane="payments").json()["lane"] == "payments"
    assert file(api_a, run=make_run().pk).json()["lane"] == "rewalk"
    laned, _ = hand_services.hand_create(workspace=workspace, name="laned", lane=lane)
    assert file(Api(mint(laned, ["work"]), laned)).json()["lane"] == "rewalk"  # its hand's
    # A lane-limited key: its lane only; another lane is not found, as every lookup of it.
    limited = Api(mint(laned, ["work"], lane=lane), laned)
    assert file(limited).json()["lane"] == "rewalk"
    error_of(file(limited, lane="payments"), 404, "not_found")
    package_run = make_run()
    assert file(limited, run=package_run.pk).status_code == 201
    package, _ = plan_services.work_package_create(lane=other, key="pay", title="Pay")
    paying = plan_services.run_create(work_package=package, title="Pay")
    error_of(file(limited, run=paying.pk), 404, "not_found")
    assert FrictionReport.objects.filter(lane=other).count() == 1


def test_a_hand_files_about_its_own_attempts_only(
    api_a: Api, api_b: Api, claimed: dict[str, Any], boss: Api
) -> None:
    error_of(file(api_b, attempt=claimed["id"]), 403, "not_holder")
    # Its own attempt in a lane that is not its own: allowed (the attempt says where).
    assert file(api_a, attempt=claimed["id"]).json()["lane"] == "rewalk"
    assert file(boss, attempt=claimed["id"]).status_code == 201
    error_of(file(api_a, attempt=999999), 404, "not_found")
    error_of(file(api_a, attempt=claimed["id"], run=claimed["run"] + 1), 404, "not_found")


def test_lane_and_run_must_agree(workspace: Workspace, boss: Api, run: Run) -> None:
    hand_services.lane_create(workspace=workspace, slug="payments")
    error = error_of(file(boss, run=run.pk, lane="payments"), 400, "validation_error")
    assert "lane" in error["fields"]
    assert file(boss, run=run.pk, lane="rewalk").json()["run"] == run.pk


def test_a_supervisor_files_for_any_lane_and_another_workspace_is_not_found(
    workspace: Workspace, boss: Api, api_outsider: Api, lane: Any
) -> None:
    hand_services.lane_create(workspace=workspace, slug="payments")
    assert file(boss, lane="payments").json()["lane"] == "payments"
    error_of(file(api_outsider, lane="rewalk"), 404, "not_found")


def test_scopes(api_a: Api, anonymous: Api, workspace: Workspace) -> None:
    error_of(api_a.get("/friction"), 403, "scope_denied")
    error_of(api_a.get("/friction/export"), 403, "scope_denied")
    error_of(anonymous.post("/friction", {"what": "x"}), 401, "key_invalid")
    leases_only, _ = hand_services.hand_create(workspace=workspace, name="leaser")
    error_of(
        Api(mint(leases_only, ["leases"]), leases_only).post("/friction", {"what": "x"}),
        403,
        "scope_denied",
    )


def test_the_list_filters_by_lane_and_since(
    workspace: Workspace, boss: Api, lane: Any, frozen_clock: Any
) -> None:
    hand_services.lane_create(workspace=workspace, slug="payments")
    old = file(boss, lane="payments", minutes=1).json()
    clock.advance(3600)
    new = file(boss, lane="rewalk", minutes=2).json()
    assert [r["id"] for r in boss.get("/friction").json()] == [new["id"], old["id"]]
    assert [r["id"] for r in boss.get("/friction", {"lane": "payments"}).json()] == [old["id"]]
    since = (frozen_clock + timedelta(seconds=3600)).isoformat()
    assert [r["id"] for r in boss.get("/friction", {"since": since}).json()] == [new["id"]]
    error_of(boss.get("/friction", {"since": "yesterday"}), 400, "validation_error")


def test_a_lane_limited_supervisor_lists_its_lanes_reports_only(
    workspace: Workspace, boss: Api, lane: Any
) -> None:
    hand_services.lane_create(workspace=workspace, slug="payments")
    file(boss, lane="payments")
    mine = file(boss, lane="rewalk").json()
    watcher, _ = hand_services.hand_create(workspace=workspace, name="watcher", lane=lane)
    limited = Api(mint(watcher, ["supervise"], lane=lane), watcher)
    assert [r["id"] for r in limited.get("/friction").json()] == [mine["id"]]


def test_the_list_pages_newest_first(boss: Api) -> None:
    ids = [file(boss, minutes=i).json()["id"] for i in range(5)]
    first = boss.get("/friction", {"limit": 2})
    assert [r["id"] for r in first.json()] == ids[::-1][:2]
    second = boss.get("/friction", {"limit": 2, "cursor": first["X-Next-Cursor"]})
    assert [r["id"] for r in second.json()] == ids[::-1][2:4]


def test_the_list_keeps_its_query_count_as_reports_grow(api_a: Api, boss: Api) -> None:
    for _ in range(2):
        file(api_a, refusals=[refused_call(api_a)])
    # The key (one lookup), the page of reports with their lane, run and attempt, their
    # refusals: the same three with 2 reports and with 17.
    with CaptureQueriesContext(connection) as few:
        assert len(boss.get("/friction").json()) == 2
    for _ in range(15):
        file(api_a, refusals=[refused_call(api_a), refused_call(api_a)])
    with CaptureQueriesContext(connection) as many:
        assert len(boss.get("/friction").json()) == 17
    assert len(many) == len(few) <= 3, [q["sql"] for q in many.captured_queries]


def test_the_export_as_markdown_and_json(api_a: Api, boss: Api) -> None:
    request_id = refused_call(api_a)
    file(
        api_a,
        what="tests | were <b>slow</b>",
        instead="ran one file",
        minutes=7,
        refusals=[request_id],
    )
    markdown = boss.get("/friction/export", {"format": "markdown"})
    assert markdown.status_code == 200
    assert markdown["Content-Type"].startswith("text/markdown")
    assert 'filename="friction.md"' in markdown["Content-Disposition"]
    text = markdown.content.decode()
    assert "tests \\| were &lt;b&gt;slow&lt;/b&gt;" in text
    assert "`not_found`" in text and request_id in text
    assert "1 report, 7 minutes lost." in text
    exported = boss.get("/friction/export", {"format": "json"})
    assert exported["Content-Type"].startswith("application/json")
    assert exported.json()[0]["refusals"][0]["request_id"] == request_id
    assert boss.get("/friction/export").json() == exported.json()
    error = error_of(
        boss.get("/friction/export", {"format": "markdown", "since": "bad"}),
        400,
        "validation_error",
    )
    assert error["fields"]["since"]
    error = error_of(boss.get("/friction/export", {"format": "csv"}), 400, "validation_error")
    assert "format" in error["fields"]


def test_the_webhook_kind_friction_exists() -> None:
    from webhooks.services import WEBHOOK_KINDS

    assert "friction" in WEBHOOK_KINDS
