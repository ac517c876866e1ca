"""A report's answer tells the supervisor's loop as the attempt's own read does: an idle flag and
a budget's notice in a heartbeat's answer (read straight off the statement's row), progress
ending an idle spell, and a costed report (the service's: it judges the lane's budgets)."""

from __future__ import annotations

from datetime import datetime
from decimal import Decimal
from typing import Any

import pytest

from fleet.attempts.idle_sweep import attempts_flag_idle
from fleet.costs import budgets as budget_services
from fleet.models import Attempt, Report
from leases import clock
from tests.support.api import Api, claim, report

pytestmark = pytest.mark.django_db


def as_read(api: Api, answer: Any) -> dict[str, Any]:
    """The answer's attempt, after checking it is what reading the attempt shows at that
    instant (`GET /attempts/{id}`, which renders it from the attempt's view)."""
    assert answer.status_code == 200, answer.content
    shown = answer.json()["attempt"]
    read = api.get(f"/attempts/{shown['id']}")
    assert read.status_code == 200, read.content
    assert shown == read.json()
    return shown


def test_an_idle_heartbeat_answers_as_the_attempt_reads(
    api_a: Api, make_run, frozen_clock: datetime
) -> None:
    run = make_run(slots=1, heartbeat_interval_s=100, grace_s=60, progress_timeout_s=60)
    attempt = claim(api_a, run)
    clock.advance(60)
    assert as_read(api_a, report(api_a, attempt))["idle"] is False  # exactly at the bound
    clock.advance(0.001)
    shown = as_read(api_a, report(api_a, attempt))
    assert shown["idle"] is True
    assert shown["idle_since"] is None  # computed at once; not yet swept
    attempts_flag_idle()
    shown = as_read(api_a, report(api_a, attempt))
    assert shown["idle"] is True and shown["idle_since"] == "2030-01-01T12:01:00.001000Z"


@pytest.mark.parametrize("costed", [False, True], ids=["statement", "costed, by the service"])
def test_progress_ends_an_idle_spell_either_way(
    api_a: Api, make_run, frozen_clock: datetime, costed: bool
) -> None:
    run = make_run(slots=1, heartbeat_interval_s=100, grace_s=60, progress_timeout_s=60)
    attempt = claim(api_a, run)
    clock.advance(61)
    attempts_flag_idle()
    cost = {"cost_usd": "0.01"} if costed else {}
    answer = report(api_a, attempt, kind="progress", message="found it", **cost)
    body = as_read(api_a, answer)
    assert (body["idle"], body["idle_since"]) == (False, None)
    assert body["last_progress_at"] == "2030-01-01T12:01:01Z"
    row = Attempt.objects.get(pk=attempt["id"])
    assert (row.idle_since, row.last_progress_at) == (
        None,
        frozen_clock.replace(second=1, minute=1),
    )


def test_a_budget_notice_is_in_the_costed_report_and_every_heartbeat_after(
    api_a: Api, make_run, lane, frozen_clock: datetime
) -> None:
    budget_services.budget_create(
        lane=lane, period="day", action="pause", limit_usd=Decimal("1.00")
    )
    run = make_run(slots=1, heartbeat_interval_s=100, grace_s=60)
    attempt = claim(api_a, run)
    costed = report(api_a, attempt, cost_usd="1.00", tokens_in=5)
    notice = as_read(api_a, costed)["budget"]
    assert notice["message"] == "lane rewalk has spent its daily budget ($1.00 of $1.00): pause"
    assert Report.objects.get(attempt_id=attempt["id"]).cost_usd == Decimal("1.00")
    shown = as_read(api_a, report(api_a, attempt))
    assert shown["budget"] == notice
    assert shown["directive"] == "pause"
