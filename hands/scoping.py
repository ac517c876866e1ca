"""Lane scoping, one rule: a workspace-wide caller (`lane_id` None) sees every row of the
workspace, a lane-limited one (a key limited to a lane) only its lane's; anything else is not
found, as if it did not exist.

A model a lane limits declares how its rows reach their lane (`LANE`, a field lookup:
`"lane_id"`, `"work_package__lane_id"`, ...) and uses `InLane` as its manager; every selector
and service narrows with `.in_lane(lane_id)`, never with a filter of its own."""

from __future__ import annotations

from typing import Self

from django.db import models


class InLane(models.QuerySet):  # type: ignore[type-arg]
    def in_lane(self, lane_id: int | None) -> Self:
        """The rows `lane_id`'s caller may see: all of them for a workspace-wide caller."""
        if lane_id is None:
            return self
        return self.filter(**{self.model.LANE: lane_id})
