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

from harnesses.formats import HookEvent, Kind, ToolEvents, Verdict, by_field, tool_event

NAME = "gemini"
WRITING_TOOLS = {"write_file": "file_path", "replace": "file_path"}
SHELL_TOOLS = frozenset({"run_shell_command"})
# Where hookSpecificOutput.additionalContext reaches the model (REF).
_CONTEXT_EVENTS = frozenset({"SessionStart", "AfterTool"})


EVENTS = ToolEvents(
    before="BeforeTool",
    after=frozenset({"AfterTool"}),
    shell_tools=SHELL_TOOLS,
    kinds={"SessionStart": Kind.START, "SessionEnd": Kind.END, "AfterAgent": Kind.STOP},
    written=by_field(WRITING_TOOLS),
)


def event(body: dict[str, Any]) -> HookEvent:
    return tool_event(body, EVENTS)


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
