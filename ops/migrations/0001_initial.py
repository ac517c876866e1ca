"""The job-run record, moved here from `fleet`."""

from django.db import migrations, models


class Migration(migrations.Migration):

    initial = True

    dependencies = [
        ('fleet', '0006_finished_slots_done'),
    ]

    # State only: the tables were made by fleet's migrations and keep their names
    # (`db_table`); no statement runs against the database.
    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
            migrations.CreateModel(
                name='JobRun',
                fields=[
                    ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                    ('name', models.CharField(max_length=64, unique=True)),
                    ('runs', models.BigIntegerField(default=0)),
                    ('last_started_at', models.DateTimeField(blank=True, null=True)),
                    ('last_finished_at', models.DateTimeField(blank=True, null=True)),
                    ('last_duration_s', models.FloatField(default=0)),
                    ('last_processed', models.BigIntegerField(default=0)),
                    ('last_failed', models.BigIntegerField(default=0)),
                    ('last_lag_s', models.FloatField(default=0)),
                ],
                options={
                    'db_table': 'fleet_jobrun',
                },
            ),
            ],
            database_operations=[],
        ),
    ]
