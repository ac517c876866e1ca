"""The MCP tools, each answering the session's notices first and a refusal as a sentence, and
the server that registers them."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Annotated, Any, Literal, ParamSpec, Protocol

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.server.stdio import stdio_server
from mcp.types import CallToolResult, TextContent
from mcp.types import Tool as MCPTool
from pydantic import Field, ValidationError

from groundcontrol_client.core.checkpoints import describe_inherited
from groundcontrol_client.core.errors import GroundControlError, describe
from groundcontrol_client.core.loop import attempt_notices, cost_fields
from groundcontrol_client.core.models import (
    Evidence,
    describe_lease,
    describe_required,
    describe_run,
)
from groundcontrol_client.core.sending import __version__
from groundcontrol_client.core.when import now_utc
from groundcontrol_client.mcp.friction import RecentRefusals, register_friction_tool
from groundcontrol_client.mcp.handoffs import register_handoff_tools
from groundcontrol_client.mcp.parameters import (
    MAX_CHECKPOINT_BYTES,
    MAX_TEXT,
    MAX_TTL_S,
    MAX_WAIT_S,
    AttemptId,
    CostUsd,
    EvidenceItem,
    Resource,
    RunId,
    TokensIn,
    TokensOut,
    WaitS,
    invalid_arguments,
)
from groundcontrol_client.mcp.session import Session, logger
from groundcontrol_client.mcp.stdin import loop_stdin
from groundcontrol_client.runtime.hand import ClaimedAttempt, PoolLease

INSTRUCTIONS = """\
Ground Control coordinates you with other agents. Find work with `list_runs`, claim a slot of a
run with `claim` before you work on it; this server keeps your claim alive in the background,
so you never renew anything yourself. Read the brief (`read_brief`), report progress now and
then (`report_progress`), and finish with the evidence the brief asks for (`finish`, with links
such as a pull request), or `release` with a reason if you cannot finish. Before you change a
shared resource (a directory, a migration lock), take a lease on it with `acquire_lease`; for
one of a pool of interchangeable things (a port, a test database), take a member of the pool
with `lease_from_pool`.
If a claim or a lease is denied: wait, pick other work, escalate, or ask its holder
(`ask_handoff`). Never work on something
whose claim or lease you were told is lost; if the supervisor says stop, release and stop; if it
says pause, wait and check again with `status`. When something costs you time (a lock held too
long, a refusal you did not expect, a flaky tool), tell the supervisor with `file_friction`.
"""

P = ParamSpec("P")


def _text(text: str, *, error: bool = False) -> CallToolResult:
    return CallToolResult(content=[TextContent(type="text", text=text)], is_error=error)


class WrappedTools(Protocol):
    """Tools served beside Ground Control's own, by another MCP server (`gctl mcp --wrap`)."""

    instructions: str

    async def list_tools(self) -> list[MCPTool]: ...

    def input_schema(self, name: str) -> dict[str, Any] | None: ...

    async def call_tool(self, name: str, arguments: dict[str, Any]) -> CallToolResult: ...


class GroundControlMCP(MCPServer):
    """The SDK's server, with argument errors answered as a sentence (the SDK answers
    pydantic's text, links included), and another server's tools beside its own when it wraps
    one (a name of its own wins)."""

    def __init__(
        self,
        answer: Callable[[str, bool], CallToolResult],
        wrapped: WrappedTools | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self._answer = answer
        self._wrapped = wrapped

    async def run_stdio_async(self) -> None:
        """The SDK's stdio transport, with stdin read by the event loop (`mcp_stdin`), so that
        a server ending on its own does not wait for the host's next message."""
        async with (
            loop_stdin() as stdin,
            stdio_server(stdin=stdin) as (read_stream, write_stream),
        ):
            low = self._lowlevel_server
            await low.run(read_stream, write_stream, low.create_initialization_options())

    def _is_wrapped(self, name: str) -> bool:
        return self._wrapped is not None and self._tool_manager.get_tool(name) is None

    async def list_tools(self) -> list[MCPTool]:
        own = await super().list_tools()
        if self._wrapped is None:
            return own
        names = {tool.name for tool in own}
        return own + [t for t in await self._wrapped.list_tools() if t.name not in names]

    def _tool_input_schema(self, name: str) -> dict[str, Any] | None:
        if self._wrapped is not None and self._is_wrapped(name):
            return self._wrapped.input_schema(name)
        return super()._tool_input_schema(name)

    async def call_tool(self, name: str, arguments: dict[str, Any], context: Any = None) -> Any:
        if self._wrapped is not None and self._is_wrapped(name):
            return await self._wrapped.call_tool(name, arguments)
        try:
            return await super().call_tool(name, arguments, context)
        except ToolError as error:
            tool = self._tool_manager.get_tool(name)
            if tool is None or not isinstance(error.__cause__, ValidationError):
                raise
            return self._answer(invalid_arguments(name, error.__cause__, tool.parameters), True)


def with_notices(session: Session, result: CallToolResult) -> CallToolResult:
    """`result` with the session's notices first, as every answer of Ground Control's tools."""
    notices = session.notices()
    if not notices:
        return result
    blocks = [TextContent(type="text", text="\n".join(notices)), *result.content]
    return result.model_copy(update={"content": blocks})


# --- the tools ---------------------------------------------------------------------------------


def build_server(session: Session, wrapped: WrappedTools | None = None) -> MCPServer:
    """Ground Control's tools for `session`; with `wrapped`, another server's tools beside."""

    def answer(text: str, error: bool) -> CallToolResult:
        return _text("\n".join([*session.notices(), text]), error=error)

    # WARNING: stderr is the host's log; a line per HTTP request would drown what matters.
    server = GroundControlMCP(
        answer,
        wrapped,
        name="groundcontrol",
        version=__version__,
        instructions=INSTRUCTIONS + (f"\n{wrapped.instructions}" if wrapped else ""),
        log_level="WARNING",
    )

    recent = RecentRefusals()

    def tool(fn: Callable[P, str]) -> Callable[P, CallToolResult]:
        """Answer with the notices first; a refusal becomes a plain sentence, not a crash."""

        @functools.wraps(fn)
        def wrapper(*args: P.args, **kwargs: P.kwargs) -> CallToolResult:
            session.observe()
            try:
                text, error = fn(*args, **kwargs), False
            except GroundControlError as refusal:
                recent.saw(refusal)
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
        resume = (
            " An earlier attempt on this slot left a checkpoint: read the brief to resume from it."
            if attempt.inherited_checkpoint is not None
            else ""
        )
        return (
            f"Claimed run {run_id} slot {attempt.slot} as attempt {attempt.id} (fence "
            f"{attempt.fence}). It is kept alive for you while this session runs. Read the brief "
            f"next; when done, finish with the evidence it asks for.{resume}"
        )

    @tool
    def read_brief(attempt_id: AttemptId = None) -> str:
        """The task of your claimed attempt (Markdown), the evidence it must leave, and the
        checkpoint an earlier attempt on the slot left (where its work stood), if any."""
        brief = session.attempt(attempt_id).brief()
        required = describe_required(brief.evidence_required, brief.evidence_grades)
        inherited = describe_inherited(brief.checkpoint, brief.checkpoint_from, now_utc())
        resume = "\nResume from it rather than start over." if brief.checkpoint is not None else ""
        return (
            f"# {brief.title}\n\n{brief.brief.strip()}\n\nEvidence required: {required}.\n\n"
            f"{inherited[0].upper()}{inherited[1:]}{resume}"
        )

    @tool
    def report_progress(
        message: Annotated[
            str,
            Field(
                max_length=MAX_TEXT,
                description=f"What happened, for the supervisor (up to {MAX_TEXT} characters).",
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
        tokens_in: TokensIn = None,
        tokens_out: TokensOut = None,
        cost_usd: CostUsd = None,
        checkpoint: Annotated[
            Any,
            Field(
                description='Where the work stands, as JSON (an object such as {"step": 3, '
                '"done": ["a.py"]}), so that whoever takes this slot after you can resume '
                f"from it. At most {MAX_CHECKPOINT_BYTES} bytes as compact JSON. Leave it out "
                "to keep the last one."
            ),
        ] = None,
        attempt_id: AttemptId = None,
    ) -> str:
        """Tell the supervisor how the work goes, and what it cost since your last report. The
        answer carries the supervisor's directive (continue, pause or stop) and any notice:
        idle (no progress for the run's timeout), or the lane's budget reached."""
        attempt = session.attempt(attempt_id)
        cost = cost_fields(tokens_in, tokens_out, cost_usd)
        result = attempt.report(message, percent=percent, kind=kind, checkpoint=checkpoint, **cost)
        notices = "".join(f" {n[0].upper()}{n[1:]}." for n in attempt_notices(result.attempt.raw))
        return f"Reported on attempt {attempt.id}. Directive: {result.attempt.directive}.{notices}"

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
                description=f"Seconds the lease lasts without renewal (1 to {MAX_TTL_S}, default "
                "300). This session renews it in the background, so it matters only if the "
                "session dies: the lease then lapses ttl_s after the last renewal, and others "
                "may take it.",
            ),
        ] = 300,
        wait_s: WaitS = None,
        shared: Annotated[
            bool,
            Field(
                strict=True,
                description="true: a shared lease (to read, say), held beside other shared "
                "ones but never beside an exclusive one. Default false: exclusive, the only "
                "lease on it, on any directory above it and on any name below it.",
            ),
        ] = False,
        take_over: Annotated[
            bool,
            Field(
                strict=True,
                description="true: take the lease from another session or process of your own "
                "hand that holds it (one that is gone, say); it moves to this session at a new "
                "fence. Never another hand's. Default false: such a lease is refused as "
                "another hand's would be.",
            ),
        ] = False,
    ) -> str:
        """Take a lease on a resource (a path like src/auth/, a lock's name) before you change
        it, so no other agent changes it meanwhile. A lease on a directory (src/auth/) covers
        every name below it. Kept alive in the background until you release it."""
        lease, taken = session.hold(
            resource, ttl_s=ttl_s, wait_s=wait_s, shared=shared, take_over=take_over
        )
        if not taken:
            return f"You already hold {resource} at fence {lease.fence}; it is kept alive for you."
        how = " (shared)" if shared else ""
        return (
            f"Acquired {resource}{how} at fence {lease.fence}; it is kept alive for you. Release "
            "it when you are done with it."
        )

    @tool
    def lease_from_pool(
        pool: Annotated[
            str,
            Field(
                min_length=1,
                max_length=200,
                description="The pool's name (such as ports, test-databases).",
            ),
        ],
        ttl_s: Annotated[
            float,
            Field(
                ge=1,
                le=MAX_TTL_S,
                strict=True,
                description=f"Seconds the member's lease lasts without renewal (1 to {MAX_TTL_S}, "
                "default 300); this session renews it in the background.",
            ),
        ] = 300,
        wait_s: WaitS = None,
    ) -> str:
        """Take one free member of a pool (a port, a test database, a browser) for yourself:
        the answer names the member. Kept alive in the background until you release it with
        `release_lease` and the member's resource."""
        with session.lock:
            mine = [
                (resource, lease)
                for resource, lease in session.leases.items()
                if resource.startswith(f"pool/{pool}/")
            ]
        if mine:
            resource, held = mine[0]
            return (
                f"You already hold member {resource.rsplit('/', 1)[-1]} of pool {pool} "
                f"({resource}, fence {held.fence}); it is kept alive for you."
            )
        member = PoolLease(
            session.client, pool, ttl_s=ttl_s, process_id=session.process_id, wait_s=wait_s
        )
        member.open()
        with session.lock:
            session.leases[member.resource] = member
            session.lost_leases.pop(member.resource, None)
        return (
            f"Acquired member {member.member} of pool {pool} (lease {member.resource}, fence "
            f"{member.fence}); it is kept alive for you. Use {member.member}; release it with "
            f"release_lease({member.resource!r}) when you are done."
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
            # A holder of another lane is not named to a lane-limited key: held all the same.
            if lease.state not in ("free", "lost", "")
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

    register_friction_tool(tool, session, recent)
    register_handoff_tools(tool, session)
    return server
