"""The leases page draws the tree: nested nodes, what a held directory covers, shared holders,
countdowns to the next state, the waiters with their places, the handoff requests on the node,
and the slots apart; a supervisor breaks and grants from it, a viewer only looks; an HTMX poll
gets the tree alone."""

from __future__ import annotations

import re

import pytest

from hands import services as hand_services
from leases import queue
from leases.handoffs import handoff_ask_resource
from leases.services import lease_acquire

pytestmark = pytest.mark.django_db


def take(ws: int, resource: str, holder: str, mode: str = "exclusive") -> None:
    lease_acquire(
        workspace_id=ws, resource=resource, holder=holder, process_id="host:1", ttl_s=90, mode=mode
    )


def node_html(page: str, path: str) -> str:
    """The markup of one node's `<li>`, up to the next node."""
    start = page.index(f'data-node="{path}"')
    following = page.find("data-node=", start + 1)
    return page[start : following if following != -1 else len(page)]


@pytest.fixture
def busy(workspace, frozen_clock):  # noqa: ANN001, ANN201
    take(workspace.pk, "src/", "hand-a")
    take(workspace.pk, "docs/", "hand-b", mode="shared")
    take(workspace.pk, "docs/", "hand-c", mode="shared")
    take(workspace.pk, "src2/api/routes.py", "hand-a")
    queue.join(
        workspace_id=workspace.pk,
        resource="src/",
        holder="hand-w",
        process_id="w",
        mode="exclusive",
    )
    queue.join(
        workspace_id=workspace.pk, resource="src/auth/login.py", holder="hand-v", process_id="v",
        mode="exclusive",
    )  # fmt: skip
    hand_services.hand_create(workspace=workspace, name="hand-q")
    view, _ = handoff_ask_resource(
        workspace_id=workspace.pk, holder="hand-q", resource="src/", reason="the <b>release</b>"
    )
    return view.request


def test_the_page_draws_the_tree(supervisor_client, busy) -> None:
    page = supervisor_client.get("/leases/").content.decode()
    src = node_html(page, "src")
    assert 'data-resource="src/"' in src and "covers everything below <code>src/</code>" in src
    assert "hand-a" in src and "fence 1" in src
    # A resource lease has no grace: its countdown is to lost, its window's end, ticking.
    countdown = (
        'lost <time datetime="2030-01-01T12:01:30+00:00" title="2030-01-01 12:01:30 UTC" '
        'data-when="countdown" data-now="2030-01-01T12:00:00+00:00">in 1 min 30 s</time>'
    )
    assert countdown in src
    # The handoff request on the node, escaped, with a supervisor's grant.
    assert "hand-q</strong> asks for it" in src and "the &lt;b&gt;release&lt;/b&gt;" in src
    assert f"/handoffs/{busy.pk}/grant/" in src
    assert 'aria-label="Break the lease on src/"' in src
    # The waiters on the held directory and below it, with the queue's places.
    assert '<span class="place" title="place 1 in the queue">#1</span> <strong>hand-w' in src
    login = node_html(page, "src/auth/login.py")
    assert "#2</span> <strong>hand-v" in login
    assert "covered by hand-a's lease on <code>src/</code>" in login
    assert 'class="node covered attention"' in node_html(page, "src/auth")
    # Shared holders on one node.
    docs = node_html(page, "docs")
    assert docs.count('class="badge badge-shared"') == 2 and "hand-b" in docs and "hand-c" in docs
    # A directory nobody holds, drawn to reach what is held below it.
    assert 'data-node="src2/api"' in page and 'data-resource="src2/api/routes.py"' in page
    assert "1 held below" in node_html(page, "src2")


def test_the_queue_lists_every_waiter_with_its_place(supervisor_client, busy) -> None:
    page = supervisor_client.get("/leases/").content.decode()
    table = page[page.index('id="queue"') :]
    rows = re.findall(
        r"<td><code>([^<]+)</code></td><td class=\"num\">(\d+)</td><td>([^<]+)<", table
    )
    assert rows == [("src/", "1", "hand-w"), ("src/auth/login.py", "2", "hand-v")]


def test_slots_are_drawn_apart_and_link_to_their_run(
    supervisor_client, owner, make_run, frozen_clock
) -> None:
    from fleet.attempts import services as attempt_services

    run = make_run(slots=1)
    attempt_services.attempt_claim(hand=owner, run_id=run.pk, process_id="host:1")
    page = supervisor_client.get("/leases/").content.decode()
    slots = page[page.index('id="slot-tree"') :]
    assert f'<a href="/runs/{run.pk}/">{run.pk}</a>' in slots
    assert f'data-resource="run/{run.pk}/slot/0"' in slots
    assert "No resource lease is held" in page


def test_a_viewer_sees_the_tree_without_actions(viewer_client, busy) -> None:
    page = viewer_client.get("/leases/").content.decode()
    assert 'data-resource="src/"' in page
    assert "Break the lease on" not in page and "/grant/" not in page


def test_a_poll_gets_the_tree_alone(supervisor_client, busy) -> None:
    partial = supervisor_client.get("/leases/", headers={"HX-Request": "true"}).content.decode()
    assert partial.lstrip().startswith('<div id="records"') and "<html" not in partial
    assert 'data-node="src/auth/login.py"' in partial


def test_the_filters_narrow_the_tree(supervisor_client, busy) -> None:
    page = supervisor_client.get("/leases/?prefix=docs").content.decode()
    assert 'data-node="docs"' in page and 'data-node="src"' not in page
    assert 'hx-get="/leases/?prefix=docs"' in page
    by_holder = supervisor_client.get("/leases/?holder=hand-c").content.decode()
    assert 'data-holder="hand-c"' in by_holder and 'data-holder="hand-b"' not in by_holder


def test_a_large_directory_starts_folded(supervisor_client, workspace, frozen_clock) -> None:
    for index in range(30):
        take(workspace.pk, f"big/file{index:02d}.py", "hand-a")
    take(workspace.pk, "small/one.py", "hand-a")
    page = supervisor_client.get("/leases/").content.decode()
    assert re.search(r'<details data-fold="resource:big">', page)
    assert re.search(r'<details data-fold="resource:small" open>', page)
    assert "30 held below" in node_html(page, "big")


def test_another_workspace_sees_nothing(outsider_client, busy) -> None:
    page = outsider_client.get("/leases/").content.decode()
    assert "hand-a" not in page and 'data-node="src"' not in page
