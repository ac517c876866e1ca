"""Checkpoints: where the work stands, for a successor. A report may carry `checkpoint`, a small
JSON document (any value but null, at most MAX_CHECKPOINT_BYTES as compact JSON in UTF-8); the
next attempt on the same slot, after the last one was lost, released or stopped, reads the last
checkpoint an earlier attempt on that slot reported (`checkpoint_inherited`), in its brief and in
its claim's answer, as Temporal hands a retry the last heartbeat's details.

A checkpoint is written by the report that carries it, in that report's one statement
(`fleet.attempts.reports`), and nothing else writes one: a refused report writes none. It is
kept as the text its size was measured on (`checkpoint_text`, `Report.checkpoint` is text, not
jsonb, whose numerics would turn 1e300 into an integer of 301 digits), and read back by
`checkpoint_document`: what a successor reads is what was reported, value for value and type for
type, and no bigger than the limit it was measured against."""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from apikit.errors import ValidationFailed
from fleet.models import Report

# A checkpoint is kept with its report (90 days by default) and read by every successor's brief.
MAX_CHECKPOINT_BYTES = 16_384


def checkpoint_text(checkpoint: object) -> str:
    """The checkpoint as compact JSON (no spaces after `,` and `:`, non-ASCII as itself): the
    text whose UTF-8 bytes its size counts, and what the statement stores."""
    return json.dumps(checkpoint, ensure_ascii=False, separators=(",", ":"), allow_nan=False)


def unstorable_text(value: object) -> str | None:
    """A NUL or a lone surrogate in any key or string of `value`, said in words, or None:
    PostgreSQL's jsonb refuses both anywhere in a document."""
    pending: list[object] = [value]
    while pending:
        item = pending.pop()
        if isinstance(item, dict):
            pending.extend(item)  # the keys
            pending.extend(item.values())
        elif isinstance(item, list):
            pending.extend(item)
        elif isinstance(item, str):
            if "\x00" in item:
                return "a NUL character"
            try:
                item.encode()
            except UnicodeEncodeError:
                return "a lone surrogate"
    return None


def checkpoint_refusal(checkpoint: object) -> ValidationFailed | None:
    """Why a report's `checkpoint` is refused (a NUL or a lone surrogate in a key or a string,
    not JSON, or over MAX_CHECKPOINT_BYTES as compact JSON in UTF-8), or None. None means the
    report carries no checkpoint: on the wire, null is refused before this (`ReportIn`)."""
    if checkpoint is None:
        return None
    unstorable = unstorable_text(checkpoint)
    if unstorable is not None:
        return ValidationFailed(
            f"checkpoint holds {unstorable}, which no report may hold",
            fields={"checkpoint": [f"No {unstorable.removeprefix('a ')}s."]},
        )
    try:
        size = len(checkpoint_text(checkpoint).encode())
    except (TypeError, ValueError):
        return ValidationFailed(
            "checkpoint must be a JSON value", fields={"checkpoint": ["A JSON value."]}
        )
    if size > MAX_CHECKPOINT_BYTES:
        return ValidationFailed(
            f"checkpoint must be at most {MAX_CHECKPOINT_BYTES} bytes of compact JSON "
            f"(this one is {size})",
            fields={"checkpoint": [f"At most {MAX_CHECKPOINT_BYTES} bytes of compact JSON."]},
            limit_bytes=MAX_CHECKPOINT_BYTES,
        )
    return None


def checkpoint_param(checkpoint: object) -> str | None:
    """The checkpoint as every way of writing a report stores it (`Report.checkpoint`): its
    compact JSON text (`checkpoint_text`), None for none."""
    return None if checkpoint is None else checkpoint_text(checkpoint)


def checkpoint_document(text: str | None) -> Any:
    """A stored checkpoint (`checkpoint_param`'s text) as the JSON value it was reported as;
    None for none."""
    return None if text is None else json.loads(text)


@dataclass(frozen=True)
class Inherited:
    """The last checkpoint an earlier attempt on a slot reported: the document, the attempt
    that reported it, its hand, when, and how that attempt ended."""

    checkpoint: Any
    attempt_id: int
    hand: str
    at: datetime
    end: str | None


def checkpoint_inherited(
    *, workspace_id: int, run_id: int, slot_id: int, attempt_id: int, lane_id: int | None = None
) -> Inherited | None:
    """The last checkpoint reported by an attempt on slot `slot_id` (of run `run_id`) earlier
    than `attempt_id`, or None: one query.

    The slot's attempts are found by `attempt_run_idx` (run, slot), and each one's checkpoints by
    the partial index `report_checkpoint_idx` (attempt, -id WHERE checkpoint IS NOT NULL), which
    holds only the reports that carry one. The newest report wins: a slot's tenures follow each
    other, and an ended attempt reports nothing more, so a later report id is a later attempt's.
    A lane-limited caller (`lane_id`) reads only its lane's (a slot's attempts are its run's
    lane's; the filter says so rather than relying on it)."""
    row = (
        Report.objects.in_lane(lane_id)
        .filter(
            workspace_id=workspace_id,
            attempt__workspace_id=workspace_id,
            attempt__run_id=run_id,
            attempt__slot_id=slot_id,
            attempt_id__lt=attempt_id,
            checkpoint__isnull=False,
        )
        .order_by("-id")
        .values_list("checkpoint", "attempt_id", "attempt__hand__name", "at", "attempt__end")
        .first()
    )
    if row is None:
        return None
    text, earlier, hand, at, end = row
    return Inherited(
        checkpoint=checkpoint_document(text), attempt_id=earlier, hand=hand, at=at, end=end
    )


@dataclass(frozen=True)
class SlotCheckpoint:
    """The last checkpoint reported on a slot of a run (the run page shows one per slot): the
    slot's index, the document, and the attempt that reported it, its hand, when, and how that
    attempt ended (None while it runs)."""

    slot: int
    checkpoint: Any
    attempt_id: int
    hand: str
    at: datetime
    end: str | None

    @property
    def text(self) -> str:
        """The document pretty-printed, its keys in the order they were reported."""
        return json.dumps(self.checkpoint, ensure_ascii=False, indent=2)

    @property
    def long(self) -> bool:
        """Too long to show open at once: more than LONG_LINES lines pretty-printed."""
        return self.text.count("\n") >= LONG_LINES


# A checkpoint of more lines than this is shown folded on the run page.
LONG_LINES = 12


def run_checkpoints(*, workspace_id: int, run_id: int) -> list[SlotCheckpoint]:
    """The last checkpoint of each slot of run `run_id` that has one, by slot: one query, however
    many attempts the run has (`DISTINCT ON` the slot over the run's attempts, by
    `attempt_run_idx`, and their checkpoints, by `report_checkpoint_idx`)."""
    rows = (
        Report.objects.filter(
            workspace_id=workspace_id,
            attempt__workspace_id=workspace_id,
            attempt__run_id=run_id,
            checkpoint__isnull=False,
        )
        .order_by("attempt__slot__index", "-id")
        .distinct("attempt__slot__index")
        .values_list(
            "attempt__slot__index",
            "checkpoint",
            "attempt_id",
            "attempt__hand__name",
            "at",
            "attempt__end",
        )
    )
    return [SlotCheckpoint(slot, checkpoint_document(text), *rest) for slot, text, *rest in rows]
