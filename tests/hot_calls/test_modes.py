"""A hand asking again for a node it holds in shared mode, this time exclusive, over REST: the
contract renews what it holds, in the mode it holds it (`leases.services.lease_acquire`,
tests/leases/test_trees.py::test_asking_again_renews_what_the_hand_holds_whatever_mode_it_asks).
Found by the history harness (tests/reliability): a client abandoned a shared tenure of
`repo/src/web.py` and, within its TTL, asked for the node exclusive; the acquire's hot statement
(leasing/hot.py) granted a second tenure of the node (the next fence, exclusive) beside the live
shared one. Fixed: the caller's own tenure on the very node is in the way of a grant
(`leases.tree.in_the_way`), so the statement matches nothing and the service
(`leases.services.lease_acquire`) renews it."""

from __future__ import annotations

import pytest

from leases.models import Event
from tests.support.api import Api

pytestmark = pytest.mark.django_db


def test_asking_exclusive_over_ones_own_shared_tenure_renews_it(api_a: Api) -> None:
    caller = api_a
    body = {"resource": "repo/src/web.py", "ttl_s": 60, "process_id": "p"}
    first = caller.post("/leases/acquire", {**body, "mode": "shared"})
    assert first.status_code == 201, first.content
    again = caller.post("/leases/acquire", {**body, "mode": "exclusive"})
    assert again.status_code in (200, 201), again.content
    answer = again.json()
    assert (answer["fence"], answer["mode"]) == (first.json()["fence"], "shared")
    assert Event.objects.filter(kind="lease_acquired", resource=body["resource"]).count() == 1
