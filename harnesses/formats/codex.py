"""Codex CLI's hooks (`type: "command"` only: the event is one JSON object on stdin, which
`gctl hook codex` forwards). Sources: tests/harnesses/events/codex.

- `PreToolUse` of `apply_patch`: a write of every file its patch (`tool_input.command`, in the
  `*** Begin Patch` format) adds, updates, deletes or moves to, relative to the cwd. Codex has
  no other file tool: `Edit` and `Write` are only matcher aliases of `apply_patch`.
- `PreToolUse` of `Bash` (every shell tool, `exec_command` included, is reported as `Bash`): a
  shell command; `PostToolUse` of `Bash`: a shell command that ran. `PostToolUse` of
  `apply_patch` says nothing more: its files were leased before it ran.
- `SessionStart`, `SessionEnd`, `Stop`; every other event (MCP tools included) only says the
  session is alive.

An allow is an empty answer: Codex marks a hook that prints `permissionDecision: "allow"`
without `updatedInput` as failed. A denial is `hookSpecificOutput.permissionDecision: "deny"`
with the sentence as `permissionDecisionReason` (the model reads "Command blocked by PreToolUse
hook: <sentence>"). After a shell command, `decision: "block"` with the sentence as `reason`:
Codex gives the model the reason in place of the command's output (the command has run
already). Elsewhere the sentence is a `systemMessage`, shown to the user: a `Stop` block would
keep the model working, and an unknown key would make Codex drop the whole answer.
"""

from __future__ import annotations

from typing import Any

from harnesses.formats import (
    HookEvent,
    Kind,
    ToolEvents,
    Verdict,
    mapping,
    patches,
    text,
    tool_event,
)

NAME = "codex"
PATCH_TOOL = "apply_patch"
SHELL_TOOLS = frozenset({"Bash"})
# Where additionalContext reaches the model as a developer message.
_CONTEXT_EVENTS = frozenset({"SessionStart", "UserPromptSubmit", "PreToolUse", "PostToolUse"})


def _written(tool: str, body: dict[str, Any]) -> tuple[str, ...] | None:
    """Every file an `apply_patch` call's patch adds, updates, deletes or moves to."""
    if tool != PATCH_TOOL:
        return None
    arguments = mapping(body, "tool_input", where=f"the {tool} event")
    return patches.written_by(text(arguments, "command", where=f"the {tool} call's input"))


EVENTS = ToolEvents(
    before="PreToolUse",
    after=frozenset({"PostToolUse"}),
    shell_tools=SHELL_TOOLS,
    kinds={"SessionStart": Kind.START, "SessionEnd": Kind.END, "Stop": Kind.STOP},
    written=_written,
)


def event(body: dict[str, Any]) -> HookEvent:
    return tool_event(body, EVENTS)


def answer(event: HookEvent | None, verdict: Verdict) -> dict[str, Any] | None:
    name = event.name if event is not None else "PreToolUse"
    if verdict.decision == "allow":
        if verdict.sentence and name in _CONTEXT_EVENTS:
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
    if name == "PostToolUse":
        return {"decision": "block", "reason": verdict.sentence}
    return {"systemMessage": verdict.sentence}
