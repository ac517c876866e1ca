"""A waiter's place on the leases page is the place the queue gives it (`leases.queue.standing`,
the SQL the grants check), not a count of waiters per node: a waiter below an exclusive waiter
for its directory is behind it; shared waiters do not queue behind each other; a hand's own
waiter on another node is not in its way."""

from __future__ import annotations

import pytest

from dashboard import lease_tree
from leases import queue
from leases.models import Waiter

pytestmark = pytest.mark.django_db

# (resource, holder, process, mode), in the order they join.
LINE = [
    ("src/", "hand-a", "p-a", "exclusive"),
    ("src/auth/login.py", "hand-b", "p-b", "exclusive"),
    ("docs/", "hand-c", "p-c", "shared"),
    ("docs/guide.md", "hand-d", "p-d", "shared"),
    ("docs/", "hand-e", "p-e", "exclusive"),
    ("docs/guide.md", "hand-f", "p-f", "shared"),
    ("src/auth/", "hand-b", "p-b", "exclusive"),  # the same hand and process, above its own
    ("src/auth/", "hand-b", "p-2", "exclusive"),  # the same hand from another process
    ("src/auth/tokens.py", "hand-a", "p-a", "shared"),
    ("srcs/", "hand-g", "p-g", "exclusive"),  # `srcs` is not below `src`
    ("src/auth/login.py", "hand-h", "p-h", "shared"),
]


def joined(ws: int) -> list[queue.Ticket]:
    return [
        queue.join(workspace_id=ws, resource=name, holder=holder, process_id=process, mode=mode)
        for name, holder, process, mode in LINE
    ]


def the_queues_place(ws: int, ticket: queue.Ticket, index: int) -> int:
    name, holder, process, mode = LINE[index]
    return queue.standing(
        workspace_id=ws, resource=name, holder=holder, process_id=process, mode=mode,
        ticket=ticket, in_the_way=[],
    ).position  # fmt: skip


def test_every_place_is_the_one_the_queue_gives(workspace, frozen_clock) -> None:
    tickets = joined(workspace.pk)
    shown = {w.id: w.place for w in lease_tree.lease_tree(workspace_id=workspace.pk).line}
    expected = {t.id: the_queues_place(workspace.pk, t, i) for i, t in enumerate(tickets)}
    assert shown == expected
    # What the table above says, spelled out, so a change in either form is seen here too.
    assert [shown[t.id] for t in tickets] == [1, 2, 1, 1, 3, 2, 2, 4, 3, 1, 5]


def test_a_naive_count_per_node_would_differ(workspace, frozen_clock) -> None:
    """The waiter for `src/auth/login.py` is first on its own node but second in the queue."""
    tickets = joined(workspace.pk)
    second = next(
        w for w in lease_tree.lease_tree(workspace_id=workspace.pk).line if w.id == tickets[1].id
    )
    assert (second.node, second.place) == ("src/auth/login.py", 2)


def test_a_waiter_that_left_counts_for_nobody(workspace, frozen_clock) -> None:
    tickets = joined(workspace.pk)
    queue.leave(tickets[0])  # hand-a's exclusive `src/`
    shown = {w.id: w.place for w in lease_tree.lease_tree(workspace_id=workspace.pk).line}
    assert tickets[0].id not in shown
    for index, ticket in enumerate(tickets[1:], start=1):
        assert shown[ticket.id] == the_queues_place(workspace.pk, ticket, index)
    assert shown[tickets[1].id] == 1


def test_a_dormant_place_is_not_in_line(workspace, frozen_clock) -> None:
    tickets = joined(workspace.pk)
    queue.keep(tickets[4])  # hand-e's wait ended denied: its place is kept, but counts not
    shown = {w.id: w.place for w in lease_tree.lease_tree(workspace_id=workspace.pk).line}
    assert tickets[4].id not in shown
    assert shown[tickets[5].id] == the_queues_place(workspace.pk, tickets[5], 5) == 1
    assert Waiter.objects.filter(pk=tickets[4].id).exists()


def test_the_api_gives_every_waiter_the_same_place(workspace, frozen_clock) -> None:
    """`GET /leases/queue` (`queue.line`) once counted the waiters on each node alone."""
    tickets = joined(workspace.pk)
    page = {w.id: w.place for w in lease_tree.lease_tree(workspace_id=workspace.pk).line}
    listed = queue.line(workspace_id=workspace.pk)
    assert [w["position"] for w in listed] == [page[t.id] for t in tickets]
    # One line of the tree keeps the places the whole queue gives.
    login = queue.line(workspace_id=workspace.pk, resource="src/auth/login.py")
    assert [(w["resource"], w["holder"], w["position"]) for w in login] == [
        ("src/", "hand-a", 1),
        ("src/auth/login.py", "hand-b", 2),
        ("src/auth/", "hand-b", 2),
        ("src/auth/", "hand-b", 4),
        ("src/auth/login.py", "hand-h", 5),
    ]
