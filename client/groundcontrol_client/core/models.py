"""The wire objects of the contract as typed, read-only values: each class below reads as the
answer it parses, its fields with their types and defaults.

Each is a `WireModel` (`groundcontrol_client.core.wire`): it keeps the server's full JSON in `raw`,
so fields the server adds later are not lost, and is lenient about optional fields for the same
reason (missing or null: the default). An answer that lacks a field the contract requires, or holds
one of the wrong type (a `run` that is not a whole number), raises `MalformedAnswer` (a
`ServerError`): gctl says so and exits 1, never with a traceback.
"""

from __future__ import annotations

from collections import ChainMap
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Annotated, Any

from pydantic import AliasPath, BeforeValidator, Field, model_validator
from pydantic_core import PydanticCustomError

from groundcontrol_client.core.errors import hand_called
from groundcontrol_client.core.handoffs import PendingHandoff
from groundcontrol_client.core.wire import (
    Flag,
    Number,
    OrDefault,
    Text,
    Time,
    WholeNumber,
    WireModel,
)


def _slug(value: Any) -> Any:
    """A lane given as an object (`{"slug": ...}`) reads as its slug."""
    return value.get("slug") if isinstance(value, Mapping) else value


Lane = Annotated[Text, BeforeValidator(_slug)]


def _from_lease(field: str, otherwise: Any = None) -> Callable[[dict[str, Any]], Any]:
    """A default taken from the object's `lease` (a field read before this one): the lease's
    `field`, or `otherwise` without a lease."""

    def default(data: dict[str, Any]) -> Any:
        lease = data.get("lease")
        return otherwise if lease is None else getattr(lease, field)

    return default


class SlotLease(WireModel, title="attempt's lease"):
    """The lease under an attempt: its slot's resource, fence and clock."""

    resource: Text = ""
    fence: WholeNumber
    holder: Text = ""
    heartbeat_interval_s: Number
    grace_s: Number = 0.0
    expires_in_s: Number | None = None
    expires_at: Time = None
    server_time: Time = None


class CheckpointFrom(WireModel, title="checkpoint's origin"):
    """Where an inherited checkpoint came from: the earlier attempt on the slot that reported
    it, its hand ("" when the key may not read it), when, and how that attempt ended."""

    attempt: WholeNumber
    hand: Text = ""
    at: Time = None
    end: Text = ""  # lost | released | finished
    # True when a hand of another lane wrote it: a lane-limited key is not given its words.
    withheld: bool = False


class Attempt(WireModel, title="attempt"):
    id: WholeNumber
    run: WholeNumber = 0
    slot: WholeNumber = 0
    hand: Text = ""
    process_id: Text = ""
    state: Text = ""  # live | late | stalled | lost | finished | released
    directive: Text = "continue"  # continue | pause | stop
    lease: SlotLease
    # This tenure's fence (the slot's lease may have moved on to a later one); an answer
    # without one: the lease's.
    fence: WholeNumber = Field(default_factory=_from_lease("fence"))
    end_reason: Text | None = None
    # A claim's answer: the last checkpoint an earlier attempt on the slot reported (any JSON
    # value; None: none), and where it came from. Other attempt answers carry neither.
    checkpoint: Any = None
    checkpoint_from: CheckpointFrom | None = None


class Lease(WireModel, title="lease"):
    """A resource lease."""

    resource: Text
    holder: Text = ""
    process_id: Text = ""
    fence: WholeNumber
    state: Text = ""
    ttl_s: Number = 0.0
    expires_in_s: Number | None = None
    expires_at: Time = None
    server_time: Time = None
    # A pool's member (`Client.lease_from_pool`): the pool and the member granted; else None.
    pool: Text | None = None
    member: Text | None = None
    mode: Text = "exclusive"
    # A renewal's answer: other hands asking for this tenure (`groundcontrol_client.core.handoffs`;
    # absent from an older server's: none).
    handoff_requests: OrDefault[tuple[PendingHandoff, ...]] = ()


class FenceAnswer(WireModel, title="fence answer"):
    """Where one `<resource>@<fence> <holder>` stands (`POST /fences/verify`): `current`,
    `superseded` (the node's fence now, `when` it stopped being current and how it `ended`),
    `unknown`, or `not_holder` (current, but not the named holder's tenure)."""

    fence: Text  # `<resource>@<fence>`, without the holder
    resource: Text
    fence_number: WholeNumber
    status: Text
    current_fence: WholeNumber | None = None
    when: Time = None
    ended: Text = ""
    holder: Text = ""
    named_holder: Text = ""  # the holder the trailer names ("" for the older form)

    @property
    def current(self) -> bool:
        return self.status == "current"


class ReceiptFence(FenceAnswer, title="receipt's fence"):
    """A fence of a pushed commit as it stood when pushed; `not_holder` also when its tenure
    was not the pushing hand's."""

    process_id: Text = ""  # the process holding the tenure then


class ReceiptRefusal(WireModel, title="receipt's refusal"):
    """Why a pushed commit was refused: `kind` fence (not current, or not the pusher's), held
    (a path under another hand's tenure) or lapsed (under the pusher's own lost one)."""

    kind: Text
    message: Text
    path: Text = ""
    fence: Text = ""
    holder: Text = ""


class Receipt(WireModel, title="fence receipt"):
    """What the server recorded when a commit was pushed (`POST /fences/receipts`), signed: the
    repository, the commit, each fence's status then, the pushing hand and process, the time."""

    sha: Text
    repository: Text
    accepted: Flag
    at: Time = None
    hand: Text = ""
    process_id: Text = ""
    fences: OrDefault[list[ReceiptFence]] = []
    refusals: OrDefault[list[ReceiptRefusal]] = []
    signature: Text = ""


class RecordedReceipt(Receipt, title="recorded receipt"):
    """A push's receipt; `duplicate`: a re-push, answered with the receipt on record."""

    duplicate: Flag = False


class StoredReceipt(Receipt, title="stored receipt"):
    """A receipt read back (`GET /fences/receipts`); `signature_valid`: the row is as the
    server signed it."""

    signature_valid: Flag = False


class ReceiptsRecorded(WireModel, title="push receipts"):
    """A push's receipts, in the order sent; `accepted` when every commit was."""

    accepted: Flag
    receipts: list[RecordedReceipt]


class ReceiptsFound(WireModel, title="receipts on record"):
    receipts: list[StoredReceipt]


class HeldOver(WireModel, title="tenure over a path"):
    resource: Text
    fence: WholeNumber
    holder: Text = ""
    mode: Text = "exclusive"
    state: Text = ""


class Lapsed(WireModel, title="lapsed tenure"):
    """The asking hand's own last tenure over a path, ended without its release."""

    resource: Text
    fence: WholeNumber
    ended: Text = ""  # lost | broken
    when: Time = None


class PathAnswer(WireModel, title="path answer"):
    """Who holds a path now (`held`: tenures on it or a directory above it), and whether the
    asking hand's own last tenure over it lapsed while it holds none (`lapsed`)."""

    path: Text
    held: OrDefault[list[HeldOver]] = []
    lapsed: Lapsed | None = None


class Released(WireModel, title="release answer"):
    """A resource lease's release: whether it ended the tenure, and its row as it stands."""

    released: Flag
    lease: Lease | None = None


class Checked(WireModel, title="check answer"):
    """A fence check that passed: the lease as it stands (a stale or lost fence is an error)."""

    lease: Lease


class FencesVerified(WireModel, title="fence verification"):
    """Where each fence asked about stands, in the order asked; and each path (none from an
    older server)."""

    fences: list[FenceAnswer]
    paths: OrDefault[list[PathAnswer]] = []


class NotRenewed(WireModel, title="renew-all answer's not_renewed item"):
    """A tenure a renew-all did not renew (`resource`, `fence`), and why (its `code`:
    `lease_lost`, also for one taken over by another process of this hand). `lease` is its row
    as it stands now (None for a name in `held` never leased); the resource and fence are its
    lease's when the answer leaves them out."""

    lease: Lease | None = None
    code: Text = ""
    message: Text = ""
    resource: Text = Field(default_factory=_from_lease("resource", ""))
    fence: WholeNumber | None = Field(default_factory=_from_lease("fence"))


class RenewedAll(WireModel, title="renew-all answer"):
    """One renew-all: the leases it renewed, and those the process had lost. A lease released,
    broken or taken over is in neither: compare with the leases you believe you hold."""

    renewed: list[Lease]
    not_renewed: list[NotRenewed]

    def resources(self) -> list[str]:
        return [lease.resource for lease in self.renewed]

    def lost(self) -> list[str]:
        """The resources not renewed (lost, taken over, or otherwise ended)."""
        return [item.resource for item in self.not_renewed]


class Slot(WireModel, title="slot"):
    index: WholeNumber
    state: Text = ""  # open | held | done
    holder: Text | None = None
    fence: WholeNumber | None = None
    # The end of the holder's current renewal window (negative once it has passed: late).
    expires_in_s: Number | None = None


class SlotCounts(WireModel, title="run's slot counts"):
    total: WholeNumber = 0
    open: WholeNumber = 0
    held: WholeNumber = 0
    done: WholeNumber = 0


class Run(WireModel, title="run"):
    """A run as the runs list describes it: what it is, where, and how its slots stand."""

    id: WholeNumber
    title: Text = ""
    state: Text = ""  # open | closed | done
    lane: Lane = ""
    work_package: dict[str, Any] = {}  # id, key, title
    evidence_required: OrDefault[list[str]] = []
    heartbeat_interval_s: Number = 0.0
    grace_s: Number = 0.0
    slots: SlotCounts = SlotCounts()
    created_at: Time = None
    brief: Text = Field("", repr=False)  # in a run's own answer; not in the runs list
    # The least grade (hand < wrapper < ci) a finish's evidence of each kind needs.
    evidence_grades: OrDefault[dict[str, str]] = {}
    # The tags a hand must have to claim a slot (capability_missing otherwise).
    capabilities: OrDefault[list[str]] = []
    # 0 first (the ready queue's order), default 2; the runs it waits for (ascending ids; None
    # for another lane's, to a lane-limited key), and those of them not done yet: its slots
    # take claims once `waiting_for` is empty.
    priority: WholeNumber = 2
    depends_on: OrDefault[list[WholeNumber | None]] = []
    waiting_for: OrDefault[list[WholeNumber | None]] = []

    @model_validator(mode="before")
    @classmethod
    def _nested(cls, data: Any) -> Any:
        """The run answer's flat form ("work_package": its id, "work_package_key" and
        "work_package_title"; "slots": the total, "slots_by_state": {open, held, done}) read as
        the runs list's nested one ("work_package": {id, key, title}; "slots": {total, open,
        held, done})."""
        if not isinstance(data, Mapping):
            return data
        nested: dict[str, Any] = {}
        package = data.get("work_package")
        if not isinstance(package, Mapping):
            nested["work_package"] = {
                "id": package,
                "key": data.get("work_package_key"),
                "title": data.get("work_package_title"),
            }
        slots = data.get("slots")
        if not isinstance(slots, Mapping):
            by_state = data.get("slots_by_state") or {}
            if not isinstance(by_state, Mapping):
                raise PydanticCustomError(
                    "slots_by_state",
                    "slots_by_state is {found}, not an object",
                    {"found": repr(by_state)},
                )
            nested["slots"] = {"total": slots, **by_state}
        return ChainMap(nested, data)  # the answer's other fields as they are, not copied


class Me(WireModel, title="key description"):
    hand: Text = ""
    workspace: Text = ""
    scopes: OrDefault[list[str]] = []
    key_prefix: Text = ""
    lane: Lane | None = None
    # What the hand can do: a run that needs a tag it lacks refuses its claim.
    capabilities: OrDefault[list[str]] = []


class Brief(WireModel, title="brief"):
    """What an attempt is for: the run's brief (Markdown) and the evidence it must leave."""

    attempt: Attempt
    # The run's, from the answer's "run" object.
    run_id: WholeNumber = Field(0, validation_alias=AliasPath("run", "id"))
    title: Text = Field("", validation_alias=AliasPath("run", "title"))
    brief: Text = Field("", validation_alias=AliasPath("run", "brief"))
    evidence_required: OrDefault[list[str]] = Field(
        [], validation_alias=AliasPath("run", "evidence_required")
    )
    evidence_grades: OrDefault[dict[str, str]] = Field(
        {}, validation_alias=AliasPath("run", "evidence_grades")
    )
    work_package: OrDefault[dict[str, Any]] = {}
    lane: OrDefault[dict[str, Any]] = {}
    # The last checkpoint an earlier attempt on the slot reported (None: none), and its origin.
    checkpoint: Any = None
    checkpoint_from: CheckpointFrom | None = None


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


class ReportResult(WireModel, title="report's answer"):
    renewed: Flag = False
    attempt: Attempt
    handoff_requests: OrDefault[tuple[PendingHandoff, ...]] = ()


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
    if lease.state in ("free", ""):
        return f"{lease.resource}: free (fence {lease.fence}; the next holder gets a higher one)"
    if lease.state == "lost":
        return (
            f"{lease.resource}: lost by {hand_called(lease.holder)} at fence {lease.fence} "
            "(it stopped renewing; anyone may take it)"
        )
    window = describe_window(lease.expires_in_s).removeprefix(", live")
    return (
        f"{lease.resource}: held by {hand_called(lease.holder)} at fence {lease.fence}, "
        f"{lease.state}{window}"
    )


def describe_slot(slot: Slot) -> str:
    """One slot as a sentence, e.g. "slot 1: held by hand b at fence 3, live, its current
    window ends in 40 s"."""
    if slot.state == "held":
        window = describe_window(slot.expires_in_s)
        return (
            f"slot {slot.index}: held by {hand_called(slot.holder)} at fence {slot.fence}{window}"
        )
    facts = []
    if slot.fence:  # fence 0: never held
        facts.append(f"fence {slot.fence}")
    return f"slot {slot.index}: {slot.state}" + (f" ({', '.join(facts)})" if facts else "")


def describe_required(kinds: list[str], grades: dict[str, str]) -> str:
    """The evidence a run requires, each kind with the least grade it needs: "pull_request
    (seen by ci), commit", or "none"."""
    described = [kind + (f" (seen by {grades[kind]})" if kind in grades else "") for kind in kinds]
    return ", ".join(described) or "none"


def describe_waiting(run_ids: list[int | None]) -> str:
    """ "waits for run 10", "waits for run 10 and run 11": its slots take no claim until then (a
    run a lane-limited key may not see: "a run of another lane")."""
    said = [f"run {run}" if run is not None else "a run of another lane" for run in run_ids]
    if len(said) > 1:
        return f"waits for {', '.join(said[:-1])} and {said[-1]}"
    return f"waits for {''.join(said)}"


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
        + (f"; {describe_waiting(run.waiting_for)}" if run.waiting_for else "")
        + f"; evidence: {evidence}; heartbeat every {run.heartbeat_interval_s:g} s, "
        f"grace {run.grace_s:g} s"
    )
