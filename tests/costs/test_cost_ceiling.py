"""One report's cost has a ceiling (issue 33, item 3): $1,000 since the hand's last report, one
definition (`fleet.costs.spend.MAX_COST_USD`) that the schema publishes (`x-limits`), the client
keeps to and the docs state. A hundred thousand dollars, as before, let one report stop a lane's
budget for its whole period."""

from __future__ import annotations

from decimal import Decimal
from pathlib import Path

import pytest

from fleet.costs.spend import MAX_COST_USD
from fleet.models import Report
from tests.support.api import API, Api, claim, error_of, report

pytestmark = pytest.mark.django_db

DOCS = Path(__file__).resolve().parents[2] / "docs"


@pytest.fixture
def run(make_run):  # noqa: ANN001, ANN201
    return make_run(slots=1, heartbeat_interval_s=100, grace_s=60)


def test_the_ceiling_is_a_thousand_dollars_and_published(anonymous: Api) -> None:
    assert Decimal(1000) == MAX_COST_USD
    schema = anonymous.client.get(f"{API}/schema/", {"format": "json"}).json()
    assert schema["x-limits"]["cost_usd"]["value"] == 1000


@pytest.mark.parametrize("at_most", ["1000", "1000.000000", 1000, "999.999999"])
def test_a_report_of_the_ceiling_is_taken(api_a: Api, run, at_most) -> None:  # noqa: ANN001
    attempt = claim(api_a, run)
    assert report(api_a, attempt, cost_usd=at_most).status_code == 200
    assert Report.objects.get(attempt_id=attempt["id"], cost_usd__gt=0).cost_usd == Decimal(
        str(at_most)
    )


@pytest.mark.parametrize("over", ["1000.000001", "1000.01", 1001, "100000", 100000.0])
def test_a_report_over_the_ceiling_is_refused_and_writes_nothing(api_a: Api, run, over) -> None:  # noqa: ANN001
    attempt = claim(api_a, run)
    error = error_of(report(api_a, attempt, cost_usd=over), 400, "validation_error")
    assert "cost_usd" in error["fields"]
    assert not Report.objects.filter(attempt_id=attempt["id"], cost_usd__gt=0).exists()


def test_the_docs_state_the_ceiling() -> None:
    api = (DOCS / "api.md").read_text()
    cost = api.split("**Cost.**", 1)[1].split("\n\n", 1)[0]
    assert f"0 to {MAX_COST_USD:,}" in cost
    assert "100,000" not in cost
    assert f"0–{MAX_COST_USD:,}" in (DOCS / "agents.md").read_text()
