"""The hooks block's drivers (bench/hooks.py) are answered as the benchmark counts them, an
allowed write and a cold `gctl hook` that exits 0, and its targets read their rows."""

from __future__ import annotations

from typing import Any

import pytest

from bench import hooks, report
from hands.models import Hand
from leases.models import Lease
from tests.support.live import mint


@pytest.mark.django_db(transaction=True)
def test_each_hook_driver_is_granted_against_the_live_server(
    live_server: Any, owner: Hand, teammate: Hand
) -> None:
    fixtures = {"clients": [{"key": mint(owner)}, {"key": mint(teammate)}]}
    for new in (False, True):
        op, close = hooks.hook_writes(live_server.url, fixtures, "t", new=new)(0)
        try:
            assert all(op() for _ in range(hooks.HELD_FILES + 2))
        finally:
            close()
    held = Lease.objects.filter(status="held", holder="hand-a")
    assert held.filter(resource__startswith="t/0/held-").count() == hooks.HELD_FILES
    assert held.filter(resource__startswith="t/0/new-").count() == hooks.HELD_FILES + 2
    paced = hooks.paced(
        hooks.hook_writes(live_server.url, fixtures, "p", new=False),
        sessions=2,
        per_s=20.0,
        seconds=0.5,
        warmup_s=0.1,
    )
    assert paced.errors == 0 and 10 <= paced.ops <= 22, paced
    op, close = hooks.cold_start(live_server.url, fixtures)(1)
    try:
        assert op()
    finally:
        close()


def test_the_hook_targets_read_the_p99_of_their_rows() -> None:
    names = (*report.HOOK_PACED_OPS, report.HOOK_COLD_OP)
    rows = [
        report.Row("Ground Control", name, 16, 1000.0, 1.0, p99, [1000.0], 0)
        for name, p99 in zip(names, (8.0, 12.0, 140.0), strict=True)
    ]
    held, new, cold = report.hook_targets(rows, [16])
    assert (held.holds, new.holds, cold.holds) == (True, False, True)
    assert report.hook_targets([], [16])[0].holds is None
