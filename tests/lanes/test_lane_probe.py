"""A lane-limited key reads only its lane's (issue 33, item 6): the probe walks every endpoint a
key can read, found from the URL resolver (so an endpoint added later is walked too, or the probe
says what it lacks to walk it), with lane `alpha`'s key (every scope) over a workspace where lane
B has hands, keys, runs, attempts, leases, pool members, waiters, handoffs, receipts,
attestations, refusals, events, friction, costs and checkpoints, and a run of lane alpha waits
for one of lane B's (the ready queue, `?ready=true`, and the timeline as JSON Lines,
`?format=jsonl`, are read too), and asserts that nothing of lane B is in any answer: not its
hands' names, not their processes, not its keys' prefixes, not its titles or URLs
(`conftest.py`: every such name carries the marker `zzb`). Lane B's own objects are not found, as
if they did not exist. Then the answers that name a holder (a denial, a check, a verification, a
receipt, a handoff, a renewal's requests, a harness's hook, a claim on the run that waits) are
asked the same.

Before the fix, lane alpha's key read `GET /hands/zzb-hand/keys` as 200 `[]`, and lane B's
holders by name in `GET /leases`, `GET /pools`, `POST /fences/verify`, the denials, the handoffs,
the renewals' requests, `GET /leases/queue`, the events, the attempts and slots of its own run
held by lane B's roamer, the costs by hand, and the workspace's attestations (`backs`)."""

from __future__ import annotations

import re
from itertools import product
from typing import Any

import pytest
from django.urls import URLPattern

from groundcontrol.api_urls import urlpatterns
from tests.harnesses.events import REPO, event, hook
from tests.lanes.conftest import REPOSITORY, World
from tests.support.api import Api

pytestmark = [pytest.mark.django_db, pytest.mark.security]

PARAMETER = re.compile(r"<(?:\w+:)?(\w+)>")

# The query strings each reading endpoint is walked with besides none, by the URL's name: the
# filters that name a hand or a lane are where a name would be confirmed.
QUERIES: dict[str, list[dict[str, Any]]] = {
    "api-leases": [
        {"holder": "zzb-hand"},
        {"holder": "zzb-roamer"},
        {"covering": ["src/shared.py", "src/roam.py"]},
        {"prefix": "src/"},
        {"state": "live"},
    ],
    "api-lease-queue": [{"resource": "src/alpha.py"}],
    "api-events": [{"hand": "zzb-hand"}, {"hand": "zzb-roamer"}, {"kind": "handoff_requested"}],
    "api-refusals": [{"hand": "zzb-hand"}, {"code": "lease_held"}],
    "api-attempts": [{"hand": "zzb-roamer"}, {"lane": "zzb-lane"}, {"lane": "alpha"}],
    "api-attestations": [
        {"url": "https://github.com/acme/app/pull/9"},
        {"url": "https://github.com/acme/zzb/pull/2"},
    ],
    "api-fences-receipts": [{"repository": REPOSITORY, "sha": ["b" * 40, "a" * 40]}],
    "api-costs": [{"by": by} for by in ("lane", "run", "hand", "attempt")],
    "api-friction": [{"lane": "zzb-lane"}],
    "api-friction-export": [{"format": "json"}, {"format": "markdown"}],
    "api-runs-index": [{"lane": "zzb-lane"}, {"state": "open"}, {"ready": "true"}],
    "api-run-timeline": [{"format": "jsonl"}],
    "api-handoffs": [{"role": "asked"}, {"role": "received"}],
    "api-budgets": [{"lane": "zzb-lane"}],
    "api-slots": [{"state": "held"}],
}


def reading_routes() -> list[URLPattern]:
    """Every URL pattern of the API whose view answers GET (the catch-all's aside)."""
    routes = []
    for pattern in urlpatterns:
        assert isinstance(pattern, URLPattern), pattern
        view = getattr(pattern.callback, "view_class", None)
        if pattern.name == "api-not-found" or view is None or not hasattr(view, "get"):
            continue
        routes.append(pattern)
    return routes


def leaked(world: World, text: str) -> list[str]:
    return [secret for secret in world.secrets if secret.lower() in text.lower()]


def body_of(response: Any) -> str:
    """The answer's text, a streamed one (`?format=jsonl`) read to its end."""
    if getattr(response, "streaming", False):
        return b"".join(response.streaming_content).decode()
    return response.content.decode()


def assert_lane_b_absent(world: World, response: Any, asked: str, echo: list[str]) -> None:
    """Nothing of lane B in the answer. A not-found answer may say back what it was asked for
    (`no hand 'zzb-hand'`, as for any name that is nobody's): those values are set aside."""
    text = body_of(response)
    assert response.status_code < 500, (asked, text)
    if response.status_code == 404:
        for value in echo:
            text = text.replace(value, "")
    assert leaked(world, text) == [], (asked, response.status_code, text)


def test_every_reading_endpoint_answers_lane_alpha_nothing_of_lane_b(world: World) -> None:
    reader = world.alpha
    routes = reading_routes()
    assert len(routes) > 30  # the resolver's patterns, not a list of our own
    answered: dict[str, int] = {}
    # The records first: the probe's own not-found calls are recorded as lane alpha's refusals,
    # saying back the names it asked for.
    routes.sort(key=lambda p: p.name not in ("api-refusals", "api-events"))
    for pattern in routes:
        route = str(pattern.pattern)
        names = PARAMETER.findall(route)
        missing = [n for n in names if n not in world.ids and n not in world.theirs]
        assert not missing, f"{route}: the probe has no values for {missing}; add them"
        choices = [
            [(value, False) for value in world.ids.get(n, [])]
            + [(value, True) for value in world.theirs.get(n, [])]
            for n in names
        ]
        for combination in product(*choices):
            path = route
            for name, (value, _) in zip(names, combination, strict=True):
                path = path.replace(re.search(rf"<(?:\w+:)?{name}>", path)[0], str(value), 1)
            theirs = any(is_theirs for _, is_theirs in combination)
            for query in [{}, *QUERIES.get(pattern.name or "", [])]:
                asked = f"/{path}?{query}"
                response = reader.get(f"/{path}", query)
                echo = [str(value) for value, _ in combination] + [
                    str(v) for v in query.values() if isinstance(v, str)
                ]
                assert_lane_b_absent(world, response, asked, echo)
                if theirs:
                    # Lane B's objects are not found, as if they did not exist.
                    assert response.status_code == 404, (asked, response.content)
                    assert response.json()["error"]["code"] == "not_found"
                elif response.status_code == 200:
                    answered[pattern.name or route] = answered.get(pattern.name or route, 0) + 1
    # The probe read something from each: an endpoint it could not reach would prove nothing.
    assert sorted(p.name for p in routes if p.name not in answered) == []


def test_every_answer_that_names_a_holder_names_none_of_lane_b(world: World) -> None:
    alpha, fences, attempt = world.alpha, world.fences, world.attempts["alpha"]
    calls: list[tuple[str, str, Any]] = [
        # A claim on lane alpha's run that waits for lane B's run.
        ("post", f"/runs/{world.ids['run_id'][1]}/claim", {"process_id": "p3"}),
        # Denials: a name, a pool, a slot of lane alpha's run held by lane B's roamer.
        ("post", "/leases/acquire", {"resource": "src/shared.py", "ttl_s": 60, "process_id": "p"}),
        ("post", "/leases/acquire", {"resource": "src/roam.py", "ttl_s": 60, "process_id": "p"}),
        ("post", "/leases/acquire", {"resource": "src/", "ttl_s": 60, "process_id": "p"}),
        ("post", "/pools/ports/acquire", {"process_id": "p", "ttl_s": 60}),
        (
            "post",
            f"/runs/{world.ids['run_id'][0]}/claim",
            {"process_id": "p2", "slot": world.attempts["roamer"]["slot"]},
        ),
        # Reads of tenures.
        ("post", "/leases/check", {"resource": "src/shared.py", "fence": fences["src/shared.py"]}),
        (
            "post",
            "/fences/verify",
            {
                "fences": [f"src/shared.py@{fences['src/shared.py']}", "src/roam.py@1"],
                "paths": ["src/shared.py", "src/roam.py", "src/alpha.py"],
            },
        ),
        (
            "post",
            "/fences/receipts",
            {
                "repository": REPOSITORY,
                "commits": [
                    {
                        "sha": "c" * 40,
                        "paths": ["src/shared.py", "src/roam.py"],
                        "fences": [f"src/shared.py@{fences['src/shared.py']}"],
                    }
                ],
            },
        ),
        # A handoff asked of lane B's holder, and the renewals that carry lane B's requests.
        ("post", "/leases/handoff", {"resource": "src/roam.py", "reason": "mine"}),
        (
            "post",
            "/leases/renew",
            {
                "resource": "src/alpha.py",
                "fence": fences["src/alpha.py"],
                "process_id": "alpha-proc",
            },
        ),
        ("post", "/leases/renew-all", {"process_id": "alpha-proc"}),
        (
            "post",
            f"/attempts/{attempt['id']}/reports",
            {"fence": attempt["fence"], "process_id": "alpha-proc", "kind": "heartbeat"},
        ),
        ("post", "/leases/break", {"resource": "src/shared.py", "reason": "x"}),
    ]
    for method, path, body in calls:
        response = getattr(alpha, method)(path, body)
        assert_lane_b_absent(world, response, f"{method} {path}", [])
    # The claim on the run that waits was refused, lane B's run counted, never named.
    waiting = alpha.post(f"/runs/{world.ids['run_id'][1]}/claim", {"process_id": "p3"})
    assert waiting.status_code == 409, waiting.content
    assert waiting.json()["error"]["waiting_for"] == [{"run": None, "title": None, "state": None}]
    assert "a run of another lane" in waiting.json()["error"]["message"]
    # The renewals did carry the requests, their asker unnamed.
    renewed = alpha.post("/leases/renew-all", {"process_id": "alpha-proc"}).json()
    requests = [r for lease in renewed["renewed"] for r in lease["handoff_requests"]]
    assert requests and all(r["from"] is None for r in requests)
    # A harness's hook denied a write of lane B's file, in the harness's own words.
    body = event(
        "claude-code", "pre_tool_use_write", **{"tool_input.file_path": f"{REPO}/src/shared.py"}
    )
    said = hook(alpha, "claude-code", body, repository=REPO)
    assert "deny" in said.content.decode()
    assert_lane_b_absent(world, said, "hook", [])
    # And the record of what lane alpha was refused names none of lane B either.
    for path in ("/refusals", "/events"):
        assert_lane_b_absent(world, alpha.get(path, {"limit": 500}), path, [])
    # Lane B's objects, asked by name, are not found, as if they did not exist.
    for method, path, body in [
        ("post", "/hands/zzb-hand/keys", {"scopes": ["work"], "lane": "alpha"}),
        ("patch", "/hands/zzb-roamer", {"capabilities": ["x"]}),
        ("post", f"/keys/{world.secrets[1]}/revoke", {"reason": "x"}),
    ]:
        response = getattr(alpha, method)(path, body)
        assert response.status_code == 404, response.content
        assert_lane_b_absent(world, response, path, ["zzb-hand", "zzb-roamer", world.secrets[1]])


def test_a_workspace_wide_key_still_reads_every_name(world: World) -> None:
    """The rule limits lane-limited keys only: the workspace's supervisor reads lane B's
    holders where lane alpha's key reads null."""
    boss: Api = world.boss
    holders = {lease["resource"]: lease["holder"] for lease in boss.get("/leases").json()}
    assert holders["src/shared.py"] == "zzb-hand"
    mine = {lease["resource"]: lease["holder"] for lease in world.alpha.get("/leases").json()}
    lane_b = {"zzb-hand", "zzb-roamer"}
    assert mine == {name: None if h in lane_b else h for name, h in holders.items()}
    assert mine["src/alpha.py"] == "alpha-lead" and mine["src/shared.py"] is None
