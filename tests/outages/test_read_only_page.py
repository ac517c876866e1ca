"""A page on a database that can no longer write (a standby after a failover) answers the outage
page, 503, and the next request connects again (`apikit.outages`)."""

from __future__ import annotations

import pytest
from django.db import connection

from tests.outages.support import read_only_session

pytestmark = pytest.mark.django_db(transaction=True)


def test_a_page_answers_the_outage_page(supervisor_client, workspace) -> None:  # noqa: ANN001
    read_only_session()
    response = supervisor_client.post("/leases/break/", {"resource": "x", "reason": "r"})
    assert response.status_code == 503
    assert connection.connection is None
    assert supervisor_client.get("/").status_code == 200
