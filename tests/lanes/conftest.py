"""A workspace with two lanes, built through the API as its hands would: lane `alpha`, whose
lane-limited key (every scope) is the reader under test, and lane `zzb-lane`, whose every name
carries the marker `zzb` (its hands, its processes, its titles, its URLs), so that anything of it
an answer lets through is found by a substring. The names both lanes share (resources, a pool
and its members) carry no marker: a lease is on the workspace's one tree, only its holder is a
lane's.

Lane B works as a lane's hands do (a checkpoint its next attempt reads included), lane alpha's
second run waits for lane B's first, and one of lane B's hands (`zzb-roamer`) works with a lane-less
key in lane `alpha`'s run and on the shared tree too, so a record of lane `alpha` names a hand of
another lane."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

import pytest

from hands import services as hand_services
from hands.models import Hand, Workspace
from leases import queue
from leases.clock import db_now
from leases.models import Waiter
from tests.support.api import Api

MARKER = "zzb"
REPOSITORY = "github.com/acme/app"
SHARED_PR = "https://github.com/acme/app/pull/9"  # lane B's evidence, attested workspace-wide
ALL = hand_services.ALL_SCOPES


def ok(response: Any, *statuses: int) -> dict[str, Any]:
    assert response.status_code in (statuses or (200, 201)), response.content
    return response.json()


def key_of(boss: Api, hand: str, scopes: list[str], lane: str | None = None) -> str:
    body: dict[str, Any] = {"scopes": scopes, **({"lane": lane} if lane else {})}
    return ok(boss.post(f"/hands/{hand}/keys", body), 201)["key"]


def prefix(api: Api) -> str:
    assert api.key is not None
    return api.key.split("_")[1]


@dataclass
class World:
    """Who calls, and the ids of what each lane has, by the name of the URL parameter that
    carries them (`ids`: lane alpha's; `theirs`: lane B's, which the reader must not find)."""

    boss: Api
    alpha: Api  # lane alpha's lane-limited key, every scope: the reader
    beta: Api  # lane B's lane-limited key, every scope
    roamer: Api  # a lane B hand's lane-less key, working in lane alpha too
    ci: Api  # the workspace's CI: a hand of no lane
    ids: dict[str, list[Any]] = field(default_factory=dict)
    theirs: dict[str, list[Any]] = field(default_factory=dict)
    fences: dict[str, int] = field(default_factory=dict)
    attempts: dict[str, dict[str, Any]] = field(default_factory=dict)
    shas: dict[str, str] = field(default_factory=dict)

    @property
    def secrets(self) -> list[str]:
        """What of lane B no answer to the reader may hold: the marker and its keys' prefixes."""
        return [MARKER, prefix(self.beta), prefix(self.roamer)]


def _lane(boss: Api, slug: str, title: str) -> dict[str, Any]:
    ok(boss.post("/lanes", {"slug": slug}))
    package = ok(boss.post(f"/lanes/{slug}/work-packages", {"title": title, "key": f"{slug}-wp"}))
    runs = [
        ok(
            boss.post(
                f"/work-packages/{package['id']}/runs",
                {"title": f"{title} run {n}", "brief": f"{title} work", "slots": 2},
            ),
            201,
        )
        for n in (1, 2)
    ]
    schedule = ok(
        boss.post(
            f"/lanes/{slug}/schedules",
            {"cron": "0 6 * * *", "key_pattern": f"{slug}-{{date}}", "title_pattern": "Tick"},
        ),
        201,
    )
    integration = ok(
        boss.post(f"/lanes/{slug}/github-integrations", {"repository": "acme/app"}), 201
    )
    budget = ok(
        boss.post(
            "/budgets", {"lane": slug, "period": "week", "action": "pause", "limit_usd": "900"}
        ),
        201,
    )
    return {
        "package": package,
        "runs": runs,
        "schedule": schedule,
        "integration": integration,
        "budget": budget,
    }


def _acquire(api: Api, resource: str, process: str) -> int:
    body = {"resource": resource, "ttl_s": 600, "process_id": process}
    return ok(api.post("/leases/acquire", body), 201)["fence"]


def _claim(api: Api, run: dict[str, Any], process: str) -> dict[str, Any]:
    return ok(api.post(f"/runs/{run['id']}/claim", {"process_id": process}), 201)


def _ask(api: Api, **body: Any) -> dict[str, Any]:
    return ok(api.post("/leases/handoff", {"reason": "need it", **body}), 201)


@pytest.fixture
def world(workspace: Workspace, boss: Api) -> World:
    alpha_lane = _lane(boss, "alpha", "Alpha")
    beta_lane = _lane(boss, "zzb-lane", "zzb")
    for name, lane in (
        ("alpha-lead", "alpha"),
        ("zzb-hand", "zzb-lane"),
        ("zzb-roamer", "zzb-lane"),
    ):
        ok(boss.post("/hands", {"name": name, "lane": lane}), 201)
    ok(boss.post("/hands", {"name": "ci"}), 201)
    hands = {hand.name: hand for hand in Hand.objects.filter(workspace=workspace)}
    world = World(
        boss=boss,
        alpha=Api(key_of(boss, "alpha-lead", ALL, "alpha"), hands["alpha-lead"]),
        beta=Api(key_of(boss, "zzb-hand", ALL, "zzb-lane"), hands["zzb-hand"]),
        roamer=Api(key_of(boss, "zzb-roamer", ["work", "leases"]), hands["zzb-roamer"]),
        ci=Api(key_of(boss, "ci", ["attest", "verify"]), hands["ci"]),
    )
    alpha, beta, roamer = world.alpha, world.beta, world.roamer

    # The work: each lane's own, and the roamer's in lane alpha's first run.
    mine = world.attempts
    mine["alpha"] = _claim(alpha, alpha_lane["runs"][0], "alpha-proc")
    mine["roamer"] = _claim(roamer, alpha_lane["runs"][0], "zzb-proc-roamer")
    mine["beta"] = _claim(beta, beta_lane["runs"][0], "zzb-proc-b")
    mine["beta-done"] = _claim(beta, beta_lane["runs"][1], "zzb-proc-b")
    evidence = [
        {"kind": "pull_request", "url": SHARED_PR},
        {"kind": "pull_request", "url": "https://github.com/acme/zzb/pull/1"},
    ]
    finished = beta.post(
        f"/attempts/{mine['beta-done']['id']}/finish",
        {
            "fence": mine["beta-done"]["fence"],
            "process_id": "zzb-proc-b",
            "evidence": evidence,
            "summary": "zzb done",
        },
    )
    ok(finished)
    # The workspace's CI attests lane B's evidence (so the pass backs lane B's attempt), and lane
    # B attests a URL of its own.
    ok(world.ci.post("/attestations", {"url": SHARED_PR, "result": "pass"}), 201)
    ok(beta.post("/attestations", {"url": "https://github.com/acme/zzb/pull/2", "result": "fail"}))

    # The shared tree: each holds a name of its own.
    world.fences["src/alpha.py"] = _acquire(alpha, "src/alpha.py", "alpha-proc")
    world.fences["src/shared.py"] = _acquire(beta, "src/shared.py", "zzb-proc-b")
    world.fences["src/roam.py"] = _acquire(roamer, "src/roam.py", "zzb-proc-roamer")
    # A pool the workspace shares, both members held by lane B's hands.
    ok(boss.post("/pools", {"name": "ports", "members": ["8001", "8002"]}), 201)
    for api, process in ((beta, "zzb-proc-b"), (roamer, "zzb-proc-roamer")):
        ok(api.post("/pools/ports/acquire", {"process_id": process, "ttl_s": 600}), 201)
    # A waiter of lane B in line for lane alpha's name, still counting.
    ticket = queue.join(
        workspace_id=workspace.pk,
        resource="src/alpha.py",
        holder="zzb-hand",
        process_id="zzb-proc-b",
        mode="exclusive",
    )
    Waiter.objects.filter(pk=ticket.id).update(expires_at=db_now() + timedelta(hours=1))

    # Handoffs both ways, and the roamer asking for lane alpha's slot.
    handoffs = [
        _ask(beta, resource="src/alpha.py"),
        _ask(alpha, resource="src/shared.py"),
        _ask(roamer, run=alpha_lane["runs"][0]["id"], slot=mine["alpha"]["slot"]),
        _ask(beta, resource="src/roam.py"),
    ]
    # Refused calls of each side (a denial names the holder in the way), and friction.
    assert (
        alpha.post(
            "/leases/acquire",
            {"resource": "src/shared.py", "ttl_s": 60, "process_id": "alpha-proc"},
        ).status_code
        == 409
    )
    assert beta.get("/hands/zzb-nobody").status_code == 404
    ok(beta.post("/friction", {"what": "zzb got stuck", "minutes": 3}), 201)
    ok(
        roamer.post(
            "/friction",
            {"what": "stuck in alpha", "minutes": 2, "run": alpha_lane["runs"][0]["id"]},
        ),
        201,
    )
    # A checkpoint of lane B's, in lane B: its hand reports one and gives the slot back, and
    # the slot's next attempt reads it in its brief.
    left = _claim(beta, beta_lane["runs"][0], "zzb-proc-c")
    base = {"fence": left["fence"], "process_id": "zzb-proc-c"}
    checkpoint = {"zzb-step": 3, "zzb-branch": "zzb/wip"}
    ok(
        beta.post(
            f"/attempts/{left['id']}/reports",
            {**base, "kind": "progress", "message": "zzb saved", "checkpoint": checkpoint},
        )
    )
    ok(beta.post(f"/attempts/{left['id']}/release", {**base, "reason": "zzb hands it on"}))
    mine["beta-successor"] = _claim(beta, beta_lane["runs"][0], "zzb-proc-d")
    assert mine["beta-successor"]["checkpoint"] == checkpoint
    # A run of lane alpha waits for a run of lane B (the workspace's supervisor planned it). The
    # ready queue holds lane B's second run (a slot open), and none of lane alpha's (held, or
    # waiting).
    waits = {"depends_on": [beta_lane["runs"][0]["id"]]}
    ok(boss.patch(f"/runs/{alpha_lane['runs'][1]['id']}", waits))
    queue_now = [run["id"] for run in ok(boss.get("/runs", {"ready": "true"}))]
    assert queue_now == [beta_lane["runs"][1]["id"]], queue_now
    # A costed report of the roamer's in lane alpha.
    report = {
        "fence": mine["roamer"]["fence"],
        "process_id": "zzb-proc-roamer",
        "kind": "progress",
        "message": "zzb halfway",
        "cost_usd": "0.25",
    }
    ok(roamer.post(f"/attempts/{mine['roamer']['id']}/reports", report))
    # Pushes: lane B's of its own tenure, and lane alpha's touching lane B's file.
    world.shas = {"beta": "b" * 40, "alpha": "a" * 40}
    for api, sha, process in ((beta, "b" * 40, "zzb-proc-b"), (alpha, "a" * 40, "alpha-proc")):
        commit = {"sha": sha, "paths": ["src/shared.py"]}
        if api is beta:
            commit["fences"] = [f"src/shared.py@{world.fences['src/shared.py']} zzb-hand"]
        push = {"repository": REPOSITORY, "process_id": process, "commits": [commit]}
        ok(api.post("/fences/receipts", push))

    def ids_of(lane: dict[str, Any], attempts: list[str], hands: list[str]) -> dict[str, list]:
        return {
            "run_id": [run["id"] for run in lane["runs"]],
            "work_package_id": [lane["package"]["id"]],
            "schedule_id": [lane["schedule"]["id"]],
            "integration_id": [lane["integration"]["id"]],
            "budget_id": [lane["budget"]["id"]],
            "attempt_id": [mine[name]["id"] for name in attempts],
            "name": hands,
        }

    world.ids = ids_of(alpha_lane, ["alpha", "roamer"], ["alpha-lead", "ports"])
    world.ids.update(slug=["alpha"], index=[0], harness=["claude-code"])
    world.ids["handoff_id"] = [h["id"] for h in handoffs[:3]]
    world.theirs = ids_of(
        beta_lane, ["beta", "beta-done", "beta-successor"], ["zzb-hand", "zzb-roamer"]
    )
    world.theirs.update(slug=["zzb-lane"], handoff_id=[handoffs[3]["id"]])
    return world
