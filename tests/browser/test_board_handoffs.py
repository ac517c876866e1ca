"""The fleet board in real Chromium: an open handoff request appears on the board as it polls,
without a reload, and a supervisor grants it from there (issue 22, part 2)."""

from __future__ import annotations

from urllib.parse import urlparse

import pytest

from hands import services as hand_services
from leases import engine
from leases.handoffs import handoff_ask_resource
from leases.models import HandoffRequest
from leases.services import lease_acquire

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]


def test_a_request_appears_on_the_board_and_is_granted_there(logged_in, owner, artifacts) -> None:
    page = logged_in
    lease_acquire(
        workspace_id=owner.workspace_id,
        resource="migrations",
        holder=owner.name,
        process_id="host:1",
        ttl_s=300,
    )
    page.goto("/")
    page.locator("#board").wait_for()
    page.evaluate("window.__notReloaded = true")
    hand_services.hand_create(workspace=owner.workspace, name="hand-b")
    view, _ = handoff_ask_resource(
        workspace_id=owner.workspace_id,
        holder="hand-b",
        resource="migrations",
        reason="the audit index waits on it",
    )
    row = page.locator(f'#board-handoffs tr[data-handoff="{view.request.pk}"]')
    row.wait_for()
    assert "the audit index waits on it" in row.inner_text()
    assert page.evaluate("window.__notReloaded") is True
    page.screenshot(path=str(artifacts / "board-with-a-handoff.png"), full_page=True)

    row.get_by_role("link", name="Grant hand-b's request for migrations").click()
    page.get_by_label("Reason").fill("the index first")
    page.get_by_role("button", name="Grant: break the lease").click()
    page.get_by_text("Granted: the lease on migrations is broken").wait_for()
    assert urlparse(page.url).path == "/"  # back on the board
    page.locator("#board").wait_for()
    assert HandoffRequest.objects.get(pk=view.request.pk).status == "granted"
    assert not engine.read(workspace_id=owner.workspace_id, resource="migrations").held
