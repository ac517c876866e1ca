"""The tree of who holds what (`dashboard.lease_tree`): held nodes nest under their directories,
a held directory covers every node below it, shared holders sit on one node, handoff requests
hang on the tenure they ask for, and slots are a tree of their own."""

from __future__ import annotations

from datetime import datetime

import pytest

from dashboard import lease_tree
from hands import services as hand_services
from leases import clock, queue
from leases.handoffs import handoff_ask_resource
from leases.services import lease_acquire

pytestmark = pytest.mark.django_db


def take(ws: int, resource: str, holder: str, mode: str = "exclusive", ttl: int = 60):  # noqa: ANN201
    return lease_acquire(
        workspace_id=ws, resource=resource, holder=holder, process_id=f"p-{holder}", ttl_s=ttl,
        mode=mode,
    )  # fmt: skip


def by_path(tree: lease_tree.Tree) -> dict[str, lease_tree.Node]:
    found: dict[str, lease_tree.Node] = {}

    def walk(node: lease_tree.Node) -> None:
        found[node.path] = node
        for child in node.children:
            walk(child)

    for root in tree.roots:
        walk(root)
    return found


def test_held_nodes_nest_under_their_directories_in_name_order(workspace, frozen_clock) -> None:
    for name in ("src/auth/login.py", "docs/", "src/api/", "src/auth/tokens.py"):
        take(workspace.pk, name, "hand-a")
    tree = lease_tree.lease_tree(workspace_id=workspace.pk).resources
    assert [root.path for root in tree.roots] == ["docs", "src"]
    nodes = by_path(tree)
    assert [child.path for child in nodes["src"].children] == ["src/api", "src/auth"]
    assert [c.label for c in nodes["src/auth"].children] == ["login.py", "tokens.py"]
    # `src` and `src/auth` are drawn as directories though nobody holds them; `docs/` is one
    # because it was spelled as one.
    assert not nodes["src"].held and nodes["src"].directory
    assert nodes["docs"].directory and not nodes["docs"].children
    assert not nodes["src/auth/login.py"].directory
    assert (tree.nodes, tree.tenures) == (6, 4)
    assert (nodes["src"].below, nodes["src"].held_below) == (4, 3)


def test_a_held_directory_covers_every_node_below_it(workspace, frozen_clock) -> None:
    take(workspace.pk, "src/", "hand-a", mode="shared")
    take(workspace.pk, "src/auth/login.py", "hand-b", mode="shared")
    nodes = by_path(lease_tree.lease_tree(workspace_id=workspace.pk).resources)
    held = nodes["src"].tenures[0]
    assert nodes["src"].covered_by == []
    assert nodes["src/auth"].covered_by == [held]
    assert nodes["src/auth/login.py"].coverer == held
    assert nodes["src/auth/login.py"].tenures[0].lease.holder == "hand-b"


def test_shared_holders_sit_on_one_node(workspace, frozen_clock) -> None:
    for hand in ("hand-c", "hand-a", "hand-b"):
        take(workspace.pk, "docs/", hand, mode="shared")
    node = by_path(lease_tree.lease_tree(workspace_id=workspace.pk).resources)["docs"]
    assert [t.lease.holder for t in node.tenures] == ["hand-c", "hand-a", "hand-b"]  # by fence
    assert node.shared_holders == 3 and all(t.shared for t in node.tenures)


def test_a_tenure_counts_down_to_its_next_state(workspace, frozen_clock: datetime) -> None:
    take(workspace.pk, "migrations", "hand-a", ttl=60)
    tenure = lease_tree.lease_tree(workspace_id=workspace.pk).resources.roots[0].tenures[0]
    # A resource lease has no grace: live, then lost when its window ends.
    assert (tenure.state, tenure.next_state) == ("live", "lost")
    assert tenure.next_at == tenure.lease.deadline
    clock.advance(61)
    later = lease_tree.lease_tree(workspace_id=workspace.pk).resources.roots[0]
    assert (later.tenures[0].state, later.tenures[0].next_at) == ("lost", None)
    assert later.attention and later.unfolded


def test_a_handoff_request_hangs_on_the_tenure_it_asks_for(workspace, frozen_clock) -> None:
    take(workspace.pk, "src/auth/", "hand-a")
    take(workspace.pk, "docs/", "hand-a")
    hand_services.hand_create(workspace=workspace, name="hand-b")
    view, _ = handoff_ask_resource(
        workspace_id=workspace.pk, holder="hand-b", resource="src/auth/login.py", reason="bug"
    )
    tree = lease_tree.lease_tree(workspace_id=workspace.pk)
    nodes = by_path(tree.resources)
    assert [v.request.pk for v in nodes["src/auth"].handoffs] == [view.request.pk]
    assert nodes["docs"].handoffs == []
    assert nodes["src"].attention and not nodes["docs"].attention
    assert [v.request.pk for v in tree.handoffs] == [view.request.pk]


def test_slots_are_a_tree_of_their_own(workspace, owner, make_run, frozen_clock) -> None:
    from fleet.attempts import services as attempt_services

    run = make_run(slots=2)
    attempt_services.attempt_claim(hand=owner, run_id=run.pk, process_id="host:1")
    take(workspace.pk, "migrations", "hand-a")
    tree = lease_tree.lease_tree(workspace_id=workspace.pk)
    assert [root.path for root in tree.resources.roots] == ["migrations"]
    slots = by_path(tree.slots)
    assert list(slots) == ["run", f"run/{run.pk}", f"run/{run.pk}/slot", f"run/{run.pk}/slot/0"]
    assert slots[f"run/{run.pk}/slot/0"].tenures[0].lease.holder == owner.name


def test_the_filters_narrow_the_tree_but_not_the_places(workspace, frozen_clock) -> None:
    take(workspace.pk, "src/", "hand-a")
    take(workspace.pk, "docs/", "hand-b")
    for hand, name in (("hand-c", "src/"), ("hand-d", "src/auth/")):
        queue.join(
            workspace_id=workspace.pk, resource=name, holder=hand, process_id="p", mode="exclusive"
        )
    tree = lease_tree.lease_tree(workspace_id=workspace.pk, prefix="src/auth")
    assert tree.resources.tenures == 0
    assert [(w.holder, w.place) for w in tree.line] == [("hand-d", 2)]
    by_holder = lease_tree.lease_tree(workspace_id=workspace.pk, holder="hand-b")
    assert [root.path for root in by_holder.resources.roots] == ["docs"]
    assert by_holder.line == []


def test_nothing_crosses_workspaces(workspace, outsider_workspace, frozen_clock) -> None:
    take(outsider_workspace.pk, "src/", "hand-x")
    queue.join(
        workspace_id=outsider_workspace.pk, resource="src/", holder="hand-y", process_id="p",
        mode="exclusive",
    )  # fmt: skip
    tree = lease_tree.lease_tree(workspace_id=workspace.pk)
    assert (tree.resources.roots, tree.slots.roots, tree.line) == ([], [], [])
