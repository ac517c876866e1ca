"""The Django admin: it keeps what the hot path relies on (a lane's slug never changes) and
never asks for what the database fills in."""

from __future__ import annotations

import pytest
from django.contrib import admin
from django.contrib.auth import get_user_model
from django.test import Client, RequestFactory

from hands import services as hand_services
from hands.models import Lane

pytestmark = pytest.mark.django_db


def test_a_lanes_slug_and_workspace_are_read_only_in_the_admin_once_it_exists(workspace) -> None:
    lane, _ = hand_services.lane_create(workspace=workspace, slug="docs")
    staff = get_user_model().objects.create_superuser("root", "root@example.com", "pw-123456789")
    client = Client()
    client.force_login(staff)
    url = f"/admin/hands/lane/{lane.pk}/change/"
    page = client.get(url)
    assert page.status_code == 200
    assert b'name="slug"' not in page.content and b'name="name"' in page.content
    saved = client.post(url, {"name": "Documentation", "slug": "renamed"})
    assert saved.status_code == 302, saved.context["adminform"].form.errors
    lane.refresh_from_db()
    assert (lane.slug, lane.name) == ("docs", "Documentation")
    # A new lane is given its slug as it is made; the database stamps its creation.
    assert b'name="slug"' in client.get("/admin/hands/lane/add/").content
    added = client.post(
        "/admin/hands/lane/add/", {"workspace": workspace.pk, "slug": "ops", "name": "Ops"}
    )
    assert added.status_code == 302, added.context["adminform"].form.errors
    assert Lane.objects.get(slug="ops").created_at is not None


def test_no_admin_form_asks_for_a_field_the_database_fills() -> None:
    """A `db_default` field (created_at, at) in a form is required there, so the object could
    not be saved without typing a time in."""
    request = RequestFactory().get("/admin/")
    request.user = get_user_model()(is_superuser=True, is_staff=True, is_active=True)
    checked = 0
    for model, model_admin in admin.site._registry.items():
        stamped = {f.name for f in model._meta.fields if f.has_db_default()}
        if not stamped:
            continue
        form_fields = set(model_admin.get_form(request, None).base_fields)
        assert not stamped & form_fields, (model.__name__, stamped & form_fields)
        checked += 1
    assert checked >= 10
