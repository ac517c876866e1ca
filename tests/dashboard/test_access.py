"""Login, workspaces and roles: a viewer reads, a supervisor acts, an admin manages keys and
members; another workspace's objects are not found; every form needs its CSRF token."""

from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model
from django.test import Client

from fleet.attempts import services as attempt_services
from hands import services as hand_services
from hands.models import Role
from leases.models import Event

pytestmark = pytest.mark.django_db


@pytest.fixture
def attempt(owner, make_run):  # noqa: ANN001, ANN201
    return attempt_services.attempt_claim(hand=owner, run_id=make_run().pk, process_id="host:1")


def test_it_sends_anonymous_visitors_to_the_login_page(client: Client, workspace):
    response = client.get("/runs/1/")
    assert response.status_code == 302
    assert response["Location"].startswith("/login/?next=/runs/1/")


def test_it_logs_in_with_a_password_and_shows_the_board(client: Client, workspace):
    user = get_user_model().objects.create_user(username="ada", password="correct horse")
    hand_services.membership_set(workspace=workspace, user=user, role=Role.VIEWER)
    assert client.get("/login/").status_code == 200
    wrong = client.post("/login/", {"username": "ada", "password": "nope"})
    assert wrong.status_code == 200 and "did not match" in wrong.content.decode()
    response = client.post("/login/", {"username": "ada", "password": "correct horse"})
    assert response.status_code == 302 and response["Location"] == "/"
    assert "Fleet board" in client.get("/").content.decode()


def test_it_tells_a_user_without_a_workspace_so(client: Client, db):
    user = get_user_model().objects.create_user(username="nobody", password="x")
    client.force_login(user)
    response = client.get("/")
    assert response.status_code == 403
    assert "not a member of any workspace" in response.content.decode()


def test_a_viewer_reads_every_page_but_cannot_act(viewer_client, attempt, workspace):
    run_id, hand_id = attempt.attempt.run_id, attempt.attempt.hand_id
    for url in [
        "/",
        "/lanes/",
        "/lanes/rewalk/",
        f"/runs/{run_id}/",
        "/hands/",
        f"/hands/{hand_id}/",
        "/leases/",
        "/pools/",
        "/refusals/",
        "/events/",
    ]:
        assert viewer_client.get(url).status_code == 200, url
    assert "Pause" not in viewer_client.get(f"/runs/{run_id}/").content.decode()
    forbidden = [
        ("post", f"/attempts/{attempt.attempt.pk}/directive/", {"directive": "pause"}),
        ("post", "/leases/break/", {"resource": attempt.lease.resource, "reason": "x"}),
        ("post", f"/runs/{run_id}/close/", {}),
        ("get", f"/hands/{hand_id}/keys/new/", {}),
        ("get", "/members/", {}),
    ]
    for method, url, data in forbidden:
        assert getattr(viewer_client, method)(url, data).status_code == 403, url
    assert not Event.objects.exclude(kind="claimed").exists()


def test_a_supervisor_acts_on_attempts_but_does_not_manage_keys_or_members(
    supervisor_client, attempt, owner
):
    response = supervisor_client.post(
        f"/attempts/{attempt.attempt.pk}/directive/", {"directive": "pause"}
    )
    assert response.status_code == 302
    assert Event.objects.filter(kind="directive_set", actor="sam").count() == 1
    key = hand_services.key_issue(hand=owner, scopes=["work"], actor="test").key
    assert supervisor_client.get(f"/hands/{owner.pk}/keys/new/").status_code == 403
    assert supervisor_client.post(f"/keys/{key.prefix}/revoke/", {}).status_code == 403
    assert (
        supervisor_client.post("/members/", {"username": "sam", "role": "admin"}).status_code == 403
    )
    assert supervisor_client.post("/hands/", {"new-name": "x"}).status_code == 403


def test_another_workspaces_objects_are_not_found(outsider_client, attempt, owner):
    key = hand_services.key_issue(hand=owner, scopes=["work"], actor="test").key
    for method, url in [
        ("get", f"/runs/{attempt.attempt.run_id}/"),
        ("get", f"/hands/{owner.pk}/"),
        ("get", f"/work-packages/{attempt.attempt.run.work_package_id}/"),
        ("get", "/lanes/rewalk/"),
        ("post", f"/attempts/{attempt.attempt.pk}/directive/"),
        ("post", f"/keys/{key.prefix}/revoke/"),
    ]:
        assert getattr(outsider_client, method)(url, {"directive": "stop"}).status_code == 404, url
    assert "hand-a" not in outsider_client.get("/").content.decode()


def test_a_member_of_two_workspaces_switches_between_them(
    workspace, outsider_workspace, attempt, client: Client
):
    user = get_user_model().objects.create_user(username="both", password="x")
    hand_services.membership_set(workspace=workspace, user=user, role=Role.VIEWER)
    hand_services.membership_set(workspace=outsider_workspace, user=user, role=Role.ADMIN)
    client.force_login(user)
    first = client.get("/").content.decode()
    assert 'id="workspace-switch"' in first and "hand-a" in first  # acme comes first by name
    client.post("/workspace/", {"workspace": outsider_workspace.pk})
    assert "hand-a" not in client.get("/").content.decode()
    assert client.get("/members/").status_code == 200  # admin there
    stranger = hand_services.workspace_get_or_create(name="stranger")
    client.post("/workspace/", {"workspace": stranger.pk})
    assert client.get("/members/").status_code == 200  # still in elsewhere, not stranger


def test_every_form_needs_its_csrf_token(workspace, attempt):
    user = get_user_model().objects.create_user(username="ada", password="x")
    hand_services.membership_set(workspace=workspace, user=user, role=Role.ADMIN)
    client = Client(enforce_csrf_checks=True)
    client.force_login(user)
    response = client.post(f"/attempts/{attempt.attempt.pk}/directive/", {"directive": "stop"})
    assert response.status_code == 403
    assert not Event.objects.filter(kind="directive_set").exists()
    page = client.get(f"/runs/{attempt.attempt.run_id}/").content.decode()
    assert page.count('name="csrfmiddlewaretoken"') >= 2  # logout and the row's directive form


def test_a_poll_after_the_session_ended_sends_the_tab_to_the_login_page(client: Client, db):
    response = client.get("/", HTTP_HX_REQUEST="true")
    assert response.status_code == 204
    assert response["HX-Redirect"] == "/login/"
