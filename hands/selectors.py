"""Reads of who works where: lanes, hands and their keys.

A lane's slug by its id is kept per process (`lane_slug`) for the renewing report's answer (the
fleet's most frequent call): joining the lane on every heartbeat cost about a tenth of its
statement. A slug is the lane's for good (nothing renames a lane: it names it in paths and keys;
the admin shows it read-only) and PostgreSQL never hands out an id twice; saving or deleting a
lane forgets its entry all the same (`forget_lane`, connected in hands.apps).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

from django.db.models import QuerySet

from apikit.errors import NotFound
from hands.models import Hand, HandKey, Lane

_LANE_SLUGS: dict[int, str] = {}
_LANE_SLUGS_MAX = 10_000


def lane_slug(*, workspace_id: int, lane_id: int) -> str:
    """The slug of lane `lane_id` of `workspace_id` (one query the first time this process asks;
    an id names one lane, so the id alone keys the memo)."""
    slug = _LANE_SLUGS.get(lane_id)
    if slug is None:
        slug = Lane.objects.values_list("slug", flat=True).get(
            workspace_id=workspace_id, pk=lane_id
        )
        if len(_LANE_SLUGS) >= _LANE_SLUGS_MAX:
            _LANE_SLUGS.clear()
        _LANE_SLUGS[lane_id] = slug
    return slug


def forget_lane(instance: Lane, **_: Any) -> None:
    """A `post_save`/`post_delete` receiver for Lane."""
    _LANE_SLUGS.pop(instance.pk, None)


def hand_get(*, workspace_id: int, name: str, lane_id: int | None = None) -> Hand:
    """A hand by its name; for a lane-limited caller (`lane_id`), only one of its lane: any
    other is not found, as if it did not exist."""
    try:
        return Hand.objects.filter(workspace_id=workspace_id).in_lane(lane_id).get(name=name)
    except Hand.DoesNotExist:
        raise NotFound(f"no hand {name!r}") from None


def lanes_list(*, workspace_id: int, lane_id: int | None = None) -> QuerySet[Lane]:
    return Lane.objects.filter(workspace_id=workspace_id).in_lane(lane_id)


def lane_get(*, workspace_id: int, slug: str, lane_id: int | None = None) -> Lane:
    try:
        return lanes_list(workspace_id=workspace_id, lane_id=lane_id).get(slug=slug)
    except Lane.DoesNotExist:
        raise NotFound(f"no lane {slug!r}") from None


def hands_list(*, workspace_id: int, lane_id: int | None = None) -> QuerySet[Hand]:
    """A workspace's hands; for a lane-limited caller (`lane_id`), only its lane's."""
    return Hand.objects.filter(workspace_id=workspace_id).in_lane(lane_id).select_related("lane")


def hands_elsewhere(
    names: frozenset[str], *, workspace_id: int, lane_id: int | None, own: str = ""
) -> frozenset[str]:
    """Of `names`, the hands a lane-limited caller (`lane_id`; its own hand `own` aside) may not
    read: those of another lane, which are to it as if they did not exist. The workspace's own
    hands (of no lane: its supervisors, its CI) are named where they act; a name that is no
    hand's is nobody's to hide. Nothing for a workspace-wide caller."""
    if lane_id is None or not names:
        return frozenset()
    others = (
        Hand.objects.filter(workspace_id=workspace_id, name__in=sorted(names - {own}))
        .exclude(lane_id=None)
        .exclude(lane_id=lane_id)
    )
    return frozenset(others.values_list("name", flat=True))


def concealer(
    *, workspace_id: int, lane_id: int | None, own: str
) -> Callable[[frozenset[str]], frozenset[str]] | None:
    """What a key of hand `own` limited to `lane_id` may not read named, for the call's context
    (`apikit.concealing`): `hands_elsewhere`; None for a workspace-wide key, which reads every
    name."""
    if lane_id is None:
        return None
    return functools.partial(hands_elsewhere, workspace_id=workspace_id, lane_id=lane_id, own=own)


def keys_list(*, hand: Hand, lane_id: int | None = None) -> QuerySet[HandKey]:
    """A hand's keys; for a lane-limited caller (`lane_id`), only those limited to its lane."""
    return (
        HandKey.objects.filter(hand=hand)
        .in_lane(lane_id)
        .select_related("hand", "lane", "issued_by", "bound_lease")
    )
