"""A hot call whose statement matched nothing is refused without running it again: the key is
read (its own refusal first) and the service says why from what it reads. A renewal, a renew-all
or a renewing report that missed cannot match later (a tenure once lost, released, superseded or
another process's stays so), so each call runs its renewal once. A denied acquire is explained
from what stands in the way, without granting again; its service grants only when the way has
changed (the holder let go meanwhile, or a lost tenure on its line had its end recorded)."""

from __future__ import annotations

import functools
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any
from unittest import mock

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from fleet.attempts import reports as report_services
from leases import clock, engine, queue
from leases.models import Event, Lease
from leasing import hot
from tests.support.api import Api, claim, error_of, report

pytestmark = pytest.mark.django_db


@contextmanager
def counted(owner: Any, name: str) -> Iterator[list[int]]:
    """The calls of `owner.name`, counted, each still made."""
    real, calls = getattr(owner, name), []

    @functools.wraps(real)
    def counting(*args: Any, **kwargs: Any) -> Any:
        calls.append(1)
        return real(*args, **kwargs)

    with mock.patch.object(owner, name, counting):
        yield calls


@contextmanager
def renewals() -> Iterator[dict[str, list[int]]]:
    """Every way a renewal's statement can run: the hot call's, and each service's."""
    with (
        counted(hot, "run_statement") as hot_statements,
        counted(engine, "renew") as renews,
        counted(engine, "renew_all") as renew_alls,
        counted(report_services, "_report_renewing") as reports,
    ):
        yield {
            "hot": hot_statements,
            "renew": renews,
            "renew_all": renew_alls,
            "report": reports,
        }


def ran(statements: dict[str, list[int]]) -> dict[str, int]:
    return {name: len(calls) for name, calls in statements.items()}


def test_a_refused_renewal_runs_its_statement_once(api_a: Api) -> None:
    body = {"resource": "src/auth/", "ttl_s": 60, "process_id": "p1"}
    lease = api_a.post("/leases/acquire", body).json()
    released = api_a.post("/leases/release", {"resource": "src/auth/", "fence": lease["fence"]})
    assert released.status_code == 200, released.content
    renew = {"resource": "src/auth/", "fence": lease["fence"], "process_id": "p1"}
    with renewals() as statements:
        refused = api_a.post("/leases/renew", renew)
    assert ran(statements) == {"hot": 1, "renew": 0, "renew_all": 0, "report": 0}
    error_of(refused, 409, "lease_lost")


def test_a_renewal_by_another_process_is_refused_by_one_statement(api_a: Api) -> None:
    lease = api_a.post(
        "/leases/acquire", {"resource": "db/", "ttl_s": 60, "process_id": "p1"}
    ).json()
    renew = {"resource": "db/", "fence": lease["fence"], "process_id": "p2"}
    with renewals() as statements:
        refused = api_a.post("/leases/renew", renew)
    assert ran(statements)["hot"] == 1 and ran(statements)["renew"] == 0
    assert refused.status_code == 409, refused.content


def test_a_renew_all_that_renews_and_loses_nothing_runs_its_statement_once(api_a: Api) -> None:
    with renewals() as statements:
        answered = api_a.post("/leases/renew-all", {"process_id": "nobody"})
    assert ran(statements) == {"hot": 1, "renew": 0, "renew_all": 0, "report": 0}
    assert answered.status_code == 200 and answered.json() == {"renewed": [], "not_renewed": []}


def test_a_refused_heartbeat_runs_its_statement_once(api_a: Api, run) -> None:
    attempt = claim(api_a, run)
    with renewals() as statements:
        refused = report(api_a, attempt, process="another-host:2")
    assert ran(statements) == {"hot": 1, "renew": 0, "renew_all": 0, "report": 0}
    error_of(refused, 409, "process_mismatch")


def test_a_heartbeat_of_an_ended_attempt_runs_its_statement_once(api_a: Api, run) -> None:
    attempt = claim(api_a, run)
    ended = api_a.post(
        f"/attempts/{attempt['id']}/release",
        {"fence": attempt["fence"], "process_id": "host-a:1", "reason": "done here"},
    )
    assert ended.status_code == 200, ended.content
    with renewals() as statements:
        refused = report(api_a, attempt)
    assert ran(statements) == {"hot": 1, "renew": 0, "renew_all": 0, "report": 0}
    error_of(refused, 409, "lease_lost")


def test_a_heartbeat_that_named_a_wrongly_remembered_lease_is_renewed_by_the_service(
    api_a: Api, run, make_run
) -> None:
    """A miss proves nothing when the hot call named another lease than the attempt's (its
    memory gone wrong): the service's statement runs, once, and renews."""
    attempt = claim(api_a, run)
    other = claim(api_a, make_run(title="another run"))
    hot.ATTEMPT_LEASES[attempt["id"]] = Lease.objects.get(resource=other["lease"]["resource"]).pk
    with renewals() as statements:
        answered = report(api_a, attempt)
    assert ran(statements) == {"hot": 1, "renew": 0, "renew_all": 0, "report": 1}
    assert answered.status_code == 200 and answered.json()["renewed"] is True, answered.content


def test_a_denied_acquire_is_explained_without_granting_again(api_a: Api, api_b: Api) -> None:
    body = {"resource": "locks/migrate", "ttl_s": 60, "process_id": "p1"}
    assert api_b.post("/leases/acquire", body).status_code == 201
    with (
        counted(hot, "run_statement") as statements,
        counted(engine, "take") as takes,
        counted(engine, "insert") as inserts,
    ):
        denied = api_a.post("/leases/acquire", body)
    error = error_of(denied, 409, "lease_held")
    assert error["holder"] == api_b.hand.name
    assert (len(statements), len(takes), len(inserts)) == (1, 0, 0)


def test_an_acquire_over_a_lost_tenure_records_its_end_and_grants(
    api_a: Api, api_b: Api, frozen_clock
) -> None:
    """The statement takes only a free row; a tenure lost but not yet recorded makes it miss,
    and the service records the end (`lease_expired`) before it grants, once."""
    body = {"resource": "locks/migrate", "ttl_s": 30, "process_id": "p1"}
    assert api_b.post("/leases/acquire", body).status_code == 201
    clock.advance(31)
    with counted(hot, "run_statement") as statements, counted(engine, "take") as takes:
        granted = api_a.post("/leases/acquire", body)
    assert granted.status_code == 201, granted.content
    assert (granted.json()["holder"], granted.json()["fence"]) == (api_a.hand.name, 2)
    assert (len(statements), len(takes)) == (1, 1)
    kinds = list(
        Event.objects.filter(resource="locks/migrate").order_by("id").values_list("kind", "fence")
    )
    assert kinds == [("lease_acquired", 1), ("lease_expired", 1), ("lease_acquired", 2)]


def test_a_denied_acquire_is_explained_from_one_read(api_a: Api, api_b: Api) -> None:
    """After the statement missed: the key is read (its own refusal first), what stands in the
    way is read once, the refusal is recorded; nothing locks the tree or writes a lease."""
    body = {"resource": "locks/migrate", "ttl_s": 60, "process_id": "p1"}
    assert api_b.post("/leases/acquire", body).status_code == 201
    with (
        counted(hot, "run_statement") as statements,
        counted(queue, "standing_in_the_way") as reads,
        CaptureQueriesContext(connection) as queries,
    ):
        denied = api_a.post("/leases/acquire", body)
    error = error_of(denied, 409, "lease_held")
    assert (error["holder"], error["position"], error["ahead"]) == (
        api_b.hand.name,
        1,
        [api_b.hand.name],
    )
    assert (len(statements), len(reads)) == (1, 1)
    # The hot statement runs on psycopg's own prepared statement; Django's cursor saw the rest:
    # the key's reads, then what stands in the way, once, and the refusal's record.
    after = [query["sql"] for query in queries.captured_queries]
    reads = [s for s in after if s.startswith("SELECT") and "fleet_handkey" not in s]
    assert len(reads) == 1 and "LEFT JOIN LATERAL" in reads[0], after
    # Written: the refusal, and the key's last use (stamped once a minute); no lease, no line.
    tables = {
        s.split(" SET ")[0].split(" (")[0] for s in after if s.startswith(("INSERT", "UPDATE"))
    }
    assert tables <= {'UPDATE "fleet_handkey"', 'INSERT INTO "leases_refusal"'}, tables
    assert 'INSERT INTO "leases_refusal"' in tables
    assert not [s for s in after if "pg_advisory" in s], after


def test_a_request_with_only_waiters_ahead_is_told_its_place_from_the_same_read(
    api_a: Api, api_b: Api
) -> None:
    queue.join(
        workspace_id=api_b.hand.workspace_id,
        resource="locks/migrate",
        holder=api_b.hand.name,
        process_id="p9",
        mode="exclusive",
    )
    body = {"resource": "locks/migrate", "ttl_s": 60, "process_id": "p1"}
    with counted(queue, "standing_in_the_way") as reads, counted(engine, "take") as takes:
        denied = api_a.post("/leases/acquire", body)
    error = error_of(denied, 409, "lease_held")
    assert (error["position"], error["ahead"], len(reads), len(takes)) == (
        2,
        [api_b.hand.name],
        1,
        0,
    )
    assert "1 waiting request came first" in error["message"]


def test_the_same_process_asking_again_is_renewed_by_the_service(api_a: Api) -> None:
    """The statement grants only a free name; the read shows the caller's own tenure, and the
    service renews it (same fence), as an acquire by its holder always has."""
    body = {"resource": "locks/migrate", "ttl_s": 60, "process_id": "p1"}
    first = api_a.post("/leases/acquire", body).json()
    with counted(queue, "standing_in_the_way") as reads:
        again = api_a.post("/leases/acquire", body)
    assert again.status_code == 201, again.content
    assert (again.json()["fence"], len(reads)) == (first["fence"], 1)
    assert Lease.objects.filter(resource="locks/migrate").count() == 1
