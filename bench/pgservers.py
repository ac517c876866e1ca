"""Servers of our own for the scale tests and the bench: a PgBouncer in transaction mode in front
of a PostgreSQL, and a primary with a streaming replica made by `pg_basebackup -R`.

Both run as the `postgres` OS user (PgBouncer refuses root, PostgreSQL too) from a temporary
directory, on ports of their own; the server at 127.0.0.1:5432 is never reconfigured (its
pg_hba.conf need not allow replication). `unavailable()` says why they cannot be made here
(not root nor postgres, binaries missing), for a test to skip with that reason.
"""

from __future__ import annotations

import os
import pwd
import shutil
import socket
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

PG_BIN = Path(os.environ.get("GC_PG_BIN", "/usr/lib/postgresql/15/bin"))
PGBOUNCER = shutil.which("pgbouncer") or "/usr/sbin/pgbouncer"
OS_USER = "postgres"


def unavailable(*, pgbouncer: bool = False) -> str | None:
    """Why these servers cannot be started here, or None."""
    try:
        pwd.getpwnam(OS_USER)
    except KeyError:
        return f"no {OS_USER} OS user"
    if os.geteuid() != 0 and pwd.getpwuid(os.geteuid()).pw_name != OS_USER:
        return f"needs root or the {OS_USER} OS user to start servers of its own"
    if not (PG_BIN / "initdb").exists() or not (PG_BIN / "pg_basebackup").exists():
        return f"no PostgreSQL binaries in {PG_BIN} (set GC_PG_BIN)"
    if pgbouncer and not Path(PGBOUNCER).exists():
        return "pgbouncer is not installed (apt-get install pgbouncer)"
    return None


def _as_postgres(args: list[str], **kwargs: object) -> subprocess.CompletedProcess[str]:
    prefix = ["runuser", "-u", OS_USER, "--"] if os.geteuid() == 0 else []
    return subprocess.run(  # noqa: S603 - our own fixed binaries
        [*prefix, *args], check=True, capture_output=True, text=True, timeout=120, **kwargs
    )


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _wait_for_port(port: int, timeout_s: float = 30.0) -> None:
    give_up = time.monotonic() + timeout_s
    while time.monotonic() < give_up:
        with socket.socket() as sock:
            if sock.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.05)
    raise RuntimeError(f"nothing listens on 127.0.0.1:{port} after {timeout_s} s")


def _workdir(name: str) -> Path:
    path = Path(tempfile.mkdtemp(prefix=f"gc-{name}-"))
    if os.geteuid() == 0:
        shutil.chown(path, OS_USER, OS_USER)
    return path


@dataclass
class Pair:
    """A primary and its streaming replica on 127.0.0.1."""

    primary_port: int
    replica_port: int
    root: Path
    started: list[Path] = field(default_factory=list)

    def url(self, which: str, database: str = "postgres") -> str:
        port = self.primary_port if which == "primary" else self.replica_port
        return f"postgresql://{OS_USER}@127.0.0.1:{port}/{database}"

    def stop(self) -> None:
        for data in reversed(self.started):
            try:
                _as_postgres([str(PG_BIN / "pg_ctl"), "-D", str(data), "-m", "immediate", "stop"])
            except subprocess.CalledProcessError:
                pass
        shutil.rmtree(self.root, ignore_errors=True)


def start_pair(primary_port: int | None = None, replica_port: int | None = None) -> Pair:
    """initdb a primary that allows replication from 127.0.0.1, start it, copy it with
    `pg_basebackup -R` (which writes the replica's primary_conninfo and standby.signal) and
    start the copy as its streaming replica."""
    root = _workdir("pair")
    pair = Pair(primary_port or free_port(), replica_port or free_port(), root)
    primary, replica = root / "primary", root / "replica"
    try:
        _as_postgres(
            [str(PG_BIN / "initdb"), "-D", str(primary), "-A", "trust", "-U", OS_USER, "--no-sync"]
        )
        with open(primary / "pg_hba.conf", "a") as hba:
            hba.write("host replication all 127.0.0.1/32 trust\n")
        options = "-c fsync=off -c full_page_writes=off"
        common = f"-c listen_addresses=127.0.0.1 -c unix_socket_directories={root} {options}"
        _start(pair, primary, pair.primary_port, common)
        _as_postgres(
            [
                str(PG_BIN / "pg_basebackup"),
                "-h",
                "127.0.0.1",
                "-p",
                str(pair.primary_port),
                "-U",
                OS_USER,
                "-D",
                str(replica),
                "-R",
                "-X",
                "stream",
                "-c",
                "fast",
            ]  # fmt: skip
        )
        _start(pair, replica, pair.replica_port, common + " -c hot_standby_feedback=on")
    except BaseException:
        pair.stop()
        raise
    return pair


def _start(pair: Pair, data: Path, port: int, options: str) -> None:
    _as_postgres(
        [
            str(PG_BIN / "pg_ctl"),
            "-D",
            str(data),
            "-l",
            str(data / "log"),
            "-w",
            "-o",
            f"-p {port} {options}",
            "start",
        ]  # fmt: skip
    )
    pair.started.append(data)
    _wait_for_port(port)


@dataclass
class Bouncer:
    """A PgBouncer in transaction mode listening on 127.0.0.1:`port`."""

    port: int
    root: Path
    process: subprocess.Popen[bytes]

    def url(self, database: str) -> str:
        return f"postgresql://{OS_USER}@127.0.0.1:{self.port}/{database}"

    def stop(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        shutil.rmtree(self.root, ignore_errors=True)


def start_pgbouncer(
    *,
    server_port: int = 5432,
    port: int | None = None,
    pool_size: int = 20,
    max_client_conn: int = 400,
) -> Bouncer:
    """PgBouncer in `pool_mode = transaction` in front of 127.0.0.1:`server_port`, any database,
    `pool_size` server connections per database and user."""
    root = _workdir("pgbouncer")
    port = port or free_port()
    (root / "users.txt").write_text(f'"{OS_USER}" ""\n')
    (root / "pgbouncer.ini").write_text(
        "[databases]\n"
        f"* = host=127.0.0.1 port={server_port}\n"
        "[pgbouncer]\n"
        f"listen_addr = 127.0.0.1\nlisten_port = {port}\nunix_socket_dir =\n"
        f"auth_type = trust\nauth_file = {root / 'users.txt'}\n"
        "pool_mode = transaction\n"
        f"default_pool_size = {pool_size}\nmax_client_conn = {max_client_conn}\n"
        # psycopg and Django send none of these, but a client that does must not be refused.
        "ignore_startup_parameters = extra_float_digits,options\n"
        "server_reset_query =\nlog_connections = 0\nlog_disconnections = 0\n"
    )
    for name in ("users.txt", "pgbouncer.ini"):
        if os.geteuid() == 0:
            shutil.chown(root / name, OS_USER, OS_USER)
    prefix = ["runuser", "-u", OS_USER, "--"] if os.geteuid() == 0 else []
    process = subprocess.Popen(  # noqa: S603 - our own fixed binary
        [*prefix, PGBOUNCER, "-q", str(root / "pgbouncer.ini")],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    bouncer = Bouncer(port, root, process)
    try:
        _wait_for_port(port)
    except BaseException:
        bouncer.stop()
        raise
    return bouncer
