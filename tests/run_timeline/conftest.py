"""A run with a story: hand-a claims slot 0 as process host-a:1, takes leases with that process
(and one with another, and one before its claim), reports, is told to pause, has a fence
verified, is refused, files friction, finishes with evidence CI attests; hand-b claims slot 1,
is lost, and hand-a's second process reclaims it. Every step a second apart on the frozen
database clock, so each entry's time is known."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

import pytest

from fleet.jobs import leases_sweep
from fleet.models import Run
from hands import services as hand_services
from hands.models import Hand
from leases import clock
from leases.models import FenceVerification, Refusal
from tests.support.api import PR_URL, Api, claim, finish, mint, report


@dataclass
class Story:
    run: Run
    boss: Api
    a: Api
    b: Api
    ci: Api
    start: datetime
    attempts: dict[str, dict[str, Any]] = field(default_factory=dict)
    fences: dict[str, int] = field(default_factory=dict)
    times: dict[str, datetime] = field(default_factory=dict)


def tick(story: Story, name: str, seconds: float = 1) -> datetime:
    """Move the database clock on and name the new instant."""
    now = story.start + timedelta(seconds=seconds) if not story.times else None
    now = max(story.times.values()) + timedelta(seconds=seconds) if story.times else now
    assert now is not None
    clock.freeze(now)
    story.times[name] = now
    return now


def acquire(api: Api, resource: str, process: str) -> int:
    response = api.post(
        "/leases/acquire", {"resource": resource, "ttl_s": 600, "process_id": process}
    )
    assert response.status_code == 201, response.content
    return response.json()["fence"]


def release(api: Api, resource: str, fence: int, process: str) -> None:
    response = api.post(
        "/leases/release", {"resource": resource, "fence": fence, "process_id": process}
    )
    assert response.status_code == 200, response.content


def stamp(model: type[FenceVerification] | type[Refusal], at: datetime) -> None:
    """The newest row of `model` at `at`: these rows take the database's own `now()` by default,
    which a frozen test clock (`leases.clock.freeze`) does not move; in production both are the
    database's one clock."""
    newest = model.objects.order_by("-id").first()
    assert newest is not None
    model.objects.filter(pk=newest.pk).update(at=at)


@pytest.fixture
def story(make_run: Any, boss: Api, api_a: Api, api_b: Api, owner: Hand, workspace) -> Story:  # noqa: ANN001
    ci_hand, _ = hand_services.hand_create(workspace=workspace, name="ci")
    ci = Api(mint(ci_hand, ["attest", "verify"]), ci_hand)
    run = make_run(
        title="build",
        slots=2,
        heartbeat_interval_s=100,
        grace_s=60,
        evidence_required=["pull_request"],
    )
    start = clock.db_now().replace(microsecond=0) + timedelta(seconds=1)
    clock.freeze(start)
    s = Story(run=run, boss=boss, a=api_a, b=api_b, ci=ci, start=start, times={"start": start})
    # Before the claim: a lease of hand-a's own process that is not the run's.
    tick(s, "before")
    s.fences["before"] = acquire(api_a, "src/before.py", "host-a:1")
    tick(s, "claim_a")
    s.attempts["a"] = claim(api_a, run, "host-a:1", slot=0)
    tick(s, "lease_a")
    s.fences["src/a.py"] = acquire(api_a, "src/a.py", "host-a:1")
    tick(s, "other_process")
    # The same hand, another process: not the attempt's.
    s.fences["src/other.py"] = acquire(api_a, "src/other.py", "host-a:2")
    tick(s, "report_a")
    assert (
        report(api_a, s.attempts["a"], kind="progress", message="half way", percent=50).status_code
        == 200
    )
    tick(s, "directive")
    assert (
        boss.post(
            f"/attempts/{s.attempts['a']['id']}/directive", {"directive": "pause"}
        ).status_code
        == 200
    )
    tick(s, "verify")
    verified = ci.post("/fences/verify", {"fences": [f"src/a.py@{s.fences['src/a.py']}"]})
    assert verified.status_code == 200, verified.content
    stamp(FenceVerification, s.times["verify"])
    tick(s, "refused")
    refused = api_a.post(
        "/leases/release", {"resource": "src/nothing.py", "fence": 9, "process_id": "host-a:1"}
    )
    assert refused.status_code == 404, refused.content
    stamp(Refusal, s.times["refused"])
    tick(s, "friction")
    filed = api_a.post(
        "/friction", {"what": "the linter hung", "minutes": 3, "attempt": s.attempts["a"]["id"]}
    )
    assert filed.status_code == 201, filed.content
    tick(s, "release_a")
    release(api_a, "src/a.py", s.fences["src/a.py"], "host-a:1")
    tick(s, "claim_b")
    s.attempts["b"] = claim(api_b, run, "host-b:1", slot=1)
    tick(s, "finish_a")
    assert finish(api_a, s.attempts["a"], "host-a:1").status_code == 200
    tick(s, "attest")
    attested = ci.post("/attestations", {"url": PR_URL, "result": "pass", "kind": "pull_request"})
    assert attested.status_code in (200, 201), attested.content
    # hand-b goes silent after its claim: late past 100 s, stalled past 130 s, lost past 160 s;
    # the sweep records each.
    for name, seconds in (("late", 99), ("stalled", 30), ("lost", 30)):
        tick(s, name, seconds)
        leases_sweep()
    tick(s, "reclaim", 39)
    s.attempts["a2"] = claim(api_a, run, "host-a:3", slot=1)
    tick(s, "after_outside", 5)
    # After hand-a's tenure on slot 0 and under another process than slot 1's: not the run's.
    s.fences["src/after.py"] = acquire(api_a, "src/after.py", "host-a:1")
    tick(s, "end")
    return s
