"""Leases on a tree of names, and shared tenures (issue 20, items 1 and 2), on whichever database
the suite runs on: what conflicts, what the denial says, and how fences count per node."""

from __future__ import annotations

from datetime import datetime

import pytest

from apikit.errors import ValidationFailed
from leases import clock, names, nodes
from leases import services as leases
from leases.errors import HeldInOtherMode, LeaseHeld, LeaseLost, StaleFence
from leases.models import Event, LeaseMode

pytestmark = pytest.mark.django_db
WS = 1


def acquire(resource: str, holder: str = "a", *, mode: str = "exclusive", ttl: float = 60):
    return leases.lease_acquire(
        workspace_id=WS,
        resource=resource,
        holder=holder,
        process_id=f"p-{holder}",
        ttl_s=ttl,
        mode=mode,
    )


def denied(resource: str, holder: str = "b", *, mode: str = "exclusive") -> LeaseHeld:
    with pytest.raises(LeaseHeld) as refusal:
        acquire(resource, holder, mode=mode)
    return refusal.value


@pytest.mark.parametrize(
    "other", ["src/auth/", "src/auth", "src/auth/login.py", "src/auth/a/b/c", "src", "src/"]
)
def test_an_exclusive_lease_covers_its_node_its_descendants_and_its_ancestors(
    other: str, frozen_clock: datetime
) -> None:
    acquire("src/auth/")
    refusal = denied(other)
    assert refusal.fields["resource"] == "src/auth/"
    assert refusal.fields["holder"] == "a"
    assert refusal.fields["mode"] == "exclusive"


@pytest.mark.parametrize("other", ["src/authz", "src/auth-b", "src/aut", "docs", "src/web/x"])
def test_names_that_only_look_related_do_not_conflict(other: str, frozen_clock: datetime) -> None:
    acquire("src/auth/")
    assert acquire(other, "b").holder == "b"


def test_a_denial_names_one_lease_in_the_way_and_counts_the_others(
    frozen_clock: datetime,
) -> None:
    acquire("src/a.py", "a", ttl=30)
    acquire("src/b.py", "c", ttl=90)
    acquire("src/c/d.py", "d", ttl=60)
    refusal = denied("src/")
    # The one whose window ends first, with its fence, mode and window.
    assert (refusal.fields["resource"], refusal.fields["holder"]) == ("src/a.py", "a")
    assert refusal.fields["expires_in_s"] == 30
    assert refusal.fields["others"] == 2
    assert "and 2 other leases in the way" in refusal.message


def test_a_hands_own_leases_never_stand_in_its_way(frozen_clock: datetime) -> None:
    acquire("src/")
    assert acquire("src/auth/login.py").holder == "a"
    denied("src/auth/")


def test_shared_tenures_coexist_and_each_takes_the_next_fence_of_the_node(
    frozen_clock: datetime,
) -> None:
    first = acquire("docs/", "a", mode="shared")
    second = acquire("docs/", "b", mode="shared")
    below = acquire("docs/guide.md", "c", mode="shared")
    assert (first.fence, second.fence, below.fence) == (1, 2, 1)
    assert {first.mode, second.mode} == {LeaseMode.SHARED}
    for resource in ("docs/", "docs/guide.md", "docs"):
        assert denied(resource, "d").fields["mode"] == "shared"
    # Each shared tenure is its own: renewed, checked and released by its own fence.
    assert leases.lease_check(workspace_id=WS, resource="docs/", fence=1).holder == "a"
    leases.lease_release(workspace_id=WS, resource="docs/", holder="a", fence=1)
    with pytest.raises(StaleFence):
        leases.lease_check(workspace_id=WS, resource="docs/", fence=1)
    assert (
        leases.lease_renew(
            workspace_id=WS, resource="docs/", holder="b", fence=2, process_id="p-b"
        ).fence
        == 2
    )
    leases.lease_release(workspace_id=WS, resource="docs/", holder="b", fence=2)
    leases.lease_release(workspace_id=WS, resource="docs/guide.md", holder="c", fence=1)
    # The node's fence only increases: the next holder, exclusive, takes the one after.
    assert acquire("docs/", "d").fence == 3


def test_a_shared_grant_is_refused_by_an_exclusive_tenure_on_the_line(
    frozen_clock: datetime,
) -> None:
    acquire("db/schema", "a")
    assert denied("db/", mode="shared").fields["resource"] == "db/schema"
    assert denied("db/schema/users", mode="shared").fields["holder"] == "a"


@pytest.mark.parametrize("mode", ["shared", "exclusive"])
def test_asking_again_renews_what_the_hand_holds_in_the_mode_it_holds_it(
    mode: str, frozen_clock: datetime
) -> None:
    first = acquire("cache/", mode=mode)
    clock.advance(10)
    again = acquire("cache/", mode=mode)
    assert (again.fence, again.mode) == (first.fence, mode)
    assert again.deadline > first.deadline
    assert Event.objects.filter(kind="lease_acquired", resource="cache/").count() == 1


@pytest.mark.parametrize(("held", "asked"), [("shared", "exclusive"), ("exclusive", "shared")])
def test_asking_again_in_the_other_mode_is_refused_and_the_tenure_stays_as_it_was(
    held: str, asked: str, frozen_clock: datetime
) -> None:
    """A tenure keeps the mode it was granted in: never renewed for an ask in the other mode
    (an answer in a mode not asked for), never a second tenure beside it."""
    first = acquire("cache/", mode=held)
    clock.advance(10)
    with pytest.raises(HeldInOtherMode) as refused:
        acquire("cache/", mode=asked)
    assert refused.value.fields == {
        "resource": "cache/",
        "fence": first.fence,
        "mode": held,
        "expires_in_s": 50.0,
    }
    assert [
        (t.holder, t.mode, t.fence, t.deadline)
        for t in nodes.tenures(workspace_id=WS, resource="cache/")
        if t.held
    ] == [("a", held, first.fence, first.deadline)]
    assert Event.objects.filter(kind="lease_acquired", resource="cache/").count() == 1


def test_a_lost_tenure_in_the_way_is_recorded_as_ended_before_the_grant(
    frozen_clock: datetime,
) -> None:
    acquire("src/auth/login.py", "a", ttl=10)
    clock.advance(11)
    granted = acquire("src/", "b")
    expired = Event.objects.get(kind="lease_expired", resource="src/auth/login.py")
    acquired = Event.objects.get(kind="lease_acquired", resource="src/")
    assert expired.id < acquired.id and expired.hand == "a"
    assert granted.holder == "b"
    with pytest.raises(LeaseLost):
        leases.lease_renew(
            workspace_id=WS, resource="src/auth/login.py", holder="a", fence=1, process_id="p-a"
        )


def test_a_break_ends_every_tenure_of_the_node_and_moves_its_fence_past_them(
    frozen_clock: datetime,
) -> None:
    acquire("assets/", "a", mode="shared")
    acquire("assets/", "b", mode="shared")
    node = leases.lease_break(workspace_id=WS, resource="assets/", actor="boss", reason="stuck")
    assert node.fence == 3
    broken = Event.objects.filter(kind="lease_broken", resource="assets/").order_by("id")
    assert [(e.hand, e.data["broken_fence"], e.fence) for e in broken] == [
        ("a", 1, 3),
        ("b", 2, 3),
    ]
    for holder, fence in (("a", 1), ("b", 2)):
        with pytest.raises(StaleFence):
            leases.lease_check(workspace_id=WS, resource="assets/", fence=fence)
        with pytest.raises((LeaseLost, StaleFence)):
            leases.lease_renew(
                workspace_id=WS,
                resource="assets/",
                holder=holder,
                fence=fence,
                process_id=f"p-{holder}",
            )
    assert acquire("assets", "c").fence == 4


def test_a_directory_and_its_spelling_without_the_slash_are_one_node(
    frozen_clock: datetime,
) -> None:
    first = acquire("lib/", "a")
    leases.lease_release(workspace_id=WS, resource="lib", holder="a", fence=first.fence)
    again = acquire("lib", "b")
    assert (again.resource, again.fence) == ("lib", 2)


@pytest.mark.parametrize("name", ["run/1/0", "pool/ports/8001", "pool", "Pool/x", " pool/"])
def test_names_of_slots_and_pools_are_not_taken_directly(name: str) -> None:
    with pytest.raises(ValidationFailed):
        acquire(name)


def test_the_mode_must_be_one_the_contract_names() -> None:
    with pytest.raises(ValidationFailed):
        acquire("x", mode="upgradable")


@pytest.mark.parametrize(
    ("node", "other", "expected"),
    [
        ("a/b", "a/b", True),
        ("a/b", "a", True),
        ("a", "a/b/c", True),
        ("a/b", "a/bc", False),
        ("a/b", "a/b-c", False),
        ("a/b", "a/c", False),
        ("a", "b", False),
    ],
)
def test_the_sql_condition_agrees_with_the_python_one(
    node: str, other: str, expected: bool, frozen_clock: datetime
) -> None:
    """One rule, two forms: `leases.names.overlaps` and the engine's conflict condition."""
    assert names.overlaps(node, other) == expected
    acquire(other, "a")
    in_the_way, count = nodes.conflicts(
        workspace_id=WS, resource=node, holder="b", process_id="p", mode="exclusive"
    )
    assert (count > 0) == expected


def test_a_name_has_at_most_32_segments() -> None:
    """A grant locks every node on its line (leases.tree.lock_tree): the depth bounds the locks
    one call may hold, so a flood of deep names cannot fill the database's lock table."""
    deepest = "/".join(["a"] * names.MAX_SEGMENTS)
    assert acquire(deepest).fence == 1
    with pytest.raises(ValidationFailed) as refused:
        acquire(deepest + "/b")
    assert "has 33 segments; a name has at most 32" in refused.value.message
    assert names.is_canonical(deepest + "/")  # a trailing `/` is no segment
