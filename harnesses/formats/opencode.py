"""OpenCode's plugin hooks, as Ground Control's own plugin posts them
(`client/groundcontrol_client/hooks/opencode-plugin.js`). Sources: tests/harnesses/events/opencode.

OpenCode has no HTTP or command hooks: a plugin (a JavaScript module in `.opencode/plugins/`)
gets each hook's arguments in process, so the body is ours. The plugin posts one object a hook:

- `{"hook": "tool.execute.before", "directory": D, "input": {"tool", "sessionID", "callID"},
  "output": {"args": {...}}}`: the hook's two arguments as OpenCode passes them (the plugin
  leaves out the text a tool writes, and keeps only a patch's `*** ` lines, so that a body
  stays under the server's size limit).
- `{"hook": "tool.execute.after", "directory": D, "input": {"tool", "sessionID", "callID"},
  "output": {"title", "metadata"}}`: the same (the tool's output text may be left out).
- `{"hook": "event", "directory": D, "event": {"type", "properties"}}`: the `event` hook's
  argument (only the session events below need be posted).

`directory` is the plugin context's directory (the OpenCode instance's), which OpenCode resolves
a relative `filePath` and `apply_patch`'s paths against; the plugin adds `groundcontrol`
(`repositories`: the worktree; `changed`: after a shell command) as any agent's side does.

- `tool.execute.before` of `write`, `edit` or the legacy `multiedit` (`args.filePath`), or of
  `apply_patch` or the legacy `patch` (every file in `args.patchText`): a write; of `bash`: a
  shell command. Any other tool only says the session is alive.
- `tool.execute.after` of `bash`: a shell command that ran (OpenCode runs `after` only for a
  call that did not fail).
- Events `session.created` (start), `session.idle` (the model's turn ended) and `session.deleted`
  (end); the session is `properties.sessionID`, or `properties.info.id` in the older types.

The answer: a denial is `{"deny": sentence}`, which the plugin throws as `new Error(sentence)`
(the tool does not run; the model gets the error as the tool's result). After a shell command,
and for an event, anything to say is `{"tell": sentence}`: the plugin appends it to the tool's
output text, the tool result the model reads (an event's cannot reach the model, and nothing of
a command that ran can be undone). Nothing to say is an empty body.
"""

from __future__ import annotations

from typing import Any

from harnesses.formats import (
    BadEvent,
    HookEvent,
    Kind,
    Verdict,
    mapping,
    optional_text,
    path_in,
    text,
)
from harnesses.formats.patches import written_by

NAME = "opencode"
BEFORE, AFTER, EVENT = "tool.execute.before", "tool.execute.after", "event"
# `multiedit` and `patch` are names older OpenCode versions used (SOURCES, "Write tools").
WRITING_TOOLS = {"write": "filePath", "edit": "filePath", "multiedit": "filePath"}
PATCH_TOOLS = {"apply_patch": "patchText", "patch": "patchText"}
SHELL_TOOLS = frozenset({"bash"})
_KINDS = {"session.created": Kind.START, "session.idle": Kind.STOP, "session.deleted": Kind.END}


def event(body: dict[str, Any]) -> HookEvent:
    hook = text(body, "hook", where="the body (from Ground Control's OpenCode plugin)")
    cwd = optional_text(body, "directory")
    if hook == EVENT:
        return _session_event(mapping(body, "event"), cwd)
    if hook not in (BEFORE, AFTER):
        raise BadEvent(f"the hook {hook!r} is none of {BEFORE}, {AFTER} or {EVENT}")
    given = mapping(body, "input", where=f"the {hook} hook")
    tool = text(given, "tool", where=f"the {hook} hook's input")
    session = text(given, "sessionID", where=f"the {hook} hook's input")
    if tool in SHELL_TOOLS:
        kind = Kind.SHELL if hook == BEFORE else Kind.AFTER_SHELL
        return HookEvent(kind, session, hook, cwd, (), tool)
    if hook == BEFORE and (tool in WRITING_TOOLS or tool in PATCH_TOOLS):
        output = mapping(body, "output", where=f"the {tool} call's {hook} hook")
        arguments = mapping(output, "args", where=f"the {tool} call's output")
        if tool in WRITING_TOOLS:
            paths: tuple[str, ...] = (path_in(arguments, WRITING_TOOLS[tool], tool=tool),)
        else:
            paths = written_by(path_in(arguments, PATCH_TOOLS[tool], tool=tool))
        return HookEvent(Kind.WRITE, session, hook, cwd, paths, tool)
    return HookEvent(Kind.OTHER, session, hook, cwd, (), tool)


def _session_event(given: dict[str, Any], cwd: str | None) -> HookEvent:
    kind = text(given, "type", where="the event")
    properties = given.get("properties")
    properties = properties if isinstance(properties, dict) else {}
    session = properties.get("sessionID")
    if not isinstance(session, str) or not session:
        # The v1 types carry the session only as `info` on session.created / session.deleted.
        info = properties.get("info")
        session = info.get("id") if isinstance(info, dict) else None
    if not isinstance(session, str) or not session:
        raise BadEvent(f"the {kind} event names no session (properties.sessionID or info.id)")
    return HookEvent(_KINDS.get(kind, Kind.OTHER), session, kind, cwd)


def answer(event: HookEvent | None, verdict: Verdict) -> dict[str, Any] | None:
    before = event is None or event.name == BEFORE
    if verdict.decision == "allow" and (before or not verdict.sentence):
        return None  # a `before` hook has no way to add text without refusing the call
    if verdict.decision == "deny" and before:
        return {"deny": verdict.sentence}
    # After the command ran (or at an event) nothing can be refused: the model is told.
    return {"tell": verdict.sentence}
