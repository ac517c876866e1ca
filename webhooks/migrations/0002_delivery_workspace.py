"""The delivery's workspace, denormalised from its webhook so that every table carries the
distribution key (docs/scale.md, "Sharding"): added nullable, filled from the parent in one
statement, then made NOT NULL."""

import django.db.models.deletion
from django.db import migrations, models


def fill(apps, schema_editor):
    with schema_editor.connection.cursor() as cursor:
        cursor.execute(
            "UPDATE fleet_webhookdelivery SET workspace_id = parent.workspace_id "
            "FROM fleet_webhook AS parent "
            "WHERE parent.id = fleet_webhookdelivery.webhook_id "
            "AND fleet_webhookdelivery.workspace_id IS NULL"
        )
        # The new foreign key is deferred: check it now, so that the ALTER below does not
        # meet this transaction's pending trigger events.
        cursor.execute("SET CONSTRAINTS ALL IMMEDIATE")


class Migration(migrations.Migration):

    dependencies = [
        ("hands", "0004_hand_capabilities"),
        ("webhooks", "0001_initial"),
    ]

    operations = [
        migrations.AddField(
            model_name="webhookdelivery",
            name="workspace",
            field=models.ForeignKey(
                null=True,
                on_delete=django.db.models.deletion.CASCADE,
                related_name="+",
                to="hands.workspace",
            ),
        ),
        migrations.RunPython(fill, migrations.RunPython.noop),
        migrations.AlterField(
            model_name="webhookdelivery",
            name="workspace",
            field=models.ForeignKey(
                on_delete=django.db.models.deletion.CASCADE,
                related_name="+",
                to="hands.workspace",
            ),
        ),
    ]
