"""Every free text the API and the dashboard take has a size, enforced on every path (issue 18,
item 4): one character (or byte, or item) over it is refused and writes nothing but its refusal,
and at it the call is accepted. One list (`LIMITS`) drives the test, each limit tried once
through its call's one way (a hot call's through leasing/hot.py); docs/api.md's table ("Sizes")
lists the same fields and limits."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from django.apps import apps
from django.forms import BaseForm
from django.test import Client

from evidence.services import MAX_EVIDENCE_ITEMS, MAX_URL_LENGTH
from fleet.attempts.checkpoints import MAX_CHECKPOINT_BYTES
from fleet.attempts.reports import MAX_DETAILS_BYTES
from fleet.models import Run
from fleet.plan import services as plan_services
from friction import services as friction_services
from hands import capabilities
from hands import services as hand_services
from hands.models import Hand, HandKey, Lane
from leases.models import KeyTally, Refusal
from leases.services import MAX_NAME_LENGTH, MAX_REASON_LENGTH, MAX_RESOURCE_LENGTH
from tests.support.api import PR_URL, Api, error_of

pytestmark = [pytest.mark.hostile, pytest.mark.django_db]

DOCS = Path(__file__).resolve().parents[2] / "docs" / "api.md"


@dataclass
class World:
    api: Api  # hand a, scopes work and leases
    boss: Api  # every scope
    run: Run
    lane: Lane
    owner: Hand
    dashboard: Client  # an admin's


def text(n: int) -> str:
    return "p" * n


def url(n: int) -> str:
    return PR_URL + "/" + "p" * (n - len(PR_URL) - 1)


def details(n: int) -> dict[str, str]:
    """An object of exactly `n` bytes of JSON (as `json.dumps` writes it)."""
    return {"log": "p" * (n - len('{"log": ""}'))}


def checkpoint(n: int) -> str:
    """A checkpoint of exactly `n` bytes of compact JSON: a string, in its quotes."""
    return "p" * (n - 2)


def kinds(n: int) -> list[str]:
    return [f"kind-{i}" for i in range(n)]


def claim(w: World, process: str = "p") -> dict[str, Any]:
    answer = w.api.post(f"/runs/{w.run.pk}/claim", {"process_id": process})
    assert answer.status_code == 201, answer.content
    return answer.json()


def acquire(w: World, resource: str, process: str = "p") -> int:
    answer = w.api.post(
        "/leases/acquire", {"resource": resource, "ttl_s": 60, "process_id": process}
    )
    assert answer.status_code == 201, answer.content
    return answer.json()["fence"]


def done_slot(w: World) -> int:
    attempt = claim(w)
    finished = w.api.post(
        f"/attempts/{attempt['id']}/finish",
        {
            "fence": attempt["fence"],
            "process_id": "p",
            "evidence": [{"kind": "pull_request", "url": PR_URL}],
        },
    )
    assert finished.status_code == 200, finished.content
    return attempt["slot"]


def refused_call(n: int, i: int) -> str:
    """A request id of hand a's refusals (one of `n`), recorded as the API records one."""
    request_id = f"limit-{n}-{i}"
    hand = Hand.objects.get(name="hand-a")
    Refusal.objects.create(
        workspace_id=hand.workspace_id, hand=hand.name, code="not_found", request_id=request_id
    )
    return request_id


def key_prefix(w: World) -> str:
    issued = hand_services.key_issue(hand=w.owner, scopes=["work"], actor="test")
    return issued.key.prefix


def finish(w: World, attempt: dict[str, Any], **body: Any) -> Any:
    evidence = [{"kind": "pull_request", "url": PR_URL}]
    payload = {"fence": attempt["fence"], "process_id": "p", "evidence": evidence, **body}
    return w.api.post(f"/attempts/{attempt['id']}/finish", payload)


@dataclass(frozen=True)
class Limit:
    where: str  # the call, as docs/api.md's table names it
    field: str  # the field, as the table names it
    limit: int
    send: Callable[[World, Any, Any], Any]  # (world, what `prepare` made, value) -> response
    prepare: Callable[[World], Any] = lambda w: None
    value: Callable[[int], Any] = text
    unit: str = "characters"
    refused_as: str = ""  # the key of the refusal's `fields`, if not `field`
    dashboard: bool = False  # a dashboard form: refused by re-showing it, accepted by a redirect

    @property
    def key(self) -> str:
        return self.refused_as or self.field

    @property
    def id(self) -> str:
        return f"{self.where} {self.field}"


NAME, REASON = MAX_NAME_LENGTH, MAX_REASON_LENGTH
LIMITS = [
    # The hot calls.
    Limit(
        "POST /leases/acquire",
        "resource",
        MAX_RESOURCE_LENGTH,
        send=lambda w, _, v: w.api.post(
            "/leases/acquire", {"resource": v, "ttl_s": 30, "process_id": "p"}
        ),
    ),
    Limit(
        "POST /leases/acquire",
        "process_id",
        NAME,
        send=lambda w, _, v: w.api.post(
            "/leases/acquire", {"resource": "a", "ttl_s": 30, "process_id": v}
        ),
    ),
    Limit(
        "POST /leases/renew",
        "resource",
        MAX_RESOURCE_LENGTH,
        prepare=lambda w: acquire(w, text(MAX_RESOURCE_LENGTH)),
        send=lambda w, fence, v: w.api.post(
            "/leases/renew", {"resource": v, "fence": fence, "process_id": "p"}
        ),
    ),
    Limit(
        "POST /leases/renew",
        "process_id",
        NAME,
        prepare=lambda w: acquire(w, "a", text(NAME)),
        send=lambda w, fence, v: w.api.post(
            "/leases/renew", {"resource": "a", "fence": fence, "process_id": v}
        ),
    ),
    Limit(
        "POST /pools",
        "name",
        NAME,
        send=lambda w, _, v: w.boss.post("/pools", {"name": v, "capacity": 1}),
    ),
    Limit(
        "POST /pools",
        "members[]",
        NAME,
        refused_as="members[0]",
        send=lambda w, _, v: w.boss.post("/pools", {"name": "ports", "members": [v]}),
    ),
    Limit(
        "POST /pools/{name}/acquire",
        "process_id",
        NAME,
        prepare=lambda w: w.boss.post("/pools", {"name": "ports", "capacity": 1}),
        send=lambda w, _, v: w.api.post("/pools/ports/acquire", {"ttl_s": 30, "process_id": v}),
    ),
    Limit(
        "POST /leases/renew-all",
        "process_id",
        NAME,
        prepare=lambda w: acquire(w, "a", text(NAME)),  # at the limit it renews this one
        send=lambda w, _, v: w.api.post("/leases/renew-all", {"process_id": v}),
    ),
    Limit(
        "POST /attempts/{id}/reports",
        "message",
        REASON,
        prepare=claim,
        send=lambda w, a, v: w.api.post(
            f"/attempts/{a['id']}/reports",
            {"fence": a["fence"], "process_id": "p", "kind": "note", "message": v},
        ),
    ),
    Limit(
        "POST /attempts/{id}/reports",
        "process_id",
        NAME,
        prepare=lambda w: claim(w, text(NAME)),
        send=lambda w, a, v: w.api.post(
            f"/attempts/{a['id']}/reports",
            {"fence": a["fence"], "process_id": v, "kind": "note", "message": "m"},
        ),
    ),
    Limit(
        "POST /attempts/{id}/reports",
        "details",
        MAX_DETAILS_BYTES,
        prepare=claim,
        value=details,
        unit="bytes of JSON",
        send=lambda w, a, v: w.api.post(
            f"/attempts/{a['id']}/reports",
            {"fence": a["fence"], "process_id": "p", "kind": "note", "details": v},
        ),
    ),
    Limit(
        "POST /attempts/{id}/reports",
        "checkpoint",
        MAX_CHECKPOINT_BYTES,
        prepare=claim,
        value=checkpoint,
        unit="bytes of compact JSON",
        send=lambda w, a, v: w.api.post(
            f"/attempts/{a['id']}/reports",
            {"fence": a["fence"], "process_id": "p", "kind": "note", "checkpoint": v},
        ),
    ),
    # A hand's other calls.
    Limit(
        "POST /runs/{id}/claim",
        "process_id",
        NAME,
        send=lambda w, _, v: w.api.post(f"/runs/{w.run.pk}/claim", {"process_id": v}),
    ),
    Limit(
        "POST /attempts/{id}/release",
        "reason",
        REASON,
        prepare=claim,
        send=lambda w, a, v: w.api.post(
            f"/attempts/{a['id']}/release", {"fence": a["fence"], "process_id": "p", "reason": v}
        ),
    ),
    Limit(
        "POST /attempts/{id}/release",
        "process_id",
        NAME,
        prepare=lambda w: claim(w, text(NAME)),
        send=lambda w, a, v: w.api.post(
            f"/attempts/{a['id']}/release", {"fence": a["fence"], "process_id": v, "reason": "r"}
        ),
    ),
    Limit(
        "POST /attempts/{id}/finish",
        "process_id",
        NAME,
        prepare=lambda w: claim(w, text(NAME)),
        send=lambda w, a, v: finish(w, a, process_id=v),
    ),
    Limit(
        "POST /attempts/{id}/finish",
        "summary",
        10_000,
        prepare=claim,
        send=lambda w, a, v: finish(w, a, summary=v),
    ),
    Limit(
        "POST /attempts/{id}/finish",
        "evidence[].kind",
        64,
        prepare=claim,
        refused_as="evidence",
        send=lambda w, a, v: finish(
            w, a, evidence=[{"kind": "pull_request", "url": PR_URL}, {"kind": v, "url": PR_URL}]
        ),
    ),
    Limit(
        "POST /attempts/{id}/finish",
        "evidence[].url",
        MAX_URL_LENGTH,
        prepare=claim,
        value=url,
        refused_as="evidence",
        send=lambda w, a, v: finish(w, a, evidence=[{"kind": "pull_request", "url": v}]),
    ),
    Limit(
        "POST /attempts/{id}/finish",
        "evidence[].note",
        2000,
        prepare=claim,
        refused_as="evidence",
        send=lambda w, a, v: finish(
            w, a, evidence=[{"kind": "pull_request", "url": PR_URL, "note": v}]
        ),
    ),
    Limit(
        "POST /attempts/{id}/finish",
        "evidence",
        MAX_EVIDENCE_ITEMS,
        prepare=claim,
        unit="items",
        value=lambda n: [{"kind": "pull_request", "url": PR_URL}] * n,
        send=lambda w, a, v: finish(w, a, evidence=v),
    ),
    # A supervisor's calls.
    Limit(
        "POST /leases/break",
        "resource",
        MAX_RESOURCE_LENGTH,
        prepare=lambda w: acquire(w, text(MAX_RESOURCE_LENGTH)),
        send=lambda w, _, v: w.boss.post("/leases/break", {"resource": v, "reason": "r"}),
    ),
    Limit(
        "POST /leases/break",
        "reason",
        REASON,
        prepare=lambda w: acquire(w, "a"),
        send=lambda w, _, v: w.boss.post("/leases/break", {"resource": "a", "reason": v}),
    ),
    Limit("POST /lanes", "slug", 100, send=lambda w, _, v: w.boss.post("/lanes", {"slug": v})),
    Limit(
        "POST /lanes",
        "name",
        NAME,
        send=lambda w, _, v: w.boss.post("/lanes", {"slug": "new", "name": v}),
    ),
    Limit(
        "POST /lanes/{slug}/work-packages",
        "title",
        NAME,
        send=lambda w, _, v: w.boss.post(
            f"/lanes/{w.lane.slug}/work-packages", {"title": v, "key": "k"}
        ),
    ),
    Limit(
        "POST /lanes/{slug}/work-packages",
        "key",
        NAME,
        send=lambda w, _, v: w.boss.post(
            f"/lanes/{w.lane.slug}/work-packages", {"title": "t", "key": v}
        ),
    ),
    Limit(
        "POST /lanes/{slug}/work-packages",
        "external_ref",
        plan_services.MAX_EXTERNAL_REF_LENGTH,
        send=lambda w, _, v: w.boss.post(
            f"/lanes/{w.lane.slug}/work-packages", {"title": "t", "key": "k", "external_ref": v}
        ),
    ),
    Limit(
        "POST /work-packages/{id}/runs",
        "title",
        NAME,
        send=lambda w, _, v: w.boss.post(
            f"/work-packages/{w.run.work_package_id}/runs", {"title": v}
        ),
    ),
    Limit(
        "POST /work-packages/{id}/runs",
        "brief",
        plan_services.MAX_BRIEF_LENGTH,
        send=lambda w, _, v: w.boss.post(
            f"/work-packages/{w.run.work_package_id}/runs", {"title": "t", "brief": v}
        ),
    ),
    Limit(
        "POST /work-packages/{id}/runs",
        "evidence_required[]",
        plan_services.MAX_EVIDENCE_KIND_LENGTH,
        refused_as="evidence_required",
        send=lambda w, _, v: w.boss.post(
            f"/work-packages/{w.run.work_package_id}/runs", {"title": "t", "evidence_required": [v]}
        ),
    ),
    Limit(
        "POST /work-packages/{id}/runs",
        "evidence_required",
        plan_services.MAX_EVIDENCE_KINDS,
        value=kinds,
        unit="items",
        send=lambda w, _, v: w.boss.post(
            f"/work-packages/{w.run.work_package_id}/runs", {"title": "t", "evidence_required": v}
        ),
    ),
    Limit(
        "POST /runs/{id}/slots",
        "reason",
        REASON,
        send=lambda w, _, v: w.boss.post(f"/runs/{w.run.pk}/slots", {"count": 1, "reason": v}),
    ),
    Limit(
        "POST /runs/{id}/slots/{index}/reopen",
        "reason",
        REASON,
        prepare=done_slot,
        send=lambda w, slot, v: w.boss.post(f"/runs/{w.run.pk}/slots/{slot}/reopen", {"reason": v}),
    ),
    Limit("POST /hands", "name", NAME, send=lambda w, _, v: w.boss.post("/hands", {"name": v})),
    Limit(
        "POST /hands",
        "capabilities[]",
        capabilities.MAX_TAG_LENGTH,
        refused_as="capabilities",
        send=lambda w, _, v: w.boss.post("/hands", {"name": "tagged", "capabilities": [v]}),
    ),
    Limit(
        "POST /hands",
        "capabilities",
        capabilities.MAX_TAGS,
        value=kinds,
        unit="items",
        send=lambda w, _, v: w.boss.post("/hands", {"name": "tagged", "capabilities": v}),
    ),
    Limit(
        "PATCH /hands/{name}",
        "capabilities[]",
        capabilities.MAX_TAG_LENGTH,
        refused_as="capabilities",
        send=lambda w, _, v: w.boss.patch("/hands/hand-a", {"capabilities": [v]}),
    ),
    Limit(
        "POST /work-packages/{id}/runs",
        "capabilities[]",
        capabilities.MAX_TAG_LENGTH,
        refused_as="capabilities",
        send=lambda w, _, v: w.boss.post(
            f"/work-packages/{w.run.work_package_id}/runs", {"title": "t", "capabilities": [v]}
        ),
    ),
    Limit(
        "PATCH /runs/{id}",
        "capabilities[]",
        capabilities.MAX_TAG_LENGTH,
        refused_as="capabilities",
        send=lambda w, _, v: w.boss.patch(f"/runs/{w.run.pk}", {"capabilities": [v]}),
    ),
    Limit(
        "POST /friction",
        "what",
        friction_services.MAX_TEXT_LENGTH,
        send=lambda w, _, v: w.api.post("/friction", {"what": v}),
    ),
    Limit(
        "POST /friction",
        "instead",
        friction_services.MAX_TEXT_LENGTH,
        send=lambda w, _, v: w.api.post("/friction", {"what": "w", "instead": v}),
    ),
    Limit(
        "POST /friction",
        "refusals",
        friction_services.MAX_REFUSALS,
        value=lambda n: [refused_call(n, i) for i in range(n)],
        unit="items",
        send=lambda w, _, v: w.api.post("/friction", {"what": "w", "refusals": v}),
    ),
    Limit(
        "POST /keys/{prefix}/revoke",
        "reason",
        REASON,
        prepare=key_prefix,
        send=lambda w, prefix, v: w.boss.post(f"/keys/{prefix}/revoke", {"reason": v}),
    ),
    Limit(
        "any creating POST",
        "Idempotency-Key",
        200,
        send=lambda w, _, v: w.boss.post("/lanes", {"slug": "new"}, {"Idempotency-Key": v}),
    ),
    # The dashboard's forms.
    Limit(
        "dashboard: new hand",
        "name",
        NAME,
        dashboard=True,
        send=lambda w, _, v: w.dashboard.post("/hands/", {"new-name": v}),
    ),
    Limit(
        "dashboard: revoke a key",
        "reason",
        REASON,
        dashboard=True,
        prepare=key_prefix,
        send=lambda w, prefix, v: w.dashboard.post(f"/keys/{prefix}/revoke/", {"reason": v}),
    ),
    Limit(
        "dashboard: break a lease",
        "resource",
        MAX_RESOURCE_LENGTH,
        dashboard=True,
        prepare=lambda w: acquire(w, text(MAX_RESOURCE_LENGTH)),
        send=lambda w, _, v: w.dashboard.post("/leases/break/", {"resource": v, "reason": "r"}),
    ),
    Limit(
        "dashboard: break a lease",
        "reason",
        REASON,
        dashboard=True,
        prepare=lambda w: acquire(w, "a"),
        send=lambda w, _, v: w.dashboard.post("/leases/break/", {"resource": "a", "reason": v}),
    ),
    Limit(
        "dashboard: add slots",
        "reason",
        REASON,
        dashboard=True,
        send=lambda w, _, v: w.dashboard.post(
            f"/runs/{w.run.pk}/slots/new/", {"count": 1, "reason": v}
        ),
    ),
    Limit(
        "dashboard: reopen a slot",
        "reason",
        REASON,
        dashboard=True,
        prepare=done_slot,
        send=lambda w, slot, v: w.dashboard.post(
            f"/runs/{w.run.pk}/slots/{slot}/reopen/", {"reason": v}
        ),
    ),
    Limit(
        "dashboard: plan a run",
        "title",
        NAME,
        dashboard=True,
        send=lambda w, _, v: w.dashboard.post(
            f"/work-packages/{w.run.work_package_id}/runs/new/",
            {"title": v, "slots": 1, "priority": 2},
        ),
    ),
    Limit(
        "dashboard: plan a run",
        "brief",
        plan_services.MAX_BRIEF_LENGTH,
        dashboard=True,
        send=lambda w, _, v: w.dashboard.post(
            f"/work-packages/{w.run.work_package_id}/runs/new/",
            {"title": "t", "brief": v, "slots": 1, "priority": 2},
        ),
    ),
]


def cases() -> list[Any]:
    out = []
    for limit in LIMITS:
        for over in (False, True):
            size = "over" if over else "at"
            out.append(pytest.param(limit, over, id=f"{limit.id} {size} its limit"))
    return out


def rows() -> dict[str, list[dict[str, Any]]]:
    """Every row the calls could write (all but the refusals and their per-key tallies, and a
    key's last use, which a call stamps at most once a minute whatever it asked), to tell that
    nothing was written."""
    out = {}
    for label in ("leases", "fleet", "hands", "evidence", "friction"):
        for model in apps.get_app_config(label).get_models():
            if model in (Refusal, KeyTally):
                continue
            values = model.objects.order_by("pk").values()
            out[model.__name__] = [
                {k: v for k, v in row.items() if not (model is HandKey and k == "last_used_at")}
                for row in values
            ]
    return out


@pytest.fixture
def world(
    api_a: Api, boss: Api, run: Run, lane: Lane, owner: Hand, workspace_admin_client: Client
) -> World:  # noqa: F811
    return World(api_a, boss, run, lane, owner, workspace_admin_client)


@pytest.mark.parametrize(("limit", "over"), cases())
def test_a_text_over_its_limit_is_refused_and_writes_nothing_and_at_it_is_accepted(
    world: World, limit: Limit, over: bool
) -> None:
    made = limit.prepare(world)
    value = limit.value(limit.limit + 1 if over else limit.limit)
    before = rows()
    response = limit.send(world, made, value)
    if limit.dashboard:
        # A form over its limit is shown again with its error; an accepted one redirects.
        assert response.status_code == (200 if over else 302), response.content[:300]
        if over:
            context = {k: v for layer in response.context for k, v in layer.flatten().items()}
            forms = [v for v in context.values() if isinstance(v, BaseForm)]
            assert any(limit.field in form.errors for form in forms), forms
    elif over:
        error = error_of(response, 400, "validation_error")
        assert limit.key in error["fields"], error
    else:
        assert 200 <= response.status_code < 300, response.content[:300]
    assert (rows() == before) == over


def test_the_docs_list_every_limit() -> None:
    """docs/api.md's "Sizes" table has a row for every field of `LIMITS`, with its limit."""
    section = DOCS.read_text().split("\n## Sizes", 1)[1].split("\n## ", 1)[0]
    table = {}
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 3 and cells[0] not in ("call", "---"):
            where, fields, size = cells
            for field in re.findall(r"`([^`]+)`", fields):
                table[(where.strip("`"), field)] = size
    for limit in LIMITS:
        size = table.get((limit.where, limit.field))
        assert size is not None, f"docs/api.md lists no size for {limit.id}"
        assert size.startswith(f"{limit.limit:,} {limit.unit}"), (limit.id, size)
