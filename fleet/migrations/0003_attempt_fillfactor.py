"""Room on each page of the attempt table: a report stamps `last_report_at` (not indexed), so
with free space on the page PostgreSQL updates the row in place (HOT)."""

from django.db import migrations


def set_fillfactor(apps, schema_editor):  # noqa: ANN001, ANN201
    schema_editor.execute("ALTER TABLE fleet_attempt SET (fillfactor = 70)")


def reset_fillfactor(apps, schema_editor):  # noqa: ANN001, ANN201
    schema_editor.execute("ALTER TABLE fleet_attempt RESET (fillfactor)")


class Migration(migrations.Migration):
    dependencies = [("fleet", "0002_webhooks_jobruns")]

    operations = [migrations.RunPython(set_fillfactor, reset_fillfactor)]
