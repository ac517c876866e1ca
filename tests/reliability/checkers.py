"""The history harness's checkers (tests/reliability/harness.py records what they read): every
promise of the lease, judged by the database's times over the clients' history, the fenced
store's log and the server's whole event log.

A tenure is one grant on one node of the tree (`leases.names.node_of`: `src/auth/` and `src/auth`
are one node), named by `(node, fence)`: each grant on a node, exclusive or shared, takes the
node's next fence, so the pair names one tenure whatever the spelling. The checkers:

1. Events: one grant event per tenure and one end (released, finished, broken, expired or
   lost) per tenure; a break's per-tenure events (`data.broken_fence`) end the tenures they
   name; late and stalled at most once per episode (a second one only after a renewal brought
   the holder back); each reported grant and release matched by its event.
2. Successes: every grant reported a live lease with a full TTL ahead of it, at the time its
   event says; no renewal, check or release succeeded on a tenure after it ended or was lost,
   or for a hand that did not hold it; a pool's grant names its pool and member consistently.
3. Exclusion on the tree: no exclusive tenure overlapped any other hand's tenure on its node,
   an ancestor or a descendant; shared tenures overlapped only shared ones (of other hands: a
   hand's own tenures never conflict, but a node has one tenure of a hand at a time); no pool
   member was held by two tenures at once; no slot either.
4. Fences only increased per node, in time order (a break counted once, however many tenures
   it ended); a break left no earlier tenure of its node standing.
5. Stale fences: no success, and no write the store applied, after a fence change that ended
   its tenure's claim to be current (any later fence of the node, for an exclusive tenure; an
   exclusive grant or a break, for a shared one, which stays current while it is held:
   `leases.services.lease_check`), nor outside its tenure; the store applied each node's writes
   in fence order (only writes of two shared tenures may cross).
6. FIFO (the fair queue, `leases.queue`): of two waiters on conflicting requests (one line of
   the tree, modes that conflict, other hands; or one pool, should a pool's grants carry
   `queued_at`) whose clients were not paused while they waited, the one that joined the queue
   first (`queued_at`, the database's time; joins within `QUEUE_TIE_S` are simultaneous) was
   granted no later.
7. No call answered 5xx.
8. Promises (tests/reliability/deadlines.py): no lease treated as expired before the deadline
   last promised to its holder; across a failover, as the new primary's epoch moved it.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from leases.names import node_of, overlaps, top_of
from tests.reliability.deadlines import Epoch, check_promises, end_of, shifted

if TYPE_CHECKING:
    from tests.reliability.harness import Config

GRANT_KINDS = ("lease_acquired", "claimed")
END_KINDS = ("lease_released", "released", "finished", "lease_expired", "lost", "lease_broken")
WATCHED_KINDS = ("late", "stalled")
EXCLUSIVE, SHARED, BREAK = "exclusive", "shared", "break"
GRANT_OPS = ("claim", "acquire", "pool_acquire")
RELEASE_OPS = ("finish", "release_slot", "release")
POOL_PREFIX = "pool/"
# A pause that ends this close to a call's start may still have held it up.
PAUSE_MARGIN_S = 0.05
MAX_ANOMALIES = 200
# Two calls that joined the queue this close together joined at once: the queue's order is its
# waiters' ids (`leases.queue`), and two concurrent joins may take their ids and read the clock
# for `queued_at` in opposite orders.
QUEUE_TIE_S = 0.005
Key = tuple[str, int]  # (node, fence): one tenure


def ts(value: str | None) -> datetime | None:
    return datetime.fromisoformat(value) if value else None


@dataclass
class Tenure:
    resource: str
    fence: int
    holder: str
    start: datetime
    slot: bool
    length: timedelta  # from the grant to its first deadline, plus grace
    mode: str = EXCLUSIVE
    pool: str | None = None
    member: str | None = None
    ends: list[tuple[str, datetime, dict[str, Any]]] = field(default_factory=list)
    # late and stalled: the `since` of each event of that kind
    watched: dict[str, list[datetime]] = field(default_factory=lambda: defaultdict(list))
    renewed_at: list[datetime] = field(default_factory=list)  # successful renewals
    lost_at: datetime = field(init=False)  # the latest deadline (+ grace) known

    def __post_init__(self) -> None:
        self.lost_at = self.start + self.length

    @property
    def node(self) -> str:
        return node_of(self.resource)

    @property
    def key(self) -> Key:
        return (self.node, self.fence)

    def released_at(self) -> datetime | None:
        """When the holder or a supervisor ended it (not by expiry)."""
        times = [at for kind, at, _ in self.ends if kind not in ("lease_expired", "lost")]
        return min(times) if times else None

    def end(self) -> datetime:
        """The end of its validity: release or break, else the latest known loss time (from a
        reported deadline, or the `since` the sweep recorded)."""
        released = self.released_at()
        if released is not None:
            return released
        since = [ts(data["since"]) for kind, _, data in self.ends if data.get("since")]
        return max([self.lost_at, *(t for t in since if t is not None)])

    def describe(self) -> str:
        return f"{self.node} fence {self.fence} ({self.mode}, {self.holder})"


@dataclass(frozen=True)
class Bump:
    """A change of a node's fence: a grant in a mode, or a break."""

    fence: int
    at: datetime
    kind: str  # exclusive, shared, or break

    def supersedes(self, tenure: Tenure) -> bool:
        """Whether this change ends `tenure`'s claim to be current: any later fence of its node
        ends an exclusive tenure's; a shared tenure stays current beside later shared grants,
        until an exclusive grant or a break."""
        return self.fence > tenure.fence and (tenure.mode == EXCLUSIVE or self.kind != SHARED)


def conflicting(one: Tenure, other: Tenure) -> bool:
    """Whether two tenures may not overlap in time: on one node unless both are shared tenures
    of different hands; on one line of the tree (not slots) unless they are one hand's or both
    are shared."""
    if one.node == other.node:
        return not (one.mode == SHARED == other.mode and one.holder != other.holder)
    if one.slot or other.slot or not overlaps(one.node, other.node):
        return False
    return one.holder != other.holder and not one.mode == SHARED == other.mode


@dataclass
class Waiter:
    """A grant after waiting in the queue, as its client recorded it."""

    client: int
    hand: str
    node: str  # the requested node; for a pool, `pool/<name>`
    mode: str
    pool: str | None
    queued_at: datetime
    granted_at: datetime
    fence: int

    def conflicts_with(self, other: Waiter) -> bool:
        if self.hand == other.hand:
            return False
        if self.pool is not None or other.pool is not None:
            return self.pool == other.pool
        return overlaps(self.node, other.node) and not self.mode == SHARED == other.mode


class Checker:
    """One pass over a history: `check` runs each checker in turn and fills `anomalies`."""

    def __init__(self, config: Config, hands: list[str], epochs: Iterable[Epoch] = ()) -> None:
        self.config = config
        self.epochs = sorted(epochs, key=lambda e: e.started_at)
        self.hand_of = dict(enumerate(hands))
        self.anomalies: list[str] = []
        self.tenures: dict[Key, Tenure] = {}
        self.bumps: dict[str, list[Bump]] = defaultdict(list)  # node -> every fence change
        self.breaks: dict[Key, datetime] = {}  # (node, the break's fence) -> when
        self.uncertain: set[Key] = set()  # tenures with a renewal of unknown outcome
        self.checked: list[tuple[datetime, dict[str, Any], Key]] = []  # successes on a tenure
        self.stats: Counter[str] = Counter()

    def flag(self, message: str) -> None:
        if len(self.anomalies) < MAX_ANOMALIES:
            self.anomalies.append(message)

    # 1. Tenures from the event log -------------------------------------------------------------

    def read_events(self, events: list[dict[str, Any]]) -> None:
        for event in sorted(events, key=lambda e: e["id"]):
            node = node_of(event["resource"])
            key = (node, event["fence"])
            at = ts(event["at"])
            assert at is not None
            kind, data = event["kind"], event.get("data") or {}
            if kind in GRANT_KINDS:
                if key in self.tenures:
                    self.flag(f"two grant events for {key}")
                    continue
                slot = kind == "claimed"
                length = self.config.slot_lost_after_s if slot else self.config.ttl_s
                self.tenures[key] = Tenure(
                    event["resource"],
                    event["fence"],
                    event["hand"],
                    at,
                    slot=slot,
                    length=timedelta(seconds=length),
                    mode=data.get("mode") or EXCLUSIVE,
                    pool=data.get("pool"),
                    member=data.get("member"),
                )
                # Its end, if any, is read later: the estimate moves with every epoch.
                self.tenures[key].lost_at = shifted(self.tenures[key].lost_at, at, self.epochs)
                self.bumps[node].append(Bump(event["fence"], at, data.get("mode") or EXCLUSIVE))
            elif kind == "lease_broken":
                # One break of a node writes one event per tenure it ended, each with the
                # node's new fence: one fence change.
                if key not in self.breaks:
                    self.breaks[key] = at
                    self.bumps[node].append(Bump(event["fence"], at, BREAK))
                elif self.breaks[key] != at:
                    self.flag(f"two breaks of {node} took fence {event['fence']}")
                broken = (node, data.get("broken_fence", event["fence"] - 1))
                tenure = self.tenures.get(broken)
                if tenure is None:
                    self.flag(f"a break of {broken} with no grant event")
                    continue
                if tenure.holder != event["hand"]:
                    self.flag(
                        f"the break of {broken} was recorded for {event['hand']}, "
                        f"held by {tenure.holder}"
                    )
                tenure.ends.append(("lease_broken", at, data))
            elif kind in END_KINDS:
                if key not in self.tenures:
                    self.flag(f"{kind} event for {key} with no grant event")
                    continue
                self.tenures[key].ends.append((kind, at, data))
            elif key in self.tenures:
                since = ts(data.get("since")) or at
                self.tenures[key].watched[kind].append(since)

    # 2. Each recorded success against its tenure, in the database's time order ----------------

    @staticmethod
    def lease_of(op: dict[str, Any]) -> dict[str, Any]:
        body = op["body"]
        if op["kind"] == "report":
            return body["attempt"]["lease"]
        if op["kind"] in ("claim", *RELEASE_OPS):
            return body["lease"]
        return body

    def read_successes(self, ops: list[dict[str, Any]]) -> None:
        for op in ops:
            fence = op.get("fence", op.get("held_fence"))
            if (
                op["outcome"] == "info"
                and op["kind"] in ("renew", "report", "acquire", "pool_acquire")
                and fence is not None
                and op.get("resource")
            ):
                self.uncertain.add((node_of(op["resource"]), fence))
            if op["status"] is not None and op["status"] >= 500:
                self.flag(f"{op['kind']} answered {op['status']}: {op.get('code')}")
        successes = []
        for op in ops:
            if op["outcome"] != "ok" or op["kind"] in ("write", "break"):
                continue
            lease = self.lease_of(op)
            granting = op["kind"] in GRANT_OPS
            fence = op["body"]["fence"] if granting else op["fence"]
            resource = (
                lease["resource"] if op["kind"] in ("claim", "pool_acquire") else op["resource"]
            )
            if op["kind"] == "pool_acquire":
                self.pool_answer(op)
            now = ts(lease["server_time"])
            assert now is not None
            successes.append((now, op, (node_of(resource), fence), lease))
        successes.sort(key=lambda s: s[0])

        grace = {True: timedelta(seconds=self.config.grace_s), False: timedelta(0)}
        seen: set[Key] = set()
        for now, op, key, lease in successes:
            tenure = self.tenures.get(key)
            if tenure is None:
                self.flag(
                    f"{op['kind']} by client {op['c']} succeeded on {key}, which has no grant event"
                )
                continue
            self.checked.append((now, op, key))
            if tenure.holder != self.hand_of.get(op["c"]):
                self.flag(
                    f"{op['kind']} by client {op['c']} succeeded on {key} held by {tenure.holder}"
                )
            deadline = ts(lease.get("expires_at"))
            if key not in seen:
                seen.add(key)
                if op["kind"] not in GRANT_OPS:
                    self.flag(f"{op['kind']} on {key} succeeded before any reported grant of it")
                else:
                    self.stats["grants_reported"] += 1
                    self.grant(op, tenure, lease, now, deadline)
                    # The deadline the grant reported replaces the estimate from its event's
                    # time: the statement may read the clock for the deadline milliseconds
                    # before the stamp its event carries (leases/clock.py), and a takeover
                    # right at the reported end is no overlap.
                    if deadline is not None:
                        promised = shifted(deadline, now, self.epochs, end_of(tenure))
                        tenure.lost_at = promised + grace[tenure.slot]
                    continue
            if op["kind"] in RELEASE_OPS:
                ended = [
                    at
                    for kind, at, _ in tenure.ends
                    if kind in ("lease_released", "released", "finished")
                ]
                if len(ended) != 1:
                    self.flag(f"{op['kind']} of {key} succeeded with {len(ended)} matching events")
                continue
            if op["kind"] == "report" and not op["body"]["renewed"]:
                continue
            # A renewal succeeds only while its tenure is alive.
            self.stats["renewals"] += 1
            tenure.renewed_at.append(now)
            if now > tenure.lost_at and key not in self.uncertain:
                self.flag(f"{op['kind']} on {key} renewed at {now}, lost since {tenure.lost_at}")
            if deadline is not None:
                promised = shifted(deadline, now, self.epochs, end_of(tenure))
                tenure.lost_at = max(tenure.lost_at, promised + grace[tenure.slot])
        for now, op, key in self.checked:
            released = self.tenures[key].released_at()
            if released is not None and now > released:
                self.flag(f"{op['kind']} on {key} at {now} after it ended at {released}")

    def grant(
        self,
        op: dict[str, Any],
        tenure: Tenure,
        lease: dict[str, Any],
        now: datetime,
        deadline: datetime | None,
    ) -> None:
        """The grant: live, a full TTL ahead of the statement that made it, never an expired
        lease (however long a wait_s held the request), at the time its event says."""
        acquired = ts(lease.get("acquired_at") or lease.get("claimed_at")) or ts(
            op["body"].get("claimed_at")
        )
        length = self.config.interval_s if tenure.slot else self.config.ttl_s
        state = op["body"]["state"] if op["kind"] == "claim" else lease["state"]
        key = tenure.key
        if acquired is None or not timedelta(0) <= tenure.start - acquired < timedelta(seconds=1):
            self.flag(
                f"grant of {key} reported acquired at {acquired}, its event says {tenure.start}"
            )
        # The deadline is the TTL after the statement's own clock read; the stamp reported can
        # be read a little later in the same statement (clock_timestamp()).
        elif (
            state != "live"
            or deadline is None
            or not length - 1.0 < (deadline - acquired).total_seconds() <= length + 0.005
            or deadline <= now
            or not lease["expires_in_s"] > 0
        ):
            self.flag(f"grant of {key} reported a lease that is not live for a full TTL: {lease}")
        else:
            tenure.start = min(tenure.start, acquired)
        mode = lease.get("mode") or EXCLUSIVE
        if op["kind"] == "acquire" and mode != tenure.mode:
            self.flag(f"grant of {key} answered mode {mode}, its event says {tenure.mode}")
        if op["kind"] == "pool_acquire" and (
            tenure.pool != op["body"].get("pool") or tenure.member != op["body"].get("member")
        ):
            self.flag(
                f"pool grant of {key} answered {op['body'].get('pool')}/"
                f"{op['body'].get('member')}, its event says {tenure.pool}/{tenure.member}"
            )

    def pool_answer(self, op: dict[str, Any]) -> None:
        """A pool's grant names the pool asked for and a member whose lease it is."""
        body = op["body"]
        if body.get("pool") != op.get("pool") or body.get("resource") != (
            f"{POOL_PREFIX}{body.get('pool')}/{body.get('member')}"
        ):
            self.flag(
                f"pool_acquire of {op.get('pool')} answered pool {body.get('pool')}, "
                f"member {body.get('member')}, resource {body.get('resource')}"
            )

    # 3. Events once each, late and stalled once per episode -----------------------------------

    def check_ends(self) -> None:
        for tenure in self.tenures.values():
            kinds = [kind for kind, _, _ in tenure.ends]
            if len(kinds) != 1:
                self.flag(f"tenure {tenure.key} ended {len(kinds)} times: {kinds}")
            # A late or stalled holder that reports in is live again (rule 4) and can fall
            # behind again: one event per episode, so two events of a kind need a renewal
            # between them.
            for kind, sinces in tenure.watched.items():
                sinces.sort()
                for first, second in zip(sinces, sinces[1:], strict=False):
                    if tenure.key in self.uncertain:
                        continue
                    if any(first < renewed < second for renewed in tenure.renewed_at):
                        self.stats["behind_again"] += 1
                    else:
                        self.flag(
                            f"{kind} recorded twice for {tenure.key} with no renewal "
                            f"between (since {first} and {second})"
                        )

    # 4. Exclusion on the tree, in pools and slots ---------------------------------------------

    def check_exclusion(self) -> None:
        groups: dict[str, list[Tenure]] = defaultdict(list)
        for tenure in self.tenures.values():
            # Every node that can conflict with a node shares its first segment; a slot is
            # alone on its node.
            groups[tenure.node if tenure.slot else top_of(tenure.node)].append(tenure)
        for group in groups.values():
            group.sort(key=lambda t: t.start)
            ends = {id(t): t.end() for t in group}
            active: list[Tenure] = []  # earlier tenures still valid at the current start
            for i, tenure in enumerate(group):
                active = [e for e in active if ends[id(e)] > tenure.start]
                for earlier in active:
                    if conflicting(earlier, tenure):
                        self.flag(self.overlap(earlier, tenure, ends[id(earlier)]))
                    elif earlier.holder != tenure.holder and overlaps(earlier.node, tenure.node):
                        self.stats["shared_overlaps"] += 1  # both shared: allowed, and seen
                # The handover checked: the nearest earlier tenure this one may not overlap.
                for earlier in reversed(group[max(0, i - 200) : i]):
                    if conflicting(earlier, tenure):
                        self.stats["overlaps_checked"] += 1
                        break
                active.append(tenure)

    @staticmethod
    def overlap(before: Tenure, after: Tenure, end: datetime) -> str:
        if after.node.startswith(POOL_PREFIX) and after.node == before.node:
            return (
                f"pool {after.pool} member {after.member} held by two tenures at once: fence "
                f"{after.fence} ({after.holder}) granted at {after.start} while fence "
                f"{before.fence} ({before.holder}) held it until {end}"
            )
        if after.node == before.node:
            return (
                f"{after.node}: fence {after.fence} ({after.mode}, {after.holder}) granted at "
                f"{after.start} while fence {before.fence} ({before.mode}, {before.holder}) "
                f"was valid until {end}"
            )
        return (
            f"{after.describe()} granted at {after.start} while {before.describe()} on its "
            f"line of the tree was valid until {end}"
        )

    # 5. Fences per node, and breaks -----------------------------------------------------------

    def check_fences(self) -> None:
        for node, changes in self.bumps.items():
            fences = [b.fence for b in sorted(changes, key=lambda b: b.at)]
            if fences != sorted(set(fences)):
                self.flag(f"fences of {node} did not strictly increase in time order: {fences}")
        by_node: dict[str, list[Tenure]] = defaultdict(list)
        for tenure in self.tenures.values():
            by_node[tenure.node].append(tenure)
        for (node, fence), at in self.breaks.items():
            for tenure in by_node[node]:
                if tenure.fence < fence and tenure.start < at and tenure.end() > at:
                    self.flag(
                        f"the break of {node} at {at} (fence {fence}) left "
                        f"{tenure.describe()} standing until {tenure.end()}"
                    )

    # 6. Stale fences ---------------------------------------------------------------------------

    def superseded(self, tenure: Tenure, at: datetime) -> Bump | None:
        """The first change of its node's fence, by `at`, that ended `tenure`'s claim."""
        newer = [b for b in self.bumps[tenure.node] if b.at <= at and b.supersedes(tenure)]
        return min(newer, key=lambda b: b.fence) if newer else None

    def check_stale(self, store_log: list[dict[str, Any]]) -> None:
        for now, op, key in self.checked:
            bump = self.superseded(self.tenures[key], now)
            if bump is not None:
                self.flag(
                    f"{op['kind']} with fence {key[1]} on {key[0]} succeeded at {now} "
                    f"after fence {bump.fence} ({bump.kind})"
                )
        # The last applied fence per node, of exclusive tenures and of any.
        last: dict[str, dict[str, int]] = defaultdict(lambda: {EXCLUSIVE: 0, "any": 0})
        for entry in store_log:
            if not entry["applied"]:
                self.stats["writes_refused"] += 1
                continue
            self.stats["writes_applied"] += 1
            key, at = (node_of(entry["resource"]), entry["fence"]), ts(entry["checked_at"])
            assert at is not None
            tenure = self.tenures.get(key)
            bump = self.superseded(tenure, at) if tenure is not None else None
            if bump is not None:
                self.flag(
                    f"store applied a write with fence {key} checked at {at} after fence "
                    f"{bump.fence} ({bump.kind})"
                )
            elif tenure is None or at < tenure.start or at > tenure.end():
                self.flag(f"store applied a write on {key} checked at {at} outside its tenure")
            if tenure is None:
                continue
            # Writes land in check order: a fence below one already applied only for a shared
            # tenure, after other shared tenures' writes.
            seen = last[key[0]]
            if key[1] < (seen[EXCLUSIVE] if tenure.mode == SHARED else seen["any"]):
                self.flag(
                    f"store applied fences out of order on {key[0]}: {key[1]} "
                    f"({tenure.mode}) after {seen}"
                )
            seen["any"] = max(seen["any"], key[1])
            if tenure.mode == EXCLUSIVE:
                seen[EXCLUSIVE] = max(seen[EXCLUSIVE], key[1])

    # 7. FIFO among waiters that stayed ---------------------------------------------------------

    def check_fifo(
        self, ops: list[dict[str, Any]], paused: dict[int, list[tuple[float, float]]]
    ) -> None:
        waiters = []
        for op in ops:
            if op["outcome"] != "ok" or op["kind"] not in ("acquire", "pool_acquire"):
                continue
            queued, granted = ts(op["body"].get("queued_at")), ts(op["body"].get("acquired_at"))
            if queued is None or granted is None:
                continue
            self.stats["waiters_granted"] += 1
            start, stop = op["invoke"] - PAUSE_MARGIN_S, op["complete"] + PAUSE_MARGIN_S
            if any(a < stop and b > start for a, b in paused.get(op["c"], [])):
                continue  # paused while it waited: it may have lost its place
            pool = op.get("pool") if op["kind"] == "pool_acquire" else None
            waiters.append(
                Waiter(
                    op["c"],
                    self.hand_of.get(op["c"], str(op["c"])),
                    f"{POOL_PREFIX}{pool}" if pool else node_of(op["resource"]),
                    op.get("mode") or op["body"].get("mode") or EXCLUSIVE,
                    pool,
                    queued,
                    granted,
                    op["body"]["fence"],
                )
            )
        self.stats["waiters_stayed"] = len(waiters)
        waiters.sort(key=lambda w: w.queued_at)
        for i, first in enumerate(waiters):
            for later in waiters[i + 1 :]:
                if later.queued_at >= first.granted_at:
                    break  # it joined once the first was served: no order to keep
                tie = (later.queued_at - first.queued_at).total_seconds() < QUEUE_TIE_S
                if tie or not first.conflicts_with(later):
                    continue
                self.stats["fifo_pairs"] += 1
                if later.granted_at < first.granted_at:
                    self.flag(
                        f"FIFO: {first.node} ({first.mode}) for {first.hand} queued at "
                        f"{first.queued_at}, before {later.node} ({later.mode}) for "
                        f"{later.hand} at {later.queued_at}, was granted at "
                        f"{first.granted_at}, after it ({later.granted_at})"
                    )


def paused_clients(
    log: Iterable[dict[str, Any]], pids: dict[int, int]
) -> dict[int, list[tuple[float, float]]]:
    """Each client's SIGSTOP pauses (the freezers' log), by client index."""
    paused: dict[int, list[tuple[float, float]]] = defaultdict(list)
    for entry in log:
        if entry["pid"] in pids:
            paused[pids[entry["pid"]]].append((entry["from"], entry["to"]))
    return dict(paused)


def check(
    history: list[dict[str, Any]],
    store_log: list[dict[str, Any]],
    events: list[dict[str, Any]],
    config: Config,
    hands: list[str],
    paused: dict[int, list[tuple[float, float]]] | None = None,
    epochs: Iterable[Epoch] = (),
) -> dict[str, Any]:
    """Every checker over one history; the report's `anomalies` is empty when all held."""
    checker = Checker(config, hands, epochs)
    ops = [op for op in history if "outcome" in op]
    checker.read_events(events)
    checker.read_successes(ops)
    checker.check_ends()
    checker.check_exclusion()
    checker.check_fences()
    checker.check_stale(store_log)
    checker.check_fifo(ops, paused or {})
    check_promises(checker, ops)
    outcomes = Counter(op["outcome"] for op in ops)
    codes = Counter(op.get("code") for op in ops if op["outcome"] == "fail")
    modes = Counter(t.mode for t in checker.tenures.values() if not t.slot)
    stats = checker.stats
    return {
        "anomalies": checker.anomalies,
        "operations": len(ops),
        "outcomes": dict(outcomes),
        "refusal_codes": dict(codes),
        "tenures": len(checker.tenures),
        "tenures_by_mode": dict(modes),
        "tenures_by_top": dict(
            Counter(top_of(t.node) for t in checker.tenures.values() if not t.slot)
        ),
        "pool_tenures": sum(1 for t in checker.tenures.values() if t.pool),
        "breaks": len(checker.breaks),
        "grants_reported": stats["grants_reported"],
        "renewals": stats["renewals"],
        "overlaps_checked": stats["overlaps_checked"],
        "shared_overlaps": stats["shared_overlaps"],
        "behind_again": stats["behind_again"],
        "writes_applied": stats["writes_applied"],
        "writes_refused": stats["writes_refused"],
        "waiters_granted": stats["waiters_granted"],
        "waiters_stayed": stats["waiters_stayed"],
        "fifo_pairs": stats["fifo_pairs"],
        "events": len(events),
        "uncertain_tenures": len(checker.uncertain),
        "promises": stats["promises"],
        "expiries_after_promise": stats["expiries_after_promise"],
        "lost_refusals_checked": stats["lost_refusals_checked"],
    }
