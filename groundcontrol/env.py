"""Settings from the environment, through helpers that fail loudly on malformed values."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any
from urllib.parse import unquote

import dj_database_url
from django.core.exceptions import ImproperlyConfigured

_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off", ""}


# The repository's root: the default home of var/.
ROOT = Path(__file__).resolve().parent.parent


def var_dir() -> Path:
    """Where the install keeps what it makes (the embedded PostgreSQL, the minted secret key):
    GC_VAR_DIR, else var/ in the repository."""
    return Path(env_str("GC_VAR_DIR", str(ROOT / "var")))


def env_str(name: str, default: str) -> str:
    return os.environ.get(name, default)


def env_bool(name: str, default: bool) -> bool:
    raw = os.environ.get(name)
    if raw is None:
        return default
    value = raw.strip().lower()
    if value in _TRUE:
        return True
    if value in _FALSE:
        return False
    raise ImproperlyConfigured(f"{name}={raw!r} is not a boolean (use 1/0, true/false, yes/no)")


def env_int(name: str, default: int, *, minimum: int | None = None) -> int:
    raw = os.environ.get(name)
    if raw is None or raw.strip() == "":
        return default
    try:
        value = int(raw)
    except ValueError:
        raise ImproperlyConfigured(f"{name}={raw!r} is not an integer") from None
    if minimum is not None and value < minimum:
        raise ImproperlyConfigured(f"{name}={value} is below its minimum {minimum}")
    return value


def env_float(name: str, default: float, *, minimum: float | None = None) -> float:
    raw = os.environ.get(name)
    if raw is None or raw.strip() == "":
        return default
    try:
        value = float(raw)
    except ValueError:
        raise ImproperlyConfigured(f"{name}={raw!r} is not a number") from None
    if minimum is not None and value < minimum:
        raise ImproperlyConfigured(f"{name}={value} is below its minimum {minimum}")
    return value


def env_list(name: str, default: list[str]) -> list[str]:
    raw = os.environ.get(name)
    if raw is None:
        return default
    return [item.strip() for item in raw.split(",") if item.strip()]


def env_url(name: str, default: str, *, schemes: tuple[str, ...]) -> str:
    raw = os.environ.get(name, default)
    if raw and raw.split(":", 1)[0] not in schemes:
        raise ImproperlyConfigured(f"{name}={raw!r} must start with one of {', '.join(schemes)}")
    return raw


def database_settings(url: str) -> dict[str, Any]:
    """Django's DATABASES entry for a database URL. A PostgreSQL URL may name several hosts,
    as libpq's own URLs do (`postgresql://user@h1:5441,h2:5442/db?target_session_attrs=read-write`):
    the connection tries them in turn and keeps the first that qualifies, so a web process finds
    the primary that Patroni promoted by itself (docs/scale.md). Django passes HOST and PORT to
    libpq as they are, so they become the comma-separated lists libpq expects."""
    scheme, sep, rest = url.partition("://")
    netloc = rest.split("/", 1)[0].split("?", 1)[0]
    auth, at, hosts = netloc.rpartition("@")
    if not sep or scheme not in ("postgres", "postgresql") or "," not in hosts:
        try:
            return dj_database_url.parse(url, conn_max_age=0)
        except ValueError as error:
            raise ImproperlyConfigured(f"DATABASE_URL is not a valid URL: {error}") from None
    names, ports = [], []
    for host in hosts.split(","):
        name, port = _host_port(host)
        names.append(name)
        ports.append(port)
    # One placeholder host through the ordinary parser: every other part (credentials, name,
    # options from the query string) is read exactly as for a single host.
    parsed = database_settings(f"{scheme}://{auth}{at}placeholder{rest[len(netloc) :]}")
    parsed["HOST"] = ",".join(names)
    parsed["PORT"] = ",".join(ports)
    return parsed


def _host_port(host: str) -> tuple[str, str]:
    """`host`, `host:port` or `[v6]:port`, unquoted; a host without a port gets libpq's 5432."""
    host = unquote(host.strip())
    if host.startswith("["):
        name, _, tail = host[1:].partition("]")
        port = tail.removeprefix(":")
    else:
        name, _, port = host.partition(":")
    if not name or (port and not port.isdigit()) or (port and not 0 < int(port) < 65536):
        raise ImproperlyConfigured(f"DATABASE_URL names a malformed host {host!r}")
    return name, port or "5432"
