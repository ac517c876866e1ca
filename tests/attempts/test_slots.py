"""A slot's life: open -> held -> done (finished), or back to open (released, lost, broken).

A done slot is never handed out again; a run whose every slot is done is done, in the same
transaction as its last finish; a supervisor can reopen a done slot or add slots (issue 17.1).
"""

from __future__ import annotations

import pytest

from apikit.errors import ValidationFailed
from evidence.errors import EvidenceMissing
from evidence.services import attempt_finish
from fleet.attempts import services as attempt_services
from fleet.errors import NoOpenSlot, RunClosed, SlotNotDone, SlotTaken
from fleet.models import Attempt, Run, RunState
from fleet.plan import selectors as plan_selectors
from fleet.plan import services as plan_services
from leases import clock
from leases.models import Event, Lease, Refusal

pytestmark = pytest.mark.django_db

PR = [{"kind": "pull_request", "url": "https://example.com/org/repo/pull/7"}]


def claim(hand, run, process: str = "host:1", **kwargs):  # noqa: ANN001, ANN201
    return attempt_services.attempt_claim(hand=hand, run_id=run.pk, process_id=process, **kwargs)


def finish(hand, view, process: str = "host:1", evidence=PR):  # noqa: ANN001, ANN201
    return attempt_finish(
        hand=hand,
        attempt_id=view.attempt.pk,
        fence=view.attempt.fence,
        process_id=process,
        evidence=evidence,
    )


def release(hand, view, process: str = "host:1"):  # noqa: ANN001, ANN201
    return attempt_services.attempt_release(
        hand=hand,
        attempt_id=view.attempt.pk,
        fence=view.attempt.fence,
        process_id=process,
        reason="blocked",
    )


def states(run: Run) -> list[str]:
    return [view.state for view in plan_selectors.run_slots(run=run)]


def events(kind: str) -> list[Event]:
    return list(Event.objects.filter(kind=kind).order_by("id"))


@pytest.fixture
def two_slots(make_run):  # noqa: ANN001, ANN201
    return make_run(
        slots=2, heartbeat_interval_s=100, grace_s=60, evidence_required=["pull_request"]
    )


def test_a_finished_slot_is_done_and_its_run_done_in_the_same_transaction(
    owner, teammate, one_slot, frozen_clock
) -> None:
    view = claim(owner, one_slot)
    assert states(one_slot) == ["held"]
    finish(owner, view)
    one_slot.refresh_from_db()
    assert one_slot.state == RunState.DONE
    assert one_slot.closed_at == frozen_clock
    assert states(one_slot) == ["done"]
    (done,) = events("run_done")
    assert (done.data, done.actor, done.at) == ({"run": one_slot.pk}, "hand-a", frozen_clock)
    # The finish and the run's end are one transaction: the events are back to back.
    finished = events("finished")[0]
    assert done.pk == finished.pk + 1
    with pytest.raises(RunClosed) as refused:
        claim(teammate, one_slot, "host:2")
    assert "is done" in refused.value.message
    assert refused.value.fields == {"run_state": "done"}
    assert Attempt.objects.filter(run=one_slot).count() == 1
    assert Refusal.objects.filter(code="run_closed", hand="hand-b").count() == 1


def test_a_done_slot_is_never_claimed_again_while_others_are_open(
    owner, teammate, two_slots, frozen_clock
) -> None:
    first = claim(owner, two_slots)
    finish(owner, first)
    assert states(two_slots) == ["done", "open"]
    two_slots.refresh_from_db()
    assert two_slots.state == RunState.OPEN
    # The next claim skips the done slot; naming it is refused with why.
    assert claim(teammate, two_slots, "host:2").attempt.slot.index == 1
    with pytest.raises(SlotTaken) as refused:
        claim(owner, two_slots, "host:3", slot=0)
    assert "is done" in refused.value.message
    assert refused.value.fields["state"] == "done"
    with pytest.raises(NoOpenSlot) as none_open:
        claim(owner, two_slots, "host:3")
    assert none_open.value.fields == {
        "slots": 2,
        "held": 1,
        "done": 1,
        "next_expires_in_s": 100.0,
    }
    assert "1 held" in none_open.value.message and "1 done" in none_open.value.message
    assert "current renewal window ends in 100 s" in none_open.value.message


def test_release_loss_and_break_reopen_the_slot_but_a_finish_does_not(
    owner, teammate, two_slots, frozen_clock
) -> None:
    released = claim(owner, two_slots)
    release(owner, released)
    assert states(two_slots) == ["open", "open"]
    lost = claim(owner, two_slots)
    clock.advance(100 + 60 + 1)
    assert states(two_slots) == ["open", "open"]  # lost: open at once, before any sweep
    broken = claim(teammate, two_slots, "host:2")
    assert broken.attempt.slot.index == 0 and broken.lease.fence == lost.lease.fence + 1
    attempt_services.lease_break(
        workspace_id=two_slots.workspace_id,
        resource=broken.lease.resource,
        actor="boss",
        reason="reassigning",
    )
    assert states(two_slots) == ["open", "open"]
    again = claim(owner, two_slots, "host:3")
    finish(owner, again, "host:3")
    assert states(two_slots) == ["done", "open"]


def test_a_finish_refused_for_missing_evidence_leaves_the_slot_held(
    owner, one_slot, frozen_clock
) -> None:
    view = claim(owner, one_slot)
    with pytest.raises(EvidenceMissing):
        finish(owner, view, evidence=[])
    assert states(one_slot) == ["held"]
    one_slot.refresh_from_db()
    assert one_slot.state == RunState.OPEN
    assert events("run_done") == []


def test_a_supervisor_reopens_a_done_slot_with_a_reason(owner, teammate, one_slot, frozen_clock):
    view = claim(owner, one_slot)
    finish(owner, view)
    reopened = plan_services.slot_reopen(
        workspace_id=one_slot.workspace_id,
        run_id=one_slot.pk,
        index=0,
        actor="boss",
        reason="the fix regressed",
    )
    assert reopened.state == "open"
    one_slot.refresh_from_db()
    assert one_slot.state == RunState.OPEN and one_slot.closed_at is None
    (event,) = events("slot_reopened")
    assert event.actor == "boss"
    assert event.data == {
        "run": one_slot.pk,
        "slot": 0,
        "reason": "the fix regressed",
        "run_reopened": True,
    }
    # The next tenure takes the next fence; the finished attempt stays on record.
    again = claim(teammate, one_slot, "host:2")
    assert again.lease.fence == view.lease.fence + 1
    assert Attempt.objects.get(pk=view.attempt.pk).end == "finished"
    # Only a done slot can be reopened; a reason is required.
    with pytest.raises(SlotNotDone) as refused:
        plan_services.slot_reopen(
            workspace_id=one_slot.workspace_id,
            run_id=one_slot.pk,
            index=0,
            actor="boss",
            reason="again",
        )
    assert refused.value.fields == {"state": "held"}
    with pytest.raises(ValidationFailed):
        plan_services.slot_reopen(
            workspace_id=one_slot.workspace_id,
            run_id=one_slot.pk,
            index=0,
            actor="boss",
            reason="",
        )
    assert len(events("slot_reopened")) == 1


def test_a_supervisor_adds_slots_to_an_open_or_done_run_but_not_a_closed_one(
    owner, teammate, one_slot, frozen_clock
) -> None:
    finish(owner, claim(owner, one_slot))
    run = plan_services.run_add_slots(
        workspace_id=one_slot.workspace_id,
        run_id=one_slot.pk,
        count=2,
        actor="boss",
        reason="two more repos",
    )
    assert (run.state, run.slot_count) == (RunState.OPEN, 3)
    assert states(run) == ["done", "open", "open"]
    (event,) = events("slots_added")
    assert event.data == {
        "run": run.pk,
        "slots": [1, 2],
        "reason": "two more repos",
        "run_reopened": True,
    }
    assert Lease.objects.get(resource=f"run/{run.pk}/slot/2").fence == 0
    assert claim(teammate, run, "host:2").attempt.slot.index == 1
    plan_services.run_set_state(
        workspace_id=run.workspace_id, run_id=run.pk, state="closed", actor="boss"
    )
    with pytest.raises(RunClosed):
        plan_services.run_add_slots(
            workspace_id=run.workspace_id, run_id=run.pk, count=1, actor="boss", reason="more"
        )
    with pytest.raises(ValidationFailed):
        plan_services.run_add_slots(
            workspace_id=run.workspace_id, run_id=run.pk, count=0, actor="boss", reason="none"
        )


def test_reopening_a_closed_run_whose_slots_are_all_done_makes_it_done(
    owner, one_slot, frozen_clock
) -> None:
    finish(owner, claim(owner, one_slot))
    closed = plan_services.run_set_state(
        workspace_id=one_slot.workspace_id, run_id=one_slot.pk, state="closed", actor="boss"
    )
    assert closed.state == RunState.CLOSED
    reopened = plan_services.run_set_state(
        workspace_id=one_slot.workspace_id, run_id=one_slot.pk, state="open", actor="boss"
    )
    assert reopened.state == RunState.DONE
    with pytest.raises(ValidationFailed):
        plan_services.run_set_state(
            workspace_id=one_slot.workspace_id, run_id=one_slot.pk, state="done", actor="boss"
        )


def test_a_closed_run_stays_closed_when_its_last_slot_finishes(owner, one_slot, frozen_clock):
    view = claim(owner, one_slot)
    plan_services.run_set_state(
        workspace_id=one_slot.workspace_id, run_id=one_slot.pk, state="closed", actor="boss"
    )
    finish(owner, view)  # a closed run's attempts go on
    one_slot.refresh_from_db()
    assert one_slot.state == RunState.CLOSED
    assert states(one_slot) == ["done"]
    assert events("run_done") == []


def test_a_done_slot_stays_done_long_after_its_last_deadline(
    owner, teammate, two_slots, frozen_clock
) -> None:
    finish(owner, claim(owner, two_slots))
    # A retired lease's deadline passes like any other; only a held lease can be lost.
    clock.advance(100 + 60 + 1)
    assert states(two_slots) == ["done", "open"]
    assert claim(teammate, two_slots, "host:2").attempt.slot.index == 1
    with pytest.raises(NoOpenSlot):
        claim(owner, two_slots, "host:3")
    with pytest.raises(SlotTaken):
        claim(owner, two_slots, "host:3", slot=0)
