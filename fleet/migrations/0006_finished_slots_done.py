"""A slot whose last attempt finished is done: its lease retired, so nothing claims it again;
an open run whose every slot is done is done. Before this, a finish freed the slot."""

from django.db import migrations
from django.db.models import OuterRef, Subquery


def finished_slots_done(apps, schema_editor):
    Attempt = apps.get_model("fleet", "Attempt")
    Slot = apps.get_model("fleet", "Slot")
    Run = apps.get_model("fleet", "Run")
    Lease = apps.get_model("leases", "Lease")
    last_end = Attempt.objects.filter(slot=OuterRef("pk")).order_by("-id").values("end")[:1]
    finished = (
        Slot.objects.annotate(last_end=Subquery(last_end))
        .filter(last_end="finished", lease__status="free")
        .values("lease_id")
    )
    Lease.objects.filter(pk__in=finished).update(status="retired")
    with_slots = Slot.objects.values("run_id")
    # Done when its last attempt ended; no run_done event: the transition happened before
    # there was one to record.
    last_end = (
        Attempt.objects.filter(run=OuterRef("pk"), ended_at__isnull=False)
        .order_by("-ended_at")
        .values("ended_at")[:1]
    )
    Run.objects.filter(state="open", pk__in=with_slots).exclude(
        slots__lease__status__in=["free", "held"]
    ).update(state="done", closed_at=Subquery(last_end))


def done_slots_open(apps, schema_editor):
    apps.get_model("leases", "Lease").objects.filter(status="retired").update(status="free")
    apps.get_model("fleet", "Run").objects.filter(state="done").update(state="open")


class Migration(migrations.Migration):
    dependencies = [
        ("fleet", "0005_alter_run_state"),
        ("leases", "0006_alter_event_kind_alter_lease_status"),
    ]

    operations = [migrations.RunPython(finished_slots_done, done_slots_open)]
