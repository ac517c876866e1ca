"""`gctl mcp`: Ground Control as tools for a model, over stdio (the official `mcp` SDK).

The model never manages a lease: this server holds every claim and resource lease the session
takes and heartbeats them in the background for as long as the session lasts. The model sees a
lease only through what the tools answer: a denial is a plain sentence it can act on ("src/auth/
is held by hand b (fence 8), renewing; its current window ends in 40 s: wait, pick other work,
or escalate"), and a lost lease or a supervisor's directive is announced at the top of the next
answer. When the session ends, what it still holds is released.

Every tool says what it does and every parameter its meaning and range, so a model needs no
other instructions; arguments outside them are answered with a sentence naming the parameter
and what it takes, never with a validator's raw text.
"""

from __future__ import annotations

import contextlib
import functools
import json
import logging
import signal
import sys
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Annotated, Any, ClassVar, Literal, ParamSpec

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.types import CallToolResult, TextContent
from pydantic import BaseModel, Field, ValidationError

from groundcontrol_client.client import Client, __version__
from groundcontrol_client.errors import GroundControlError, describe
from groundcontrol_client.models import Evidence, describe_lease, describe_run
from groundcontrol_client.runtime import ClaimedAttempt, HeldLease

logger = logging.getLogger("groundcontrol_client.mcp")

INSTRUCTIONS = """\
Ground Control coordinates you with other agents. Find work with `list_runs`, claim a slot of a
run with `claim` before you work on it; this server keeps your claim alive in the background,
so you never renew anything yourself. Read the brief (`read_brief`), report progress now and
then (`report_progress`), and finish with the evidence the brief asks for (`finish`, with links
such as a pull request), or `release` with a reason if you cannot finish. Before you change a
shared resource (a directory, a migration lock), take a lease on it with `acquire_lease`.
If a claim or a lease is denied: wait, pick other work, or escalate. Never work on something
whose claim or lease you were told is lost; if the supervisor says stop, release and stop; if it
says pause, wait and check again with `status`.
"""

# The server's limits (docs/api.md), said in each parameter so a model stays inside them.
MAX_TEXT = 2000
MAX_RESOURCE = 512
MAX_TTL_S = 86_400
MAX_WAIT_S = 60

# Every number and flag is strict: JSON's own type only (lax mode would take `true` as run 1 and
# "12" as 12, acting on what the model did not mean). A float parameter still takes an integer.
RunId = Annotated[
    int, Field(ge=1, strict=True, description="The run's id (list_runs shows the open runs).")
]
AttemptId = Annotated[
    int | None,
    Field(
        ge=1,
        strict=True,
        description="Which of your attempts (from claim or status). Leave it out while this "
        "session holds one claim.",
    ),
]
Resource = Annotated[
    str,
    Field(
        min_length=1,
        max_length=MAX_RESOURCE,
        description="The resource's name, up to 512 characters: a path such as src/auth/, or "
        "a lock's name such as migrations.",
    ),
]
WaitS = Annotated[
    float | None,
    Field(
        ge=0,
        le=MAX_WAIT_S,
        strict=True,
        description="Seconds to wait, 0 to 60, if it is taken now (default: answer at once).",
    ),
]

P = ParamSpec("P")


class EvidenceItem(BaseModel):
    kind: str = Field(min_length=1, description="The kind the brief asks for, e.g. pull_request.")
    url: str = Field(min_length=1, description="An http(s) link to it.")
    note: str = Field(default="", description="Optional: a few words about it.")

    # What each field takes, as `invalid_arguments` says it for an item that is wrong.
    TAKES: ClassVar[dict[str, str]] = {
        "kind": "a short string, the kind the brief asks for (e.g. pull_request)",
        "url": "an http(s) link to it, such as the pull request's address",
        "note": "optional text, a few words about it",
    }
    EXAMPLE: ClassVar[str] = '{"kind": "pull_request", "url": "<its link>"}'


# The objects a parameter holds, by their JSON schema's name, for what their fields take.
_OBJECTS: dict[str, type[EvidenceItem]] = {"EvidenceItem": EvidenceItem}


def _text(text: str, *, error: bool = False) -> CallToolResult:
    return CallToolResult(content=[TextContent(type="text", text=text)], is_error=error)


def _cap(text: str) -> str:
    return text[:1].upper() + text[1:]


def _at(moment: datetime) -> str:
    return moment.strftime("%Y-%m-%d %H:%M:%S UTC")


@dataclass(frozen=True)
class LostClaim:
    run_id: int
    attempt_id: int
    at: datetime
    why: str

    def sentence(self) -> str:
        return (
            f"your claim on run {self.run_id} (attempt {self.attempt_id}) was lost at "
            f"{_at(self.at)}; claim again only if the work is still needed."
        )


@dataclass(frozen=True)
class LostLease:
    resource: str
    at: datetime
    why: str

    def sentence(self) -> str:
        return (
            f"your lease on {self.resource} was lost at {_at(self.at)}; acquire it again only "
            "if you still need it, and check first what changed meanwhile."
        )


class Session:
    """What one MCP session holds, what it lost, and the notices the model has not seen yet."""

    def __init__(self, client: Client, *, process_id: str) -> None:
        self.client = client
        self.process_id = process_id
        self.lock = threading.RLock()
        self.attempts: dict[int, ClaimedAttempt] = {}
        self.leases: dict[str, HeldLease] = {}
        self.lost_claims: dict[int, LostClaim] = {}
        self.lost_leases: dict[str, LostLease] = {}
        self._directives: dict[int, str] = {}
        self._pending: list[str] = []
        # Runs with a claim in flight (how many), so a second claim waits for none of them.
        self._claiming: dict[int, int] = {}

    @contextlib.contextmanager
    def reserving(self, run_id: int, another_slot: bool) -> Iterator[None]:
        """Reserve `run_id` for one claim: refused (`LookupError`, a sentence) while this
        session holds a slot of it or is claiming one, unless `another_slot`."""
        with self.lock:
            if not another_slot:
                mine = [a for a in self.attempts.values() if a.run_id == run_id]
                if mine:
                    held = mine[0]
                    raise LookupError(
                        f"You already hold slot {held.slot} of run {run_id} (attempt "
                        f"{held.id}): work on that one. Claim another slot of the same run only "
                        "if the brief asks for it (another_slot: true)."
                    )
                if self._claiming.get(run_id):
                    raise LookupError(
                        f"This session is claiming a slot of run {run_id} already (another "
                        "call, still waiting for its answer): wait for it, then work on that "
                        "slot. Claim another slot of the same run only if the brief asks for it "
                        "(another_slot: true)."
                    )
            self._claiming[run_id] = self._claiming.get(run_id, 0) + 1
        try:
            yield
        finally:
            with self.lock:
                self._claiming[run_id] -= 1
                if not self._claiming[run_id]:
                    del self._claiming[run_id]

    def observe(self) -> None:
        """Move what was lost out of what the session holds, with the time it learned so (the
        server has ended it by then, or will before anyone else could claim it), and queue a
        notice for each loss and each changed directive."""
        now = datetime.now(UTC)
        with self.lock:
            for attempt_id, attempt in list(self.attempts.items()):
                if attempt.lost:
                    del self.attempts[attempt_id]
                    why = attempt.lost_error.message if attempt.lost_error else "lost"
                    lost = LostClaim(attempt.run_id, attempt_id, now, why)
                    self.lost_claims[attempt_id] = lost
                    self._pending.append(
                        f"NOTICE: {_cap(lost.sentence())} ({why}.) Stop working on it: "
                        "the slot may already be someone else's."
                    )
                    continue
                directive = attempt.directive
                if directive != self._directives.get(attempt_id, "continue"):
                    self._directives[attempt_id] = directive
                    self._pending.append(
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
                    why = lease.lost_error.message if lease.lost_error else "lost"
                    gone = LostLease(resource, now, why)
                    self.lost_leases[resource] = gone
                    self._pending.append(
                        f"NOTICE: {_cap(gone.sentence())} ({why}.) Do not write to it any more."
                    )

    def notices(self) -> list[str]:
        """Lost leases and changed directives since the last answer (each said once)."""
        self.observe()
        with self.lock:
            lines, self._pending = self._pending, []
        return lines

    def attempt(self, attempt_id: int | None) -> ClaimedAttempt:
        self.observe()
        with self.lock:
            if attempt_id is not None:
                if attempt_id in self.attempts:
                    return self.attempts[attempt_id]
                if attempt_id in self.lost_claims:
                    raise LookupError(_cap(self.lost_claims[attempt_id].sentence()))
                raise LookupError(f"This session holds no attempt {attempt_id}.")
            if len(self.attempts) == 1:
                return next(iter(self.attempts.values()))
            if self.attempts:
                ids = ", ".join(map(str, self.attempts))
                raise LookupError(f"This session holds several attempts ({ids}): say which.")
            if self.lost_claims:
                latest = max(self.lost_claims.values(), key=lambda lost: lost.at)
                raise LookupError(_cap(latest.sentence()))
            raise LookupError("This session holds no claim: claim a slot first.")

    def lease(self, resource: str) -> HeldLease:
        self.observe()
        with self.lock:
            if resource in self.leases:
                return self.leases[resource]
            if resource in self.lost_leases:
                raise LookupError(_cap(self.lost_leases[resource].sentence()))
            raise LookupError(f"This session holds no lease on {resource}.")

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


# --- arguments outside a parameter's range, said as a sentence ---------------------------------

_TYPES = {
    "integer": "a whole number",
    "number": "a number",
    "string": "text",
    "boolean": "true or false",
    "array": "a list",
    "object": "an object",
}


def _allowed(schema: dict[str, Any], defs: dict[str, Any]) -> str:
    """What a parameter takes, from its JSON schema: "a number from 0 to 100", "one of
    progress, blocker, note, heartbeat", "a list of {kind, url, note (optional)}"."""
    options = [s for s in schema.get("anyOf", [schema]) if s.get("type") != "null"]
    described = []
    for option in options:
        if "enum" in option or "const" in option:
            values = option.get("enum") or [option.get("const")]
            described.append("one of " + ", ".join(map(str, values)))
            continue
        text = _TYPES.get(str(option.get("type")), "a value")
        low, high = option.get("minimum"), option.get("maximum")
        if low is not None and high is not None:
            text += f" from {low:g} to {high:g}"
        elif low is not None:
            text += f" of at least {low:g}"
        elif high is not None:
            text += f" of at most {high:g}"
        if option.get("maxLength"):
            text += f" of at most {option['maxLength']} characters"
        if option.get("minLength"):
            text += ", not empty"
        if option.get("minItems"):
            text += f" of at least {option['minItems']} item(s)"
        items = option.get("items")
        if isinstance(items, dict) and "$ref" in items:
            model = defs.get(items["$ref"].rsplit("/", 1)[-1], {})
            required = set(model.get("required", []))
            names = [n if n in required else f"{n} (optional)" for n in model.get("properties", {})]
            text += ", each {" + ", ".join(names) + "}"
        described.append(text)
    return " or ".join(described) or "a value"


def _shown(value: Any) -> str:
    if value is None or isinstance(value, bool):
        return json.dumps(value)  # JSON's words (true, null) for what the model sent
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _inner_problem(
    name: str, loc: list[str], item: dict[str, Any], schema: dict[str, Any], defs: dict[str, Any]
) -> str:
    """A sentence for a wrong value inside a list parameter (`evidence[0].url`), from the
    schema of the objects it holds, never pydantic's text (which names internal classes)."""
    items = schema.get("items")
    ref = items.get("$ref", "") if isinstance(items, dict) else ""
    model_name = ref.rsplit("/", 1)[-1]
    model = defs.get(model_name, {})
    fields = list(model.get("properties", {}))
    takes = getattr(_OBJECTS.get(model_name), "TAKES", {})
    example = getattr(_OBJECTS.get(model_name), "EXAMPLE", "")
    required = set(model.get("required", []))
    shape = "{" + ", ".join(f if f in required else f"{f} (optional)" for f in fields) + "}"
    if not fields:  # not a list of objects: say what the parameter takes as a whole
        return f"{name} is not valid: {loc[0]} must be {_allowed(schema, defs)}"
    if len(loc) == 2 or loc[2] not in fields:  # the item itself is not such an object
        if len(loc) > 2:
            return f"{name} is not a field of an item (each is {shape})"
        such = f", such as {example}" if example else ""
        return f"{name} must be an object {shape}{such}, not {_shown(item.get('input'))}"
    field = loc[2]
    what = takes.get(field) or _allowed(model["properties"][field], defs)
    if item.get("type") == "missing":
        return f"{name} is required: {what}"
    return f"{name} must be {what}, not {_shown(item.get('input'))}"


def invalid_arguments(tool: str, error: ValidationError, parameters: dict[str, Any]) -> str:
    """The plain sentence for arguments the tool's schema refuses: each parameter named, with
    what it takes (pydantic's own text carries links and internals a model should not see)."""
    properties = parameters.get("properties", {})
    defs = parameters.get("$defs", {})
    problems: list[str] = []
    for item in error.errors(include_url=False):
        loc = [str(part) for part in item.get("loc", ())]
        if not loc:
            continue
        top = loc[0]
        name = top + "".join(f"[{part}]" if part.isdigit() else f".{part}" for part in loc[1:])
        if top not in properties:
            problems.append(f"{name} is not a parameter of {tool}")
            continue
        if len(loc) > 1:  # inside a list or an object
            problems.append(_inner_problem(name, loc, item, properties[top], defs))
            continue
        allowed = _allowed(properties[top], defs)
        if item.get("type") == "missing":
            problems.append(f"{name} is required: {allowed}")
        else:
            problems.append(f"{name} must be {allowed}, not {_shown(item.get('input'))}")
    unique = list(dict.fromkeys(problems))
    return f"{tool} was not run: {'; '.join(unique)}. Call it again with valid arguments."


class GroundControlMCP(MCPServer):
    """The SDK's server, with argument errors answered as a sentence (the SDK answers
    pydantic's text, links included)."""

    def __init__(self, answer: Callable[[str, bool], CallToolResult], **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._answer = answer

    async def call_tool(self, name: str, arguments: dict[str, Any], context: Any = None) -> Any:
        try:
            return await super().call_tool(name, arguments, context)
        except ToolError as error:
            tool = self._tool_manager.get_tool(name)
            if tool is None or not isinstance(error.__cause__, ValidationError):
                raise
            return self._answer(invalid_arguments(name, error.__cause__, tool.parameters), True)


# --- the tools ---------------------------------------------------------------------------------


def build_server(session: Session) -> MCPServer:
    def answer(text: str, error: bool) -> CallToolResult:
        return _text("\n".join([*session.notices(), text]), error=error)

    # WARNING: stderr is the host's log; a line per HTTP request would drown what matters.
    server = GroundControlMCP(
        answer,
        name="groundcontrol",
        version=__version__,
        instructions=INSTRUCTIONS,
        log_level="WARNING",
    )

    def tool(fn: Callable[P, str]) -> Callable[P, CallToolResult]:
        """Answer with the notices first; a refusal becomes a plain sentence, not a crash."""

        @functools.wraps(fn)
        def wrapper(*args: P.args, **kwargs: P.kwargs) -> CallToolResult:
            session.observe()
            try:
                text, error = fn(*args, **kwargs), False
            except GroundControlError as refusal:
                text, error = describe(refusal), True
            except LookupError as missing:
                text, error = str(missing.args[0]), True
            except Exception as crash:  # a bug here must not reach the model as a traceback
                logger.exception("tool %s failed", fn.__name__)
                text = (
                    f"{fn.__name__} failed inside Ground Control's MCP server "
                    f"({type(crash).__name__}); try again, or escalate."
                )
                error = True
            return answer(text, error)

        wrapper.__annotations__["return"] = CallToolResult
        server.add_tool(wrapper)
        return wrapper

    @tool
    def list_runs(
        state: Annotated[
            Literal["open", "closed", "done", "all"],
            Field(
                description="open (default: runs that take claims), closed (stopped by the "
                "supervisor), done (every slot finished), or all."
            ),
        ] = "open",
        lane: Annotated[
            str | None,
            Field(description="Only this lane's runs (the lane's slug). Default: every lane."),
        ] = None,
    ) -> str:
        """The runs you may work on, with how many of their slots are open. Claim one with
        `claim`; a run with no open slot has every slot held or done."""
        runs = session.client.runs(state=None if state == "all" else state, lane=lane)
        where = f" in lane {lane}" if lane else ""
        if not runs:
            which = "no runs" if state == "all" else f"no {state} runs"
            return f"There are {which}{where}: wait, or escalate to your supervisor."
        with session.lock:
            held = {a.run_id: a for a in session.attempts.values()}
        lines = []
        for run in runs:
            line = describe_run(run)
            if run.id in held:
                line += f" (you hold slot {held[run.id].slot} as attempt {held[run.id].id})"
            lines.append(f"- {line}.")
        title = "Runs" if state == "all" else f"{state.capitalize()} runs"
        return f"{title}{where}:\n" + "\n".join(lines)

    @tool
    def list_open_slots(run_id: RunId) -> str:
        """The open slots of a run, which you may claim."""
        slots = session.client.slots(run_id, state=None)
        open_ = [s for s in slots if s.state == "open"]
        if open_:
            return f"Run {run_id} has open slots: {', '.join(str(s.index) for s in open_)}."
        held = [s for s in slots if s.state == "held"]
        done = [s for s in slots if s.state == "done"]
        if slots and len(done) == len(slots):
            return f"Run {run_id} is done: every slot was finished. Pick other work."
        windows = [s.expires_in_s for s in held if s.expires_in_s is not None]
        soonest = (
            f"; the soonest holder's current window ends in {max(min(windows), 0):.0f} s"
            if windows
            else ""
        )
        return (
            f"Run {run_id} has no open slot ({len(held)} held, {len(done)} done{soonest}): "
            "wait, pick other work, or escalate."
        )

    @tool
    def claim(
        run_id: RunId,
        slot: Annotated[
            int | None,
            Field(
                ge=0,
                strict=True,
                description="A particular slot (from 0). Default: the lowest open one.",
            ),
        ] = None,
        wait_s: Annotated[
            float | None,
            Field(
                ge=0,
                le=MAX_WAIT_S,
                strict=True,
                description="If every slot is taken, keep asking for up to this many seconds "
                "(0 to 60). Default: answer at once.",
            ),
        ] = None,
        another_slot: Annotated[
            bool,
            Field(
                strict=True,
                description="Claim a further slot of a run this session already holds a slot "
                "of. Leave it false unless the brief asks you to work several slots at once.",
            ),
        ] = False,
    ) -> str:
        """Claim an open slot of a run, so that its work is yours. The claim is kept alive in
        the background for as long as this session runs; if the session dies, the claim lapses
        after the run's heartbeat interval and grace, and the slot goes to someone else."""
        attempt = ClaimedAttempt(
            session.client, run_id, process_id=session.process_id, slot=slot, wait=wait_s
        )
        # The check and the claim are one step: the run is reserved until the claim is
        # answered, so two tool calls at once (parallel tool use) never take two slots.
        with session.reserving(run_id, another_slot):
            attempt.open()
            with session.lock:
                session.attempts[attempt.id] = attempt
        return (
            f"Claimed run {run_id} slot {attempt.slot} as attempt {attempt.id} (fence "
            f"{attempt.fence}). It is kept alive for you while this session runs. Read the brief "
            "next; when done, finish with the evidence it asks for."
        )

    @tool
    def read_brief(attempt_id: AttemptId = None) -> str:
        """The task of your claimed attempt (Markdown) and the evidence it must leave."""
        brief = session.attempt(attempt_id).brief()
        required = ", ".join(brief.evidence_required) or "none"
        return f"# {brief.title}\n\n{brief.brief.strip()}\n\nEvidence required: {required}."

    @tool
    def report_progress(
        message: Annotated[
            str,
            Field(
                max_length=MAX_TEXT,
                description="What happened, for the supervisor (up to 2000 characters).",
            ),
        ],
        percent: Annotated[
            float | None,
            Field(ge=0, le=100, strict=True, description="How far along the work is, 0 to 100."),
        ] = None,
        kind: Annotated[
            Literal["progress", "blocker", "note", "heartbeat"],
            Field(
                description="progress (default); blocker: you are stuck, say on what; note: "
                "anything else worth keeping; heartbeat: only that you are alive (never "
                "needed: this session heartbeats for you)."
            ),
        ] = "progress",
        attempt_id: AttemptId = None,
    ) -> str:
        """Tell the supervisor how the work goes. The answer carries the supervisor's directive
        (continue, pause or stop)."""
        attempt = session.attempt(attempt_id)
        result = attempt.report(message, percent=percent, kind=kind)
        return f"Reported on attempt {attempt.id}. Directive: {result.attempt.directive}."

    @tool
    def finish(
        evidence: Annotated[
            list[EvidenceItem],
            Field(
                min_length=1,
                description="The evidence the brief asks for: one {kind, url, note?} per item, "
                "e.g. {kind: pull_request, url: https://…}.",
            ),
        ],
        summary: Annotated[
            str | None,
            Field(max_length=MAX_TEXT, description="What was done, in a sentence or two."),
        ] = None,
        attempt_id: AttemptId = None,
    ) -> str:
        """Finish your attempt with evidence (links of the kinds the brief asks for). The slot
        is done: nobody claims it again."""
        attempt = session.attempt(attempt_id)
        attempt.finish([Evidence(kind=e.kind, url=e.url, note=e.note) for e in evidence], summary)
        with session.lock:
            session.attempts.pop(attempt.id, None)
        return f"Finished attempt {attempt.id} with {len(evidence)} evidence item(s)."

    @tool
    def release(
        reason: Annotated[
            str,
            Field(
                min_length=1,
                max_length=MAX_TEXT,
                description="Why you give it back, for the supervisor and the next hand.",
            ),
        ],
        attempt_id: AttemptId = None,
    ) -> str:
        """Give your slot back with a reason (you cannot finish, or were told to stop). The slot
        is open to others at once."""
        attempt = session.attempt(attempt_id)
        with session.lock:
            session.attempts.pop(attempt.id, None)
        attempt.release(reason)
        return f"Released attempt {attempt.id}; the slot is open to others again."

    @tool
    def acquire_lease(
        resource: Resource,
        ttl_s: Annotated[
            float,
            Field(
                ge=1,
                le=MAX_TTL_S,
                strict=True,
                description="Seconds the lease lasts without renewal (1 to 86400, default "
                "300). This session renews it in the background, so it matters only if the "
                "session dies: the lease then lapses ttl_s after the last renewal, and others "
                "may take it.",
            ),
        ] = 300,
        wait_s: WaitS = None,
    ) -> str:
        """Take a lease on a resource (a path like src/auth/, a lock's name) before you change
        it, so no other agent changes it meanwhile. Kept alive in the background until you
        release it."""
        with session.lock:
            held = session.leases.get(resource)
        if held is not None:
            return f"You already hold {resource} at fence {held.fence}; it is kept alive for you."
        lease = HeldLease(
            session.client, resource, ttl_s=ttl_s, process_id=session.process_id, wait_s=wait_s
        )
        lease.open()
        with session.lock:
            session.leases[resource] = lease
            session.lost_leases.pop(resource, None)
        return (
            f"Acquired {resource} at fence {lease.fence}; it is kept alive for you. Release it "
            "when you are done with it."
        )

    @tool
    def release_lease(resource: Resource) -> str:
        """Release a resource lease you hold: others may take it at once."""
        lease = session.lease(resource)
        with session.lock:
            session.leases.pop(resource, None)
        lease.release()
        return f"Released {resource}."

    @tool
    def check_lease(resource: Resource) -> str:
        """Is your lease on a resource still valid? Ask right before a write that must not
        come from a stale holder."""
        lease = session.lease(resource)
        checked = lease.check()
        return f"Your lease on {resource} is valid at fence {checked.fence}."

    @tool
    def list_leases(
        prefix: Annotated[
            str | None,
            Field(description="Only resources whose name starts with this, e.g. src/."),
        ] = None,
        holder: Annotated[
            str | None, Field(description="Only leases this hand holds (a hand's name).")
        ] = None,
    ) -> str:
        """The workspace's resource leases: who holds what, so you can pick work nobody is
        changing. Yours are marked."""
        leases = [
            lease
            for lease in session.client.leases(prefix=prefix, holder=holder)
            if lease.holder and lease.state not in ("free", "lost")
        ]
        if not leases:
            return "Nobody holds a resource lease" + (f" under {prefix}." if prefix else ".")
        with session.lock:
            mine = {r: lease.fence for r, lease in session.leases.items()}
        lines = [
            f"- {describe_lease(lease)}"
            + (" (yours)" if mine.get(lease.resource) == lease.fence else "")
            + "."
            for lease in leases
        ]
        return "Resource leases:\n" + "\n".join(lines)

    @tool
    def list_my_leases() -> str:
        """The resource leases this session holds (kept alive for you), and those it lost."""
        with session.lock:
            held = [
                f"- {r} at fence {lease.fence} (ttl {lease.ttl_s:g} s, kept alive for you)."
                for r, lease in session.leases.items()
            ]
            lost = [f"- {gone.sentence()}" for gone in session.lost_leases.values()]
        if not held and not lost:
            return "This session holds no resource lease."
        text = "You hold:\n" + "\n".join(held) if held else "You hold no resource lease."
        return text + ("\nLost:\n" + "\n".join(lost) if lost else "")

    @tool
    def status() -> str:
        """What this session holds, the directives on your attempts, what it lost, and the
        server's version."""
        with session.lock:
            attempts = [
                f"attempt {a.id} (run {a.run_id} slot {a.slot}, fence {a.fence}): "
                f"directive {a.directive}"
                for a in session.attempts.values()
            ]
            leases = [f"lease {r} (fence {lease.fence})" for r, lease in session.leases.items()]
            lost = [c.sentence() for c in session.lost_claims.values()] + [
                lease.sentence() for lease in session.lost_leases.values()
            ]
        lines = [
            "You hold: " + "; ".join(attempts + leases)
            if attempts or leases
            else ("You hold nothing.")
        ]
        lines += [f"Lost: {sentence}" for sentence in lost]
        lines.append(f"(Ground Control MCP server, groundcontrol-client {__version__}.)")
        return "\n".join(lines)

    return server


def serve(client: Client, *, process_id: str) -> None:
    """Serve on stdin/stdout until the client closes the session; then release what is held."""
    session = Session(client, process_id=process_id)
    # A host that ends the session with SIGTERM still gets what was held released.
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))
    try:
        build_server(session).run("stdio")
    finally:
        session.close()
