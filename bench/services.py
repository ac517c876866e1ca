"""The processes a benchmark starts on loopback, and stops again whatever happens: its own
database on the machine's PostgreSQL, a redis-server, an etcd and the production web server
(`python -m groundcontrol.server`) on spare ports."""

from __future__ import annotations

import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import httpx

ROOT = Path(__file__).resolve().parent.parent
PYTHON = sys.executable


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def wait_until(check: Callable[[], bool], *, what: str, timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            if check():
                return
        except RuntimeError:
            raise
        except Exception:  # noqa: BLE001, S110 - not up yet
            pass
        time.sleep(0.1)
    raise RuntimeError(f"{what} did not come up within {timeout_s:.0f} s")


class Processes:
    """Started processes and temp dirs, stopped and removed in reverse order by `close()`."""

    def __init__(self) -> None:
        self.procs: list[tuple[str, subprocess.Popen[bytes]]] = []
        self.cleanups: list[Callable[[], None]] = []
        self.tmp = Path(tempfile.mkdtemp(prefix="gc-bench-"))
        self.cleanups.append(lambda: shutil.rmtree(self.tmp, ignore_errors=True))

    def start(self, name: str, argv: list[str], **kwargs: object) -> subprocess.Popen[bytes]:
        log = open(self.tmp / f"{name}.log", "wb")  # noqa: SIM115 - closed with the process
        proc = subprocess.Popen(  # noqa: S603 - our own argv
            argv, stdout=log, stderr=subprocess.STDOUT, start_new_session=True, **kwargs
        )
        self.procs.append((name, proc))
        self.cleanups.append(log.close)
        return proc

    def log_tail(self, name: str, lines: int = 20) -> str:
        path = self.tmp / f"{name}.log"
        if not path.exists():
            return ""
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])

    def stop(self, proc: subprocess.Popen[bytes]) -> None:
        if proc.poll() is not None:
            return
        # Each process leads its own session: signal its group (the web server's workers too).
        try:
            os.killpg(proc.pid, signal.SIGTERM)
        except ProcessLookupError:
            return
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=5)

    def close(self) -> None:
        for _, proc in reversed(self.procs):
            self.stop(proc)
        self.procs.clear()
        for cleanup in reversed(self.cleanups):
            try:
                cleanup()
            except Exception:  # noqa: BLE001, S110 - best effort on the way out
                pass
        self.cleanups.clear()


# --- PostgreSQL: a database of the benchmark's own -------------------------------------------


def database_url(server_url: str, name: str) -> str:
    parts = urlsplit(server_url)
    return urlunsplit(parts._replace(path=f"/{name}"))


def create_database(server_url: str, name: str) -> str:
    import psycopg

    admin = database_url(server_url, "postgres")
    with psycopg.connect(admin, autocommit=True, connect_timeout=5) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        conn.execute(f'CREATE DATABASE "{name}"')
    return database_url(server_url, name)


def drop_database(server_url: str, name: str) -> None:
    import psycopg

    admin = database_url(server_url, "postgres")
    with psycopg.connect(admin, autocommit=True, connect_timeout=5) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def vacuum_if_autovacuum_is_off(database: str) -> bool:
    """VACUUM and ANALYZE the database when its server runs without autovacuum (this machine's
    does), as autovacuum would have by then on a production server. Without it the renewed rows'
    dead versions pile up (measured: a renewal's wall time tripled over 4,000 renewals and 12,000
    acquires, and one VACUUM brought it back), and the hot statements' plans have no statistics
    to go by (Ground Control's `leases.W001` check warns about such a server). A new ANALYZE also
    makes every connection plan its prepared statements anew. True if it ran."""
    import psycopg

    with psycopg.connect(database, autocommit=True, connect_timeout=5) as conn:
        if conn.execute("SHOW autovacuum").fetchone()[0] == "on":
            return False
        conn.execute("VACUUM (ANALYZE)")
    return True


def seed_tree(database: str, workspace_id: int, leases: int, directories: int) -> int:
    """Make the benchmark's workspace hold `leases` live leases in a tree under `tree/`
    (`tree/d<k>/s<j>/f<n>`, `directories` directories of 20 subdirectories), once; their
    holder is not a benchmark client and they last a day. The number held afterwards."""
    import psycopg

    with psycopg.connect(database, autocommit=True, connect_timeout=5) as conn:
        held = conn.execute(
            "SELECT count(*) FROM leases_lease WHERE workspace_id = %s AND holder = 'bench-tree'",
            [workspace_id],
        ).fetchone()[0]
        if held < leases:
            conn.execute(
                "INSERT INTO leases_lease (workspace_id, resource, kind, status, holder, "
                "process_id, fence, interval_s, grace_s, acquired_at, renewed_at, deadline, "
                "noticed_state, next_check_at, mode, shared_by) "
                "SELECT %s, 'tree/d' || (n %% %s) || '/s' || (n %% 20) || '/f' || n, "
                "'resource', 'held', 'bench-tree', 'seed', 1, 86400, 0, now(), now(), "
                "now() + interval '1 day', 'live', now() + interval '1 day', 'exclusive', '' "
                "FROM generate_series(%s, %s) AS n ON CONFLICT DO NOTHING",
                [workspace_id, directories, held + 1, leases],
            )
        return conn.execute(
            "SELECT count(*) FROM leases_lease WHERE workspace_id = %s AND holder = 'bench-tree'",
            [workspace_id],
        ).fetchone()[0]


# --- Redis and etcd --------------------------------------------------------------------------


def start_redis(procs: Processes) -> str | None:
    binary = shutil.which("redis-server")
    if binary is None:
        return None
    port = free_port()
    procs.start(
        "redis",
        [
            binary,
            "--port",
            str(port),
            "--bind",
            "127.0.0.1",
            "--save",
            "",
            "--appendonly",
            "no",
            "--dir",
            str(procs.tmp),
        ],
    )
    url = f"redis://127.0.0.1:{port}/0"

    def up() -> bool:
        import redis

        return bool(redis.Redis.from_url(url, socket_connect_timeout=1).ping())

    wait_until(up, what="redis-server")
    return url


def ensure_etcd() -> str | None:
    """The etcd binary, installed from Debian's `etcd-server` when missing and we may."""
    binary = shutil.which("etcd")
    if binary:
        return binary
    if os.geteuid() == 0 and shutil.which("apt-get"):
        env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
        for argv in (
            ["apt-get", "update", "-qq"],
            ["apt-get", "install", "-y", "-qq", "etcd-server"],
        ):
            subprocess.run(argv, env=env, capture_output=True, check=False)  # noqa: S603
    return shutil.which("etcd")


def start_etcd(procs: Processes) -> str | None:
    binary = ensure_etcd()
    if binary is None:
        return None
    client, peer = free_port(), free_port()
    client_url, peer_url = f"http://127.0.0.1:{client}", f"http://127.0.0.1:{peer}"
    procs.start(
        "etcd",
        [
            binary,
            "--name",
            "bench",
            "--data-dir",
            str(procs.tmp / "etcd"),
            "--listen-client-urls",
            client_url,
            "--advertise-client-urls",
            client_url,
            "--listen-peer-urls",
            peer_url,
            "--initial-advertise-peer-urls",
            peer_url,
            "--initial-cluster",
            f"bench={peer_url}",
            "--log-level",
            "error",
        ],
    )
    wait_until(lambda: httpx.get(f"{client_url}/health", timeout=1).status_code == 200, what="etcd")
    return client_url


# --- Ground Control under its production web server ------------------------------------------


def gc_env(database: str, redis_url: str | None) -> dict[str, str]:
    """Production settings: PostgreSQL, Redis, DEBUG off; the rate limiter on and counting, with a
    limit no benchmark client reaches (a real fleet spreads its calls over many keys)."""
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "groundcontrol.settings",
        "DATABASE_URL": database,
        "DEBUG": "0",
        # One key for every process of the run (they share this environment); "x" * 50 is
        # refused with DEBUG off (groundcontrol/secret_key.py: weakness).
        "SECRET_KEY": "bench-" + secrets.token_urlsafe(40),
        "GC_RATE_LIMIT_PER_MINUTE": "100000000",
        "GC_CELERY_QUEUE": "gc-bench",
    }
    if redis_url:
        env["REDIS_URL"] = redis_url
    return env


def migrate(env: dict[str, str]) -> None:
    subprocess.run(  # noqa: S603
        [PYTHON, "manage.py", "migrate", "--noinput", "-v", "0"], cwd=ROOT, env=env, check=True
    )


def start_web(procs: Processes, env: dict[str, str], extra: dict[str, str]) -> str:
    """The production web server as the Procfile runs it, on a spare loopback port."""
    port = free_port()
    proc = procs.start(
        "web",
        [PYTHON, "-m", "groundcontrol.server"],
        cwd=ROOT,
        env={**env, **extra, "GC_BIND": f"127.0.0.1:{port}"},
    )
    url = f"http://127.0.0.1:{port}"

    def up() -> bool:
        if proc.poll() is not None:
            raise RuntimeError("the web server exited:\n" + procs.log_tail("web"))
        return httpx.get(f"{url}/healthz", timeout=1).status_code == 200

    wait_until(up, what="the web server")
    return url


def tree_cpu_seconds(pid: int) -> float:
    """CPU time (user and system) used so far by `pid` and every process in its session (each
    process the benchmark starts leads its own: the web server's workers are in its own)."""
    return _cpu_seconds(lambda command, fields: int(fields[3]) == pid)


def postgres_cpu_seconds() -> float:
    """CPU time used so far by the PostgreSQL server's processes (its backends, the WAL writer
    and the rest): nothing else uses the server while the benchmark measures."""
    return _cpu_seconds(lambda command, fields: command == "postgres")


def _cpu_seconds(selected: Callable[[str, list[str]], bool]) -> float:
    tick = os.sysconf("SC_CLK_TCK")
    total = 0
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        command, _, rest = stat.partition(" (")[2].rpartition(") ")
        fields = rest.split()
        # After the command: state, ppid, pgrp, session, ..., utime (12th), stime (13th).
        if selected(command, fields):
            total += int(fields[11]) + int(fields[12])
    return total / tick


def children_rss_mib(pid: int) -> list[float]:
    """Resident memory of each child of `pid` (the web server's workers), in MiB."""
    sizes = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            status = (entry / "status").read_text()
        except OSError:
            continue
        fields = dict(line.split(":", 1) for line in status.splitlines() if ":" in line)
        if fields.get("PPid", "").strip() == str(pid) and "VmRSS" in fields:
            sizes.append(int(fields["VmRSS"].split()[0]) / 1024)
    return sizes
