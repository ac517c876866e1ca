"""The refusals page says what a flood left out of its list: past `KEPT_PER_KEY_MINUTE` a
minute, a key's refusals keep no rows and are only counted (`KeyTally`); the page sums them per
key over the last day, by code, most first, and never another workspace's or an older one."""

from __future__ import annotations

from collections import Counter
from datetime import datetime, timedelta

import pytest

from dashboard import pages
from leases import clock
from leases.audit import KEPT_PER_KEY_MINUTE
from leases.models import KeyRecord, KeyTally
from tests.amplification.test_refusals_per_key import hammer, prefix_of
from tests.support.api import Api

pytestmark = pytest.mark.django_db


def _tally(workspace_id: int, prefix: str, minute: datetime, **past: int) -> None:
    KeyTally.objects.create(
        workspace_id=workspace_id,
        key_prefix=prefix,
        record=KeyRecord.REFUSAL,
        minute=minute,
        count=KEPT_PER_KEY_MINUTE + sum(past.values()),
        past_limit=past,
        hand="old-hand",
        first_at=minute,
        last_at=minute,
    )


def test_a_flood_is_counted_on_the_refusals_page(
    workspace_admin_client, workspace, api_a: Api, api_b: Api, frozen_clock: datetime
) -> None:
    answered = hammer(api_a, KEPT_PER_KEY_MINUTE + 30)
    clock.advance(60)
    answered += hammer(api_a, KEPT_PER_KEY_MINUTE + 6)
    counted_a = Counter(
        code for code, _ in answered[KEPT_PER_KEY_MINUTE : KEPT_PER_KEY_MINUTE + 30]
    )
    counted_a += Counter(code for code, _ in answered[2 * KEPT_PER_KEY_MINUTE + 30 :])
    hammer(api_b, KEPT_PER_KEY_MINUTE + 3)
    # Not this page's: another workspace's flood, and one older than the window.
    _tally(workspace.pk + 999, "elsewhere", frozen_clock, lease_held=500)
    _tally(workspace.pk, "longago", frozen_clock - timedelta(hours=25), lease_held=500)

    rows = pages.refusals_counted(workspace_id=workspace.pk)
    assert [(row.key_prefix, row.hand, row.count) for row in rows] == [
        (prefix_of(api_a), api_a.hand.name, 36),
        (prefix_of(api_b), api_b.hand.name, 3),
    ]
    assert dict(rows[0].by_code) == dict(counted_a)
    assert rows[0].last_at == frozen_clock + timedelta(seconds=60)

    html = workspace_admin_client.get("/refusals/").content.decode()
    assert "Counted, not listed" in html
    assert f'<tr data-key="{prefix_of(api_a)}"><td><code>{prefix_of(api_a)}</code></td>' in html
    assert "elsewhere" not in html and "longago" not in html


def test_without_a_flood_the_page_says_nothing_of_it(workspace_admin_client, api_a: Api) -> None:
    hammer(api_a, 5)
    assert pages.refusals_counted(workspace_id=api_a.hand.workspace_id) == []
    assert "Counted, not listed" not in workspace_admin_client.get("/refusals/").content.decode()
