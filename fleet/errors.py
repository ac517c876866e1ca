"""The refusals of claims and tenures, with the contract's codes."""

from __future__ import annotations

from apikit.errors import GroundControlError


class NoOpenSlot(GroundControlError):
    """Every slot of the run is held or done (`slots`, `held`, `done`)."""

    code = "no_open_slot"
    http_status = 409


class SlotTaken(GroundControlError):
    """Another hand holds the slot asked for (`holder`, `fence`)."""

    code = "slot_taken"
    http_status = 409


class RunClosed(GroundControlError):
    """The run is closed or done: it takes no claims."""

    code = "run_closed"
    http_status = 409


class SlotNotDone(GroundControlError):
    """Reopening a slot that is open or held: only a finished (done) slot can be reopened."""

    code = "slot_not_done"
    http_status = 409


class CapabilityMissing(GroundControlError):
    """A claim by a hand that lacks a capability the run needs (`missing` names them). 409 as
    the other claim denials: the run does not take this hand, as a closed run takes nobody;
    it is no question of the key's authority (403) and a supervisor's change can resolve it."""

    code = "capability_missing"
    http_status = 409


class BudgetReached(GroundControlError):
    """A claim in a lane whose budget for the current period has been reached."""

    code = "budget_reached"
    http_status = 409


class RunWaiting(GroundControlError):
    """A claim on a run that waits for runs not yet done (`waiting_for`: each one's run, title
    and state): its slots take claims once every run it depends on is done."""

    code = "run_waiting"
    http_status = 409


class DependencyCycle(GroundControlError):
    """Dependencies that would close a cycle of runs waiting for each other (`cycle`: the run
    ids, from the run changed back to it); nothing was written."""

    code = "dependency_cycle"
    http_status = 409
