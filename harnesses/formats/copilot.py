"""GitHub Copilot's hooks: the Copilot SDK's hook callbacks (`onPreToolUse` and the others: the
client's helper posts the callback's input object as it is, or the `hooks.invoke` request's
params `{sessionId, hookType, input}`, answered with its result's `output`), and the Copilot
CLI's and cloud agent's command hooks (stdin, which `gctl hook copilot` forwards). Sources:
tests/harnesses/events/copilot.

- The camelCase input names no event: it is known by the documented fields only it has.
  `toolName` with `toolResult` is `postToolUse`, with `error` `postToolUseFailure`, with
  `toolArgs` (an object, or a command hook's JSON text) `preToolUse`; `source` is
  `sessionStart`, `reason` `sessionEnd`, `stopReason` `agentStop` (`subagentStop` with an
  `agentId`), and so on; an input none of them tells is `BadEvent`. The `hooks.invoke` params
  name it (`hookType`; their `sessionId` is the session the hooks are invoked for, a sub-agent's
  calls included); the "VS Code compatible" snake_case input of a PascalCase hook
  (`PreToolUse`) names it too (`hook_event_name`), with Claude's tool names.
- `preToolUse` of `create` or `edit` (VS Code: `Write`, `Edit`): a write of `path`. An `Edit`
  without `path` and `str_replace_editor` or `apply_patch` are left alone, as every unknown
  tool is: their arguments are not documented.
- `preToolUse` of `bash`, `powershell` (VS Code: `Bash`) or `write_bash`, `write_powershell`
  (which type into a running shell): a shell command; `postToolUse` or `postToolUseFailure`
  of one: a shell command that ran (a failed one may have written too).
- `sessionStart`, `sessionEnd`, `agentStop`; every other event only says the session is alive.
- The SDK hands a callback `workingDirectory` for the wire's `cwd`: either is read.

The older CLI reference's inputs carry no `sessionId`: a write then is refused (a lease is
taken for a session), and the rest is read for a session named `no-session`, which never holds
anything (its shell commands' files are not leased, its end ends nothing).

A denial is `{"permissionDecision": "deny", "permissionDecisionReason": sentence}` (the SDK
callback's return value and the command hook's stdout alike; the model reads "Denied by
preToolUse hook: <sentence>"); an allow is an empty answer. After a shell command the sentence
is `additionalContext`, which Copilot appends to the command's result for the model; a
`sessionStart` takes it as `additionalContext` too. Elsewhere nothing the model reads is
documented, and an `agentStop` block would keep it working: the answer is empty.
"""

from __future__ import annotations

import json
from typing import Any

from harnesses.formats import BadEvent, HookEvent, Kind, Verdict, mapping, path_in, text

NAME = "copilot"
NO_SESSION = "no-session"
WRITING_TOOLS = frozenset({"create", "edit", "Write", "Edit"})
SHELL_TOOLS = frozenset({"bash", "powershell", "write_bash", "write_powershell", "Bash"})
# Each event by its camelCase name, whichever way the harness spells it.
_CAMEL = {
    "PreToolUse": "preToolUse",
    "PostToolUse": "postToolUse",
    "PostToolUseFailure": "postToolUseFailure",
    "SessionStart": "sessionStart",
    "SessionEnd": "sessionEnd",
    "Stop": "agentStop",
}
# The fields that tell the camelCase inputs apart, in the order they are asked.
_TOOL_SHAPES = (
    ("toolResult", "postToolUse"),
    ("error", "postToolUseFailure"),
    ("toolArgs", "preToolUse"),
)
_SHAPES = (
    ("source", "sessionStart"),
    ("reason", "sessionEnd"),
    ("transformedPrompt", "userPromptTransformed"),
    ("prompt", "userPromptSubmitted"),
    ("agentId", "subagentStop"),
    ("stopReason", "agentStop"),
    ("agentName", "subagentStart"),
    ("errorContext", "errorOccurred"),
    ("trigger", "preCompact"),
)
_KINDS = {"sessionStart": Kind.START, "sessionEnd": Kind.END, "agentStop": Kind.STOP}
_AFTER = frozenset({"postToolUse", "postToolUseFailure"})
_CONTEXT_EVENTS = frozenset({"sessionStart", *_AFTER})


def event(body: dict[str, Any]) -> HookEvent:
    if "hook_event_name" in body:  # a PascalCase hook's VS Code compatible input
        name = text(body, "hook_event_name")
        session = body.get("session_id") or body.get("sessionId")
        return _read(body, name, session, tool="tool_name", arguments="tool_input")
    if "hookType" in body:  # the SDK's hooks.invoke params
        name = text(body, "hookType")
        given = mapping(body, "input", where="the hooks.invoke request")
        session = body.get("sessionId") or given.get("sessionId")
        return _read(given, name, session, tool="toolName", arguments="toolArgs")
    return _read(
        body, _camel_name(body), body.get("sessionId"), tool="toolName", arguments="toolArgs"
    )


def _camel_name(body: dict[str, Any]) -> str:
    """The camelCase event the input is, by the first documented field only it has."""
    for field, name in _TOOL_SHAPES if "toolName" in body else _SHAPES:
        if field in body:
            return name
    raise BadEvent(
        "the body is no Copilot hook input: it has none of the fields that say which event it "
        "is (toolName with toolArgs, toolResult or error; source; reason; stopReason; ...)"
    )


def _read(
    body: dict[str, Any], name: str, session: object, *, tool: str, arguments: str
) -> HookEvent:
    canonical = _CAMEL.get(name, name)
    cwd = body.get("cwd") or body.get("workingDirectory")
    if cwd is not None and not isinstance(cwd, str):
        raise BadEvent("the event's cwd is not text")
    if session is not None and (not isinstance(session, str) or not session):
        raise BadEvent("the event's session id is not text")
    kind = _KINDS.get(canonical, Kind.OTHER)
    tool_name, paths = "", ()
    if canonical == "preToolUse" or canonical in _AFTER:
        tool_name = text(body, tool, where=f"the {name} event")
        if canonical == "preToolUse" and tool_name in WRITING_TOOLS:
            given = _arguments(body, arguments)
            if tool_name == "Edit" and "path" not in (given or {}):
                pass  # str_replace_editor or apply_patch, whose arguments are undocumented
            elif given is None:
                raise BadEvent(f"the {tool_name} call's {arguments} is no object (nor JSON of one)")
            else:
                kind, paths = Kind.WRITE, (path_in(given, "path", tool=tool_name),)
        elif tool_name in SHELL_TOOLS:
            kind = Kind.SHELL if canonical == "preToolUse" else Kind.AFTER_SHELL
    if session is None:
        if kind == Kind.WRITE:
            raise BadEvent(
                f"the {name} event has no session id, and a write is leased for its session "
                "(a Copilot CLI that sends sessionId is needed)"
            )
        session = NO_SESSION
        if kind in (Kind.AFTER_SHELL, Kind.END):
            kind = Kind.OTHER  # nothing is leased for, or released from, no session
    return HookEvent(kind, session, name, cwd or None, paths, tool_name)


def _arguments(body: dict[str, Any], field: str) -> dict[str, Any] | None:
    """The tool's arguments: an object, or (a command hook's toolArgs) the JSON text of one."""
    given = body.get(field)
    if isinstance(given, str):
        try:
            given = json.loads(given)
        except ValueError:
            return None
    return given if isinstance(given, dict) else None


def answer(event: HookEvent | None, verdict: Verdict) -> dict[str, Any] | None:
    name = _CAMEL.get(event.name, event.name) if event is not None else "preToolUse"
    if name == "preToolUse":
        if verdict.decision == "allow":
            return None
        return {"permissionDecision": "deny", "permissionDecisionReason": verdict.sentence}
    if verdict.sentence and name in _CONTEXT_EVENTS:
        return {"additionalContext": verdict.sentence}
    return None
