"""The replica and pooler settings (groundcontrol/settings.py): what they turn on, and the
inconsistent ones refused at start, with the setting's name."""

from __future__ import annotations

import secrets

import pytest

from tests.deployment.test_settings import _manage

PG = "postgresql://postgres@127.0.0.1:5432/gc_settings_check"
# A key the settings take with DEBUG off ("x" * 50 is refused: groundcontrol/secret_key.py).
BASE = {"SECRET_KEY": secrets.token_urlsafe(50), "DATABASE_URL": PG}


def _values(extra: dict[str, str], *names: str) -> list[str]:
    code = "from django.conf import settings; " + "; ".join(f"print(repr({n}))" for n in names)
    result = _manage("shell", "-v", "0", "-c", code, extra_env={**BASE, **extra})
    assert result.returncode == 0, result.stderr
    return result.stdout.splitlines()


def test_the_pooler_sends_unnamed_statements_and_waits_over_the_direct_connection() -> None:
    pooled = {
        "DATABASE_URL": "postgresql://postgres@127.0.0.1:6432/gc",
        "GC_DB_POOLER": "transaction",
        "DATABASE_DIRECT_URL": "postgresql://postgres@10.0.0.5:5432/gc",
    }
    assert _values(
        pooled,
        "settings.GC_DB_PREPARE",
        "settings.DATABASES['default']['DISABLE_SERVER_SIDE_CURSORS']",
        "settings.DATABASES['direct']['HOST']",
        "settings.DATABASES['direct']['TEST']['MIRROR']",
        "settings.DATABASE_ROUTERS",
    ) == ["False", "True", "'10.0.0.5'", "'default'", "['apikit.reads.ReplicaRouter']"]
    # PgBouncer 1.21+ with max_prepared_statements keeps them.
    assert _values({**pooled, "GC_DB_PREPARE": "1"}, "settings.GC_DB_PREPARE") == ["True"]
    # Without a pooler: prepared, no direct alias, no replica.
    assert _values({}, "settings.GC_DB_PREPARE", "sorted(settings.DATABASES)") == [
        "True",
        "['default']",
    ]


def test_a_replica_is_an_alias_of_its_own_with_a_bound() -> None:
    replica = {"DATABASE_REPLICA_URL": "postgresql://reader@10.0.0.6:5432/gc"}
    assert _values(
        {**replica, "GC_REPLICA_MAX_LAG_S": "2.5"},
        "settings.DATABASES['replica']['HOST']",
        "settings.DATABASES['replica']['USER']",
        "settings.GC_REPLICA_MAX_LAG_S",
    ) == ["'10.0.0.6'", "'reader'", "2.5"]


@pytest.mark.parametrize(
    ("extra", "named"),
    [
        ({"GC_DB_POOLER": "transaction"}, "DATABASE_DIRECT_URL"),
        ({"GC_DB_POOLER": "session"}, "GC_DB_POOLER"),
        ({"DATABASE_REPLICA_URL": "mysql://db/gc"}, "DATABASE_REPLICA_URL"),
        ({"GC_REPLICA_MAX_LAG_S": "soon"}, "GC_REPLICA_MAX_LAG_S"),
        ({"GC_REPLICA_MAX_LAG_S": "-1"}, "GC_REPLICA_MAX_LAG_S"),
        ({"GC_DB_PREPARE": "maybe"}, "GC_DB_PREPARE"),
        ({"DATABASE_URL": "sqlite:////tmp/gc.sqlite3"}, "DATABASE_URL"),
    ],
)
def test_inconsistent_settings_stop_the_process_with_their_name(
    extra: dict[str, str], named: str
) -> None:
    result = _manage("check", extra_env={**BASE, **extra})
    assert result.returncode != 0
    assert "ImproperlyConfigured" in result.stderr and named in result.stderr, result.stderr
