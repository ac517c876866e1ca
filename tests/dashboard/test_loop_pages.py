"""The supervisor's loop on the pages: the idle and budget badges on the board, a lane's cost
(totals, the chart per day, its budgets) and the forms that set a run's idle settings and a
lane's budgets."""

from __future__ import annotations

from datetime import date, datetime, timedelta
from decimal import Decimal

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from dashboard.cost_charts import cost_chart_svg
from fleet.attempts import reports as report_services
from fleet.attempts import services as attempt_services
from fleet.attempts.idle_sweep import attempts_flag_idle
from fleet.costs import budgets as budget_services
from fleet.costs.spend import Spend
from fleet.models import Budget, Report, Run
from leases import clock
from leases.models import Event

pytestmark = pytest.mark.django_db


def spend(hand, view, cost: str, tokens: int = 0) -> None:  # noqa: ANN001
    report_services.attempt_report(
        hand=hand, attempt_id=view.attempt.pk, fence=view.attempt.fence, kind="note",
        process_id="p", message="spent", cost_usd=Decimal(cost), tokens_in=tokens,
    )  # fmt: skip


def test_the_board_badges_an_idle_hand_and_a_reached_budget(
    viewer_client, owner, teammate, lane, make_run, frozen_clock: datetime
) -> None:
    run = make_run(slots=2, heartbeat_interval_s=100, grace_s=60, progress_timeout_s=60)
    quiet = attempt_services.attempt_claim(hand=owner, run_id=run.pk, process_id="p")
    busy = attempt_services.attempt_claim(hand=teammate, run_id=run.pk, process_id="p")
    clock.advance(61)
    spend(teammate, busy, "0.50")
    html = viewer_client.get("/").content.decode()
    rows = {part.split('"')[0]: part for part in html.split('data-attempt="')[1:]}
    assert 'data-idle="true"' in rows[str(quiet.attempt.pk)]  # computed, before any sweep
    assert "data-idle" not in rows[str(busy.attempt.pk)]
    budget_services.budget_create(lane=lane, period="day", action="pause", limit_usd=Decimal(1))
    spend(teammate, busy, "0.50")
    attempts_flag_idle()
    html = viewer_client.get("/").content.decode()
    assert html.count('data-budget="pause"') == 2
    assert "lane rewalk has spent its daily budget ($1.00 of $1.00): pause" in html


def test_the_lane_page_shows_cost_per_day_and_its_budgets(
    viewer_client, owner, lane, make_run, frozen_clock: datetime
) -> None:
    budget_services.budget_create(lane=lane, period="day", action="stop", limit_usd=Decimal(2))
    run = make_run(slots=1, heartbeat_interval_s=100, grace_s=60)
    view = attempt_services.attempt_claim(hand=owner, run_id=run.pk, process_id="p")
    spend(owner, view, "0.75", tokens=1200)
    html = viewer_client.get(f"/lanes/{lane.slug}/").content.decode()
    assert "$0.75, 1200 tokens" in html
    assert 'data-day="2030-01-01"' in html and "2030-01-01: $0.75, 1200 tokens" in html
    assert 'class="limit"' in html and "daily budget $2.00" in html
    assert '<tr data-budget="day">' in html
    assert 'action="/lanes/rewalk/budgets/"' not in html  # a viewer has no form


def test_the_lane_page_costs_the_same_queries_however_much_was_reported(
    viewer_client, owner, lane, make_run, frozen_clock: datetime
) -> None:
    budget_services.budget_create(lane=lane, period="day", action="stop", limit_usd=Decimal(900))
    budget_services.budget_create(lane=lane, period="week", action="stop", limit_tokens=10**9)
    run = make_run(slots=1, heartbeat_interval_s=100, grace_s=60)
    view = attempt_services.attempt_claim(hand=owner, run_id=run.pk, process_id="p")

    def queries() -> int:
        with CaptureQueriesContext(connection) as captured:
            assert viewer_client.get(f"/lanes/{lane.slug}/").status_code == 200
        return len(captured)

    spend(owner, view, "0.01")
    few = queries()
    # Costed reports on each of the chart's days (written in bulk: the lease is the test's).
    Report.objects.bulk_create(
        Report(
            workspace_id=view.attempt.workspace_id,
            attempt_id=view.attempt.pk,
            kind="note",
            at=frozen_clock - timedelta(days=d, hours=h),
            cost_usd=Decimal("0.10"),
            tokens_out=5,
        )
        for d in range(14)
        for h in range(5)
    )
    assert queries() == few
    html = viewer_client.get(f"/lanes/{lane.slug}/").content.decode()
    assert html.count("<rect x=") == 14 and "2030-01-01: $0.51, 25 tokens" in html


def test_a_supervisor_sets_and_changes_a_budget_from_the_lane_page(
    supervisor_client, viewer_client, lane
) -> None:
    form = {"period": "day", "limit_usd": "5.00", "limit_tokens": "", "action": "pause"}
    assert viewer_client.post(f"/lanes/{lane.slug}/budgets/", form).status_code == 403
    assert not Budget.objects.exists()
    response = supervisor_client.post(f"/lanes/{lane.slug}/budgets/", form, follow=True)
    assert "Lane rewalk has a day budget." in response.content.decode()
    budget = Budget.objects.get()
    assert (budget.period, budget.limit_usd, budget.limit_tokens, budget.action) == (
        "day", Decimal("5.00"), None, "pause",
    )  # fmt: skip
    again = {**form, "limit_usd": "", "limit_tokens": "5000", "action": "stop"}
    supervisor_client.post(f"/lanes/{lane.slug}/budgets/", again)
    budget.refresh_from_db()
    assert (budget.limit_usd, budget.limit_tokens, budget.action) == (None, 5000, "stop")
    refused = supervisor_client.post(
        f"/lanes/{lane.slug}/budgets/", {**form, "limit_usd": "", "limit_tokens": ""}, follow=True
    )
    assert "needs limit_usd, limit_tokens or both" in refused.content.decode()
    bad = supervisor_client.post(
        f"/lanes/{lane.slug}/budgets/", {**form, "limit_usd": "-3"}, follow=True
    )
    assert bad.status_code == 200 and Budget.objects.get().limit_tokens == 5000
    assert supervisor_client.post("/lanes/nowhere/budgets/", form).status_code == 404


def test_a_supervisor_sets_a_run_s_idle_settings(
    supervisor_client, viewer_client, make_run, outsider_client
) -> None:
    run = make_run()
    html = supervisor_client.get(f"/runs/{run.pk}/").content.decode()
    assert "never (no progress timeout)" in html and f'action="/runs/{run.pk}/idle/"' in html
    body = {"progress_timeout_s": "900", "idle_directive": "pause"}
    assert viewer_client.post(f"/runs/{run.pk}/idle/", body).status_code == 403
    assert outsider_client.post(f"/runs/{run.pk}/idle/", body).status_code == 404
    supervisor_client.post(f"/runs/{run.pk}/idle/", body)
    run.refresh_from_db()
    assert (run.progress_timeout_s, run.idle_directive) == (900, "pause")
    # Recorded as the person's change, with what it changed.
    (changed,) = Event.objects.filter(kind="run_changed", data__run=run.pk)
    assert changed.actor == "sam"
    assert changed.data["changed"] == {
        "progress_timeout_s": {"before": None, "after": 900},
        "idle_directive": {"before": "none", "after": "pause"},
    }
    assert (
        "900s without progress, then pause"
        in supervisor_client.get(f"/runs/{run.pk}/").content.decode()
    )
    supervisor_client.post(
        f"/runs/{run.pk}/idle/", {"progress_timeout_s": "5", "idle_directive": "x"}
    )
    assert Run.objects.get(pk=run.pk).progress_timeout_s == 900
    supervisor_client.post(
        f"/runs/{run.pk}/idle/", {"progress_timeout_s": "", "idle_directive": "none"}
    )
    assert Run.objects.get(pk=run.pk).progress_timeout_s is None


def test_the_cost_chart_escapes_and_draws_the_limit() -> None:
    days = [
        (date(2030, 1, 1), Spend(cost_usd=Decimal("1.5"), tokens_in=3)),
        (date(2030, 1, 2), Spend()),
    ]
    svg = cost_chart_svg(days, limit_usd=Decimal("2"), ident='x"><script>')
    assert "<script>" not in svg and "&quot;&gt;&lt;script&gt;" in svg
    assert svg.count("<rect") == 2 and 'class="limit"' in svg
    assert "2 days, $1.50 and 3 tokens in all; the daily budget is $2.00" in svg
    assert 'class="limit"' not in cost_chart_svg(days)
    assert "0 days" in cost_chart_svg([])
