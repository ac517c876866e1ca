"""Open handoff requests on the leases page, and a supervisor's grant (issue 22, part 2)."""

from __future__ import annotations

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from hands import services as hand_services
from leases import engine
from leases.handoffs import handoff_ask_resource
from leases.models import Event, HandoffRequest
from leases.services import lease_acquire

pytestmark = pytest.mark.django_db


def asked(workspace, resource: str, asker: str, reason: str = "the login bug") -> HandoffRequest:  # noqa: ANN001
    hand_services.hand_create(workspace=workspace, name=asker)
    view, _ = handoff_ask_resource(
        workspace_id=workspace.pk, holder=asker, resource=resource, reason=reason
    )
    return view.request


def held(workspace, resource: str, holder: str = "hand-a") -> None:  # noqa: ANN001
    lease_acquire(
        workspace_id=workspace.pk, resource=resource, holder=holder, process_id="p", ttl_s=60
    )


def test_the_leases_page_shows_open_requests_escaped(supervisor_client, owner, workspace) -> None:
    held(workspace, "src/auth/")
    request = asked(workspace, "src/auth/login.py", "hand-b", "<script>alert(1)</script>")
    page = supervisor_client.get("/leases/").content.decode()
    assert f'data-handoff="{request.pk}"' in page
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page and "<script>alert(1)" not in page
    assert f"/handoffs/{request.pk}/grant/" in page
    partial = supervisor_client.get("/leases/", headers={"HX-Request": "true"}).content.decode()
    assert f'data-handoff="{request.pk}"' in partial and "<html" not in partial


def test_a_viewer_sees_requests_but_cannot_grant(viewer_client, owner, workspace) -> None:
    held(workspace, "src/auth/")
    request = asked(workspace, "src/auth/", "hand-b")
    page = viewer_client.get("/leases/").content.decode()
    assert f'data-handoff="{request.pk}"' in page and "/grant/" not in page
    refused = viewer_client.post(f"/handoffs/{request.pk}/grant/", {"reason": "x"})
    assert refused.status_code == 403
    assert HandoffRequest.objects.get(pk=request.pk).status == "open"


def test_a_supervisor_grants_a_request_by_breaking_the_lease(
    supervisor_client, owner, workspace
) -> None:
    held(workspace, "src/auth/")
    request = asked(workspace, "src/auth/", "hand-b")
    confirm = supervisor_client.get(f"/handoffs/{request.pk}/grant/").content.decode()
    assert "the login bug" in confirm and "Grant: break the lease" in confirm
    assert (
        supervisor_client.post(f"/handoffs/{request.pk}/grant/", {"reason": ""}).status_code == 200
    )
    assert HandoffRequest.objects.get(pk=request.pk).status == "open"
    done = supervisor_client.post(f"/handoffs/{request.pk}/grant/", {"reason": "urgent"})
    assert done.status_code == 302
    request.refresh_from_db()
    assert (request.status, request.answer, request.answered_by) == ("granted", "urgent", "sam")
    assert not engine.read(workspace_id=workspace.pk, resource="src/auth/").held
    assert Event.objects.filter(kind="handoff_granted").count() == 1
    assert Event.objects.filter(kind="lease_broken").count() == 1
    page = supervisor_client.get("/leases/").content.decode()
    assert f'data-handoff="{request.pk}"' not in page
    again = supervisor_client.post(
        f"/handoffs/{request.pk}/grant/", {"reason": "again"}, follow=True
    )
    assert "Refused (handoff_answered)" in again.content.decode()


def test_another_workspaces_request_is_not_found(outsider_client, owner, workspace) -> None:
    held(workspace, "src/auth/")
    request = asked(workspace, "src/auth/", "hand-b")
    assert outsider_client.get(f"/handoffs/{request.pk}/grant/").status_code in (403, 404)
    assert outsider_client.post(f"/handoffs/{request.pk}/grant/", {"reason": "x"}).status_code in (
        403,
        404,
    )
    assert HandoffRequest.objects.get(pk=request.pk).status == "open"


def test_the_leases_page_costs_the_same_queries_with_1_and_20_requests(
    supervisor_client, owner, workspace
) -> None:
    def count() -> int:
        with CaptureQueriesContext(connection) as queries:
            assert supervisor_client.get("/leases/").status_code == 200
        return len(queries)

    held(workspace, "r/0/")
    asked(workspace, "r/0/", "asker-0")
    few = count()
    for index in range(1, 20):
        held(workspace, f"r/{index}/")
        asked(workspace, f"r/{index}/", f"asker-{index}")
    assert count() == few
