"""What a read-only page says about its data, and the per-process cache of the replica's lag
(apikit/reads.py), without a replica: the measurement is replaced."""

from __future__ import annotations

from collections.abc import Iterator
from unittest import mock

import pytest
from django.test import override_settings

from apikit import reads


def test_the_label_says_live_or_how_old() -> None:
    assert reads.PRIMARY.label == "live"
    assert reads.Freshness(source="replica", age_s=0.4).label == "live"
    assert reads.Freshness(source="replica", age_s=3.7).label == "data as of 3 s ago"


@pytest.fixture
def measured() -> Iterator[list[float | None]]:
    """The lags the replica will report, one per measurement; the clock under the cache."""
    answers: list[float | None] = []
    reads.checked.forget()
    with (
        mock.patch.object(reads, "replica_lag_s", side_effect=lambda: answers.pop(0)),
        mock.patch.object(reads, "replica_configured", return_value=True),
        override_settings(GC_REPLICA_MAX_LAG_S=5, GC_REPLICA_RETRY_S=10),
    ):
        yield answers
    reads.checked.forget()


def test_a_cached_lag_grows_with_the_time_since_it_was_measured(
    measured: list[float | None],
) -> None:
    measured += [2.0, 0.0]
    with mock.patch.object(reads.time, "monotonic", side_effect=[100.0, 100.0, 100.6]):
        assert reads.freshness() == reads.Freshness(source="replica", age_s=2.0)
        fresh = reads.freshness()  # 0.6 s later, not measured again
    assert fresh.source == "replica" and fresh.age_s == pytest.approx(2.6)
    with mock.patch.object(reads.time, "monotonic", side_effect=[101.5, 101.5]):
        assert reads.freshness() == reads.Freshness(source="replica", age_s=0.0)  # measured anew


def test_past_the_bound_or_unusable_the_primary_is_read(measured: list[float | None]) -> None:
    measured += [7.5]
    fresh = reads.freshness()
    assert (fresh.source, fresh.age_s, fresh.replica_lag_s) == ("primary", 0.0, 7.5)
    reads.checked.forget()
    measured += [None]
    assert reads.freshness() == reads.PRIMARY
    with reads.replica_reads() as fresh:
        assert fresh == reads.PRIMARY
        assert reads.reading_from() == "default"


def test_reads_go_to_the_replica_only_inside_the_context_and_outside_transactions(
    measured: list[float | None],
) -> None:
    measured += [0.0]
    router = reads.ReplicaRouter()
    assert router.db_for_read(object) == "default"
    with mock.patch.object(reads.connections["default"], "in_atomic_block", False):
        with reads.replica_reads():
            assert router.db_for_read(object) == "replica"
            assert router.db_for_write(object) == "default"
            with reads.primary():
                assert router.db_for_read(object) == "default"
            assert router.db_for_read(object) == "replica"
        with mock.patch.object(reads.connections["default"], "in_atomic_block", True):
            with reads.replica_reads():
                assert router.db_for_read(object) == "default"
    assert router.db_for_read(object) == "default"
    assert router.allow_migrate("replica", "leases") is False
    assert router.allow_migrate("default", "leases") is True
