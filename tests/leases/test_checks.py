"""The database system check: PostgreSQL without autovacuum gets no statistics, and the hot
statements' plans depend on them (docs/performance.md)."""

from __future__ import annotations

from unittest import mock

import pytest
from django.core.checks import run_checks

from leases.checks import AUTOVACUUM_OFF, autovacuum_runs

pytestmark = pytest.mark.django_db


def _setting_is(value: str):  # noqa: ANN202
    cursor = mock.MagicMock()
    cursor.__enter__.return_value.fetchone.return_value = (value,)
    return mock.patch(
        "django.db.backends.base.base.BaseDatabaseWrapper.cursor", return_value=cursor
    )


def test_autovacuum_off_is_a_warning_with_what_to_do() -> None:
    with _setting_is("off"):
        [warning] = autovacuum_runs(databases=["default"])
    assert warning.id == AUTOVACUUM_OFF and "ANALYZE" in warning.hint


def test_autovacuum_on_passes() -> None:
    with _setting_is("on"):
        assert autovacuum_runs(databases=["default"]) == []


def test_the_check_runs_with_the_database_checks_and_reads_the_real_setting() -> None:
    from django.db import connection

    ids = [m.id for m in run_checks(databases=["default"])]
    with connection.cursor() as cursor:
        cursor.execute("SHOW autovacuum")
        on = cursor.fetchone()[0] == "on"
    assert (AUTOVACUUM_OFF in ids) is not on
