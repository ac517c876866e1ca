"""`scripts/run` keeps the demo fleet in a `demo` workspace of its own, apart from the admin's:
the admin is a member of both, and the admin's board starts clean. Running it again reuses both."""

from __future__ import annotations

import io
import json
import time

import pytest
from django.contrib.auth import get_user_model
from django.core.management import call_command
from django.test import Client

from demo import fleet as demo
from fleet.models import Attempt, Run
from friction.models import FrictionReport
from hands.models import Hand, HandKey, Membership, Workspace
from leases.models import Event, Lease, Refusal

pytestmark = pytest.mark.django_db(transaction=True)

OWN = "default"


def bootstrap(*extra: str) -> dict:
    """The bootstrap line of `scripts/run`."""
    out = io.StringIO()
    call_command(
        "bootstrap",
        "--workspace",
        OWN,
        "--username",
        "admin",
        "--password",
        "pw-123456",
        "--member-of",
        "demo",
        "--json",
        *extra,
        stdout=out,
    )
    return json.loads(out.getvalue())


def test_bootstrap_makes_the_admin_a_member_of_both_and_is_idempotent() -> None:
    first = bootstrap()
    assert first["workspace"] == OWN and first["member_of"] == ["demo"]
    assert first["supervisor_key"]
    admin = get_user_model().objects.get(username="admin")
    roles = dict(Membership.objects.filter(user=admin).values_list("workspace__name", "role"))
    assert roles == {OWN: "admin", "demo": "admin"}
    # The supervisor hand is the admin's, in the admin's own workspace only.
    assert list(Hand.objects.values_list("workspace__name", "name")) == [(OWN, "admin-supervisor")]
    again = bootstrap()
    assert again["supervisor_key"] is None and again["member_of"] == ["demo"]
    counts = (Workspace.objects.count(), Membership.objects.count(), Hand.objects.count())
    assert counts == (2, 2, 1) and HandKey.objects.count() == 1


def test_the_command_says_which_other_workspaces_the_admin_belongs_to() -> None:
    out = io.StringIO()
    call_command(
        "bootstrap",
        "--workspace",
        OWN,
        "--username",
        "admin",
        "--password",
        "pw-123456",
        "--member-of",
        "demo",
        stdout=out,
    )
    assert "also admin of:    demo" in out.getvalue()


def test_the_demo_works_in_its_own_workspace_and_the_admins_stays_clean(live_server) -> None:
    bootstrap()
    plan = demo.setup(workspace_name="demo", timings=demo.FAST)
    lines: list[str] = []
    fleet = demo.DemoFleet(plan, url=live_server.url, timings=demo.FAST, say=lines.append)
    fleet.start()
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and not (
            FrictionReport.objects.exists() and Attempt.objects.filter(end="lost").exists()
        ):
            time.sleep(0.2)
    finally:
        fleet.stop()
    own = Workspace.objects.get(name=OWN)
    demo_workspace = Workspace.objects.get(name="demo")
    assert plan.workspace_id == demo_workspace.pk
    # The demo did its work, all of it in `demo`.
    assert FrictionReport.objects.filter(workspace=demo_workspace).exists(), lines
    assert Refusal.objects.filter(workspace_id=demo_workspace.pk).exists(), lines
    assert Attempt.objects.filter(run__workspace=demo_workspace).exists()
    # The admin's own workspace: its supervisor hand, and nothing of the demo's.
    assert list(Hand.objects.filter(workspace=own).values_list("name", flat=True)) == [
        "admin-supervisor"
    ]
    assert not Run.objects.filter(workspace=own).exists()
    assert not Attempt.objects.filter(run__workspace=own).exists()
    assert not Refusal.objects.filter(workspace_id=own.pk).exists()
    assert not FrictionReport.objects.filter(workspace=own).exists()
    assert not Lease.objects.filter(workspace_id=own.pk).exists()
    assert not Event.objects.filter(workspace_id=own.pk).exclude(kind="key_issued").exists()
    # The admin lands on its own, clean board (with the first-run guide) and switches to the
    # demo's in the header.
    client = Client()
    client.force_login(get_user_model().objects.get(username="admin"))
    html = client.get("/").content.decode()
    assert 'id="first-run"' in html and "demo-healthy" not in html
    switched = client.post("/workspace/", {"workspace": demo_workspace.pk})
    assert switched.status_code == 302
    html = client.get("/").content.decode()
    assert 'id="first-run"' not in html and "demo-healthy" in html
