"""`gctl mcp`: Ground Control as tools for a model, over stdio (the official `mcp` SDK).

The model never manages a lease: this server holds every claim and resource lease the session
takes and heartbeats them in the background for as long as the session lasts. The model sees a
lease only through what the tools answer: a denial is a plain sentence it can act on ("held by
hand b (fence 8) for 40 s: wait, pick other work, or escalate"), and a lost lease or a
supervisor's directive is announced at the top of the next answer. When the session ends, what
it still holds is released.
"""

from __future__ import annotations

import functools
import logging
import signal
import sys
import threading
from collections.abc import Callable
from typing import Any, ParamSpec

from mcp.server.mcpserver import MCPServer
from mcp.types import CallToolResult, TextContent
from pydantic import BaseModel, Field

from groundcontrol_client.client import Client
from groundcontrol_client.errors import GroundControlError, describe_denial
from groundcontrol_client.models import Evidence
from groundcontrol_client.runtime import ClaimedAttempt, HeldLease

logger = logging.getLogger("groundcontrol_client.mcp")

INSTRUCTIONS = """\
Ground Control coordinates you with other agents. Claim a slot of a run before you work on it;
this server keeps your claim alive in the background, so you never renew anything yourself.
Read the brief, report progress now and then, and finish with the evidence the brief asks for
(links such as a pull request), or release with a reason if you cannot finish.
If a claim or a lease is denied: wait, pick other work, or escalate. Never work on something
whose lease you were told is lost; if the supervisor says stop, release and stop; if it says
pause, wait and check again with `status`.
"""

P = ParamSpec("P")


class EvidenceItem(BaseModel):
    kind: str = Field(description="the kind the brief asks for, e.g. pull_request")
    url: str = Field(description="an http(s) link to it")
    note: str = ""


def _text(text: str, *, error: bool = False) -> CallToolResult:
    return CallToolResult(content=[TextContent(type="text", text=text)], is_error=error)


class Session:
    """What one MCP session holds, and the notices the model has not seen yet."""

    def __init__(self, client: Client, *, process_id: str) -> None:
        self.client = client
        self.process_id = process_id
        self.lock = threading.RLock()
        self.attempts: dict[int, ClaimedAttempt] = {}
        self.leases: dict[str, HeldLease] = {}
        self._directives: dict[int, str] = {}

    def notices(self) -> list[str]:
        """Lost leases and changed directives since the last answer (each said once)."""
        lines: list[str] = []
        with self.lock:
            for attempt_id, attempt in list(self.attempts.items()):
                if attempt.lost:
                    del self.attempts[attempt_id]
                    lines.append(
                        f"NOTICE: your claim on attempt {attempt_id} was lost "
                        f"({attempt.lost_error}). Stop working on it: the slot may already "
                        "be someone else's."
                    )
                    continue
                directive = attempt.directive
                if directive != self._directives.get(attempt_id, "continue"):
                    self._directives[attempt_id] = directive
                    lines.append(
                        {
                            "stop": f"NOTICE: the supervisor says stop attempt {attempt_id}: "
                            "release it with a reason and stop working on it.",
                            "pause": f"NOTICE: the supervisor says pause attempt {attempt_id}: "
                            "wait (your claim is kept alive) and check `status` again later.",
                            "continue": f"NOTICE: the supervisor says continue attempt "
                            f"{attempt_id}.",
                        }.get(directive, f"NOTICE: attempt {attempt_id} directive: {directive}")
                    )
            for resource, lease in list(self.leases.items()):
                if lease.lost:
                    del self.leases[resource]
                    lines.append(
                        f"NOTICE: your lease on {resource} was lost ({lease.lost_error}). Do not "
                        "write to it any more."
                    )
        return lines

    def attempt(self, attempt_id: int | None) -> ClaimedAttempt:
        with self.lock:
            if attempt_id is not None:
                if attempt_id not in self.attempts:
                    raise LookupError(f"this session holds no attempt {attempt_id}.")
                return self.attempts[attempt_id]
            if len(self.attempts) == 1:
                return next(iter(self.attempts.values()))
            if not self.attempts:
                raise LookupError("this session holds no claim: claim a slot first.")
            ids = ", ".join(map(str, self.attempts))
            raise LookupError(f"this session holds several attempts ({ids}): say which.")

    def lease(self, resource: str) -> HeldLease:
        with self.lock:
            if resource not in self.leases:
                raise LookupError(f"this session holds no lease on {resource}.")
            return self.leases[resource]

    def close(self) -> None:
        """Release what the session still holds: it cannot be renewed after the session ends."""
        with self.lock:
            for attempt in self.attempts.values():
                attempt.release_quietly("the MCP session ended")
            for lease in self.leases.values():
                try:
                    lease.release()
                except GroundControlError as error:
                    logger.warning("lease %s: release failed: %s", lease.resource, error)
            self.attempts.clear()
            self.leases.clear()


def build_server(session: Session) -> MCPServer:
    # WARNING: stderr is the host's log; a line per HTTP request would drown what matters.
    server = MCPServer(name="groundcontrol", instructions=INSTRUCTIONS, log_level="WARNING")

    def tool(fn: Callable[P, str]) -> Callable[P, CallToolResult]:
        """Answer with the notices first; a refusal becomes a plain sentence, not a crash."""

        @functools.wraps(fn)
        def wrapper(*args: P.args, **kwargs: P.kwargs) -> CallToolResult:
            try:
                text, error = fn(*args, **kwargs), False
            except GroundControlError as refusal:
                text, error = describe_denial(refusal), True
            except LookupError as missing:
                text, error = str(missing.args[0]), True
            return _text("\n".join([*session.notices(), text]), error=error)

        wrapper.__annotations__["return"] = CallToolResult
        server.add_tool(wrapper)
        return wrapper

    @tool
    def list_open_slots(run_id: int) -> str:
        """The open slots of a run, which you may claim."""
        slots = session.client.slots(run_id, state="open")
        if not slots:
            return f"Run {run_id} has no open slot: wait, pick other work, or escalate."
        return f"Run {run_id} has open slots: {', '.join(str(s.index) for s in slots)}."

    @tool
    def claim(run_id: int, slot: int | None = None) -> str:
        """Claim an open slot of a run (the lowest, or `slot`). Kept alive in the background."""
        attempt = ClaimedAttempt(session.client, run_id, process_id=session.process_id, slot=slot)
        attempt.open()
        with session.lock:
            session.attempts[attempt.id] = attempt
        return (
            f"Claimed run {run_id} slot {attempt.slot} as attempt {attempt.id} (fence "
            f"{attempt.fence}). It is kept alive for you while this session runs. Read the brief "
            "next; when done, finish with the evidence it asks for."
        )

    @tool
    def read_brief(attempt_id: int | None = None) -> str:
        """The task of your claimed attempt (Markdown) and the evidence it must leave."""
        brief = session.attempt(attempt_id).brief()
        required = ", ".join(brief.evidence_required) or "none"
        return f"# {brief.title}\n\n{brief.brief.strip()}\n\nEvidence required: {required}."

    @tool
    def report_progress(
        message: str,
        percent: float | None = None,
        kind: str = "progress",
        attempt_id: int | None = None,
    ) -> str:
        """Tell the supervisor how it goes. `kind`: progress, blocker or note."""
        attempt = session.attempt(attempt_id)
        result = attempt.report(message, percent=percent, kind=kind)
        return f"Reported on attempt {attempt.id}. Directive: {result.attempt.directive}."

    @tool
    def finish(
        evidence: list[EvidenceItem], summary: str | None = None, attempt_id: int | None = None
    ) -> str:
        """Finish your attempt with evidence (links of the kinds the brief asks for)."""
        attempt = session.attempt(attempt_id)
        attempt.finish([Evidence(kind=e.kind, url=e.url, note=e.note) for e in evidence], summary)
        with session.lock:
            session.attempts.pop(attempt.id, None)
        return f"Finished attempt {attempt.id} with {len(evidence)} evidence item(s)."

    @tool
    def release(reason: str, attempt_id: int | None = None) -> str:
        """Give your slot back with a reason (you cannot finish, or were told to stop)."""
        attempt = session.attempt(attempt_id)
        with session.lock:
            session.attempts.pop(attempt.id, None)
        attempt.release(reason)
        return f"Released attempt {attempt.id}; the slot is open to others again."

    @tool
    def acquire_lease(resource: str, ttl_s: float = 300, wait_s: float | None = None) -> str:
        """Take a lease on a resource (a path like src/auth/, a lock name) before you change it.
        Kept alive in the background until you release it."""
        lease = HeldLease(
            session.client, resource, ttl_s=ttl_s, process_id=session.process_id, wait_s=wait_s
        )
        lease.open()
        with session.lock:
            session.leases[resource] = lease
        return (
            f"Acquired {resource} at fence {lease.fence}; it is kept alive for you. Release it "
            "when you are done with it."
        )

    @tool
    def release_lease(resource: str) -> str:
        """Release a resource lease you hold."""
        lease = session.lease(resource)
        with session.lock:
            session.leases.pop(resource, None)
        lease.release()
        return f"Released {resource}."

    @tool
    def check_lease(resource: str) -> str:
        """Is your lease on a resource still valid? Ask before a write that must not be stale."""
        lease = session.lease(resource)
        checked = lease.check()
        return f"Your lease on {resource} is valid at fence {checked.fence}."

    @tool
    def status() -> str:
        """What this session holds, and the directives on your attempts."""
        with session.lock:
            attempts = [
                f"attempt {a.id} (run {a.run_id} slot {a.slot}, fence {a.fence}): "
                f"directive {a.directive}"
                for a in session.attempts.values()
                if not a.lost
            ]
            leases = [f"lease {r} (fence {lease.fence})" for r, lease in session.leases.items()]
        return (
            "You hold: " + "; ".join(attempts + leases)
            if attempts or leases
            else ("You hold nothing.")
        )

    return server


def serve(client: Client, *, process_id: str, **_: Any) -> None:
    """Serve on stdin/stdout until the client closes the session; then release what is held."""
    session = Session(client, process_id=process_id)
    # A host that ends the session with SIGTERM still gets what was held released.
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))
    try:
        build_server(session).run("stdio")
    finally:
        session.close()
