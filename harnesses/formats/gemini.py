"""Gemini CLI's hooks (`type: "command"` hooks get the event on stdin, which `gctl hook gemini`
forwards). Sources: tests/harnesses/events/gemini.

- `BeforeTool` of `write_file` or `replace` (`tool_input.file_path`, relative to `cwd` or
  absolute): a write; of `run_shell_command`: a shell command.
- `AfterTool` of `run_shell_command`: a shell command that ran.
- `SessionStart`, `SessionEnd`, and `AfterAgent` (the agent's turn ended); every other event
  only says the session is alive.

A denial is `decision: "deny"` with the sentence as `reason` (Gemini sends it to the model as
the tool's error; the turn goes on). After a shell command the sentence is
`hookSpecificOutput.additionalContext`, appended to the command's result for the model: a
`decision: "deny"` there would replace the result, and `continue: false` would stop the whole
agent loop. Elsewhere nothing can be refused, so the user is told (`systemMessage`).
"""

from __future__ import annotations

from typing import Any

from harnesses.formats import (
    HookEvent,
    Kind,
    Verdict,
    mapping,
    optional_text,
    path_in,
    text,
)

NAME = "gemini"
WRITING_TOOLS = {"write_file": "file_path", "replace": "file_path"}
SHELL_TOOLS = frozenset({"run_shell_command"})
_KINDS = {"SessionStart": Kind.START, "SessionEnd": Kind.END, "AfterAgent": Kind.STOP}
# Where hookSpecificOutput.additionalContext reaches the model (REF).
_CONTEXT_EVENTS = frozenset({"SessionStart", "AfterTool"})


def event(body: dict[str, Any]) -> HookEvent:
    name = text(body, "hook_event_name")
    session = text(body, "session_id")
    cwd = optional_text(body, "cwd")
    if name in ("BeforeTool", "AfterTool"):
        tool = text(body, "tool_name", where=f"the {name} event")
        if name == "BeforeTool" and tool in WRITING_TOOLS:
            arguments = mapping(body, "tool_input", where=f"the {tool} event")
            path = path_in(arguments, WRITING_TOOLS[tool], tool=tool)
            return HookEvent(Kind.WRITE, session, name, cwd, (path,), tool)
        if tool in SHELL_TOOLS:
            kind = Kind.SHELL if name == "BeforeTool" else Kind.AFTER_SHELL
            return HookEvent(kind, session, name, cwd, (), tool)
        return HookEvent(Kind.OTHER, session, name, cwd, (), tool)
    return HookEvent(_KINDS.get(name, Kind.OTHER), session, name, cwd)


def answer(event: HookEvent | None, verdict: Verdict) -> dict[str, Any] | None:
    # An unreadable body is answered as the write it might have been.
    name = event.name if event is not None else "BeforeTool"
    if verdict.decision == "allow" and (not verdict.sentence or name not in _CONTEXT_EVENTS):
        return None
    if name == "BeforeTool" and verdict.decision == "deny":
        return {"decision": "deny", "reason": verdict.sentence}
    if verdict.decision == "allow" or name == "AfterTool":
        return {
            "hookSpecificOutput": {"hookEventName": name, "additionalContext": verdict.sentence}
        }
    # Elsewhere a decision would block a prompt or force the model to retry: the user is told.
    return {"systemMessage": verdict.sentence}
