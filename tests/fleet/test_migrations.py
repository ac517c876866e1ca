"""Data migrations, run on a database that holds rows in the schema before them."""

from __future__ import annotations

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
