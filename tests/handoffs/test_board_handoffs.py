"""Open handoff requests on the fleet board, polled on their own, each with a supervisor's
grant (issue 22, part 2: "a supervisor sees open requests on the board")."""

from __future__ import annotations

import re

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from hands import services as hand_services
from leases.handoffs import handoff_ask_resource
from leases.models import HandoffRequest
from leases.services import lease_acquire, lease_release

pytestmark = pytest.mark.django_db


def ask(workspace, resource: str, asker: str, reason: str = "the login bug") -> HandoffRequest:  # noqa: ANN001
    hand_services.hand_create(workspace=workspace, name=asker)
    view, _ = handoff_ask_resource(
        workspace_id=workspace.pk, holder=asker, resource=resource, reason=reason
    )
    return view.request


def hold(workspace, resource: str, holder: str = "hand-a") -> None:  # noqa: ANN001
    lease_acquire(
        workspace_id=workspace.pk, resource=resource, holder=holder, process_id="p", ttl_s=60
    )


def test_the_board_loads_its_requests_after_itself(supervisor_client, workspace) -> None:
    hold(workspace, "src/auth/")
    ask(workspace, "src/auth/", "hand-b")
    page = supervisor_client.get("/").content.decode()
    assert 'id="board-handoffs"' in page and 'hx-get="/board/handoffs/"' in page
    assert 'hx-trigger="load"' in page and "data-handoff" not in page
    assert 'href="/leases/"' in page  # without JavaScript: where they are


def test_it_shows_open_requests_escaped(supervisor_client, workspace) -> None:
    hold(workspace, "src/auth/")
    request = ask(workspace, "src/auth/login.py", "hand-b", "<b>now</b>")
    page = supervisor_client.get("/board/handoffs/").content.decode()
    assert f'data-handoff="{request.pk}"' in page
    assert "&lt;b&gt;now&lt;/b&gt;" in page and "<b>now</b>" not in page
    assert f"/handoffs/{request.pk}/grant/" in page
    assert 'hx-trigger="every' in page


def test_it_polls_the_requests_as_a_fragment(supervisor_client, workspace) -> None:
    hold(workspace, "src/auth/")
    empty = supervisor_client.get("/board/handoffs/", headers={"HX-Request": "true"})
    assert empty.status_code == 200 and "data-handoff" not in empty.content.decode()
    request = ask(workspace, "src/auth/", "hand-b")
    fragment = supervisor_client.get("/board/handoffs/", headers={"HX-Request": "true"})
    body = fragment.content.decode()
    assert f'data-handoff="{request.pk}"' in body and "<html" not in body
    assert body.lstrip().startswith('<section id="board-handoffs"')
    assert "no-store" in fragment["Cache-Control"]


def test_a_poll_that_shows_the_same_requests_gets_nothing_to_swap(
    supervisor_client, workspace
) -> None:
    """A swap of the same rows between a click's press and release would lose the click on
    Grant…: the panel is redrawn only when a request opens or ends."""

    hold(workspace, "src/auth/")
    first = ask(workspace, "src/auth/", "hand-b")
    shown = supervisor_client.get("/board/handoffs/", headers={"HX-Request": "true"})
    fingerprint = re.search(r'data-fp="([^"]*)"', shown.content.decode()).group(1)
    again = supervisor_client.get(
        "/board/handoffs/", headers={"HX-Request": "true", "X-GC-Fingerprint": fingerprint}
    )
    assert again.status_code == 204 and again.content == b""
    hold(workspace, "docs/", holder="hand-c")
    second = ask(workspace, "docs/", "hand-d")
    changed = supervisor_client.get(
        "/board/handoffs/", headers={"HX-Request": "true", "X-GC-Fingerprint": fingerprint}
    )
    body = changed.content.decode()
    assert changed.status_code == 200
    assert f'data-handoff="{first.pk}"' in body and f'data-handoff="{second.pk}"' in body
    assert f'data-fp="{fingerprint}"' not in body


def test_a_request_whose_tenure_ended_leaves_the_board(supervisor_client, workspace) -> None:
    hold(workspace, "src/auth/")
    request = ask(workspace, "src/auth/", "hand-b")
    lease_release(workspace_id=workspace.pk, resource="src/auth/", holder="hand-a", fence=1)
    page = supervisor_client.get("/board/handoffs/").content.decode()
    assert f'data-handoff="{request.pk}"' not in page


def test_a_viewer_sees_requests_without_the_grant(viewer_client, workspace) -> None:
    hold(workspace, "src/auth/")
    request = ask(workspace, "src/auth/", "hand-b")
    page = viewer_client.get("/board/handoffs/").content.decode()
    assert f'data-handoff="{request.pk}"' in page and "/grant/" not in page


def test_another_workspaces_requests_stay_off_the_board(outsider_client, workspace) -> None:
    hold(workspace, "src/auth/")
    request = ask(workspace, "src/auth/", "hand-b")
    for path in ("/", "/board/handoffs/"):
        response = outsider_client.get(path)
        assert f'data-handoff="{request.pk}"' not in response.content.decode()


def test_the_board_requests_cost_the_same_queries_with_1_and_20(
    supervisor_client, workspace
) -> None:
    def queries() -> int:
        with CaptureQueriesContext(connection) as captured:
            assert supervisor_client.get("/board/handoffs/").status_code == 200
        return len(captured)

    hold(workspace, "src/auth/")
    ask(workspace, "src/auth/", "hand-0")
    one = queries()
    for n in range(1, 20):
        hold(workspace, f"src/mod{n}/")
        ask(workspace, f"src/mod{n}/", f"hand-{n}")
    assert queries() == one


def test_a_grant_from_the_board_comes_back_to_it(supervisor_client, workspace) -> None:
    hold(workspace, "src/auth/")
    request = ask(workspace, "src/auth/", "hand-b")
    page = supervisor_client.get("/board/handoffs/").content.decode()
    assert f"/handoffs/{request.pk}/grant/?next=/" in page
    granted = supervisor_client.post(
        f"/handoffs/{request.pk}/grant/", {"reason": "ship it", "next": "/"}
    )
    assert (granted.status_code, granted["Location"]) == (302, "/")
    request.refresh_from_db()
    assert request.status == "granted"
