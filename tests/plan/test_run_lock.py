"""The run's lock (`fleet.plan.services.lock_run`) serializes the paths that change which of a
run's slots are done, and holds up nothing else: in particular not the key check a claim's new
attempt makes on its run at commit (FOR KEY SHARE), which it makes after taking its slot's lease.
With FOR UPDATE, a claim that took over a lost slot and a finish of that slot's old tenure (which
holds the run's lock and then waits for the slot's lease) deadlocked: the failover run's long
history found it (docs/scale.md)."""

from __future__ import annotations

import threading

import pytest
from django.db import OperationalError, connection, connections, transaction

from fleet.plan import services as plan_services

pytestmark = [pytest.mark.concurrency, pytest.mark.django_db(transaction=True)]


def in_thread(body) -> list[BaseException]:  # noqa: ANN001
    errors: list[BaseException] = []

    def run() -> None:
        try:
            body()
        except BaseException as error:  # noqa: BLE001 - reported to the test
            errors.append(error)
        finally:
            connections.close_all()

    thread = threading.Thread(target=run)
    thread.start()
    thread.join(30)
    return errors


def test_the_runs_lock_holds_up_another_lock_but_no_key_check(make_run) -> None:  # noqa: ANN001
    run = make_run()
    with transaction.atomic():
        plan_services.lock_run(workspace_id=run.workspace_id, run_id=run.pk)

        def key_check() -> None:
            with transaction.atomic(), connection.cursor() as cursor:
                cursor.execute("SET LOCAL lock_timeout = '2s'")
                # What PostgreSQL's foreign key trigger runs for a new attempt of the run.
                cursor.execute("SELECT 1 FROM fleet_run WHERE id = %s FOR KEY SHARE", [run.pk])

        def second_lock() -> None:
            with transaction.atomic(), connection.cursor() as cursor:
                cursor.execute("SET LOCAL lock_timeout = '1s'")
                plan_services.lock_run(workspace_id=run.workspace_id, run_id=run.pk)

        assert in_thread(key_check) == []
        errors = in_thread(second_lock)
        assert len(errors) == 1 and isinstance(errors[0], OperationalError), errors
        assert "lock timeout" in str(errors[0])
