"""A harness's hook event, decided: the session is touched (its row, in the statement that
checks the key), what the event registers is merged, the session's leases are renewed (every
event renews what the session holds, each lease once a tenth of its TTL has passed since its
last renewal: `engine.RENEW_DUE`; so a session whose events stop loses its leases within its
TTL, and the events of a busy one write no lease), and then:

- a write: each file it writes is named (`naming.place`) and leased for the session (held
  already, or under a directory it holds: nothing more); a file with no name, or one another
  holder has, denies the write with the sentence the model reads;
- a shell command that ran (each file it changed: the agent's side says which, since the
  server cannot see the disk), or a write a harness reports only after it happened: each file
  the session does not hold is leased for it, or, when another holder has it, reported to the
  model at once and recorded (`write_outside_lease`);
- the session's end: every lease it holds is released.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from apikit.errors import GroundControlError
from harnesses import naming, sessions
from harnesses.formats import ALLOW, HookEvent, Kind, Verdict
from leases import engine
from leases import services as lease_services
from leases.audit import record_event
from leases.clock import db_now
from leases.models import EventKind, LeaseMode
from leasing import hot

SENTENCE = "Ground Control: "
# A shell command's changed files judged per event, at most (the rest are named by count).
MAX_CHANGED = 256


def process_id_of(harness: str, session_id: str) -> str:
    return f"{harness}:{session_id}"


@dataclass(frozen=True)
class Disk:
    """What the agent's side says of its disk for this one event: it can resolve paths
    (`resolves`: a command hook), what the written paths resolve to (`resolved`), the files a
    shell command changed (`changed`), and whether a file in no repository may be written
    unleased (`outside_allowed`, its `GC_ALLOW_OUTSIDE_REPO=1`)."""

    resolves: bool = False
    resolved: dict[str, str] | None = None
    changed: list[str] | None = None
    outside_allowed: bool = False


@dataclass
class Decision:
    """The verdict, and what the agent's side may do about it (`harnesses.api` says it in
    headers, which a command hook reads and a harness's own HTTP hook ignores): resolve the
    `resolve` paths on its disk and ask again; keep a list of the dirty files before a shell
    command (`snapshot`); or send the files the command changed (`changed_needed`)."""

    verdict: Verdict
    process_id: str = ""
    resolve: list[str] = field(default_factory=list)
    snapshot: bool = False
    changed_needed: bool = False


def decide(
    caller: hot.Caller,
    event: HookEvent,
    *,
    harness: str,
    registration: sessions.Registration,
    disk: Disk,
    release_on_stop: bool = False,
) -> Decision:
    process_id = process_id_of(harness, event.session_id)
    lease_services.validate_name(process_id, field="session_id")
    params = caller.params()
    session = None
    if params is not None:
        session = sessions.touch(
            params, harness=harness, session_id=event.session_id, process_id=process_id
        )
    if session is None:
        caller.missed()
        caller.key()  # the key's own refusal
        raise AssertionError("a key that may take leases touched no session")  # pragma: no cover
    session = sessions.register(session, registration)
    if event.kind == Kind.END or (event.kind == Kind.STOP and release_on_stop):
        _release_all(caller, session)
        if event.kind == Kind.END:
            sessions.end(session)
        return Decision(ALLOW, process_id)
    renewed = hot.renew_due(params, process_id)
    if event.kind in (Kind.WRITE, Kind.AFTER_WRITE) and disk.resolves and disk.resolved is None:
        return _resolve_first(event, process_id)
    if event.kind == Kind.WRITE:
        return _write(caller, event, session, renewed, disk)
    if event.kind == Kind.SHELL:
        return Decision(ALLOW, process_id, snapshot=True)
    if event.kind == Kind.AFTER_WRITE:
        written = list(event.paths)
        return Decision(_after_shell(caller, event, session, renewed, written, disk), process_id)
    if event.kind == Kind.AFTER_SHELL:
        if disk.changed is None:
            return Decision(ALLOW, process_id, changed_needed=True)
        verdict = _after_shell(caller, event, session, renewed, disk.changed, disk)
        return Decision(verdict, process_id)
    return Decision(ALLOW, process_id)


def _covered(name: str, held: list[engine.LeaseSnapshot]) -> bool:
    """`name` is held by the session: its own exclusive tenure of it or of a directory above."""
    return any(
        lease.mode == LeaseMode.EXCLUSIVE
        and (
            lease.resource == name
            or (lease.resource.endswith("/") and name.startswith(lease.resource))
        )
        for lease in held
    )


def _acquire(caller: hot.Caller, session: sessions.Session, name: str) -> engine.LeaseSnapshot:
    data = hot.acquire.parse(
        {
            "resource": name,
            "process_id": session.process_id,
            "mode": LeaseMode.EXCLUSIVE.value,
            "ttl_s": session.ttl_s,
            "take_over": False,
            "wait_s": 0,
        }
    )
    return hot.acquire.granted(caller, data)


def _named(event: HookEvent, session: sessions.Session, path: str, disk: Disk) -> naming.Placed:
    return naming.place(path, event.cwd, session.repositories, session.links, disk.resolved)


def _resolve_first(event: HookEvent, process_id: str) -> Decision:
    """A command hook can resolve what the event writes on its disk: it is asked to, and this
    answer is a refusal, so that a hook that does not ask again lets nothing through."""
    return Decision(
        Verdict("deny", SENTENCE + "the hook did not resolve the paths the tool writes"),
        process_id,
        resolve=list(dict.fromkeys(event.paths)),
    )


def _write(
    caller: hot.Caller,
    event: HookEvent,
    session: sessions.Session,
    held: list[engine.LeaseSnapshot],
    disk: Disk,
) -> Decision:
    placed = [_named(event, session, path, disk) for path in event.paths]
    unplaced = [where for where in placed if where.name is None]
    if unplaced and not disk.outside_allowed:
        return Decision(Verdict("deny", SENTENCE + _unplaced(unplaced[0])), session.process_id)
    names = [where.name for where in placed if where.name is not None]
    taken: list[engine.LeaseSnapshot] = []
    for name in dict.fromkeys(names):
        if _covered(name, held):
            continue
        try:
            taken.append(_acquire(caller, session, name))
        except GroundControlError as refused:
            # The write does not happen: what it took for its other files is let go again.
            _release(caller, session, taken)
            verdict = Verdict("deny", SENTENCE + refused.message, {"code": refused.code})
            return Decision(verdict, session.process_id)
    return Decision(ALLOW, session.process_id)


def _unplaced(placed: naming.Placed) -> str:
    return (
        f"{placed.path} {placed.why}, and no other agent's writes to it can be kept out: write "
        "inside a registered repository, or register the one it is in (a command hook does: gctl "
        "hook install; or the X-GC-Repository header); GC_ALLOW_OUTSIDE_REPO=1 lets a command "
        "hook's writes outside every repository through unleased"
    )


def _after_shell(
    caller: hot.Caller,
    event: HookEvent,
    session: sessions.Session,
    held: list[engine.LeaseSnapshot],
    changed: list[str],
    disk: Disk,
) -> Verdict:
    """Each file the command changed: the session's already, leased for it now, or another
    holder's (said to the model, and recorded)."""
    theirs: list[str] = []
    for path in changed[:MAX_CHANGED]:
        placed = _named(event, session, path, disk)
        if placed.name is None:
            continue  # in no repository: no lease names it, nobody else's either
        if _covered(placed.name, held):
            continue
        try:
            _acquire(caller, session, placed.name)
        except GroundControlError as refused:
            theirs.append(refused.message)
            _record_outside(caller, session, placed.name, refused)
    if not theirs:
        return ALLOW
    more = len(changed) - MAX_CHANGED
    said = "; ".join(theirs) + (f"; and {more} more changed files unchecked" if more > 0 else "")
    return Verdict(
        "tell",
        SENTENCE
        + f"your {event.tool or 'shell'} command changed files another holder has: {said}. "
        "Undo your changes to them (git restore <file>) unless their holder agreed, or ask for "
        "a handoff (gctl handoff <file> --reason ...); nothing you write to them counts.",
    )


def _record_outside(
    caller: hot.Caller, session: sessions.Session, name: str, refused: GroundControlError
) -> None:
    key = caller.key()
    record_event(
        workspace_id=key.hand.workspace_id,
        kind=EventKind.WRITE_OUTSIDE_LEASE,
        at=db_now(),
        actor=session.holder,
        hand=session.holder,
        resource=name,
        fence=refused.fields.get("fence"),
        data={
            "process_id": session.process_id,
            "holder": refused.fields.get("holder"),
            "holder_process_id": refused.fields.get("process_id"),
            "code": refused.code,
        },
    )


def _release_all(caller: hot.Caller, session: sessions.Session) -> None:
    """Every lease the session holds, released."""
    renewed, _ = hot.renew_all.renewed(caller, session.process_id)
    _release(caller, session, renewed)


def _release(
    caller: hot.Caller, session: sessions.Session, leases: list[engine.LeaseSnapshot]
) -> None:
    """`leases` of the session released (one lost or taken over meanwhile is not its own)."""
    if not leases:
        return
    workspace_id = caller.key().hand.workspace_id
    for lease in leases:
        try:
            lease_services.lease_release(
                workspace_id=workspace_id,
                resource=lease.resource,
                holder=session.holder,
                fence=lease.fence,
                process_id=session.process_id,
            )
        except GroundControlError:
            pass  # lost or taken over meanwhile: nothing of it is the session's any more
