"""`GET /runs/{id}/timeline`: every source of a run's record in order, each with its sentence;
only the leases its hands took with the attempts' process identities during their tenures; pages
in a total order; the JSON Lines export; scopes, workspaces and lanes; a bounded query count."""

from __future__ import annotations

import json
from datetime import timedelta
from typing import Any

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from fleet.models import Report
from hands import services as hand_services
from hands.models import Hand
from leases import clock
from leases.models import Event
from tests.run_timeline.conftest import Story, acquire
from tests.support.api import Api, error_of, mint, report

pytestmark = pytest.mark.django_db


def timeline(api: Api, story: Story, **params: Any) -> list[dict[str, Any]]:
    response = api.get(f"/runs/{story.run.pk}/timeline", {"limit": 500, **params})
    assert response.status_code == 200, response.content
    assert "X-Next-Cursor" not in response
    return response.json()


def every_page(api: Api, story: Story, limit: int) -> list[dict[str, Any]]:
    entries, cursor = [], None
    for _ in range(200):
        params: dict[str, Any] = {"limit": limit}
        if cursor:
            params["cursor"] = cursor
        response = api.get(f"/runs/{story.run.pk}/timeline", params)
        assert response.status_code == 200, response.content
        page = response.json()
        assert len(page) <= limit
        entries += page
        cursor = response.get("X-Next-Cursor")
        if cursor is None:
            return entries
        assert page, "a page with a cursor after it is never empty here"
        assert response["Link"].endswith('rel="next"')
    raise AssertionError("the pages never ended")


def test_it_tells_every_source_in_order_each_with_its_sentence(story: Story) -> None:
    entries = timeline(story.boss, story)
    a, b, a2 = (story.attempts[k]["id"] for k in ("a", "b", "a2"))
    assert [(e["kind"], e["attempt"], e["slot"]) for e in entries] == [
        ("claimed", a, 0),
        ("lease_acquired", a, 0),
        ("report", a, 0),
        ("directive_set", a, 0),
        ("fence_verified", None, None),
        ("refusal", a, 0),
        ("friction", a, 0),
        ("lease_released", a, 0),
        ("claimed", b, 1),
        ("finished", a, 0),
        ("attested", a, 0),
        ("late", b, 1),
        ("stalled", b, 1),
        ("lost", b, 1),
        ("claimed", a2, 1),
    ]
    texts = [e["text"] for e in entries]
    assert texts[:8] == [
        "hand-a claimed slot 0 (fence 1) as process host-a:1.",
        "hand-a took the exclusive lease on src/a.py (fence 1) for 600s.",
        "hand-a reported progress at 50% on slot 0: half way.",
        "boss told hand-a to pause on slot 0.",
        "ci verified fence 1 of src/a.py: it was current.",
        "hand-a was refused not_found on POST /api/v1/leases/release: no lease on "
        "'src/nothing.py'.",
        "hand-a reported friction, 3 min lost: the linter hung.",
        "hand-a released the lease on src/a.py (fence 1).",
    ]
    assert texts[9:] == [
        "hand-a finished slot 0.",
        "ci attested that https://github.com/acme/app/pull/7 passed.",
        "hand-b was late on slot 1: no heartbeat by its deadline.",
        "hand-b stalled on slot 1: half its grace passed without a heartbeat.",
        "hand-b lost slot 1: no heartbeat within grace.",
        "hand-a claimed slot 1 (fence 2) as process host-a:3.",
    ]
    # Each entry at the instant the story says, and oldest first.
    times = story.times
    at = [e["at"] for e in entries]
    assert at == sorted(at)
    assert entries[0]["at"] == times["claim_a"].isoformat()
    assert entries[4]["at"] == times["verify"].isoformat()
    assert entries[-2]["at"] == times["lost"].isoformat()
    # The fields: the hand, its process, the lease and its fence, the record's own data.
    lease = entries[1]
    assert lease["hand"] == "hand-a" and lease["process_id"] == "host-a:1"
    assert (lease["resource"], lease["fence"]) == ("src/a.py", story.fences["src/a.py"])
    assert lease["data"]["process_id"] == "host-a:1"
    assert entries[2]["data"]["message"] == "half way" and entries[2]["data"]["percent"] == 50
    assert entries[5]["data"]["code"] == "not_found"
    assert entries[4]["data"] == {"status": "current", "current_fence": 1}
    assert len({e["id"] for e in entries}) == len(entries)
    assert set(entries[0]) == {
        "id",
        "at",
        "kind",
        "hand",
        "process_id",
        "attempt",
        "slot",
        "resource",
        "fence",
        "text",
        "data",
    }


def test_leases_of_another_process_or_outside_every_tenure_are_not_the_runs(
    story: Story,
) -> None:
    resources = {e["resource"] for e in timeline(story.boss, story) if e["resource"]}
    # src/other.py: hand-a's other process, during the tenure; src/before.py: its own process,
    # before the claim; src/after.py: its own process, after the tenure ended.
    slots = {f"run/{story.run.pk}/slot/{n}" for n in (0, 1)}
    assert resources == {*slots, "src/a.py"}
    assert {"src/other.py", "src/before.py", "src/after.py"} <= set(
        Event.objects.filter(kind="lease_acquired").values_list("resource", flat=True)
    )


def test_the_pages_follow_one_total_order_through_equal_times(story: Story) -> None:
    # Five events and a report at one instant: the order still says which comes first.
    same = story.times["claim_a"]
    a = story.attempts["a"]["id"]
    Event.objects.filter(attempt_id=a).update(at=same)
    Report.objects.filter(attempt_id=a).update(at=same)
    whole = timeline(story.boss, story)
    keys = [(e["at"], e["id"].split("-")[0], int(e["id"].split("-")[1])) for e in whole]
    rank = {"event": 0, "report": 1, "verification": 2, "refusal": 3}
    assert keys == sorted(keys, key=lambda k: (k[0], rank[k[1]], k[2]))
    assert sum(1 for e in whole if e["at"] == same.isoformat()) == 5
    for limit in (1, 2, 3, 7):
        assert every_page(story.boss, story, limit) == whole


def test_a_page_read_stays_put_when_entries_are_added_after_it(story: Story) -> None:
    first = story.boss.get(f"/runs/{story.run.pk}/timeline", {"limit": 4})
    cursor = first["X-Next-Cursor"]
    before = story.boss.get(f"/runs/{story.run.pk}/timeline", {"limit": 500, "cursor": cursor})
    report(story.a, story.attempts["a2"], process="host-a:3", kind="note", message="later")
    after = story.boss.get(f"/runs/{story.run.pk}/timeline", {"limit": 500, "cursor": cursor})
    assert after.json()[:-1] == before.json()
    assert after.json()[-1]["text"] == "hand-a noted on slot 1: later."


def test_the_json_lines_export_is_every_page_in_one(story: Story) -> None:
    response = story.boss.get(f"/runs/{story.run.pk}/timeline", {"format": "jsonl"})
    assert response.status_code == 200
    assert response["Content-Type"] == "application/jsonl"
    assert response.streaming
    body = b"".join(response.streaming_content).decode()
    assert body.endswith("\n")
    lines = [json.loads(line) for line in body.splitlines()]
    assert lines == every_page(story.boss, story, 3)
    assert len(lines) == 15


def test_it_answers_supervisors_and_planners_only(story: Story, owner: Hand) -> None:
    path = f"/runs/{story.run.pk}/timeline"
    for scopes in (["plan"], ["supervise"]):
        assert Api(mint(owner, scopes)).get(path).status_code == 200
    error_of(story.a.get(path), 403, "scope_denied")
    error_of(Api(mint(owner, ["attest", "verify"])).get(path), 403, "scope_denied")


def test_another_workspaces_run_is_not_found(story: Story, api_outsider: Api) -> None:
    error_of(api_outsider.get(f"/runs/{story.run.pk}/timeline"), 404, "not_found")
    error_of(story.boss.get("/runs/999999999/timeline"), 404, "not_found")


def test_bad_pages_and_formats_are_refused_with_the_field(story: Story) -> None:
    path = f"/runs/{story.run.pk}/timeline"
    for params, field in (
        ({"cursor": "not-a-cursor"}, "cursor"),
        ({"cursor": "WyJ4IiwwLDFd"}, "cursor"),
        ({"limit": "0"}, "limit"),
        ({"limit": "501"}, "limit"),
        ({"limit": "²"}, "limit"),
        ({"format": "xml"}, "format"),
    ):
        error = error_of(story.boss.get(path, params), 400, "validation_error")
        assert field in error["fields"], (params, error)


def test_a_lane_limited_key_reads_its_lanes_runs_and_no_name_of_another_lane(
    story: Story, workspace: Any, lane: Any, owner: Hand
) -> None:
    other, _ = hand_services.lane_create(workspace=workspace, slug="zzb-lane", name="B")
    # hand-b is of lane B, and worked in this run with a lane-less key.
    Hand.objects.filter(name="hand-b").update(lane=other)
    # hand-b's own record: a lease during its tenure, a refused call.
    boss_hand = Hand.objects.get(name="boss")
    mine = Api(mint(boss_hand, ["supervise"], lane=lane))
    theirs = Api(mint(boss_hand, ["supervise"], lane=other))
    error_of(theirs.get(f"/runs/{story.run.pk}/timeline"), 404, "not_found")
    entries = timeline(mine, story)
    everyone = timeline(story.boss, story)
    assert [e["id"] for e in entries] == [e["id"] for e in everyone]
    b = story.attempts["b"]["id"]
    of_b = [e for e in entries if e["attempt"] == b]
    assert [e["kind"] for e in of_b] == ["claimed", "late", "stalled", "lost"]
    assert all(e["hand"] is None and e["process_id"] is None for e in of_b)
    assert of_b[0]["text"] == "a hand of another lane claimed slot 1 (fence 1)."
    for answer in (
        mine.get(f"/runs/{story.run.pk}/timeline", {"limit": 500}),
        mine.get(f"/runs/{story.run.pk}/timeline", {"format": "jsonl"}),
    ):
        text = (b"".join(answer.streaming_content) if answer.streaming else answer.content).decode()
        assert "hand-b" not in text and "host-b" not in text, text


def test_a_lane_limited_key_reads_none_of_another_lanes_hands_own_record(
    story: Story, workspace: Any, lane: Any, api_b: Api
) -> None:
    """A lease hand-b (lane B) takes during its tenure in this run is its lane's record, which a
    key of this run's lane does not read."""
    other, _ = hand_services.lane_create(workspace=workspace, slug="zzb-lane", name="B")
    Hand.objects.filter(name="hand-b").update(lane=other)
    # Back inside hand-b's tenure (it was lost later): a lease of its process.
    claimed = Event.objects.get(attempt_id=story.attempts["b"]["id"], kind="claimed").at
    clock.freeze(claimed + timedelta(seconds=2))
    acquire(api_b, "src/b.py", "host-b:1")
    boss_hand = Hand.objects.get(name="boss")
    mine = Api(mint(boss_hand, ["supervise"], lane=lane))
    assert "src/b.py" in {e["resource"] for e in timeline(story.boss, story)}
    seen = timeline(mine, story)
    assert "src/b.py" not in {e["resource"] for e in seen}
    assert all(e["hand"] != "hand-b" for e in seen)


def _queries(api: Api, story: Story) -> list[str]:
    with CaptureQueriesContext(connection) as captured:
        assert api.get(f"/runs/{story.run.pk}/timeline", {"limit": 500}).status_code == 200
    # The key's last use is written at most once a minute, whichever call that falls on.
    return [
        q["sql"][:60]
        for q in captured.captured_queries
        if not q["sql"].startswith('UPDATE "fleet_handkey" SET "last_used_at"')
    ]


def test_a_page_costs_the_same_queries_however_long_the_run(story: Story) -> None:
    # The key and its hand; the run; its attempts; events, reports, fence verifications and
    # refused calls (one query each).
    small = _queries(story.boss, story)
    for n in range(20):
        report(story.a, story.attempts["a2"], process="host-a:3", kind="note", message=f"n{n}")
        acquire(story.a, f"src/many/{n}.py", "host-a:3")
    big = _queries(story.boss, story)
    assert len(big) == len(small) == 7, (small, big)
    entries = timeline(story.boss, story)
    assert sum(1 for e in entries if e["kind"] == "lease_acquired") == 21
