"""What gctl claim and gctl brief say of an inherited checkpoint: its words and origin, none, or
withheld (a hand of another lane wrote it, so a lane-limited key is not given it)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from groundcontrol_client.core.checkpoints import describe_inherited
from groundcontrol_client.core.models import CheckpointFrom

NOW = datetime(2030, 1, 1, 12, 0, tzinfo=UTC)


def test_a_withheld_checkpoint_says_so_and_shows_nothing_of_it() -> None:
    origin = CheckpointFrom(attempt=7, hand="", at=NOW, end="released", withheld=True)
    said = describe_inherited(None, origin, NOW)
    assert said == (
        "attempt 7 left a checkpoint on this slot, withheld: a hand of another lane wrote it"
    )


def test_none_and_a_given_checkpoint_read_as_before() -> None:
    assert describe_inherited(None, None, NOW) == (
        "no checkpoint from an earlier attempt on this slot"
    )
    at = (NOW - timedelta(minutes=3)).isoformat()  # as the wire carries it
    origin = CheckpointFrom.model_validate({"attempt": 7, "hand": "a", "at": at, "end": "lost"})
    said = describe_inherited({"step": 3}, origin, NOW)
    assert said.startswith("checkpoint from attempt 7 (a, lost), reported 3 min")
    assert '"step": 3' in said


def test_the_wire_model_reads_withheld_and_defaults_it_to_false() -> None:
    assert CheckpointFrom.model_validate({"attempt": 1, "withheld": True}).withheld is True
    assert CheckpointFrom.model_validate({"attempt": 1}).withheld is False
