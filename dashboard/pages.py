"""Page-level reads for the supervisors' dashboard.

Every page asks the database for the time once (`db_now()`) and computes every state from stored
timestamps at that instant (DESIGN rule 3). The board's counts and its state filter run in SQL
with the same thresholds as `leases.state.lease_state`, so 10,000 attempts cost the same handful
of queries as ten: one aggregate for the counts and one page of rows. Nothing here writes.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from django.db import connection
from django.db.models import (
    Case,
    Count,
    DateTimeField,
    Prefetch,
    Q,
    QuerySet,
    Value,
    When,
)

from apikit.errors import NotFound
from evidence.models import Evidence
from fleet.attempts.idle import is_idle
from fleet.attempts.selectors import (
    ATTEMPT_STATES,
    attempt_state,
    last_report_at,
    tenure_state_expression,
)
from fleet.costs.spend import budget_notice_now
from fleet.models import Attempt, Report, ReportKind, Run, Slot, SlotState, WorkPackage
from fleet.plan.selectors import slot_state, work_package_get
from hands import keys as keys_rule
from hands.models import Hand, HandKey, Lane, Membership, Role
from hands.selectors import lane_get
from leases.clock import db_now, now_sql
from leases.engine import LeaseSnapshot
from leases.models import Event, KeyRecord, KeyTally, Refusal
from leases.state import next_threshold

# The order the board counts and legends use.
STATES = ATTEMPT_STATES
ROLE_RANK = {Role.VIEWER: 0, Role.SUPERVISOR: 1, Role.ADMIN: 2}
BOARD_PAGE_SIZE = 100
LIST_PAGE_SIZE = 50
# Ended attempts stay on the board this long, so a finish or a loss is seen, not just vanishes
# (the run's and the hand's pages keep the whole history).
RECENT_ENDED_S = 600
# Attempts drawn on a run's or a hand's timeline, and the reports marked on each bar (the latest
# progress, blockers and notes; heartbeats are the bar's phases, not marks).
TIMELINE_ATTEMPTS = 50
MARKS_PER_ATTEMPT = 60
MARKED_REPORTS = (ReportKind.PROGRESS, ReportKind.BLOCKER, ReportKind.NOTE)
# The board's chart shows the last hour of its attempts' tenures.
BOARD_CHART_WINDOW_S = 3600


# --- Memberships ---------------------------------------------------------------------------------


def memberships_for(user: Any) -> list[Membership]:
    """The user's workspaces with their role, for the switcher (one query)."""
    return list(
        Membership.objects.filter(user=user).select_related("workspace").order_by("workspace__name")
    )


def membership_pick(memberships: Sequence[Membership], workspace_id: object) -> Membership | None:
    """The membership for the session's workspace, else the user's first (the oldest: a user's
    own workspace, made before any they were added to, such as `scripts/run`'s `demo`)."""
    for membership in memberships:
        if membership.workspace_id == workspace_id:
            return membership
    return min(memberships, key=lambda membership: membership.pk, default=None)


def role_allows(role: str, minimum: str) -> bool:
    return ROLE_RANK[Role(role)] >= ROLE_RANK[Role(minimum)]


# --- The attempt state in SQL --------------------------------------------------------------------


def _at(now: datetime) -> Value:
    """The page's database time as a parameter."""
    return Value(now, output_field=DateTimeField())


def attempt_state_expression(now: datetime) -> Case:
    """`fleet.attempts.selectors.tenure_state` as SQL, at the page's time `now`."""
    return tenure_state_expression(_at(now))


def _state_counts(queryset: QuerySet[Attempt], now: datetime) -> dict[str, int]:
    rows = (
        queryset.annotate(board_state=attempt_state_expression(now))
        .values("board_state")
        .annotate(n=Count("id"))
        .order_by()
    )
    counts = dict.fromkeys(STATES, 0)
    for row in rows:
        counts[row["board_state"]] = counts.get(row["board_state"], 0) + row["n"]
    return counts


# --- Rows ----------------------------------------------------------------------------------------

NEXT_LABELS = {"live": "late in", "late": "stalled in", "stalled": "lost in"}


@dataclass(frozen=True)
class AttemptRow:
    """An attempt as a page shows it, at the page's database time."""

    attempt: Attempt
    lease: LeaseSnapshot
    state: str
    now: datetime

    @property
    def last_seen_at(self) -> datetime:
        return last_report_at(self.attempt, self.lease) or self.attempt.claimed_at

    @property
    def since_s(self) -> float:
        return max((self.now - self.last_seen_at).total_seconds(), 0.0)

    @property
    def next_at(self) -> datetime | None:
        """The instant the state changes next (late, stalled, lost), while the tenure is open."""
        if self.state not in NEXT_LABELS or self.lease.deadline is None:
            return None
        return next_threshold(
            deadline=self.lease.deadline, grace_s=self.lease.grace_s, now=self.now
        )

    @property
    def next_label(self) -> str:
        if self.lease.grace_s <= 0 and self.state == "live":
            return "lost in"
        return NEXT_LABELS.get(self.state, "")

    @property
    def next_in_s(self) -> float | None:
        instant = self.next_at
        return None if instant is None else max((instant - self.now).total_seconds(), 0.0)

    @property
    def drawn_end(self) -> datetime | None:
        """Where a timeline bar stops: the recorded end, else the instant a lost tenure was lost
        (before any sweep has recorded it), else None (open: up to now)."""
        if self.attempt.ended_at:
            return self.attempt.ended_at
        if self.state != "lost":
            return None
        limits = self.lease.thresholds
        if self.lease.fence == self.attempt.fence and limits is not None:
            return min(limits.lost_at, self.now)
        return self.last_seen_at

    @property
    def is_open(self) -> bool:
        return self.state in NEXT_LABELS

    @property
    def idle(self) -> bool:  # fleet/attempts/idle.py
        a = self.attempt
        return is_idle(
            state=self.state, progress_timeout_s=a.progress_timeout_s,
            last_progress_at=a.last_progress_at, claimed_at=a.claimed_at, now=self.now,
        )  # fmt: skip

    @property
    def budget(self) -> Any:
        return budget_notice_now(self.attempt.budget_notice, self.attempt.budget_until, self.now)

    def fingerprint_part(self) -> tuple[Any, ...]:
        a = self.attempt
        return (
            a.pk,
            self.state,
            a.directive,
            a.end,
            self.last_seen_at,
            a.progress_percent,
            self.idle,
            bool(self.budget),
            self.lease.fence,
            self.lease.deadline,
            a.run.state,  # the run's badge: done by its last finish, reopened by a supervisor
            # Its evidence's grades: an attestation after the finish regrades them.
            tuple(item.grade for item in a.evidence.all()),
        )


def attempt_rows(attempts: Iterable[Attempt], now: datetime) -> list[AttemptRow]:
    rows = []
    for attempt in attempts:
        lease = LeaseSnapshot.from_model(attempt.lease, now)
        rows.append(AttemptRow(attempt, lease, attempt_state(attempt, lease), now))
    return rows


def _evidence_prefetch() -> Prefetch:
    """An attempt's evidence with the attestation that graded it (one query per page)."""
    return Prefetch(
        "evidence", queryset=Evidence.objects.select_related("attestation").order_by("pk")
    )


def _attempts_for_pages() -> QuerySet[Attempt]:
    return Attempt.objects.prefetch_related(_evidence_prefetch()).select_related(
        "lease", "hand", "run", "run__work_package", "lane", "slot"
    )


# --- The board -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class BoardFilters:
    lane: str = ""
    state: str = ""
    hand: str = ""
    page: int = 1

    @classmethod
    def read(cls, params: Mapping[str, str], *, page: int = 1) -> BoardFilters:
        """The board's filters from a query string: the board's table and its chart read them
        here, so the two always show the same attempts."""
        state = params.get("state", "")
        return cls(
            lane=params.get("lane", "")[:100],
            state=state if state in STATES else "",
            hand=params.get("hand", "")[:200],
            page=page,
        )

    def query(self, **changes: Any) -> dict[str, Any]:
        values = {"lane": self.lane, "state": self.state, "hand": self.hand, "page": self.page}
        values.update(changes)
        return {k: v for k, v in values.items() if v and not (k == "page" and v == 1)}


@dataclass
class RunGroup:
    run: Run
    rows: list[AttemptRow] = field(default_factory=list)


@dataclass
class LaneGroup:
    lane: Lane
    runs: list[RunGroup] = field(default_factory=list)


@dataclass(frozen=True)
class Board:
    now: datetime
    filters: BoardFilters
    counts: dict[str, int]
    total: int
    groups: list[LaneGroup]
    rows: list[AttemptRow]
    pages: int
    lanes: list[Lane]

    @property
    def fingerprint(self) -> str:
        """What the board shows, minus the clocks the browser ticks itself: equal fingerprints
        mean a poll has nothing new to send."""
        parts = (
            self.filters,
            sorted(self.counts.items()),
            self.pages,
            [row.fingerprint_part() for row in self.rows],
        )
        return hashlib.sha256(repr(parts).encode()).hexdigest()[:20]


def _board_base(workspace_id: int, now: datetime, filters: BoardFilters) -> QuerySet[Attempt]:
    recent = now - timedelta(seconds=RECENT_ENDED_S)
    queryset = Attempt.objects.filter(workspace_id=workspace_id).filter(
        Q(end__isnull=True) | Q(ended_at__gte=recent)
    )
    if filters.lane:
        queryset = queryset.filter(lane__slug=filters.lane)
    if filters.hand:
        queryset = queryset.filter(hand__name=filters.hand)
    return queryset


def _group(rows: list[AttemptRow]) -> list[LaneGroup]:
    """Rows arrive ordered by lane and run; keep that order in the groups."""
    groups: list[LaneGroup] = []
    for row in rows:
        attempt = row.attempt
        if not groups or groups[-1].lane.pk != attempt.lane_id:
            groups.append(LaneGroup(attempt.lane))
        runs = groups[-1].runs
        if not runs or runs[-1].run.pk != attempt.run_id:
            runs.append(RunGroup(attempt.run))
        runs[-1].rows.append(row)
    return groups


# Within a run: open tenures first, by slot; then the recently ended, newest first.
BOARD_ORDER = ("lane__slug", "lane_id", "run_id", "ended", "slot__index", "-id")


def _board_selected(workspace_id: int, now: datetime, filters: BoardFilters) -> QuerySet[Attempt]:
    """The attempts the board's filters select (lane, hand, and the state at `now`)."""
    queryset = _board_base(workspace_id, now, filters).annotate(
        board_state=attempt_state_expression(now)
    )
    if filters.state:
        queryset = queryset.filter(board_state=filters.state)
    return queryset


def board(*, workspace_id: int, filters: BoardFilters, page_size: int = BOARD_PAGE_SIZE) -> Board:
    """The fleet board: counts by state (SQL aggregate) and one page of attempts.

    Queries: the time, the lanes (for the filter), the counts, the page of rows, their evidence.
    """
    now = db_now()
    lanes = list(Lane.objects.filter(workspace_id=workspace_id).order_by("slug"))
    base = _board_base(workspace_id, now, filters)
    counts = _state_counts(base, now)
    total = counts.get(filters.state, 0) if filters.state else sum(counts.values())
    pages = max(1, -(-total // page_size))
    page = min(max(filters.page, 1), pages)
    queryset = _board_selected(workspace_id, now, filters)
    offset = (page - 1) * page_size
    attempts = (
        queryset.select_related("lease", "hand", "run", "run__work_package", "lane", "slot")
        .prefetch_related(_evidence_prefetch())
        .annotate(ended=Case(When(end__isnull=True, then=Value(0)), default=Value(1)))
        .order_by(*BOARD_ORDER)
    )[offset : offset + page_size]
    rows = attempt_rows(attempts, now)
    filters = BoardFilters(filters.lane, filters.state, filters.hand, page)
    return Board(now, filters, counts, total, _group(rows), rows, pages, lanes)


# --- The board's chart ---------------------------------------------------------------------------


@dataclass(frozen=True)
class BoardChart:
    """The board's attempts as its chart draws them: the same filters, the same page, the same
    order as the board's table."""

    now: datetime
    since: datetime
    rows: list[AttemptRow]


def board_chart(
    *, workspace_id: int, filters: BoardFilters, page_size: int = BOARD_PAGE_SIZE
) -> BoardChart:
    """Queries: the time, the page of rows, their evidence, their reports to mark (the phases'
    record is `fleet.attempts.phases.tenure_records`, two more)."""
    now = db_now()
    offset = (max(filters.page, 1) - 1) * page_size
    attempts = _with_timeline_data(
        _board_selected(workspace_id, now, filters)
        .select_related("lease", "hand", "run", "run__work_package", "lane", "slot")
        .prefetch_related(_evidence_prefetch())
        .annotate(ended=Case(When(end__isnull=True, then=Value(0)), default=Value(1)))
        .order_by(*BOARD_ORDER)
    )[offset : offset + page_size]
    since = now - timedelta(seconds=BOARD_CHART_WINDOW_S)
    return BoardChart(now, since, attempt_rows(attempts, now))


# --- Lanes, work packages, runs ------------------------------------------------------------------


def lanes_page(*, workspace_id: int) -> tuple[list[Lane], dict[int, dict[str, int]]]:
    """Every lane with its work-package count, and its board counts by state."""
    now = db_now()
    lanes = list(
        Lane.objects.filter(workspace_id=workspace_id)
        .annotate(package_count=Count("work_packages"))
        .order_by("slug")
    )
    return lanes, _grouped_counts(workspace_id, now, "lane_id")


def _grouped_counts(
    workspace_id: int, now: datetime, key: str, **filters: Any
) -> dict[int, dict[str, int]]:
    """Board counts by state for each value of `key` (lane_id, run_id), in one aggregate."""
    rows = (
        _board_base(workspace_id, now, BoardFilters())
        .filter(**filters)
        .annotate(board_state=attempt_state_expression(now))
        .values(key, "board_state")
        .annotate(n=Count("id"))
        .order_by()
    )
    out: dict[int, dict[str, int]] = {}
    for row in rows:
        out.setdefault(row[key], dict.fromkeys(STATES, 0))[row["board_state"]] += row["n"]
    return out


def lane_page(*, workspace_id: int, slug: str) -> tuple[Lane, list[WorkPackage]]:
    lane = lane_get(workspace_id=workspace_id, slug=slug)
    packages = list(
        WorkPackage.objects.filter(lane=lane)
        .annotate(run_count=Count("runs"))
        .order_by("-id")[: LIST_PAGE_SIZE * 4]
    )
    return lane, packages


def work_package_page(
    *, workspace_id: int, package_id: int
) -> tuple[WorkPackage, list[Run], dict[int, dict[str, int]]]:
    package = work_package_get(workspace_id=workspace_id, work_package_id=package_id)
    runs = list(Run.objects.filter(work_package=package).order_by("-id")[: LIST_PAGE_SIZE * 4])
    counts = _grouped_counts(workspace_id, db_now(), "run_id", run__work_package=package)
    return package, runs, counts


@dataclass(frozen=True)
class SlotCell:
    slot: Slot
    lease: LeaseSnapshot

    @property
    def state(self) -> str:
        """open, done, or the holder's lease state (live, late, stalled)."""
        state = slot_state(self.lease)
        return str(self.lease.state) if state == SlotState.HELD else state


@dataclass(frozen=True)
class RunPage:
    run: Run
    now: datetime
    slots: list[SlotCell]
    rows: list[AttemptRow]
    counts: dict[str, int]


def _with_timeline_data(queryset: QuerySet[Attempt]) -> QuerySet[Attempt]:
    """Attempts with their latest reports to mark on their bars (a sliced prefetch: one query
    whatever the number of attempts)."""
    marks = Report.objects.filter(kind__in=MARKED_REPORTS).order_by("-at", "-id")
    return queryset.prefetch_related(
        Prefetch("reports", queryset=marks[:MARKS_PER_ATTEMPT], to_attr="marked_reports")
    )


def run_page(*, workspace_id: int, run_id: int) -> RunPage:
    """Queries: the run, the time, its slots with leases, its latest attempts (plus evidence and
    reports), its counts by state."""
    try:
        run = Run.objects.select_related("work_package", "work_package__lane").get(
            pk=run_id, workspace_id=workspace_id
        )
    except (Run.DoesNotExist, ValueError, OverflowError):
        raise NotFound(f"no run {run_id}") from None
    now = db_now()
    slots = [
        SlotCell(slot, LeaseSnapshot.from_model(slot.lease, now))
        for slot in Slot.objects.filter(run=run).select_related("lease").order_by("index")
    ]
    attempts = _with_timeline_data(_attempts_for_pages().filter(run=run).order_by("-id"))
    rows = attempt_rows(attempts[:TIMELINE_ATTEMPTS], now)
    counts = _state_counts(Attempt.objects.filter(run=run), now)
    return RunPage(run, now, slots, rows, counts)


# --- Hands ---------------------------------------------------------------------------------------


def hands_list(*, workspace_id: int, query: str = "", page: int = 1) -> tuple[list[Hand], int]:
    queryset = Hand.objects.filter(workspace_id=workspace_id).select_related("lane")
    if query:
        queryset = queryset.filter(name__icontains=query)
    queryset = queryset.annotate(
        open_attempts=Count("attempts", filter=Q(attempts__end__isnull=True))
    ).order_by("name")
    offset = (max(page, 1) - 1) * LIST_PAGE_SIZE
    hands = list(queryset[offset : offset + LIST_PAGE_SIZE + 1])
    return hands[:LIST_PAGE_SIZE], len(hands) > LIST_PAGE_SIZE


@dataclass(frozen=True)
class HandPage:
    hand: Hand
    now: datetime
    keys: list[HandKey]
    rows: list[AttemptRow]
    refusals: list[Refusal]


def hand_page(*, workspace_id: int, hand_id: int) -> HandPage:
    try:
        hand = Hand.objects.select_related("lane").get(pk=hand_id, workspace_id=workspace_id)
    except (Hand.DoesNotExist, ValueError, OverflowError):
        raise NotFound(f"no hand {hand_id}") from None
    now = db_now()
    keys = list(
        HandKey.objects.filter(hand=hand).select_related("lane", "bound_lease").order_by("-id")
    )
    for key in keys:
        # A key bound to a tenure lives by it (hands.keys): the page says whether it still does.
        key.bound_live = key.bound_lease is None or keys_rule.bound_alive(
            key.bound_lease, key.bound_fence, now
        )
    attempts = _with_timeline_data(_attempts_for_pages().filter(hand=hand).order_by("-id"))
    rows = attempt_rows(attempts[:TIMELINE_ATTEMPTS], now)
    refusals = list(
        Refusal.objects.filter(workspace_id=workspace_id, hand=hand.name).order_by("-id")[
            :LIST_PAGE_SIZE
        ]
    )
    return HandPage(hand, now, keys, rows, refusals)


def key_get(*, workspace_id: int, prefix: str) -> HandKey:
    try:
        return HandKey.objects.select_related("hand").get(
            prefix=prefix, hand__workspace_id=workspace_id
        )
    except HandKey.DoesNotExist:
        raise NotFound(f"no key {prefix!r}") from None


def attempt_row(*, workspace_id: int, attempt_id: int) -> AttemptRow:
    try:
        attempt = _attempts_for_pages().get(pk=attempt_id, workspace_id=workspace_id)
    except (Attempt.DoesNotExist, ValueError, OverflowError):
        raise NotFound(f"no attempt {attempt_id}") from None
    return attempt_rows([attempt], db_now())[0]


# --- Resource leases, refusals, events -----------------------------------------------------------


@dataclass(frozen=True)
class Paged:
    items: list[Any]
    page: int
    has_next: bool
    now: datetime | None = None


def _paged(queryset: QuerySet[Any], page: int, now: datetime | None = None) -> Paged:
    page = max(page, 1)
    offset = (page - 1) * LIST_PAGE_SIZE
    items = list(queryset[offset : offset + LIST_PAGE_SIZE + 1])
    return Paged(items[:LIST_PAGE_SIZE], page, len(items) > LIST_PAGE_SIZE, now)


def _records(model: type[Any], *, workspace_id: int, page: int, **filters: str) -> Paged:
    """The append-only record (refusals, events), newest first, with the filters given."""
    queryset = model.objects.filter(workspace_id=workspace_id)
    queryset = queryset.filter(**{name: value for name, value in filters.items() if value})
    return _paged(queryset.order_by("-id"), page)


def refusals_list(*, workspace_id: int, code: str = "", hand: str = "", page: int = 1) -> Paged:
    return _records(Refusal, workspace_id=workspace_id, page=page, code=code, hand=hand)


# The refusals page's window and length for refusals counted past a key's kept rows.
COUNTED_HOURS = 24
COUNTED_KEYS = 20


@dataclass(frozen=True)
class CountedRefusals:
    """One key's refused calls that were only counted (past `leases.audit.KEPT_PER_KEY_MINUTE`
    a minute, they keep no row of their own: `KeyTally.past_limit`), over the window."""

    key_prefix: str
    hand: str
    count: int
    by_code: list[tuple[str, int]]  # largest first
    last_at: datetime


def refusals_counted(*, workspace_id: int) -> list[CountedRefusals]:
    """The keys with the most refused calls counted without rows in the last `COUNTED_HOURS`,
    most first (at most `COUNTED_KEYS`): what a flood left out of the list of refusals. One
    query, summed in the database over the keys' minute tallies."""
    sql = (
        "SELECT t.key_prefix, MAX(t.hand), past.key, SUM(CAST(past.value AS bigint)), "
        f"MAX(t.last_at) FROM {KeyTally._meta.db_table} t, jsonb_each_text(t.past_limit) past "
        "WHERE t.workspace_id = %s AND t.record = %s "
        f"AND t.minute >= {now_sql()} - make_interval(hours => %s) "
        "GROUP BY t.key_prefix, past.key"
    )
    keys: dict[str, dict[str, Any]] = {}
    with connection.cursor() as cursor:
        cursor.execute(sql, [workspace_id, KeyRecord.REFUSAL.value, COUNTED_HOURS])
        for prefix, hand, code, count, last_at in cursor.fetchall():
            key = keys.setdefault(prefix, {"hand": hand or "", "codes": {}, "last_at": last_at})
            key["codes"][code] = int(count)
            key["last_at"] = max(key["last_at"], last_at)
    counted = [
        CountedRefusals(
            key_prefix=prefix,
            hand=key["hand"],
            count=sum(key["codes"].values()),
            by_code=sorted(key["codes"].items(), key=lambda item: (-item[1], item[0])),
            last_at=key["last_at"],
        )
        for prefix, key in keys.items()
    ]
    counted.sort(key=lambda row: (-row.count, row.key_prefix))
    return counted[:COUNTED_KEYS]


def events_list(*, workspace_id: int, kind: str = "", hand: str = "", page: int = 1) -> Paged:
    return _records(Event, workspace_id=workspace_id, page=page, kind=kind, hand=hand)


def members_list(*, workspace_id: int) -> list[Membership]:
    return list(
        Membership.objects.filter(workspace_id=workspace_id)
        .select_related("user")
        .order_by("user__username")
    )
