"""Queries per page stay constant as the fleet grows: the same count with 10 and 1,000 attempts.

The board: session, user, memberships, the time, lanes, counts (one aggregate), the page of rows.
The run page: the same first three, the run, the time, its slots, its attempts with evidence
and latest reports (three), its counts, and two for its cost (its spend per day, which sums to
its total and draws its chart; the shown attempts' totals, one grouped query). The hand page:
the hand, the time, its keys, its attempts (three), its refusals, and two for its cost (its
total; the shown attempts' totals). tests/costs/test_costs_pages.py adds costed reports.
"""

from __future__ import annotations

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from fleet.models import Attempt
from hands.models import Hand

pytestmark = pytest.mark.django_db


def count_queries(client, url: str) -> int:  # noqa: ANN001
    with CaptureQueriesContext(connection) as queries:
        response = client.get(url)
    assert response.status_code == 200, url
    return len(queries)


def pages_for(run) -> list[str]:  # noqa: ANN001
    busiest = Hand.objects.filter(attempts__run=run).first()
    return [
        "/",
        "/?state=late",
        f"/runs/{run.pk}/",
        f"/hands/{busiest.pk}/",
        "/lanes/",
        f"/work-packages/{run.work_package_id}/",
        "/hands/",
    ]


def test_every_page_costs_the_same_queries_with_10_and_1000_attempts(
    workspace_admin_client, make_fleet, frozen_clock
):
    small = make_fleet(10, now=frozen_clock)
    small_counts = [count_queries(workspace_admin_client, url) for url in pages_for(small)]
    Attempt.objects.all().delete()
    large = make_fleet(1000, now=frozen_clock)
    assert Attempt.objects.filter(run=large).count() == 1000
    large_counts = [count_queries(workspace_admin_client, url) for url in pages_for(large)]
    assert large_counts == small_counts
    board_queries = small_counts[0]
    assert board_queries <= 8, board_queries


def test_the_board_shows_one_page_of_a_large_fleet(
    workspace_admin_client, make_fleet, frozen_clock
):
    make_fleet(1000, now=frozen_clock)
    html = workspace_admin_client.get("/").content.decode()
    assert html.count("<tr data-attempt=") == 100
    assert "page 1 of 10" in html
