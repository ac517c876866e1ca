"""One run's timeline: everything that happened under it, oldest first, each entry with a
sentence; and the board's state for the run at any moment of it (the page's scrubber).

What is in it (`timeline_page`), read from the record as it was written:

1. The run's attempts' own events (claimed, late, stalled, lost, finished, released,
   directive_set, idle, budget, cost_voided, and a friction report or an attestation naming the
   attempt), the run's (run_closed, run_done, run_changed, slots_added, friction naming the
   run) and its slots' (slot_reopened, handoff_*), and every report of its attempts.
2. Each attempt's tenure (its hand, its process identity, from its claim to its end): the
   resource leases that hand took with that process identity within it (`lease_acquired`, whose
   `data.process_id` says which process; a `lease_taken_over` to or from it), and the end of
   each of those tenures (`lease_released`, `lease_expired`, `lease_broken`), whenever it came;
   the fences of those tenures and of the slot's tenure that someone asked about
   (`FenceVerification`); the hand's friction reports and refused calls (other than reads)
   within the tenure, and the refused calls of anyone on the run's and its attempts' paths.

A lease the same hand took with another process, or outside every tenure of the run, is not
the run's. To a lane-limited caller, a hand of another lane (a lane-less key may work in any
lane's run) stays unnamed (`apikit.concealing.ANOTHER_LANE`), and only its attempts' own
entries are shown: its leases, refused calls and friction are its lane's record, as
`GET /events` and `GET /refusals` hold them.

Order and pages: entries are ordered by (`at`, source, row id): the time, then events before
reports before fence verifications before refusals, then each table's id, a total order however
many entries share a time. A page's cursor is the last entry's position, so rows inserted after
it never shift a page; each source is read from that position with the page's limit (one
query each, whatever the run's size), and the sources merged. An entry's time is its
transaction's (the database's `now()` at its start), so a row committed just after a page was
read can sort before that page's end: a reader following a live run reads the last minute
again. Everything here reads; nothing writes.
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from datetime import datetime
from decimal import Decimal
from typing import Any

from django.db.models import BigIntegerField, Case, Exists, F, OuterRef, Q, QuerySet, When
from django.db.models.fields.json import KeyTextTransform
from django.db.models.functions import Cast
from django.utils.dateparse import parse_datetime

from apikit.concealing import ANOTHER_LANE
from apikit.errors import ValidationFailed
from fleet.attempts.checkpoints import checkpoint_document
from fleet.attempts.phases import TenureRecord, tenure_at, tenure_records
from fleet.models import Attempt, AttemptEnd, Report, Run
from fleet.plan.services import slot_resource
from leases.clock import db_now
from leases.models import (
    Event,
    EventKind,
    FenceStatus,
    FenceVerification,
    LeaseState,
    Refusal,
)

# Where refused calls name their path (the API's mount: groundcontrol/urls.py).
API_PATH = "/api/v1/"
# How much of a free text (a report's message, a reason, a refusal's sentence) a sentence quotes;
# the entry's `data` holds all of it.
QUOTE = 160
# The methods of a refused call that only read: not the run's unless on its paths.
READS = ["GET", "HEAD", "OPTIONS"]
# The JSON Lines export reads the timeline in pages of this many entries.
EXPORT_PAGE = 500

# The sources, in the order they take at one instant.
EVENT, REPORT, VERIFICATION, REFUSAL = 0, 1, 2, 3
_SOURCE_NAMES = {EVENT: "event", REPORT: "report", VERIFICATION: "verification", REFUSAL: "refusal"}

# The attempt's own events: shown to every caller who may read the run (a hand of another lane
# unnamed).
_ATTEMPT_KINDS = [
    EventKind.CLAIMED,
    EventKind.LATE,
    EventKind.STALLED,
    EventKind.LOST,
    EventKind.FINISHED,
    EventKind.RELEASED,
    EventKind.DIRECTIVE_SET,
    EventKind.IDLE,
    EventKind.BUDGET,
    EventKind.COST_VOIDED,
]
_HANDOFF_KINDS = [
    EventKind.HANDOFF_REQUESTED,
    EventKind.HANDOFF_DECLINED,
    EventKind.HANDOFF_RELEASED,
    EventKind.HANDOFF_GRANTED,
    EventKind.HANDOFF_WITHDRAWN,
]
_RUN_KINDS = [
    EventKind.RUN_CLOSED,
    EventKind.RUN_DONE,
    EventKind.RUN_CHANGED,
    EventKind.SLOTS_ADDED,
]
_LEASE_ENDS = [EventKind.LEASE_RELEASED, EventKind.LEASE_EXPIRED]


@dataclass(frozen=True)
class Tenure:
    """One attempt: its hand and process identity on its slot, from its claim to its end."""

    attempt: int
    hand: str
    process_id: str
    slot: int
    resource: str
    fence: int
    start: datetime
    end: datetime | None
    ended: str | None

    def covers(self, at: datetime) -> bool:
        return self.start <= at and (self.end is None or at <= self.end)

    def window(self, prefix: str = "") -> Q:
        """Its time, as a filter on `<prefix>at`."""
        within = Q(**{f"{prefix}at__gte": self.start})
        if self.end is not None:
            within &= Q(**{f"{prefix}at__lte": self.end})
        return within


@dataclass(frozen=True)
class TimelineScope:
    """What the timeline of `run` reads, for a caller who may not read the names in `hidden`."""

    run: Run
    tenures: tuple[Tenure, ...]
    hidden: frozenset[str] = frozenset()
    # The caller's rule for names it may not read (None: it reads every name).
    conceal: Callable[[frozenset[str]], frozenset[str]] | None = None
    # A lane-limited caller's lane: the runs of other lanes a change of what the run waits for
    # names are counted to it, never named (`unseen_runs`, per page).
    lane_id: int | None = None
    unseen_runs: frozenset[int] = frozenset()

    @property
    def workspace_id(self) -> int:
        return self.run.workspace_id

    @property
    def attempt_ids(self) -> list[int]:
        return [t.attempt for t in self.tenures]

    @property
    def shown_tenures(self) -> list[Tenure]:
        """The tenures whose hand the caller may read: only theirs bring the hand's own record."""
        return [t for t in self.tenures if t.hand not in self.hidden]

    @property
    def since(self) -> datetime:
        return self.run.created_at

    def name(self, hand: str | None) -> str:
        """How a sentence names `hand`."""
        if not hand:
            return "someone"
        return ANOTHER_LANE if hand in self.hidden else hand

    def tenure_of(
        self, hand: str | None, at: datetime, process_id: str | None = None
    ) -> Tenure | None:
        """The tenure of `hand` (with `process_id`, if given) at `at`; else that hand's latest
        one begun by then (a lease taken under it may end after it)."""
        mine = [
            t
            for t in self.tenures
            if t.hand == hand and (process_id is None or t.process_id == process_id)
        ]
        for tenure in mine:
            if tenure.covers(at):
                return tenure
        begun = [t for t in mine if t.start <= at]
        return max(begun, key=lambda t: t.start) if begun else None


def timeline_scope(
    run: Run,
    *,
    conceal: Callable[[frozenset[str]], frozenset[str]] | None = None,
    lane_id: int | None = None,
) -> TimelineScope:
    """The run's tenures (one query) and, for a caller who may not read every name, which of
    their hands it may not (`conceal`, from `apikit.context.CallContext`: one query more)."""
    rows = (
        Attempt.objects.filter(workspace_id=run.workspace_id, run=run)
        .order_by("claimed_at", "id")
        .values_list(
            "pk",
            "hand__name",
            "process_id",
            "slot__index",
            "fence",
            "claimed_at",
            "ended_at",
            "end",
        )
    )
    tenures = tuple(
        Tenure(
            attempt=pk,
            hand=hand,
            process_id=process_id,
            slot=index,
            resource=slot_resource(run.pk, index),
            fence=fence,
            start=claimed_at,
            end=ended_at,
            ended=end,
        )
        for pk, hand, process_id, index, fence, claimed_at, ended_at, end in rows
    )
    names = frozenset(t.hand for t in tenures)
    hidden = conceal(names) if conceal is not None and names else frozenset()
    return TimelineScope(
        run=run, tenures=tenures, hidden=frozenset(hidden), conceal=conceal, lane_id=lane_id
    )


# --- Positions and cursors ---------------------------------------------------------------------


@dataclass(frozen=True, order=True)
class Position:
    """Where an entry stands in the timeline's total order."""

    at: datetime
    source: int
    row: int

    def cursor(self) -> str:
        raw = json.dumps([self.at.isoformat(), self.source, self.row], separators=(",", ":"))
        return base64.urlsafe_b64encode(raw.encode()).decode().rstrip("=")


def position_from_cursor(cursor: str) -> Position:
    """The position a cursor this module gave out names; anything else is a validation_error."""
    try:
        padded = cursor + "=" * (-len(cursor) % 4)
        at_text, source, row = json.loads(base64.urlsafe_b64decode(padded.encode("ascii")))
        at = parse_datetime(at_text) if isinstance(at_text, str) and at_text.isascii() else None
        valid = (
            at is not None
            and at.tzinfo is not None
            and type(source) is int
            and source in _SOURCE_NAMES
            and type(row) is int
            and 0 < row < 2**63
        )
    except (ValueError, TypeError, UnicodeError, binascii.Error):
        valid = False
    if not valid:
        raise ValidationFailed(
            "cursor is not one this server gave out", fields={"cursor": ["An opaque cursor."]}
        )
    return Position(at, source, row)  # type: ignore[arg-type]


def _after(position: Position | None, source: int, prefix: str = "") -> Q:
    """This source's rows after `position` in the total order."""
    if position is None:
        return Q()
    at = f"{prefix}at"
    later = Q(**{f"{at}__gt": position.at})
    if source > position.source:
        return later | Q(**{at: position.at})
    if source == position.source:
        return later | Q(**{at: position.at, f"{prefix}pk__gt": position.row})
    return later


# --- Entries -------------------------------------------------------------------------------------


@dataclass
class Entry:
    position: Position
    kind: str
    text: str
    hand: str | None = None
    process_id: str | None = None
    attempt: int | None = None
    slot: int | None = None
    resource: str | None = None
    fence: int | None = None
    data: dict[str, Any] = field(default_factory=dict)

    @property
    def id(self) -> str:
        return f"{_SOURCE_NAMES[self.position.source]}-{self.position.row}"

    @property
    def at(self) -> datetime:
        return self.position.at

    def json(self) -> dict[str, Any]:
        """The entry as the API answers it (`GET /runs/{id}/timeline`)."""
        return {
            "id": self.id,
            "at": self.at.isoformat(),
            "kind": self.kind,
            "hand": self.hand,
            "process_id": self.process_id,
            "attempt": self.attempt,
            "slot": self.slot,
            "resource": self.resource,
            "fence": self.fence,
            "text": self.text,
            "data": self.data,
        }


def _sentence(text: str) -> str:
    """`text` ending as a sentence does (a quoted message may not)."""
    return text if text.endswith((".", "!", "?", "…")) else f"{text}."


def _quote(text: str) -> str:
    text = " ".join((text or "").split())
    return text if len(text) <= QUOTE else text[: QUOTE - 1] + "…"


def _usd(value: object) -> str:
    """`"2.500000"` as `$2.50`: cents at least, no trailing zeros beyond them."""
    try:
        amount = Decimal(str(value)).normalize()
    except ArithmeticError:
        return "its cost"
    exponent = amount.as_tuple().exponent
    if isinstance(exponent, int) and exponent > -2:
        amount = amount.quantize(Decimal("0.01"))
    return f"${amount:f}"


def _jsonable(value: Any) -> Any:
    if isinstance(value, Decimal):
        return str(value)
    if isinstance(value, datetime):
        return value.isoformat()
    return value


# --- The sources ---------------------------------------------------------------------------------


def _acquired_by_tenures(tenures: list[Tenure]) -> Q:
    """`lease_acquired` events of a hand's process within its tenure, for any of `tenures`."""
    q = Q(pk__in=[])
    for t in tenures:
        q |= Q(hand=t.hand, data__process_id=t.process_id) & t.window()
    return q


def events_query(scope: TimelineScope) -> QuerySet[Event]:
    """Every event of the run's timeline (source 1 and the events of source 2), unordered."""
    run, ids, shown = scope.run, scope.attempt_ids, scope.shown_tenures
    own = Q(attempt_id__in=ids, kind__in=_ATTEMPT_KINDS) if ids else Q(pk__in=[])
    slots = [slot_resource(run.pk, index) for index in range(run.slot_count)]
    mine = (
        Q(attempt_id__in=ids)
        | Q(kind__in=[*_HANDOFF_KINDS, EventKind.SLOT_REOPENED], resource__in=slots)
        | Q(kind__in=[*_RUN_KINDS, EventKind.FRICTION], data__run=run.pk)
    )
    if ids:
        mine |= Q(kind=EventKind.ATTESTED, data__backs__in=ids)
    for t in shown:
        mine |= (
            Q(kind=EventKind.LEASE_ACQUIRED, hand=t.hand, data__process_id=t.process_id)
            & t.window()
        ) | (
            Q(kind=EventKind.LEASE_TAKEN_OVER, hand=t.hand)
            & (Q(data__process_id=t.process_id) | Q(data__from_process_id=t.process_id))
            & t.window()
        )
        mine |= Q(kind=EventKind.FRICTION, hand=t.hand) & t.window()
    if shown:
        # The end of each tenure taken under the run, whenever it came: its node's events at
        # its fence (a break names the node's next fence and the ended one in `broken_fence`).
        taken = Event.objects.filter(
            workspace_id=scope.workspace_id,
            kind=EventKind.LEASE_ACQUIRED,
            hand=OuterRef("hand"),
            resource=OuterRef("resource"),
            fence=OuterRef("tenure_fence"),
        ).filter(_acquired_by_tenures(shown))
        mine |= (
            Q(kind__in=[*_LEASE_ENDS, EventKind.LEASE_BROKEN])
            & Q(hand__in={t.hand for t in shown})
            & Exists(taken)
        )
    hidden = list(scope.hidden)
    return (
        Event.objects.filter(workspace_id=scope.workspace_id, at__gte=scope.since)
        .annotate(
            tenure_fence=Case(
                When(
                    kind=EventKind.LEASE_BROKEN,
                    then=Cast(KeyTextTransform("broken_fence", "data"), BigIntegerField()),
                ),
                default=F("fence"),
            )
        )
        .filter(own | (mine & ~Q(hand__in=hidden)) if hidden else own | mine)
    )


def reports_query(scope: TimelineScope) -> QuerySet[Report]:
    return Report.objects.filter(workspace_id=scope.workspace_id, attempt_id__in=scope.attempt_ids)


def verifications_query(scope: TimelineScope) -> QuerySet[FenceVerification]:
    """The fences asked about of the run's slot tenures and of the leases taken under them."""
    asked = Q(pk__in=[])
    for t in scope.tenures:
        asked |= Q(resource=t.resource, fence=t.fence)
    shown = scope.shown_tenures
    if shown:
        taken = Event.objects.filter(
            workspace_id=scope.workspace_id,
            kind=EventKind.LEASE_ACQUIRED,
            resource=OuterRef("resource"),
            fence=OuterRef("fence"),
        ).filter(_acquired_by_tenures(shown))
        asked |= Exists(taken)
    verifications = FenceVerification.objects.filter(
        workspace_id=scope.workspace_id, at__gte=scope.since
    ).filter(asked)
    if scope.hidden:
        verifications = verifications.exclude(hand__in=list(scope.hidden))
    return verifications


def refusals_query(scope: TimelineScope) -> QuerySet[Refusal]:
    """Refused calls of the run's hands within their tenures, and anyone's on the run's paths."""
    run_path = f"{API_PATH}runs/{scope.run.pk}"
    about = Q(path=run_path) | Q(path__startswith=f"{run_path}/")
    for attempt in scope.attempt_ids:
        attempt_path = f"{API_PATH}attempts/{attempt}"
        about |= Q(path=attempt_path) | Q(path__startswith=f"{attempt_path}/")
    # A hand's refused reads (a GET of another record) are not acts under the run: its refused
    # writes are.
    acts = ~Q(method__in=READS)
    for t in scope.shown_tenures:
        about |= Q(hand=t.hand) & t.window() & acts
    refusals = Refusal.objects.filter(workspace_id=scope.workspace_id, at__gte=scope.since).filter(
        about
    )
    if scope.hidden:
        refusals = refusals.exclude(hand__in=list(scope.hidden))
    return refusals


# --- Sentences -----------------------------------------------------------------------------------


def _event_entry(scope: TimelineScope, event: Event) -> Entry:
    data = dict(event.data or {})
    process = data.get("process_id") if isinstance(data.get("process_id"), str) else None
    tenure = None
    if event.attempt_id is not None:
        tenure = next((t for t in scope.tenures if t.attempt == event.attempt_id), None)
    elif event.kind == EventKind.ATTESTED and isinstance(data.get("backs"), int):
        tenure = next((t for t in scope.tenures if t.attempt == data["backs"]), None)
    elif event.kind not in (*_HANDOFF_KINDS, *_RUN_KINDS, EventKind.SLOT_REOPENED):
        tenure = scope.tenure_of(event.hand, event.at, process)
    if event.hand in scope.hidden:
        # What a hand of another lane said (its reason) is its lane's, as its name is.
        data.pop("reason", None)
    if event.kind == EventKind.RUN_CHANGED:
        _conceal_dependencies(scope, data)
    if event.actor:
        data.setdefault("actor", event.actor)
    slot = tenure.slot if tenure else None
    if slot is None and event.resource.startswith(f"run/{scope.run.pk}/slot/"):
        slot = int(event.resource.rsplit("/", 1)[1])
    return Entry(
        position=Position(event.at, EVENT, event.pk),
        kind=event.kind,
        text=_sentence(_event_text(scope, event, data, slot)),
        hand=event.hand or None,
        process_id=process or (tenure.process_id if tenure and tenure.hand == event.hand else None),
        attempt=tenure.attempt if tenure else event.attempt_id,
        slot=slot,
        resource=event.resource or None,
        fence=event.fence,
        data=data,
    )


def _event_text(scope: TimelineScope, event: Event, data: dict[str, Any], slot: int | None) -> str:
    who = scope.name(event.hand)
    actor = scope.name(event.actor) if event.actor and event.actor != "system" else "the sweep"
    kind, resource, fence = event.kind, event.resource, event.fence
    reason = _quote(str(data.get("reason") or ""))
    because = f": {reason}" if reason else ""
    where = f"slot {slot}" if slot is not None else resource
    if kind == EventKind.CLAIMED:
        process = data.get("process_id")
        as_process = f" as process {process}" if process and event.hand not in scope.hidden else ""
        return f"{who} claimed {where} (fence {fence}){as_process}."
    if kind == EventKind.LATE:
        return f"{who} was late on {where}: no heartbeat by its deadline."
    if kind == EventKind.STALLED:
        return f"{who} stalled on {where}: half its grace passed without a heartbeat."
    if kind == EventKind.LOST:
        return f"{who} lost {where}{because}."
    if kind == EventKind.FINISHED:
        return f"{who} finished {where}."
    if kind == EventKind.RELEASED:
        return f"{who} released {where}{because}."
    if kind == EventKind.DIRECTIVE_SET:
        return f"{actor} told {who} to {data.get('directive', 'continue')} on {where}."
    if kind == EventKind.IDLE:
        return f"{who} was flagged idle on {where}: no progress within the run's timeout."
    if kind == EventKind.BUDGET:
        return f"The lane's budget was reached while {who} held {where}."
    if kind == EventKind.COST_VOIDED:
        cost = _usd(data.get("cost_usd"))
        return f"{actor} voided the cost ({cost}) of {who}'s report on {where}{because}."
    if kind == EventKind.LEASE_ACQUIRED:
        mode = data.get("mode") or "exclusive"
        ttl = data.get("ttl_s")
        for_ttl = f" for {ttl:g}s" if isinstance(ttl, int | float) else ""
        return f"{who} took the {mode} lease on {resource} (fence {fence}){for_ttl}."
    if kind == EventKind.LEASE_RELEASED:
        return f"{who} released the lease on {resource} (fence {fence}){because}."
    if kind == EventKind.LEASE_EXPIRED:
        return f"{who}'s lease on {resource} (fence {fence}) expired: it was not renewed in time."
    if kind == EventKind.LEASE_BROKEN:
        ended = data.get("broken_fence", fence)
        return f"{actor} broke {who}'s lease on {resource} (fence {ended}){because}."
    if kind == EventKind.LEASE_TAKEN_OVER:
        taken = data.get("taken_resource", resource)
        return f"{who} took over {taken} from another of its processes (now fence {fence})."
    if kind == EventKind.ATTESTED:
        result = "passed" if data.get("result") == "pass" else "failed"
        return f"{who} attested that {data.get('url', 'the evidence')} {result}."
    if kind == EventKind.FRICTION:
        minutes = data.get("minutes") or 0
        lost = f", {minutes} min lost" if minutes else ""
        return f"{who} reported friction{lost}: {_quote(str(data.get('what') or ''))}"
    if kind in _HANDOFF_KINDS:
        asker = scope.name(data.get("asker") if isinstance(data.get("asker"), str) else None)
        verb = {
            EventKind.HANDOFF_REQUESTED: f"{asker} asked {who} to hand over",
            EventKind.HANDOFF_DECLINED: f"{who} declined {asker}'s request for",
            EventKind.HANDOFF_RELEASED: f"{who} released, for {asker},",
            EventKind.HANDOFF_GRANTED: f"{who}'s {where} was granted to {asker}:",
            EventKind.HANDOFF_WITHDRAWN: f"{asker} withdrew the request for",
        }[kind]
        if kind == EventKind.HANDOFF_GRANTED:
            return f"{verb} the handoff was granted."
        return f"{verb} {where}{because}."
    if kind == EventKind.RUN_CLOSED:
        return f"{actor} closed the run."
    if kind == EventKind.RUN_DONE:
        return "The run was done: every slot was finished."
    if kind == EventKind.RUN_CHANGED:
        return f"{actor} changed the run: {_changes_text(data)}."
    if kind == EventKind.SLOTS_ADDED:
        return f"{actor} added slots to the run."
    if kind == EventKind.SLOT_REOPENED:
        return f"{actor} reopened {where}."
    return f"{kind.replace('_', ' ').capitalize()} ({resource or who})."


# How a run_changed sentence names each field it can change, in this order.
_CHANGED_FIELDS = {
    "priority": "priority",
    "depends_on": "waits for",
    "capabilities": "capabilities",
    "progress_timeout_s": "progress timeout",
    "idle_directive": "idle directive",
}


def _changed_value(setting: str, value: Any) -> str:
    if setting == "depends_on":
        runs = [f"run {run}" if run is not None else "a run of another lane" for run in value or []]
        return ", ".join(runs) or "no run"
    if setting == "capabilities":
        return ", ".join(value or []) or "none"
    if setting == "progress_timeout_s":
        return f"{value} s" if value is not None else "none"
    return str(value)


def _changes_text(data: dict[str, Any]) -> str:
    """`data.changed` of a run_changed event, as a clause: `priority 2 → 0; waits for run 4`."""
    changed = data.get("changed") if isinstance(data.get("changed"), dict) else {}
    said = []
    for setting, name in _CHANGED_FIELDS.items():
        change = changed.get(setting)
        if isinstance(change, dict):
            was, now = change.get("before"), change.get("after")
            said.append(f"{name} {_changed_value(setting, was)} → {_changed_value(setting, now)}")
    return "; ".join(said) or "nothing"


def _unseen_dependencies(scope: TimelineScope, events: list[Event]) -> frozenset[int]:
    """Of the runs the page's run_changed events name as waited for, those of another lane
    than a lane-limited caller's (one query, none when the page names none)."""
    if scope.lane_id is None:
        return frozenset()
    named: set[int] = set()
    for event in events:
        if event.kind != EventKind.RUN_CHANGED:
            continue
        change = (event.data.get("changed") or {}).get("depends_on")
        if isinstance(change, dict):
            for side in ("before", "after"):
                named |= {run for run in change.get(side) or [] if isinstance(run, int)}
    if not named:
        return frozenset()
    seen = Run.objects.in_lane(scope.lane_id).filter(workspace_id=scope.workspace_id, pk__in=named)
    return frozenset(named - set(seen.values_list("pk", flat=True)))


def _conceal_dependencies(scope: TimelineScope, data: dict[str, Any]) -> None:
    """A run_changed event's runs waited for, as a lane-limited caller may read them: a run of
    another lane is null (after its lane's), as in `GET /runs/{id}`'s `depends_on`."""
    changed = data.get("changed")
    change = changed.get("depends_on") if isinstance(changed, dict) else None
    if not isinstance(change, dict) or not scope.unseen_runs:
        return
    shown = {}
    for side in ("before", "after"):
        runs = change.get(side) or []
        seen = [run for run in runs if run not in scope.unseen_runs]
        shown[side] = seen + [None] * (len(runs) - len(seen))
    data["changed"] = {**changed, "depends_on": shown}


def _report_entry(scope: TimelineScope, report: Report) -> Entry:
    tenure = next((t for t in scope.tenures if t.attempt == report.attempt_id), None)
    hand = tenure.hand if tenure else None
    who = scope.name(hand)
    # What a hand of another lane wrote (its message, details, checkpoint) is its lane's.
    said_by_them = hand is not None and hand in scope.hidden
    percent = f" at {report.percent:g}%" if report.percent is not None else ""
    message = "" if said_by_them else _quote(report.message)
    said = f": {message}" if message else ""
    checkpoint = " with a checkpoint" if report.checkpoint is not None else ""
    where = f" on slot {tenure.slot}" if tenure else ""
    text = {
        "heartbeat": f"{who} sent a heartbeat{where}{checkpoint}{said}",
        "progress": f"{who} reported progress{percent}{where}{checkpoint}{said}",
        "blocker": f"{who} reported a blocker{where}{checkpoint}{said}",
        "note": f"{who} noted{where}{checkpoint}{said}",
    }.get(report.kind, f"{who} reported{where}{said}")
    return Entry(
        position=Position(report.at, REPORT, report.pk),
        kind="report",
        text=_sentence(text.rstrip(".")),
        hand=hand,
        process_id=report.process_id or (tenure.process_id if tenure else None),
        attempt=report.attempt_id,
        slot=tenure.slot if tenure else None,
        resource=tenure.resource if tenure else None,
        fence=tenure.fence if tenure else None,
        data={
            "report": report.pk,
            "kind": report.kind,
            "message": None if said_by_them else report.message,
            "percent": report.percent,
            "details": None if said_by_them else report.details,
            "checkpoint": None if said_by_them else checkpoint_document(report.checkpoint),
            "renewed": report.renewed,
            "tokens_in": report.tokens_in,
            "tokens_out": report.tokens_out,
            "cost_usd": _jsonable(report.cost_usd),
        },
    )


_FENCE_ANSWERS = {
    FenceStatus.CURRENT: "it was current",
    FenceStatus.SUPERSEDED: "it was superseded",
    FenceStatus.UNKNOWN: "it was unknown",
    FenceStatus.NOT_HOLDER: "it was not the asker's tenure",
}


def _verification_entry(scope: TimelineScope, row: FenceVerification) -> Entry:
    tenure = next(
        (t for t in scope.tenures if t.resource == row.resource and t.fence == row.fence), None
    )
    answer = _FENCE_ANSWERS.get(row.status, row.status)
    if row.status == FenceStatus.SUPERSEDED and row.current_fence is not None:
        answer += f" (now fence {row.current_fence})"
    return Entry(
        position=Position(row.at, VERIFICATION, row.pk),
        kind="fence_verified",
        text=f"{scope.name(row.hand)} verified fence {row.fence} of {row.resource}: {answer}.",
        hand=row.hand or None,
        attempt=tenure.attempt if tenure else None,
        slot=tenure.slot if tenure else None,
        resource=row.resource,
        fence=row.fence,
        data={"status": row.status, "current_fence": row.current_fence},
    )


def _refusal_entry(scope: TimelineScope, row: Refusal) -> Entry:
    tenure = scope.tenure_of(row.hand, row.at)
    said = _quote(row.message)
    return Entry(
        position=Position(row.at, REFUSAL, row.pk),
        kind="refusal",
        text=_sentence(
            f"{scope.name(row.hand)} was refused {row.code} on {row.method} {row.path}"
            + (f": {said}" if said else "")
        ),
        hand=row.hand or None,
        attempt=tenure.attempt if tenure and tenure.covers(row.at) else None,
        slot=tenure.slot if tenure and tenure.covers(row.at) else None,
        data={
            "code": row.code,
            "message": row.message,
            "method": row.method,
            "path": row.path,
            "request_id": row.request_id,
            "details": row.details,
        },
    )


# --- Pages ---------------------------------------------------------------------------------------


def timeline_page(
    scope: TimelineScope, *, after: Position | None = None, limit: int = 100
) -> tuple[list[Entry], Position | None]:
    """The `limit` entries after `after` (from the start: None), oldest first, and the position
    to read on from (None: this was the last page). One query per source (four), however long
    the run, one more for a caller who may not read every name, and one more for a lane-limited
    caller's page that holds a change of what the run waits for (`_unseen_dependencies`): each
    source reads its first `limit + 1` rows after `after`; the first `limit + 1` of them all
    decide the page.

    The names the page's rows carry that the caller may not read (an asker, a verifier, a
    refused hand: not only the run's own hands) are unnamed in its sentences, and the refused
    calls and friction reports of such a hand are left out (their text is its lane's)."""
    take = limit + 1
    events = list(events_query(scope).filter(_after(after, EVENT)).order_by("at", "pk")[:take])
    reports = list(reports_query(scope).filter(_after(after, REPORT)).order_by("at", "pk")[:take])
    verifications = list(
        verifications_query(scope).filter(_after(after, VERIFICATION)).order_by("at", "pk")[:take]
    )
    refusals = list(
        refusals_query(scope).filter(_after(after, REFUSAL)).order_by("at", "pk")[:take]
    )
    positions = sorted(
        [Position(e.at, EVENT, e.pk) for e in events]
        + [Position(r.at, REPORT, r.pk) for r in reports]
        + [Position(v.at, VERIFICATION, v.pk) for v in verifications]
        + [Position(r.at, REFUSAL, r.pk) for r in refusals]
    )
    next_position = positions[limit - 1] if len(positions) > limit else None
    if next_position is not None:
        last = next_position

        def within(at: datetime, source: int, pk: int) -> bool:
            return Position(at, source, pk) <= last

        events = [e for e in events if within(e.at, EVENT, e.pk)]
        reports = [r for r in reports if within(r.at, REPORT, r.pk)]
        verifications = [v for v in verifications if within(v.at, VERIFICATION, v.pk)]
        refusals = [r for r in refusals if within(r.at, REFUSAL, r.pk)]
    if scope.conceal is not None:
        names = {e.hand for e in events} | {e.actor for e in events}
        names |= {e.data.get("asker") for e in events if isinstance(e.data, dict)}  # type: ignore[misc]
        names |= {v.hand for v in verifications} | {r.hand for r in refusals}
        wanted = frozenset(n for n in names if isinstance(n, str) and n) - scope.hidden
        elsewhere = scope.conceal(wanted) if wanted else frozenset()
        if elsewhere:
            scope = replace(scope, hidden=scope.hidden | elsewhere)
            refusals = [r for r in refusals if r.hand not in elsewhere]
            events = [
                e for e in events if not (e.kind == EventKind.FRICTION and e.hand in elsewhere)
            ]
    unseen = _unseen_dependencies(scope, events)
    if unseen:
        scope = replace(scope, unseen_runs=unseen)
    entries = sorted(
        [_event_entry(scope, e) for e in events]
        + [_report_entry(scope, r) for r in reports]
        + [_verification_entry(scope, v) for v in verifications]
        + [_refusal_entry(scope, r) for r in refusals],
        key=lambda entry: entry.position,
    )
    return entries, next_position


def timeline_all(scope: TimelineScope, *, page: int = EXPORT_PAGE) -> Iterator[list[Entry]]:
    """Every entry, a page at a time (the export: a long run never sits in memory whole)."""
    after: Position | None = None
    while True:
        entries, after = timeline_page(scope, after=after, limit=page)
        if entries:
            yield entries
        if after is None:
            return


# --- The board at a moment -----------------------------------------------------------------------


@dataclass(frozen=True)
class SlotAt:
    """A slot as the board showed it at a moment: its holder's tenure (the latest begun by then),
    its state, the resource leases that tenure held, and its last report."""

    index: int
    state: str
    tenure: Tenure | None = None
    hand: str | None = None
    deadline: datetime | None = None
    leases: tuple[str, ...] = ()
    last_report: Report | None = None


@dataclass(frozen=True)
class RunAt:
    at: datetime
    slots: tuple[SlotAt, ...]


def run_state_at(scope: TimelineScope, at: datetime, *, now: datetime | None = None) -> RunAt:
    """The board's state for the run at `at`, from the record.

    A slot's holder is the latest tenure claimed at or before `at`. Until its end, its state is
    its bar's phase holding `at` (`fleet.attempts.phases.tenure_at`: the one reading of the
    record that the attempt bars draw, its claim, renewing reports, the sweep's late and stalled
    events, the lease's thresholds), with the deadline of the renewal in force then where the
    record holds it. From its end: done (finished), free (released), or lost until a new claim.
    The leases it held are those taken under it (`events_query`) by then and not ended by then.

    Queries: the holders still holding at `at` with their slot leases, their record
    (`tenure_records`, two), their last reports, the leases taken under the run: five, whatever
    the run's length (and the time, if `now`, the database's, is not given)."""
    run = scope.run
    holders: dict[int, Tenure] = {}
    for tenure in scope.tenures:  # in claim order: the latest begun by `at` wins
        if tenure.start <= at:
            holders[tenure.slot] = tenure
    holding = [t.attempt for t in holders.values() if t.end is None or at < t.end]
    attempts: dict[int, Attempt] = {}
    records: dict[int, TenureRecord] = {}
    if holding:
        now = now if now is not None else db_now()
        loaded = Attempt.objects.filter(workspace_id=scope.workspace_id, pk__in=holding)
        for attempt in loaded.select_related("lease"):
            attempt.run = run
            attempts[attempt.pk] = attempt
        records = tenure_records(attempts.values(), now)
    last = {
        r.attempt_id: r
        for r in Report.objects.filter(
            workspace_id=scope.workspace_id, attempt_id__in=scope.attempt_ids, at__lte=at
        )
        .order_by("attempt_id", "-at", "-id")
        .distinct("attempt_id")
    }
    held = _leases_held(scope, at)
    slots = []
    for index in range(run.slot_count):
        tenure = holders.get(index)
        if tenure is None:
            slots.append(SlotAt(index=index, state=LeaseState.FREE))
            continue
        deadline = None
        if tenure.attempt in records and now is not None:
            then = tenure_at(
                records[tenure.attempt],
                at,
                until=tenure.end or now,
                end=tenure.ended,
                ended_at=tenure.end,
            )
            state, deadline = then.state, then.deadline
        else:
            state = {
                AttemptEnd.FINISHED: "done",
                AttemptEnd.LOST: LeaseState.LOST,
            }.get(tenure.ended or "", LeaseState.FREE)
        holds = state not in (LeaseState.FREE, "done")
        slots.append(
            SlotAt(
                index=index,
                state=str(state),
                tenure=tenure,
                hand=scope.name(tenure.hand),
                deadline=deadline,
                leases=tuple(held.get(tenure.attempt, ())) if holds else (),
                last_report=last.get(tenure.attempt),
            )
        )
    return RunAt(at=at, slots=tuple(slots))


def _leases_held(scope: TimelineScope, at: datetime) -> dict[int, list[str]]:
    """By attempt, the resource leases its tenure held at `at` ("resource@fence")."""
    kinds = [EventKind.LEASE_ACQUIRED, EventKind.LEASE_TAKEN_OVER, *_LEASE_ENDS]
    kinds.append(EventKind.LEASE_BROKEN)
    rows = events_query(scope).filter(kind__in=kinds, at__lte=at).order_by("at", "pk")
    held: dict[tuple[str, str, int], int] = {}
    for event in rows.only("kind", "at", "hand", "resource", "fence", "data"):
        data = event.data or {}
        if event.kind == EventKind.LEASE_ACQUIRED:
            tenure = scope.tenure_of(event.hand, event.at, data.get("process_id"))
            if tenure is not None and event.fence is not None:
                held[(event.hand, event.resource, event.fence)] = tenure.attempt
        elif event.kind == EventKind.LEASE_TAKEN_OVER:
            taken = data.get("taken_fence")
            held.pop((event.hand, str(data.get("taken_resource")), taken), None)  # type: ignore[arg-type]
        else:
            fence = (
                data.get("broken_fence") if event.kind == EventKind.LEASE_BROKEN else event.fence
            )
            held.pop((event.hand, event.resource, fence), None)  # type: ignore[arg-type]
    out: dict[int, list[str]] = {}
    for (_, resource, fence), attempt in held.items():
        out.setdefault(attempt, []).append(f"{resource}@{fence}")
    return out


def run_span(scope: TimelineScope, now: datetime) -> tuple[datetime, datetime]:
    """The scrubber's range: from the run's creation to the last end of its tenures, or now
    while any runs (or before the first claim)."""
    start = scope.run.created_at
    if scope.tenures and all(t.end is not None for t in scope.tenures):
        end = max(t.end for t in scope.tenures if t.end is not None)
        return start, max(start, end)
    return start, max(start, now)
