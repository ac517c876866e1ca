"""The `pooler` block: Ground Control's hot calls through PgBouncer in transaction mode, beside
the same web server on a direct connection, in one block so that both meet the same machine.

The direct rows run as production does by default (statements prepared once per connection);
the pooled ones as `GC_DB_POOLER=transaction` runs them: statements sent unnamed and planned on
every call (PgBouncer 1.18, Debian bookworm's, keeps no prepared statements), LISTEN and the
wait permits over `DATABASE_DIRECT_URL`. PgBouncer has `POOL_SIZE` server connections: fewer
than the web server's workers x threads, which is what a pooler is for.
"""

from __future__ import annotations

from urllib.parse import urlsplit, urlunsplit

from bench import pgservers, services

DIRECT = "GC direct"
POOLED = "GC via PgBouncer"
SYSTEMS = (DIRECT, POOLED)
POOL_SIZE = 8


def start(procs: services.Processes, server_url: str) -> pgservers.Bouncer | None:
    """A PgBouncer in front of the benchmark's server, stopped with the other processes; None
    (and the reason printed) when it cannot be started here."""
    reason = pgservers.unavailable(pgbouncer=True)
    if reason is not None:
        print(f"   no PgBouncer: {reason}", flush=True)
        return None
    port = urlsplit(server_url).port or 5432
    bouncer = pgservers.start_pgbouncer(server_port=port, pool_size=POOL_SIZE)
    procs.cleanups.append(bouncer.stop)
    return bouncer


def variants(bouncer: pgservers.Bouncer, database: str) -> list[tuple[str, dict[str, str]]]:
    """(system, the web server's extra environment) for each side."""
    parts = urlsplit(database)
    netloc = f"{parts.username or pgservers.OS_USER}@127.0.0.1:{bouncer.port}"
    pooled = urlunsplit(parts._replace(netloc=netloc))
    return [
        (DIRECT, {}),
        (
            POOLED,
            {
                "DATABASE_URL": pooled,
                "GC_DB_POOLER": "transaction",
                "DATABASE_DIRECT_URL": database,
            },
        ),
    ]


def cpu_seconds() -> float:
    """CPU time used so far by PgBouncer (one process)."""
    return services._cpu_seconds(lambda command, fields: command == "pgbouncer")
