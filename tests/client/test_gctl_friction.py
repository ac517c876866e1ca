"""Friction and capabilities through the client against the live server (issue 22): `gctl
friction` linking a refused call by its request id, `gctl friction --list`, `gctl runs` and
`gctl claim` with capabilities, `gctl me`, and the MCP tool `file_friction` linking the
refusal its session was just answered."""

from __future__ import annotations

import asyncio
import concurrent.futures
import json
from typing import Any

import pytest
from groundcontrol_client import AsyncClient, CapabilityMissing, Client
from groundcontrol_client.mcp.server import Session, build_server

from friction.models import FrictionReport
from hands import services as hand_services
from hands.models import Hand, Workspace
from tests.client.conftest import Fleet, attempts_of, mint
from tests.client.test_mcp import drive, text

pytestmark = pytest.mark.django_db(transaction=True)


def test_gctl_friction_files_a_report_linking_a_refused_call(gc: Fleet, owner: Hand) -> None:
    run = gc.run(capabilities=["gpu"])
    refused = gc.gctl("--json", "claim", str(run.pk))
    assert refused.returncode == 3, refused.stderr  # denied
    error = json.loads(refused.stdout or refused.stderr)["error"]
    assert error["code"] == "capability_missing" and error["missing"] == ["gpu"]
    filed = gc.gctl(
        "friction",
        "the GPU run refused me",
        "--instead",
        "took the docs run",
        "--minutes",
        "3",
        "--refusal",
        error["request_id"],
        "--run",
        str(run.pk),
    )
    assert filed.returncode == 0, filed.stderr
    assert "3 min: the GPU run refused me" in filed.stdout
    assert "capability_missing" in filed.stdout
    report = FrictionReport.objects.get()
    assert (report.hand, report.minutes, report.run_id) == ("hand-a", 3, run.pk)
    assert [link.code for link in report.refusals.all()] == ["capability_missing"]
    unknown = gc.gctl("friction", "x", "--refusal", "no-such-id")
    assert unknown.returncode == 1 and "no-such-id" in unknown.stderr
    assert FrictionReport.objects.count() == 1


def test_gctl_friction_list_needs_a_supervisors_key(gc: Fleet, workspace: Workspace) -> None:
    assert gc.gctl("friction", "slow", "--minutes", "2").returncode == 0
    refused = gc.gctl("friction", "--list")
    assert refused.returncode == 5, refused.stderr  # auth: scope_denied
    boss, _ = hand_services.hand_create(workspace=workspace, name="boss")
    listed = gc.gctl("--json", "friction", "--list", key=mint(boss, ["supervise"]))
    assert listed.returncode == 0, listed.stderr
    [report] = json.loads(listed.stdout)
    assert (report["what"], report["minutes"], report["hand"]) == ("slow", 2, "hand-a")
    usage = gc.gctl("friction")
    assert usage.returncode == 2


def test_gctl_friction_names_the_wrapped_attempt(gc: Fleet) -> None:
    run = gc.run()
    claimed = json.loads(gc.gctl("--json", "claim", str(run.pk), "--process-id", "p").stdout)
    filed = gc.gctl("friction", "flaky tests", GC_ATTEMPT=str(claimed["id"]))
    assert filed.returncode == 0, filed.stderr
    assert FrictionReport.objects.get().attempt_id == claimed["id"]


def test_gctl_runs_and_me_show_capabilities(gc: Fleet, owner: Hand) -> None:
    plain = gc.run(title="Plain")
    gpu = gc.run(title="Train", capabilities=["gpu"])
    assert "Train" not in gc.gctl("runs").stdout
    assert "capabilities: none" in gc.gctl("me").stdout
    hand_services.hand_set_capabilities(
        workspace_id=owner.workspace_id, name=owner.name, capabilities=["GPU"]
    )
    runs = gc.gctl("runs").stdout
    assert f"run {gpu.pk}: Train" in runs and "needs gpu" in runs and f"run {plain.pk}" in runs
    assert "capabilities: gpu" in gc.gctl("me").stdout
    assert gc.gctl("claim", str(gpu.pk)).returncode == 0
    assert len(attempts_of(gpu)) == 1


def test_the_client_raises_capability_missing(gc: Fleet) -> None:
    run = gc.run(capabilities=["browser"])
    with Client(gc.url, gc.key_a) as client:
        with pytest.raises(CapabilityMissing) as refused:
            client.claim(run.pk, process_id="p")
    assert refused.value.fields["missing"] == ["browser"]
    assert "pick a run that fits" in str(refused.value)


def test_the_mcp_tool_files_friction_linking_the_sessions_last_refusal(gc: Fleet) -> None:
    run = gc.run(capabilities=["gpu"])
    with Client(gc.url, gc.key_a) as client:
        session = Session(client, process_id="mcp-1")
        tools, claimed, filed = drive(
            build_server(session),
            [
                ("claim", {"run_id": run.pk}),
                (
                    "file_friction",
                    {"what": "no GPU here", "minutes": 4, "recent_refusals": 1},
                ),
            ],
        )
    assert "file_friction" in tools
    assert claimed.is_error and "gpu" in text(claimed)
    assert not filed.is_error, text(filed)
    assert "4 min: no GPU here" in text(filed)
    report = FrictionReport.objects.get()
    assert [link.code for link in report.refusals.all()] == ["capability_missing"]


def test_a_planner_creates_a_run_with_capabilities_from_python(
    gc: Fleet, workspace: Workspace, lane: object
) -> None:
    planner, _ = hand_services.hand_create(workspace=workspace, name="planner")
    with Client(gc.url, mint(planner, ["plan"])) as client:
        package = client.request(
            "POST", "lanes/rewalk/work-packages", json={"title": "P", "key": "p"}
        )
        run = client.run_create(package["id"], title="Train", capabilities=["GPU", "python"])
    assert run.capabilities == ["gpu", "python"]


def test_the_async_client_files_and_lists_friction(gc: Fleet, workspace: Workspace) -> None:
    boss, _ = hand_services.hand_create(workspace=workspace, name="boss")
    boss_key = mint(boss, ["supervise"])

    async def go() -> tuple[Any, list[Any]]:
        async with AsyncClient(gc.url, gc.key_a) as hand, AsyncClient(gc.url, boss_key) as sup:
            filed = await hand.friction_file("async friction", minutes=1, instead="waited")
            return filed, await sup.friction_reports()

    # Its own thread: a loop another test left running must not stop this one from starting.
    with concurrent.futures.ThreadPoolExecutor(max_workers=1) as pool:
        filed, listed = pool.submit(asyncio.run, go()).result()
    assert (filed.what, filed.minutes, filed.instead) == ("async friction", 1, "waited")
    assert [report.id for report in listed] == [filed.id]
