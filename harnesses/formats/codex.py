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

from harnesses.formats import HookEvent, Kind, Verdict, mapping, optional_text, patches, text

NAME = "codex"
PATCH_TOOL = "apply_patch"
SHELL_TOOLS = frozenset({"Bash"})
_KINDS = {"SessionStart": Kind.START, "SessionEnd": Kind.END, "Stop": Kind.STOP}
# Where additionalContext reaches the model as a developer message.
_CONTEXT_EVENTS = frozenset({"SessionStart", "UserPromptSubmit", "PreToolUse", "PostToolUse"})


def event(body: dict[str, Any]) -> HookEvent:
    name = text(body, "hook_event_name")
    session = text(body, "session_id")
    cwd = optional_text(body, "cwd")
    if name in ("PreToolUse", "PostToolUse"):
        tool = text(body, "tool_name", where=f"the {name} event")
        if name == "PreToolUse" and tool == PATCH_TOOL:
            arguments = mapping(body, "tool_input", where=f"the {tool} event")
            patch = text(arguments, "command", where=f"the {tool} call's input")
            return HookEvent(Kind.WRITE, session, name, cwd, patches.written_by(patch), tool)
        if tool in SHELL_TOOLS:
            kind = Kind.SHELL if name == "PreToolUse" else Kind.AFTER_SHELL
            return HookEvent(kind, session, name, cwd, (), tool)
        return HookEvent(Kind.OTHER, session, name, cwd, (), tool)
    return HookEvent(_KINDS.get(name, Kind.OTHER), session, name, cwd)


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
