"""Leases for the files a Python agent framework's tools write, so the model never manages one.

    guard = WriteGuard(Hand.from_env())          # one agent session: one holder

    @function_tool                               # or LangChain's / CrewAI's @tool, on top
    @guard.writes("path", on_refusal="return")
    def write_file(path: str, content: str) -> str:
        ...

    guard.close()                                # the session's end: every lease released

A guard is what `gctl mcp --wrap` is for an MCP server's tools, in process: one session (its
`mcp_session.Session`: one process identity, its leases renewed in the background by the
runtime, its notices), and before a write-shaped call a lease on each path the call names,
named by the one rule for a file (`groundcontrol_client.git.files`: links resolved, relative to the
top level of the repository holding it; an existing directory gets a trailing `/`). A lease is
held for the rest of the session, as the proxy and the harness hooks hold theirs; a later write
of the same path checks its fence instead. When another holder has the path (or a directory
above it), or the path is in no repository, the tool does not run: the model reads the
sentence (`errors.describe`) as `WriteRefused`, or as the tool's result (`on_refusal="return"`).

The frameworks' own interception points, where their documentation shows one, take the same
leases without touching the tool: `openai_tool_guardrail` (OpenAI Agents SDK tool input
guardrails), `langgraph_wrappers` (LangGraph `ToolNode(wrap_tool_call=...)`) and
`langchain_middleware` (LangChain `create_agent(middleware=[...])`). CrewAI has none that hands
the model a sentence of ours, so there the decorator is the way. No framework is imported until
its adapter is called: the client depends on none of them.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import json
import os
import threading
from collections.abc import Awaitable, Callable, Mapping, Sequence
from types import TracebackType
from typing import TYPE_CHECKING, Any, Literal, TypeVar

from groundcontrol_client.core.errors import describe
from groundcontrol_client.git import files

if TYPE_CHECKING:
    from groundcontrol_client.http import Client
    from groundcontrol_client.mcp.session import Session
    from groundcontrol_client.runtime.hand import Hand

__all__ = [
    "DEFAULT_TTL_S",
    "PathSpec",
    "WriteGuard",
    "WriteRefused",
    "langchain_middleware",
    "langgraph_wrappers",
    "openai_tool_guardrail",
]


# As `gctl mcp --wrap`'s: the lease outlives a dead session by about this much, no more.
DEFAULT_TTL_S = 120.0

F = TypeVar("F", bound=Callable[..., Any])
# Which paths a call writes: the name of an argument whose value is a path (or a list of
# paths), or a callable that returns them from the call's arguments.
PathSpec = str | Callable[..., Any]
OnRefusal = Literal["raise", "return"]


class WriteRefused(Exception):
    """A write not made: `sentence` says why and what to do (the model reads it)."""

    def __init__(self, sentence: str) -> None:
        super().__init__(sentence)
        self.sentence = sentence


def _not_run(sentence: str, tool: str | None) -> WriteRefused:
    return WriteRefused(
        f"{sentence} ({tool} was not run: nothing was written.)" if tool else sentence
    )


def _flatten(value: Any, label: str, tool: str | None) -> list[str]:
    """The paths in one argument's value: a path, a list of them, or None (it writes none)."""
    if value is None:
        return []
    if isinstance(value, str | os.PathLike):
        path = os.fspath(value)
        if isinstance(path, str) and path:
            return [path]
    elif isinstance(value, list | tuple | set | frozenset):
        return [path for item in value for path in _flatten(item, label, tool)]
    raise _not_run(
        f"{label} must be a path (text, not empty): a lease is taken on it before the write.",
        tool,
    )


class _Paths:
    """The paths one tool writes, from its call's arguments (names and callables)."""

    def __init__(self, specs: Sequence[PathSpec]) -> None:
        if not specs:
            raise TypeError("name at least one argument that is a path, or a callable")
        for spec in specs:
            if not (isinstance(spec, str) and spec) and not callable(spec):
                raise TypeError(f"{spec!r} is neither an argument's name nor a callable")
        self.specs = tuple(specs)

    @classmethod
    def of(cls, spec: PathSpec | Sequence[PathSpec]) -> _Paths:
        return cls((spec,) if isinstance(spec, str) or callable(spec) else tuple(spec))

    def check(self, fn: Callable[..., Any], signature: inspect.Signature) -> None:
        """Refuse, when decorating, a name the function does not take (a typo never leases)."""
        params = signature.parameters
        if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()):
            return
        for spec in self.specs:
            if isinstance(spec, str) and spec not in params:
                raise TypeError(
                    f"{getattr(fn, '__name__', fn)!r} takes no argument {spec!r} (it takes "
                    f"{', '.join(params) or 'none'}); put @guard.writes(...) directly on the "
                    "function, below the framework's own decorator."
                )

    def of_call(
        self, signature: inspect.Signature, args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> list[str]:
        """The paths a direct call writes (TypeError for a call the function would refuse)."""
        bound = signature.bind(*args, **kwargs)
        bound.apply_defaults()
        named = dict(bound.arguments)
        for param in signature.parameters.values():
            if param.kind is inspect.Parameter.VAR_KEYWORD:
                named.update(named.pop(param.name, {}))
        return self._collect(named, lambda spec: spec(*args, **kwargs))

    def of_arguments(self, arguments: Mapping[str, Any], tool: str | None) -> list[str]:
        """The paths a tool call's arguments (the model's JSON object) write."""
        return self._collect(arguments, lambda spec: spec(**arguments), tool)

    def _collect(
        self,
        named: Mapping[str, Any],
        called: Callable[[Callable[..., Any]], Any],
        tool: str | None = None,
    ) -> list[str]:
        paths: list[str] = []
        for spec in self.specs:
            if isinstance(spec, str):
                paths += _flatten(named.get(spec), spec, tool)
            else:
                paths += _flatten(called(spec), "each path it writes", tool)
        return paths


class WriteGuard:
    """One agent session's write leases: taken before each guarded write, held and renewed
    in the background for the session, released together at `close()` or leaving `with`.

    `owner`: a `Hand` (its client and process identity) or a `Client`. `process_id`: the
    session's holder identity (default: the hand's, else this process's); two sessions in one
    process are two holders only with two identities. `base`: what relative paths are taken
    from (default: the working directory at the call). `ttl`: each lease's renewal window."""

    def __init__(
        self,
        owner: Hand | Client,
        *,
        process_id: str | None = None,
        base: str | os.PathLike[str] | None = None,
        ttl: float = DEFAULT_TTL_S,
    ) -> None:
        from groundcontrol_client.core.identity import process_identity
        from groundcontrol_client.http import Client
        from groundcontrol_client.mcp.session import Session
        from groundcontrol_client.runtime.hand import Hand

        if not isinstance(owner, Hand | Client):
            raise TypeError(
                f"WriteGuard takes a Hand or a Client (the sync ones: its leases are renewed "
                f"from threads), not {type(owner).__name__}"
            )
        client = owner.client if isinstance(owner, Hand) else owner
        if process_id is None:
            process_id = owner.process_id if isinstance(owner, Hand) else process_identity()
        self.session: Session = Session(client, process_id=process_id)
        self.base = None if base is None else os.fspath(base)
        self.ttl = ttl
        self.closed = False
        self._owns_client = False  # `from_env`'s guard made its client: it closes it too
        # One taking at a time: two calls for one path must not both open a lease on it.
        self._lock = threading.Lock()

    @classmethod
    def from_env(cls, **options: Any) -> WriteGuard:
        """From `GC_URL` and `GC_KEY` (`GC_PROCESS_ID`: the holder); `close()` closes the
        client too."""
        from groundcontrol_client.runtime.hand import Hand

        guard = cls(Hand.from_env(), **options)
        guard._owns_client = True
        return guard

    @property
    def process_id(self) -> str:
        return self.session.process_id

    @property
    def held(self) -> list[str]:
        """The names this session holds now (a lost one is dropped, with a notice)."""
        self.session.observe()
        with self.session.lock:
            return sorted(self.session.leases)

    def notices(self) -> list[str]:
        """What the model has not been told yet, each said once: a lease of the session lost
        (its next write takes it again, or is refused), another hand asking for a file."""
        return self.session.notices()

    # --- taking -----------------------------------------------------------------------------

    def lease(self, *paths: str | os.PathLike[str], tool: str | None = None) -> list[str]:
        """Lease `paths` for the session (those held already: their fence is checked) and
        return their names; `WriteRefused` when one cannot be, having taken none of them."""
        return self._lease([p for path in paths for p in _flatten(path, "path", tool)], tool)

    async def alease(self, *paths: str | os.PathLike[str], tool: str | None = None) -> list[str]:
        """`lease`, in a worker thread: the event loop runs on while the server answers."""
        return await asyncio.to_thread(self.lease, *paths, tool=tool)

    def _lease(self, paths: list[str], tool: str | None) -> list[str]:
        names = self._names(paths, tool)
        with self._lock:
            if self.closed:
                raise _not_run(
                    "This agent session has ended: its write guard is closed, so no file is "
                    "leased for it any more.",
                    tool,
                )
            from groundcontrol_client.mcp.session import WriteRefused

            try:
                self.session.take_for_write(names, ttl_s=self.ttl)
            except WriteRefused as refused:
                raise _not_run(describe(refused.error, subject=refused.name), tool) from refused
        return names

    def _names(self, paths: list[str], tool: str | None) -> list[str]:
        """The lease names of `paths` (`files.lease_name`: as the MCP proxy names them, less
        its `~` expansion: a Python tool opens `~/x` as it is spelt)."""
        namer = files.Namer()
        names: list[str] = []
        for path in paths:
            try:
                name = files.lease_name(path, self.base, namer)
            except LookupError as refused:
                raise _not_run(str(refused.args[0]), tool) from refused
            if name is not None and name not in names:
                names.append(name)
        return names

    # --- the decorator ----------------------------------------------------------------------

    def writes(self, *paths: PathSpec, on_refusal: OnRefusal = "raise") -> Callable[[F], F]:
        """Decorate a tool (sync or async) so that each path it writes is leased before it runs.

        `paths`: argument names whose values are paths (or lists of paths; None writes none),
        or callables given the call's own arguments that return the paths. Refused, the tool
        does not run: `WriteRefused(sentence)` is raised, or with `on_refusal="return"` the
        sentence is returned as the tool's result. The signature, name and docstring are the
        tool's own (`functools.wraps`), so a framework's decorator on top builds its schema."""
        spec = _Paths(paths)
        if on_refusal not in ("raise", "return"):
            raise ValueError(f"on_refusal is 'raise' or 'return', not {on_refusal!r}")

        def decorate(fn: F) -> F:
            if not callable(fn):
                raise TypeError(f"@guard.writes(...) decorates a function, not {fn!r}")
            signature = inspect.signature(fn)
            spec.check(fn, signature)
            tool = getattr(fn, "__name__", None) or "the tool"

            def take(args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
                self._lease(spec.of_call(signature, args, kwargs), tool)

            if inspect.iscoroutinefunction(fn):

                @functools.wraps(fn)
                async def guarded_async(*args: Any, **kwargs: Any) -> Any:
                    try:
                        await asyncio.to_thread(take, args, kwargs)
                    except WriteRefused as refused:
                        if on_refusal == "return":
                            return refused.sentence
                        raise
                    return await fn(*args, **kwargs)

                return guarded_async  # type: ignore[return-value]

            @functools.wraps(fn)
            def guarded(*args: Any, **kwargs: Any) -> Any:
                try:
                    take(args, kwargs)
                except WriteRefused as refused:
                    if on_refusal == "return":
                        return refused.sentence
                    raise
                return fn(*args, **kwargs)

            return guarded  # type: ignore[return-value]

        return decorate

    def refusal(
        self, tool: str, spec: PathSpec | Sequence[PathSpec], arguments: Mapping[str, Any]
    ) -> str | None:
        """Lease what a tool call's `arguments` (the model's JSON object) write: None once they
        are the session's, else the sentence. What the frameworks' adapters ask."""
        return self._refusal(tool, _Paths.of(spec), arguments)

    def _refusal(self, tool: str, paths: _Paths, arguments: Mapping[str, Any]) -> str | None:
        try:
            self._lease(paths.of_arguments(arguments, tool), tool)
        except WriteRefused as refused:
            return refused.sentence
        return None

    async def arefusal(
        self, tool: str, spec: PathSpec | Sequence[PathSpec], arguments: Mapping[str, Any]
    ) -> str | None:
        """`refusal`, in a worker thread: the event loop runs on while the server answers."""
        return await asyncio.to_thread(self._refusal, tool, _Paths.of(spec), arguments)

    # --- the session's end ------------------------------------------------------------------

    def close(self) -> None:
        """End the session: release every lease it holds (renewals stop); later guarded
        writes are refused. Idempotent."""
        with self._lock:
            if self.closed:
                return
            self.closed = True
        try:
            self.session.close()
        finally:
            if self._owns_client:
                self.session.client.close()

    def __enter__(self) -> WriteGuard:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


# --- the frameworks' own interception points ----------------------------------------------------


def openai_tool_guardrail(
    guard: WriteGuard, *paths: PathSpec, name: str = "ground_control_write_leases"
) -> Any:
    """An OpenAI Agents SDK tool input guardrail (`agents.tool_input_guardrail`) that leases
    the paths named by the tool call's arguments first; refused, the tool does not run and the
    model reads the sentence as its result (`ToolGuardrailFunctionOutput.reject_content`).

        @function_tool(tool_input_guardrails=[openai_tool_guardrail(guard, "path")])
        def write_file(path: str, content: str) -> str: ...
    """
    from agents import ToolGuardrailFunctionOutput, tool_input_guardrail

    spec = _Paths(paths)

    async def leases_first(data: Any) -> Any:
        tool = str(data.context.tool_name)
        try:
            arguments = json.loads(data.context.tool_arguments or "{}")
        except ValueError:
            arguments = None
        if not isinstance(arguments, dict):
            sentence: str | None = (
                f"{tool} was not run: its arguments are not a JSON object, so the paths it "
                "writes cannot be leased."
            )
        else:
            sentence = await asyncio.to_thread(guard._refusal, tool, spec, arguments)
        if sentence is not None:
            return ToolGuardrailFunctionOutput.reject_content(sentence)
        return ToolGuardrailFunctionOutput.allow()

    return tool_input_guardrail(name=name)(leases_first)


ToolCallHandler = Callable[[Any], Any]


def langgraph_wrappers(
    guard: WriteGuard, writes: Mapping[str, PathSpec | Sequence[PathSpec]]
) -> tuple[Callable[[Any, ToolCallHandler], Any], Callable[[Any, ToolCallHandler], Awaitable[Any]]]:
    """`(wrap_tool_call, awrap_tool_call)` for LangGraph's `ToolNode`: a call of a tool named in
    `writes` (tool name -> its path arguments) runs once its paths are leased; refused, the
    model reads the sentence as the call's `ToolMessage` (status "error"). Other calls pass.

        wrap, awrap = langgraph_wrappers(guard, {"write_file": "path"})
        ToolNode(tools, wrap_tool_call=wrap, awrap_tool_call=awrap)
    """
    table = {tool: _Paths.of(spec) for tool, spec in writes.items()}

    def wrap_tool_call(request: Any, execute: ToolCallHandler) -> Any:
        call = request.tool_call
        spec = table.get(call["name"])
        if spec is not None:
            sentence = guard._refusal(call["name"], spec, call.get("args") or {})
            if sentence is not None:
                return _tool_message(sentence, call)
        return execute(request)

    async def awrap_tool_call(request: Any, execute: ToolCallHandler) -> Any:
        call = request.tool_call
        spec = table.get(call["name"])
        if spec is not None:
            arguments = call.get("args") or {}
            sentence = await asyncio.to_thread(guard._refusal, call["name"], spec, arguments)
            if sentence is not None:
                return _tool_message(sentence, call)
        return await execute(request)

    return wrap_tool_call, awrap_tool_call


def _tool_message(sentence: str, call: Mapping[str, Any]) -> Any:
    from langchain_core.messages import ToolMessage

    return ToolMessage(content=sentence, tool_call_id=call["id"], name=call["name"], status="error")


def langchain_middleware(
    guard: WriteGuard, writes: Mapping[str, PathSpec | Sequence[PathSpec]]
) -> Any:
    """The same, as LangChain agent middleware (`AgentMiddleware`, both `wrap_tool_call` and
    `awrap_tool_call`): `create_agent(model, tools, middleware=[langchain_middleware(...)])`."""
    from langchain.agents.middleware import AgentMiddleware

    wrap, awrap = langgraph_wrappers(guard, writes)

    class GroundControlWriteLeases(AgentMiddleware):  # type: ignore[misc]
        """Leases the files a tool call writes before it runs (groundcontrol_client)."""

        def wrap_tool_call(self, request: Any, handler: ToolCallHandler) -> Any:
            return wrap(request, handler)

        async def awrap_tool_call(self, request: Any, handler: ToolCallHandler) -> Any:
            return await awrap(request, handler)

    return GroundControlWriteLeases()
