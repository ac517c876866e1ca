"""Where a fence stands, written once: current, superseded (and since when) or unknown.

`standing` is the rule `leases.services.lease_check` answers by (a tenure is current while it is
held and not lost; a shared one stays current beside later shared grants), read the same way (the
rows FOR SHARE on PostgreSQL, so a grant or break in flight is waited for). `fences_verify` asks it
for each `<resource>@<fence>` a commit carried (`gctl git`, `gctl verify`), says since when each
superseded one was no longer current, and records the answer (`FenceVerification`; past a key's
kept rows for the minute, a count in its tally: `leases.audit.key_tally`).

A commit carries a fence as the trailer `Ground-Control-Fence: <resource>@<fence> <holder>`
(`parse_fence`; the older form without the holder still reads): a current fence whose tenure is
not the named holder's answers `not_holder`, so a commit cannot borrow another's fence.

`paths_standing` says, for files a commit touches, which held tenures cover each now, and whether
the asking hand's own last tenure over it ended without its release (lost or broken) while it
holds none now: the stale holder that came back (`lapsed`). The push receipts
(`leases.receipts`) and the git hooks judge by both.

A fence stops being current at the end of its tenure: its release, the instant it was lost (its
deadline plus grace), or the break or grant that took the node past it, whichever came first.
While the tenure's row still stands at the fence that is read off the row; once the node has moved
on, off the event log (`event_fence_idx`), which retention prunes: `when` is then null.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any
from urllib.parse import unquote

from django.db import transaction

from apikit.errors import ValidationFailed
from leases import audit, engine, names, nodes
from leases.engine import LeaseSnapshot
from leases.fences import FENCE_MAX
from leases.models import (
    Event,
    EventKind,
    FenceStatus,
    FenceVerification,
    KeyRecord,
    LeaseMode,
    LeaseState,
)
from leases.names import MAX_RESOURCE_LENGTH
from leases.selectors import covering_nodes
from leases.state import thresholds

MAX_FENCES = 500
MAX_PATHS = 500
# A hand's name or a process identity, at most (`leases.services.MAX_NAME_LENGTH`; that module
# imports this one).
MAX_NAME_LENGTH = 200
_FENCE_DIGITS = re.compile(r"[0-9]{1,19}")
_DIGITS = re.compile(r"[0-9]+")
# Written as %XX in a trailer's holder, so that the holder is the one word after the fence.
_ESCAPED = re.compile(r"[%@\s]")
# Nothing a name holds (and nothing the database could store).
UNPRINTABLE = re.compile(r"[\x00-\x1f\x7f-\x9f\ud800-\udfff]")
# The events that end a tenure at its own fence, and those that take the node past it.
_ENDS = (EventKind.LEASE_RELEASED, EventKind.LEASE_EXPIRED)
_PASSES = (EventKind.LEASE_ACQUIRED, EventKind.LEASE_BROKEN)
FENCE_EVENT_KINDS = (*_ENDS, *_PASSES)


@dataclass(frozen=True)
class Standing:
    """Where the tenure `fence` of a node stands. `tenure` is its row while current; `node` is
    the node's own row (None when the node was never leased)."""

    status: FenceStatus
    fence: int
    tenure: LeaseSnapshot | None
    node: LeaseSnapshot | None

    @property
    def current_fence(self) -> int | None:
        return self.node.fence if self.node is not None else None

    @property
    def moved_on(self) -> bool:
        """Superseded by a later fence (a grant or a break), not merely ended."""
        return self.node is not None and self.node.fence > self.fence


def standing(*, workspace_id: int, resource: str, fence: int) -> Standing:
    """Is `fence` a current, unlost tenure of `resource`? `unknown` when the node was never
    leased or never granted that fence."""
    tenure = nodes.read_tenure(
        workspace_id=workspace_id, resource=resource, fence=fence, settled=True
    )
    if tenure is not None and tenure.held:
        return Standing(FenceStatus.CURRENT, fence, tenure, tenure)
    node = engine.read(workspace_id=workspace_id, resource=resource, settled=True)
    if node is None or fence > node.fence or fence == 0:
        return Standing(FenceStatus.UNKNOWN, fence, tenure, node)
    return Standing(FenceStatus.SUPERSEDED, fence, tenure, node)


@dataclass(frozen=True)
class Carried:
    """A fence as a commit carries it: `<resource>@<fence>`, and the holder its trailer names
    (None in the older form, which names none)."""

    resource: str
    fence: int
    holder: str | None = None

    @property
    def name(self) -> str:
        return f"{self.resource}@{self.fence}"


def holder_text(holder: str) -> str:
    """A holder as a trailer writes it: one word, `%`, `@` and whitespace as %XX (UTF-8)."""
    return _ESCAPED.sub(lambda m: "".join(f"%{b:02X}" for b in m.group().encode()), holder)


def _split(value: str) -> tuple[str, str, str | None]:
    """(resource, fence digits, holder as written) of `<resource>@<fence>[ <holder>]`. A value
    that ends in the fence's digits names no holder; otherwise the holder is the last word,
    which never holds `@` (`holder_text`), so the two forms never read as each other."""
    head, _, digits = value.rpartition("@")
    if _DIGITS.fullmatch(digits) or " " not in value:
        return head, digits, None
    text, _, written = value.rpartition(" ")
    head, _, digits = text.rpartition("@")
    return head, digits, written


def _holder_problem(written: str) -> str | None:
    if not written or "@" in written:
        return "its holder (after the fence and one space) must be one word, '@' written as %40"
    holder = unquote(written)
    if len(holder) > MAX_NAME_LENGTH or UNPRINTABLE.search(holder):
        return f"its holder must be a hand's name: at most {MAX_NAME_LENGTH} printable characters"
    return None


def parse_fence(value: object, index: int, *, field: str = "fences") -> Carried:
    """The fence `<resource>@<fence>` or `<resource>@<fence> <holder>`; `validation_error`
    naming the item (`<field>[<index>]`)."""
    problem = None
    if not isinstance(value, str) or "@" not in value:
        problem = "must be a string '<resource>@<fence>' or '<resource>@<fence> <holder>'"
    else:
        resource, digits, written = _split(value)
        name_problem = names.resource_problem(resource, field="resource")
        if name_problem is not None:
            problem = name_problem
        elif resource.strip().lower().startswith("run/"):
            problem = "names a run slot: slot fences are an attempt's, not a commit's"
        elif not _FENCE_DIGITS.fullmatch(digits) or int(digits) > FENCE_MAX:
            problem = "its fence must be a non-negative integer (after the last '@')"
        elif written is None:
            return Carried(resource, int(digits))
        else:
            problem = _holder_problem(written)
            if problem is None:
                return Carried(resource, int(digits), unquote(written))
    shown = repr(value)[:MAX_RESOURCE_LENGTH] if isinstance(value, str) else type(value).__name__
    message = f"{field}[{index}] {shown}: {problem}"
    raise ValidationFailed(message, fields={field: [message]})


def validate_fences(
    value: object, *, field: str = "fences", required: bool = True, limit: int = MAX_FENCES
) -> list[Carried]:
    if value is None and not required:
        return []
    if not isinstance(value, list) or (required and not value):
        what = "a non-empty list" if required else "a list"
        raise ValidationFailed(
            f"{field} must be {what} of '<resource>@<fence>'",
            fields={field: [f"{what.capitalize()} of '<resource>@<fence>' strings."]},
        )
    if len(value) > limit:
        raise ValidationFailed(
            f"{field} holds {len(value)} items; at most {limit} in one call",
            fields={field: [f"At most {limit} items."]},
        )
    return [parse_fence(item, index, field=field) for index, item in enumerate(value)]


def validate_paths(value: object, *, field: str = "paths", limit: int = MAX_PATHS) -> list[str]:
    """Files by their lease names (canonical resource names, `groundcontrol_client.git.files`)."""
    if value is None:
        return []
    if not isinstance(value, list):
        raise ValidationFailed(
            f"{field} must be a list of file names",
            fields={field: ["A list of canonical names (relative to the repository's top)."]},
        )
    if len(value) > limit:
        raise ValidationFailed(
            f"{field} holds {len(value)} items; at most {limit} in one call",
            fields={field: [f"At most {limit} items."]},
        )
    paths = []
    for index, path in enumerate(value):
        item = f"{field}[{index}]"
        problem = (
            names.resource_problem(path, field=item)
            if isinstance(path, str) and path
            else f"{item} must be a non-empty string"
        )
        if problem is not None:
            raise ValidationFailed(problem, fields={field: [problem]})
        paths.append(path)
    return paths


def _ended_at(tenure: LeaseSnapshot | None) -> tuple[datetime | None, str]:
    """When and how the tenure whose row still stands at its fence ended."""
    if tenure is None:
        return None, ""
    if tenure.state == LeaseState.FREE and tenure.released_at is not None:
        return tenure.released_at, "released"
    if tenure.deadline is not None and tenure.state == LeaseState.LOST:
        return thresholds(tenure.deadline, tenure.grace_s).lost_at, "lost"
    return None, "ended"


def _passed_at(*, workspace_id: int, node: str, fence: int) -> tuple[datetime | None, str]:
    """When the tenure `fence` of `node` stopped being current, by the event log: its release
    or loss, or else the first break or grant above it, whichever came first."""
    events = (
        Event.objects.filter(
            workspace_id=workspace_id,
            kind__in=FENCE_EVENT_KINDS,
            resource__in=[node, node + "/"],
            fence__gte=fence,
        )
        .order_by("fence", "id")
        .only("kind", "at", "fence", "data")[:8]
    )
    found: list[tuple[datetime, str]] = []
    for event in events:
        if event.fence == fence and event.kind in _ENDS:
            since = event.data.get("since") if event.kind == EventKind.LEASE_EXPIRED else None
            at = datetime.fromisoformat(since) if isinstance(since, str) else event.at
            found.append((at, "released" if event.kind == EventKind.LEASE_RELEASED else "lost"))
        elif event.fence == fence and event.kind == EventKind.LEASE_BROKEN:
            return None, "never granted"  # a break counted this fence out; no tenure took it
        elif event.fence is not None and event.fence > fence and event.kind in _PASSES:
            how = "broken" if event.kind == EventKind.LEASE_BROKEN else "taken"
            found.append((event.at, how))
            break  # the first fence above it: later ones came after
    return min(found) if found else (None, "")


def answer_of(
    *, workspace_id: int, resource: str, found: Standing, named: str | None = None
) -> dict[str, Any]:
    """One fence's answer: its status, the node's fence now, and since when and how it stopped
    being current. `named`: the holder the commit's trailer names; a current tenure of another
    holder answers `not_holder`."""
    answer: dict[str, Any] = {
        "fence": f"{resource}@{found.fence}",
        "resource": resource,
        "fence_number": found.fence,
        "named_holder": named or "",
        "status": str(found.status),
        "current_fence": found.current_fence,
        "when": None,
        "ended": "",
    }
    if found.status == FenceStatus.CURRENT:
        assert found.tenure is not None
        answer["holder"] = found.tenure.holder
        if named is not None and named != found.tenure.holder:
            answer["status"] = str(FenceStatus.NOT_HOLDER)
    if found.status != FenceStatus.SUPERSEDED:
        return answer
    when, how = (None, "")
    if not found.moved_on:
        when, how = _ended_at(found.tenure)
    if when is None:
        when, how = _passed_at(
            workspace_id=workspace_id, node=names.node_of(resource), fence=found.fence
        )
    if how == "never granted":
        answer.update(status=str(FenceStatus.UNKNOWN))
        return answer
    answer.update(when=when.isoformat() if when else None, ended=how or "ended")
    return answer


def judged(*, workspace_id: int, carried: Carried) -> tuple[Standing, dict[str, Any]]:
    """One decision for one fence a commit carried, on the database's clock: where its tenure
    stands (`standing`) and the answer that says so."""
    found = standing(workspace_id=workspace_id, resource=carried.resource, fence=carried.fence)
    answer = answer_of(
        workspace_id=workspace_id, resource=carried.resource, found=found, named=carried.holder
    )
    return found, answer


def fences_verify(
    *,
    workspace_id: int,
    fences: object,
    key_prefix: str = "",
    hand: str = "",
    required: bool = True,
) -> list[dict[str, Any]]:
    """Each fence's standing, in the order sent (a fence sent twice is read once), recorded:
    a row each while the key has asked about fewer than `audit.KEPT_PER_KEY_MINUTE` fences this
    minute, and every one counted in the key's tally (`audit.key_tally`)."""
    parsed = validate_fences(fences, required=required)
    answers: dict[Carried, dict[str, Any]] = {}
    for carried in parsed:
        if carried not in answers:
            answers[carried] = judged(workspace_id=workspace_id, carried=carried)[1]
    answered = list(answers.items())
    with transaction.atomic():
        kept = len(answered)
        if key_prefix:
            kept = audit.key_tally(
                workspace_id=workspace_id,
                key_prefix=key_prefix,
                hand=hand,
                record=KeyRecord.VERIFICATION,
                labels=[answer["status"] for _, answer in answered],
            )
        FenceVerification.objects.bulk_create(
            FenceVerification(
                workspace_id=workspace_id,
                key_prefix=key_prefix,
                hand=hand,
                resource=carried.resource,
                fence=carried.fence,
                status=answer["status"],
                current_fence=answer["current_fence"],
            )
            for carried, answer in answered[:kept]
        )
    return [answers[carried] for carried in parsed]


# --- paths -------------------------------------------------------------------------------------

# The held tenures on paths' lines (each path's node and its ancestors), read FOR SHARE in id
# order (the engine's lock order), so a grant or break in flight is waited for, as `standing`
# waits for one.
_HELD_ON_LINES = (
    "SELECT {columns}, {now} FROM {table} "
    "WHERE workspace_id = %(workspace_id)s AND kind = 'resource' AND status = 'held' "
    "AND node = ANY(%(nodes)s) ORDER BY id FOR SHARE"
)


@dataclass(frozen=True)
class Lapsed:
    """A hand's own last tenure over a path, ended without its release: `lost` past its grace
    (`when`: the instant it was lost) or `broken` by a supervisor."""

    resource: str
    fence: int
    ended: str
    when: datetime | None

    def as_json(self) -> dict[str, Any]:
        return {
            "resource": self.resource,
            "fence": self.fence,
            "ended": self.ended,
            "when": self.when.isoformat() if self.when else None,
        }


@dataclass(frozen=True)
class PathStanding:
    """The held (and not lost) tenures on a path's line now, and whether the asking hand's
    own last tenure over it lapsed while it holds none over it now."""

    path: str
    held: tuple[LeaseSnapshot, ...]
    lapsed: Lapsed | None

    def mine(self, hand: str) -> list[LeaseSnapshot]:
        return [t for t in self.held if t.holder == hand]

    def in_the_way(self, hand: str) -> list[LeaseSnapshot]:
        """Other hands' tenures a commit of `hand` may not write under: exclusive ones, and
        shared ones while `hand` holds nothing over the path (the pre-commit hook's rule)."""
        mine = self.mine(hand)
        return [
            t for t in self.held if t.holder != hand and (t.mode != LeaseMode.SHARED or not mine)
        ]

    def as_json(self) -> dict[str, Any]:
        return {
            "path": self.path,
            "held": [
                {
                    "resource": t.resource,
                    "fence": t.fence,
                    "holder": t.holder,
                    "mode": t.mode,
                    "state": str(t.state),
                }
                for t in self.held
            ],
            "lapsed": self.lapsed.as_json() if self.lapsed else None,
        }


def _latest_ends(*, workspace_id: int, hand: str, nodes: Iterable[str]) -> dict[str, Event]:
    """`hand`'s latest tenure event (acquired, released, expired, broken) on each node, by the
    event log's index on names (`event_fence_idx`: each spelling, with and without its `/`)."""
    spellings = sorted({s for node in nodes for s in (node, node + "/")})
    events = (
        Event.objects.filter(
            workspace_id=workspace_id, hand=hand, kind__in=FENCE_EVENT_KINDS, resource__in=spellings
        )
        .order_by("resource", "-id")
        .distinct("resource")
        .only("id", "kind", "at", "resource", "fence", "data")
    )
    latest: dict[str, Event] = {}
    for event in events:
        node = names.node_of(event.resource)
        if node not in latest or latest[node].id < event.id:
            latest[node] = event
    return latest


def _lapse_of(event: Event) -> Lapsed | None:
    if event.kind == EventKind.LEASE_EXPIRED:
        since = event.data.get("since")
        when = datetime.fromisoformat(since) if isinstance(since, str) else event.at
        return Lapsed(event.resource, event.fence or 0, "lost", when)
    if event.kind == EventKind.LEASE_BROKEN:
        broken = event.data.get("broken_fence")
        fence = broken if isinstance(broken, int) else (event.fence or 0)
        return Lapsed(event.resource, fence, "broken", event.at)
    return None  # acquired, or released by its holder: nothing lapsed


def paths_standing(*, workspace_id: int, hand: str, paths: Sequence[str]) -> list[PathStanding]:
    """For each path: the held tenures on its line now, and `hand`'s lapse over it (its own
    tenure lost while still on the row, or else its latest tenure event on the line an expiry
    or a break), unless `hand` holds a tenure over the path now."""
    if not paths:
        return []
    lines = {path: covering_nodes(path) for path in paths}
    every = sorted({node for line in lines.values() for node in line})
    rows = engine.all_rows(
        engine.render(_HELD_ON_LINES), {"workspace_id": workspace_id, "nodes": every}
    )
    by_node: dict[str, list[LeaseSnapshot]] = {}
    for row in rows:
        by_node.setdefault(names.node_of(row.resource), []).append(row)
    latest = _latest_ends(workspace_id=workspace_id, hand=hand, nodes=every) if hand else {}
    standings = []
    for path in paths:
        on_line = [row for node in lines[path] for row in by_node.get(node, [])]
        held = tuple(row for row in on_line if row.held)
        lapsed = None
        if hand and not any(row.holder == hand for row in held):
            lost = [r for r in on_line if r.holder == hand and r.state == LeaseState.LOST]
            if lost:
                row = max(lost, key=lambda r: r.fence)
                assert row.deadline is not None
                lost_at = thresholds(row.deadline, row.grace_s).lost_at
                lapsed = Lapsed(row.resource, row.fence, "lost", lost_at)
            else:
                events = [latest[node] for node in lines[path] if node in latest]
                if events:
                    lapsed = _lapse_of(max(events, key=lambda e: e.id))
        standings.append(PathStanding(path, held, lapsed))
    return standings
