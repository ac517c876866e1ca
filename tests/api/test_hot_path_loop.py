"""The hot path and the DRF view agree on the supervisor's loop: an idle flag and a budget's
notice in a heartbeat's answer, progress ending an idle spell, and a costed report (which the
hot path leaves to the DRF view, so a bare heartbeat costs what it did)."""

from __future__ import annotations

from datetime import datetime
from decimal import Decimal

import pytest

from fleet.attempts.idle_sweep import attempts_flag_idle
from fleet.costs import budgets as budget_services
from fleet.models import Attempt, Report
from leases import clock
from tests.api.conftest import Api
from tests.api.test_hand_calls import claim, report
from tests.api.test_hot_path import (  # noqa: F401 - the autouse fixture notes who answers
    _note_who_answers,
    django_twin,
    noting,
    same_answer,
    served_by_hot_path,
)

pytestmark = pytest.mark.django_db


@pytest.fixture
def api_a(api_a: Api):  # noqa: ANN201
    return noting(api_a)


def test_an_idle_heartbeat_answers_as_django_does(
    api_a: Api, make_run, frozen_clock: datetime
) -> None:
    run = make_run(slots=1, heartbeat_interval_s=100, grace_s=60, progress_timeout_s=60)
    attempt = claim(api_a, run)
    clock.advance(60)
    fast = report(api_a, attempt)
    assert served_by_hot_path(fast)
    assert fast.json()["attempt"]["idle"] is False  # exactly at the bound
    same_answer(fast, report(django_twin(api_a), attempt))
    clock.advance(0.001)
    fast = report(api_a, attempt)
    assert fast.json()["attempt"]["idle"] is True
    assert fast.json()["attempt"]["idle_since"] is None  # computed at once; not yet swept
    same_answer(fast, report(django_twin(api_a), attempt))
    attempts_flag_idle()
    fast = report(api_a, attempt)
    body = fast.json()["attempt"]
    assert body["idle"] is True and body["idle_since"] == "2030-01-01T12:01:00.001000Z"
    same_answer(fast, report(django_twin(api_a), attempt))


@pytest.mark.parametrize("hot", [True, False])
def test_progress_ends_an_idle_spell_on_either_path(
    api_a: Api, make_run, frozen_clock: datetime, hot: bool
) -> None:
    run = make_run(slots=1, heartbeat_interval_s=100, grace_s=60, progress_timeout_s=60)
    attempt = claim(api_a, run)
    clock.advance(61)
    attempts_flag_idle()
    caller = api_a if hot else django_twin(api_a)
    answer = report(caller, attempt, kind="progress", message="found it")
    assert served_by_hot_path(answer) is hot
    body = answer.json()["attempt"]
    assert (body["idle"], body["idle_since"]) == (False, None)
    assert body["last_progress_at"] == "2030-01-01T12:01:01Z"
    row = Attempt.objects.get(pk=attempt["id"])
    assert (row.idle_since, row.last_progress_at) == (
        None,
        frozen_clock.replace(second=1, minute=1),
    )


def test_a_budget_notice_answers_as_django_does_and_a_costed_report_goes_to_django(
    api_a: Api, make_run, lane, frozen_clock: datetime
) -> None:
    budget_services.budget_create(
        lane=lane, period="day", action="pause", limit_usd=Decimal("1.00")
    )
    run = make_run(slots=1, heartbeat_interval_s=100, grace_s=60)
    attempt = claim(api_a, run)
    costed = report(api_a, attempt, cost_usd="1.00", tokens_in=5)
    assert costed.status_code == 200 and not served_by_hot_path(costed)
    notice = costed.json()["attempt"]["budget"]
    assert notice["message"] == "lane rewalk has spent its daily budget ($1.00 of $1.00): pause"
    assert Report.objects.get(attempt_id=attempt["id"]).cost_usd == Decimal("1.00")
    fast = report(api_a, attempt)
    assert served_by_hot_path(fast)
    assert fast.json()["attempt"]["budget"] == notice
    assert fast.json()["attempt"]["directive"] == "pause"
    same_answer(fast, report(django_twin(api_a), attempt))
