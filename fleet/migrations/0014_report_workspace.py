"""The report's workspace, denormalised from its attempt so that every table carries the
distribution key (docs/scale.md, "Sharding"): added nullable, filled from the attempt in one
statement, then made NOT NULL. No index: the hot report's INSERT writes no more than before."""

import django.db.models.deletion
from django.db import migrations, models


def fill(apps, schema_editor):
    with schema_editor.connection.cursor() as cursor:
        cursor.execute(
            "UPDATE fleet_report SET workspace_id = parent.workspace_id "
            "FROM fleet_attempt AS parent "
            "WHERE parent.id = fleet_report.attempt_id "
            "AND fleet_report.workspace_id IS NULL"
        )
        # The new foreign key is deferred: check it now, so that the ALTER below does not
        # meet this transaction's pending trigger events.
        cursor.execute("SET CONSTRAINTS ALL IMMEDIATE")


class Migration(migrations.Migration):

    dependencies = [
        ("hands", "0004_hand_capabilities"),
        ("fleet", "0013_unique_with_workspace"),
    ]

    operations = [
        migrations.AddField(
            model_name="report",
            name="workspace",
            field=models.ForeignKey(
                db_index=False,
                null=True,
                on_delete=django.db.models.deletion.DO_NOTHING,
                related_name="+",
                to="hands.workspace",
            ),
        ),
        migrations.RunPython(fill, migrations.RunPython.noop),
        migrations.AlterField(
            model_name="report",
            name="workspace",
            field=models.ForeignKey(
                db_index=False,
                on_delete=django.db.models.deletion.DO_NOTHING,
                related_name="+",
                to="hands.workspace",
            ),
        ),
    ]
