"""Attestations ordered by when CI observed them, confined to a lane, never by their own hand,
and each pass backing one attempt (issue 30): `observed_at` (filled from `at`, the arrival, for
the rows before it), `lane`, `attester`, `backs` (filled with the first attempt each old pass
graded ci), and one row per observation."""

import hashlib

import django.db.models.deletion
from django.db import migrations, models


def fill(apps, schema_editor):
    Attestation = apps.get_model("evidence", "Attestation")
    with schema_editor.connection.cursor() as cursor:
        cursor.execute("UPDATE evidence_attestation SET observed_at = at WHERE observed_at IS NULL")
    # evidence.services.observation_key, as it stood when this was written; the id keeps
    # apart two old rows of one URL and result that arrived in one instant.
    for row in Attestation.objects.filter(observation__isnull=True).iterator():
        text = f"legacy|{row.pk}|{row.url}|{row.result}|{row.observed_at.isoformat()}"
        row.observation = hashlib.sha256(text.encode()).hexdigest()
        row.save(update_fields=["observation"])
    with schema_editor.connection.cursor() as cursor:
        cursor.execute(
            "UPDATE evidence_attestation AS a SET backs_id = ("
            "  SELECT min(e.attempt_id) FROM evidence_evidence AS e"
            "  WHERE e.attestation_id = a.id AND e.grade = 'ci'"
            ") WHERE a.result = 'pass' AND a.backs_id IS NULL"
        )
        # The new foreign keys are deferred: check them now, so that the ALTER below does
        # not meet this transaction's pending trigger events.
        cursor.execute("SET CONSTRAINTS ALL IMMEDIATE")


class Migration(migrations.Migration):

    dependencies = [
        ("fleet", "0014_report_workspace"),
        ("hands", "0004_hand_capabilities"),
        ("evidence", "0003_evidence_workspace"),
    ]

    operations = [
        migrations.AddField(
            model_name="attestation",
            name="attester",
            field=models.ForeignKey(
                blank=True,
                null=True,
                on_delete=django.db.models.deletion.SET_NULL,
                related_name="+",
                to="hands.hand",
            ),
        ),
        migrations.AddField(
            model_name="attestation",
            name="backs",
            field=models.ForeignKey(
                blank=True,
                null=True,
                on_delete=django.db.models.deletion.SET_NULL,
                related_name="+",
                to="fleet.attempt",
            ),
        ),
        migrations.AddField(
            model_name="attestation",
            name="lane",
            field=models.ForeignKey(
                blank=True,
                null=True,
                on_delete=django.db.models.deletion.CASCADE,
                related_name="+",
                to="hands.lane",
            ),
        ),
        migrations.AddField(
            model_name="attestation",
            name="observed_at",
            field=models.DateTimeField(null=True),
        ),
        migrations.AddField(
            model_name="attestation",
            name="observation",
            field=models.CharField(max_length=64, null=True),
        ),
        migrations.RunPython(fill, migrations.RunPython.noop),
        migrations.AlterField(
            model_name="attestation",
            name="observed_at",
            field=models.DateTimeField(),
        ),
        migrations.AlterField(
            model_name="attestation",
            name="observation",
            field=models.CharField(max_length=64),
        ),
        migrations.AddConstraint(
            model_name="attestation",
            constraint=models.UniqueConstraint(
                fields=("workspace", "observation"), name="attestation_observation_unique"
            ),
        ),
    ]
