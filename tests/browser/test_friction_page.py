"""The friction page in real Chromium (issue 22.1): a filed report, the code and time of the
refused call it links, and the chart of minutes lost per week, reached from the nav."""

from __future__ import annotations

import pytest

from friction import services as friction_services
from hands import services as hand_services
from leases.models import Refusal

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]


def test_it_shows_a_filed_report_its_linked_refusal_and_the_chart(
    logged_in,
    owner,
    lane,
    artifacts,  # noqa: ANN001
):
    page = logged_in
    Refusal.objects.create(
        workspace_id=owner.workspace_id,
        hand=owner.name,
        code="lease_held",
        method="POST",
        path="/api/v1/leases/acquire",
        request_id="req-browser-1",
        message="migrations is held by hand 'b'",
    )
    key = hand_services.key_issue(hand=owner, scopes=["work"], actor="test").key
    friction_services.friction_file(
        hand=owner,
        key=key,
        what="the migrations lock was held all morning",
        instead="wrote the docs",
        minutes=25,
        lane="rewalk",
        refusals=["req-browser-1"],
    )
    page.goto("/")
    page.get_by_role("navigation", name="Main").get_by_role("link", name="Friction").click()
    page.wait_for_url("**/friction/")
    row = page.locator("tr[data-report]", has_text="the migrations lock was held all morning")
    row.wait_for()
    linked = row.locator('.refusal-link[data-request-id="req-browser-1"]')
    assert linked.locator("code").inner_text() == "lease_held"
    assert linked.locator("time").get_attribute("datetime")
    chart = page.locator("svg.chart[role=img]")
    chart.wait_for()
    assert "Minutes lost to friction per week" in chart.locator("title").first.text_content()
    assert chart.locator('rect[data-lane="rewalk"][data-minutes="25"]').count() == 1
    with page.expect_download() as download:
        page.get_by_role("link", name="Markdown").click()
    assert download.value.suggested_filename == "friction.md"
    page.screenshot(path=str(artifacts / "friction.png"), full_page=True)
