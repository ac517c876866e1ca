"""The SQL each hot call runs (a renew, an acquire, a renew-all, a renewing report), on the hot
path and through its service, rendered and compared with a checked-in snapshot
(tests/hot_calls/statements/*.sql), so that a change to any of them shows its full text in a diff.

The snapshots are PostgreSQL's own parse of each statement, printed by pglast: a statement that
does not parse fails here. `GC_WRITE_STATEMENTS=1` writes them anew."""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from pathlib import Path

import pytest
from pglast import prettify

from fleet.attempts import reports as report_services
from leases import clock, engine, queue, tree
from leasing import hot

SNAPSHOTS = Path(__file__).parent / "statements"
PRODUCTION_CLOCK = "clock_timestamp()"


def _service_report(*, with_percent: bool, bare: bool, in_lane: bool) -> str:
    return report_services.report_statement(
        with_percent=with_percent,
        bare=bare,
        caller=(
            report_services._PARAMETER_REPORTER_IN_LANE
            if in_lane
            else report_services._PARAMETER_REPORTER
        ),
    )


STATEMENTS: dict[str, Callable[[], str]] = {
    # The hot path's: the key checked and the change made in one statement.
    "hot_renew": lambda: hot.statement("renew", PRODUCTION_CLOCK),
    "hot_acquire_locks": lambda: hot.Acquire.prelude or "",
    "hot_acquire": lambda: hot.statement("acquire", PRODUCTION_CLOCK),
    # What explains an acquire the statement denied: one read (`queue.standing_in_the_way`).
    "hot_acquire_denial": lambda: engine.render(queue.STANDING_IN_THE_WAY),
    "hot_renew_all": lambda: hot.statement("renew_all", PRODUCTION_CLOCK),
    # A harness session's event: its leases, those due renewed (harnesses/services.py).
    "hot_renew_due": lambda: hot.statement("renew_due", PRODUCTION_CLOCK),
    "hot_heartbeat": lambda: hot.statement("heartbeat", PRODUCTION_CLOCK),
    "hot_report": lambda: hot.statement("report", PRODUCTION_CLOCK),
    "hot_report_percent": lambda: hot.statement("report_percent", PRODUCTION_CLOCK),
    # The services' (the key already checked by the API's authentication).
    "service_renew": lambda: engine.render(engine.RENEW),
    "service_acquire_insert": lambda: engine.render(engine.INSERT),
    "service_acquire_take": lambda: engine.render(engine.TAKE),
    "service_acquire_locks": lambda: tree.lock_tree_sql("CAST(%(workspace_id)s AS text)"),
    "service_renew_all": lambda: engine.render(engine.RENEW_ALL),
    "service_renew_all_lost": lambda: engine.render(engine.HELD_LOST),
    "service_heartbeat": lambda: _service_report(with_percent=False, bare=True, in_lane=False),
    "service_report": lambda: _service_report(with_percent=False, bare=False, in_lane=False),
    "service_report_percent": lambda: _service_report(with_percent=True, bare=False, in_lane=False),
    "service_report_in_lane": lambda: _service_report(with_percent=False, bare=False, in_lane=True),
}

_PARAMETER = re.compile(r"%\((\w+)\)s")


def readable(sql: str) -> str:
    """`sql` as PostgreSQL parses it, one clause a line; its `%(name)s` parameters kept (they
    are read as `$n` placeholders for the parse, and named again after)."""
    numbers: dict[str, int] = {}

    def numbered(match: re.Match[str]) -> str:
        return f"${numbers.setdefault(match.group(1), len(numbers) + 1)}"

    printed = prettify(_PARAMETER.sub(numbered, sql).replace("%%", "%"))
    names = {number: name for name, number in numbers.items()}
    return re.sub(r"\$(\d+)", lambda m: f"%({names[int(m.group(1))]})s", printed) + "\n"


@pytest.mark.parametrize("name", sorted(STATEMENTS))
def test_each_hot_statement_reads_as_its_snapshot(name: str) -> None:
    assert clock.now_sql() == PRODUCTION_CLOCK  # no test's frozen or shifted clock
    text = readable(STATEMENTS[name]())
    snapshot = SNAPSHOTS / f"{name}.sql"
    if os.environ.get("GC_WRITE_STATEMENTS") == "1":
        snapshot.write_text(text)
    assert snapshot.exists(), f"no snapshot {snapshot}: run with GC_WRITE_STATEMENTS=1"
    assert text == snapshot.read_text(), (
        f"{name} changed: review the diff, then run with GC_WRITE_STATEMENTS=1"
    )


def test_every_snapshot_is_of_a_statement() -> None:
    assert {path.stem for path in SNAPSHOTS.glob("*.sql")} == set(STATEMENTS)
