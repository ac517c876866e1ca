"""The leases page's tree in real Chromium: a directory a supervisor folds (or unfolds) stays so
as the page polls and redraws the tree in place; countdowns tick between polls; the browser's
words for a time are the server's (`when`); and a screenshot of a busy tree."""

from __future__ import annotations

from datetime import timedelta

import pytest

from fleet.attempts import services as attempt_services
from hands import services as hand_services
from leases import queue
from leases.clock import db_now
from leases.handoffs import handoff_ask_resource
from leases.models import Waiter
from leases.services import lease_acquire
from tests.lease_tree.test_times import CASES

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]


def take(ws: int, resource: str, holder: str, mode: str = "exclusive", ttl: int = 300) -> None:
    lease_acquire(
        workspace_id=ws, resource=resource, holder=holder, process_id=f"{holder}@build-7:4242",
        ttl_s=ttl, mode=mode,
    )  # fmt: skip


def wait_for_a_poll(page) -> None:  # noqa: ANN001
    """Until the tree has been swapped in anew (the marker is gone with the old tree)."""
    page.evaluate("document.querySelector('#records').dataset.old = '1'")
    page.locator("#records[data-old]").wait_for(state="detached")


def test_a_folded_directory_stays_folded_as_the_page_polls(logged_in, owner) -> None:
    page = logged_in
    ws = owner.workspace_id
    take(ws, "src/auth/", owner.name)
    take(ws, "src/api/routes.py", owner.name)
    for index in range(30):
        take(ws, f"vendor/lib{index:02d}.py", owner.name)
    page.goto("/leases/")
    src = page.locator('details[data-fold="resource:src"]')
    vendor = page.locator('details[data-fold="resource:vendor"]')
    assert src.evaluate("e => e.open") and not vendor.evaluate("e => e.open")
    src.locator("> summary").click()
    vendor.locator("> summary").click()
    assert not src.evaluate("e => e.open") and vendor.evaluate("e => e.open")
    page.evaluate("window.__notReloaded = true")
    take(ws, "docs/", owner.name)
    page.locator('[data-node="docs"]').wait_for()
    wait_for_a_poll(page)
    assert page.evaluate("window.__notReloaded") is True
    src = page.locator('details[data-fold="resource:src"]')
    assert not src.evaluate("e => e.open")
    assert page.locator('details[data-fold="resource:vendor"]').evaluate("e => e.open")
    assert not page.locator('[data-resource="src/auth/"]').is_visible()
    # Unfold all: every directory, kept too.
    page.get_by_role("button", name="Unfold all").first.click()
    wait_for_a_poll(page)
    assert page.locator('[data-resource="src/auth/"]').is_visible()


def test_a_countdown_ticks_between_polls(logged_in, owner, settings) -> None:
    settings.GC_DASHBOARD_POLL_S = 600  # no poll redraws it: the browser alone ticks
    page = logged_in
    take(owner.workspace_id, "migrations", owner.name, ttl=90)
    page.goto("/leases/")
    countdown = page.locator('[data-resource="migrations"] time[data-when="countdown"]')
    first = countdown.inner_text()
    assert first.startswith("in 1 min")
    page.wait_for_function(
        "([elt, first]) => elt.textContent !== first", arg=[countdown.element_handle(), first]
    )
    assert countdown.inner_text().startswith("in 1 min")
    assert countdown.get_attribute("title").endswith(" UTC")


def test_the_browser_says_a_time_as_the_server_does(logged_in) -> None:
    page = logged_in
    words = page.evaluate(
        "cases => cases.map(([s, style]) => window.GroundControl.relative(s, style))",
        [[seconds, style] for seconds, style, _ in CASES],
    )
    assert words == [expected for _, _, expected in CASES]


def test_a_busy_tree_reads_well(logged_in, owner, teammate, make_run, artifacts) -> None:
    page = logged_in
    ws = owner.workspace_id
    take(ws, "src/auth/", owner.name)
    take(ws, "src/billing/invoice.py", teammate.name)
    take(ws, "src/billing/tax.py", teammate.name, ttl=40)
    for hand in (owner.name, teammate.name, "hand-docs"):
        take(ws, "docs/", hand, mode="shared")
    take(ws, "migrations", "hand-db", ttl=120)
    for index in range(12):
        take(ws, f"tests/unit/test_mod{index:02d}.py", f"hand-t{index % 3}")
    for resource, holder in (("src/", "hand-lead"), ("src/auth/login.py", "hand-fix"),
                             ("migrations", "hand-late")):  # fmt: skip
        queue.join(
            workspace_id=ws, resource=resource, holder=holder, process_id="w", mode="exclusive"
        )
    # A waiter refreshes its place while it waits; these stand for waiters that do.
    Waiter.objects.update(expires_at=db_now() + timedelta(hours=1))
    hand_services.hand_create(workspace=owner.workspace, name="hand-fix")
    handoff_ask_resource(
        workspace_id=ws, holder="hand-fix", resource="src/auth/login.py",
        reason="the login bug blocks the release",
    )  # fmt: skip
    run = make_run(slots=3)
    attempt_services.attempt_claim(hand=owner, run_id=run.pk, process_id="host:1")
    attempt_services.attempt_claim(hand=teammate, run_id=run.pk, process_id="host:2")
    page.goto("/leases/")
    page.locator('[data-node="src/auth/login.py"] .place').wait_for()
    assert page.locator('[data-node="src/auth/login.py"] .place').inner_text() == "#2"
    page.screenshot(path=str(artifacts / "lease-tree.png"), full_page=True)
