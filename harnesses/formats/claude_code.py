"""Claude Code's hooks (`type: "http"` posts the event as its body; `type: "command"` gives it
on stdin, which `gctl hook claude-code` forwards). Sources: tests/harnesses/events/claude-code.

- `PreToolUse` of `Write`, `Edit`, `MultiEdit` (`tool_input.file_path`) or `NotebookEdit`
  (`tool_input.notebook_path`): a write; of `Bash`: a shell command.
- `PostToolUse` of `Bash`, or `PostToolUseFailure` (a command that exited non-zero): a shell
  command that ran.
- `SessionStart`, `SessionEnd`, `Stop`; every other event only says the session is alive.

A denial is `hookSpecificOutput.permissionDecision: "deny"` with the sentence as
`permissionDecisionReason` (the model reads it); after a shell command, `decision: "block"` with
the sentence as `reason` (Claude is prompted with it; the command has run already).
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

NAME = "claude-code"
WRITING_TOOLS = {
    "Write": "file_path",
    "Edit": "file_path",
    "MultiEdit": "file_path",
    "NotebookEdit": "notebook_path",
}
SHELL_TOOLS = frozenset({"Bash"})
_KINDS = {"SessionStart": Kind.START, "SessionEnd": Kind.END, "Stop": Kind.STOP}


def event(body: dict[str, Any]) -> HookEvent:
    name = text(body, "hook_event_name")
    session = text(body, "session_id")
    cwd = optional_text(body, "cwd")
    if name in ("PreToolUse", "PostToolUse", "PostToolUseFailure"):
        tool = text(body, "tool_name", where=f"the {name} event")
        if name == "PreToolUse" and tool in WRITING_TOOLS:
            arguments = mapping(body, "tool_input", where=f"the {tool} event")
            path = path_in(arguments, WRITING_TOOLS[tool], tool=tool)
            return HookEvent(Kind.WRITE, session, name, cwd, (path,), tool)
        if tool in SHELL_TOOLS:
            kind = Kind.SHELL if name == "PreToolUse" else Kind.AFTER_SHELL
            return HookEvent(kind, session, name, cwd, (), tool)
        return HookEvent(Kind.OTHER, session, name, cwd, (), tool)
    return HookEvent(_KINDS.get(name, Kind.OTHER), session, name, cwd)


def answer(event: HookEvent | None, verdict: Verdict) -> dict[str, Any] | None:
    name = event.name if event is not None else "PreToolUse"
    if verdict.decision == "allow":
        if verdict.sentence and name in ("SessionStart", "UserPromptSubmit", "PostToolUse"):
            return {
                "hookSpecificOutput": {"hookEventName": name, "additionalContext": verdict.sentence}
            }
        return None
    if name == "PreToolUse":
        return {
            "hookSpecificOutput": {
                "hookEventName": "PreToolUse",
                "permissionDecision": "deny",
                "permissionDecisionReason": verdict.sentence,
            }
        }
    if name in ("PostToolUse", "PostToolUseFailure"):
        return {"decision": "block", "reason": verdict.sentence}
    # Elsewhere a block would erase the prompt or keep the model working: the user is told.
    return {"systemMessage": verdict.sentence}
