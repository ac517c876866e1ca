"""A connection that dies under a call (the primary killed, Patroni promoting another) answers
503 dependency_unavailable, never 500, whatever the call was doing: here, waiting in line on
the raw connection's LISTEN (leases/waiting.py), which once let psycopg's own error through."""

from __future__ import annotations

import psycopg
import pytest
from django.db import OperationalError, connection

from leases.waiting import listening
from tests.reliability.live import database_url

pytestmark = pytest.mark.django_db(transaction=True)


def kill_my_backend() -> None:
    pid = connection.connection.info.backend_pid
    from django.conf import settings

    with psycopg.connect(database_url(settings.DATABASES["default"]), autocommit=True) as admin:
        admin.execute("SELECT pg_terminate_backend(%s)", [pid])


def test_a_wait_whose_connection_dies_raises_djangos_operational_error() -> None:
    with listening(["gc_test_channel"]) as wait:
        assert wait(0.01, 0.01) is False  # alive: a plain timeout
        kill_my_backend()
        with pytest.raises(OperationalError):
            wait(1.0, 1.0)
        assert connection.errors_occurred  # so Django drops it at the end of the request
    connection.close()
