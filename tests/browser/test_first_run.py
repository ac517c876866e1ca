"""The first-run guide in real Chromium: a new workspace's board shows it (a screenshot in
test-artifacts/first-run.png), its link leads to the page that mints a hand's key, and it goes
away in place, without a reload, when the first hand claims."""

from __future__ import annotations

from urllib.parse import urlparse

import pytest

from fleet.attempts import services as attempt_services

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]

RECORD_VIOLATIONS = """
window.__cspViolations = [];
document.addEventListener("securitypolicyviolation", (event) => {
  window.__cspViolations.push(`${event.violatedDirective} blocked ${event.blockedURI || "inline"}`);
});
"""


def test_a_new_workspace_is_guided_and_the_guide_goes_at_the_first_claim(
    logged_in, live_server, owner, make_run, artifacts
) -> None:
    page = logged_in
    page.add_init_script(RECORD_VIOLATIONS)
    page.goto("/")
    guide = page.locator("#first-run")
    guide.wait_for()
    text = guide.inner_text()
    assert "Mint a hand's key." in text and "Claim." in text and "Watch." in text
    assert f"export GC_URL={live_server.url} GC_KEY=gc_…" in text
    assert "gctl run --run RUN -- ./agent.sh" in text
    page.screenshot(path=str(artifacts / "first-run.png"), full_page=True)
    assert page.evaluate("window.__cspViolations") == []

    guide.get_by_role("link", name="Hands").click()
    page.get_by_role("heading", name="Hands").first.wait_for()
    assert urlparse(page.url).path == "/hands/"

    page.goto("/")
    guide.wait_for()
    page.evaluate("window.__notReloaded = true")
    run = make_run(title="Rewalk the docs")
    view = attempt_services.attempt_claim(hand=owner, run_id=run.pk, process_id="host:1")
    page.locator(f'tr[data-attempt="{view.attempt.pk}"]').wait_for()
    assert guide.count() == 0
    assert page.evaluate("window.__notReloaded") is True
