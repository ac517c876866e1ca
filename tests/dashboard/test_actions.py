"""Actions through the services, each leaving its event; destructive ones ask first."""

from __future__ import annotations

import pytest

from fleet.attempts import services as attempt_services
from fleet.models import Attempt, Run
from hands import services as hand_services
from hands.errors import KeyRevoked
from hands.models import HandKey
from leases import engine
from leases.models import Event

pytestmark = pytest.mark.django_db


@pytest.fixture
def attempt(owner, make_run):  # noqa: ANN001, ANN201
    return attempt_services.attempt_claim(hand=owner, run_id=make_run().pk, process_id="host:1")


def test_it_issues_a_key_shown_once_with_a_copy_button(workspace_admin_client, owner, lane):
    form = workspace_admin_client.get(f"/hands/{owner.pk}/keys/new/")
    assert form.status_code == 200
    response = workspace_admin_client.post(
        f"/hands/{owner.pk}/keys/new/",
        {"scopes": ["work", "leases"], "expires_in_s": "86400", "lane": lane.pk},
    )
    assert response.status_code == 200
    key = HandKey.objects.get(hand=owner)
    html = response.content.decode()
    plaintext = html.split('id="key-plaintext">')[1].split("<")[0]
    assert plaintext.startswith(f"gc_{key.prefix}_")
    assert hand_services.key_authenticate(plaintext).pk == key.pk
    assert 'data-copy="#key-plaintext"' in html
    assert "no-store" in response["Cache-Control"]
    assert (key.scopes, key.lane_id, key.expires_at is not None) == (
        ["work", "leases"],
        lane.pk,
        True,
    )
    assert Event.objects.get(kind="key_issued").actor == "ada"
    # Shown once: the hand's page lists it by prefix only.
    hand_page = workspace_admin_client.get(f"/hands/{owner.pk}/").content.decode()
    assert key.prefix in hand_page and plaintext not in hand_page


def test_it_refuses_a_key_without_scopes(workspace_admin_client, owner):
    response = workspace_admin_client.post(f"/hands/{owner.pk}/keys/new/", {"scopes": []})
    assert response.status_code == 200 and not HandKey.objects.exists()


def test_it_revokes_a_key_after_a_confirmation_and_the_key_is_refused(
    workspace_admin_client, owner
):
    issued = hand_services.key_issue(hand=owner, scopes=["work"], actor="test")
    confirm = workspace_admin_client.get(f"/keys/{issued.key.prefix}/revoke/")
    assert confirm.status_code == 200 and "Revoke the key" in confirm.content.decode()
    assert HandKey.objects.get().revoked_at is None  # asking changes nothing
    response = workspace_admin_client.post(
        f"/keys/{issued.key.prefix}/revoke/", {"reason": "leaked"}
    )
    assert response.status_code == 302 and response["Location"] == f"/hands/{owner.pk}/"
    key = HandKey.objects.get()
    assert (key.revoked_by, key.revoke_reason) == ("ada", "leaked")
    assert Event.objects.get(kind="key_revoked").data["prefix"] == key.prefix
    with pytest.raises(KeyRevoked):
        hand_services.key_authenticate(issued.plaintext)


def test_it_pauses_resumes_and_stops_an_attempt_with_events(supervisor_client, attempt):
    url = f"/attempts/{attempt.attempt.pk}/directive/"
    assert supervisor_client.post(url, {"directive": "pause"}).status_code == 302
    assert Attempt.objects.get().directive == "pause"
    assert supervisor_client.post(url, {"directive": "continue"}).status_code == 302
    confirm = supervisor_client.get(url)
    assert "Stop the attempt" in confirm.content.decode()
    assert Attempt.objects.get().directive == "continue"
    supervisor_client.post(url, {"directive": "stop", "next": "/"})
    assert Attempt.objects.get().directive == "stop"
    directives = list(
        Event.objects.filter(kind="directive_set")
        .order_by("id")
        .values_list("data__directive", flat=True)
    )
    assert directives == ["pause", "continue", "stop"]


def test_it_redirects_only_to_local_next_urls(supervisor_client, attempt):
    url = f"/attempts/{attempt.attempt.pk}/directive/"
    response = supervisor_client.post(url, {"directive": "pause", "next": "https://evil.example/"})
    assert response["Location"] == f"/runs/{attempt.attempt.run_id}/"


def test_it_breaks_a_slot_lease_with_a_reason_and_the_attempt_is_lost(
    supervisor_client, attempt, workspace
):
    resource = attempt.lease.resource
    confirm = supervisor_client.get(f"/leases/break/?resource={resource}")
    assert confirm.status_code == 200 and "hand-a" in confirm.content.decode()
    missing = supervisor_client.post("/leases/break/", {"resource": resource, "reason": ""})
    assert (
        missing.status_code == 200
        and engine.read(workspace_id=workspace.pk, resource=resource).held
    )
    response = supervisor_client.post("/leases/break/", {"resource": resource, "reason": "stuck"})
    assert response.status_code == 302
    event = Event.objects.get(kind="lease_broken")
    assert (event.actor, event.data["reason"], event.fence) == ("sam", "stuck", 2)
    assert Attempt.objects.get().end == "lost"


def test_it_breaks_a_resource_lease(supervisor_client, owner, workspace):
    from leases.services import lease_acquire

    lease_acquire(
        workspace_id=workspace.pk, resource="src/auth/", holder=owner.name, process_id="p", ttl_s=60
    )
    page = supervisor_client.get("/leases/").content.decode()
    assert 'data-resource="src/auth/"' in page and "hand-a" in page
    supervisor_client.post("/leases/break/", {"resource": "src/auth/", "reason": "abandoned"})
    assert not engine.read(workspace_id=workspace.pk, resource="src/auth/").held
    assert 'data-resource="src/auth/"' not in supervisor_client.get("/leases/").content.decode()


def test_a_refused_action_says_why_and_is_recorded(supervisor_client, workspace):
    response = supervisor_client.post(
        "/leases/break/", {"resource": "nobody-holds-this", "reason": "x"}, follow=True
    )
    assert "Refused (not_found)" in response.content.decode()


def test_it_closes_a_run_after_a_confirmation(supervisor_client, make_run):
    run = make_run()
    assert "Close the run" in supervisor_client.get(f"/runs/{run.pk}/close/").content.decode()
    assert Run.objects.get(pk=run.pk).state == "open"
    supervisor_client.post(f"/runs/{run.pk}/close/")
    assert Run.objects.get(pk=run.pk).state == "closed"
    assert Event.objects.get(kind="run_closed").actor == "sam"


def test_an_admin_creates_hands_and_sets_members(workspace_admin_client, workspace):
    from django.contrib.auth import get_user_model

    response = workspace_admin_client.post("/hands/", {"new-name": "rewalk-9"})
    assert response.status_code == 302
    assert workspace.hands.filter(name="rewalk-9").exists()
    get_user_model().objects.create_user(username="newbie", password="x")
    workspace_admin_client.post("/members/", {"username": "newbie", "role": "supervisor"})
    assert workspace.memberships.get(user__username="newbie").role == "supervisor"
    unknown = workspace_admin_client.post("/members/", {"username": "ghost", "role": "viewer"})
    assert "No user with that name" in unknown.content.decode()


def _finish(owner, run):  # noqa: ANN001, ANN202
    from evidence.services import attempt_finish

    view = attempt_services.attempt_claim(hand=owner, run_id=run.pk, process_id="host:1")
    return attempt_finish(
        hand=owner,
        attempt_id=view.attempt.pk,
        fence=view.attempt.fence,
        process_id="host:1",
        evidence=[{"kind": "pull_request", "url": "https://example.com/pr/7"}],
    )


def test_a_done_run_shows_as_done_on_its_page_and_the_board(
    supervisor_client, viewer_client, owner, make_run
):
    run = make_run(slots=1, evidence_required=["pull_request"])
    _finish(owner, run)
    page = supervisor_client.get(f"/runs/{run.pk}/").content.decode()
    assert 'class="badge badge-plan-done">done</span>' in page
    assert 'class="slot slot-done"' in page and "(0 open, 1 done)" in page
    assert f'href="/runs/{run.pk}/slots/0/reopen/"' in page
    assert f'href="/runs/{run.pk}/slots/new/"' in page
    # A viewer sees the state but no action.
    seen = viewer_client.get(f"/runs/{run.pk}/").content.decode()
    assert 'class="slot slot-done"' in seen and "/reopen/" not in seen and "/slots/new/" not in seen
    assert viewer_client.post(f"/runs/{run.pk}/slots/0/reopen/", {"reason": "x"}).status_code == 403
    board = supervisor_client.get("/").content.decode()
    assert '<span class="badge badge-plan-done">run done</span>' in board


def test_it_reopens_a_done_slot_and_adds_slots_with_a_reason(supervisor_client, owner, make_run):
    run = make_run(slots=1, evidence_required=["pull_request"])
    _finish(owner, run)
    asked = supervisor_client.get(f"/runs/{run.pk}/slots/0/reopen/").content.decode()
    assert "Reopen the slot" in asked
    # A reason is required: nothing changes without one.
    refused = supervisor_client.post(f"/runs/{run.pk}/slots/0/reopen/", {"reason": ""})
    assert refused.status_code == 200
    assert Run.objects.get(pk=run.pk).state == "done"
    supervisor_client.post(f"/runs/{run.pk}/slots/0/reopen/", {"reason": "regressed"})
    assert Run.objects.get(pk=run.pk).state == "open"
    event = Event.objects.get(kind="slot_reopened")
    assert (event.actor, event.data["reason"]) == ("sam", "regressed")
    # Reopening it again is refused with why, on the page.
    again = supervisor_client.post(
        f"/runs/{run.pk}/slots/0/reopen/", {"reason": "again"}, follow=True
    )
    assert "Refused (slot_not_done)" in again.content.decode()
    supervisor_client.post(f"/runs/{run.pk}/slots/new/", {"count": 2, "reason": "more"})
    assert Run.objects.get(pk=run.pk).slot_count == 3
    assert Event.objects.get(kind="slots_added").data["slots"] == [1, 2]
