"""The key is checked again by the statement that grants (issue 18, item 3): a key revoked or
expired while its `wait_s` acquire slept is granted nothing when the holder lets go."""

from __future__ import annotations

import threading
import time
from datetime import timedelta

import pytest
from django.db import connection
from django.utils import timezone

from hands import services as hand_services
from hands.models import HandKey
from leases import services as lease_services
from leases.models import Lease
from tests.support.api import Api, acquire, error_of


def key_of(api: Api) -> HandKey:
    return HandKey.objects.select_related("hand").get(prefix=api.key.split("_")[1])


@pytest.mark.django_db(transaction=True)
def test_a_key_revoked_while_its_acquire_waits_is_not_granted(
    api_a: Api, api_b: Api, workspace
) -> None:  # noqa: ANN001
    first = acquire(api_a, ttl=60).json()
    answer: dict = {}

    def wait() -> None:
        try:
            response = acquire(api_b, wait_s=20)
            answer.update(status=response.status_code, body=response.json())
        finally:
            connection.close()

    waiter = threading.Thread(target=wait)
    waiter.start()
    time.sleep(0.5)  # the waiter's first try was denied; it sleeps on the resource
    hand_services.key_revoke(workspace_id=workspace.pk, prefix=key_of(api_b).prefix, actor="x")
    released = api_a.post("/leases/release", {"resource": "dev-server", "fence": first["fence"]})
    assert released.status_code == 200
    waiter.join(15)
    assert not waiter.is_alive()
    assert answer["status"] == 401 and answer["body"]["error"]["code"] == "key_revoked"
    lease = Lease.objects.get(resource="dev-server")
    assert (lease.status, lease.holder, lease.fence) == ("free", "hand-a", first["fence"])


@pytest.mark.django_db
def test_every_granting_statement_checks_the_guard(api_a: Api, api_b: Api) -> None:
    """New resource (INSERT), free one (UPDATE), the holder again (renewal): none grants to a key
    that expired after it was authenticated, and the refusal says so."""
    key = key_of(api_b)
    guard = hand_services.key_guard(key)
    options = {"workspace_id": key.hand.workspace_id, "holder": "hand-b", "process_id": "p"}
    granted = lease_services.lease_acquire(resource="held-by-b", ttl_s=30, **options, guard=guard)
    assert granted.holder == "hand-b"
    free = acquire(api_a, resource="was-a's").json()
    api_a.post("/leases/release", {"resource": "was-a's", "fence": free["fence"]})
    HandKey.objects.filter(pk=key.pk).update(expires_at=timezone.now() - timedelta(seconds=1))
    for resource in ("never-leased", "was-a's", "held-by-b"):
        with pytest.raises(Exception) as refused:
            lease_services.lease_acquire(resource=resource, ttl_s=30, **options, guard=guard)
        assert getattr(refused.value, "code", None) == "key_expired", resource
    assert not Lease.objects.filter(resource="never-leased").exists()
    assert Lease.objects.get(resource="was-a's").status == "free"
    error_of(acquire(api_b, resource="never-leased"), 401, "key_expired")
