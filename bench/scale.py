"""Scale figures, measured inside Django against the benchmark's database, printed as JSON lines:

- the sweep's time with N resource leases of which a fraction has crossed its threshold;
- the board's render time and query count with N attempts (the page a supervisor polls).

Rows are made in bulk with set-based SQL (a fleet of 100,000 takes seconds), each size in a
workspace of its own so sizes do not add up. Run: `python -m bench.scale --sizes 1000,10000`.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from typing import Any

import django


def _lease_rows(*, workspace_id: int, n: int, due: int, prefix: str) -> None:
    """n held resource leases (grace 0); the first `due` passed their deadline 10 s ago."""
    from django.db import connection

    from leases.models import Lease

    with connection.cursor() as cursor:
        cursor.execute(
            f"INSERT INTO {Lease._meta.db_table} (workspace_id, resource, kind, status, holder, "
            "process_id, fence, interval_s, grace_s, acquired_at, renewed_at, deadline, "
            "noticed_state, next_check_at, mode, shared_by) "
            "SELECT %s, %s || i, 'resource', 'held', 'bench-scale', 'p', 1, 60, 0, "
            "now() - interval '70 seconds', now() - interval '70 seconds', d, 'live', d, "
            "'exclusive', '' "
            "FROM (SELECT i, CASE WHEN i < %s THEN now() - interval '10 seconds' "
            "ELSE now() + interval '1 hour' END AS d FROM generate_series(0, %s - 1) AS i) AS s",
            [workspace_id, prefix, due, n],
        )


def sweep(n: int, fraction: float) -> dict[str, Any]:
    from hands import services as hand_services
    from ops.jobs import leases_sweep

    workspace = hand_services.workspace_get_or_create(name=f"scale-sweep-{n}-{fraction}")
    due = round(n * fraction)
    _lease_rows(workspace_id=workspace.pk, n=n, due=due, prefix=f"scale/{n}/{fraction}/")
    start = time.perf_counter()
    result = leases_sweep()
    seconds = time.perf_counter() - start
    # A second sweep right after finds nothing due: the cost of a quiet tick.
    start = time.perf_counter()
    leases_sweep()
    quiet = time.perf_counter() - start
    return {
        "figure": "sweep",
        "leases": n,
        "due": due,
        "processed": result.processed,
        "seconds": round(seconds, 3),
        "quiet_tick_s": round(quiet, 4),
    }


def _fleet(n: int) -> tuple[Any, Any]:
    """A workspace with one run of n attempts (one hand per ten) in every state, and an admin."""
    from django.contrib.auth import get_user_model
    from django.db import connection

    from fleet.models import Attempt, Run, Slot, WorkPackage
    from hands import services as hand_services
    from hands.models import Hand, Role
    from leases.clock import db_now
    from leases.models import Lease

    workspace = hand_services.workspace_get_or_create(name=f"scale-board-{n}")
    lane, _ = hand_services.lane_create(workspace=workspace, slug="scale")
    package = WorkPackage.objects.create(workspace=workspace, lane=lane, key="scale", title="S")
    run = Run.objects.create(
        workspace=workspace,
        work_package=package,
        title="Scale",
        slot_count=n,
        heartbeat_interval_s=100,
        grace_s=60,
    )
    Hand.objects.bulk_create(
        Hand(workspace=workspace, name=f"scale-{i}") for i in range(max(1, n // 10))
    )
    now = db_now()
    lease, slot, attempt, hand = (m._meta.db_table for m in (Lease, Slot, Attempt, Hand))
    # Deadlines cycle through live, late, stalled and lost; every sixth attempt has finished.
    with connection.cursor() as cursor:
        cursor.execute(
            f"INSERT INTO {lease} (workspace_id, resource, kind, status, holder, process_id, "
            "fence, interval_s, grace_s, acquired_at, renewed_at, deadline, noticed_state, mode, "
            "shared_by) "
            "SELECT %(ws)s, 'run/' || %(run)s || '/slot/' || i, 'slot', "
            "CASE WHEN mod(i, 6) = 5 THEN 'free' ELSE 'held' END, 'scale-' || mod(i, %(hands)s), "
            "'p', 1, 100, 60, %(now)s - interval '300 seconds', %(now)s - interval '100 seconds', "
            "%(now)s + (ARRAY[50, -10, -40, -100, -500, -500])[mod(i, 6) + 1] "
            "* interval '1 second', "
            "'live', 'exclusive', '' FROM generate_series(0, %(n)s - 1) AS i",
            {"ws": workspace.pk, "run": run.pk, "n": n, "hands": max(1, n // 10), "now": now},
        )
        cursor.execute(
            f"INSERT INTO {slot} (workspace_id, run_id, index, lease_id) "
            f"SELECT %(ws)s, %(run)s, split_part(resource, '/', 4)::int, id FROM {lease} "
            "WHERE workspace_id = %(ws)s",
            {"run": run.pk, "ws": workspace.pk},
        )
        cursor.execute(
            f"INSERT INTO {attempt} (workspace_id, run_id, slot_id, hand_id, lane_id, lease_id, "
            'fence, process_id, directive, claimed_at, last_report_at, ended_at, "end", '
            "end_reason, summary) "
            f"SELECT %(ws)s, %(run)s, s.id, h.id, %(lane)s, l.id, 1, 'p', 'continue', "
            "l.acquired_at, l.renewed_at, CASE WHEN l.status = 'free' THEN %(now)s END, "
            "CASE WHEN l.status = 'free' THEN 'finished' END, '', '' "
            f"FROM {slot} s JOIN {lease} l ON l.id = s.lease_id "
            f"JOIN {hand} h ON h.workspace_id = %(ws)s AND h.name = l.holder "
            "WHERE s.run_id = %(run)s",
            {"ws": workspace.pk, "run": run.pk, "lane": lane.pk, "now": now},
        )
    user, _ = get_user_model().objects.get_or_create(username=f"scale-admin-{n}")
    hand_services.membership_set(workspace=workspace, user=user, role=Role.ADMIN)
    return workspace, user


def board(n: int) -> dict[str, Any]:
    from django.db import connection
    from django.test import Client
    from django.test.utils import CaptureQueriesContext

    _, user = _fleet(n)
    client = Client()
    client.force_login(user)
    client.get("/")  # warm: templates compiled, session loaded once
    timings = []
    queries = 0
    for _ in range(5):
        with CaptureQueriesContext(connection) as captured:
            start = time.perf_counter()
            response = client.get("/")
            timings.append(time.perf_counter() - start)
        assert response.status_code == 200, response.status_code
        queries = len(captured)
    timings.sort()
    return {
        "figure": "board",
        "attempts": n,
        "median_ms": round(timings[len(timings) // 2] * 1000, 1),
        "queries": queries,
        "bytes": len(response.content),
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sizes", default="1000,10000,100000")
    parser.add_argument("--fractions", default="0.01,0.1,1")
    args = parser.parse_args()
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "groundcontrol.settings")
    django.setup()
    sizes = [int(x) for x in args.sizes.split(",")]
    fractions = [float(x) for x in args.fractions.split(",")]
    # A small sweep first, unmeasured: the process's first sweep opens its connections (the
    # database, and the broker its events' deliveries are queued on), which the first figure
    # would otherwise count.
    sweep(10, 0.5)
    for n in sizes:
        # Every fraction at the largest size; the middle fraction shows the growth.
        for fraction in fractions if n == max(sizes) else [fractions[len(fractions) // 2]]:
            print(json.dumps(sweep(n, fraction)), flush=True)
    for n in sizes:
        print(json.dumps(board(n)), flush=True)
    sys.stdout.flush()


if __name__ == "__main__":
    main()
