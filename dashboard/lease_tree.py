"""The leases page's reads: who holds what, drawn as the tree the names make (`leases.names`).

One read per kind of row, whatever the number of nodes: the database's time, the held resource
tenures, the held slot tenures, the waiters in the queue, the open handoff requests (with their
own clock and leases: `leases.handoffs.handoffs_open`). The tree is built in Python from those
rows: every held or waited-for node with its ancestors, each held node's tenures (an exclusive
one, or its shared holders), what a held node covers (every node below it: `names.is_within`),
the waiters on the node with the place the queue gives each (`leases.queue.places`), and the handoff
requests on each tenure.

A waiter's place is the queue's (`leases.queue.standing`: 1 + the waiters on its line of the
tree that joined before it and that it conflicts with), not a count per node: a waiter for
`src/auth/login.py` behind an exclusive waiter for `src/` is second, though first on its own
node. `leases.queue.places` is the Python form of the conditions `leases.tree.conflict_free`
checks in SQL; tests/lease_tree/test_places.py holds the two together on PostgreSQL.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime

from leases import names, queue
from leases.clock import db_now
from leases.engine import LeaseSnapshot
from leases.handoffs import HandoffView, handoffs_open
from leases.models import Lease, LeaseKind, LeaseMode, LeaseState, LeaseStatus
from leases.state import next_threshold

# Tenures drawn per tree (and waiters read: `leases.queue.LINE_LIMIT`): past them the page says
# so and asks for a filter.
TREE_LIMIT = 1000
# A directory is unfolded at first when it has at most this many nodes below it, or when
# something below needs a supervisor (a waiter, a handoff request, a late or stalled holder);
# the supervisor's own choice, kept by the browser, wins after that.
UNFOLDED_UP_TO = 25
# What each state turns into next, for a held tenure's countdown.
NEXT_STATE = {LeaseState.LIVE: "late", LeaseState.LATE: "stalled", LeaseState.STALLED: "lost"}
NEEDS_LOOK = (LeaseState.LATE, LeaseState.STALLED, LeaseState.LOST)


@dataclass(frozen=True)
class Tenure:
    """One held tenure of a node, at the page's database time, with the open handoff requests
    on it."""

    lease: LeaseSnapshot
    handoffs: tuple[HandoffView, ...] = ()

    @property
    def state(self) -> str:
        return str(self.lease.state)

    @property
    def shared(self) -> bool:
        return self.lease.mode == LeaseMode.SHARED

    @property
    def next_at(self) -> datetime | None:
        """When the state changes next (`leases.state.next_threshold`); None once lost."""
        if self.lease.deadline is None or self.lease.state not in NEXT_STATE:
            return None
        return next_threshold(
            deadline=self.lease.deadline, grace_s=self.lease.grace_s, now=self.lease.server_time
        )

    @property
    def next_state(self) -> str:
        """The state `next_at` brings (a grace of 0 goes from live straight to lost)."""
        if self.lease.grace_s <= 0 and self.lease.state == LeaseState.LIVE:
            return "lost"
        return NEXT_STATE.get(self.lease.state, "")


@dataclass
class Node:
    path: str
    label: str
    depth: int
    children: list[Node] = field(default_factory=list)
    tenures: list[Tenure] = field(default_factory=list)
    waiters: list[queue.InLine] = field(default_factory=list)
    # The held tenures on the node's ancestors: each covers this node (nearest last).
    covered_by: list[Tenure] = field(default_factory=list)
    spelled_as_directory: bool = False
    # Filled by `_summarise`: nodes, tenures and waiters below, and whether anything at or
    # below the node needs a supervisor's look.
    below: int = 0
    held_below: int = 0
    waiting_below: int = 0
    attention: bool = False

    @property
    def directory(self) -> bool:
        return bool(self.children) or self.spelled_as_directory

    @property
    def held(self) -> bool:
        return bool(self.tenures)

    @property
    def unfolded(self) -> bool:
        """Unfolded at first (the browser keeps the supervisor's choice after that)."""
        return self.below <= UNFOLDED_UP_TO or self.attention

    @property
    def shared_holders(self) -> int:
        return sum(1 for tenure in self.tenures if tenure.shared)

    @property
    def handoffs(self) -> list[HandoffView]:
        return [view for tenure in self.tenures for view in tenure.handoffs]

    @property
    def coverer(self) -> Tenure | None:
        """The nearest tenure above that covers this node."""
        return self.covered_by[-1] if self.covered_by else None


@dataclass(frozen=True)
class Tree:
    kind: str
    roots: list[Node]
    nodes: int
    tenures: int
    # More tenures are held than drawn (TREE_LIMIT): the page says so.
    cut: bool


@dataclass(frozen=True)
class LeaseTree:
    now: datetime
    resources: Tree
    slots: Tree
    line: list[queue.InLine]
    line_cut: bool
    handoffs: list[HandoffView]


# --- The tree ------------------------------------------------------------------------------------


def _node(nodes: dict[str, Node], path: str) -> Node:
    """The node at `path`, made with its ancestors if new."""
    found = nodes.get(path)
    if found is not None:
        return found
    parts = path.split("/")
    made = Node(path=path, label=parts[-1], depth=len(parts) - 1)
    nodes[path] = made
    if len(parts) > 1:
        _node(nodes, "/".join(parts[:-1])).children.append(made)
    return made


def _summarise(node: Node, covered_by: list[Tenure]) -> None:
    """Fill in what each node covers and what lies below it (depth first)."""
    node.covered_by = covered_by
    node.children.sort(key=lambda child: child.path)
    node.attention = bool(node.waiters or node.handoffs) or any(
        tenure.lease.state in NEEDS_LOOK for tenure in node.tenures
    )
    below_cover = covered_by + node.tenures if node.tenures else covered_by
    for child in node.children:
        _summarise(child, below_cover)
        node.below += 1 + child.below
        node.held_below += len(child.tenures) + child.held_below
        node.waiting_below += len(child.waiters) + child.waiting_below
        node.attention = node.attention or child.attention


def build(
    kind: str,
    tenures: Iterable[Tenure],
    waiters: Iterable[queue.InLine] = (),
    *,
    cut: bool = False,
) -> Tree:
    """The tree of the held `tenures` and the `waiters`' nodes, with their ancestors."""
    nodes: dict[str, Node] = {}
    count = 0
    for tenure in tenures:
        node = _node(nodes, names.node_of(tenure.lease.resource))
        node.tenures.append(tenure)
        node.spelled_as_directory |= tenure.lease.resource.endswith("/")
        count += 1
    for waiter in waiters:
        node = _node(nodes, waiter.node)
        node.waiters.append(waiter)
        node.spelled_as_directory |= waiter.resource.endswith("/")
    for node in nodes.values():
        # The node's exclusive tenure first, then its shared holders by fence.
        node.tenures.sort(key=lambda t: (t.shared, t.lease.fence))
    roots = sorted((node for node in nodes.values() if node.depth == 0), key=lambda n: n.path)
    for root in roots:
        _summarise(root, [])
    return Tree(kind=kind, roots=roots, nodes=len(nodes), tenures=count, cut=cut)


def _held(workspace_id: int, kind: str, prefix: str, holder: str) -> tuple[list[Lease], bool]:
    rows = Lease.objects.filter(workspace_id=workspace_id, kind=kind, status=LeaseStatus.HELD)
    if prefix:
        rows = rows.filter(resource__startswith=prefix)
    if holder:
        rows = rows.filter(holder=holder)
    found = list(rows.order_by("node", "shared_by")[: TREE_LIMIT + 1])
    return found[:TREE_LIMIT], len(found) > TREE_LIMIT


def _shown(waiter: queue.InLine, prefix: str, holder: str) -> bool:
    return waiter.resource.startswith(prefix) and (not holder or waiter.holder == holder)


def lease_tree(*, workspace_id: int, prefix: str = "", holder: str = "") -> LeaseTree:
    """The leases page: the trees of held resource and slot tenures, the queue, and the open
    handoff requests, at the database's time. The filters (`prefix`: the resource starts with
    it; `holder`) narrow what is drawn; every waiter's place is counted in the whole queue.

    Queries: the time, the resource tenures, the slot tenures, the waiters, and the handoff
    requests' three (`handoffs_open`), whatever the number of nodes.
    """
    now = db_now()
    asked = handoffs_open(workspace_id=workspace_id)
    on_tenure: dict[tuple[int, int], list[HandoffView]] = {}
    for view in asked:
        on_tenure.setdefault((view.request.lease_id, view.request.fence), []).append(view)

    def tenures(rows: list[Lease]) -> list[Tenure]:
        return [
            Tenure(
                LeaseSnapshot.from_model(row, now),
                tuple(on_tenure.get((row.pk, row.fence), ())),
            )
            for row in rows
        ]

    resource_rows, resources_cut = _held(workspace_id, LeaseKind.RESOURCE, prefix, holder)
    slot_rows, slots_cut = _held(workspace_id, LeaseKind.SLOT, prefix, holder)
    # The queue's oldest (their places depend on every waiter ahead), and whether it is longer.
    queued = queue.waiting(workspace_id=workspace_id)
    line = [w for w in queue.places(queued[: queue.LINE_LIMIT]) if _shown(w, prefix, holder)]
    return LeaseTree(
        now=now,
        resources=build(LeaseKind.RESOURCE, tenures(resource_rows), line, cut=resources_cut),
        slots=build(LeaseKind.SLOT, tenures(slot_rows), cut=slots_cut),
        line=line,
        line_cut=len(queued) > queue.LINE_LIMIT,
        handoffs=asked,
    )
