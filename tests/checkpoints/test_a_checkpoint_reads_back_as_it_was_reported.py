"""A successor resumes from the checkpoint exactly as its predecessor reported it. A checkpoint
is kept as the compact JSON text its size was measured on (`Report.checkpoint` is text): were it
jsonb, whose numbers are PostgreSQL numerics, a float written with an exponent (1.5e300, 1e20)
would come back as an integer of hundreds of digits, whose value is the decimal, not the float
that was sent, and a document within the size limit as sent could be fifty times over it as
stored and served. Floats, integers of any size, strings in any script and the order of an
object's keys read back as they were sent, by every reader: the claim's answer, the brief, the
run's timeline and its JSON Lines export."""

from __future__ import annotations

import html
import json
from typing import Any

import pytest

from fleet.attempts.checkpoints import MAX_CHECKPOINT_BYTES, checkpoint_text
from fleet.models import Report
from tests.support.api import Api, claim, release, report

pytestmark = pytest.mark.django_db

DOCUMENT = {"loss": 1.5e300, "seen_bytes": 1e20, "step": 3}

# Every kind of value a document holds, as a reader may get it wrong: floats large, small and
# whole, integers beyond 64 bits, text beyond ASCII (and the two characters JSON renderers
# escape), keys in an order no database would keep.
EVERY_KIND = {
    "zeta": "last key first",
    "floats": [1.5e300, 1e20, 1e-7, 0.1, -2.5, 1.0, 0.0, 5e-324, 1.7976931348623157e308],
    "ints": [0, -1, 2**63, 2**70, -(10**30), 10**100],
    "text": ["naïve", "日本語", "🚀 done", "line\u2028break\u2029", 'tab\tand "quotes"'],
    "nested": {"b": [True, False, None], "a": {}},
    "alpha": [],
}


def typed(value: Any) -> Any:
    """`value` with each part's type beside it: 1, 1.0 and True are equal in Python, not here."""
    if isinstance(value, dict):
        return ("dict", [(key, typed(item)) for key, item in value.items()])
    if isinstance(value, list):
        return ("list", [typed(item) for item in value])
    return (type(value).__name__, value)


def compact(value: Any) -> bytes:
    return json.dumps(value, separators=(",", ":")).encode()


def inherit(api: Api, run: Any, document: Any, process: str | None) -> dict[str, Any]:
    """The successor's claim, after the first attempt on the slot reported `document` (by the
    hot report's one statement with a process, by the service's way without) and let go."""
    attempt = claim(api, run)
    sent = report(api, attempt, process, kind="note", checkpoint=document)
    assert sent.status_code == 200, sent.content
    assert release(api, attempt).status_code == 200
    return claim(api, run, "host-a:2", slot=attempt["slot"])


@pytest.mark.parametrize("process", ["host-a:1", None], ids=["hot", "service"])
def test_a_large_float_in_a_checkpoint_reaches_the_successor_unchanged(
    api_a: Api, run: Any, process: str | None
) -> None:
    successor = inherit(api_a, run, DOCUMENT, process)
    read = api_a.get(f"/attempts/{successor['id']}/brief").json()["checkpoint"]
    assert read == DOCUMENT
    assert typed(read) == typed(DOCUMENT)


def test_a_checkpoint_within_its_limit_is_kept_and_served_within_it(
    api_a: Api, boss: Api, run: Any
) -> None:
    """The limit is measured on the JSON as sent and the document is served as stored: 2,340
    copies of 1e+300 are 16,379 bytes sent, and as many in every successor's claim and brief
    and in the timeline (as jsonb they were about 700 KB)."""
    document = [1e300] * 2340
    assert len(compact(document)) <= MAX_CHECKPOINT_BYTES
    successor = inherit(api_a, run, document, "host-a:1")
    brief = api_a.get(f"/attempts/{successor['id']}/brief").json()
    timeline = boss.get(f"/runs/{run.pk}/timeline").json()
    (kept,) = [e["data"]["checkpoint"] for e in timeline if e["kind"] == "report"]
    for where, served in (("claim", successor["checkpoint"]), ("brief", brief["checkpoint"])):
        assert len(compact(served)) <= MAX_CHECKPOINT_BYTES, (where, len(compact(served)))
        assert served == document, where
    assert compact(kept) == compact(document)


@pytest.mark.parametrize("process", ["host-a:1", None], ids=["hot", "service"])
def test_what_is_stored_is_the_text_that_was_measured(
    api_a: Api, run: Any, process: str | None
) -> None:
    attempt = claim(api_a, run)
    sent = report(api_a, attempt, process, kind="note", checkpoint=EVERY_KIND)
    assert sent.status_code == 200, sent.content
    (stored,) = Report.objects.exclude(checkpoint=None).values_list("checkpoint", flat=True)
    assert stored == checkpoint_text(EVERY_KIND)
    assert len(stored.encode()) <= MAX_CHECKPOINT_BYTES


@pytest.mark.parametrize("process", ["host-a:1", None], ids=["hot", "service"])
def test_every_kind_of_value_reads_back_equal_and_of_its_type_everywhere(
    api_a: Api, boss: Api, run: Any, process: str | None
) -> None:
    successor = inherit(api_a, run, EVERY_KIND, process)
    brief = api_a.get(f"/attempts/{successor['id']}/brief")
    assert brief.status_code == 200, brief.content
    timeline = boss.get(f"/runs/{run.pk}/timeline")
    assert timeline.status_code == 200, timeline.content
    export = boss.get(f"/runs/{run.pk}/timeline", {"format": "jsonl"})
    assert export.status_code == 200
    lines = [json.loads(line) for line in b"".join(export.streaming_content).splitlines()]
    read = {
        "claim": successor["checkpoint"],
        "brief": brief.json()["checkpoint"],
        "timeline": [e["data"]["checkpoint"] for e in timeline.json() if e["kind"] == "report"],
        "jsonl": [e["data"]["checkpoint"] for e in lines if e["kind"] == "report"],
    }
    for where in ("timeline", "jsonl"):
        (read[where],) = read[where]
    for where, value in read.items():
        assert value == EVERY_KIND, where
        assert typed(value) == typed(EVERY_KIND), where
        assert list(value) == list(EVERY_KIND), where  # the keys in the order reported


def test_the_run_page_shows_the_checkpoint_as_it_was_reported(
    api_a: Api, run: Any, viewer_client: Any
) -> None:
    """The page pretty-prints the document as reported: its numbers as sent, its keys in their
    order (jsonb would print 1.5e300 as 15 and 299 zeros, and sort the keys)."""
    attempt = claim(api_a, run)
    document = {"zeta": 1.5e300, "alpha": 2**70, "text": "naïve"}
    assert report(api_a, attempt, kind="note", checkpoint=document).status_code == 200
    page = viewer_client.get(f"/runs/{run.pk}/")
    assert page.status_code == 200
    shown = html.unescape(page.content.decode())
    assert '"zeta": 1.5e+300,\n  "alpha": 1180591620717411303424,\n  "text": "naïve"' in shown
    assert "0" * 40 not in shown
