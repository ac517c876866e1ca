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

from harnesses.formats import HookEvent, Kind, ToolEvents, Verdict, by_field, tool_event

NAME = "claude-code"
WRITING_TOOLS = {
    "Write": "file_path",
    "Edit": "file_path",
    "MultiEdit": "file_path",
    "NotebookEdit": "notebook_path",
}
SHELL_TOOLS = frozenset({"Bash"})


EVENTS = ToolEvents(
    before="PreToolUse",
    after=frozenset({"PostToolUse", "PostToolUseFailure"}),
    shell_tools=SHELL_TOOLS,
    kinds={"SessionStart": Kind.START, "SessionEnd": Kind.END, "Stop": Kind.STOP},
    written=by_field(WRITING_TOOLS),
)


def event(body: dict[str, Any]) -> HookEvent:
    return tool_event(body, EVENTS)


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
