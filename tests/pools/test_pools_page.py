"""The pools page: each pool and member with its state's colour, holder, fence and countdown;
names escaped; a constant number of queries; nobody else's pools."""

from __future__ import annotations

from datetime import datetime

import pytest
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext

from hands.models import Workspace
from leases import clock
from pools import services as pools

pytestmark = pytest.mark.django_db


def test_it_shows_each_member_with_its_state_holder_fence_and_countdown(
    workspace: Workspace, supervisor_client: Client, frozen_clock: datetime
) -> None:
    pools.pool_create(workspace=workspace, name="ports", members=["8001", "8002"])
    pools.pool_acquire(
        workspace_id=workspace.pk, name="ports", holder="hand-a", process_id="host:1", ttl_s=90
    )
    clock.advance(30)
    response = supervisor_client.get("/pools/")
    assert response.status_code == 200
    page = response.content.decode()
    assert '<section class="pool" data-pool="ports"' in page
    assert "1 of 2 free" in page
    held = page[page.index('data-member="8001"') : page.index('data-member="8002"')]
    assert 'badge badge-live">live' in held
    assert "<td>hand-a</td>" in held and "host:1" in held
    # The countdown to its window's end (the `when` tag), ticking in the browser.
    assert (
        '<time datetime="2030-01-01T12:01:30+00:00" title="2030-01-01 12:01:30 UTC" '
        'data-when="countdown" data-now="2030-01-01T12:00:30+00:00">in 1 min 00 s</time>'
    ) in held
    assert "Break…" in held
    free = page[page.index('data-member="8002"') :]
    assert 'badge badge-free">free' in free.split("</tr>")[0]
    assert 'href="/pools/" aria-current="page"' in page


def test_a_viewer_sees_no_break_and_names_are_escaped(
    workspace: Workspace, viewer_client: Client
) -> None:
    pools.pool_create(workspace=workspace, name="<b>x<b>", members=["<i>m"])
    pools.pool_acquire(
        workspace_id=workspace.pk, name="<b>x<b>", holder="<s>h", process_id="p", ttl_s=60
    )
    page = viewer_client.get("/pools/").content.decode()
    assert "<b>x<b>" not in page and "&lt;b&gt;x&lt;b&gt;" in page
    assert "<i>m" not in page and "<s>h" not in page
    assert "Break…" not in page


def test_its_queries_do_not_grow_with_the_pools_or_members(
    workspace: Workspace, supervisor_client: Client
) -> None:
    def count() -> int:
        with CaptureQueriesContext(connection) as queries:
            assert supervisor_client.get("/pools/").status_code == 200
        return len(queries)

    pools.pool_create(workspace=workspace, name="a", capacity=2)
    few = count()
    for n in range(5):
        pools.pool_create(workspace=workspace, name=f"p{n}", capacity=20)
        pools.pool_acquire(
            workspace_id=workspace.pk, name=f"p{n}", holder="h", process_id="p", ttl_s=60
        )
    assert count() == few


def test_another_workspaces_pools_are_not_shown(
    outsider_workspace: Workspace, supervisor_client: Client
) -> None:
    pools.pool_create(workspace=outsider_workspace, name="theirs", capacity=1)
    page = supervisor_client.get("/pools/").content.decode()
    assert "theirs" not in page and "No pool yet" in page
