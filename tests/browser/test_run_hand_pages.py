"""The run and hand pages in real Chromium: an admin sets a hand's capabilities (normalised as
the API does) and the run page shows what its runs need; the run page shows what a costed
report cost, in all and for its attempt."""

from __future__ import annotations

from decimal import Decimal

import pytest

from apikit.errors import GroundControlError
from fleet.attempts import reports as report_services
from fleet.attempts import services as attempt_services

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]


def test_an_admin_sets_a_hands_capabilities_and_the_run_shows_its_needs(
    logged_in, owner, make_run, artifacts
):
    page = logged_in
    run = make_run(slots=1, capabilities=["GPU", "python"])
    with pytest.raises(GroundControlError):  # a hand without them may not claim it
        attempt_services.attempt_claim(hand=owner, run_id=run.pk, process_id="p")
    page.goto(f"/hands/{owner.pk}/")
    shown = page.locator("section[aria-labelledby='capabilities-h'] [data-capabilities]")
    assert "None" in shown.inner_text()
    form = page.locator(f"form[action='/hands/{owner.pk}/capabilities/']")
    form.get_by_label("Set to").fill(" Python, gpu ,GPU ")
    form.get_by_role("button", name="Save").click()
    # Lower-cased, trimmed, each once, in the order first typed (the API's normalisation).
    page.get_by_text("Hand hand-a now has capabilities: python, gpu.").wait_for()
    assert shown.locator("code").all_inner_texts() == ["python", "gpu"]
    owner.refresh_from_db()
    assert owner.capabilities == ["python", "gpu"]
    assert form.get_by_label("Set to").input_value() == "python, gpu"  # the page reloaded
    page.screenshot(path=str(artifacts / "hand-capabilities.png"), full_page=True)
    view = attempt_services.attempt_claim(hand=owner, run_id=run.pk, process_id="p")
    page.goto(f"/runs/{run.pk}/")
    needs = page.locator("dd[data-capabilities] code")
    assert needs.all_inner_texts() == ["gpu", "python"]
    assert page.locator(f'tr[data-attempt="{view.attempt.pk}"]').count() == 1
    page.screenshot(path=str(artifacts / "run-capabilities.png"), full_page=True)


def test_the_run_page_shows_what_a_costed_report_cost(logged_in, owner, make_run, artifacts):
    page = logged_in
    run = make_run(slots=2)
    view = attempt_services.attempt_claim(hand=owner, run_id=run.pk, process_id="p")
    page.goto(f"/runs/{run.pk}/")
    total = page.locator("dl.facts [data-cost-usd]")
    assert total.get_attribute("data-cost-usd") == "0.000000"
    report_services.attempt_report(
        hand=owner, attempt_id=view.attempt.pk, fence=1, kind="progress", process_id="p",
        message="spent", tokens_in=900, tokens_out=100, cost_usd=Decimal("1.25"),
    )  # fmt: skip
    page.reload()
    assert total.get_attribute("data-cost-usd") == "1.250000"
    assert total.inner_text() == "$1.25, 1000 tokens (900 in, 100 out)"
    row_cost = page.locator(f'tr[data-attempt="{view.attempt.pk}"] td.cost span')
    assert row_cost.inner_text().split() == ["$1.25", "1000", "tokens"]
    assert row_cost.get_attribute("title") == "900 tokens in, 100 out"
    chart = page.locator("#run-cost-chart svg")
    assert chart.get_attribute("role") == "img"
    today = chart.locator("rect[data-day]").last
    assert float(today.get_attribute("height")) > 0
    assert today.locator("title").text_content().endswith(": $1.25, 1000 tokens")
    page.screenshot(path=str(artifacts / "run-cost.png"), full_page=True)
    page.goto(f"/hands/{owner.pk}/")
    assert page.locator("dl.facts [data-cost-usd]").get_attribute("data-cost-usd") == "1.250000"
    page.screenshot(path=str(artifacts / "hand-cost.png"), full_page=True)
