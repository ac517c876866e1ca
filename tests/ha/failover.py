"""Failover under load: the history harness (tests/reliability/harness.py: 32 client processes,
SIGSTOP pauses, supervisor breaks, a fenced store) against the production web server on the
Patroni cluster of scripts/ha, while the primary is SIGKILLed (Patroni and PostgreSQL: the
machine is gone) and Patroni promotes the synchronous standby.

    python -m tests.ha.failover --seconds 300 --failovers 4 [--report out.json]

runs it standalone (as root: scripts/ha installs what is missing); tests/ha/test_failover.py
runs it bounded for CI. The checks are the harness's own, over the whole history and the new
primary's event log, with two things known about the switch:

1. Calls answered 503 `dependency_unavailable` while no primary answered (from the kill until
   the first call after it succeeded, plus `SETTLE_S`) are outcomes unknown to their client: a
   commit may have reached the standby although the old primary died before it answered. Any
   other 5xx is an anomaly, as is a 503 outside a switch.
2. The new primary's epochs (leases/epochs.py): each moved the held leases, and the checkers
   hold every deadline promised before the switch to its moved value (tests/reliability/
   deadlines.py). One epoch with a shift is expected per failover.
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import shutil
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import psycopg

from leases.names import node_of
from tests.ha.cluster import Cluster
from tests.reliability.checkers import GRANT_KINDS as GRANTS
from tests.reliability.checkers import GRANT_OPS, Checker, check
from tests.reliability.deadlines import Epoch
from tests.reliability.harness import Config, run_history
from tests.reliability.live import WebServer, migrate_and_bootstrap, server_env

# After the first success following a kill, a web thread whose connection died idle answers
# 503 once more on its next call (Django drops the connection after that call): this long.
SETTLE_S = 5.0


@dataclass
class Switch:
    old: int
    killing_at: float  # the client's clock (time.time()), before scripts/ha began the kill
    killed_at: float = 0.0  # once it had killed
    new: int | None = None
    promoted_at: float | None = None  # Patroni lists a new running leader
    recovered_at: float | None = None  # the first call after the kill that succeeded
    rejoined_at: float | None = None  # the killed member back, the cluster ready again


@dataclass
class Killer:
    """`during` for the harness: SIGKILL the primary at `first_s`, then every `every_s`; after
    each promotion, start the killed member again (it rejoins as a replica, rewound)."""

    cluster: Cluster
    first_s: float
    every_s: float
    failovers: int
    switches: list[Switch] = field(default_factory=list)

    def __call__(self, stop: threading.Event) -> None:
        started = time.time()
        for n in range(self.failovers):
            if stop.wait(max(0.0, started + self.first_s + n * self.every_s - time.time())):
                return
            old = self.cluster.wait_leader(exclude=None, timeout=60)
            if old is None:
                return
            switch = Switch(old=old, killing_at=time.time())
            self.cluster.kill(old)
            switch.killed_at = time.time()
            self.switches.append(switch)
            switch.new = self.cluster.wait_leader(exclude=old, timeout=90)
            switch.promoted_at = time.time() if switch.new is not None else None
            self.cluster.start(old)
            if self.cluster.wait_ready(120):
                switch.rejoined_at = time.time()


def windows(switches: list[Switch], ops: list[dict[str, Any]]) -> list[tuple[float, float]]:
    """Each switch's window: from the kill to the first success of a call made after it (the
    new primary), plus SETTLE_S. Sets each switch's `recovered_at`."""
    spans = []
    for switch in switches:
        after = [
            op["complete"]
            for op in ops
            if op.get("outcome") == "ok"
            and op["kind"] != "write"
            and op["invoke"] > switch.killed_at
        ]
        switch.recovered_at = min(after) if after else None
        end = (switch.recovered_at or float("inf")) + SETTLE_S
        spans.append((switch.killing_at, end))
    return spans


def ha_checker(switches: list[Switch], read_epochs: Any) -> Any:
    """The harness's `checker`: `check`, with the switches' 503s as unknown outcomes and the
    new primaries' epochs."""

    def checker(
        history: list[dict[str, Any]],
        store_log: list[dict[str, Any]],
        events: list[dict[str, Any]],
        config: Config,
        hands: list[str],
        paused: dict[int, list[tuple[float, float]]],
    ) -> dict[str, Any]:
        ops = [op for op in history if "outcome" in op]
        spans = windows(switches, ops)
        during: Counter[str] = Counter()
        for op in ops:
            if not any(op["invoke"] <= end and op["complete"] >= start for start, end in spans):
                continue
            during["calls"] += 1
            if op["status"] == 503 and op.get("code") == "dependency_unavailable":
                during["503"] += 1
                op.update(outcome="info", status=None, exception="503 during the switch")
            elif op["outcome"] == "info":
                during["no_answer"] += 1
        epochs = read_epochs()
        report = check(history, store_log, events, config, hands, paused, epochs=epochs)
        granted = {(node_of(e["resource"]), e["fence"]) for e in events if e["kind"] in GRANTS}
        heard = [op for op in ops if op["outcome"] == "ok" and op["kind"] in GRANT_OPS]
        lost = [
            op
            for op in heard
            if (node_of(Checker.lease_of(op)["resource"]), op["body"]["fence"]) not in granted
        ]
        report["failover"] = {
            "switches": [asdict(s) for s in switches],
            "switch_s": [
                round(s.recovered_at - s.killed_at, 2) if s.recovered_at else None for s in switches
            ],
            "promotion_s": [
                round(s.promoted_at - s.killed_at, 2) if s.promoted_at else None for s in switches
            ],
            "calls": len(ops),
            "calls_during_switches": during["calls"],
            "answered_503_during_switches": during["503"],
            "unanswered_during_switches": during["no_answer"],
            "answered_5xx_otherwise": sum(1 for op in ops if (op["status"] or 0) >= 500),
            "acknowledged_grants": len(heard),
            "acknowledged_grants_lost": len(lost),
            "epochs": [
                {
                    "last_promise_at": str(e.last_promise_at),
                    "started_at": str(e.started_at),
                    "shift_s": e.shift.total_seconds(),
                }
                for e in epochs
            ],
        }
        report["anomalies"] += [f"acknowledged grant lost: {op['body']}" for op in lost[:20]]
        return report

    return checker


def epochs_of(url: str) -> list[Epoch]:
    """The epochs that moved leases, in order (the first epoch ever moves nothing)."""
    with psycopg.connect(url, connect_timeout=5) as conn:
        rows = conn.execute(
            "SELECT last_promise_at, started_at, shift_s FROM leases_clockepoch "
            "WHERE last_promise_at IS NOT NULL ORDER BY started_at"
        ).fetchall()
    return [
        Epoch.from_row({"last_promise_at": a, "started_at": b, "shift_s": c}) for a, b, c in rows
    ]


@contextmanager
def served(cluster: Cluster, workdir: Path, workers: int = 3) -> Iterator[tuple[str, str, str]]:
    """A fresh database on the cluster, migrated, a supervisor's key, and the production web
    server on it through the multi-host URL. Yields (server url, key, database url)."""
    name = f"gc_ha_{os.getpid()}"
    with psycopg.connect(cluster.url("postgres"), autocommit=True, connect_timeout=5) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    database = cluster.url(name)
    env = server_env(database)
    key = migrate_and_bootstrap(env, "failover")
    with WebServer(env=env, log=workdir / "server.log", workers=workers) as server:
        yield server.url, key, database


def run_failover(
    cluster: Cluster, config: Config, workdir: Path, first_s: float, every_s: float, failovers: int
) -> dict[str, Any]:
    shutil.rmtree(workdir, ignore_errors=True)  # the clients append to their histories
    workdir.mkdir(parents=True)
    killer = Killer(cluster, first_s=first_s, every_s=every_s, failovers=failovers)
    with served(cluster, workdir) as (url, key, database):
        report = run_history(
            url,
            key,
            config,
            workdir / "history",
            during=killer,
            checker=ha_checker(killer.switches, lambda: epochs_of(database)),
        )
        log = (workdir / "server.log").read_text(errors="replace")
    report["failover"]["server_500s"] = log.count("Internal Server Error")
    report["failover"]["cluster"] = cluster.status()
    (workdir / "report.json").write_text(json.dumps(report, indent=2, default=str))
    return report


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.ha.failover")
    parser.add_argument("--clients", type=int, default=32)
    parser.add_argument("--seconds", type=float, default=300)
    parser.add_argument("--failovers", type=int, default=4)
    parser.add_argument("--first", type=float, default=20, help="seconds before the first kill")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--workdir")
    parser.add_argument("--report", help="also write the report here")
    args = parser.parse_args(argv)
    # As tests/environment.py does for pytest: its servers are production-shaped (PostgreSQL),
    # which refuse to start without a key.
    os.environ.setdefault("SECRET_KEY", "failover-" + secrets.token_urlsafe(40))
    workdir = Path(args.workdir or tempfile.mkdtemp(prefix="gc-failover-"))
    every = (args.seconds - args.first - 20) / max(1, args.failovers - 1)
    cluster = Cluster(Path(tempfile.gettempdir()) / f"gc-ha-{os.getpid()}")
    cluster.up()
    try:
        report = run_failover(
            cluster,
            Config(clients=args.clients, seconds=args.seconds, seed=args.seed),
            workdir,
            first_s=args.first,
            every_s=every,
            failovers=args.failovers,
        )
    finally:
        cluster.down()
    text = json.dumps(report, indent=2, default=str)
    print(text)
    if args.report:
        Path(args.report).write_text(text)
    return 1 if report["anomalies"] else 0


if __name__ == "__main__":
    sys.exit(main())
