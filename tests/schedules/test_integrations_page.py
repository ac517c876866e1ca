"""The lane page's GitHub integrations: an admin creates one for a repository (its secret shown
once, on a page that is never cached, as a new key is) and deletes one; a supervisor and a
viewer see them but cannot act (the secret attests CI's grade); an outsider finds nothing; HTML
is escaped; the page's queries do not grow with them."""

from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext

from hands import services as hand_services
from hands.models import Role
from schedules import github
from schedules.models import GitHubIntegration

pytestmark = pytest.mark.django_db


def test_an_admin_creates_an_integration_and_sees_its_secret_once(
    workspace_admin_client, lane
) -> None:
    response = workspace_admin_client.post(
        "/lanes/rewalk/integrations/new/", {"repository": "acme/app", "label": "agent"}
    )
    assert response.status_code == 200
    integration = GitHubIntegration.objects.get()
    assert (
        integration.lane_id,
        integration.repository,
        integration.label,
        integration.created_by,
        integration.created_by_hand,
    ) == (lane.pk, "acme/app", "agent", "ada", None)
    html = response.content.decode()
    assert f'<code id="integration-secret">{integration.secret}</code>' in html
    assert integration.secret.startswith("ghsec_")
    assert f"http://testserver/api/v1/integrations/github/{integration.pk}" in html
    assert "only those labelled <code>agent</code>" in html
    assert "no-store" in response["Cache-Control"]
    assert "<dt>Repository</dt><dd><code>acme/app</code>" in html

    page = workspace_admin_client.get("/lanes/rewalk/").content.decode()
    assert integration.secret not in page
    assert f"<code>/api/v1/integrations/github/{integration.pk}</code>" in page
    assert "labelled <code>agent</code>" in page
    assert "<td><code>acme/app</code></td>" in page


def test_an_integration_without_a_label_takes_every_issue(workspace_admin_client, lane) -> None:
    response = workspace_admin_client.post(
        "/lanes/rewalk/integrations/new/", {"repository": "acme/app", "label": ""}
    )
    assert response.status_code == 200
    assert GitHubIntegration.objects.get().label == ""
    assert "<dd>every issue</dd>" in response.content.decode()


def test_a_label_over_the_limit_is_refused_and_nothing_is_made(
    workspace_admin_client, lane
) -> None:
    response = workspace_admin_client.post(
        "/lanes/rewalk/integrations/new/",
        {"repository": "acme/app", "label": "x" * 101},
        follow=True,
    )
    assert response.status_code == 200
    assert "Refused (validation_error): label" in response.content.decode()
    assert not GitHubIntegration.objects.exists()


@pytest.mark.parametrize("repository", ["", "acme", "acme/app/x", "-acme/app", "acme/..", "a b/c"])
def test_an_integration_needs_a_repository(workspace_admin_client, lane, repository: str) -> None:
    response = workspace_admin_client.post(
        "/lanes/rewalk/integrations/new/", {"repository": repository}, follow=True
    )
    assert response.status_code == 200
    assert "Refused (validation_error): repository" in response.content.decode()
    assert not GitHubIntegration.objects.exists()


def test_a_supervisor_cannot_create_or_delete_an_integration(supervisor_client, lane) -> None:
    pk = github.integration_create(lane=lane, repository="acme/app", actor="ada").integration.pk
    html = supervisor_client.get("/lanes/rewalk/").content.decode()
    assert f"<code>/api/v1/integrations/github/{pk}</code>" in html
    assert 'id="integration-form"' not in html
    assert f"Delete GitHub integration {pk}" not in html
    created = supervisor_client.post("/lanes/rewalk/integrations/new/", {"repository": "acme/app"})
    assert created.status_code == 403
    assert supervisor_client.post(f"/lanes/rewalk/integrations/{pk}/delete/").status_code == 403
    assert list(GitHubIntegration.objects.values_list("pk", flat=True)) == [pk]


def test_an_admin_deletes_an_integration(workspace_admin_client, lane) -> None:
    issued = github.integration_create(lane=lane, repository="acme/app", label="", actor="sam")
    pk = issued.integration.pk
    response = workspace_admin_client.post(f"/lanes/rewalk/integrations/{pk}/delete/", follow=True)
    assert response.status_code == 200
    assert f"GitHub integration {pk} is deleted" in response.content.decode()
    assert not GitHubIntegration.objects.exists()
    again = workspace_admin_client.post(f"/lanes/rewalk/integrations/{pk}/delete/", follow=True)
    assert "Refused (not_found)" in again.content.decode()


def test_a_viewer_cannot_act_and_an_outsider_finds_nothing(
    viewer_client, outsider_client, workspace_admin_client, lane
) -> None:
    pk = github.integration_create(
        lane=lane, repository="acme/app", label="", actor="sam"
    ).integration.pk
    html = viewer_client.get("/lanes/rewalk/").content.decode()
    assert f"<code>/api/v1/integrations/github/{pk}</code>" in html
    assert 'id="integration-form"' not in html
    assert f"Delete GitHub integration {pk}" not in html
    assert viewer_client.post("/lanes/rewalk/integrations/new/", {}).status_code == 403
    assert viewer_client.post(f"/lanes/rewalk/integrations/{pk}/delete/").status_code == 403
    assert outsider_client.post("/lanes/rewalk/integrations/new/", {}).status_code == 404
    assert outsider_client.post(f"/lanes/rewalk/integrations/{pk}/delete/").status_code == 404
    assert workspace_admin_client.get("/lanes/rewalk/integrations/new/").status_code == 405
    assert list(GitHubIntegration.objects.values_list("pk", flat=True)) == [pk]


def test_html_in_a_label_is_escaped(workspace_admin_client, lane) -> None:
    label = "<script>alert(1)</script>"
    created = workspace_admin_client.post(
        "/lanes/rewalk/integrations/new/", {"repository": "acme/app", "label": label}
    )
    page = workspace_admin_client.get("/lanes/rewalk/")
    for html in (created.content.decode(), page.content.decode()):
        assert label not in html
        assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html


def test_the_lane_pages_title_is_the_lanes_name_alone(viewer_client, lane) -> None:
    html = viewer_client.get("/lanes/rewalk/").content.decode()
    assert "<title>Lane Rewalk · Ground Control</title>" in html


def test_the_lane_page_costs_the_same_queries_with_one_integration_or_many(
    viewer_client, lane
) -> None:
    github.integration_create(lane=lane, repository="acme/app", label="a", actor="sam")

    def count() -> int:
        with CaptureQueriesContext(connection) as queries:
            assert viewer_client.get("/lanes/rewalk/").status_code == 200
        return len(queries)

    one = count()
    for i in range(10):
        github.integration_create(lane=lane, repository="acme/app", label=f"l{i}", actor="sam")
    assert count() == one


def test_the_forms_need_their_csrf_token(workspace, lane) -> None:
    user = get_user_model().objects.create_user(username="sue", password="x")
    hand_services.membership_set(workspace=workspace, user=user, role=Role.ADMIN)
    client = Client(enforce_csrf_checks=True)
    client.force_login(user)
    pk = github.integration_create(
        lane=lane, repository="acme/app", label="", actor="sam"
    ).integration.pk
    made = client.post("/lanes/rewalk/integrations/new/", {"repository": "a/b", "label": "x"})
    assert made.status_code == 403
    assert client.post(f"/lanes/rewalk/integrations/{pk}/delete/").status_code == 403
    assert list(GitHubIntegration.objects.values_list("pk", flat=True)) == [pk]
