"""The Content-Security-Policy in real Chromium: the dashboard (htmx polling included) and the
API docs (Swagger UI) work under it, and the browser reports no violation on any of them."""

from __future__ import annotations

from typing import Any

import pytest

from fleet.attempts import services as attempt_services

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]

# Runs before any of the page's own scripts, and outside the policy (Playwright injects it).
RECORD_VIOLATIONS = """
window.__cspViolations = [];
document.addEventListener("securitypolicyviolation", (event) => {
  window.__cspViolations.push(`${event.violatedDirective} blocked ${event.blockedURI || "inline"}`);
});
"""


def _violations(page: Any) -> list[str]:
    return page.evaluate("window.__cspViolations")


def _watch(page: Any) -> list[str]:
    """Record violations on every page from now on, and console messages that name the policy."""
    messages: list[str] = []
    page.add_init_script(RECORD_VIOLATIONS)
    page.on(
        "console",
        lambda message: (
            messages.append(message.text) if "Content Security Policy" in message.text else None
        ),
    )
    return messages


def test_the_dashboard_works_under_the_policy_with_no_violation(logged_in, owner, make_run):
    page = logged_in
    messages = _watch(page)
    run = make_run()
    view = attempt_services.attempt_claim(hand=owner, run_id=run.pk, process_id="host:1")
    page.goto("/")
    assert page.evaluate("htmx.config.allowEval") is False
    # htmx polls and swaps the board (a fresh fingerprint after a report).
    swapped = []
    page.on(
        "response",
        lambda r: swapped.append(r.status) if r.request.headers.get("hx-request") else None,
    )
    page.locator(f'tr[data-attempt="{view.attempt.pk}"]').wait_for()
    page.wait_for_timeout(2500)
    assert swapped, "htmx did not poll"
    assert _violations(page) == []
    for path in (f"/runs/{run.pk}/", f"/hands/{owner.pk}/", "/leases/", "/events/", "/lanes/"):
        page.goto(path)
        page.locator("h1").first.wait_for()
        assert _violations(page) == [], path
    # The timeline's SVG is drawn under the policy.
    page.goto(f"/runs/{run.pk}/")
    assert page.locator("svg.chart").count() >= 1
    assert _violations(page) == [] and messages == [], messages
    # The recorder does see a violation: an inline style added without the nonce is blocked.
    page.evaluate(
        "document.head.appendChild(Object.assign(document.createElement('style'),"
        " {textContent: 'body { color: red }'}))"
    )
    page.wait_for_function("window.__cspViolations.length > 0")
    assert _violations(page)[0].startswith("style-src")


def test_the_api_docs_render_under_the_policy_with_no_violation(page):
    messages = _watch(page)
    page.goto("/api/v1/docs/")
    # Swagger UI fetched the schema and drew its operations.
    page.locator(".opblock").first.wait_for()
    assert page.locator(".opblock").count() > 20
    assert "Ground Control API" in page.locator(".title").first.inner_text()
    assert _violations(page) == [] and messages == [], (_violations(page), messages)


def test_the_login_page_works_under_the_policy(page, admin):
    messages = _watch(page)
    page.goto("/login/")
    page.get_by_label("Username").fill("ada")
    page.get_by_label("Password").fill("a long browser password")
    page.get_by_role("button", name="Log in").click()
    page.get_by_role("heading", name="Fleet board").wait_for()
    assert _violations(page) == [] and messages == [], messages
