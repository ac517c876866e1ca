"""What counts as the database being out of reach, in one place: the API's 503
`dependency_unavailable`, the pages' 503 and the hot path all ask `is_database_outage`.

Besides a lost or refused connection (OperationalError, InterfaceError), a write refused
because the server is read-only (SQLSTATE 25006) is an outage too: after a failover the old
primary comes back as a standby, and a connection opened to it before the promotion, or a URL
without `target_session_attrs=read-write`, finds a server that can no longer write. Nothing was
written, and the connection must not be reused: `drop_read_only_connections` closes it, so the
next request connects again and finds the new primary."""

from __future__ import annotations

from django.db import DatabaseError, InterfaceError, OperationalError, connections

READ_ONLY_SQLSTATE = "25006"  # read_only_sql_transaction


def _is_read_only(exception: BaseException) -> bool:
    seen: BaseException | None = exception
    for _ in range(5):  # Django's error wraps the driver's, as its __cause__
        if seen is None:
            return False
        if getattr(seen, "sqlstate", None) == READ_ONLY_SQLSTATE:
            return True
        seen = seen.__cause__
    return False


def is_database_outage(exception: BaseException | None) -> bool:
    if isinstance(exception, OperationalError | InterfaceError):
        return True
    return isinstance(exception, DatabaseError) and _is_read_only(exception)


def drop_read_only_connections(exception: BaseException | None) -> None:
    """After a read-only refusal, close this thread's connections (the next use reconnects)."""
    if exception is None or not isinstance(exception, DatabaseError):
        return
    if not _is_read_only(exception):
        return
    for connection in connections.all(initialized_only=True):
        connection.close()
