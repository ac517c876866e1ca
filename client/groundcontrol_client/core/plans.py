"""A supervisor's plan as the server answers it: lanes, work packages and a run's timeline
(`/lanes`, `/lanes/{slug}/work-packages`, `/runs/{id}/timeline`), typed and read-only, the full
JSON kept in `raw` as every model of the client does (`groundcontrol_client.core.wire`); and the
sentences gctl says them in (a run's standing, an attempt in a supervisor's list, a timeline's
line). The calls that fetch them are `core.planning`'s."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from groundcontrol_client.core.errors import hand_called
from groundcontrol_client.core.models import (
    Attempt,
    Lease,
    Run,
    Slot,
    describe_required,
    describe_window,
)
from groundcontrol_client.core.when import absolute
from groundcontrol_client.core.wire import (
    Number,
    OrDefault,
    Text,
    Time,
    WholeNumber,
    WireModel,
)


class LaneRecord(WireModel, title="lane"):
    """A lane: a standing stream of work, with the heartbeat interval and grace its runs take
    unless they say otherwise (None: the server's defaults). `closed_at`: set once the lane is
    closed."""

    id: WholeNumber
    slug: Text
    name: Text = ""
    # None: the server's default.
    heartbeat_interval_s: Number | None = None
    grace_s: Number | None = None
    closed_at: Time = None
    created_at: Time = None


class WorkPackage(WireModel, title="work package"):
    """A lane's unit of planned work (an issue, a ticket), unique by `key` in its lane; its
    runs are the steps (`Client.package_runs`)."""

    id: WholeNumber
    lane: Text = ""
    key: Text
    title: Text = ""
    external_ref: Text | None = None
    state: Text = ""  # open | closed
    created_at: Time = None


class TimelineEntry(WireModel, title="timeline entry"):
    """One thing that happened under a run (`GET /runs/{id}/timeline`), oldest first: a claim,
    a report, a directive, a lease taken or released under it, a fence verified, an
    attestation, a friction report, a refusal. `id` is stable and unique within the run;
    `text` says it in a sentence; `data` holds the rest as recorded."""

    id: Text
    at: Time = None
    kind: Text
    hand: Text | None = None
    process_id: Text | None = None
    attempt: WholeNumber | None = None
    slot: WholeNumber | None = None
    resource: Text | None = None
    fence: WholeNumber | None = None
    text: Text = ""
    data: OrDefault[dict[str, Any]] = {}


# --- sentences ------------------------------------------------------------------------------


def _runs_named(ids: Iterable[int | None], known: Mapping[int, Run]) -> str:
    """`run 10 'build' (open) and run 11 (done)`: each run with its title and state when known
    (a run of another lane, which a lane-limited key may not see: "a run of another lane")."""
    said = []
    for run_id in ids:
        run = known.get(run_id) if run_id is not None else None
        if run_id is None:
            said.append("a run of another lane")
        elif run is None:
            said.append(f"run {run_id}")
        else:
            said.append(f"run {run_id} '{run.title}' ({run.state})")
    if len(said) <= 1:
        return "".join(said)
    return ", ".join(said[:-1]) + f" and {said[-1]}"


def _slots(run: Run, slots: Iterable[Slot] | None) -> str:
    """How its slots stand: counted from `slots` when given (a run's own answer has only its
    total), else from the answer's counts when it has them (the runs list's)."""
    total = run.slots.total
    if slots is not None:
        states = [slot.state for slot in slots]
        counts = {name: states.count(name) for name in ("open", "held", "done")}
        total = len(states)
    elif "slots_by_state" in run.raw or isinstance(run.raw.get("slots"), Mapping):
        counts = {"open": run.slots.open, "held": run.slots.held, "done": run.slots.done}
    else:
        return f"{total} slot{'' if total == 1 else 's'}"
    taken = [f"{counts[name]} {name}" for name in ("held", "done") if counts[name]]
    return f"{counts['open']} of {total} slot{'' if total == 1 else 's'} open" + (
        f" ({', '.join(taken)})" if taken else ""
    )


def describe_run_standing(
    run: Run,
    dependencies: Mapping[int, Run] | None = None,
    slots: Iterable[Slot] | None = None,
) -> str:
    """A run as a supervisor reads it: "run 12 'build' is open: 2 of 3 slots open (1 held),
    waits for run 10 'lint' (open); priority 1; lane rewalk, package GC-12" (`dependencies`:
    the runs it depends on, by id, to name them with their title and state; `slots`: its slots,
    to count them when the answer does not)."""
    known = dependencies or {}
    text = f"run {run.id} '{run.title}' is {run.state or 'open'}: {_slots(run, slots)}"
    if run.waiting_for:
        text += f", waits for {_runs_named(run.waiting_for, known)}"
    done = [run_id for run_id in run.depends_on if run_id not in run.waiting_for]
    if done:
        text += f", after {_runs_named(done, known)}"
    # A closed run is never done by itself: say what would end the wait.
    closed = [i for i in run.waiting_for if i in known and known[i].state == "closed"]
    if closed:
        are = "is" if len(closed) == 1 else "are"
        text += f"; it waits until {_runs_named(closed, {})} {are} reopened or dropped from"
        text += " its depends_on"
    text += f"; priority {run.priority}"
    if run.capabilities:
        text += f"; needs {', '.join(run.capabilities)}"
    package = run.work_package.get("key") or run.work_package.get("id") or "?"
    return text + f"; lane {run.lane}, package {package}"


def describe_run_settings(run: Run) -> str:
    """What a run asks of its hands: evidence, timings, idle rules."""
    timeout = run.raw.get("progress_timeout_s")
    idle = (
        f"idle after {timeout} s without progress, then {run.raw.get('idle_directive') or 'none'}"
        if timeout
        else "never idle"
    )
    return (
        f"evidence: {describe_required(run.evidence_required, run.evidence_grades)}; "
        f"heartbeat every {run.heartbeat_interval_s:g} s, grace {run.grace_s:g} s; {idle}"
    )


def describe_lane(lane: LaneRecord) -> str:
    closed = " [closed]" if lane.closed_at else ""
    name = f" ({lane.name})" if lane.name and lane.name != lane.slug else ""
    heartbeat = lane.heartbeat_interval_s
    grace = lane.grace_s
    return (
        f"lane {lane.slug}{name}{closed}: heartbeat every "
        + (f"{heartbeat:g} s" if heartbeat is not None else "(the server's default)")
        + ", grace "
        + (f"{grace:g} s" if grace is not None else "(the server's default)")
    )


def describe_package(package: WorkPackage) -> str:
    ref = f" ({package.external_ref})" if package.external_ref else ""
    return (
        f"work package {package.id} {package.key} '{package.title}' in lane {package.lane} "
        f"is {package.state or 'open'}{ref}"
    )


def describe_attempt(attempt: Attempt) -> str:
    """An attempt in a supervisor's list: "attempt 41 of run 12 slot 0: hand a (process
    host:1), live, directive continue, 80% along, its current window ends in 40 s"."""
    raw = attempt.raw
    facts = [f"{attempt.state}", f"directive {attempt.directive}"]
    percent = raw.get("progress_percent")
    if isinstance(percent, int | float) and not isinstance(percent, bool):
        facts.append(f"{percent:g}% along")
    if raw.get("idle") is True:
        facts.append("idle")
    if attempt.end_reason:
        facts.append(f"ended: {attempt.end_reason}")
    process = f" (process {attempt.process_id})" if attempt.process_id else ""
    window = describe_window(attempt.lease.expires_in_s) if not attempt.end_reason else ""
    return (
        f"attempt {attempt.id} of run {attempt.run} slot {attempt.slot}: "
        f"{hand_called(attempt.hand)}{process} at fence {attempt.fence}, "
        + ", ".join(facts)
        + window.replace(", live,", ",").replace(", late:", ";")
    )


def describe_break(lease: Lease) -> str:
    return (
        f"broke {lease.resource}: it is free at fence {lease.fence}; the holder's writes with "
        "an older fence are stale from now on"
    )


def describe_entry(entry: TimelineEntry) -> str:
    """One line of a run's timeline: its time (UTC), its kind and its sentence."""
    when = absolute(entry.at) if entry.at else "?"
    return f"{when}  {entry.kind}: {entry.text or entry.kind}"
