"""Checkpoints over HTTP: a report carries one on every path a report takes (the hot report's one
statement, and the service's way for a report that renews nothing or has a cost), within its
size, and the next attempt on the same slot reads the last one an earlier attempt reported, in
its claim's answer and its brief, with who reported it, when, and how that attempt ended."""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

import pytest

from fleet.attempts.checkpoints import MAX_CHECKPOINT_BYTES
from fleet.models import Report
from hands import services as hand_services
from leases import clock
from tests.support.api import Api, claim, error_of, mint, release, report

pytestmark = pytest.mark.django_db

HOT = {"process": "host-a:1"}  # the claim's process: the renewing report, one statement
SERVICE = {"process": None}  # no process: recorded, renews nothing (the service's way)


def checkpoint_of(n: int) -> str:
    """A checkpoint of exactly `n` bytes of compact JSON in UTF-8: a string of two-byte
    characters (and one `p` when `n` is odd), in its quotes."""
    body = n - 2
    return "é" * (body // 2) + "p" * (body % 2)


def checkpoints() -> list[Any]:
    """The reports' checkpoints, oldest first, each as the JSON value its stored text is."""
    texts = Report.objects.exclude(checkpoint=None).order_by("id").values_list("checkpoint")
    return [(json.loads(text),) for (text,) in texts]


def brief(api: Api, attempt: dict[str, Any]) -> dict[str, Any]:
    answer = api.get(f"/attempts/{attempt['id']}/brief")
    assert answer.status_code == 200, answer.content
    return answer.json()


@pytest.mark.parametrize("path", [HOT, SERVICE], ids=["hot", "service"])
def test_a_report_keeps_its_checkpoint(api_a: Api, run, path: dict[str, Any]) -> None:
    attempt = claim(api_a, run)
    document = {"step": 3, "done": ["a.py", "b.py"], "note": "naïve"}
    answer = report(api_a, attempt, path["process"], kind="progress", checkpoint=document)
    assert answer.status_code == 200, answer.content
    assert answer.json()["renewed"] is (path is HOT)
    assert checkpoints() == [(document,)]


def test_a_costed_report_keeps_its_checkpoint(api_a: Api, run) -> None:
    attempt = claim(api_a, run)
    answer = report(api_a, attempt, kind="note", message="m", cost_usd="0.5", checkpoint=[1, 2])
    assert answer.status_code == 200, answer.content
    assert checkpoints() == [([1, 2],)]


def test_a_heartbeat_with_a_checkpoint_is_recorded_every_time(
    api_a: Api, run, frozen_clock: datetime
) -> None:
    """A bare heartbeat is kept once a minute; one that carries a checkpoint says something."""
    attempt = claim(api_a, run)
    for step in range(3):
        clock.advance(1)
        assert report(api_a, attempt, checkpoint={"step": step}).status_code == 200
    assert checkpoints() == [({"step": 0},), ({"step": 1},), ({"step": 2},)]
    # Falsy documents are documents too.
    for value in (0, False, "", [], {}):
        assert report(api_a, attempt, checkpoint=value).status_code == 200
    assert [c for (c,) in checkpoints()][3:] == [0, False, "", [], {}]


@pytest.mark.parametrize("path", [HOT, SERVICE], ids=["hot", "service"])
def test_a_checkpoint_of_exactly_its_size_is_kept_and_one_byte_more_is_refused(
    api_a: Api, run, path: dict[str, Any]
) -> None:
    attempt = claim(api_a, run)
    over = checkpoint_of(MAX_CHECKPOINT_BYTES + 1)
    answer = report(api_a, attempt, path["process"], kind="note", checkpoint=over)
    error = error_of(answer, 400, "validation_error")
    assert error["limit_bytes"] == MAX_CHECKPOINT_BYTES
    assert "checkpoint" in error["fields"]
    assert not Report.objects.exists()  # nothing written, not even the report
    at_limit = checkpoint_of(MAX_CHECKPOINT_BYTES)
    answer = report(api_a, attempt, path["process"], kind="note", checkpoint=at_limit)
    assert answer.status_code == 200, answer.content
    assert checkpoints() == [(at_limit,)]


@pytest.mark.parametrize(
    ("value", "field_says"),
    [(None, "null"), ({"a": "\x00"}, "NUL"), ("\ud800", "surrogate")],
    ids=["null", "nul", "surrogate"],
)
def test_a_checkpoint_that_cannot_be_kept_is_refused_and_writes_nothing(
    api_a: Api, run, value: object, field_says: str
) -> None:
    attempt = claim(api_a, run)
    for process in (HOT["process"], None):
        payload = {"fence": attempt["fence"], "kind": "note", "checkpoint": value}
        if process:
            payload["process_id"] = process
        # json.dumps writes a lone surrogate as its escape, as a client would send it.
        answer = api_a.post(f"/attempts/{attempt['id']}/reports", payload)
        error = error_of(answer, 400, "validation_error")
        assert field_says in " ".join(error["fields"]["checkpoint"])
    assert not Report.objects.exists()


def test_the_first_attempt_on_a_slot_inherits_nothing(api_a: Api, run) -> None:
    attempt = claim(api_a, run)
    assert (attempt["checkpoint"], attempt["checkpoint_from"]) == (None, None)
    report(api_a, attempt, kind="note", message="m", checkpoint={"step": 1})
    # Its own checkpoint is not its inheritance: only an earlier attempt's is.
    assert (brief(api_a, attempt)["checkpoint"], brief(api_a, attempt)["checkpoint_from"]) == (
        None,
        None,
    )


def test_the_next_attempt_after_a_lost_one_reads_its_last_checkpoint(
    api_a: Api, api_b: Api, one_slot, frozen_clock: datetime
) -> None:
    first = claim(api_a, one_slot)
    report(api_a, first, kind="progress", checkpoint={"step": 1})
    clock.advance(10)
    report(api_a, first, kind="progress", checkpoint={"step": 2})
    reported_at = "2030-01-01T12:00:10Z"
    clock.advance(20)
    report(api_a, first, kind="progress", message="no checkpoint this time")
    clock.advance(100 + 60 + 1)  # past the deadline and the grace: lost
    second = claim(api_b, one_slot, process="host-b:1")
    inherited = {
        "attempt": first["id"],
        "hand": "hand-a",
        "at": reported_at,
        "end": "lost",
        "withheld": False,
    }
    assert (second["checkpoint"], second["checkpoint_from"]) == ({"step": 2}, inherited)
    read = brief(api_b, second)
    assert (read["checkpoint"], read["checkpoint_from"]) == ({"step": 2}, inherited)


def test_the_next_attempt_after_a_release_reads_its_last_checkpoint(
    api_a: Api, api_b: Api, one_slot
) -> None:
    first = claim(api_a, one_slot)
    report(api_a, first, kind="progress", checkpoint="half way")
    assert release(api_a, first).status_code == 200
    second = claim(api_b, one_slot, process="host-b:1")
    assert second["checkpoint"] == "half way"
    assert (second["checkpoint_from"]["attempt"], second["checkpoint_from"]["end"]) == (
        first["id"],
        "released",
    )


def test_the_next_attempt_after_a_stop_directive_reads_its_last_checkpoint(
    api_a: Api, api_b: Api, boss: Api, one_slot
) -> None:
    first = claim(api_a, one_slot)
    report(api_a, first, kind="progress", checkpoint={"files": 4})
    stopped = boss.post(f"/attempts/{first['id']}/directive", {"directive": "stop"})
    assert stopped.status_code == 200, stopped.content
    # The hand reads the stop in its next answer, says where it stands, and gives the slot back.
    answer = report(api_a, first, kind="note", message="stopping", checkpoint={"files": 5})
    assert answer.json()["attempt"]["directive"] == "stop"
    assert release(api_a, first).status_code == 200
    second = claim(api_b, one_slot, process="host-b:1")
    assert second["checkpoint"] == {"files": 5}
    assert second["checkpoint_from"]["hand"] == "hand-a"


def test_the_last_checkpoint_outlives_an_attempt_that_reported_none(
    api_a: Api, api_b: Api, one_slot
) -> None:
    first = claim(api_a, one_slot)
    report(api_a, first, kind="progress", checkpoint={"step": 7})
    release(api_a, first)
    second = claim(api_b, one_slot, process="host-b:1")
    report(api_b, second, "host-b:1", kind="progress", message="looked, changed nothing")
    release(api_b, second, process="host-b:1")
    third = claim(api_a, one_slot, process="host-a:2")
    assert third["checkpoint"] == {"step": 7}
    assert third["checkpoint_from"]["attempt"] == first["id"]


def test_another_slots_checkpoint_is_not_inherited(api_a: Api, api_b: Api, run) -> None:
    first = claim(api_a, run, slot=0)
    report(api_a, first, kind="progress", checkpoint={"slot": 0})
    release(api_a, first)
    other = claim(api_b, run, process="host-b:1", slot=1)
    assert (other["checkpoint"], other["checkpoint_from"]) == (None, None)
    same = claim(api_b, run, process="host-b:2", slot=0)
    assert same["checkpoint"] == {"slot": 0}


def test_a_lane_limited_key_is_not_given_what_a_hand_of_another_lane_wrote(
    workspace, boss: Api
) -> None:
    """A checkpoint in lane alpha's run, written by a hand of lane beta (with a lane-less key),
    is withheld from lane alpha's key (`apikit.concealing`, as the run's timeline withholds it):
    null, with which attempt left it, when and how it ended, and `withheld` true."""
    alpha, _ = hand_services.lane_create(workspace=workspace, slug="alpha")
    beta, _ = hand_services.lane_create(workspace=workspace, slug="beta")
    lead = hand_services.hand_create(workspace=workspace, name="alpha-lead", lane=alpha)[0]
    roamer = hand_services.hand_create(workspace=workspace, name="beta-roamer", lane=beta)[0]
    watcher = hand_services.hand_create(workspace=workspace, name="beta-watcher", lane=beta)[0]
    lead_api = Api(mint(lead, ["work"], lane=alpha), lead)
    roamer_api = Api(mint(roamer, ["work"]), roamer)  # lane-less: works in lane alpha too
    watcher_api = Api(mint(watcher, hand_services.ALL_SCOPES, lane=beta), watcher)
    package = boss.post("/lanes/alpha/work-packages", {"title": "P", "key": "p"}).json()
    run = boss.post(
        f"/work-packages/{package['id']}/runs", {"title": "R", "brief": "b", "slots": 1}
    ).json()
    answer = roamer_api.post(f"/runs/{run['id']}/claim", {"process_id": "r:1"})
    first = answer.json()
    report(roamer_api, first, "r:1", kind="progress", checkpoint={"by": "someone"})
    release(roamer_api, first, process="r:1")
    second = lead_api.post(f"/runs/{run['id']}/claim", {"process_id": "l:1"}).json()
    withheld = {"attempt": first["id"], "hand": None, "end": "released", "withheld": True}
    for answer in (second, brief(lead_api, second)):
        assert answer["checkpoint"] is None
        origin = answer["checkpoint_from"]
        assert {name: origin[name] for name in withheld} == withheld
        assert origin["at"] is not None
    # Lane beta's key does not find lane alpha's attempt, nor its brief.
    error_of(watcher_api.get(f"/attempts/{second['id']}/brief"), 404, "not_found")
    # A workspace-wide key reads the name and the checkpoint.
    read = brief(boss, second)
    assert read["checkpoint"] == {"by": "someone"}
    assert (read["checkpoint_from"]["hand"], read["checkpoint_from"]["withheld"]) == (
        "beta-roamer",
        False,
    )
    # A lane-limited key reads what a hand of its own lane wrote.
    report(lead_api, second, "l:1", kind="progress", checkpoint={"by": "alpha"})
    release(lead_api, second, process="l:1")
    third = lead_api.post(f"/runs/{run['id']}/claim", {"process_id": "l:2"}).json()
    assert (third["checkpoint"], third["checkpoint_from"]["hand"]) == (
        {"by": "alpha"},
        "alpha-lead",
    )
    assert third["checkpoint_from"]["withheld"] is False
