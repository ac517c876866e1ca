"""Checkpoints through the client, against the live server: `Client` and `AsyncClient` report
one and read the inheritance in a claim's answer and a brief; the runtime's claimed attempt
(`inherited_checkpoint`, `checkpoint_from`); `gctl report --checkpoint-file`, `gctl claim` and
`gctl brief`; the MCP tools; and `gctl run`, whose command finds the inherited checkpoint in
$GC_CHECKPOINT_FILE and whose changes to it are reported, surviving a `kill -9` of the wrapper."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest
from groundcontrol_client import AsyncClient, Client, Hand
from groundcontrol_client.mcp.server import Session, build_server

from fleet.models import AttemptEnd, Report
from tests.client.conftest import GCTL, ONE_SHOT, PR_URL, Fleet, attempts_of, wait_for
from tests.client.test_mcp import drive, text

pytestmark = pytest.mark.django_db(transaction=True)

STEP = {"step": 2, "done": ["src/a.py"], "note": "naïve"}


def checkpoints_of(run: Any) -> list[Any]:
    """The run's reports' checkpoints, oldest first, each as the JSON value its text is."""
    texts = (
        Report.objects.filter(attempt__run=run)
        .exclude(checkpoint=None)
        .order_by("id")
        .values_list("checkpoint", flat=True)
    )
    return [json.loads(text) for text in texts]


def test_the_client_reports_a_checkpoint_and_the_next_claim_reads_it(gc: Fleet) -> None:
    run = gc.run(**ONE_SHOT)
    first_client, second_client = Client(gc.url, gc.key_a), Client(gc.url, gc.key_b)
    first = first_client.claim(run.pk, process_id="a:1")
    assert (first.checkpoint, first.checkpoint_from) == (None, None)
    first_client.report(first.id, fence=first.fence, process_id="a:1", checkpoint=STEP)
    first_client.release(first.id, fence=first.fence, process_id="a:1", reason="out of time")
    second = second_client.claim(run.pk, process_id="b:1")
    assert second.checkpoint == STEP
    assert second.checkpoint_from is not None
    origin = second.checkpoint_from
    assert (origin.attempt, origin.hand, origin.end) == (first.id, "hand-a", "released")
    assert origin.at is not None
    brief = second_client.brief(second.id)
    assert (brief.checkpoint, brief.checkpoint_from) == (STEP, origin)


def test_the_async_client_reports_a_checkpoint_and_the_next_claim_reads_it(gc: Fleet) -> None:
    run = gc.run(**ONE_SHOT)

    async def body() -> tuple[Any, Any]:
        async with AsyncClient(gc.url, gc.key_a) as first_client:
            first = await first_client.claim(run.pk, process_id="a:1")
            await first_client.report(
                first.id, fence=first.fence, kind="note", message="m", checkpoint=[1, 2, 3]
            )
            await first_client.release(first.id, fence=first.fence, process_id="a:1", reason="r")
        async with AsyncClient(gc.url, gc.key_b) as second_client:
            second = await second_client.claim(run.pk, process_id="b:1")
            return second, await second_client.brief(second.id)

    second, brief = asyncio.run(body())
    assert second.checkpoint == brief.checkpoint == [1, 2, 3]
    assert brief.checkpoint_from is not None and brief.checkpoint_from.end == "released"


def test_the_runtime_hands_a_claimed_attempt_its_inherited_checkpoint(gc: Fleet) -> None:
    run = gc.run(**ONE_SHOT)
    hand = Hand(Client(gc.url, gc.key_a), process_id="host-a:1:1")
    with pytest.raises(RuntimeError, match="ran out of time"):
        with hand.claim(run.pk) as attempt:
            assert attempt.inherited_checkpoint is None and attempt.checkpoint_from is None
            attempt.report("half way", checkpoint=STEP)
            attempt.report("no checkpoint in this one")
            raise RuntimeError("ran out of time")  # released, with this as the reason
    again = Hand(Client(gc.url, gc.key_b), process_id="host-b:1:1")
    with again.claim(run.pk) as attempt:
        assert attempt.inherited_checkpoint == STEP
        assert attempt.checkpoint_from is not None
        assert (attempt.checkpoint_from.hand, attempt.checkpoint_from.end) == (
            "hand-a",
            "released",
        )
        # `checkpoint()` is still the call that obeys the directive.
        attempt.checkpoint()
        attempt.attach("pull_request", PR_URL)
    first, second = attempts_of(run)
    assert (first.end, second.end) == (AttemptEnd.RELEASED, AttemptEnd.FINISHED)


def test_gctl_reports_a_checkpoint_file_and_claim_and_brief_show_it(
    gc: Fleet, tmp_path: Path
) -> None:
    run = gc.run(**ONE_SHOT)
    claimed = json.loads(gc.gctl("--json", "claim", str(run.pk), "--process-id", "a-1").stdout)
    assert claimed["checkpoint"] is None
    ids = {"GC_ATTEMPT": str(claimed["id"]), "GC_PROCESS_ID": "a-1"}
    checkpoint = tmp_path / "checkpoint.json"
    checkpoint.write_text(json.dumps(STEP, indent=2))
    reported = gc.gctl("report", "-m", "step 2", "--checkpoint-file", str(checkpoint), **ids)
    assert reported.returncode == 0, reported.stderr
    assert "with its checkpoint" in reported.stdout
    assert checkpoints_of(run) == [STEP]
    # What cannot be a checkpoint is a usage error, and nothing is sent.
    for content, says in (("", "is empty"), ("{oops", "not JSON"), ("null", "null")):
        checkpoint.write_text(content)
        refused = gc.gctl("report", "--checkpoint-file", str(checkpoint), **ids)
        assert refused.returncode == 2, refused.stderr
        assert says in refused.stderr
    checkpoint.write_text(json.dumps("é" * 8192))  # 16,386 bytes as compact JSON
    refused = gc.gctl("report", "--checkpoint-file", str(checkpoint), **ids)
    assert (refused.returncode, "over the limit of 16384" in refused.stderr) == (2, True)
    assert checkpoints_of(run) == [STEP]
    released = gc.gctl("release", "--reason", "handing over", **ids)
    assert released.returncode == 0, released.stderr
    second = gc.gctl("claim", str(run.pk), "--process-id", "b-1", key=gc.key_b)
    assert second.returncode == 0, second.stderr
    assert f"# checkpoint from attempt {claimed['id']} (hand-a, released), reported" in (
        second.stdout
    )
    assert '#     "step": 2' in second.stdout  # indented below, each line commented
    brief = gc.gctl("brief", str(attempts_of(run)[1].pk), key=gc.key_b)
    assert brief.returncode == 0, brief.stderr
    assert "checkpoint from attempt" in brief.stdout and '"naïve"' in brief.stdout


def test_the_mcp_tools_report_a_checkpoint_and_the_brief_carries_it(gc: Fleet) -> None:
    run = gc.run(**ONE_SHOT)
    first = Session(Client(gc.url, gc.key_a), process_id="mcp-a")
    _, _, _, reported, released = drive(
        build_server(first),
        [
            ("claim", {"run_id": run.pk}),
            ("read_brief", {}),
            ("report_progress", {"message": "half way", "checkpoint": STEP}),
            ("release", {"reason": "my context is full"}),
        ],
    )
    assert not reported.is_error and not released.is_error, text(reported) + text(released)
    second = Session(Client(gc.url, gc.key_b), process_id="mcp-b")
    _, claimed, brief, refused = drive(
        build_server(second),
        [
            ("claim", {"run_id": run.pk}),
            ("read_brief", {}),
            ("report_progress", {"message": "too big", "checkpoint": "p" * 16_383}),
        ],
    )
    assert "left a checkpoint: read the brief to resume from it" in text(claimed)
    said = text(brief)
    assert "Checkpoint from attempt" in said and "(hand-a, released)" in said
    assert '"step": 2' in said and "Resume from it rather than start over." in said
    assert refused.is_error and "16384" in text(refused)
    second.close()


def _kill_9(wrapper: subprocess.Popen[str]) -> None:
    os.kill(wrapper.pid, signal.SIGKILL)
    wrapper.wait(5)


def test_gctl_run_hands_the_checkpoint_of_a_killed_run_to_the_next_one(
    gc: Fleet, tmp_path: Path
) -> None:
    """The first command writes a checkpoint and hangs; its wrapper is killed with `kill -9`, so
    its attempt is lost. The second `gctl run` on the slot finds the checkpoint in its
    $GC_CHECKPOINT_FILE."""
    run = gc.run()  # 1 s interval, 1 s grace
    first_script = (
        'test -f "$GC_CHECKPOINT_FILE" && test ! -s "$GC_CHECKPOINT_FILE" && '
        'echo \'{"step": 2, "done": ["src/a.py"]}\' > "$GC_CHECKPOINT_FILE"; sleep 300'
    )
    wrapper = subprocess.Popen(
        [GCTL, "run", "--run", str(run.pk), "--", "sh", "-c", first_script],
        env=gc.env(TMPDIR=str(tmp_path)),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        # A heartbeat carries the command's checkpoint within a fraction of the interval.
        wait_for(lambda: checkpoints_of(run), timeout=15)
    finally:
        _kill_9(wrapper)
    assert checkpoints_of(run) == [{"step": 2, "done": ["src/a.py"]}]
    seen = tmp_path / "seen.json"
    second_script = f'cat "$GC_CHECKPOINT_FILE" > {seen}; echo "pull_request={PR_URL}" >> '
    second_script += '"$GC_EVIDENCE_FILE"'
    started = time.monotonic()
    second = gc.gctl(
        "run", "--run", str(run.pk), "--wait", "30", "--", "sh", "-c", second_script,
        key=gc.key_b,
    )  # fmt: skip
    assert second.returncode == 0, second.stderr
    assert "resuming from the checkpoint of attempt" in second.stderr
    assert json.loads(seen.read_text()) == {"step": 2, "done": ["src/a.py"]}
    first, finished = attempts_of(run)
    assert (first.end, finished.end) == (AttemptEnd.LOST, AttemptEnd.FINISHED)
    assert time.monotonic() - started < 30


def test_gctl_run_reports_the_commands_last_checkpoint_before_it_ends(
    gc: Fleet, tmp_path: Path
) -> None:
    """Written just before the command exits (no heartbeat in between): reported before the
    finish. A file the command leaves as it found it reports nothing."""
    run = gc.run(**ONE_SHOT)  # a heartbeat only every 10 s or so
    script = (
        f'echo "pull_request={PR_URL}" >> "$GC_EVIDENCE_FILE"; '
        'echo \'["last words"]\' > "$GC_CHECKPOINT_FILE"'
    )
    done = gc.gctl("run", "--run", str(run.pk), "--", "sh", "-c", script)
    assert done.returncode == 0, done.stderr
    assert checkpoints_of(run) == [["last words"]]
    # The next run on a reopened slot: nothing changed, nothing reported.
    named = tmp_path / "mine.json"
    quiet = gc.gctl(
        "run", "--run", str(gc.run(**ONE_SHOT).pk), "--", "sh", "-c",
        f'echo "pull_request={PR_URL}" >> "$GC_EVIDENCE_FILE"',
        GC_CHECKPOINT_FILE=str(named),
    )  # fmt: skip
    assert quiet.returncode == 0, quiet.stderr
    assert named.read_text() == ""  # no inheritance: the file exists, empty
    assert Report.objects.exclude(checkpoint=None).count() == 1
