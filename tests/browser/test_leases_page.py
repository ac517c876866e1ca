"""The leases page in real Chromium: a shared lease and a waiter appear in place, without a
reload, as the page polls (issue 20, items 3 and 5)."""

from __future__ import annotations

import pytest

from leases import queue
from leases.services import lease_acquire

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]


def test_a_shared_lease_and_a_waiter_appear_without_a_reload(logged_in, owner, artifacts):
    page = logged_in
    page.goto("/leases/")
    page.get_by_text("Nobody is waiting.").wait_for()
    page.evaluate("window.__notReloaded = true")
    lease_acquire(
        workspace_id=owner.workspace_id,
        resource="docs/",
        holder=owner.name,
        process_id="host:1",
        ttl_s=120,
        mode="shared",
    )
    queue.join(
        workspace_id=owner.workspace_id,
        resource="docs/",
        holder="hand-w",
        process_id="w",
        mode="exclusive",
    )
    page.locator('#records [data-resource="docs/"] .badge-shared').wait_for()
    page.locator("#queue", has_text="hand-w").wait_for()
    assert page.evaluate("window.__notReloaded") is True
    page.screenshot(path=str(artifacts / "leases-with-a-line.png"), full_page=True)
