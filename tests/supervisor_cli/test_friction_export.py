"""A supervisor's friction export (`GET /friction/export`) through the client and gctl against
the live server: `friction_export("md" | "json")` on `Client` and `AsyncClient` answers the
document as the server wrote it (a Markdown table and its total, or the JSON list), filtered by
lane and time; `gctl friction --export md|json` prints it; a key without `supervise` is refused
(exit 5), a lane-limited key exports its lane's only, and a format gctl does not know is a usage
error (exit 2)."""

from __future__ import annotations

import json
from typing import Any

import pytest
from groundcontrol_client import Client, ScopeDenied

from hands.models import Lane
from tests.supervisor_cli.shells import Shell
from tests.support.live import Fleet

pytestmark = pytest.mark.django_db(transaction=True)

EXIT_OK, EXIT_USAGE, EXIT_AUTH = 0, 2, 5


@pytest.fixture
def filed(gc: Fleet, planner_key: str, docs: Lane) -> dict[str, int]:
    """Two reports, one a lane (rewalk, then docs), filed by the supervisor: their ids."""
    with Client(gc.url, planner_key) as boss:
        first = boss.friction_file("the migrations lock was held", minutes=25, lane="rewalk")
        second = boss.friction_file(
            "flaky [docs](https://x.test) build", instead="wrote tests", minutes=5, lane="docs"
        )
    return {"rewalk": first.id, "docs": second.id}


def test_it_exports_markdown_and_json_as_the_server_writes_them(
    planner: Shell, filed: dict[str, int]
) -> None:
    markdown = planner.friction_export("md")
    lines = markdown.splitlines()
    assert lines[0] == "## Friction reports"
    assert lines[2].startswith("| When (UTC) | Lane | Run | Attempt | Filed by | Minutes |")
    rows = [line for line in lines[4:] if line.startswith("| ")]
    assert [row.split(" | ")[1] for row in rows] == ["docs", "rewalk"]  # newest first
    # The server's text, made inert for a tracker: the link is no link.
    assert "https://x.test" not in markdown and "\\[docs\\]" in markdown
    assert markdown.endswith("2 reports, 30 minutes lost.\n")
    assert planner.friction_export("markdown") == markdown

    exported = json.loads(planner.friction_export("json"))
    assert [report["id"] for report in exported] == [filed["docs"], filed["rewalk"]]
    assert [report.id for report in planner.friction_reports()] == [
        report["id"] for report in exported
    ]
    only_docs = json.loads(planner.friction_export("JSON", lane="docs"))
    assert [report["id"] for report in only_docs] == [filed["docs"]]
    assert planner.friction_export("md", since="2999-01-01T00:00:00Z").endswith(
        "0 reports, 0 minutes lost.\n"
    )


def test_a_key_without_supervise_is_refused_and_a_lane_key_exports_its_lane(
    worker: Shell, planner: Shell, lane_key: str, filed: dict[str, int]
) -> None:
    with pytest.raises(ScopeDenied):
        worker.friction_export("md")
    mine = json.loads(planner.with_key(lane_key).friction_export("json"))
    assert [report["id"] for report in mine] == [filed["rewalk"]]
    assert "flaky" not in planner.with_key(lane_key).friction_export("md")


def test_a_format_it_does_not_know_is_refused_before_anything_is_sent() -> None:
    # Nothing listens on port 9: a call that was sent would fail to connect, not say this.
    with Client("http://127.0.0.1:9", "gc_nothing_here") as client:
        with pytest.raises(ValueError, match="md \\(Markdown\\) or json, not 'csv'"):
            client.friction_export("csv")


def test_gctl_friction_export_prints_the_document(
    gc: Fleet, planner_key: str, filed: dict[str, int]
) -> None:
    def gctl(*args: str, key: str = planner_key) -> Any:
        return gc.gctl("friction", *args, key=key)

    markdown = gctl("--export", "md")
    assert markdown.returncode == EXIT_OK, markdown.stderr
    with Client(gc.url, planner_key) as boss:
        assert markdown.stdout == boss.friction_export("md")
        as_json = boss.friction_export("json")
    assert markdown.stdout.endswith("2 reports, 30 minutes lost.\n")

    exported = gctl("--export", "json")
    assert exported.returncode == EXIT_OK, exported.stderr
    assert exported.stdout == f"{as_json}\n"
    assert json.loads(gctl("--json", "--export", "json").stdout) == json.loads(as_json)
    docs = json.loads(gctl("--export", "json", "--lane", "docs").stdout)
    assert [report["id"] for report in docs] == [filed["docs"]]

    for args in (
        ("--export", "csv"),
        ("--export", "md", "some text"),
        ("--export", "md", "--list"),
        ("--json", "--export", "md"),
    ):
        usage = gctl(*args)
        assert usage.returncode == EXIT_USAGE, (args, usage.stderr)
        assert not usage.stdout
    refused = gctl("--export", "md", key=gc.key_a)
    assert refused.returncode == EXIT_AUTH, refused.stderr
    assert refused.stderr.endswith("(scope_denied)\n") and not refused.stdout
