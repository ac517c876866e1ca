"""A GitHub integration names its repository (issue 30); one made before acts on nothing until
it is made again with one. And the hand whose key created it, whose own evidence its deliveries
never grade."""

import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ("hands", "0004_hand_capabilities"),
        ("schedules", "0001_initial"),
    ]

    operations = [
        migrations.AddField(
            model_name="githubintegration",
            name="repository",
            field=models.CharField(default="", max_length=140),
        ),
        migrations.AddField(
            model_name="githubintegration",
            name="created_by_hand",
            field=models.ForeignKey(
                blank=True,
                null=True,
                on_delete=django.db.models.deletion.SET_NULL,
                related_name="+",
                to="hands.hand",
            ),
        ),
    ]
