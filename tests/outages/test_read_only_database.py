"""A database that can no longer write (after a failover the old primary comes back as a
standby, SQLSTATE 25006) is an outage: 503 dependency_unavailable, nothing written, and the
connection dropped so the next call connects again (`apikit.outages`)."""

from __future__ import annotations

import pytest
from django.db import connection

from leases.models import Lease
from tests.outages.support import read_only_session
from tests.support.api import Api, error_of

pytestmark = pytest.mark.django_db(transaction=True)


def acquire(api: Api, resource: str) -> object:
    body = {"resource": resource, "ttl_s": 30, "process_id": "host:1"}
    return api.post("/leases/acquire", body)


def test_it_answers_503_and_reconnects(api_a: Api) -> None:
    read_only_session()
    refused = acquire(api_a, "migrations")
    error = error_of(refused, 503, "dependency_unavailable")
    assert "retry" in error["message"]
    assert connection.connection is None  # dropped: the next call connects again
    assert not Lease.objects.filter(resource="migrations").exists()
    granted = acquire(api_a, "migrations")
    assert granted.status_code == 201, granted.content
    assert Lease.objects.get(resource="migrations").holder == api_a.hand.name
