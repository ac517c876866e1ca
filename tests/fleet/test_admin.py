"""The Django admin keeps what the hot path relies on: a lane's slug never changes."""

from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model
from django.test import Client

from fleet import services as fleet
from fleet.models import Lane

pytestmark = pytest.mark.django_db


def test_a_lanes_slug_and_workspace_are_read_only_in_the_admin_once_it_exists(workspace) -> None:
    lane, _ = fleet.lane_create(workspace=workspace, slug="docs")
    staff = get_user_model().objects.create_superuser("root", "root@example.com", "pw-123456789")
    client = Client()
    client.force_login(staff)
    url = f"/admin/fleet/lane/{lane.pk}/change/"
    page = client.get(url)
    assert page.status_code == 200
    assert b'name="slug"' not in page.content and b'name="name"' in page.content
    saved = client.post(url, {"name": "Documentation", "slug": "renamed"})
    assert saved.status_code == 302, saved.context["adminform"].form.errors
    lane.refresh_from_db()
    assert (lane.slug, lane.name) == ("docs", "Documentation")
    # A new lane is given its slug as it is made; the database stamps its creation.
    assert b'name="slug"' in client.get("/admin/fleet/lane/add/").content
    added = client.post(
        "/admin/fleet/lane/add/", {"workspace": workspace.pk, "slug": "ops", "name": "Ops"}
    )
    assert added.status_code == 302, added.context["adminform"].form.errors
    assert Lane.objects.get(slug="ops").created_at is not None
