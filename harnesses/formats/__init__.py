"""Each harness's hook protocol, read and answered in its own format: one module a harness.

A format turns the harness's event body into a `HookEvent` (what the event means for leases:
a write about to happen, a shell command that ran, a session that starts or ends) and a
`Verdict` back into the harness's own answer. What a format does not know it leaves alone:
an event it cannot read is `BadEvent`, answered as a refusal of the write it might have been.
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any, Protocol


class Kind(enum.Enum):
    START = "start"  # a session begins (or resumes): it may register its repositories
    WRITE = "write"  # a tool is about to write `paths`: allow or deny
    SHELL = "shell"  # a shell command is about to run: allowed; its writes are judged after
    AFTER_SHELL = "after_shell"  # a shell command ran: its changed files are judged
    AFTER_WRITE = "after_write"  # a tool wrote `paths` unasked (no event before it): judged so
    STOP = "stop"  # the model's turn ended: the session goes on
    END = "end"  # the session ended: its leases are released
    OTHER = "other"  # anything else the harness tells: the session is alive, nothing more


class BadEvent(Exception):
    """The body is not an event of this harness that can be acted on (the sentence says why)."""


@dataclass(frozen=True)
class HookEvent:
    kind: Kind
    session_id: str
    name: str  # the harness's own name for the event, as its answer must repeat it
    cwd: str | None = None
    paths: tuple[str, ...] = ()  # the files a WRITE writes, as the tool names them
    tool: str = ""


@dataclass(frozen=True)
class Verdict:
    """What the harness is told: `allow` (nothing to say, or `sentence` for the model), `deny`
    (the write does not happen; `sentence` is what the model reads), or `tell` (after a tool
    ran: the model reads `sentence`)."""

    decision: str  # "allow", "deny" or "tell"
    sentence: str = ""
    extra: dict[str, Any] = field(default_factory=dict)


ALLOW = Verdict("allow")


class Format(Protocol):
    NAME: str

    def event(self, body: dict[str, Any]) -> HookEvent: ...

    def answer(self, event: HookEvent | None, verdict: Verdict) -> dict[str, Any] | None: ...


def text(body: dict[str, Any], name: str, *, where: str = "the event") -> str:
    """A text field every event of the harness carries; BadEvent if missing or empty."""
    value = body.get(name)
    if not isinstance(value, str) or not value:
        raise BadEvent(f"{where} has no {name} (text, not empty)")
    return value


def optional_text(body: dict[str, Any], name: str) -> str | None:
    value = body.get(name)
    if value is None:
        return None
    if not isinstance(value, str):
        raise BadEvent(f"the event's {name} is not text")
    return value or None


def mapping(body: dict[str, Any], name: str, *, where: str = "the event") -> dict[str, Any]:
    value = body.get(name)
    if not isinstance(value, dict):
        raise BadEvent(f"{where} has no {name} object")
    return value


def path_in(arguments: dict[str, Any], name: str, *, tool: str) -> str:
    value = arguments.get(name)
    if not isinstance(value, str) or not value:
        raise BadEvent(f"the {tool} call's input has no {name} (text, not empty)")
    return value


# --- Claude Code's event shape, which Codex and Gemini CLI took up -------------------------------


Written = Callable[[str, dict[str, Any]], tuple[str, ...] | None]


@dataclass(frozen=True)
class ToolEvents:
    """How a harness whose events carry `hook_event_name`, `session_id`, `cwd`, and for a tool
    call `tool_name` and `tool_input`, names them: the event before a tool runs and those after
    it, its shell tools, its session's events, and which files a tool call writes (`written`:
    None for a call that writes none)."""

    before: str
    after: frozenset[str]
    shell_tools: frozenset[str]
    kinds: dict[str, Kind]
    written: Written


def by_field(fields: dict[str, str]) -> Written:
    """`written` of tools that each name their one file in an input field (`fields`: tool ->
    field)."""

    def written(tool: str, body: dict[str, Any]) -> tuple[str, ...] | None:
        field = fields.get(tool)
        if field is None:
            return None
        arguments = mapping(body, "tool_input", where=f"the {tool} event")
        return (path_in(arguments, field, tool=tool),)

    return written


def tool_event(body: dict[str, Any], shape: ToolEvents) -> HookEvent:
    name = text(body, "hook_event_name")
    session = text(body, "session_id")
    cwd = optional_text(body, "cwd")
    if name != shape.before and name not in shape.after:
        return HookEvent(shape.kinds.get(name, Kind.OTHER), session, name, cwd)
    tool = text(body, "tool_name", where=f"the {name} event")
    if name == shape.before:
        paths = shape.written(tool, body)
        if paths is not None:
            return HookEvent(Kind.WRITE, session, name, cwd, paths, tool)
    if tool in shape.shell_tools:
        kind = Kind.SHELL if name == shape.before else Kind.AFTER_SHELL
        return HookEvent(kind, session, name, cwd, (), tool)
    return HookEvent(Kind.OTHER, session, name, cwd, (), tool)


def _formats() -> dict[str, ModuleType]:
    from harnesses.formats import claude_code, cline, codex, copilot, cursor, gemini, opencode

    modules = (claude_code, codex, gemini, cursor, opencode, cline, copilot)
    return {module.NAME: module for module in modules}


FORMATS: dict[str, ModuleType] = _formats()
