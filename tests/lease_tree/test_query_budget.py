"""The leases page costs the same queries with one node as with two hundred: the session, the
user and the memberships (three), the time, the held resource tenures, the held slot tenures, the
waiters, and the open handoff requests with their clock and their leases (three). The tree, the
places and the coverage are built from those rows, whatever their number."""

from __future__ import annotations

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from hands import services as hand_services
from leases import queue
from leases.handoffs import handoff_ask_resource
from leases.services import lease_acquire

pytestmark = pytest.mark.django_db
BUDGET = 10


def count(client, url: str = "/leases/", **headers: str) -> int:  # noqa: ANN001
    with CaptureQueriesContext(connection) as queries:
        assert client.get(url, headers=headers).status_code == 200
    return len(queries)


def grow(workspace, start: int, stop: int) -> None:  # noqa: ANN001
    """Nodes `start` to `stop` - 1: a held file in a directory per ten, a shared directory, a
    waiter and a handoff request on every fifth."""
    for index in range(start, stop):
        name = f"src/mod{index // 10}/file{index}.py"
        lease_acquire(
            workspace_id=workspace.pk, resource=name, holder=f"hand-{index % 7}",
            process_id="p", ttl_s=60,
        )  # fmt: skip
        if index % 5 == 0:
            queue.join(
                workspace_id=workspace.pk, resource=name, holder=f"waiter-{index}",
                process_id="w", mode="exclusive",
            )  # fmt: skip
            asker = f"asker-{index}"
            hand_services.hand_create(workspace=workspace, name=asker)
            handoff_ask_resource(
                workspace_id=workspace.pk, holder=asker, resource=name, reason="need it"
            )


def test_the_leases_page_costs_the_same_with_1_and_200_nodes(
    supervisor_client, workspace, frozen_clock
) -> None:
    grow(workspace, 0, 1)
    few = count(supervisor_client)
    few_poll = count(supervisor_client, HX_Request="true")
    grow(workspace, 1, 200)
    page = supervisor_client.get("/leases/").content.decode()
    assert page.count('class="tenure ') == 200 and page.count("data-waiter=") == 2 * 40
    assert count(supervisor_client) == few <= BUDGET
    assert count(supervisor_client, HX_Request="true") == few_poll
    assert count(supervisor_client, "/leases/?prefix=src/mod1/&holder=hand-1") == few
