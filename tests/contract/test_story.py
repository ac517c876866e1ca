"""The whole story of CONTRACT.md over HTTP alone, on the database's (frozen) clock."""

from __future__ import annotations

from datetime import datetime

import pytest

from evidence.models import Evidence
from fleet.models import Attempt
from leases import clock
from tests.support.api import PR_URL, Api, error_of

pytestmark = pytest.mark.django_db


def test_a_supervisor_runs_the_whole_story_over_the_api(boss: Api, frozen_clock: datetime) -> None:
    assert boss.post("/lanes", {"slug": "rewalk", "name": "Rewalk"}).status_code == 201
    package = boss.post("/lanes/rewalk/work-packages", {"title": "Daily", "key": "d-1"}).json()
    run = boss.post(
        f"/work-packages/{package['id']}/runs",
        {
            "title": "Rewalk auth",
            "brief": "Walk it.",
            "slots": 2,
            "evidence_required": ["pull_request"],
            "heartbeat_interval_s": 5,
            "grace_s": 4,
        },
    ).json()
    keys = {}
    for name in ("hand-a", "hand-b"):
        assert boss.post("/hands", {"name": name, "lane": "rewalk"}).status_code == 201
        keys[name] = boss.post(f"/hands/{name}/keys", {"scopes": ["work"]}).json()["key"]
    a, b = Api(keys["hand-a"]), Api(keys["hand-b"])
    mine = a.post(f"/runs/{run['id']}/claim", {"process_id": "host-a:1"}).json()
    theirs = b.post(f"/runs/{run['id']}/claim", {"process_id": "host-b:1"}).json()
    assert (mine["slot"], theirs["slot"]) == (0, 1)

    def heartbeat(api: Api, attempt: dict, process: str):  # noqa: ANN202
        body = {"fence": attempt["fence"], "process_id": process, "kind": "heartbeat"}
        return api.post(f"/attempts/{attempt['id']}/reports", body)

    assert heartbeat(b, theirs, "host-b:1").json()["renewed"] is True
    for _ in range(4):  # A heartbeats every 3 s; B has gone quiet
        clock.advance(3)
        assert heartbeat(a, mine, "host-a:1").json()["attempt"]["state"] == "live"
    states = {x["hand"]: x["state"] for x in boss.get("/attempts", {"run": run["id"]}).json()}
    assert states == {"hand-a": "live", "hand-b": "lost"}
    error_of(heartbeat(b, theirs, "host-b:1"), 409, "lease_lost")
    finished = a.post(
        f"/attempts/{mine['id']}/finish",
        {
            "fence": mine["fence"],
            "process_id": "host-a:1",
            "evidence": [{"kind": "pull_request", "url": PR_URL}],
        },
    )
    assert finished.json()["state"] == "finished"
    assert Evidence.objects.get(attempt_id=mine["id"]).url == PR_URL
    assert Attempt.objects.get(pk=theirs["id"]).end is None  # lost is computed, not yet swept
    refused = boss.get("/refusals", {"hand": "hand-b"}).json()
    assert [(r["code"], r["path"]) for r in refused] == [
        ("lease_lost", f"/api/v1/attempts/{theirs['id']}/reports")
    ]
