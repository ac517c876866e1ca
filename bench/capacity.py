"""A heartbeat's cost in the database, measured on the statement the hot view runs, printed as one
JSON line (docs/scale.md, "Capacity"):

1. a hand claims a slot of a run among `--attempts` open attempts, and heartbeats once through
   Django's test client, which runs the hot view; the statement and its parameters are kept;
2. that statement is then run `--beats` times under `EXPLAIN (ANALYZE, BUFFERS, WAL)`: each run
   is a real heartbeat (the lease's deadline moves), and its execution and planning time, the
   buffers it touched and dirtied, and the WAL it wrote are read from the plan;
3. the medians are printed, with the WAL of `--beats` more heartbeats through the whole web
   stack (the key's stamp and the once-a-minute record included) read from
   `pg_current_wal_insert_lsn()` (other databases' writes on the server count too: run it on
   a quiet one).

Run against a migrated database of its own:
`DATABASE_URL=... python -m bench.capacity --attempts 10000 --beats 300`.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
from typing import Any

import django


def _setup(attempts: int) -> tuple[Any, str]:
    from fleet.attempts import services as attempt_services
    from fleet.plan import services as plan_services
    from hands import services as hand_services

    workspace = hand_services.workspace_get_or_create(name=f"capacity-{os.getpid()}")
    lane, _ = hand_services.lane_create(workspace=workspace, slug="capacity", name="Capacity")
    package, _ = plan_services.work_package_create(lane=lane, key="capacity", title="Capacity")
    runs = [
        plan_services.run_create(
            work_package=package,
            title=f"Capacity {i}",
            brief="Heartbeat",
            slots=min(1000, attempts - i * 1000),
            heartbeat_interval_s=30,
            grace_s=60,
        )
        for i in range((attempts + 999) // 1000)
    ]
    run = runs[0]
    hand, _ = hand_services.hand_create(workspace=workspace, name="capacity-hand")
    key = hand_services.key_issue(hand=hand, scopes=["work"], actor="bench").plaintext
    # Every slot held: the lease table and the attempt table hold `attempts` live tenures.
    from django.db import connection

    others = attempts - 1
    if others:
        with connection.cursor() as cursor:
            cursor.execute(
                "UPDATE leases_lease SET status = 'held', holder = 'other', process_id = 'p', "
                "fence = 1, acquired_at = now(), renewed_at = now(), "
                "deadline = now() + interval '30 seconds', interval_s = 30, grace_s = 60 "
                "WHERE workspace_id = %s AND resource LIKE 'run/%%' AND resource <> %s",
                [workspace.pk, f"run/{run.pk}/slot/0"],
            )
    attempt = attempt_services.attempt_claim(
        hand=hand, run_id=run.pk, process_id="bench:1", slot=0
    ).attempt
    # As autovacuum would have by now: the statements are planned from the statistics.
    with connection.cursor() as cursor:
        cursor.execute("VACUUM (ANALYZE)")
    return attempt, key


def _plan_figures(plan: dict[str, Any]) -> dict[str, float]:
    top = plan["Plan"]
    return {
        "execution_ms": plan["Execution Time"],
        "planning_ms": plan.get("Planning Time", 0.0),
        "shared_hit": top.get("Shared Hit Blocks", 0),
        "shared_read": top.get("Shared Read Blocks", 0),
        "shared_dirtied": top.get("Shared Dirtied Blocks", 0),
        "wal_records": top.get("WAL Records", 0),
        "wal_bytes": top.get("WAL Bytes", 0),
        "wal_fpi": top.get("WAL FPI", 0),
    }


def main() -> int:
    parser = argparse.ArgumentParser(prog="bench.capacity")
    parser.add_argument("--attempts", type=int, default=10_000)
    parser.add_argument("--beats", type=int, default=300)
    args = parser.parse_args()
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "groundcontrol.settings")
    django.setup()
    from django.db import connection
    from django.test import Client

    from leasing import hot

    attempt, key = _setup(args.attempts)
    kept: dict[str, Any] = {}
    real = hot.run_statement

    def keeping(db: Any, sql: str, params: dict[str, Any], **kwargs: Any) -> Any:
        kept.setdefault("sql", sql)
        kept.setdefault("params", params)
        return real(db, sql, params, **kwargs)

    hot.run_statement = keeping  # type: ignore[assignment]
    client = Client()
    path = f"/api/v1/attempts/{attempt.pk}/reports"
    beat = json.dumps({"fence": attempt.fence, "kind": "heartbeat", "process_id": "bench:1"})
    headers = {"Authorization": f"Bearer {key}"}
    first = client.post(path, beat, content_type="application/json", headers=headers)
    assert first.status_code in (200, 201), first.content
    hot.run_statement = real  # type: ignore[assignment]
    sql, params = kept["sql"], kept["params"]

    connection.ensure_connection()
    raw = connection.connection
    figures = []
    with raw.cursor() as cursor:
        for _ in range(args.beats):
            cursor.execute("EXPLAIN (ANALYZE, BUFFERS, WAL, FORMAT JSON) " + sql, params)
            (plan,) = cursor.fetchone()
            figures.append(_plan_figures(plan[0]))
        # The once-a-minute record (the attempt's stamp and a report row), made due each time.
        from django.utils import timezone

        from fleet.attempts import reports

        kept_record: dict[str, Any] = {}

        def keep(execute: Any, query: str, values: Any, many: bool, context: Any) -> Any:
            kept_record.setdefault("sql", query)
            kept_record.setdefault("params", values)
            return execute(query, values, many, context)

        with connection.execute_wrapper(keep):
            reports.heartbeat_record(
                workspace_id=attempt.workspace_id,
                attempt_id=attempt.pk,
                fence=attempt.fence,
                at=timezone.now(),
                process_id="b",
            )
        records = []
        for _ in range(min(args.beats, 100)):
            cursor.execute(
                "UPDATE fleet_attempt SET last_report_at = NULL WHERE id = %s", [attempt.pk]
            )
            cursor.execute(
                "EXPLAIN (ANALYZE, BUFFERS, WAL, FORMAT JSON) " + kept_record["sql"],
                kept_record["params"],
            )
            (plan,) = cursor.fetchone()
            records.append(_plan_figures(plan[0]))
        # Through the whole web stack: WAL per heartbeat as the server sees it.
        cursor.execute("SELECT pg_current_wal_insert_lsn()")
        (before,) = cursor.fetchone()
    for _ in range(args.beats):
        response = client.post(path, beat, content_type="application/json", headers=headers)
        assert response.status_code in (200, 201), response.content
    with raw.cursor() as cursor:
        cursor.execute("SELECT pg_current_wal_insert_lsn() - %s::pg_lsn", [before])
        (stack_wal,) = cursor.fetchone()

    def median(name: str) -> float:
        return statistics.median(f[name] for f in figures)

    out = {
        "figure": "heartbeat-cost",
        "attempts": args.attempts,
        "beats": args.beats,
        **{name: median(name) for name in figures[0]},
        "wal_bytes_per_heartbeat_through_the_stack": float(stack_wal) / args.beats,
        **{
            f"record_{name}": statistics.median(r[name] for r in records)
            for name in ("execution_ms", "shared_hit", "wal_records", "wal_bytes")
        },
    }
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
