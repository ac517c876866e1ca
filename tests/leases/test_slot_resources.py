"""A run slot's lease is the fleet's (issue 18, item 4): the resource calls refuse it, whatever
its case or surrounding space, so a holder cannot release its slot through `/leases/release`
and leave its attempt lost with no event."""

from __future__ import annotations

import pytest

from fleet.models import Attempt
from leases.models import Event, Lease
from tests.support.api import Api, claim, error_of

pytestmark = [pytest.mark.hostile, pytest.mark.django_db]


def test_the_resource_calls_refuse_a_slots_lease(api_a: Api, run) -> None:
    api = api_a
    attempt = claim(api, run)
    slot = Lease.objects.get(kind="slot", holder="hand-a")
    fence, process = attempt["fence"], "host-a:1"
    for name in (slot.resource, slot.resource.upper(), f" {slot.resource}"):
        for path, body in (
            ("/leases/renew", {"resource": name, "fence": fence, "process_id": process}),
            ("/leases/release", {"resource": name, "fence": fence}),
            ("/leases/check", {"resource": name, "fence": fence}),
            ("/leases/acquire", {"resource": name, "ttl_s": 30, "process_id": process}),
        ):
            error = error_of(api.post(path, body), 400, "validation_error")
            assert "resource" in error["fields"], (path, name)
    slot.refresh_from_db()
    assert (slot.status, slot.fence) == ("held", fence)
    assert Attempt.objects.get(pk=attempt["id"]).end is None
    assert not Event.objects.filter(kind__in=["lease_released", "lost"]).exists()
