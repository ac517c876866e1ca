"""Two processes of one hand are two holders: the second's acquire of what the first holds is
denied, saying it is the hand's own other process; taking it over (`gctl lease acquire
--take-over`, the client's `take_over`) moves it, and the first process's renew-all naming it
hears that it lost it. (Two harness sessions sharing one key: tests/harnesses.)"""

from __future__ import annotations

import pytest
from groundcontrol_client import Client
from groundcontrol_client.core.errors import LeaseHeld, describe

from leases.models import Event, Lease
from tests.client.conftest import Fleet

pytestmark = pytest.mark.django_db(transaction=True)


def test_taking_over_moves_it_and_the_first_process_hears_it_lost(gc: Fleet) -> None:
    with Client(gc.url, gc.key_a) as client:
        first = client.lease_acquire("src/app.py", ttl_s=60, process_id="session-1")
        with pytest.raises(LeaseHeld) as refused:
            client.lease_acquire("src/app.py", ttl_s=60, process_id="session-2")
        assert refused.value.get("own_hand") is True
        assert describe(refused.value, subject="src/app.py").startswith(
            "src/app.py is held by your own hand hand-a in another process (session-1) (fence 1)"
        )
        # `gctl lease acquire --take-over`, as the second session would run it.
        done = gc.gctl(
            "--json", "lease", "acquire", "src/app.py", "--take-over", "--process-id", "session-2"
        )
        assert done.returncode == 0, done.stderr
        taken = Lease.objects.get(resource="src/app.py")
        assert (taken.fence, taken.process_id) == (2, "session-2")
        answer = client.lease_renew_all(process_id="session-1", held=[("src/app.py", first.fence)])
        assert answer.renewed == []
        [lost] = answer.not_renewed
        assert (lost.resource, lost.fence, lost.code) == ("src/app.py", 1, "lease_lost")
        assert lost.lease is not None and lost.lease.process_id == "session-2"
    assert Event.objects.filter(kind="lease_taken_over", fence=2).count() == 1
