"""A supervisor voids a report's cost (issue 33, item 3): the report stays on record, marked
voided with who, when and why; no total or budget counts it; a budget hit it caused is lifted
(claims in the lane are taken again, the notice leaves the answers) in the void's transaction,
and a hit the other reports still reach stays; one `cost_voided` event says so. Only `supervise`,
only the workspace's reports, a lane-limited key only its lane's; a repeat changes nothing."""

from __future__ import annotations

import threading
import time
from datetime import datetime
from decimal import Decimal
from unittest import mock

import pytest
from django.db import connection

from fleet.attempts import reports as report_services
from fleet.attempts import services as attempt_services
from fleet.costs import budgets as budget_services
from fleet.costs import voids
from fleet.models import Attempt, BudgetHit, Report
from hands import services as hand_services
from leases import clock
from leases.models import Event
from tests.support.api import Api, claim, error_of, mint, report

pytestmark = pytest.mark.django_db


@pytest.fixture
def run(make_run):  # noqa: ANN001, ANN201
    return make_run(slots=4, heartbeat_interval_s=100, grace_s=60)


def make_budget(boss: Api, **body) -> dict:  # noqa: ANN003
    response = boss.post("/budgets", {"lane": "rewalk", "period": "day", "action": "stop", **body})
    assert response.status_code == 201, response.content
    return response.json()


def costed(attempt: dict) -> list[dict]:
    return [
        {"id": r.pk, "cost_usd": r.cost_usd, "voided_at": r.voided_at}
        for r in Report.objects.filter(attempt_id=attempt["id"], cost_usd__gt=0).order_by("id")
    ]


def void(api: Api, report_id: int, reason: str = "a hostile hand's figure") -> object:
    return api.post(f"/costs/reports/{report_id}/void", {"reason": reason})


def test_a_void_lifts_the_stop_one_wrong_report_caused(
    boss: Api, api_a: Api, api_b: Api, run, frozen_clock: datetime
) -> None:
    budget = make_budget(boss, limit_usd="5")
    tokens = make_budget(boss, period="week", action="pause", limit_tokens=10_000)
    honest = claim(api_a, run)
    hostile = claim(api_b, run, process="host-b:1")
    assert report(api_a, honest, cost_usd="1.25", tokens_in=100).status_code == 200
    # One report of the ceiling (and a billion tokens): the whole lane stops for the day.
    wrong = report(api_b, hostile, process="host-b:1", cost_usd="1000", tokens_in=10**9)
    assert wrong.json()["attempt"]["directive"] == "stop"
    assert BudgetHit.objects.count() == 2
    error_of(api_a.post(f"/runs/{run.pk}/claim", {"process_id": "x"}), 409, "budget_reached")

    # The supervisor finds the report among the costed ones, and voids it.
    listed = boss.get("/costs/reports", {"attempt": hostile["id"]})
    assert listed.status_code == 200, listed.content
    [row] = listed.json()
    assert row == {
        "id": row["id"],
        "attempt": hostile["id"],
        "run": run.pk,
        "lane": "rewalk",
        "hand": "hand-b",
        "kind": "heartbeat",
        "at": "2030-01-01T12:00:00Z",
        "tokens_in": 10**9,
        "tokens_out": 0,
        "cost_usd": "1000.000000",
        "voided": None,
    }
    clock.advance(60)
    answer = void(boss, row["id"])
    assert answer.status_code == 200, answer.content
    body = answer.json()
    assert (body["voided"], body["lifted"]) == (True, sorted([budget["id"], tokens["id"]]))
    assert body["report"]["voided"] == {
        "at": "2030-01-01T12:01:00Z",
        "actor": "boss",
        "actor_key": boss.key.split("_")[1],
        "reason": "a hostile hand's figure",
    }
    # Recorded on the report, its figures kept.
    voided = Report.objects.get(pk=row["id"])
    assert (voided.cost_usd, voided.tokens_in, voided.voided_by, voided.void_reason) == (
        Decimal("1000"),
        10**9,
        "boss",
        "a hostile hand's figure",
    )
    assert voided.voided_at is not None
    # The hits are lifted: claims are taken again, no answer carries the notice, the totals
    # and the budgets count only the honest report.
    assert not BudgetHit.objects.exists()
    assert not Attempt.objects.filter(budget_notice__isnull=False).exists()
    assert claim(api_a, run, process="host-a:2")["fence"] == 1
    assert report(api_a, honest).json()["attempt"]["budget"] is None
    costs = boss.get("/costs", {"by": "attempt"}).json()
    assert costs["total"] == {"tokens_in": 100, "tokens_out": 0, "cost_usd": "1.250000"}
    listed_budget = boss.get(f"/budgets/{budget['id']}").json()
    assert (listed_budget["spent"]["cost_usd"], listed_budget["reached_at"]) == ("1.250000", None)
    # The stop it set stays, for a supervisor to lift (as a budget's change leaves it).
    assert boss.get(f"/attempts/{hostile['id']}").json()["directive"] == "stop"
    # Later spend is judged without the voided report: 1.25 + 3.75 reaches the $5 again.
    again = report(api_a, honest, cost_usd="3.75").json()["attempt"]
    assert again["directive"] == "stop" and again["budget"]["spent_usd"] == "5.000000"


def test_a_repeated_void_changes_nothing(
    boss: Api, api_a: Api, run, frozen_clock: datetime
) -> None:
    make_budget(boss, limit_usd="5")
    attempt = claim(api_a, run)
    report(api_a, attempt, cost_usd="999")
    [row] = costed(attempt)
    first = void(boss, row["id"], "mistyped").json()
    assert first["voided"] is True and len(first["lifted"]) == 1
    report(api_a, attempt, cost_usd="5")  # reaches the budget again, honestly
    assert BudgetHit.objects.count() == 1
    clock.advance(30)
    second = void(boss, row["id"], "another reason")
    assert second.status_code == 200, second.content
    assert (second.json()["voided"], second.json()["lifted"]) == (False, [])
    # The first void stands as it was; the honest hit stays.
    assert second.json()["report"]["voided"] == first["report"]["voided"]
    assert Report.objects.get(pk=row["id"]).void_reason == "mistyped"
    assert BudgetHit.objects.count() == 1


@pytest.mark.parametrize(
    ("spent", "void_usd", "lifted"),
    [
        (["3", "2"], "2", True),  # 3 left of a 5 limit: lifted
        (["5", "2"], "2", False),  # 5 left: the limit is still reached (>=), the hit stays
        (["4.999999", "0.000001"], "0.000001", True),  # a millionth below it: lifted
    ],
)
def test_a_void_lifts_only_a_hit_the_rest_no_longer_reaches(
    boss: Api, api_a: Api, run, frozen_clock: datetime, spent, void_usd, lifted
) -> None:  # noqa: ANN001
    budget = make_budget(boss, limit_usd="5")
    attempt = claim(api_a, run)
    for usd in spent:
        report(api_a, attempt, cost_usd=usd)
    assert BudgetHit.objects.count() == 1
    target = [r for r in costed(attempt) if r["cost_usd"] == Decimal(void_usd)][-1]
    body = void(boss, target["id"]).json()
    assert body["lifted"] == ([budget["id"]] if lifted else [])
    assert BudgetHit.objects.exists() is not lifted
    still = Attempt.objects.get(pk=attempt["id"]).budget_notice
    assert (still is None) is lifted


def test_a_void_of_another_day_s_report_leaves_today_s_hit(
    boss: Api, api_a: Api, run, frozen_clock: datetime
) -> None:
    make_budget(boss, limit_usd="5")
    attempt = claim(api_a, run)
    report(api_a, attempt, cost_usd="4")
    clock.advance(24 * 3600)  # the next UTC day (the first attempt is long lost)
    today = claim(api_a, run, process="host-a:2")
    assert report(api_a, today, "host-a:2", cost_usd="5").status_code == 200  # today's hit
    [yesterday] = costed(attempt)
    assert void(boss, yesterday["id"]).json()["lifted"] == []
    assert BudgetHit.objects.count() == 1
    error_of(api_a.post(f"/runs/{run.pk}/claim", {"process_id": "x"}), 409, "budget_reached")


def test_only_a_supervisor_of_the_report_s_workspace_and_lane_voids_it(
    workspace, lane, boss: Api, api_a: Api, api_outsider: Api, run, frozen_clock: datetime
) -> None:  # noqa: ANN001
    make_budget(boss, limit_usd="5")
    attempt = claim(api_a, run)
    report(api_a, attempt, cost_usd="10")
    [row] = costed(attempt)
    docs, _ = hand_services.lane_create(workspace=workspace, slug="docs", name="Docs")
    planner = Api(mint(boss.hand, ["plan"]), boss.hand)
    other_lane = Api(mint(boss.hand, ["supervise"], lane=docs), boss.hand)
    own_lane = Api(mint(boss.hand, ["supervise"], lane=lane), boss.hand)

    error_of(void(api_a, row["id"]), 403, "scope_denied")  # the reporting hand's own key
    error_of(void(planner, row["id"]), 403, "scope_denied")  # plan reads costs, never voids
    error_of(void(api_outsider, row["id"]), 404, "not_found")  # another workspace
    error_of(void(other_lane, row["id"]), 404, "not_found")  # another lane
    assert other_lane.get("/costs/reports").json() == []
    assert [r["id"] for r in api_outsider.get("/costs/reports").json()] == []
    error_of(boss.post("/costs/reports/99999999/void", {"reason": "r"}), 404, "not_found")
    assert Report.objects.get(pk=row["id"]).voided_at is None
    assert BudgetHit.objects.count() == 1

    assert [r["id"] for r in own_lane.get("/costs/reports").json()] == [row["id"]]
    assert [r["id"] for r in planner.get("/costs/reports").json()] == [row["id"]]
    done = void(own_lane, row["id"])
    assert done.status_code == 200, done.content
    assert done.json()["report"]["voided"]["actor"] == "boss"
    assert not BudgetHit.objects.exists()


@pytest.mark.parametrize("body", [{}, {"reason": ""}, {"reason": "a\x00b"}, {"reason": 5}])
def test_a_void_needs_a_reason(boss: Api, api_a: Api, run, body) -> None:  # noqa: ANN001
    attempt = claim(api_a, run)
    report(api_a, attempt, cost_usd="2")
    [row] = costed(attempt)
    error = error_of(boss.post(f"/costs/reports/{row['id']}/void", body), 400, "validation_error")
    assert "reason" in error["fields"]
    assert Report.objects.get(pk=row["id"]).voided_at is None


def test_a_report_without_a_cost_has_nothing_to_void(boss: Api, api_a: Api, run) -> None:
    attempt = claim(api_a, run)
    report(api_a, attempt, kind="progress", message="no cost")
    plain = Report.objects.get(attempt_id=attempt["id"], kind="progress")
    error_of(void(boss, plain.pk), 404, "not_found")
    assert boss.get("/costs/reports").json() == []


def test_the_run_and_hand_pages_mark_a_voided_cost(
    boss: Api, api_a: Api, run, viewer_client
) -> None:  # noqa: ANN001
    attempt = claim(api_a, run)
    report(api_a, attempt, cost_usd="2.5")
    report(api_a, attempt, cost_usd="700", tokens_out=9)
    row = costed(attempt)[-1]
    assert void(boss, row["id"]).status_code == 200
    for url in (f"/runs/{run.pk}/", f"/hands/{api_a.hand.pk}/"):
        page = viewer_client.get(url)
        assert page.status_code == 200, url
        html = page.content.decode()
        assert 'data-cost-usd="2.500000"' in html, url  # the total counts the honest report
        assert 'class="voided" data-voided-usd="700.000000" data-voided-tokens="9"' in html, url
        assert "voided: $700.00, 9 tokens" in html, url


@pytest.mark.django_db(transaction=True)
def test_a_void_racing_the_lane_s_costed_reports_leaves_the_hit_as_the_spend_says(
    owner, teammate, make_run, lane, frozen_clock: datetime
) -> None:
    """A report of $5 races the void of a $999 one under a $5 stop budget, held open between
    its record and its judgement of the budget: whatever the order, the lane ends with its hit,
    since what counts reaches the limit. The void judges after the lane's budget locks, as
    costed reports do, so it never lifts the hit on a spend that misses a report which, seeing
    the hit still there, judged nothing (without those locks it did: no hit, $5 counted)."""
    budget_services.budget_create(lane=lane, period="day", action="stop", limit_usd=Decimal(5))
    run = make_run(slots=2, heartbeat_interval_s=100, grace_s=60)
    hands = [owner, teammate]
    views = [
        attempt_services.attempt_claim(hand=hands[i], run_id=run.pk, process_id=f"p{i}")
        for i in range(2)
    ]

    def spend(i: int, usd: str) -> None:
        report_services.attempt_report(
            hand=hands[i], attempt_id=views[i].attempt.pk, fence=1, kind="note",
            process_id=f"p{i}", message="spent", cost_usd=Decimal(usd),
        )  # fmt: skip

    spend(1, "999")
    big = Report.objects.get(cost_usd=Decimal(999))
    assert BudgetHit.objects.count() == 1
    barrier = threading.Barrier(2)
    errors: list[BaseException] = []
    real_enforce = report_services.budgets_enforce

    def slow_enforce(**kwargs):  # noqa: ANN003, ANN202
        time.sleep(0.3)  # recorded, not yet judged: the void comes now
        return real_enforce(**kwargs)

    def void_it() -> None:
        time.sleep(0.1)  # while the reports are between their record and their judgement
        voids.report_void(workspace_id=lane.workspace_id, report_id=big.pk, reason="r", actor="b")

    def run_one(target, *args) -> None:  # noqa: ANN001
        try:
            barrier.wait(timeout=10)
            target(*args)
        except BaseException as error:  # noqa: BLE001 - reported by the main thread
            errors.append(error)
        finally:
            connection.close()

    threads = [
        threading.Thread(target=run_one, args=(spend, 0, "5")),
        threading.Thread(target=run_one, args=(void_it,)),
    ]
    with mock.patch.object(report_services, "budgets_enforce", slow_enforce):
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=60)
    assert not errors, errors
    assert Report.objects.get(pk=big.pk).voided_at is not None
    # $5 counts: the hit stands (lifted and reached again, or never lifted), and every open
    # attempt carries its notice.
    [hit] = BudgetHit.objects.all()
    open_attempts = Attempt.objects.filter(lane=lane, end=None)
    assert not open_attempts.filter(budget_notice__isnull=True).exists()
    assert {a.budget_notice["budget"] for a in open_attempts} == {hit.budget_id}


def test_the_costed_reports_cost_the_same_queries_however_many(
    boss: Api, api_a: Api, run, frozen_clock: datetime
) -> None:
    from django.test.utils import CaptureQueriesContext

    attempt = claim(api_a, run)
    boss.get("/me")  # the key's first use is stamped once; not the list's cost

    def listed() -> int:
        with CaptureQueriesContext(connection) as queries:
            response = boss.get("/costs/reports")
        assert response.status_code == 200
        return len(queries)

    report(api_a, attempt, cost_usd="1")
    few = listed()
    for _ in range(12):
        report(api_a, attempt, cost_usd="1", tokens_in=5)
    void(boss, costed(attempt)[0]["id"])
    assert len(boss.get("/costs/reports").json()) == 13
    assert listed() == few


def test_a_void_is_one_event_and_on_the_runs_timeline(
    boss: Api, api_a: Api, run, frozen_clock: datetime
) -> None:
    budget = make_budget(boss, limit_usd="2")
    attempt = claim(api_a, run)
    assert report(api_a, attempt, cost_usd="2.5", tokens_in=300).status_code == 200
    [row] = boss.get("/costs/reports", {"attempt": attempt["id"]}).json()
    assert void(boss, row["id"]).status_code == 200
    assert void(boss, row["id"], reason="again").status_code == 200

    # One event, by the supervisor, about the hand's report: a repeat voids nothing.
    [event] = Event.objects.filter(kind="cost_voided")
    assert (event.actor, event.actor_key, event.hand, event.attempt_id) == (
        "boss",
        boss.key.split("_")[1],
        "hand-a",
        attempt["id"],
    )
    assert event.data == {
        "report": row["id"],
        "run": run.pk,
        "cost_usd": "2.500000",
        "tokens_in": 300,
        "tokens_out": 0,
        "reason": "a hostile hand's figure",
    }
    assert not BudgetHit.objects.filter(budget_id=budget["id"]).exists()
    assert [e["id"] for e in boss.get("/events", {"kind": "cost_voided"}).json()] == [event.pk]
    told = [
        entry["text"]
        for entry in boss.get(f"/runs/{run.pk}/timeline").json()
        if entry["kind"] == "cost_voided"
    ]
    assert told == [
        f"boss voided the cost ($2.50) of hand-a's report on slot {attempt['slot']}: "
        "a hostile hand's figure."
    ]
