"""Capabilities on the dashboard (issue 22.6): a hand created with them, an admin changing
them on the hand's page, bad tags refused with nothing written, a viewer refused."""

from __future__ import annotations

from typing import Any

import pytest

from hands.models import Hand, Workspace

pytestmark = pytest.mark.django_db


def test_an_admin_creates_a_hand_with_capabilities_and_changes_them(
    workspace_admin_client: Any, viewer_client: Any, workspace: Workspace
) -> None:
    created = workspace_admin_client.post(
        "/hands/", {"new-name": "gpu-box", "new-capabilities": "GPU, python, gpu"}
    )
    hand = Hand.objects.get(workspace=workspace, name="gpu-box")
    assert created.status_code == 302 and hand.capabilities == ["gpu", "python"]
    page = workspace_admin_client.get(f"/hands/{hand.pk}/").content.decode()
    assert "<code>gpu</code> <code>python</code>" in page
    workspace_admin_client.post(f"/hands/{hand.pk}/capabilities/", {"capabilities": "browser"})
    hand.refresh_from_db()
    assert hand.capabilities == ["browser"]
    refused = workspace_admin_client.post(
        f"/hands/{hand.pk}/capabilities/", {"capabilities": "<script>"}, follow=True
    )
    assert "Refused" in refused.content.decode() and "<script>" not in refused.content.decode()
    hand.refresh_from_db()
    assert hand.capabilities == ["browser"]
    bad = workspace_admin_client.post("/hands/", {"new-name": "x", "new-capabilities": "a b"})
    assert bad.status_code == 200 and not Hand.objects.filter(name="x").exists()
    viewer = viewer_client.post(f"/hands/{hand.pk}/capabilities/", {"capabilities": "gpu"})
    assert viewer.status_code == 403
    hand.refresh_from_db()
    assert hand.capabilities == ["browser"]
