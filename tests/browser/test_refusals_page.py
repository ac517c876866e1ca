"""The refusals page in real Chromium: a key's flood past its kept rows is counted above the
list, by code, and the code filter offers every code of the contract."""

from __future__ import annotations

import pytest

from leases.audit import KEPT_PER_KEY_MINUTE
from tests.amplification.test_refusals_per_key import hammer, prefix_of

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]


def test_a_flood_is_counted_above_the_list(logged_in, api_a, artifacts, frozen_clock) -> None:
    page = logged_in
    # Within one minute of the database's clock: on a loaded machine 109 calls may outlast the
    # minute they began in, and each minute would keep all its refusals (it did, in CI).
    hammer(api_a, KEPT_PER_KEY_MINUTE + 9)
    page.goto("/refusals/")
    counted = page.locator(f'#refusals-counted tr[data-key="{prefix_of(api_a)}"]')
    cells = counted.locator("td").all_inner_texts()
    assert cells[:3] == [prefix_of(api_a), api_a.hand.name, "9"]
    # Most first, then by code.
    assert cells[3] == "not_found 3, scope_denied 3, validation_error 3"
    page.get_by_label("Code").select_option("held_in_other_mode")
    page.screenshot(path=str(artifacts / "refusals-counted.png"), full_page=True)
