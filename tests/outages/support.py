"""What the fault tests share: a throwaway PostgreSQL cluster, a fleet set up through the API, a
load of calls whose every effect can be told apart, and the checks that nothing was half-applied.

Every acquire in the load names a resource of its own (`load/<thread>/<n>`), so after the fault
each answer can be matched with what the database holds: a 201 left its lease row and its one
event, a 503 left nothing, and no row exists without its event (or an event without its row).
"""

from __future__ import annotations

import os
import secrets
import shutil
import subprocess
import tempfile
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import psycopg
from django.db import connection

from tests.reliability.live import Api, free_port

PG_BIN = Path("/usr/lib/postgresql/15/bin")


class ThrowawayPostgres:
    """A PostgreSQL cluster of the test's own in a temporary directory, on a spare port: it can
    be stopped and started without touching the machine's PostgreSQL on 5432."""

    def __init__(self) -> None:
        self.port = free_port()
        self.dir = Path(tempfile.mkdtemp(prefix="gc-pg-"))
        self.data = self.dir / "data"
        self.log = self.dir / "postgres.log"
        self._as_postgres = os.geteuid() == 0  # initdb refuses to run as root
        if self._as_postgres:
            shutil.chown(self.dir, "postgres", "postgres")

    def _run(self, *command: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        prefix = ["runuser", "-u", "postgres", "--"] if self._as_postgres else []
        return subprocess.run(
            [*prefix, *command], capture_output=True, text=True, check=check, timeout=120
        )

    def url(self, database: str = "postgres") -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/{database}"

    def init(self) -> ThrowawayPostgres:
        self._run(
            str(PG_BIN / "initdb"),
            "-D",
            str(self.data),
            "-A",
            "trust",
            "-U",
            "postgres",
            "--no-sync",
            "-E",
            "UTF8",
        )
        return self

    def start(self) -> None:
        self._run(
            str(PG_BIN / "pg_ctl"),
            "-D",
            str(self.data),
            "-l",
            str(self.log),
            "-w",
            "-t",
            "60",
            "-o",
            f"-p {self.port} -k {self.dir} -c listen_addresses=127.0.0.1 "
            "-c fsync=off -c max_connections=80",
            "start",
        )

    def stop(self, mode: str = "fast") -> None:
        self._run(
            str(PG_BIN / "pg_ctl"), "-D", str(self.data), "-m", mode, "-w", "stop", check=False
        )

    def destroy(self) -> None:
        self.stop("immediate")
        shutil.rmtree(self.dir, ignore_errors=True)


@dataclass
class Fleet:
    url: str
    boss: str
    keys: list[str]
    run_id: int


def fleet_setup(url: str, boss_key: str, hands: int = 4, slots: int = 300) -> Fleet:
    """A lane, a package, a run with many slots, and `hands` hands with a key each."""
    boss = Api(url, boss_key)
    tag = secrets.token_hex(3)
    boss.ok("post", "/lanes", {"slug": f"faults-{tag}"})
    package = boss.ok("post", f"/lanes/faults-{tag}/work-packages", {"title": "F", "key": tag})
    run = boss.ok(
        "post",
        f"/work-packages/{package['id']}/runs",
        {"title": "Faults", "slots": slots, "heartbeat_interval_s": 60, "grace_s": 60},
    )
    keys = []
    for i in range(hands):
        boss.ok("post", "/hands", {"name": f"f{tag}-{i}"})
        keys.append(
            boss.ok("post", f"/hands/f{tag}-{i}/keys", {"scopes": ["work", "leases"]})["key"]
        )
    boss.close()
    return Fleet(url=url, boss=boss_key, keys=keys, run_id=run["id"])


@dataclass
class Answer:
    kind: str
    resource: str
    status: int | None  # None: no answer (the connection broke)
    code: str | None
    at: float  # when the answer came (time.monotonic)
    sent: float  # when the request was sent


@dataclass
class Load:
    """Threads calling the API as fast as they can until stopped, one hand each: unique
    acquires, renewals of them, checks, and claims of the run's slots."""

    fleet: Fleet
    answers: list[Answer] = field(default_factory=list)
    stop: threading.Event = field(default_factory=threading.Event)
    threads: list[threading.Thread] = field(default_factory=list)

    def _worker(self, index: int) -> None:
        api = Api(self.fleet.url, self.fleet.keys[index], timeout=20)
        n = 0
        held: list[tuple[str, int]] = []
        while not self.stop.is_set():
            n += 1
            roll = n % 5
            body: dict[str, Any]
            if roll == 4:
                kind, resource = "claim", f"run/{self.fleet.run_id}"
                path, body = f"/runs/{self.fleet.run_id}/claim", {"process_id": f"load-{index}"}
            elif roll in (1, 3) and held:
                resource, fence = held[-1]
                kind = "renew" if roll == 1 else "check"
                path, body = f"/leases/{kind}", {"resource": resource, "fence": fence}
                if kind == "renew":
                    body["process_id"] = f"load-{index}"
            else:
                kind, resource = "acquire", f"load/{index}/{n}"
                path = "/leases/acquire"
                body = {"resource": resource, "ttl_s": 600, "process_id": f"load-{index}"}
            sent = time.monotonic()
            try:
                response = api.post(path, body)
                status = response.status_code
                code = response.json().get("error", {}).get("code") if status >= 300 else None
                if kind == "acquire" and status == 201:
                    held.append((resource, response.json()["fence"]))
            except (httpx.HTTPError, ValueError):
                status, code = None, None
                time.sleep(0.05)
            self.answers.append(Answer(kind, resource, status, code, time.monotonic(), sent))
            if status == 503:
                time.sleep(0.05)  # as the client's backoff would
        api.close()

    def start(self) -> Load:
        self.threads = [
            threading.Thread(target=self._worker, args=(i,), daemon=True)
            for i in range(len(self.fleet.keys))
        ]
        for thread in self.threads:
            thread.start()
        return self

    def finish(self) -> None:
        self.stop.set()
        for thread in self.threads:
            thread.join(30)
            assert not thread.is_alive(), "a load thread hung"

    def statuses(self) -> Counter[Any]:
        return Counter((a.status, a.code) for a in self.answers)


def assert_nothing_half_applied(
    database_url: str, load: Load, unknown_ok: bool = False
) -> dict[str, int]:
    """Every answer against the database's state; and the state against itself."""
    with psycopg.connect(database_url) as db:
        rows = dict(
            db.execute(
                "SELECT resource, fence FROM leases_lease WHERE resource LIKE 'load/%%'"
            ).fetchall()
        )
        grant_events = Counter(
            r
            for (r,) in db.execute(
                "SELECT resource FROM leases_event WHERE kind = 'lease_acquired' "
                "AND resource LIKE 'load/%%'"
            ).fetchall()
        )
        # Each taken slot has exactly one attempt at its fence, and one claimed event each.
        slot_mismatch = db.execute(
            "SELECT l.resource, l.fence, (SELECT count(*) FROM fleet_attempt a "
            "WHERE a.lease_id = l.id AND a.fence = l.fence) FROM leases_lease l "
            "WHERE l.kind = 'slot' AND l.fence > 0 AND (SELECT count(*) FROM fleet_attempt a "
            "WHERE a.lease_id = l.id AND a.fence = l.fence) <> 1"
        ).fetchall()
        (attempts,) = db.execute("SELECT count(*) FROM fleet_attempt").fetchone()
        (claimed,) = db.execute(
            "SELECT count(*) FROM leases_event WHERE kind = 'claimed'"
        ).fetchone()
    assert not slot_mismatch, f"slots taken without exactly one attempt: {slot_mismatch[:5]}"
    assert attempts == claimed, (attempts, claimed)
    orphans = set(rows) ^ set(grant_events)
    assert not orphans, f"lease rows and grant events disagree: {sorted(orphans)[:5]}"
    assert all(count == 1 for count in grant_events.values()), grant_events.most_common(3)
    for answer in load.answers:
        if answer.kind != "acquire":
            continue
        if answer.status == 201:
            assert answer.resource in rows, f"a granted acquire left nothing: {answer}"
        elif answer.status == 503:
            assert answer.resource not in rows, f"a 503 acquire was written: {answer}"
        elif answer.status is None and not unknown_ok:
            raise AssertionError(f"an acquire got no answer: {answer}")
    return {"lease_rows": len(rows), "attempts": attempts}


def read_only_session() -> None:
    """This thread's connection as a standby's: every transaction it starts is read-only."""
    connection.ensure_connection()
    with connection.cursor() as cursor:
        cursor.execute("SET SESSION default_transaction_read_only = on", [])
