"""Cost and budgets over HTTP: reports carry tokens and cost (validated like every field), totals
per lane, run, hand and attempt (`GET /costs`), lane budgets (`/budgets`) that, once reached,
pause or stop the lane's open attempts, say so in every answer to those hands, refuse claims in
the lane and fire one `budget` event per period."""

from __future__ import annotations

import threading
import time
from datetime import UTC, datetime
from decimal import Decimal
from unittest import mock

import pytest
from django.db import connection

from fleet.attempts import reports as report_services
from fleet.attempts import services as attempt_services
from fleet.costs import budgets as budget_services
from fleet.models import Attempt, BudgetHit, Report
from hands import services as hand_services
from leases import clock, engine
from leases.models import Event
from tests.support.api import Api, claim, error_of, mint, report

pytestmark = pytest.mark.django_db


@pytest.fixture
def run(make_run):  # noqa: ANN001, ANN201
    return make_run(slots=3, heartbeat_interval_s=100, grace_s=60)


def make_budget(boss: Api, **body) -> dict:  # noqa: ANN003
    response = boss.post("/budgets", {"lane": "rewalk", "period": "day", "action": "pause", **body})
    assert response.status_code == 201, response.content
    return response.json()


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("tokens_in", -1),
        ("tokens_in", 1.5),
        ("tokens_out", True),
        ("tokens_out", 10**9 + 1),
        ("cost_usd", "-0.01"),
        ("cost_usd", "0.0000001"),
        ("cost_usd", "1e400"),
        ("cost_usd", "NaN"),
        ("cost_usd", "100000.01"),
        ("cost_usd", [1]),
    ],
)
def test_it_refuses_a_bad_cost_and_writes_nothing(api_a: Api, run, field, value) -> None:  # noqa: ANN001
    attempt = claim(api_a, run)
    answer = report(api_a, attempt, kind="progress", **{field: value})
    error = error_of(answer, 400, "validation_error")
    assert field in error["fields"]
    assert not Report.objects.filter(attempt_id=attempt["id"]).exclude(kind="heartbeat").exists()
    assert Attempt.objects.get(pk=attempt["id"]).last_progress_at is None


def test_the_service_refuses_a_float_cost(owner, run) -> None:  # noqa: ANN001
    view = attempt_services.attempt_claim(hand=owner, run_id=run.pk, process_id="p")
    with pytest.raises(Exception, match="cost_usd must be an amount"):
        report_services.attempt_report(
            hand=owner,
            attempt_id=view.attempt.pk,
            fence=1,
            kind="note",
            process_id="p",
            cost_usd=0.1,  # type: ignore[arg-type]
        )


def test_it_totals_cost_per_lane_run_hand_and_attempt(
    api_a: Api, api_b: Api, boss: Api, api_outsider: Api, make_run, frozen_clock: datetime
) -> None:
    first, second = make_run(slots=2), make_run(slots=1, title="Other")
    a1, b1 = claim(api_a, first), claim(api_b, first, process="host-b:1")
    a2 = claim(api_a, second, process="host-a:2")
    assert report(api_a, a1, cost_usd="0.10", tokens_in=100, tokens_out=10).status_code == 200
    assert report(api_a, a1, cost_usd=0.05, tokens_in=50).status_code == 200
    assert report(api_b, b1, process="host-b:1", cost_usd="1.5").status_code == 200
    clock.advance(3600)
    assert report(api_a, a2, process="host-a:2", tokens_out=7).status_code == 200
    report(api_a, a1)  # a heartbeat costs nothing

    by_run = boss.get("/costs", {"by": "run"}).json()
    assert by_run["total"] == {"tokens_in": 150, "tokens_out": 17, "cost_usd": "1.650000"}
    assert [(r["id"], r["name"], r["cost_usd"], r["tokens_in"]) for r in by_run["rows"]] == [
        (first.pk, "Run", "1.650000", 150),
        (second.pk, "Other", "0.000000", 0),
    ]
    by_hand = boss.get("/costs", {"by": "hand"}).json()["rows"]
    assert [(r["name"], r["cost_usd"]) for r in by_hand] == [
        ("hand-b", "1.500000"),
        ("hand-a", "0.150000"),
    ]
    by_attempt = boss.get("/costs", {"by": "attempt"}).json()["rows"]
    assert [(r["id"], r["tokens_out"]) for r in by_attempt] == [
        (b1["id"], 0),
        (a1["id"], 10),
        (a2["id"], 7),
    ]
    by_lane = boss.get("/costs").json()
    assert by_lane["by"] == "lane" and by_lane["rows"][0]["name"] == "rewalk"
    later = boss.get("/costs", {"since": "2030-01-01T12:30:00Z"}).json()
    assert later["total"] == {"tokens_in": 0, "tokens_out": 7, "cost_usd": "0.000000"}
    earlier = boss.get("/costs", {"until": "2030-01-01T12:30:00+00:00"}).json()
    assert earlier["total"]["cost_usd"] == "1.650000"
    # Nothing crosses workspaces; a hand's work key reads no totals.
    assert api_outsider.get("/costs").json()["rows"] == []
    error_of(api_a.get("/costs"), 403, "scope_denied")
    error_of(boss.get("/costs", {"by": "day"}), 400, "validation_error")
    error_of(boss.get("/costs", {"since": "yesterday"}), 400, "validation_error")
    error_of(boss.get("/costs", {"lane": "nope"}), 404, "not_found")


def test_a_lane_limited_key_sees_only_its_lane_s_costs(
    workspace, api_a: Api, boss: Api, make_run
) -> None:
    other, _ = hand_services.lane_create(workspace=workspace, slug="docs", name="Docs")
    run = make_run(slots=1)
    attempt = claim(api_a, run)
    report(api_a, attempt, cost_usd="2")
    limited = Api(mint(boss.hand, ["plan"], lane=other), boss.hand)
    assert limited.get("/costs").json()["rows"] == []
    assert boss.get("/costs", {"lane": "rewalk"}).json()["total"]["cost_usd"] == "2.000000"
    error_of(limited.get("/costs", {"lane": "rewalk"}), 404, "not_found")


def test_supervisors_create_list_and_update_budgets(
    lane,  # noqa: ANN001
    boss: Api,
    api_a: Api,
    api_outsider: Api,
    frozen_clock: datetime,
) -> None:
    made = make_budget(boss, limit_usd="5.00")
    assert made == {
        "id": made["id"],
        "lane": "rewalk",
        "period": "day",
        "limit_usd": "5.000000",
        "limit_tokens": None,
        "action": "pause",
        "period_start": "2030-01-01T00:00:00Z",
        "period_end": "2030-01-02T00:00:00Z",
        "spent": {"tokens_in": 0, "tokens_out": 0, "cost_usd": "0.000000"},
        "reached_at": None,
    }
    week = make_budget(boss, period="week", action="stop", limit_tokens=1000)
    assert (week["period_start"], week["period_end"]) == (
        "2029-12-31T00:00:00Z",  # the Monday of 2030-01-01's ISO week
        "2030-01-07T00:00:00Z",
    )
    assert [b["id"] for b in boss.get("/budgets").json()] == [made["id"], week["id"]]
    error_of(make_budget_raw(boss, limit_usd="1"), 400, "validation_error")  # a second daily
    error_of(make_budget_raw(boss, period="week", lane="nope", limit_usd="1"), 404, "not_found")
    error_of(make_budget_raw(boss, period="week"), 400, "validation_error")  # no limit
    error_of(make_budget_raw(boss, limit_usd="-1"), 400, "validation_error")
    error_of(make_budget_raw(boss, action="explode", limit_usd="1"), 400, "validation_error")
    error_of(api_a.post("/budgets", {}), 403, "scope_denied")
    assert api_outsider.get("/budgets").json() == []
    error_of(api_outsider.get(f"/budgets/{made['id']}"), 404, "not_found")
    changed = boss.patch(f"/budgets/{made['id']}", {"limit_usd": "7.5", "action": "stop"})
    assert changed.status_code == 200, changed.content
    assert (changed.json()["limit_usd"], changed.json()["action"]) == ("7.500000", "stop")
    error_of(boss.patch(f"/budgets/{made['id']}", {"limit_usd": None}), 400, "validation_error")
    error_of(boss.patch("/budgets/999999", {"action": "stop"}), 404, "not_found")
    error_of(boss.patch(f"/budgets/{made['id']}", {}), 400, "validation_error")


def make_budget_raw(boss: Api, **body):  # noqa: ANN003, ANN201
    return boss.post("/budgets", {"lane": "rewalk", "period": "day", "action": "pause", **body})


def test_reaching_a_budget_pauses_the_lane_says_so_and_refuses_claims_until_the_next_day(
    boss: Api, api_a: Api, api_b: Api, run, frozen_clock: datetime
) -> None:
    clock.freeze(datetime(2030, 1, 1, 23, 58, tzinfo=UTC))  # two minutes before the next day
    budget = make_budget(boss, limit_usd="5.00")
    a, b = claim(api_a, run), claim(api_b, run, process="host-b:1")
    assert boss.post(f"/attempts/{b['id']}/directive", {"directive": "stop"}).status_code == 200
    below = report(api_a, a, cost_usd="4.99")
    assert below.json()["attempt"]["budget"] is None
    assert below.json()["attempt"]["directive"] == "continue"
    reached = report(api_a, a, cost_usd="0.01")
    body = reached.json()["attempt"]
    assert body["directive"] == "pause"
    assert body["budget"] == {
        "budget": budget["id"],
        "lane": "rewalk",
        "period": "day",
        "period_start": "2030-01-01T00:00:00Z",
        "period_end": "2030-01-02T00:00:00Z",
        "spent_usd": "5.000000",
        "limit_usd": "5.000000",
        "spent_tokens": 0,
        "limit_tokens": None,
        "action": "pause",
        "message": "lane rewalk has spent its daily budget ($5.00 of $5.00): pause",
    }
    # The stop stays a stop; the other hand hears of the budget in its next answer.
    beat = report(api_b, b, process="host-b:1").json()["attempt"]
    assert (beat["directive"], beat["budget"]["action"]) == ("stop", "pause")
    assert boss.get(f"/attempts/{a['id']}").json()["budget"]["spent_usd"] == "5.000000"
    [event] = Event.objects.filter(kind="budget")
    assert (event.actor, event.hand, event.attempt_id) == ("hand-a", "hand-a", a["id"])
    assert (event.actor, event.data["attempts"], event.data["spent_usd"]) == (
        "hand-a",
        sorted([a["id"], b["id"]]),
        "5.000000",
    )
    # More spend: no second event. A claim in the lane is refused while the period lasts.
    report(api_a, a, cost_usd="1")
    assert Event.objects.filter(kind="budget").count() == 1
    error = error_of(
        api_b.post(f"/runs/{run.pk}/claim", {"process_id": "x"}), 409, "budget_reached"
    )
    assert error["lane"] == "rewalk" and error["action"] == "pause"
    assert error["period_end"] == "2030-01-02T00:00:00Z"
    assert "lane rewalk has spent its daily budget ($5.00 of $5.00)" in error["message"]
    listed = boss.get("/budgets").json()[0]
    assert listed["reached_at"] == "2030-01-01T23:58:00Z"
    assert listed["spent"]["cost_usd"] == "6.000000"
    # The supervisor lifts the pause as any other; the next day lifts the budget.
    assert boss.post(f"/attempts/{a['id']}/directive", {"directive": "continue"}).status_code == 200
    clock.advance(60)
    report(api_a, a), report(api_b, b, process="host-b:1")
    clock.advance(59.999)  # the last instant of the day
    assert report(api_a, a).json()["attempt"]["budget"]["action"] == "pause"
    error_of(api_b.post(f"/runs/{run.pk}/claim", {"process_id": "x"}), 409, "budget_reached")
    clock.advance(0.001)  # midnight UTC: a new period
    fresh = report(api_a, a).json()["attempt"]
    assert (fresh["budget"], fresh["directive"]) == (None, "continue")
    assert claim(api_b, run, process="host-b:2")["fence"] == 1
    assert boss.get("/budgets").json()[0]["reached_at"] is None


def test_a_token_limit_and_a_stop_action(boss: Api, api_a: Api, run, frozen_clock) -> None:  # noqa: ANN001
    make_budget(boss, period="week", action="stop", limit_tokens=100)
    a = claim(api_a, run)
    boss.post(f"/attempts/{a['id']}/directive", {"directive": "pause"})
    body = report(api_a, a, tokens_in=60, tokens_out=40).json()["attempt"]
    assert body["directive"] == "stop"
    assert body["budget"]["message"] == (
        "lane rewalk has spent its weekly budget (100 of 100 tokens): stop"
    )


def test_updating_a_budget_lifts_the_period_s_hit(boss: Api, api_a: Api, run, frozen_clock) -> None:  # noqa: ANN001
    budget = make_budget(boss, limit_usd="1")
    a = claim(api_a, run)
    report(api_a, a, cost_usd="1")
    assert BudgetHit.objects.count() == 1
    boss.patch(f"/budgets/{budget['id']}", {"limit_usd": "3"})
    assert BudgetHit.objects.count() == 0
    assert report(api_a, a).json()["attempt"]["budget"] is None
    claim(api_a, run, process="host-a:2")  # claims again
    report(api_a, a, cost_usd="2")
    assert Event.objects.filter(kind="budget").count() == 2


def test_budget_lists_and_costs_cost_the_same_queries_however_many(
    boss: Api, workspace, django_assert_num_queries
) -> None:
    for i in range(6):
        lane, _ = hand_services.lane_create(workspace=workspace, slug=f"lane-{i}", name="L")
        budget_services.budget_create(lane=lane, period="day", action="pause", limit_usd=Decimal(1))
        budget_services.budget_create(lane=lane, period="week", action="stop", limit_tokens=9)
    boss.get("/me")  # the key's first use is stamped once; not this list's cost
    # The key and its hand; the clock; the budgets with their lanes; the day's and the week's
    # spend; the hits.
    with django_assert_num_queries(6):
        assert len(boss.get("/budgets").json()) == 12
    # The key and its hand; one grouped query.
    with django_assert_num_queries(2):
        assert boss.get("/costs", {"by": "hand"}).status_code == 200


@pytest.mark.django_db(transaction=True)
def test_many_reports_crossing_a_budget_at_once_fire_it_once(
    owner, teammate, make_run, lane, frozen_clock: datetime
) -> None:
    budget_services.budget_create(lane=lane, period="day", action="pause", limit_usd=Decimal(1))
    hands = [owner, teammate]
    run = make_run(slots=8, heartbeat_interval_s=100, grace_s=60)
    views = [
        attempt_services.attempt_claim(hand=hands[i % 2], run_id=run.pk, process_id=f"p{i}")
        for i in range(8)
    ]
    barrier = threading.Barrier(len(views))
    errors: list[BaseException] = []

    def spend(i: int) -> None:
        try:
            barrier.wait(timeout=10)
            report_services.attempt_report(
                hand=hands[i % 2],
                attempt_id=views[i].attempt.pk,
                fence=1,
                kind="note",
                process_id=f"p{i}",
                message="spent",
                cost_usd=Decimal("0.25"),
            )
        except BaseException as error:  # noqa: BLE001 - reported by the main thread
            errors.append(error)
        finally:
            connection.close()

    threads = [threading.Thread(target=spend, args=(i,)) for i in range(len(views))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert not errors, errors
    [event] = Event.objects.filter(kind="budget")
    # The fourth report reached it: what was spent then is the limit exactly.
    assert event.data["spent_usd"] == "1.000000"
    assert BudgetHit.objects.count() == 1
    assert set(Attempt.objects.values_list("directive", flat=True)) == {"pause"}
    assert Attempt.objects.filter(budget_notice__isnull=False).count() == 8


@pytest.mark.django_db(transaction=True)
def test_a_claim_racing_the_report_that_reaches_the_budget_is_refused_or_told(
    owner, teammate, make_run, lane, frozen_clock: datetime
) -> None:
    from apikit.errors import GroundControlError

    budget_services.budget_create(lane=lane, period="day", action="pause", limit_usd=Decimal(1))
    spenders = make_run(slots=4, heartbeat_interval_s=100, grace_s=60)
    views = [
        attempt_services.attempt_claim(hand=owner, run_id=spenders.pk, process_id=f"p{i}")
        for i in range(4)
    ]
    claimed = make_run(slots=4, heartbeat_interval_s=100, grace_s=60)
    barrier = threading.Barrier(8)
    errors: list[BaseException] = []
    refused: list[str] = []

    def spend(i: int) -> None:
        try:
            barrier.wait(timeout=10)
            time.sleep(0.1)  # while the claims are between their check and their slot
            report_services.attempt_report(
                hand=owner, attempt_id=views[i].attempt.pk, fence=1, kind="note",
                process_id=f"p{i}", message="spent", cost_usd=Decimal("0.25"),
            )  # fmt: skip
        except BaseException as error:  # noqa: BLE001 - reported by the main thread
            errors.append(error)
        finally:
            connection.close()

    def take(i: int) -> None:
        try:
            barrier.wait(timeout=10)
            attempt_services.attempt_claim(hand=teammate, run_id=claimed.pk, process_id=f"c{i}")
        except GroundControlError as error:
            refused.append(error.code)
        except BaseException as error:  # noqa: BLE001 - reported by the main thread
            errors.append(error)
        finally:
            connection.close()

    real_take = engine.take_first_free

    def slow_take(**kwargs):  # noqa: ANN003, ANN202
        # The claims' window, wide open: checked the budget, not yet holding a slot.
        time.sleep(0.4)
        return real_take(**kwargs)

    threads = [threading.Thread(target=spend, args=(i,)) for i in range(4)]
    threads += [threading.Thread(target=take, args=(i,)) for i in range(4)]
    with mock.patch.object(engine, "take_first_free", slow_take):
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=60)
    assert not errors, errors
    assert set(refused) <= {"budget_reached"}
    # Every attempt open in the lane now was told: none slipped in beside the budget's update.
    open_attempts = Attempt.objects.filter(lane=lane, end=None)
    assert open_attempts.count() == 4 + 4 - len(refused)
    assert not open_attempts.filter(budget_notice__isnull=True).exists()
    assert set(open_attempts.values_list("directive", flat=True)) == {"pause"}
