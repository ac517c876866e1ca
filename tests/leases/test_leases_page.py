"""The leases page with shared leases and the queue (issue 20): each lease's mode, the waiters in
line, names escaped, and an HTMX poll that swaps only the records in place."""

from __future__ import annotations

from datetime import datetime

import pytest
from django.test import Client

from hands.models import Workspace
from leases import queue
from leases import services as leases

pytestmark = pytest.mark.django_db


def test_it_shows_modes_and_the_line_and_refreshes_in_place(
    workspace: Workspace, supervisor_client: Client, frozen_clock: datetime
) -> None:
    for hand in ("hand-a", "hand-b"):
        leases.lease_acquire(
            workspace_id=workspace.pk,
            resource="docs/",
            holder=hand,
            process_id="p",
            ttl_s=60,
            mode="shared",
        )
    queue.join(
        workspace_id=workspace.pk,
        resource="docs/<b>",
        holder="hand-<i>",
        process_id="p",
        mode="exclusive",
    )
    page = supervisor_client.get("/leases/").content.decode()
    # Each shared tenure's badge, in the tree (the legend above it shows one too).
    tree = page[page.index('id="resource-tree"') :]
    assert tree.count('<span class="badge badge-shared">shared</span>') == 2
    line = page[page.index('id="queue"') :]
    assert "<code>docs/&lt;b&gt;</code>" in line and "hand-&lt;i&gt;" in line
    assert 'hx-trigger="every ' in page and 'id="records"' in page
    fragment = supervisor_client.get("/leases/", headers={"HX-Request": "true"})
    body = fragment.content.decode()
    assert body.lstrip().startswith('<div id="records"')
    assert "<h1>" not in body and 'id="queue"' in body
    assert fragment["Cache-Control"].startswith("no-store")
