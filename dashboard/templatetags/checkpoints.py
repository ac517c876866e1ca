"""`{% run_checkpoints run as checkpoints %}`: the last checkpoint of each slot of a run
(`fleet.attempts.checkpoints.run_checkpoints`, one query), for the run page's
`fleet/_checkpoint.html`."""

from __future__ import annotations

from typing import Any

from django import template

from fleet.attempts.checkpoints import SlotCheckpoint
from fleet.attempts.checkpoints import run_checkpoints as checkpoints_of

register = template.Library()


@register.simple_tag
def run_checkpoints(run: Any) -> list[SlotCheckpoint]:
    if run is None:
        return []
    return checkpoints_of(workspace_id=run.workspace_id, run_id=run.pk)
