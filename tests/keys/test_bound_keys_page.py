"""A hand's page says what a bound key lives by, and when that tenure ended (issue 21, item 4)."""

from __future__ import annotations

import pytest
from django.test import Client

from hands import services as hand_services
from hands.models import Hand
from leases import services as leases

pytestmark = pytest.mark.django_db


def test_the_hands_page_shows_what_a_key_lives_by_and_when_that_ended(
    owner: Hand, supervisor_client: Client
) -> None:
    lease = leases.lease_acquire(
        workspace_id=owner.workspace_id,
        resource="src/<auth>/",
        holder=owner.name,
        process_id="p",
        ttl_s=60,
    )
    hand_services.key_issue(
        hand=owner, scopes=["leases"], actor="sam", bound_to=("src/<auth>/", None)
    )
    page = supervisor_client.get(f"/hands/{owner.pk}/").content.decode()
    assert f"while <code>src/&lt;auth&gt;/</code> at fence {lease.fence} is held" in page
    assert "tenure ended" not in page
    leases.lease_release(
        workspace_id=owner.workspace_id,
        resource="src/<auth>/",
        holder=owner.name,
        fence=lease.fence,
    )
    page = supervisor_client.get(f"/hands/{owner.pk}/").content.decode()
    assert '<span class="badge badge-lost">tenure ended</span>' in page
