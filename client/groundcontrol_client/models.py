"""The wire objects of the contract as typed, read-only values.

Each keeps the server's full JSON in `raw`, so fields the server adds later are not lost; parsing
is lenient about optional fields for the same reason. An answer that lacks a field the contract
requires, or holds one of the wrong type (a `run` that is not a number), raises
`MalformedAnswer` (a `ServerError`): gctl says so and exits 1, never with a traceback.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, TypeVar

from groundcontrol_client.errors import MalformedAnswer
from groundcontrol_client.handoffs import PendingHandoff, pending_list

T = TypeVar("T")
_INTEGER = re.compile(r"-?[0-9]+")


def _int(data: dict[str, Any], name: str, default: int | None = None) -> int:
    """`data[name]` as an int: a JSON integer (or one written as digits); with `default`, a
    missing or null one is that. Anything else is a malformed answer, not a guess."""
    value = data.get(name) if default is not None else data[name]
    if value is None and default is not None:
        return default
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, str) and _INTEGER.fullmatch(value.strip()):
        return int(value)
    raise MalformedAnswer(f"{name} is {value!r}, not a whole number")


def _number(data: dict[str, Any], name: str, default: float | None = None) -> float:
    """`data[name]` as a float (a JSON number); with `default`, a missing or null one is that."""
    value = data.get(name) if default is not None else data[name]
    if value is None and default is not None:
        return default
    if isinstance(value, int | float) and not isinstance(value, bool):
        return float(value)
    if isinstance(value, str):  # a decimal written as text
        try:
            return float(value)
        except ValueError:
            pass
    raise MalformedAnswer(f"{name} is {value!r}, not a number")


def _json_kind(value: Any) -> str:
    if value is None:
        return "null"
    kinds = {bool: "a boolean", list: "a list", str: "a string", int: "a number", float: "a number"}
    return kinds.get(type(value), type(value).__name__)


def _parsing(what: str) -> Callable[[Callable[..., T]], Callable[..., T]]:
    """A `from_wire` whose answer lacks a required field or holds a wrong type raises
    `MalformedAnswer` naming `what` and the field, instead of a KeyError or ValueError."""

    def wrap(parse: Callable[..., T]) -> Callable[..., T]:
        @functools.wraps(parse)
        def parsed(cls: type, data: Any) -> T:
            if not isinstance(data, dict):
                raise MalformedAnswer(
                    f"the server's answer is not a valid {what}: an object was expected, not "
                    f"{_json_kind(data)}",
                    fields={"what": what},
                )
            try:
                return parse(cls, data)
            except MalformedAnswer as error:
                if error.get("what"):
                    raise  # said already, by the object inside (an attempt's lease)
                raise MalformedAnswer(
                    f"the server's answer is not a valid {what}: {error.message}",
                    fields={"what": what},
                ) from None
            except KeyError as error:
                raise MalformedAnswer(
                    f"the server's answer is not a valid {what}: it has no {error.args[0]}",
                    fields={"what": what},
                ) from None
            except (TypeError, ValueError, AttributeError) as error:
                raise MalformedAnswer(
                    f"the server's answer is not a valid {what}: {error}", fields={"what": what}
                ) from None

        return parsed

    return wrap


def _time(value: Any) -> datetime | None:
    if not isinstance(value, str) or not value:
        return None
    try:
        return datetime.fromisoformat(value)
    except ValueError:
        return None


def _float(value: Any) -> float | None:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


@dataclass(frozen=True)
class SlotLease:
    """The lease under an attempt: its slot's resource, fence and clock."""

    resource: str
    fence: int
    holder: str
    heartbeat_interval_s: float
    grace_s: float
    expires_in_s: float | None
    expires_at: datetime | None
    server_time: datetime | None

    @classmethod
    @_parsing("attempt's lease")
    def from_wire(cls, data: dict[str, Any]) -> SlotLease:
        return cls(
            resource=str(data.get("resource", "")),
            fence=_int(data, "fence"),
            holder=str(data.get("holder") or ""),
            heartbeat_interval_s=_number(data, "heartbeat_interval_s"),
            grace_s=_number(data, "grace_s", 0.0),
            expires_in_s=_float(data.get("expires_in_s")),
            expires_at=_time(data.get("expires_at")),
            server_time=_time(data.get("server_time")),
        )


@dataclass(frozen=True)
class Attempt:
    id: int
    run: int
    slot: int
    hand: str
    process_id: str
    state: str  # live | late | stalled | lost | finished | released
    directive: str  # continue | pause | stop
    lease: SlotLease
    end_reason: str | None
    raw: dict[str, Any] = field(repr=False, compare=False)

    @classmethod
    @_parsing("attempt")
    def from_wire(cls, data: dict[str, Any]) -> Attempt:
        return cls(
            id=_int(data, "id"),
            run=_int(data, "run", 0),
            slot=_int(data, "slot", 0),
            hand=str(data.get("hand", "")),
            process_id=str(data.get("process_id", "")),
            state=str(data.get("state", "")),
            directive=str(data.get("directive") or "continue"),
            lease=SlotLease.from_wire(data["lease"]),
            end_reason=data.get("end_reason"),
            raw=data,
        )

    @property
    def fence(self) -> int:
        """This tenure's fence (the slot's lease may have moved on to a later one)."""
        fence = self.raw.get("fence")
        return int(fence) if isinstance(fence, int) else self.lease.fence


@dataclass(frozen=True)
class Lease:
    """A resource lease."""

    resource: str
    holder: str
    process_id: str
    fence: int
    state: str
    ttl_s: float
    expires_in_s: float | None
    expires_at: datetime | None
    server_time: datetime | None
    raw: dict[str, Any] = field(repr=False, compare=False)
    # A pool's member (`Client.lease_from_pool`): the pool and the member granted; else None.
    pool: str | None = None
    member: str | None = None
    mode: str = "exclusive"
    # A renewal's answer: other hands asking for this tenure (`groundcontrol_client.handoffs`).
    handoff_requests: tuple[PendingHandoff, ...] = ()

    @classmethod
    @_parsing("lease")
    def from_wire(cls, data: dict[str, Any]) -> Lease:
        return cls(
            pool=None if data.get("pool") is None else str(data["pool"]),
            member=None if data.get("member") is None else str(data["member"]),
            mode=str(data.get("mode") or "exclusive"),
            resource=str(data["resource"]),
            holder=str(data.get("holder") or ""),
            process_id=str(data.get("process_id") or ""),
            fence=_int(data, "fence"),
            state=str(data.get("state", "")),
            ttl_s=_number(data, "ttl_s", 0.0),
            expires_in_s=_float(data.get("expires_in_s")),
            expires_at=_time(data.get("expires_at")),
            server_time=_time(data.get("server_time")),
            raw=data,
            handoff_requests=pending_list(data),
        )


@dataclass(frozen=True)
class FenceAnswer:
    """Where one `<resource>@<fence>` stands (`POST /fences/verify`): `current`, `superseded`
    (the node's fence now, `when` it stopped being current and how it `ended`) or `unknown`."""

    fence: str
    resource: str
    fence_number: int
    status: str
    current_fence: int | None
    when: datetime | None
    ended: str
    holder: str
    raw: dict[str, Any] = field(repr=False, compare=False)

    @property
    def current(self) -> bool:
        return self.status == "current"

    @classmethod
    @_parsing("fence answer")
    def from_wire(cls, data: dict[str, Any]) -> FenceAnswer:
        current = data.get("current_fence")
        return cls(
            fence=str(data["fence"]),
            resource=str(data["resource"]),
            fence_number=_int(data, "fence_number"),
            status=str(data["status"]),
            current_fence=current if isinstance(current, int) else None,
            when=_time(data.get("when")),
            ended=str(data.get("ended") or ""),
            holder=str(data.get("holder") or ""),
            raw=data,
        )


@dataclass(frozen=True)
class NotRenewed:
    """A tenure a renew-all did not renew (`resource`, `fence`), and why (its `code`:
    `lease_lost`, also for one taken over by another process of this hand). `lease` is its row
    as it stands now (None for a name in `held` never leased)."""

    lease: Lease | None
    code: str
    message: str
    resource: str = ""
    fence: int | None = None


@dataclass(frozen=True)
class RenewedAll:
    """One renew-all: the leases it renewed, and those the process had lost. A lease released,
    broken or taken over is in neither: compare with the leases you believe you hold."""

    renewed: list[Lease]
    not_renewed: list[NotRenewed]

    @classmethod
    @_parsing("renew-all answer")
    def from_wire(cls, data: dict[str, Any]) -> RenewedAll:
        renewed, not_renewed = data["renewed"], data["not_renewed"]
        if not isinstance(renewed, list) or not isinstance(not_renewed, list):
            raise MalformedAnswer("renewed and not_renewed must be lists")
        return cls(
            renewed=[Lease.from_wire(item) for item in renewed],
            not_renewed=[_not_renewed(item) for item in not_renewed],
        )

    def resources(self) -> list[str]:
        return [lease.resource for lease in self.renewed]

    def lost(self) -> list[str]:
        """The resources not renewed (lost, taken over, or otherwise ended)."""
        return [item.resource for item in self.not_renewed]


def _not_renewed(item: Any) -> NotRenewed:
    if not isinstance(item, dict):
        raise MalformedAnswer("each not_renewed item must be an object")
    lease = Lease.from_wire(item["lease"]) if item.get("lease") is not None else None
    fence = item.get("fence")
    return NotRenewed(
        lease=lease,
        code=str(item.get("code", "")),
        message=str(item.get("message", "")),
        resource=str(item.get("resource") or (lease.resource if lease else "")),
        fence=fence if isinstance(fence, int) else (lease.fence if lease else None),
    )


@dataclass(frozen=True)
class Slot:
    index: int
    state: str  # open | held | done
    holder: str | None
    fence: int | None
    # The end of the holder's current renewal window (negative once it has passed: late).
    expires_in_s: float | None
    raw: dict[str, Any] = field(repr=False, compare=False)

    @classmethod
    @_parsing("slot")
    def from_wire(cls, data: dict[str, Any]) -> Slot:
        fence = data.get("fence")
        return cls(
            index=_int(data, "index"),
            state=str(data.get("state", "")),
            holder=data.get("holder") or None,
            fence=int(fence) if isinstance(fence, int) else None,
            expires_in_s=_float(data.get("expires_in_s")),
            raw=data,
        )


@dataclass(frozen=True)
class SlotCounts:
    total: int
    open: int
    held: int
    done: int

    @classmethod
    @_parsing("run's slot counts")
    def from_wire(cls, data: dict[str, Any]) -> SlotCounts:
        return cls(
            total=_int(data, "total", 0),
            open=_int(data, "open", 0),
            held=_int(data, "held", 0),
            done=_int(data, "done", 0),
        )


@dataclass(frozen=True)
class Run:
    """A run as the runs list describes it: what it is, where, and how its slots stand."""

    id: int
    title: str
    state: str  # open | closed | done
    lane: str
    work_package: dict[str, Any]
    evidence_required: list[str]
    heartbeat_interval_s: float
    grace_s: float
    slots: SlotCounts
    created_at: datetime | None
    raw: dict[str, Any] = field(repr=False, compare=False)
    brief: str = field(default="", repr=False)  # in a run's own answer; not in the runs list
    # The least grade (hand < wrapper < ci) a finish's evidence of each kind needs.
    evidence_grades: dict[str, str] = field(default_factory=dict)
    # The tags a hand must have to claim a slot (capability_missing otherwise).
    capabilities: list[str] = field(default_factory=list)

    @classmethod
    @_parsing("run")
    def from_wire(cls, data: dict[str, Any]) -> Run:
        lane = data.get("lane")
        if isinstance(lane, dict):
            lane = lane.get("slug")
        # Either nested ({"work_package": {id, key, title}, "slots": {total, open, held,
        # done}}) or flat, as the run answer has it ("work_package": id, "work_package_key",
        # "slots": total, "slots_by_state": {open, held, done}).
        package = data.get("work_package")
        if not isinstance(package, dict):
            package = {
                "id": package,
                "key": data.get("work_package_key"),
                "title": data.get("work_package_title"),
            }
        slots = data.get("slots")
        if not isinstance(slots, dict):
            slots = {"total": slots, **(data.get("slots_by_state") or {})}
        return cls(
            id=_int(data, "id"),
            title=str(data.get("title", "")),
            state=str(data.get("state", "")),
            lane=str(lane or ""),
            work_package=dict(package),
            evidence_required=[str(k) for k in data.get("evidence_required") or []],
            heartbeat_interval_s=_number(data, "heartbeat_interval_s", 0.0),
            grace_s=_number(data, "grace_s", 0.0),
            slots=SlotCounts.from_wire(slots),
            created_at=_time(data.get("created_at")),
            raw=data,
            brief=str(data.get("brief") or ""),
            evidence_grades=_grades(data.get("evidence_grades")),
            capabilities=[str(tag) for tag in data.get("capabilities") or []],
        )


@dataclass(frozen=True)
class Me:
    hand: str
    workspace: str
    scopes: list[str]
    key_prefix: str
    lane: str | None
    raw: dict[str, Any] = field(repr=False, compare=False)
    # What the hand can do: a run that needs a tag it lacks refuses its claim.
    capabilities: list[str] = field(default_factory=list)

    @classmethod
    @_parsing("key description")
    def from_wire(cls, data: dict[str, Any]) -> Me:
        lane = data.get("lane")
        if isinstance(lane, dict):
            lane = lane.get("slug")
        return cls(
            hand=str(data.get("hand", "")),
            workspace=str(data.get("workspace", "")),
            scopes=[str(s) for s in data.get("scopes") or []],
            key_prefix=str(data.get("key_prefix", "")),
            lane=str(lane) if lane else None,
            raw=data,
            capabilities=[str(tag) for tag in data.get("capabilities") or []],
        )


@dataclass(frozen=True)
class Brief:
    """What an attempt is for: the run's brief (Markdown) and the evidence it must leave."""

    attempt: Attempt
    run_id: int
    title: str
    brief: str
    evidence_required: list[str]
    work_package: dict[str, Any]
    lane: dict[str, Any]
    raw: dict[str, Any] = field(repr=False, compare=False)
    evidence_grades: dict[str, str] = field(default_factory=dict)

    @classmethod
    @_parsing("brief")
    def from_wire(cls, data: dict[str, Any]) -> Brief:
        run = data.get("run") or {}
        return cls(
            attempt=Attempt.from_wire(data["attempt"]),
            run_id=_int(run, "id", 0),
            title=str(run.get("title", "")),
            brief=str(run.get("brief", "")),
            evidence_required=[str(k) for k in run.get("evidence_required") or []],
            work_package=dict(data.get("work_package") or {}),
            lane=dict(data.get("lane") or {}),
            raw=data,
            evidence_grades=_grades(run.get("evidence_grades")),
        )


def _grades(value: Any) -> dict[str, str]:
    return {str(k): str(v) for k, v in value.items()} if isinstance(value, dict) else {}


@dataclass(frozen=True)
class Evidence:
    kind: str
    url: str
    note: str = ""

    def to_wire(self) -> dict[str, str]:
        item = {"kind": self.kind, "url": self.url}
        if self.note:
            item["note"] = self.note
        return item

    @classmethod
    def parse(cls, text: str) -> Evidence:
        """`kind=url`, as `gctl finish --evidence` and evidence files write it."""
        kind, sep, url = text.strip().partition("=")
        if not sep or not kind.strip() or not url.strip():
            raise ValueError(f"evidence must look like kind=url, not {text!r}")
        return cls(kind=kind.strip(), url=url.strip())


@dataclass(frozen=True)
class ReportResult:
    renewed: bool
    attempt: Attempt
    handoff_requests: tuple[PendingHandoff, ...] = ()

    @classmethod
    @_parsing("report's answer")
    def from_wire(cls, data: dict[str, Any]) -> ReportResult:
        return cls(
            renewed=bool(data.get("renewed")),
            attempt=Attempt.from_wire(data["attempt"]),
            handoff_requests=pending_list(data),
        )


# --- sentences: how gctl and the MCP server say a lease, a slot and a run ---------------------


def describe_window(expires_in_s: float | None) -> str:
    """The end of a holder's current renewal window, which a live holder keeps pushing on."""
    if expires_in_s is None:
        return ""
    if expires_in_s < 0:
        return f", late: its window ended {-expires_in_s:.0f} s ago"
    return f", live, its current window ends in {expires_in_s:.0f} s"


def describe_lease(lease: Lease) -> str:
    """One resource lease as a sentence: who holds it, at which fence, and how it stands."""
    if lease.state == "free" or not lease.holder:
        return f"{lease.resource}: free (fence {lease.fence}; the next holder gets a higher one)"
    if lease.state == "lost":
        return (
            f"{lease.resource}: lost by hand {lease.holder} at fence {lease.fence} "
            "(it stopped renewing; anyone may take it)"
        )
    window = describe_window(lease.expires_in_s).removeprefix(", live")
    return (
        f"{lease.resource}: held by hand {lease.holder} at fence {lease.fence}, "
        f"{lease.state}{window}"
    )


def describe_slot(slot: Slot) -> str:
    """One slot as a sentence, e.g. "slot 1: held by hand b at fence 3, live, its current
    window ends in 40 s"."""
    if slot.state == "held":
        window = describe_window(slot.expires_in_s)
        return f"slot {slot.index}: held by hand {slot.holder} at fence {slot.fence}{window}"
    facts = []
    if slot.fence:  # fence 0: never held
        facts.append(f"fence {slot.fence}")
    return f"slot {slot.index}: {slot.state}" + (f" ({', '.join(facts)})" if facts else "")


def describe_required(kinds: list[str], grades: dict[str, str]) -> str:
    """The evidence a run requires, each kind with the least grade it needs: "pull_request
    (seen by ci), commit", or "none"."""
    described = [kind + (f" (seen by {grades[kind]})" if kind in grades else "") for kind in kinds]
    return ", ".join(described) or "none"


def describe_run(run: Run) -> str:
    counts = run.slots
    state = "" if run.state == "open" else f" [{run.state}]"
    package = run.work_package.get("key") or run.work_package.get("title") or "?"
    taken = [f"{n} {name}" for n, name in ((counts.held, "held"), (counts.done, "done")) if n]
    evidence = describe_required(run.evidence_required, run.evidence_grades)
    return (
        f"run {run.id}{state}: {run.title} (lane {run.lane}, work package {package}): "
        f"{counts.open} of {counts.total} slot{'' if counts.total == 1 else 's'} open"
        + (f" ({', '.join(taken)})" if taken else "")
        + (f"; needs {', '.join(run.capabilities)}" if run.capabilities else "")
        + f"; evidence: {evidence}; heartbeat every {run.heartbeat_interval_s:g} s, "
        f"grace {run.grace_s:g} s"
    )
