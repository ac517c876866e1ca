"""Fixtures for the periodic jobs: quiet notifications, a claimed attempt, a helper to sweep."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from django.test import override_settings


@pytest.fixture(autouse=True)
def _no_enqueue() -> Iterator[None]:
    # Jobs that write events enqueue delivery on commit when Celery workers run; the tests call
    # the services directly, so nothing goes to a broker unless a test asks for it.
    with override_settings(GC_NOTIFY_ON_COMMIT=False):
        yield


@pytest.fixture
def claim():  # noqa: ANN201
    from fleet import services as fleet

    def claim(hand, run, process: str = "host:1", **kwargs):  # noqa: ANN001, ANN202
        return fleet.attempt_claim(hand=hand, run_id=run.pk, process_id=process, **kwargs)

    return claim
