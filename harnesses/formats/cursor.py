"""Cursor's hooks (`type: "command"` hooks get the event on stdin, which `gctl hook cursor`
forwards). Sources: tests/harnesses/events/cursor. The session is `conversation_id`
(`sessionStart`/`sessionEnd` also carry it as `session_id`, "same as `conversation_id`", read
when `conversation_id` is missing). `workspace_roots` is never read: a repository is registered
by the agent's side alone, never guessed from the editor's folders.

- `preToolUse` of `Write` or `Delete` (the documented tool names), or of `StrReplace`, `Edit`,
  `MultiEdit`, `ApplyPatch` (names reported from live events, not documented): a write. Cursor
  documents no `tool_input` field for these tools' path, so every candidate is read: `file_path`
  (the name Cursor's hooks give a file everywhere they name one), `path` and `filePath` (the
  names reported from live events), and a `*** Begin Patch` patch (the input itself, or any
  text of it). Each file found is leased; a write in which none is found is refused
  (`BadEvent`), never let through unchecked. A `preToolUse` with no `tool_name` is refused too.
- `preToolUse` of `Shell`, or `beforeShellExecution`: a shell command.
- `postToolUse` or `postToolUseFailure` of `Shell`, or `afterShellExecution`: a shell command
  that ran. Only `postToolUse` can tell the model (`additional_context`); the others have no
  output, so what they find is recorded and not said.
- `afterFileEdit` (`file_path`, absolute): a write that happened already (an edit the
  `preToolUse` hook missed), judged as a shell command's changes are: leased for the session
  if free, else recorded (`write_outside_lease`); it has no output, so nobody is told.
- `sessionStart`, `sessionEnd`, `stop`; every other event only says the session is alive.

The permission hooks (`preToolUse`, `beforeShellExecution`, ...) are always answered with the
documented shape, since newer docs say an invalid or missing answer may block the action: a
denial is `permission: "deny"` with the sentence as `agent_message` (the model reads it) and
`user_message` (the client shows it), an allowance `permission: "allow"`. `postToolUse` and
`sessionStart` carry a sentence as `additional_context`; `stop` is never answered (its
`followup_message` would start another turn).
"""

from __future__ import annotations

from typing import Any

from harnesses.formats import BadEvent, HookEvent, Kind, Verdict, optional_text, text
from harnesses.formats.patches import written_by

NAME = "cursor"
WRITING_TOOLS = frozenset({"Write", "Delete", "StrReplace", "Edit", "MultiEdit", "ApplyPatch"})
SHELL_TOOLS = frozenset({"Shell"})
PATH_FIELDS = ("file_path", "path", "filePath")
PATCH = "*** Begin Patch"
# Hooks whose answer is a `permission`: answered even to allow (see the docstring).
PERMISSION_EVENTS = frozenset(
    {
        "preToolUse",
        "beforeShellExecution",
        "beforeMCPExecution",
        "beforeReadFile",
        "beforeTabFileRead",
        "subagentStart",
    }
)
# Where `additional_context` reaches the model.
_CONTEXT_EVENTS = frozenset({"postToolUse", "sessionStart"})
_TOOL_EVENTS = ("preToolUse", "postToolUse", "postToolUseFailure")
_KINDS = {
    "sessionStart": Kind.START,
    "sessionEnd": Kind.END,
    "stop": Kind.STOP,
    "beforeShellExecution": Kind.SHELL,
    "afterShellExecution": Kind.AFTER_SHELL,
}


def event(body: dict[str, Any]) -> HookEvent:
    name = text(body, "hook_event_name")
    session = _session(body)
    cwd = optional_text(body, "cwd")
    if name in _TOOL_EVENTS:
        tool = text(body, "tool_name", where=f"the {name} event")
        if name == "preToolUse" and tool in WRITING_TOOLS:
            return HookEvent(Kind.WRITE, session, name, cwd, _written(body, tool), tool)
        if tool in SHELL_TOOLS:
            kind = Kind.SHELL if name == "preToolUse" else Kind.AFTER_SHELL
            return HookEvent(kind, session, name, cwd, (), tool)
        return HookEvent(Kind.OTHER, session, name, cwd, (), tool)
    if name == "afterFileEdit":
        path = text(body, "file_path", where="the afterFileEdit event")
        return HookEvent(Kind.AFTER_WRITE, session, name, cwd, (path,))
    kind = _KINDS.get(name, Kind.OTHER)
    tool = "Shell" if name in ("beforeShellExecution", "afterShellExecution") else ""
    return HookEvent(kind, session, name, cwd, (), tool)


def _session(body: dict[str, Any]) -> str:
    if body.get("conversation_id") is None and body.get("session_id") is not None:
        return text(body, "session_id")
    return text(body, "conversation_id")


def _written(body: dict[str, Any], tool: str) -> tuple[str, ...]:
    """Every file the write tool's input names (see the docstring); BadEvent if none."""
    arguments = body.get("tool_input")
    if isinstance(arguments, str):
        arguments = {"tool_input": arguments}  # a patch given as the whole input
    if not isinstance(arguments, dict):
        raise BadEvent(f"the {tool} event has no tool_input")
    paths: list[str] = []
    for field in PATH_FIELDS:
        value = arguments.get(field)
        if value is None:
            continue
        if not isinstance(value, str) or not value:
            raise BadEvent(f"the {tool} call's input has a {field} that is no path")
        paths.append(value)
    for value in arguments.values():
        if isinstance(value, str) and value.lstrip().startswith(PATCH):
            paths.extend(written_by(value.lstrip()))
    if not paths:
        raise BadEvent(
            f"the {tool} call's input names no file it writes (no {', '.join(PATH_FIELDS)}, "
            "and no patch), so it cannot be checked"
        )
    return tuple(dict.fromkeys(paths))


def answer(event: HookEvent | None, verdict: Verdict) -> dict[str, Any] | None:
    # An unreadable body is answered as the write it might have been.
    name = event.name if event is not None else "preToolUse"
    if name in PERMISSION_EVENTS:
        if verdict.decision == "deny":
            return {
                "permission": "deny",
                "user_message": verdict.sentence,
                "agent_message": verdict.sentence,
            }
        return {"permission": "allow"}
    if verdict.sentence and name in _CONTEXT_EVENTS:
        return {"additional_context": verdict.sentence}
    return None  # the event has no output that reaches anyone (or nothing to say)
