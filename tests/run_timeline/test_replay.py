"""The board's state for a run at a moment (`fleet.timeline.run_state_at`), at the exact
boundaries of the story's claims, deadline, grace, loss and reclaim; and the run page's record,
replay and JSON Lines download."""

from __future__ import annotations

import json
from datetime import datetime, timedelta
from typing import Any

import pytest

from fleet import timeline
from tests.run_timeline.conftest import Story

pytestmark = pytest.mark.django_db

TICK = timedelta(microseconds=1)


def at(story: Story, moment: datetime) -> dict[int, Any]:
    story.run.refresh_from_db()
    state = timeline.run_state_at(timeline.timeline_scope(story.run), moment)
    assert state.at == moment
    return {slot.index: slot for slot in state.slots}


def test_a_slot_is_free_until_its_claim_and_live_from_it(story: Story) -> None:
    claim_a, claim_b = story.times["claim_a"], story.times["claim_b"]
    assert at(story, claim_a - TICK)[0].state == "free"
    slot = at(story, claim_a)[0]
    assert (slot.state, slot.hand, slot.tenure.attempt) == (
        "live",
        "hand-a",
        story.attempts["a"]["id"],
    )
    assert at(story, claim_b - TICK)[1].state == "free"
    assert (at(story, claim_b)[1].state, at(story, claim_b)[1].hand) == ("live", "hand-b")


def test_a_silent_holder_goes_late_stalled_and_lost_at_the_lease_rules_instants(
    story: Story,
) -> None:
    # hand-b's deadline is its claim + 100 s; late for 30 s, stalled for 30 s, then lost.
    deadline = story.times["claim_b"] + timedelta(seconds=100)
    for moment, state in (
        (deadline, "live"),
        (deadline + TICK, "late"),
        (deadline + timedelta(seconds=30), "late"),
        (deadline + timedelta(seconds=30) + TICK, "stalled"),
        (deadline + timedelta(seconds=60), "stalled"),
        (deadline + timedelta(seconds=60) + TICK, "lost"),
        (story.times["reclaim"] - TICK, "lost"),
    ):
        slot = at(story, moment)[1]
        assert (slot.state, slot.hand) == (state, "hand-b"), moment
    assert at(story, deadline)[1].deadline == deadline


def test_the_reclaim_makes_the_new_holder_live_at_its_instant(story: Story) -> None:
    slot = at(story, story.times["reclaim"])[1]
    assert (slot.state, slot.hand, slot.tenure.attempt) == (
        "live",
        "hand-a",
        story.attempts["a2"]["id"],
    )
    assert slot.tenure.process_id == "host-a:3"


def test_a_report_renews_and_a_finish_makes_the_slot_done(story: Story) -> None:
    report_at = story.times["report_a"]
    slot = at(story, report_at)[0]
    assert slot.deadline == report_at + timedelta(seconds=100)
    assert slot.last_report is not None and slot.last_report.message == "half way"
    assert at(story, report_at - TICK)[0].last_report is None
    finish = story.times["finish_a"]
    assert at(story, finish - TICK)[0].state == "live"
    assert at(story, finish)[0].state == "done"


def test_the_leases_a_holder_held_are_those_taken_under_its_tenure_and_not_yet_ended(
    story: Story,
) -> None:
    lease = f"src/a.py@{story.fences['src/a.py']}"
    assert at(story, story.times["lease_a"] - TICK)[0].leases == ()
    assert at(story, story.times["lease_a"])[0].leases == (lease,)
    # Its other process's lease is held meanwhile, and is not the run's.
    assert at(story, story.times["other_process"])[0].leases == (lease,)
    assert at(story, story.times["release_a"] - TICK)[0].leases == (lease,)
    assert at(story, story.times["release_a"])[0].leases == ()


def test_the_run_page_loads_its_record_and_replays_the_board_at_t(
    story: Story, supervisor_client: Any
) -> None:
    page = supervisor_client.get(f"/runs/{story.run.pk}/")
    assert page.status_code == 200
    assert f'hx-get="/runs/{story.run.pk}/timeline/"' in page.content.decode()
    record = supervisor_client.get(f"/runs/{story.run.pk}/timeline/").content.decode()
    assert "hand-a claimed slot 0 (fence 1) as process host-a:1." in record
    assert 'type="range"' in record and "Download JSON Lines" in record
    late = int((story.times["claim_b"] + timedelta(seconds=101)).timestamp())
    replay = supervisor_client.get(f"/runs/{story.run.pk}/timeline/at/", {"t": late})
    text = replay.content.decode()
    assert 'data-slot="1" data-state="late"' in text and "hand-b" in text
    assert 'data-slot="0" data-state="done"' in text
    # A `t` outside the span, or unreadable, is the span's nearest end.
    for t in ("0", "abc", "99999999999999"):
        assert (
            supervisor_client.get(f"/runs/{story.run.pk}/timeline/at/", {"t": t}).status_code == 200
        )
    download = supervisor_client.get(f"/runs/{story.run.pk}/timeline.jsonl")
    assert download["Content-Type"] == "application/jsonl"
    lines = b"".join(download.streaming_content).decode().splitlines()
    assert [json.loads(line)["kind"] for line in lines][:2] == ["claimed", "lease_acquired"]


def test_another_workspaces_member_finds_no_record(story: Story, outsider_client: Any) -> None:
    for path in ("timeline/", "timeline/at/", "timeline.jsonl"):
        assert outsider_client.get(f"/runs/{story.run.pk}/{path}").status_code == 404
