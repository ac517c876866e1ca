"""Leave room on each page of the lease table so a renewal's new row version fits beside the old
one: with no indexed column changed (see engine.RENEWAL_NOTE), PostgreSQL then updates in place
(HOT) instead of adding index entries on every heartbeat."""

from django.db import migrations


def set_fillfactor(apps, schema_editor):  # noqa: ANN001, ANN201
    schema_editor.execute("ALTER TABLE leases_lease SET (fillfactor = 70)")


def reset_fillfactor(apps, schema_editor):  # noqa: ANN001, ANN201
    schema_editor.execute("ALTER TABLE leases_lease RESET (fillfactor)")


class Migration(migrations.Migration):
    dependencies = [("leases", "0002_event_undispatched_idx")]

    operations = [migrations.RunPython(set_fillfactor, reset_fillfactor)]
