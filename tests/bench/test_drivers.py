"""The raw SQL drivers of the benchmark (bench/drivers.py) send the lease engine's own
statements: the capture that renders them must find each one."""

from __future__ import annotations

from bench import drivers
from leases import engine


def test_the_raw_sql_driver_captures_the_engines_renewal_and_insert() -> None:
    renew_sql, renew_params = drivers.engine_statement(
        engine.renew, workspace_id=1, resource="src/", holder="a", fence=3, process_id="p"
    )
    assert renew_sql.lstrip().upper().startswith("UPDATE") and renew_params["fence"] == 3
    insert_sql, insert_params = drivers.engine_statement(
        engine.insert,
        workspace_id=1,
        resource="src/a",
        kind="resource",
        holder="a",
        process_id="p",
        interval_s=30,
        grace_s=0,
    )
    assert "INSERT" in insert_sql.upper() and insert_params["resource"] == "src/a"
