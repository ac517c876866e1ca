"""The leases page in real Chromium: an open handoff request appears without a reload as the
page polls, and a supervisor grants it, which breaks the lease (issue 22, part 2)."""

from __future__ import annotations

import pytest

from hands import services as hand_services
from leases import engine
from leases.handoffs import handoff_ask_resource
from leases.models import HandoffRequest
from leases.services import lease_acquire

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]


def test_an_open_request_appears_and_is_granted(logged_in, owner, artifacts) -> None:
    page = logged_in
    lease_acquire(
        workspace_id=owner.workspace_id,
        resource="src/auth/",
        holder=owner.name,
        process_id="host:1",
        ttl_s=300,
    )
    page.goto("/leases/")
    page.get_by_text("Nobody is asking for a lease.").wait_for()
    page.evaluate("window.__notReloaded = true")
    hand_services.hand_create(workspace=owner.workspace, name="hand-b")
    view, _ = handoff_ask_resource(
        workspace_id=owner.workspace_id,
        holder="hand-b",
        resource="src/auth/login.py",
        reason="the login bug blocks the release",
    )
    row = page.locator(f'#handoffs tr[data-handoff="{view.request.pk}"]')
    row.wait_for()
    assert "the login bug blocks the release" in row.inner_text()
    assert page.evaluate("window.__notReloaded") is True
    page.screenshot(path=str(artifacts / "leases-with-a-handoff.png"), full_page=True)

    row.get_by_role("link", name="Grant hand-b's request for src/auth/").click()
    page.get_by_role("heading", name="Grant hand-b's request for src/auth/?").wait_for()
    page.get_by_label("Reason").fill("b's fix ships today")
    page.get_by_role("button", name="Grant: break the lease").click()
    page.get_by_text("Granted: the lease on src/auth/ is broken").wait_for()
    page.get_by_text("Nobody is asking for a lease.").wait_for()
    request = HandoffRequest.objects.get(pk=view.request.pk)
    assert (request.status, request.answer) == ("granted", "b's fix ships today")
    assert not engine.read(workspace_id=owner.workspace_id, resource="src/auth/").held
