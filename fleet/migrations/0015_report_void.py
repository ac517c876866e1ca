"""A report's cost voided by a supervisor (fleet/costs/voids.py): when, by whom, why. Each new
column has a constant default (the hot report's INSERT leaves them out), so PostgreSQL adds it
without rewriting the table."""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("fleet", "0014_report_workspace"),
    ]

    operations = [
        migrations.AddField(
            model_name="report",
            name="void_reason",
            field=models.TextField(blank=True, db_default="", default=""),
        ),
        migrations.AddField(
            model_name="report",
            name="voided_at",
            field=models.DateTimeField(blank=True, null=True),
        ),
        migrations.AddField(
            model_name="report",
            name="voided_by",
            field=models.CharField(blank=True, db_default="", default="", max_length=200),
        ),
        migrations.AddField(
            model_name="report",
            name="voided_key",
            field=models.CharField(blank=True, db_default="", default="", max_length=32),
        ),
    ]
