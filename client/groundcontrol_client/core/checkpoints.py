"""Checkpoints, the client's side: a checkpoint is where the work stands, any JSON value but
null, at most the `checkpoint_bytes` limit as compact JSON in UTF-8 (docs/api.md, Checkpoints).
The next attempt on the slot inherits the last one an earlier attempt reported
(`Attempt.checkpoint`, `checkpoint_from`). Here: the server's rules, checked before a checkpoint
is sent (a heartbeat must never carry a refusal), and the sentence that says an inheritance."""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

from groundcontrol_client.core.limits import LIMITS
from groundcontrol_client.core.models import CheckpointFrom
from groundcontrol_client.core.when import absolute, relative

# A checkpoint longer than this is shown folded in a sentence (`describe_inherited`).
SHOWN_LINES = 40


def checkpoint_text(value: Any) -> str:
    """A checkpoint as compact JSON, as the server measures it (docs/api.md, Checkpoints)."""
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"), allow_nan=False)


def checkpoint_problem(content: bytes) -> tuple[str | None, Any]:
    """Why a checkpoint file's `content` cannot be reported (or None), and its value: the
    server's rules (docs/api.md, Checkpoints), so that a heartbeat never carries a refusal."""
    try:
        value = json.loads(content.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as error:
        return f"not JSON ({error})", None
    if value is None:
        return "null is no checkpoint (leave the file empty for none)", None
    pending: list[Any] = [value]
    while pending:
        item = pending.pop()
        if isinstance(item, dict):
            pending.extend(item)
            pending.extend(item.values())
        elif isinstance(item, list):
            pending.extend(item)
        elif isinstance(item, str):
            if "\x00" in item:
                return "it holds a NUL character", None
            try:
                item.encode()
            except UnicodeEncodeError:
                return "it holds a lone surrogate", None
    try:
        size = len(checkpoint_text(value).encode())
    except ValueError as error:  # NaN or Infinity
        return f"not JSON ({error})", None
    limit = int(LIMITS["checkpoint_bytes"])
    if size > limit:
        return f"{size} bytes of compact JSON, over the limit of {limit}", None
    return None, value


def read_checkpoint(content: bytes) -> Any:
    """A checkpoint file's content as the checkpoint to report (None: the file is empty);
    ValueError saying why it cannot be reported."""
    if not content.strip():
        return None
    problem, value = checkpoint_problem(content)
    if problem is not None:
        raise ValueError(problem)
    return value


def describe_inherited(checkpoint: Any, origin: CheckpointFrom | None, now: datetime) -> str:
    """The inherited checkpoint in words, its JSON indented below (folded past SHOWN_LINES
    lines); "no checkpoint from an earlier attempt on this slot" when there is none."""
    if origin is not None and origin.withheld:
        return (
            f"attempt {origin.attempt} left a checkpoint on this slot, withheld: a hand of "
            "another lane wrote it"
        )
    if checkpoint is None or origin is None:
        return "no checkpoint from an earlier attempt on this slot"
    who = origin.hand or "a hand of another lane"
    when = f"{relative(origin.at, now)} ({absolute(origin.at)})" if origin.at else "earlier"
    lines = json.dumps(checkpoint, ensure_ascii=False, indent=2).splitlines()
    if len(lines) > SHOWN_LINES:
        hidden = len(lines) - SHOWN_LINES
        lines = [*lines[:SHOWN_LINES], f"… {hidden} more lines (--json shows it whole)"]
    shown = "\n".join(f"  {line}" for line in lines)
    return (
        f"checkpoint from attempt {origin.attempt} ({who}, {origin.end or 'ended'}), "
        f"reported {when}:\n{shown}"
    )
