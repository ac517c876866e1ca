"""What happened, for supervisors: a workspace's refusals and events, a lane-limited caller's
limited to its lane's hands, keys and attempts."""

from __future__ import annotations

from datetime import datetime

from django.db.models import Q, QuerySet

from fleet.models import Attempt
from hands.models import Hand, HandKey
from leases.models import Event, Refusal


def _lane_hand_names(lane_id: int) -> QuerySet[Hand]:
    return Hand.objects.filter(lane_id=lane_id).values("name")


def refusals_list(
    *, workspace_id: int, code: str = "", hand_name: str = "", lane_id: int | None = None
) -> QuerySet[Refusal]:
    """A workspace's refusals; for a lane-limited caller (`lane_id`), those of its lane's hands
    or made with its lane's keys."""
    refusals = Refusal.objects.filter(workspace_id=workspace_id)
    if lane_id is not None:
        refusals = refusals.filter(
            Q(hand__in=_lane_hand_names(lane_id))
            | Q(key_prefix__in=HandKey.objects.filter(lane_id=lane_id).values("prefix"))
        )
    if code:
        refusals = refusals.filter(code=code)
    if hand_name:
        refusals = refusals.filter(hand=hand_name)
    return refusals


def events_list(
    *,
    workspace_id: int,
    kind: str = "",
    since: datetime | None = None,
    after_id: int | None = None,
    hand_name: str = "",
    attempt_id: int | None = None,
    lane_id: int | None = None,
) -> QuerySet[Event]:
    """A workspace's events; for a lane-limited caller (`lane_id`), those of its lane's hands
    and attempts."""
    events = Event.objects.filter(workspace_id=workspace_id)
    if lane_id is not None:
        events = events.filter(
            Q(hand__in=_lane_hand_names(lane_id))
            | Q(attempt_id__in=Attempt.objects.filter(lane_id=lane_id).values("pk"))
        )
    if kind:
        events = events.filter(kind=kind)
    if since is not None:
        events = events.filter(at__gte=since)
    if after_id is not None:
        events = events.filter(pk__gt=after_id)
    if hand_name:
        events = events.filter(hand=hand_name)
    if attempt_id is not None:
        events = events.filter(attempt_id=attempt_id)
    return events
