"""What a hand of another lane wrote is its lane's, its checkpoint included: one rule
(`apikit.concealing`) for the run's timeline and a successor's claim and brief. The lane probe
(tests/lanes/test_lane_probe.py) walks every GET route over a world in which no hand of another
lane left a checkpoint in lane alpha's run; here that world grows one (lane B's roamer, working
in lane alpha's run with a lane-less key, reports a checkpoint and gives its slot back), and
lane alpha's key claims the slot next: nothing of lane B (the marker `zzb`, its keys' prefixes)
is in the claim's answer or the brief, which say only that a checkpoint was withheld, by which
attempt, when, and how it ended; as nothing of it is in the run's timeline."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.lanes.conftest import World, ok
from tests.lanes.test_lane_probe import assert_lane_b_absent
from tests.support.api import Api

pytestmark = [pytest.mark.django_db, pytest.mark.security]

CHECKPOINT = {"zzb-step": "zzb-branch-state", "files": ["zzb/secret.py"]}


def _roamer_leaves_a_checkpoint(world: World) -> dict[str, Any]:
    """Lane B's roamer, in lane alpha's first run, reports a checkpoint and gives its slot back;
    lane alpha's hand claims that slot next."""
    roamer, attempt = world.roamer, world.attempts["roamer"]
    base = {"fence": attempt["fence"], "process_id": "zzb-proc-roamer"}
    ok(
        roamer.post(
            f"/attempts/{attempt['id']}/reports",
            {**base, "kind": "progress", "message": "zzb step", "checkpoint": CHECKPOINT},
        )
    )
    ok(roamer.post(f"/attempts/{attempt['id']}/release", {**base, "reason": "zzb must go"}))
    run_id = world.ids["run_id"][0]
    return ok(
        world.alpha.post(
            f"/runs/{run_id}/claim", {"process_id": "alpha-proc-2", "slot": attempt["slot"]}
        ),
        201,
    )


def test_a_successor_in_lane_alpha_reads_no_words_of_a_lane_b_hand(
    world: World,
) -> None:
    successor = _roamer_leaves_a_checkpoint(world)
    assert_lane_b_absent(world, _Answer(json.dumps(successor).encode()), "claim answer", [])
    brief = world.alpha.get(f"/attempts/{successor['id']}/brief")
    assert_lane_b_absent(world, brief, "brief", [])
    roamer = world.attempts["roamer"]["id"]
    for answer in (successor, brief.json()):
        assert answer["checkpoint"] is None
        origin = answer["checkpoint_from"]
        assert (origin["attempt"], origin["hand"], origin["end"]) == (roamer, None, "released")
        assert origin["withheld"] is True


def test_the_timeline_withholds_what_the_successor_is_not_given(world: World) -> None:
    """The same rule on both sides: lane alpha's key finds the roamer's report in the run's
    timeline without its words, and a workspace-wide key reads them all, and the checkpoint."""
    successor = _roamer_leaves_a_checkpoint(world)
    roamer = world.attempts["roamer"]["id"]
    path = f"/runs/{world.ids['run_id'][0]}/timeline"

    def checkpointed(api: Api) -> list[tuple[Any, Any]]:
        """The roamer's report that carried the checkpoint, as `api` reads it: its hand and
        its checkpoint."""
        entries = [e for e in ok(api.get(path)) if e["kind"] == "report"]
        return [
            (e["hand"], e["data"]["checkpoint"])
            for e in entries
            if e["attempt"] == roamer and "with a checkpoint" in e["text"]
        ]

    assert checkpointed(world.alpha) == [(None, None)]
    assert_lane_b_absent(world, world.alpha.get(path), "timeline", [])
    assert checkpointed(world.boss) == [("zzb-roamer", CHECKPOINT)]
    read = ok(world.boss.get(f"/attempts/{successor['id']}/brief"))
    assert read["checkpoint"] == CHECKPOINT
    assert (read["checkpoint_from"]["hand"], read["checkpoint_from"]["withheld"]) == (
        "zzb-roamer",
        False,
    )


class _Answer:
    """A claim's answer as the probe's check reads a response."""

    status_code = 200

    def __init__(self, content: bytes) -> None:
        self.content = content
