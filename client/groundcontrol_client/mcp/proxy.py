"""`gctl mcp --wrap -- CMD...`: another MCP server's tools, served through Ground Control.

The proxy starts CMD (an MCP server on stdio), connects to it as an MCP client, and serves its
tools under their own names (same descriptions and schemas) beside Ground Control's own tools
(`gctl mcp`'s: claim, report_progress, finish, the lease tools, ...), from one session: one
process identity, one set of claims and leases renewed in the background, one set of notices.

- A **write-shaped** call (the table `WRITE_TOOLS`, tool name -> the arguments that are paths)
  first takes a lease on each path it names, through the session, and is run only once every
  one is granted. Such a lease is held and renewed for the rest of the session, as
  `acquire_lease` holds one (a later write of the same path checks its fence instead); a tool
  marked `held=False` (`create_directory`: a directory's lease covers everything below it, and
  holding one would keep every other hand out of the whole tree) holds it only for the call.
  When another hand holds the path or a directory above it, the call is not run: the answer is
  an error with the denial sentence (`errors.describe`), and nothing reaches CMD.
- Every other call (the reads) passes through untouched, and so does a write-shaped tool's
  preview that writes nothing (`edit_file` with `dryRun: true`, `WriteTool.preview`): it takes
  no lease, so a preview of a file another hand holds shows its diff and keeps nobody out.
- The lease name is the file's own (`groundcontrol_client.git.files`, as the Claude Code hook and
  `gctl git` name it): its path, symbolic links resolved, relative to the top level of the git
  repository holding it, `/`-separated, with a trailing `/` for an existing directory. A
  relative path is first made absolute against the **root**: `--root DIR` when given, else
  CMD's first argument that names an existing directory (the reference filesystem server's
  first allowed directory, against which it resolves relative paths), else the proxy's working
  directory. A write of a path in no repository is refused, saying so, unless
  `GC_ALLOW_OUTSIDE_REPO=1` lets it through unleased.
- When the session ends (stdin closes, or SIGTERM), what it holds is released. When CMD dies,
  or the key is refused, the answers say so and the proxy ends (exit status 1). When the work
  is stopped (the supervisor's stop of the session's claim, or a lost claim), CMD is called no
  more and what the session held is released at once, but the connection stays: each later
  call of CMD's tools answers the sentence, so the model reads why (exit status 1 when the
  host ends the session).

CMD runs in the proxy's working directory with its environment, less Ground Control's own
variables (GC_KEY is not CMD's to see).
"""

from __future__ import annotations

import logging
import os
import shlex
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import anyio
import anyio.to_thread
from anyio.abc import TaskGroup
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client
from mcp.shared.exceptions import MCPError
from mcp.types import CONNECTION_CLOSED, CallToolResult, TextContent
from mcp.types import Tool as MCPTool

from groundcontrol_client.core.errors import AuthFailed, GroundControlError, describe
from groundcontrol_client.core.models import Lease
from groundcontrol_client.git import files
from groundcontrol_client.mcp.session import Session, WriteRefused
from groundcontrol_client.mcp.tools import build_server, with_notices

logger = logging.getLogger("groundcontrol_client.mcp")

# How often the proxy asks CMD whether it is still there, between calls (a ping).
WATCH_S = 1.0
# How long an answer that says CMD died has to reach the host before the proxy ends.
FLUSH_S = 0.5


@dataclass(frozen=True)
class WriteTool:
    """A write-shaped tool: the arguments that name the paths it writes, whether their leases
    are held for the session (else only for the call), and the argument that, when it is JSON
    `true` exactly, makes the call a preview that writes nothing (`preview`: `edit_file`'s
    `dryRun`), which then passes through as a read and takes no lease. Any other value of it
    (absent, false, "true", 1) is a write: a server that read it otherwise would write leased."""

    paths: tuple[str, ...]
    held: bool = True
    preview: str | None = None

    def writes(self, arguments: dict[str, Any]) -> bool:
        return self.preview is None or arguments.get(self.preview) is not True


# The reference filesystem server's (@modelcontextprotocol/server-filesystem) write-shaped
# tools. `--write-tool NAME=ARG[,ARG...]` adds or replaces one, `--write-tool NAME=` removes one.
WRITE_TOOLS: dict[str, WriteTool] = {
    "write_file": WriteTool(("path",)),
    "edit_file": WriteTool(("path",), preview="dryRun"),  # dryRun: the diff, nothing written
    "move_file": WriteTool(("source", "destination")),
    "create_directory": WriteTool(("path",), held=False),
}


def write_tools(overrides: Sequence[str] = ()) -> dict[str, WriteTool]:
    """The table with `NAME=ARG[,ARG...]` overrides applied (`NAME=` makes NAME a read);
    ValueError, said as a sentence, for one that is not of that form."""
    table = dict(WRITE_TOOLS)
    for override in overrides:
        name, sep, args = override.partition("=")
        paths = tuple(arg.strip() for arg in args.split(",") if arg.strip())
        if not sep or not name.strip():
            raise ValueError(f"--write-tool takes NAME=ARG[,ARG...], not {override!r}")
        if paths:
            table[name.strip()] = WriteTool(paths)
        else:
            table.pop(name.strip(), None)
    return table


def root_for(cmd: Sequence[str], root: str | None = None, cwd: str | None = None) -> str:
    """What relative paths are taken from: `root`, else CMD's first argument that is an
    existing directory, else `cwd` (the proxy's working directory); resolved."""
    cwd = cwd or os.getcwd()
    if root is None:
        dirs = [a for a in cmd[1:] if not a.startswith("-") and os.path.isdir(os.path.join(cwd, a))]
        root = dirs[0] if dirs else cwd
    return os.path.realpath(os.path.join(cwd, os.path.expanduser(root)))


def resource_for(path: str, root: str, namer: files.Namer | None = None) -> str | None:
    """The lease name of `path` (absolute, or relative to `root`; `~` expanded, as the
    filesystem server does): `files.lease_name`."""
    return files.lease_name(os.path.expanduser(path), root, namer)


def _text(text: str, *, error: bool = False) -> CallToolResult:
    return CallToolResult(content=[TextContent(type="text", text=text)], is_error=error)


class Wrapped:
    """CMD's tools, as `build_server` serves them beside Ground Control's (`WrappedTools`)."""

    def __init__(
        self,
        upstream: ClientSession,
        session: Session,
        *,
        command: Sequence[str],
        root: str,
        table: dict[str, WriteTool],
        ttl_s: float,
        their_instructions: str | None = None,
    ) -> None:
        self.upstream = upstream
        self.session = session
        self.command = shlex.join(command)
        self.root = root
        self.table = table
        self.ttl_s = ttl_s
        self.tools: dict[str, MCPTool] = {}
        self.ended: str | None = None
        # Why the work was stopped (the supervisor's stop, a lost claim): CMD is called no more,
        # what the session held is released, and each call is answered with the sentence; the
        # connection stays, so the model reads why instead of losing its tools mid-call.
        self.halted: str | None = None
        # The proxy's task group (set by `serve_wrapped`): cancelling it ends the proxy.
        self.group: TaskGroup | None = None
        writes = ", ".join(sorted(table)) or "none"
        self.instructions = (
            f"This server also serves the tools of another MCP server ({self.command}). Each "
            f"call that writes ({writes}) takes a lease on the paths it writes first, named by "
            "their path relative to their git repository's top level (relative paths are taken "
            f"from {root}), and is refused with who holds it when another agent does: then "
            "wait, pick other work, or escalate. Reads pass through."
        ) + (f"\n{their_instructions}" if their_instructions else "")

    # --- what build_server asks --------------------------------------------------------------

    async def list_tools(self) -> list[MCPTool]:
        if self.ended is None:
            try:
                await self.refresh()
            except MCPError as error:
                self._failed(error)
        return list(self.tools.values())

    def input_schema(self, name: str) -> dict[str, Any] | None:
        tool = self.tools.get(name)
        return None if tool is None else dict(tool.input_schema)

    async def call_tool(self, name: str, arguments: dict[str, Any]) -> CallToolResult:
        if self.halted is not None:
            return self._answer(self._stopped(), error=True)
        if self.ended is not None:
            return self._answer(self._gone(), error=True)
        if name not in self.tools:
            return self._answer(
                f"There is no tool {name}: neither Ground Control nor the wrapped server "
                f"({self.command}) has one of that name.",
                error=True,
            )
        spec = self.table.get(name)
        transient: list[Lease] = []
        if spec is not None and spec.writes(arguments):
            try:
                transient = await anyio.to_thread.run_sync(self._take, name, spec, arguments)
            except LookupError as refused:
                return self._answer(str(refused.args[0]), error=True)
        try:
            result = await self.upstream.call_tool(name, arguments)
        except MCPError as error:
            if self._failed(error):
                return self._answer(self._gone(), error=True)
            result = _text(f"{name} failed in the wrapped server: {error.message}", error=True)
        finally:
            if transient:
                await anyio.to_thread.run_sync(self.session.release_after_write, transient)
        return with_notices(self.session, result)

    # --- CMD ---------------------------------------------------------------------------------

    async def refresh(self) -> None:
        tools: dict[str, MCPTool] = {}
        cursor: str | None = None
        while True:
            params = {"cursor": cursor} if cursor else None
            listed = await self.upstream.list_tools(params=params)  # type: ignore[arg-type]
            tools.update((tool.name, tool) for tool in listed.tools)
            cursor = listed.next_cursor
            if not cursor:
                break
        self.tools = tools

    async def watch(self) -> None:
        """Ping CMD between calls; end the proxy when it is gone. Ask Ground Control every
        heartbeat (a third of the write leases' ttl) whether the key still works: stop means
        stop, so a revoked or expired key ends CMD and the proxy, saying why."""
        asked_at = anyio.current_time()
        while self.ended is None:
            await anyio.sleep(WATCH_S)
            try:
                with anyio.move_on_after(10):
                    await self.upstream.send_ping()
            except MCPError as error:
                self._failed(error)
            stopped = self._claim_ended()
            if stopped is not None and self.halted is None:
                await self._halt(stopped)
            if anyio.current_time() - asked_at >= self.ttl_s / 3:
                asked_at = anyio.current_time()
                try:
                    await anyio.to_thread.run_sync(self.session.client.me)
                except AuthFailed as refused:
                    self._end(f"Ground Control refused this session's key ({refused.message})")
                except GroundControlError:
                    pass  # an outage: the leases' own clocks decide what is lost

    def _failed(self, error: MCPError) -> bool:
        """True (and the proxy ends shortly) when `error` says CMD's connection is closed."""
        if error.code != CONNECTION_CLOSED:
            return False
        self._end("it closed its connection (it exited or crashed)")
        return True

    def _claim_ended(self) -> str | None:
        """Why the work CMD serves must stop: a claim the supervisor says stop to, or one that
        was lost (its heartbeats run in the background and say so within one interval)."""
        with self.session.lock:
            attempts = list(self.session.attempts.values())
        for attempt in attempts:
            if attempt.lost:
                return f"attempt {attempt.id} was lost"
            if attempt.directive == "stop":
                return f"the supervisor's directive for attempt {attempt.id} is stop"
        return None

    async def _halt(self, why: str) -> None:
        """The work is stopped: CMD is called no more, and what the session held is released
        now; the host's connection stays, and every call of CMD's tools says why."""
        self.halted = why
        print(
            f"gctl mcp: {why}; the wrapped server ({self.command}) is called no more.",
            file=sys.stderr,
        )
        await anyio.to_thread.run_sync(self.session.close, f"stopped: {why}")
        self.session.notify(f"NOTICE: {self._stopped()}")

    def _stopped(self) -> str:
        return (
            f"Stopped: {self.halted}. The tools of the wrapped MCP server ({self.command}) run "
            "no more in this session, and what it held is released: stop this work (do not "
            "retry it), and report to whoever runs you."
        )

    def _end(self, why: str) -> None:
        """End the proxy (and with it CMD) shortly, saying `why` to the host and the model."""
        if self.ended is None:
            self.ended = why
            print(
                f"gctl mcp: the wrapped server ({self.command}) ends: {self.ended}; "
                "ending the proxy.",
                file=sys.stderr,
            )

            async def end(group: TaskGroup) -> None:
                await anyio.sleep(FLUSH_S)  # the answer saying so reaches the host first
                group.cancel_scope.cancel()

            self.session.notify(f"NOTICE: {self._gone()}")
            if self.group is not None:
                self.group.start_soon(end, self.group)

    def _gone(self) -> str:
        return (
            f"The wrapped MCP server ({self.command}) has ended: {self.ended}. Its tools are "
            "gone and this proxy ends now; what this session held is released. Escalate, or "
            "ask for the server to be restarted."
        )

    def _answer(self, text: str, *, error: bool) -> CallToolResult:
        """`text` with the session's notices first (less the one that says `text` again)."""
        notices = [line for line in self.session.notices() if line != f"NOTICE: {text}"]
        return _text("\n".join([*notices, text]), error=error)

    # --- the leases a write takes --------------------------------------------------------------

    def _resources(self, name: str, spec: WriteTool, arguments: dict[str, Any]) -> list[str]:
        resources: list[str] = []
        namer = files.Namer()
        for arg in spec.paths:
            value = arguments.get(arg)
            if not isinstance(value, str) or not value:
                raise LookupError(
                    f"{name} was not run: {arg} must be a path (text, not empty): this proxy "
                    "takes a lease on it before the write."
                )
            try:
                resource = resource_for(value, self.root, namer)
            except LookupError as refused:
                raise LookupError(
                    f"{refused.args[0]} ({name} was not run: nothing was written.)"
                ) from refused
            if resource is not None and resource not in resources:
                resources.append(resource)
        return resources

    def _take(self, name: str, spec: WriteTool, arguments: dict[str, Any]) -> list[Lease]:
        """Take the leases a write needs (LookupError, the sentence, when one is refused);
        those held only for the call, to release after it."""
        resources = self._resources(name, spec, arguments)
        try:
            return self.session.take_for_write(resources, ttl_s=self.ttl_s, keep=spec.held)
        except WriteRefused as refused:
            raise LookupError(
                f"{describe(refused.error, subject=refused.name)} ({name} was not run: nothing "
                "was written.)"
            ) from refused


def _environment() -> dict[str, str]:
    """CMD's environment: the proxy's, less Ground Control's own variables."""
    return {k: v for k, v in os.environ.items() if not k.startswith("GC_")}


async def serve_wrapped(
    session: Session,
    command: Sequence[str],
    *,
    root: str | None = None,
    table: dict[str, WriteTool] | None = None,
    ttl_s: float = 120.0,
) -> int:
    """Serve CMD's tools and Ground Control's on stdin/stdout until the host ends the session
    (0) or CMD dies (1); then release what the session holds."""
    where = root_for(command, root)
    params = StdioServerParameters(command=command[0], args=list(command[1:]), env=_environment())
    wrapped: Wrapped | None = None
    try:
        async with stdio_client(params) as (read, write), ClientSession(read, write) as upstream:
            init = await upstream.initialize()
            wrapped = Wrapped(
                upstream,
                session,
                command=command,
                root=where,
                table=write_tools() if table is None else table,
                ttl_s=ttl_s,
                their_instructions=init.instructions,
            )
            await wrapped.refresh()
            server = build_server(session, wrapped)
            async with anyio.create_task_group() as group:
                wrapped.group = group
                group.start_soon(wrapped.watch)
                await server.run_stdio_async()
                group.cancel_scope.cancel()
    finally:
        await anyio.to_thread.run_sync(session.close)
    return 1 if wrapped is None or wrapped.ended or wrapped.halted else 0
