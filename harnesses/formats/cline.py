"""Cline's hooks: an executable `.clinerules/hooks/<HookName>` gets the event as JSON on stdin
(`gctl hook cline` forwards it) and prints its answer as JSON. Sources:
tests/harnesses/events/cline. Three payloads are read, one envelope (`hookName`, `taskId`,
`workspaceRoots`):

- classic Cline (3.x): `PreToolUse` / `PostToolUse` with `preToolUse` / `postToolUse`
  `{toolName, parameters}`; writes are `write_to_file`, `replace_in_file` and `new_rule`
  (`parameters.path`, relative to the workspace, or `absolutePath`) and `apply_patch` (the files
  in `parameters.input`); a shell command is `execute_command`.
- the SDK-based 4.x extension: the same hooks and objects, with the SDK's tools: `editor`
  (`path`), `apply_patch` (`input`), and `run_commands` for shell commands.
- the SDK / CLI file hooks: `tool_call` and `tool_result`, which carry the same `preToolUse` /
  `postToolUse` objects as the extension's (the SDK runs `tool_result` detached: what is said
  after a shell command there never reaches the model).

The session is `taskId`. The first of `workspaceRoots` only makes a relative path absolute: a
file is named from the repositories the agent's side registered, never from the workspace.
`TaskStart` / `TaskResume` start the session, `TaskComplete` / `TaskCancel` end it (a task that
is resumed after completing starts again); every other event only says it is alive.

The answer is always the explicit JSON Cline's hook must print. A denial is
`{"cancel": true, "errorMessage": sentence}`: the only refusal Cline offers, and it stops the
whole task, not just the call (classic Cline cancels the task, 4.x ends the run; the user resumes
it). So only a write is refused (and a body that could not be read, which may have been one):
any other call, even one Ground Control failed to check (a bad key, an outage), and a shell
command that ran, get the sentence for the model as `{"cancel": false, "contextModification":
sentence}`, which it reads with its next message. Nothing to say is `{"cancel": false}`.
"""

from __future__ import annotations

from typing import Any

from harnesses.formats import BadEvent, HookEvent, Kind, Verdict, mapping, path_in, text
from harnesses.formats.patches import written_by

NAME = "cline"
# Each writing tool and the parameters that may name its file, the first one given wins (classic
# native tool-calling models send `absolutePath` instead of `path`).
WRITING_TOOLS = {
    "write_to_file": ("path", "absolutePath"),
    "replace_in_file": ("path", "absolutePath"),
    "new_rule": ("path",),
    "editor": ("path",),
}
PATCH_TOOLS = {"apply_patch": "input"}
SHELL_TOOLS = frozenset({"execute_command", "run_commands"})
_BEFORE = {"PreToolUse": "preToolUse", "tool_call": "preToolUse"}
_AFTER = {"PostToolUse": "postToolUse", "tool_result": "postToolUse"}
_KINDS = {
    "TaskStart": Kind.START,
    "TaskResume": Kind.START,
    "TaskComplete": Kind.END,
    "TaskCancel": Kind.END,
}


def event(body: dict[str, Any]) -> HookEvent:
    name = text(body, "hookName")
    session = text(body, "taskId")
    cwd = _workspace(body)
    if name in _BEFORE or name in _AFTER:
        field = _BEFORE.get(name) or _AFTER[name]
        call = mapping(body, field, where=f"the {name} event")
        tool = text(call, "toolName", where=f"the {name} event's {field}")
        if tool in SHELL_TOOLS:
            kind = Kind.SHELL if name in _BEFORE else Kind.AFTER_SHELL
            return HookEvent(kind, session, name, cwd, (), tool)
        if name in _BEFORE and (tool in WRITING_TOOLS or tool in PATCH_TOOLS):
            # Proto3 leaves out empty values: a call without parameters has no object at all.
            parameters = call.get("parameters") or {}
            if not isinstance(parameters, dict):
                parameters = {}
            return HookEvent(Kind.WRITE, session, name, cwd, _written(tool, parameters), tool)
        return HookEvent(Kind.OTHER, session, name, cwd, (), tool)
    return HookEvent(_KINDS.get(name, Kind.OTHER), session, name, cwd)


def _workspace(body: dict[str, Any]) -> str | None:
    roots = body.get("workspaceRoots")
    if isinstance(roots, list) and roots and isinstance(roots[0], str) and roots[0]:
        return roots[0]
    return None


def _written(tool: str, parameters: dict[str, Any]) -> tuple[str, ...]:
    if tool in PATCH_TOOLS:
        return written_by(path_in(parameters, PATCH_TOOLS[tool], tool=tool))
    for name in WRITING_TOOLS[tool]:
        value = parameters.get(name)
        if isinstance(value, str) and value:
            return (value,)
    raise BadEvent(
        f"the {tool} call's parameters have no {' or '.join(WRITING_TOOLS[tool])} (text, not empty)"
    )


def answer(event: HookEvent | None, verdict: Verdict) -> dict[str, Any] | None:
    if verdict.decision == "allow" and not verdict.sentence:
        return {"cancel": False}
    # A cancel ends the task: only a write (or a body that may have been one) is refused so.
    refusable = event is None or event.kind == Kind.WRITE
    if verdict.decision == "deny" and refusable:
        return {"cancel": True, "errorMessage": verdict.sentence}
    return {"cancel": False, "contextModification": verdict.sentence}
