"""Settings come from the environment and fail loudly on malformed values."""

from __future__ import annotations

import os
import secrets
import subprocess
import sys
from pathlib import Path
from urllib.parse import quote

import pytest
from django.core.exceptions import ImproperlyConfigured

from groundcontrol import env

ROOT = Path(__file__).resolve().parents[2]

PRODUCTION = {
    "SECRET_KEY": secrets.token_urlsafe(50),
    "DEBUG": "0",
    "ALLOWED_HOSTS": "gc.example.com",
    "SECURE_SSL_REDIRECT": "1",
    "SESSION_COOKIE_SECURE": "1",
    "CSRF_COOKIE_SECURE": "1",
    "SECURE_HSTS_SECONDS": "31536000",
    "SECURE_HSTS_INCLUDE_SUBDOMAINS": "1",
    "SECURE_HSTS_PRELOAD": "1",
}


@pytest.mark.parametrize(
    ("helper", "raw"),
    [
        (lambda: env.env_bool("GC_T", False), "maybe"),
        (lambda: env.env_int("GC_T", 1), "ten"),
        (lambda: env.env_int("GC_T", 1, minimum=0), "-3"),
        (lambda: env.env_float("GC_T", 1.0), "fast"),
        (lambda: env.env_url("GC_T", "", schemes=("redis",)), "http://x"),
    ],
)
def test_it_refuses_malformed_values(monkeypatch, helper, raw) -> None:  # noqa: ANN001
    monkeypatch.setenv("GC_T", raw)
    with pytest.raises(ImproperlyConfigured, match="GC_T"):
        helper()


def test_it_reads_well_formed_values(monkeypatch) -> None:  # noqa: ANN001
    monkeypatch.setenv("GC_T", "yes")
    assert env.env_bool("GC_T", False) is True
    monkeypatch.setenv("GC_T", "a, b,,c")
    assert env.env_list("GC_T", []) == ["a", "b", "c"]
    monkeypatch.setenv("GC_T", "42")
    assert env.env_int("GC_T", 0, minimum=1) == 42


# Production behind a proxy that terminates TLS: GC_TLS=1 stands for the five settings above
# (HSTS preloading stays the domain owner's decision: docs/deploy.md).
PRODUCTION_TLS = {
    "SECRET_KEY": secrets.token_urlsafe(50),
    "DEBUG": "0",
    "ALLOWED_HOSTS": "gc.example.com",
    "GC_TLS": "1",
}
_TLS_SETTINGS = ("GC_TLS", "GC_BEHIND_TLS_PROXY", "SECURE_HSTS_SECONDS")


def _manage(*args: str, extra_env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    environ = {
        k: v for k, v in os.environ.items() if k not in PRODUCTION and k not in _TLS_SETTINGS
    }
    environ.update(extra_env)
    return subprocess.run(
        [sys.executable, "manage.py", *args],
        cwd=ROOT,
        env=environ,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_it_passes_the_deploy_check_with_production_settings() -> None:
    result = _manage("check", "--deploy", "--fail-level", "WARNING", extra_env=PRODUCTION)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "no issues" in result.stdout


def test_a_malformed_setting_stops_the_process_with_its_name() -> None:
    result = _manage("check", extra_env={"DEBUG": "perhaps"})
    assert result.returncode != 0
    assert "DEBUG='perhaps' is not a boolean" in result.stderr


def test_it_passes_the_deploy_check_with_GC_TLS_alone() -> None:
    result = _manage("check", "--deploy", "--fail-level", "WARNING", extra_env=PRODUCTION_TLS)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "no issues" in result.stdout


def test_without_GC_TLS_the_deploy_check_names_what_is_missing() -> None:
    plain = {k: v for k, v in PRODUCTION_TLS.items() if k != "GC_TLS"}
    result = _manage("check", "--deploy", "--fail-level", "WARNING", extra_env=plain)
    assert result.returncode != 0
    for check in ("security.W004", "security.W008", "security.W012", "security.W016"):
        assert check in result.stderr, result.stderr


def test_GC_TLS_turns_on_secure_cookies_hsts_the_redirect_and_the_proxy_header() -> None:
    names = (
        "SESSION_COOKIE_SECURE",
        "CSRF_COOKIE_SECURE",
        "SECURE_SSL_REDIRECT",
        "SECURE_HSTS_SECONDS",
        "SECURE_HSTS_INCLUDE_SUBDOMAINS",
        "SECURE_HSTS_PRELOAD",
        "SECURE_PROXY_SSL_HEADER",
        "SECURE_REDIRECT_EXEMPT",
    )
    code = "from django.conf import settings; " + "; ".join(
        f"print(repr(settings.{name}))" for name in names
    )

    def values(extra_env: dict[str, str]) -> list[str]:
        result = _manage("shell", "-v", "0", "-c", code, extra_env=extra_env)
        assert result.returncode == 0, result.stderr
        return result.stdout.splitlines()

    exempt = repr(["^healthz$", "^readyz$", "^metrics$"])
    assert values(PRODUCTION_TLS) == [
        *["True"] * 3,
        "31536000",
        "True",
        "False",
        "('HTTP_X_FORWARDED_PROTO', 'https')",
        exempt,
    ]
    plain = {k: v for k, v in PRODUCTION_TLS.items() if k != "GC_TLS"}
    assert values(plain) == [*["False"] * 3, "0", "False", "False", "None", exempt]
    # Each one can still be set on its own, over GC_TLS.
    assert values({**PRODUCTION_TLS, "SECURE_HSTS_SECONDS": "300", "SECURE_SSL_REDIRECT": "0"})[
        2:4
    ] == ["False", "300"]


# --- DATABASE_URL with several hosts (docs/scale.md) --------------------------------------------


def test_it_reads_a_multi_host_url_as_libpq_lists() -> None:
    db = env.database_settings(
        "postgresql://gc:s%40cret@10.0.0.1:5441,db2.internal,[::1]:5443/ground"
        "?target_session_attrs=read-write&connect_timeout=2"
    )
    assert db["ENGINE"] == "django.db.backends.postgresql"
    assert (db["USER"], db["PASSWORD"], db["NAME"]) == ("gc", "s@cret", "ground")
    assert db["HOST"] == "10.0.0.1,db2.internal,::1"
    assert db["PORT"] == "5441,5432,5443"
    assert db["OPTIONS"] == {"target_session_attrs": "read-write", "connect_timeout": 2}


def test_a_single_host_url_reads_as_before() -> None:
    db = env.database_settings("postgres://u@h:6000/n?sslmode=require")
    assert (db["HOST"], db["PORT"], db["OPTIONS"]) == ("h", 6000, {"sslmode": "require"})


@pytest.mark.parametrize(
    "url",
    [
        "postgresql://u@h1:5441,:5442/n",
        "postgresql://u@h1:5441,h2:port/n",
        "postgresql://u@h1:5441,h2:70000/n",
        "postgresql://u@h1:notaport/n",
    ],
)
def test_it_refuses_a_malformed_host_list(url: str) -> None:
    with pytest.raises(ImproperlyConfigured, match="DATABASE_URL"):
        env.database_settings(url)


@pytest.mark.django_db
def test_a_multi_host_url_connects_to_the_host_that_qualifies() -> None:
    """Through Django, as the settings would: the first host refuses (nothing listens there),
    the second is this test's server; libpq moves on, as it does past a dead primary or past a
    standby, which is not read-write."""
    from django.conf import settings
    from django.db.backends.postgresql.base import DatabaseWrapper

    db = settings.DATABASES["default"]
    url = (
        f"postgresql://{db['USER'] or 'postgres'}@127.0.0.1:1,"
        f"{quote(db['HOST'] or '127.0.0.1', safe='')}:{db['PORT'] or 5432}/{db['NAME']}"
        "?target_session_attrs=read-write"
    )
    wrapper = DatabaseWrapper({**db, **env.database_settings(url)}, alias="multi-host")
    try:
        with wrapper.cursor() as cursor:
            cursor.execute("SELECT current_setting('port')::int, pg_is_in_recovery()")
            assert cursor.fetchone() == (int(db["PORT"] or 5432), False)
    finally:
        wrapper.close()
