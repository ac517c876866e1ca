"""A call whose transaction PostgreSQL aborts for a deadlock (40P01) or a serialization failure
(40001) runs again whole (`apikit.retries`): it succeeds once a try gets through, writing what one
call writes, and answers 503 `busy` with Retry-After (never a 500, never
`dependency_unavailable`) when every try was aborted; nothing is written then.

The conflict is forced: the first N statements that write a lease row are replaced, through
Django's execute wrapper, by one that raises PostgreSQL's own error with that SQLSTATE, so the
driver and Django wrap it exactly as they wrap a real deadlock."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from django.db import connection

from apikit import retries
from leases import services as leases
from leases.models import Event, Lease, LeaseStatus
from leasing import hot
from pools import services as pools
from tests.support.api import Api, error_of, mint

pytestmark = pytest.mark.django_db(transaction=True)


@contextmanager
def aborted(times: int, sqlstate: str = retries.DEADLOCK_DETECTED) -> Iterator[list[str]]:
    """The first `times` statements that change `leases_lease` fail with `sqlstate`."""
    seen: list[str] = []

    def wrapper(execute: Any, sql: str, params: Any, many: bool, context: Any) -> Any:
        if len(seen) < times and sql.lstrip().upper().startswith("UPDATE LEASES_LEASE"):
            seen.append(sql)
            return execute(
                "DO $$ BEGIN RAISE EXCEPTION 'forced conflict' "
                f"USING ERRCODE = '{sqlstate}'; END $$",
                None,
                many,
                context,
            )
        return execute(sql, params, many, context)

    with connection.execute_wrapper(wrapper):
        yield seen


@pytest.fixture(autouse=True)
def _no_pause(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(retries, "PAUSE_S", 0.0)


def test_it_takes_a_pool_member_after_two_deadlocks(workspace) -> None:  # noqa: ANN001
    pools.pool_create(workspace=workspace, name="ports", members=["p1", "p2"])
    with aborted(2) as seen:
        _, lease = pools.pool_acquire(
            workspace_id=workspace.pk, name="ports", holder="a", process_id="pa", ttl_s=30
        )
    assert len(seen) == 2
    assert lease.resource == "pool/ports/p1" and lease.fence == 1 and lease.holder == "a"
    # Exactly what one call writes: one tenure, one event.
    granted = Event.objects.filter(workspace_id=workspace.pk, kind="lease_acquired")
    assert list(granted.values_list("resource", "fence")) == [("pool/ports/p1", 1)]


def test_it_renews_all_after_a_serialization_failure(workspace) -> None:  # noqa: ANN001
    for name in ("src/a.py", "src/b.py"):
        leases.lease_acquire(
            workspace_id=workspace.pk, resource=name, holder="a", process_id="pa", ttl_s=30
        )
    with aborted(1, retries.SERIALIZATION_FAILURE) as seen:
        done = leases.lease_renew_all(workspace_id=workspace.pk, holder="a", process_id="pa")
    assert len(seen) == 1
    assert [lease.resource for lease in done.renewed] == ["src/a.py", "src/b.py"]


def test_it_answers_busy_when_every_try_deadlocks_and_writes_nothing(
    workspace,
    owner,  # noqa: ANN001
) -> None:
    api = Api(mint(owner, ["leases"]), owner)
    api.post("/leases/acquire", {"resource": "r", "ttl_s": 30, "process_id": "pa"})
    lease = Lease.objects.get(workspace_id=workspace.pk, resource="r")
    with aborted(retries.ATTEMPTS) as seen:
        response = api.post(
            "/leases/release", {"resource": "r", "fence": lease.fence, "process_id": "pa"}
        )
    assert len(seen) == retries.ATTEMPTS
    error = error_of(response, 503, "busy")
    assert error["retry_after_s"] == retries.RETRY_AFTER_S
    assert response["Retry-After"] == "1"
    lease.refresh_from_db()
    assert lease.status == LeaseStatus.HELD and lease.released_at is None
    assert not Event.objects.filter(workspace_id=workspace.pk, kind="lease_released").exists()
    # The same call sent again is applied.
    again = api.post("/leases/release", {"resource": "r", "fence": lease.fence, "process_id": "pa"})
    assert again.status_code == 200, again.content


def test_a_hot_statement_aborted_for_a_deadlock_runs_again(
    workspace,
    owner,
    monkeypatch,  # noqa: ANN001
) -> None:
    """A hot statement aborted for a deadlock applied nothing: the call runs it again (its
    retries, `apikit.retries`), not a 503 and not a 500, and grants once."""
    tries: list[str] = []
    original = hot.run_statement

    def deadlocked_once(db: Any, sql: str, params: Any, **kwargs: Any) -> Any:
        if not tries:
            tries.append(sql)
            with connection.cursor() as cursor:
                cursor.execute(
                    "DO $$ BEGIN RAISE EXCEPTION 'forced conflict' USING ERRCODE = '40P01'; END $$"
                )
        return original(db, sql, params, **kwargs)

    monkeypatch.setattr(hot, "run_statement", deadlocked_once)
    api = Api(mint(owner, ["leases"]), owner)
    response = api.post("/leases/acquire", {"resource": "r", "ttl_s": 30, "process_id": "pa"})
    assert len(tries) == 1, "the hot statement was aborted once"
    assert response.status_code == 201, response.content
    assert response.json()["fence"] == 1
    granted = Event.objects.filter(workspace_id=workspace.pk, kind="lease_acquired")
    assert list(granted.values_list("resource", "fence")) == [("r", 1)]
