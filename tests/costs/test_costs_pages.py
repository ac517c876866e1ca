"""Cost on the run and hand pages (issue 22, part 4): the run's and the hand's totals, each
shown attempt's total, the run's chart per UTC day; all sums `fleet.costs.spend`'s, escaped, in a
fixed number of queries however many attempts and reports."""

from __future__ import annotations

import re
from datetime import datetime, timedelta
from decimal import Decimal

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from fleet.attempts import reports as report_services
from fleet.attempts import services as attempt_services
from fleet.costs import spend
from fleet.models import Attempt, Report
from hands.models import Hand

pytestmark = pytest.mark.django_db


def report(hand, view, *, cost: str = "0", tokens_in: int = 0, tokens_out: int = 0) -> None:  # noqa: ANN001
    report_services.attempt_report(
        hand=hand, attempt_id=view.attempt.pk, fence=view.attempt.fence, kind="note",
        process_id="p", message="spent", cost_usd=Decimal(cost), tokens_in=tokens_in,
        tokens_out=tokens_out,
    )  # fmt: skip


def cell(html: str, attempt_id: int) -> str:
    """The cost cell of an attempt's row."""
    row = html.split(f'<tr data-attempt="{attempt_id}"')[1].split("</tr>")[0]
    return row.split('<td class="num cost">')[1].split("</td>")[0]


@pytest.fixture
def costed(owner, teammate, make_run, frozen_clock: datetime):  # noqa: ANN001, ANN201
    """Two hands on a run, the owner also on another run, with costed reports and a heartbeat."""
    run = make_run(slots=2, heartbeat_interval_s=100, grace_s=60, title="<script>alert(1)</script>")
    mine = attempt_services.attempt_claim(hand=owner, run_id=run.pk, process_id="p")
    theirs = attempt_services.attempt_claim(hand=teammate, run_id=run.pk, process_id="p")
    report(owner, mine, cost="0.75", tokens_in=1200)
    report(owner, mine, cost="0.004", tokens_out=30)
    report(owner, mine)  # no cost: counts for nothing
    report(teammate, theirs, cost="0.25", tokens_in=100)
    other = make_run(slots=1, heartbeat_interval_s=100, grace_s=60, title="Other")
    elsewhere = attempt_services.attempt_claim(hand=owner, run_id=other.pk, process_id="p")
    report(owner, elsewhere, cost="2", tokens_out=10)
    return run, other, mine.attempt, theirs.attempt, elsewhere.attempt


def test_the_run_page_shows_the_run_s_total_and_each_attempt_s(viewer_client, costed) -> None:
    run, _, mine, theirs, _ = costed
    html = viewer_client.get(f"/runs/{run.pk}/").content.decode()
    total = html.split("<dt>Cost</dt><dd>")[1].split("</dd>")[0]
    assert 'data-cost-usd="1.004000"' in total
    by_run = {row["id"]: row for row in spend.costs_by(workspace_id=run.workspace_id, by="run")}
    assert by_run[run.pk]["cost_usd"] == Decimal("1.004")  # the same sum as GET /costs?by=run
    assert "$1.00, 1330 tokens (1300 in, 30 out)</span> over all its attempts" in total
    assert 'data-cost-usd="0.754000"' in cell(html, mine.pk)
    assert 'title="1200 tokens in, 30 out">$0.75<br><small>1230 tokens</small><' in cell(
        html, mine.pk
    )
    assert 'title="100 tokens in, 0 out">$0.25<br><small>100 tokens</small><' in cell(
        html, theirs.pk
    )
    # The chart: today's column says the run's day, with its figures.
    chart = html.split('id="run-cost-chart"')[1].split("</figure>")[0]
    assert chart.count("<rect x=") == 14 and "2030-01-01: $1.00, 1330 tokens" in chart
    # Escaped: the run's title is text, never markup.
    assert "<script>alert(1)</script>" not in html and "&lt;script&gt;alert(1)" in html


def test_the_run_total_counts_every_day_and_the_chart_only_the_latest(
    viewer_client, costed, frozen_clock: datetime
) -> None:
    run, _, mine, _, _ = costed
    Report.objects.create(
        workspace_id=mine.workspace_id,
        attempt=mine,
        kind="note",
        at=frozen_clock - timedelta(days=20),
        cost_usd=Decimal("3"),
    )
    html = viewer_client.get(f"/runs/{run.pk}/").content.decode()
    assert 'data-cost-usd="4.004000"' in html.split("<dt>Cost</dt>")[1].split("</dd>")[0]
    assert 'data-cost-usd="3.754000"' in cell(html, mine.pk)
    chart = html.split('id="run-cost-chart"')[1].split("</figure>")[0]
    assert "14 days, $1.00 and 1330 tokens in all" in chart
    assert spend.spend_total(spend.run_daily(run_id=run.pk).values()).cost_usd == Decimal("4.004")


def test_the_hand_page_shows_the_hand_s_total_over_its_runs_and_each_attempt_s(
    viewer_client, owner, teammate, costed
) -> None:
    _, _, mine, _, elsewhere = costed
    html = viewer_client.get(f"/hands/{owner.pk}/").content.decode()
    total = html.split("<dt>Cost</dt><dd>")[1].split("</dd>")[0]
    assert 'data-cost-usd="2.754000"' in total
    assert "$2.75, 1240 tokens (1200 in, 40 out)</span> over all its attempts" in total
    assert 'data-cost-usd="0.754000"' in cell(html, mine.pk)
    assert 'title="0 tokens in, 10 out">$2.00<br><small>10 tokens</small><' in cell(
        html, elsewhere.pk
    )
    other = viewer_client.get(f"/hands/{teammate.pk}/").content.decode()
    assert 'data-cost-usd="0.250000"' in other.split("<dt>Cost</dt>")[1].split("</dd>")[0]


def test_an_attempt_without_costed_reports_shows_zero(viewer_client, owner, make_run) -> None:
    run = make_run(slots=1)
    view = attempt_services.attempt_claim(hand=owner, run_id=run.pk, process_id="p")
    report(owner, view)
    html = viewer_client.get(f"/runs/{run.pk}/").content.decode()
    assert ">$0.00<br><small>0 tokens</small><" in cell(html, view.attempt.pk)
    assert 'data-cost-usd="0.000000"' in html.split("<dt>Cost</dt>")[1].split("</dd>")[0]
    hand_html = viewer_client.get(f"/hands/{owner.pk}/").content.decode()
    assert ">$0.00<br><small>0 tokens</small><" in cell(hand_html, view.attempt.pk)


def test_the_board_has_no_cost_column(viewer_client, costed) -> None:
    html = viewer_client.get("/").content.decode()
    assert '<td class="num cost">' not in html and "data-attempt=" in html


def test_another_workspace_sees_neither_page(outsider_client, owner, costed) -> None:
    run, *_ = costed
    assert outsider_client.get(f"/runs/{run.pk}/").status_code == 404
    assert outsider_client.get(f"/hands/{owner.pk}/").status_code == 404


def _queries(client, url: str) -> int:  # noqa: ANN001
    with CaptureQueriesContext(connection) as captured:
        assert client.get(url).status_code == 200
    return len(captured)


def _cost_everything(run, frozen_clock: datetime, per_attempt: int) -> None:  # noqa: ANN001
    Report.objects.bulk_create(
        Report(
            workspace_id=workspace_id, attempt_id=attempt_id, kind="note",
            cost_usd=Decimal("0.01"), tokens_in=7,
            at=frozen_clock - timedelta(days=i % 30, seconds=i),
        )
        for attempt_id, workspace_id in Attempt.objects.filter(run=run).values_list(
            "pk", "workspace_id"
        )
        for i in range(per_attempt)
    )  # fmt: skip


def test_the_costs_cost_the_same_queries_with_10_and_1000_costed_attempts(
    viewer_client, make_fleet, frozen_clock: datetime
) -> None:
    def counts(run) -> list[int]:  # noqa: ANN001
        busiest = Hand.objects.filter(attempts__run=run).first()
        return [
            _queries(viewer_client, f"/runs/{run.pk}/"),
            _queries(viewer_client, f"/hands/{busiest.pk}/"),
        ]

    small = make_fleet(10, now=frozen_clock)
    uncosted = counts(small)
    _cost_everything(small, frozen_clock, per_attempt=3)
    small_counts = counts(small)
    assert small_counts == uncosted  # the totals' queries run whether or not anything was spent
    Attempt.objects.all().delete()
    large = make_fleet(1000, now=frozen_clock)
    _cost_everything(large, frozen_clock, per_attempt=5)
    assert counts(large) == small_counts
    html = viewer_client.get(f"/runs/{large.pk}/").content.decode()
    assert 'data-cost-usd="50.000000"' in html.split("<dt>Cost</dt>")[1].split("</dd>")[0]
    assert html.count('<td class="num cost">') == len(re.findall(r"<tr data-attempt=", html))
