"""A supervisor's void of a report's cost through the Python client, against the live server:
the costed reports listed, one voided with its reason (the budget hit it caused lifted), a
repeat that changes nothing, and a hand's own key refused."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

import pytest
from groundcontrol_client import Client, ScopeDenied
from groundcontrol_client.core.costs import CostReport, ReportVoided

from fleet.costs import budgets as budget_services
from fleet.models import BudgetHit, Report
from hands.models import Hand
from tests.client.conftest import Fleet, mint

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def boss(gc: Fleet, owner: Hand) -> Any:
    client = Client(gc.url, mint(owner, ["supervise"]))
    yield client
    client.close()


def test_a_supervisor_lists_and_voids_a_cost_and_the_budget_lifts(
    gc: Fleet, boss: Client, lane: Any
) -> None:
    budget = budget_services.budget_create(
        lane=lane, period="day", action="stop", limit_usd=Decimal(5)
    )
    run = gc.run(slots=2)
    with Client(gc.url, gc.key_a) as hand:
        attempt = hand.claim(run.pk, process_id="host-a:1")
        hand.report(attempt.id, fence=attempt.fence, process_id="host-a:1", cost_usd="0.5")
        # Sent as "999" (the server reads no exponent): the client writes plain digits.
        big = Decimal("9.99E+2")
        hand.report(attempt.id, fence=attempt.fence, process_id="host-a:1", cost_usd=big)
        assert BudgetHit.objects.count() == 1

        listed = boss.cost_reports(attempt_id=attempt.id)
        assert [type(r) for r in listed] == [CostReport, CostReport]
        newest = listed[0]
        assert (newest.cost_usd, newest.voided, newest.lane) == (Decimal("999"), None, "rewalk")

        done = boss.report_void(newest.id, reason="a typo: 9.99")
        assert isinstance(done, ReportVoided)
        assert (done.voided, done.lifted) == (True, (budget.pk,))
        assert not BudgetHit.objects.exists()
        assert done.report.voided is not None and done.report.voided.reason == "a typo: 9.99"
        assert Report.objects.get(pk=newest.id).void_reason == "a typo: 9.99"

        again = boss.report_void(newest.id, reason="twice")
        assert (again.voided, again.lifted) == (False, ())
        assert again.report.voided == done.report.voided

        with pytest.raises(ScopeDenied):
            hand.report_void(newest.id, reason="mine")
    assert [r.voided is not None for r in boss.cost_reports(run_id=run.pk)] == [True, False]
