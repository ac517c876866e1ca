"""How many `wait_s` acquires may sleep at once (leasing/waits.py): per key, per workspace and per
web process; over a cap the call is refused at once with 429 `rate_limited` and
`retry_after_s`, and a permit comes back when its wait ends, however it ends."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import psycopg
import pytest
from django.db import connection

from hands import services as hand_services
from leasing import waits
from tests.reliability.live import database_url
from tests.support.api import Api, error_of, mint, refusals


def acquire(api: Api, resource: str = "tests", **extra: Any) -> Any:
    body = {"resource": resource, "ttl_s": 60, "process_id": f"{api.hand.name}:1", **extra}
    return api.post("/leases/acquire", body)


@contextmanager
def waiting(api: Api, count: int, resource: str = "tests", wait_s: float = 6.0) -> Iterator[list]:
    """`count` acquires of `api` sleeping on `resource` (each on its own thread and database
    connection) until their wait runs out; their answers once the block is over."""
    answers: list[Any] = []
    _ASLEEP.append(answers)

    def wait() -> None:
        try:
            answers.append(acquire(api, resource, wait_s=wait_s))
        finally:
            connection.close()

    before = _permits_held()
    threads = [threading.Thread(target=wait) for _ in range(count)]
    for thread in threads:
        thread.start()
    # Each has tried once and gone to sleep holding its permits (a key's and a workspace's
    # advisory lock each), however long its thread took to start.
    deadline = time.monotonic() + 30
    while _permits_held() < before + 2 * count:
        assert time.monotonic() < deadline, "the waits never went to sleep"
        time.sleep(0.02)
    try:
        yield answers
    finally:
        _ASLEEP[:] = [held for held in _ASLEEP if held is not answers]
        for thread in threads:
            thread.join(wait_s + 5)
        assert not any(thread.is_alive() for thread in threads)


def _permits_held() -> int:
    """The wait permits (session advisory locks) held now in this test's database."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND granted "
            "AND database = (SELECT oid FROM pg_database WHERE datname = current_database())"
        )
        return cursor.fetchone()[0]


# The answers of the waits `waiting` holds asleep now.
_ASLEEP: list[list[Any]] = []


def refused_at_once(api: Api, resource: str = "tests", whose: str = "key") -> dict[str, Any]:
    """Refused without a wait: answered while the admitted waits still sleep (none of them has
    its answer yet), and long before its own wait_s would have run out."""
    started = time.monotonic()
    error = error_of(acquire(api, resource, wait_s=20), 429, "rate_limited")
    assert time.monotonic() - started < 10
    assert all(answers == [] for answers in _ASLEEP), _ASLEEP
    assert error["retry_after_s"] == waits.RETRY_AFTER_S
    assert error["waits_of"] == whose
    assert "wait_s" in error["message"]
    return error


pytestmark = pytest.mark.django_db(transaction=True)


def test_it_refuses_a_keys_wait_beyond_its_cap_at_once(api_a: Api, api_b: Api, settings) -> None:
    settings.GC_WAITS_PER_KEY = 2
    assert acquire(api_a).status_code == 201
    with waiting(api_b, 2) as answers:
        error = refused_at_once(api_b)
        assert error["waits_limit"] == 2
        # Another key of the workspace has permits of its own.
        with waiting(Api(mint(api_b.hand, ["leases"]), api_b.hand), 1) as more:
            pass
    # The waits admitted slept until their wait ran out.
    assert [a.status_code for a in answers + more] == [409, 409, 409]
    assert len(refusals("rate_limited")) == 1
    assert len(refusals("lease_held")) == 3


def test_a_permit_comes_back_when_its_wait_ends(api_a: Api, api_b: Api, settings) -> None:
    settings.GC_WAITS_PER_KEY = 1
    assert acquire(api_a).status_code == 201
    # Each wait ends by running out (409): its permit is back for the next one.
    for _ in range(3):
        error_of(acquire(api_b, wait_s=0.3), 409, "lease_held")
    assert not refusals("rate_limited")


def test_an_acquire_granted_at_once_needs_no_permit(api_a: Api, api_b: Api, settings) -> None:
    settings.GC_WAITS_PER_KEY = 1
    assert acquire(api_a).status_code == 201
    with waiting(api_b, 1):
        refused_at_once(api_b)
        assert acquire(api_b, "free-one", wait_s=20).status_code == 201


def test_it_refuses_a_workspaces_wait_beyond_its_cap(
    api_a: Api, api_b: Api, api_outsider: Api, settings
) -> None:
    settings.GC_WAITS_PER_KEY = 4
    settings.GC_WAITS_PER_WORKSPACE = 2
    assert acquire(api_a).status_code == 201
    with waiting(api_b, 2):
        # (A hand of its own: the holder's acquire would renew, not wait.)
        hand_c, _ = hand_services.hand_create(workspace=api_a.hand.workspace, name="hand-c")
        refused_at_once(Api(mint(hand_c, ["leases"]), hand_c), whose="workspace")
        # Another workspace is not counted with this one.
        assert acquire(api_outsider, "tests").status_code == 201
        other, _ = hand_services.hand_create(workspace=api_outsider.hand.workspace, name="o-2")
        with waiting(Api(mint(other, ["leases"]), other), 1) as answers:
            pass
        assert [a.status_code for a in answers] == [409]


def test_it_leaves_the_processs_other_threads_to_calls_that_do_not_wait(
    api_a: Api, api_b: Api, api_outsider: Api, settings
) -> None:
    settings.GC_WAITS_PER_PROCESS = 1
    assert acquire(api_a).status_code == 201
    assert acquire(api_outsider).status_code == 201
    with waiting(api_b, 1):
        other, _ = hand_services.hand_create(workspace=api_outsider.hand.workspace, name="o-2")
        refused_at_once(Api(mint(other, ["leases"]), other), whose="process")
        assert api_outsider.get("/me").status_code == 200


@contextmanager
def one_by_one(apis: list[Api], resource: str = "tests", wait_s: float = 60.0) -> Iterator[list]:
    """Each of `apis` sends one `wait_s` acquire of `resource`, one after the other: each either
    goes to sleep holding its permits (then its answer comes when the resource is let go, or
    its wait runs out) or is answered at once. Each call's answers (empty while it sleeps), in
    order."""
    calls: list[list[Any]] = []
    threads = []
    try:
        for api in apis:
            answers: list[Any] = []

            def wait(api: Api = api, answers: list[Any] = answers) -> None:
                try:
                    answers.append(acquire(api, resource, wait_s=wait_s))
                finally:
                    connection.close()

            before = _permits_held()
            threads.append(threading.Thread(target=wait))
            threads[-1].start()
            calls.append(answers)
            # Asleep (its key's and workspace's advisory locks taken) or answered, however long
            # its thread took to start.
            deadline = time.monotonic() + 30
            while not answers and _permits_held() < before + 2:
                assert time.monotonic() < deadline, "the wait neither slept nor was answered"
                time.sleep(0.02)
        yield calls
    finally:
        for thread in threads:
            thread.join(wait_s + 5)
        assert not any(thread.is_alive() for thread in threads)


def test_one_workspace_filling_its_waits_leaves_another_workspaces_waits_admitted(
    api_a: Api, api_b: Api, api_outsider: Api, settings
) -> None:
    # The defaults: a workspace may have more waits (16) than a process may put to sleep (6).
    settings.GC_WAITS_PER_KEY = 4
    settings.GC_WAITS_PER_WORKSPACE = 16
    settings.GC_WAITS_PER_PROCESS = 6
    share = waits.cap("workspace_in_process")
    assert share == 3
    assert acquire(api_a).status_code == 201
    assert acquire(api_outsider).status_code == 201
    other, _ = hand_services.hand_create(workspace=api_outsider.hand.workspace, name="o-2")
    # The attack: one workspace sends its whole cap of waits, four keys of four each.
    keys = [Api(mint(api_b.hand, ["leases"]), api_b.hand) for _ in range(4)]
    with one_by_one([api for api in keys for _ in range(4)]) as flood:
        asleep = [answers for answers in flood if not answers]
        refused = [answers[0] for answers in flood if answers]
        # Another workspace's waits are admitted meanwhile: its own share of the process.
        with one_by_one([Api(mint(other, ["leases"]), other)] * share) as admitted:
            assert admitted == [[]] * share, [a[0].json() for a in admitted if a]
            # None of the first workspace's waits had ended to make room.
            assert all(answers == [] for answers in asleep)
            assert api_outsider.get("/me").status_code == 200
            # Let go: each workspace's waits (one hand's process each) are granted, and end.
            for api in (api_a, api_outsider):
                released = api.post("/leases/release", {"resource": "tests", "fence": 1})
                assert released.status_code == 200, released.content
        # The first workspace had half the process's permits, and was told so beyond them.
        assert len(asleep) == share, [answer.json() for answer in refused]
        for answer in refused:
            error = error_of(answer, 429, "rate_limited")
            assert (error["waits_of"], error["waits_limit"]) == ("workspace_in_process", 3)
            assert "wait_s" in error["message"]
    # Each admitted wait slept until its holder let go.
    assert [a[0].status_code for a in asleep + admitted] == [201] * (2 * share)


def test_a_permit_held_by_a_connection_that_died_is_free_again(
    api_a: Api, api_b: Api, settings
) -> None:
    settings.GC_WAITS_PER_KEY = 2
    assert acquire(api_a).status_code == 201
    key_id = api_b.hand.keys.get().pk
    base = waits.lock_base("key", key_id)
    # Another process's connection holds both of the key's permits...
    other = psycopg.connect(database_url(connection.settings_dict), autocommit=True)
    other.execute("SELECT pg_advisory_lock(%s), pg_advisory_lock(%s)", [base, base + 1])
    refused_at_once(api_b)
    # ...and dies: PostgreSQL drops its locks with its session.
    other.close()
    error_of(acquire(api_b, wait_s=0.3), 409, "lease_held")


def test_the_lock_numbers_of_a_key_stay_in_their_block() -> None:
    for ident in (1, 2, 10**12, 2**62):
        for whose in ("key", "workspace"):
            base = waits.lock_base(whose, ident)
            assert base % waits.MAX_WAITS == 0
            assert -(2**63) <= base and base + waits.MAX_WAITS - 1 < 2**63
    assert waits.lock_base("key", 7) != waits.lock_base("workspace", 7)
