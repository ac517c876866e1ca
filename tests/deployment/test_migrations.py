"""Data migrations, run on a database that holds rows in the schema before them."""

from __future__ import annotations

import functools
from collections.abc import Iterator

import pytest
from django.db import connection
from django.db.migrations.executor import MigrationExecutor

pytestmark = pytest.mark.django_db(transaction=True)

BEFORE = [("fleet", "0005_alter_run_state"), ("leases", "0006_alter_event_kind_alter_lease_status")]
AFTER = [("fleet", "0006_finished_slots_done")]


@pytest.fixture
def old_schema() -> Iterator[MigrationExecutor]:
    executor = MigrationExecutor(connection)
    executor.migrate(BEFORE)
    yield executor
    executor.loader.build_graph()
    executor.migrate(executor.loader.graph.leaf_nodes())


def test_a_slot_whose_last_attempt_finished_becomes_done(old_schema: MigrationExecutor) -> None:
    apps = old_schema.loader.project_state(BEFORE).apps
    Workspace = apps.get_model("fleet", "Workspace")
    Lane = apps.get_model("fleet", "Lane")
    WorkPackage = apps.get_model("fleet", "WorkPackage")
    Run = apps.get_model("fleet", "Run")
    Slot = apps.get_model("fleet", "Slot")
    Hand = apps.get_model("fleet", "Hand")
    Attempt = apps.get_model("fleet", "Attempt")
    Lease = apps.get_model("leases", "Lease")

    ws = Workspace.objects.create(name="acme")
    lane = Lane.objects.create(workspace=ws, slug="l", name="l")
    package = WorkPackage.objects.create(workspace=ws, lane=lane, key="k", title="t")
    hand = Hand.objects.create(workspace=ws, name="a")

    def run_with(ends: list[list[str]], *, held: set[int] = frozenset()) -> int:
        """A run whose slot i had attempts ending ends[i] (in order); `held`: slots whose lease
        a newer, open tenure holds."""
        run = Run.objects.create(
            workspace=ws, work_package=package, title="r", slot_count=len(ends)
        )
        for index, history in enumerate(ends):
            lease = Lease.objects.create(
                workspace_id=ws.pk,
                resource=f"run/{run.pk}/slot/{index}",
                kind="slot",
                status="held" if index in held else "free",
                holder="a",
                fence=len(history) + (index in held),
            )
            slot = Slot.objects.create(run=run, index=index, lease=lease)
            for fence, end in enumerate(history, start=1):
                Attempt.objects.create(
                    workspace=ws,
                    run=run,
                    slot=slot,
                    hand=hand,
                    lane=lane,
                    lease=lease,
                    fence=fence,
                    process_id="p",
                    claimed_at="2030-01-01T00:00:00Z",
                    end=end,
                    ended_at="2030-01-01T00:01:00Z",
                )
        return run.pk

    all_finished = run_with([["released", "finished"], ["finished"]])
    partly = run_with([["finished"], ["finished", "released"], []])
    refinished_then_held = run_with([["finished"]], held={0})

    old_schema.loader.build_graph()
    old_schema.migrate(AFTER)
    apps = old_schema.loader.project_state(AFTER).apps
    Run = apps.get_model("fleet", "Run")
    Slot = apps.get_model("fleet", "Slot")

    def slot_statuses(run_id: int) -> list[str]:
        return list(
            Slot.objects.filter(run_id=run_id)
            .order_by("index")
            .values_list("lease__status", flat=True)
        )

    assert slot_statuses(all_finished) == ["retired", "retired"]
    done = Run.objects.get(pk=all_finished)
    assert done.state == "done"
    assert done.closed_at is not None and done.closed_at.isoformat().startswith("2030-01-01")
    assert slot_statuses(partly) == ["retired", "free", "free"]
    assert Run.objects.get(pk=partly).state == "open"
    # A slot a newer tenure holds is not done, whatever came before.
    assert slot_statuses(refinished_then_held) == ["held"]
    assert Run.objects.get(pk=refinished_then_held).state == "open"


# Before the apps were split: every model in fleet's state, none in hands, webhooks or ops.
BEFORE_SPLIT = [
    ("fleet", "0006_finished_slots_done"),
    ("leases", "0006_alter_event_kind_alter_lease_status"),
    ("evidence", "0001_initial"),
    ("hands", None),
    ("webhooks", None),
    ("ops", None),
]


def test_the_split_into_apps_keeps_every_row_and_relation() -> None:
    """Workspaces, members, lanes, hands, keys and replay records moved to `hands`, webhooks and
    deliveries to `webhooks`, job runs to `ops`, by state only: a database holding rows in the
    schema before the split finds every one of them, and every relation, through the new models."""
    from django.contrib.auth import get_user_model

    from evidence.models import Evidence
    from fleet.models import Attempt, Report, Run
    from hands.models import Hand, HandKey, IdempotencyRecord, Lane, Membership, Workspace
    from ops.models import JobRun
    from webhooks.models import Webhook, WebhookDelivery

    executor = MigrationExecutor(connection)
    executor.migrate(BEFORE_SPLIT)
    try:
        old = executor.loader.project_state([t for t in BEFORE_SPLIT if t[1]]).apps
        model = functools.partial(old.get_model, "fleet")
        user = old.get_model(*get_user_model()._meta.label.split(".")).objects.create(
            username="ada"
        )
        ws = model("Workspace").objects.create(name="acme")
        model("Membership").objects.create(workspace=ws, user_id=user.pk, role="admin")
        lane = model("Lane").objects.create(workspace=ws, slug="docs", name="Docs")
        hand = model("Hand").objects.create(workspace=ws, name="a", lane=lane)
        model("HandKey").objects.create(
            hand=hand, prefix="abc123", secret_hash="h" * 64, scopes=["work"], lane=lane
        )
        model("IdempotencyRecord").objects.create(
            workspace=ws,
            key_prefix="abc123",
            idempotency_key="i-1",
            method="POST",
            path="/api/v1/x",
            body_hash="b" * 64,
            status_code=201,
            response={"id": 1},
        )
        package = model("WorkPackage").objects.create(workspace=ws, lane=lane, key="k", title="t")
        run = model("Run").objects.create(workspace=ws, work_package=package, title="r")
        lease = old.get_model("leases", "Lease").objects.create(
            workspace_id=ws.pk, resource=f"run/{run.pk}/slot/0", kind="slot", holder="a", fence=1
        )
        slot = model("Slot").objects.create(run=run, index=0, lease=lease)
        attempt = model("Attempt").objects.create(
            workspace=ws,
            run=run,
            slot=slot,
            hand=hand,
            lane=lane,
            lease=lease,
            fence=1,
            process_id="p",
            claimed_at="2030-01-01T00:00:00Z",
        )
        model("Report").objects.create(attempt=attempt, kind="note", message="hello")
        old.get_model("evidence", "Evidence").objects.create(
            attempt=attempt, kind="pull_request", url="https://example.com/pr/1"
        )
        hook = model("Webhook").objects.create(
            workspace=ws, url="https://example.com/hook", kinds=["lost"], secret="s"
        )
        model("WebhookDelivery").objects.create(webhook=hook, event_id=7, kind="lost", body="{}")
        model("JobRun").objects.create(name="sweep_leases", runs=3)
    finally:
        executor.loader.build_graph()
        executor.migrate(executor.loader.graph.leaf_nodes())

    moved = Workspace.objects.get(name="acme")
    member = Membership.objects.get(workspace=moved)
    assert (member.user.username, member.role) == ("ada", "admin")
    key = HandKey.objects.select_related("hand__workspace", "lane").get(prefix="abc123")
    assert (key.hand.name, key.hand.workspace, key.lane.slug) == ("a", moved, "docs")
    assert Hand.objects.get(name="a").lane == Lane.objects.get(slug="docs", workspace=moved)
    assert IdempotencyRecord.objects.get(idempotency_key="i-1").response == {"id": 1}
    attempt = Attempt.objects.select_related("hand", "lane", "workspace").get()
    assert (attempt.hand.name, attempt.lane.slug, attempt.workspace) == ("a", "docs", moved)
    assert Run.objects.get().work_package.lane.workspace == moved
    assert Report.objects.get(attempt=attempt).message == "hello"
    assert Evidence.objects.get(attempt=attempt).url == "https://example.com/pr/1"
    delivery = WebhookDelivery.objects.select_related("webhook__workspace").get()
    assert (delivery.event_id, delivery.webhook.workspace) == (7, moved)
    assert Webhook.objects.get().kinds == ["lost"]
    assert JobRun.objects.get(name="sweep_leases").runs == 3
    # The relations hold across the apps: deleting the workspace takes its hands and attempts.
    moved.delete()
    assert not Hand.objects.exists() and not Attempt.objects.exists()


# Before the child tables carried their workspace (docs/scale.md, "Sharding").
BEFORE_WORKSPACE = [
    ("fleet", "0011_budgets"),
    ("evidence", "0002_grades_attestations"),
    ("webhooks", "0001_initial"),
]


def test_the_child_tables_get_their_parents_workspace() -> None:
    """Slots, reports, evidence and webhook deliveries written before the column existed get their
    parent's workspace, each its own (two workspaces, so a fill from the wrong parent shows)."""
    from evidence.models import Evidence
    from fleet.models import Report, Slot
    from webhooks.models import WebhookDelivery

    executor = MigrationExecutor(connection)
    moved = {app for app, _ in BEFORE_WORKSPACE}
    # The other apps stay where they are (their newest state, which these rows must fit).
    before = BEFORE_WORKSPACE + [
        node for node in executor.loader.graph.leaf_nodes() if node[0] not in moved
    ]
    executor.migrate(before)
    expected: dict[str, dict[int, int]] = {"slot": {}, "report": {}, "evidence": {}, "delivery": {}}
    try:
        old = executor.loader.project_state(before).apps
        for name in ("acme", "globex"):
            ws = old.get_model("hands", "Workspace").objects.create(name=name)
            lane = old.get_model("hands", "Lane").objects.create(workspace=ws, slug="l", name="l")
            hand = old.get_model("hands", "Hand").objects.create(workspace=ws, name="a")
            package = old.get_model("fleet", "WorkPackage").objects.create(
                workspace=ws, lane=lane, key="k", title="t"
            )
            run = old.get_model("fleet", "Run").objects.create(
                workspace=ws, work_package=package, title="r"
            )
            lease = old.get_model("leases", "Lease").objects.create(
                workspace_id=ws.pk, resource=f"run/{run.pk}/slot/0", kind="slot", fence=1
            )
            slot = old.get_model("fleet", "Slot").objects.create(run=run, index=0, lease=lease)
            attempt = old.get_model("fleet", "Attempt").objects.create(
                workspace=ws,
                run=run,
                slot=slot,
                hand=hand,
                lane=lane,
                lease=lease,
                fence=1,
                process_id="p",
                claimed_at="2030-01-01T00:00:00Z",
            )
            report = old.get_model("fleet", "Report").objects.create(
                attempt=attempt, kind="note", message="hello"
            )
            evidence = old.get_model("evidence", "Evidence").objects.create(
                attempt=attempt, kind="pull_request", url="https://example.com/pr/1"
            )
            hook = old.get_model("webhooks", "Webhook").objects.create(
                workspace=ws, url="https://example.com/hook", kinds=["lost"], secret="s"
            )
            delivery = old.get_model("webhooks", "WebhookDelivery").objects.create(
                webhook=hook, event_id=7, kind="lost", body="{}"
            )
            expected["slot"][slot.pk] = ws.pk
            expected["report"][report.pk] = ws.pk
            expected["evidence"][evidence.pk] = ws.pk
            expected["delivery"][delivery.pk] = ws.pk
    finally:
        executor.loader.build_graph()
        executor.migrate(executor.loader.graph.leaf_nodes())

    assert len(set(expected["slot"].values())) == 2
    assert dict(Slot.objects.values_list("pk", "workspace_id")) == expected["slot"]
    assert dict(Report.objects.values_list("pk", "workspace_id")) == expected["report"]
    assert dict(Evidence.objects.values_list("pk", "workspace_id")) == expected["evidence"]
    assert dict(WebhookDelivery.objects.values_list("pk", "workspace_id")) == expected["delivery"]
    # NOT NULL now: a row without its workspace is refused by the database.
    with connection.cursor() as cursor:
        for table in ("fleet_slot", "fleet_report", "evidence_evidence", "fleet_webhookdelivery"):
            columns = connection.introspection.get_table_description(cursor, table)
            assert [c.null_ok for c in columns if c.name == "workspace_id"] == [False], table


def test_the_unique_rules_hold_with_the_workspace_in_them() -> None:
    """Each unique constraint took the workspace as its last column (docs/scale.md): the rule
    it enforces is the one it enforced before."""
    from django.db import IntegrityError, transaction

    from fleet.models import Attempt, Slot, WorkPackage
    from hands.models import Hand, Lane, Workspace
    from leases.models import Lease

    ws = Workspace.objects.create(name="acme")
    lane = Lane.objects.create(workspace=ws, slug="l", name="l")
    package = WorkPackage.objects.create(workspace=ws, lane=lane, key="k", title="t")
    run = package.runs.create(workspace=ws, title="r")
    lease = Lease.objects.create(workspace_id=ws.pk, resource="run/1/slot/0", kind="slot")
    other = Lease.objects.create(workspace_id=ws.pk, resource="run/1/slot/1", kind="slot")
    slot = Slot.objects.create(workspace=ws, run=run, index=0, lease=lease)
    hand = Hand.objects.create(workspace=ws, name="a")
    tenure = {"workspace": ws, "run": run, "slot": slot, "hand": hand, "lane": lane}
    Attempt.objects.create(
        **tenure, lease=lease, fence=1, process_id="p", claimed_at="2030-01-01T00:00:00Z"
    )
    for duplicate in (
        lambda: WorkPackage.objects.create(workspace=ws, lane=lane, key="k", title="again"),
        lambda: Slot.objects.create(workspace=ws, run=run, index=0, lease=other),
        lambda: Slot.objects.create(workspace=ws, run=run, index=1, lease=lease),
        lambda: Attempt.objects.create(
            **tenure, lease=lease, fence=1, process_id="q", claimed_at="2030-01-01T00:00:00Z"
        ),
    ):
        with pytest.raises(IntegrityError), transaction.atomic():
            duplicate()
    assert (WorkPackage.objects.count(), Slot.objects.count(), Attempt.objects.count()) == (1, 1, 1)
