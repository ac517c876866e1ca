"""A supervisor's reads of the record and the money through `Client` and `AsyncClient` against the
live server: refused calls and events with the API's filters (a lane-limited key sees its lane's
only), what the work cost by run, and a lane's budget set, changed and listed."""

from __future__ import annotations

from collections.abc import Callable
from decimal import Decimal

import pytest
from groundcontrol_client import Client, ScopeDenied, ValidationFailed
from groundcontrol_client.core.records import Budget, Costs, Event, Refusal

from fleet.models import Budget as BudgetRecord
from fleet.models import Run
from hands import services as hand_services
from hands.models import Hand, Lane, Workspace
from tests.supervisor_cli.shells import Shell
from tests.support.live import Fleet, mint

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def boss(shell: Callable[[str], Shell], owner: Hand, lane: Lane) -> Shell:
    return shell(mint(owner, ["plan", "supervise"]))


def _refused_twice(gc: Fleet) -> None:
    """Hand a's work key reads the events (scope_denied), then hand b is denied a lease hand a
    holds (lease_held)."""
    with Client(gc.url, gc.key_a) as a, Client(gc.url, gc.key_b) as b:
        with pytest.raises(ScopeDenied):
            a.events()
        a.lease_acquire("src/auth/", ttl_s=60, process_id="host-a:1")
        with pytest.raises(Exception, match="held by"):
            b.lease_acquire("src/auth/login.py", ttl_s=60, process_id="host-b:1")


def test_it_reads_refusals_newest_first_with_the_apis_filters(boss: Shell, gc: Fleet) -> None:
    _refused_twice(gc)
    every = boss.refusals()
    assert all(isinstance(refusal, Refusal) for refusal in every)
    assert [(r.code, r.hand) for r in every] == [
        ("lease_held", "hand-b"),
        ("scope_denied", "hand-a"),
    ]
    held = every[0]
    assert (held.method, held.path) == ("POST", "/api/v1/leases/acquire")
    assert held.request_id and "src/auth/" in held.message
    assert [r.code for r in boss.refusals(hand="hand-a")] == ["scope_denied"]
    assert [r.hand for r in boss.refusals(code="lease_held")] == ["hand-b"]
    assert [r.code for r in boss.refusals(limit=1)] == ["lease_held"]


def test_it_reads_events_with_the_apis_filters(boss: Shell, gc: Fleet) -> None:
    _refused_twice(gc)
    with Client(gc.url, gc.key_b) as b:
        b.lease_acquire("docs/", ttl_s=60, process_id="host-b:1")
    acquired = boss.events(kind="lease_acquired")
    assert all(isinstance(event, Event) for event in acquired)
    assert [(e.hand, e.resource, e.fence) for e in acquired] == [
        ("hand-b", "docs/", 1),
        ("hand-a", "src/auth/", 1),
    ]
    assert acquired[0].actor_key == gc.key_b.split("_")[1]
    assert [e.resource for e in boss.events(kind="lease_acquired", hand="hand-a")] == ["src/auth/"]
    newest = boss.events(limit=1)
    assert [e.id for e in newest] == [acquired[0].id]
    after = boss.events(since=acquired[1].id)  # an event's id: those after it
    assert acquired[0].id in [e.id for e in after]
    assert acquired[1].id not in [e.id for e in after]
    assert acquired[1].at is not None
    at_or_after = boss.events(kind="lease_acquired", since=acquired[1].at)
    assert {e.id for e in at_or_after} >= {acquired[0].id, acquired[1].id}
    with pytest.raises(ValidationFailed):
        boss.events(kind="no_such_kind")


def test_a_lane_limited_key_reads_its_lanes_record_only(
    shell: Callable[[str], Shell], gc: Fleet, workspace: Workspace, lane: Lane, docs: Lane
) -> None:
    walker = hand_services.hand_create(workspace=workspace, name="walker", lane=lane)[0]
    writer = hand_services.hand_create(workspace=workspace, name="writer", lane=docs)[0]
    for hand, resource in ((walker, "walk/"), (writer, "write/")):
        with Client(gc.url, mint(hand)) as client:
            client.lease_acquire(resource, ttl_s=60, process_id=f"{hand.name}:1")
            with pytest.raises(ScopeDenied):
                client.refusals()
    chief = hand_services.hand_create(workspace=workspace, name="chief", lane=lane)[0]
    limited = hand_services.key_issue(
        hand=chief, scopes=["supervise"], actor="test", lane=lane
    ).plaintext
    rewalk_boss = shell(limited)
    assert {r.hand for r in rewalk_boss.refusals()} == {"walker"}
    # Its lane's hands' events: walker's lease and keys, chief's key; never writer's.
    assert {(e.kind, e.hand) for e in rewalk_boss.events()} == {
        ("lease_acquired", "walker"),
        ("key_issued", "walker"),
        ("key_issued", "chief"),
    }
    assert rewalk_boss.events(hand="writer") == []


def test_it_reads_what_the_work_cost(boss: Shell, gc: Fleet, make_run: Callable[..., Run]) -> None:
    run = make_run(title="Summarise the log", slots=1)
    with Client(gc.url, gc.key_a) as a:
        attempt = a.claim(run.pk, process_id="host-a:1")
        a.report(attempt.id, fence=attempt.fence, tokens_in=40_000, tokens_out=2_000, cost_usd=0.62)
        a.report(attempt.id, fence=attempt.fence, cost_usd="0.41")
    costs = boss.costs(by="run")
    assert isinstance(costs, Costs)
    assert costs.by == "run"
    assert (costs.total.cost_usd, costs.total.tokens_in, costs.total.tokens_out) == (
        Decimal("1.03"),
        40_000,
        2_000,
    )
    assert [(row.id, row.name, row.cost_usd) for row in costs.rows] == [
        (run.pk, "Summarise the log", Decimal("1.03"))
    ]
    assert boss.costs(lane="rewalk", since="2000-01-01T00:00:00Z").total.cost_usd == Decimal("1.03")
    assert boss.costs(until="2000-01-01T00:00:00Z").rows == []
    # The costed reports and a void: the existing calls, through both shells.
    newest = boss.cost_reports(run_id=run.pk)[0]
    assert newest.cost_usd == Decimal("0.41")


def test_it_sets_changes_and_lists_a_lanes_budget(boss: Shell, lane: Lane) -> None:
    made = boss.budget_set("rewalk", period="day", action="pause", limit_usd="5.00")
    assert isinstance(made, Budget)
    assert (made.lane, made.period, made.action, made.limit_usd, made.limit_tokens) == (
        "rewalk",
        "day",
        "pause",
        Decimal("5"),
        None,
    )
    assert made.spent.cost_usd == Decimal(0) and made.reached_at is None
    # Set again: the same budget, made exactly this (the dollar limit cleared).
    changed = boss.budget_set("rewalk", period="day", action="stop", limit_tokens=1_000)
    assert (changed.id, changed.action, changed.limit_usd, changed.limit_tokens) == (
        made.id,
        "stop",
        None,
        1_000,
    )
    weekly = boss.budget_set("rewalk", period="week", action="pause", limit_usd=Decimal("20"))
    assert BudgetRecord.objects.filter(lane=lane).count() == 2
    assert {b.id for b in boss.budgets(lane="rewalk")} == {made.id, weekly.id}
    assert boss.budget(made.id) == changed
    assert boss.budget_update(made.id, limit_usd="7.5").limit_usd == Decimal("7.5")
    assert boss.budget(made.id).limit_tokens == 1_000  # unchanged unless given
    with pytest.raises(ValidationFailed) as refused:
        boss.budget_set("rewalk", period="day", action="pause")
    assert "limit_usd" in refused.value.get("fields")


def test_a_work_key_reads_no_record_and_sets_no_budget(worker: Shell, lane: Lane) -> None:
    for call in (worker.refusals, worker.events, worker.costs, worker.budgets):
        with pytest.raises(ScopeDenied):
            call()
    with pytest.raises(ScopeDenied):
        worker.budget_create("rewalk", period="day", action="pause", limit_usd="1")
