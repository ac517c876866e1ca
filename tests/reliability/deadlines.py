"""The holder's side of the lease, for the history checkers (tests/reliability/checkers.py):
no lease is treated as expired before the deadline last promised to its holder, and a failover
moves those deadlines as the new primary's epoch says (leases/epochs.py).

A promise is a successful grant or renewal: the answer's `expires_at` (plus grace, for a slot,
before it is lost). Treating the lease as expired is the server's doing, seen three ways: an end
event of the tenure (`lease_expired`, `lost`) whose `since` or time falls before the promise,
a `late` or `stalled` event before the deadline (plus half the grace, for stalled), and a
holder's call on the tenure refused `lease_lost` before the promise, by the time the holder
heard it. (A conflicting grant to another hand before the promise is the exclusion checker's.)

An epoch, when the history spans a failover: every lease held when the old primary made its
last promise (`last_promise_at`, on its clock) was moved by `shift` on the new primary, so a
promise made by then that reached past it is kept `shift` later.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

from leases.names import node_of

if TYPE_CHECKING:
    from tests.reliability.checkers import Checker, Key, Tenure

# A refusal's answer and the promise are read from two clocks of one machine (the client's and
# the database's): their readings of one instant can differ by this much.
CLOCK_SLACK = timedelta(milliseconds=10)
# Times carried through a float shift (an epoch's `shift_s`) may round by a microsecond or so.
ROUNDING = timedelta(milliseconds=1)
# Two clock readings of one statement.
SAME_STATEMENT = timedelta(milliseconds=5)
LOST_CODES = ("lease_lost",)
HOLDER_OPS = ("renew", "report", "release", "finish", "release_slot")


@dataclass(frozen=True)
class Epoch:
    last_promise_at: datetime
    started_at: datetime
    shift: timedelta

    @classmethod
    def from_row(cls, row: dict[str, Any]) -> Epoch:
        return cls(
            _aware(row["last_promise_at"]),
            _aware(row["started_at"]),
            timedelta(seconds=float(row["shift_s"])),
        )


def _aware(value: datetime | str) -> datetime:
    value = datetime.fromisoformat(value) if isinstance(value, str) else value
    return value if value.tzinfo else value.replace(tzinfo=UTC)


def shifted(
    value: datetime,
    made_at: datetime,
    epochs: Iterable[Epoch],
    ended_at: datetime | None = None,
    by: datetime | None = None,
) -> datetime:
    """A deadline promised at `made_at`, as the epochs since moved it: each epoch whose old
    primary made its last promise after this one, while the lease still had time, moved it,
    unless its tenure had ended (`ended_at`) before that epoch began. `by`: as it stood then (an
    epoch that began later had not moved it yet)."""
    for epoch in epochs:
        if by is not None and epoch.started_at > by:
            continue
        if ended_at is not None and ended_at < epoch.started_at:
            continue
        # `made_at` is the answer's `server_time`, read microseconds after the `renewed_at`
        # that the epoch's `last_promise_at` is the latest of (leases/clock.py).
        if made_at <= epoch.last_promise_at + SAME_STATEMENT and epoch.last_promise_at < value:
            value += epoch.shift
    return value


def end_of(tenure: Tenure) -> datetime | None:
    """When the event log first says the tenure ended, if it does."""
    return min((at for _, at, _ in tenure.ends), default=None)


def check_promises(checker: Checker, ops: list[dict[str, Any]]) -> None:
    """No lease treated as expired before the deadline last promised to its holder."""
    grace_s = checker.config.grace_s
    # Each tenure's promises: (when made, the deadline, as the epochs moved it).
    promised: dict[Key, list[tuple[datetime, datetime]]] = defaultdict(list)
    for now, op, key in checker.checked:
        if op["kind"] in ("finish", "release_slot", "release"):
            continue
        if op["kind"] == "report" and not op["body"]["renewed"]:
            continue
        raw = checker.lease_of(op).get("expires_at")
        if raw:
            promised[key].append((now, datetime.fromisoformat(raw)))

    def last_promise(key: Key, by: datetime) -> datetime | None:
        """The latest deadline promised by `by` (a promise made later was not yet known), as
        the epochs that had begun by then moved it."""
        end = end_of(checker.tenures[key])
        deadlines = [
            shifted(deadline, made, checker.epochs, ended_at=end, by=by)
            for made, deadline in promised.get(key, [])
            if made <= by
        ]
        return max(deadlines) if deadlines else None

    checker.stats["promises"] = len(promised)

    def grace(key: Key, fraction: float) -> timedelta:
        slot = checker.tenures[key].slot
        return timedelta(seconds=grace_s * fraction if slot else 0)

    for key in promised:
        tenure = checker.tenures[key]
        for kind, at, data in tenure.ends:
            deadline = last_promise(key, at)
            if kind not in ("lease_expired", "lost") or deadline is None:
                continue
            lost_at = deadline + grace(key, 1.0)
            since = datetime.fromisoformat(data["since"]) if data.get("since") else at
            if min(since, at) < lost_at - ROUNDING:
                checker.flag(
                    f"{kind} of {key} (since {since}, recorded {at}) before the deadline "
                    f"promised to its holder, {lost_at}"
                )
            checker.stats["expiries_after_promise"] += 1
        for kind, fraction in (("late", 0.0), ("stalled", 0.5)):
            for since in tenure.watched.get(kind, []):
                deadline = last_promise(key, since)
                if deadline is not None and since < deadline + grace(key, fraction) - ROUNDING:
                    checker.flag(
                        f"{kind} recorded for {key} since {since}, before the deadline "
                        f"promised to its holder, {deadline}"
                    )
    for op in ops:
        if op["outcome"] != "fail" or op.get("code") not in LOST_CODES:
            continue
        if op["kind"] not in HOLDER_OPS or op.get("fence") is None or not op.get("resource"):
            continue
        key = (node_of(op["resource"]), op["fence"])
        heard = datetime.fromtimestamp(op["complete"], tz=UTC)
        deadline = last_promise(key, heard)
        if deadline is None:
            continue
        lost_at = deadline + grace(key, 1.0)
        released = checker.tenures[key].released_at()
        if released is not None and released <= heard:
            continue  # broken or ended by its holder: not an expiry
        checker.stats["lost_refusals_checked"] += 1
        if heard < lost_at - CLOCK_SLACK:
            checker.flag(
                f"{op['kind']} by client {op['c']} on {key} refused lease_lost at {heard}, "
                f"before the deadline promised to its holder, {lost_at}"
            )
