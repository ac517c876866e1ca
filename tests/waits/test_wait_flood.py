"""One key, inside its rate limit, floods the real web server with 60 concurrent `wait_s: 30`
acquires of a held resource. Only a few may sleep (leasing/waits.py): the rest are refused at once
with 429 `rate_limited` and `retry_after_s`, and another workspace is answered meanwhile. Both
ways to run: the embedded default (its own PostgreSQL, one web process) and a PostgreSQL server
with two web processes (a key's permits shared between them as advisory locks)."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from django.conf import settings

from hands import services as hand_services
from tests.reliability.live import Api, WebServer, database_url, server_env
from tests.support.processes import laptop_env, manage

pytestmark = pytest.mark.hostile

FLOOD = 60


def _flood(url: str, flooder: str, holder: str, elsewhere: str, *, sleeping: int) -> dict[str, Any]:
    """The flood against a held resource; what every call answered and how fast, and how fast
    another workspace's `GET /me` was answered while the admitted waits slept."""
    with Api(url, holder) as boss, Api(url, elsewhere) as other:
        held = boss.ok(
            "post", "/leases/acquire", {"resource": "tests", "ttl_s": 60, "process_id": "boss:1"}
        )
        answers: list[tuple[int, float, dict[str, Any]]] = []
        lock = threading.Lock()

        def call(n: int) -> None:
            with Api(url, flooder, timeout=60) as api:
                started = time.monotonic()
                response = api.post(
                    "/leases/acquire",
                    {"resource": "tests", "ttl_s": 30, "process_id": f"flood:{n}", "wait_s": 30},
                )
                took = time.monotonic() - started
                body = response.json()
                if response.status_code == 201:  # pass it on to the next in line
                    api.post("/leases/release", {"resource": "tests", "fence": body["fence"]})
                with lock:
                    answers.append((response.status_code, took, body))

        threads = [threading.Thread(target=call, args=(n,)) for n in range(FLOOD)]
        for thread in threads:
            thread.start()
        # Every call not admitted to sleep has been answered (60 threads starting on 2 cores
        # may take longer than any fixed sleep under load), so the rest are asleep.
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            with lock:
                if len(answers) >= FLOOD - sleeping:
                    break
            time.sleep(0.05)
        me = []
        for _ in range(5):
            started = time.monotonic()
            assert other.get("/me").status_code == 200
            me.append(time.monotonic() - started)
        refused_early = sum(1 for status, _, _ in answers if status == 429)
        granted_before_me = sum(1 for status, _, _ in answers if status == 201)
        boss.ok("post", "/leases/release", {"resource": "tests", "fence": held["fence"]})
        for thread in threads:
            thread.join(60)
        assert not any(thread.is_alive() for thread in threads)
    return {
        "answers": answers,
        "me": me,
        "refused_early": refused_early,
        "granted_before_me": granted_before_me,
    }


def _assert_held_off(seen: dict[str, Any], sleeping: int) -> None:
    statuses = sorted(status for status, _, _ in seen["answers"])
    # Those admitted slept and were granted in turn once the holder let go; the rest refused.
    assert statuses == [201] * sleeping + [429] * (FLOOD - sleeping), statuses
    assert seen["refused_early"] == FLOOD - sleeping
    for status, took, body in seen["answers"]:
        if status == 429:
            assert body["error"]["code"] == "rate_limited"
            assert body["error"]["retry_after_s"] > 0
            assert took < 5, took  # at once, not after a wait (60 calls on 2 cores)
    # Another workspace's call is answered while the admitted waits sleep (they sleep until the
    # holder lets go, after these calls): it never waits behind them. Wall-clock on a shared
    # two-core machine is no measure of that; 5 s is the bound the refusals keep too.
    assert seen["granted_before_me"] == 0, seen
    assert max(seen["me"]) < 5, seen["me"]


@pytest.mark.slow
def test_a_wait_flood_on_the_embedded_default_is_held_off(tmp_path: Path) -> None:
    env, _ = laptop_env(tmp_path)
    manage(env, "migrate", "--noinput", "-v", "0")

    def bootstrap(workspace: str) -> str:
        made = manage(
            env,
            "bootstrap",
            "--workspace",
            workspace,
            "--username",
            workspace,
            "--password",
            "flood-test-password-1",
            "--json",
        )
        return json.loads(made)["supervisor_key"]

    boss, elsewhere = bootstrap("web"), bootstrap("elsewhere")
    env.update(GC_RATE_LIMIT_PER_MINUTE="1200")
    # One process of four threads: two of them may sleep in a wait, two answer everyone else;
    # and one workspace's waits take at most half of the two (leasing/waits.py: `share`).
    with WebServer(env=env, log=tmp_path / "server.log", workers=1, threads=4) as server:
        with Api(server.url, boss) as api:
            api.ok("post", "/hands", {"name": "flood"})
            flooder = api.ok("post", "/hands/flood/keys", {"scopes": ["work", "leases"]})["key"]
        seen = _flood(server.url, flooder, boss, elsewhere, sleeping=1)
    _assert_held_off(seen, sleeping=1)


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_a_wait_flood_across_web_processes_is_held_off_per_key(
    workspace,
    outsider_workspace,
    tmp_path: Path,  # noqa: ANN001
) -> None:
    def key(ws: Any, name: str, scopes: list[str]) -> str:
        hand, _ = hand_services.hand_create(workspace=ws, name=name)
        return hand_services.key_issue(hand=hand, scopes=scopes, actor="test").plaintext

    boss = key(workspace, "boss", hand_services.ALL_SCOPES)
    flooder = key(workspace, "flood", ["work", "leases"])
    elsewhere = key(outsider_workspace, "other", ["work"])
    env = server_env(
        database_url(settings.DATABASES["default"]),
        GC_RATE_LIMIT_PER_MINUTE="1200",
        GC_WAITS_PER_KEY="3",
    )
    # Two processes of eight threads: each would let two of one workspace's waits sleep (half
    # of its four), but the key may have three.
    with WebServer(env=env, log=tmp_path / "server.log", workers=2, threads=8) as server:
        seen = _flood(server.url, flooder, boss, elsewhere, sleeping=3)
    _assert_held_off(seen, sleeping=3)
