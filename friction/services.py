"""Filing a friction report: one transaction writes the report, its links to the refused calls
it names, and its `friction` event (the webhook kind `friction` fires from it after commit).

Who may file what:

1. A supervisor (a key with `supervise`) files for any lane of its workspace; a lane-limited
   one for its own lane only (another lane, run or attempt answers not_found, as every lookup
   of a lane-limited key does).
2. A hand (any other key, `work`) files about its own attempts only (another hand's is
   `not_holder`), and for the lanes its key works in: a lane-limited key its own lane (another
   lane, or a run or attempt of one, is not_found), a key without a lane any lane of the
   workspace, as it may claim in any. A report names the lane of its attempt or run, else the
   lane given, else the key's lane, else the hand's.
3. The refused calls are named by request id and must be the workspace's (an unknown id, or
   another workspace's, is a validation_error naming it): a hand's own refusals, or, for a
   supervisor, those its key may list at `GET /refusals`. A request id names one call; a client
   that sent one id twice means its latest refusal.
"""

from __future__ import annotations

from typing import Any

from django.db import transaction

from apikit.api import request_id_for_header
from apikit.errors import ValidationFailed
from fleet import records as fleet_records
from fleet.attempts import selectors as attempt_selectors
from fleet.models import Attempt, Run
from fleet.plan import selectors as plan_selectors
from friction.models import FrictionRefusal, FrictionReport
from hands import selectors as hand_selectors
from hands.models import Hand, HandKey, Lane, Scope
from leases.audit import record_event, refusals_recorded
from leases.clock import db_now
from leases.errors import NotHolder
from leases.models import EventKind, Refusal
from leases.services import MAX_REASON_LENGTH

MAX_TEXT_LENGTH = MAX_REASON_LENGTH
# Minutes one report may say were lost: a working day and a half, more than any one obstacle
# costs before someone should have escalated it.
MAX_MINUTES = 2_000
MAX_REFUSALS = 20
# What the event carries of the report's text (the report itself holds all of it).
_EVENT_TEXT = 200


def _text(value: object, *, field: str, required: bool) -> str:
    if value is None or value == "":
        if required:
            raise ValidationFailed(f"{field} is required", fields={field: ["Say what happened."]})
        return ""
    if not isinstance(value, str) or len(value) > MAX_TEXT_LENGTH or "\x00" in value:
        raise ValidationFailed(
            f"{field} must be text of at most {MAX_TEXT_LENGTH} characters",
            fields={field: [f"At most {MAX_TEXT_LENGTH} characters, no NUL."]},
        )
    return value


def _minutes(value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not (0 <= value <= MAX_MINUTES):
        raise ValidationFailed(
            f"minutes must be a whole number from 0 to {MAX_MINUTES}",
            fields={"minutes": [f"An integer from 0 to {MAX_MINUTES}."]},
        )
    return value


def _request_ids(value: object) -> list[str]:
    if value is None:
        return []
    if not isinstance(value, list) or len(value) > MAX_REFUSALS:
        raise ValidationFailed(
            f"refusals must be a list of at most {MAX_REFUSALS} request ids",
            fields={"refusals": [f"At most {MAX_REFUSALS} request ids."]},
        )
    for position, item in enumerate(value):
        # A request id is what the server would keep of an X-Request-ID (apikit.api).
        if not isinstance(item, str) or request_id_for_header(item) != item:
            raise ValidationFailed(
                f"refusals[{position}] is not a request id",
                fields={"refusals": [f"refusals[{position}]: a request id (X-Request-ID)."]},
            )
    return list(dict.fromkeys(value))


def is_supervisor(key: HandKey) -> bool:
    return Scope.SUPERVISE.value in key.scopes


def _where(
    *,
    hand: Hand,
    key: HandKey,
    lane_slug: str | None,
    run_id: int | None,
    attempt_id: int | None,
) -> tuple[Lane | None, Run | None, Attempt | None]:
    """The report's lane, run and attempt, each checked against the key (rules 1 and 2)."""
    workspace_id, limit = hand.workspace_id, key.lane_id
    attempt = (
        attempt_selectors.attempt_get(
            workspace_id=workspace_id, attempt_id=attempt_id, lane_id=limit
        )
        if attempt_id is not None
        else None
    )
    if attempt is not None and not is_supervisor(key) and attempt.hand_id != hand.pk:
        raise NotHolder(f"attempt {attempt.pk} belongs to another hand")
    run = (
        plan_selectors.run_get(workspace_id=workspace_id, run_id=run_id, lane_id=limit)
        if run_id is not None
        else None
    )
    if attempt is not None:
        if run is not None and run.pk != attempt.run_id:
            raise ValidationFailed(
                f"attempt {attempt.pk} is of run {attempt.run_id}, not {run.pk}",
                fields={"run": [f"Attempt {attempt.pk} is of run {attempt.run_id}."]},
            )
        run = attempt.run
    lane = (
        hand_selectors.lane_get(workspace_id=workspace_id, slug=lane_slug, lane_id=limit)
        if lane_slug
        else None
    )
    if run is not None:
        run_lane = run.work_package.lane
        if lane is not None and lane.pk != run_lane.pk:
            raise ValidationFailed(
                f"run {run.pk} is in lane {run_lane.slug!r}, not {lane.slug!r}",
                fields={"lane": [f"Run {run.pk} is in lane {run_lane.slug!r}."]},
            )
        lane = run_lane
    own_lane_id = limit if limit is not None else hand.lane_id
    if lane is None and own_lane_id is not None:
        lane = Lane.objects.get(pk=own_lane_id)
    return lane, run, attempt


def _refusals(*, hand: Hand, key: HandKey, request_ids: list[str]) -> list[Refusal]:
    """The refused calls named, newest per request id, in the order given (rule 3)."""
    if not request_ids:
        return []
    visible = fleet_records.refusals_list(
        workspace_id=hand.workspace_id,
        hand_name="" if is_supervisor(key) else hand.name,
        lane_id=key.lane_id,
    )
    newest: dict[str, Refusal] = {}
    for refusal in visible.filter(request_id__in=request_ids).order_by("id"):
        newest[refusal.request_id] = refusal
    unknown = [request_id for request_id in request_ids if request_id not in newest]
    if unknown:
        whose = "this workspace's" if is_supervisor(key) else "your own"
        raise ValidationFailed(
            f"no refused call of {whose} has the request id {', '.join(map(repr, unknown))}",
            fields={"refusals": [f"Unknown request id {request_id!r}." for request_id in unknown]},
        )
    return [newest[request_id] for request_id in request_ids]


@refusals_recorded
def friction_file(
    *,
    hand: Hand,
    key: HandKey,
    what: str,
    instead: str = "",
    minutes: int = 0,
    lane: str | None = None,
    run_id: int | None = None,
    attempt_id: int | None = None,
    refusals: list[str] | None = None,
) -> FrictionReport:
    """File a report with its links and its event, in one transaction; nothing on a refusal."""
    what = _text(what, field="what", required=True)
    instead = _text(instead, field="instead", required=False)
    minutes = _minutes(minutes)
    request_ids = _request_ids(refusals)
    where_lane, run, attempt = _where(
        hand=hand, key=key, lane_slug=lane, run_id=run_id, attempt_id=attempt_id
    )
    linked = _refusals(hand=hand, key=key, request_ids=request_ids)
    with transaction.atomic():
        now = db_now()
        report = FrictionReport.objects.create(
            workspace_id=hand.workspace_id,
            lane=where_lane,
            run=run,
            attempt=attempt,
            hand=hand.name,
            key_prefix=key.prefix,
            what=what,
            instead=instead,
            minutes=minutes,
            at=now,
        )
        FrictionRefusal.objects.bulk_create(
            FrictionRefusal(
                workspace_id=report.workspace_id,
                report=report,
                request_id=refusal.request_id,
                refusal_id=refusal.pk,
                code=refusal.code,
                at=refusal.at,
                hand=refusal.hand,
                method=refusal.method,
                path=refusal.path,
                message=refusal.message,
            )
            for refusal in linked
        )
        record_event(
            workspace_id=hand.workspace_id,
            kind=EventKind.FRICTION,
            at=now,
            actor=hand.name,
            hand=hand.name,
            attempt_id=attempt.pk if attempt else None,
            data=_event_data(report, linked),
        )
    return report


def _event_data(report: FrictionReport, linked: list[Refusal]) -> dict[str, Any]:
    return {
        "report": report.pk,
        "lane": report.lane.slug if report.lane else None,
        "run": report.run_id,
        "minutes": report.minutes,
        "what": report.what[:_EVENT_TEXT],
        "refusals": [{"request_id": r.request_id, "code": r.code} for r in linked],
    }
