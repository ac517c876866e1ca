"""Real processes for the reliability, fault and hostile-input tests: the production web server
(`python -m groundcontrol.server`, granian) with several workers against a given database, and a
client for its API.

No Django imports here: the standalone harness (`python -m tests.reliability.harness`) uses this
module before any settings exist, and tests use it against pytest's own test database.
"""

from __future__ import annotations

import json
import os
import secrets
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import quote

import httpx

ROOT = Path(__file__).resolve().parents[2]
API = "/api/v1"


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def database_url(db: Mapping[str, Any], name: str | None = None) -> str:
    """A postgresql:// URL for Django's DATABASES entry `db` (optionally another database)."""
    auth = quote(db.get("USER") or "postgres")
    if db.get("PASSWORD"):
        auth += ":" + quote(db["PASSWORD"])
    # Several hosts (a multi-host DATABASE_URL, docs/scale.md) come as lists, one port each; a
    # socket directory (the embedded PostgreSQL's) is percent-encoded, as libpq's URLs allow.
    hosts = [quote(host, safe="") for host in str(db.get("HOST") or "127.0.0.1").split(",")]
    ports = str(db.get("PORT") or 5432).split(",")
    if len(ports) == 1:
        ports *= len(hosts)
    netloc = ",".join(f"{host}:{port}" for host, port in zip(hosts, ports, strict=True))
    url = f"postgresql://{auth}@{netloc}/{name or db['NAME']}"
    attrs = (db.get("OPTIONS") or {}).get("target_session_attrs")
    return f"{url}?target_session_attrs={attrs}" if attrs else url


def server_env(database: str, **extra: str) -> dict[str, str]:
    """The environment of a server process: this interpreter's, a database, no Redis unless
    given (so each web worker runs the periodic jobs itself: several sweeps at once)."""
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("REDIS_URL", "GC_EMBEDDED_SCHEDULER", "DJANGO_SETTINGS_MODULE", "GC_BIND")
        and not k.startswith(("GC_WEB_", "PYTEST_"))
    }
    env.update(
        DJANGO_SETTINGS_MODULE="groundcontrol.settings",
        DATABASE_URL=database,
        PYTHONUNBUFFERED="1",
        # Limits that would only get in the way of a load test; each has its own tests.
        GC_RATE_LIMIT_PER_MINUTE="0",
        GC_SWEEP_INTERVAL_S="0.5",
        LOG_LEVEL="WARNING",
        PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
    )
    env.update(extra)
    return env


def migrate_and_bootstrap(env: Mapping[str, str], workspace: str) -> str:
    """Migrate the database `env` names and bootstrap `workspace` in it; its supervisor key."""
    subprocess.run(
        [sys.executable, "manage.py", "migrate", "--noinput", "-v", "0"],
        cwd=ROOT,
        env=env,
        check=True,
        timeout=300,
    )
    boot = subprocess.run(
        [
            sys.executable,
            "manage.py",
            "bootstrap",
            "--workspace",
            workspace,
            "--username",
            workspace,
            f"--password={secrets.token_urlsafe(16)}",
            "--json",
        ],
        cwd=ROOT,
        env=env,
        check=True,
        capture_output=True,
        text=True,
        timeout=120,
    )
    return json.loads(boot.stdout)["supervisor_key"]


@dataclass
class WebServer:
    """`python -m groundcontrol.server` (the Procfile's web line) on a spare loopback port, with
    `workers` worker processes of `threads` threads each."""

    env: dict[str, str]
    log: Path
    workers: int = 3
    threads: int = 8
    port: int = field(default_factory=free_port)
    process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self, ready_timeout: float = 40) -> WebServer:
        env = dict(self.env)
        env.update(
            GC_BIND=f"127.0.0.1:{self.port}",
            WEB_CONCURRENCY=str(self.workers),
            GC_WEB_THREADS=str(self.threads),
            GC_WEB_GRACEFUL_TIMEOUT_S="5",
        )
        with self.log.open("ab") as out:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "groundcontrol.server"],
                cwd=ROOT,
                env=env,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        self.wait_serving(ready_timeout)
        return self

    def wait_serving(self, timeout: float = 40) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            assert self.process is not None and self.process.poll() is None, self.tail()
            try:
                if httpx.get(f"{self.url}/healthz", timeout=1).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.1)
        raise AssertionError(f"the web server did not serve within {timeout}s\n{self.tail()}")

    def worker_pids(self) -> list[int]:
        """The main process's children: the workers (read from /proc, no extra dependency)."""
        assert self.process is not None
        path = Path(f"/proc/{self.process.pid}/task/{self.process.pid}/children")
        return [int(pid) for pid in path.read_text().split()]

    def stop(self) -> None:
        if self.process is None or self.process.poll() is not None:
            return
        # The whole session: the main process and any worker it had not reaped yet.
        try:
            os.killpg(self.process.pid, signal.SIGTERM)
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait()
        except ProcessLookupError:
            pass

    def tail(self, chars: int = 4000) -> str:
        try:
            return self.log.read_text(errors="replace")[-chars:]
        except FileNotFoundError:
            return ""

    def __enter__(self) -> WebServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


class Api:
    """A key's view of a live server: JSON in, JSON out, no retries (every answer counts)."""

    def __init__(self, base_url: str, key: str, timeout: float = 30) -> None:
        self.http = httpx.Client(
            base_url=base_url + API,
            headers={"Authorization": f"Bearer {key}"},
            timeout=timeout,
        )

    def post(self, path: str, body: Any = None, **headers: str) -> httpx.Response:
        return self.http.post(
            path,
            content=json.dumps(body or {}),
            headers={"Content-Type": "application/json", **headers},
        )

    def get(self, path: str, **params: Any) -> httpx.Response:
        return self.http.get(path, params=params)

    def ok(self, method: str, path: str, body: Any = None) -> Any:
        response = self.post(path, body) if method == "post" else self.get(path, **(body or {}))
        assert response.status_code < 300, (method, path, response.status_code, response.text)
        return response.json()

    def pages(self, path: str, **params: Any) -> Iterator[dict[str, Any]]:
        """Every item of a paginated list, newest first."""
        cursor = None
        while True:
            query = {**params, "limit": 500, **({"cursor": cursor} if cursor else {})}
            response = self.get(path, **query)
            assert response.status_code == 200, response.text
            yield from response.json()
            cursor = response.headers.get("X-Next-Cursor")
            if not cursor:
                return

    def close(self) -> None:
        self.http.close()

    def __enter__(self) -> Api:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
