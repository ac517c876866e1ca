"""Webhooks and their deliveries, moved here from `fleet`."""

import django.db.models.deletion
import django.db.models.functions.datetime
from django.db import migrations, models


class Migration(migrations.Migration):

    initial = True

    dependencies = [
        ('fleet', '0006_finished_slots_done'),
        ('hands', '0001_initial'),
    ]

    # State only: the tables were made by fleet's migrations and keep their names
    # (`db_table`); no statement runs against the database.
    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
            migrations.CreateModel(
                name='Webhook',
                fields=[
                    ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                    ('url', models.URLField(max_length=2000)),
                    ('kinds', models.JSONField(default=list)),
                    ('secret', models.CharField(max_length=128)),
                    ('description', models.CharField(blank=True, default='', max_length=200)),
                    ('active', models.BooleanField(default=True)),
                    ('created_at', models.DateTimeField(db_default=django.db.models.functions.datetime.Now())),
                    ('created_by', models.CharField(blank=True, default='', max_length=200)),
                    ('workspace', models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='webhooks', to='hands.workspace')),
                ],
                options={
                    'db_table': 'fleet_webhook',
                },
            ),
            migrations.CreateModel(
                name='WebhookDelivery',
                fields=[
                    ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                    ('event_id', models.BigIntegerField()),
                    ('kind', models.CharField(max_length=32)),
                    ('body', models.TextField()),
                    ('status', models.CharField(choices=[('pending', 'Pending'), ('delivered', 'Delivered'), ('failed', 'Failed')], default='pending', max_length=10)),
                    ('attempts', models.PositiveIntegerField(default=0)),
                    ('next_attempt_at', models.DateTimeField(blank=True, null=True)),
                    ('created_at', models.DateTimeField(db_default=django.db.models.functions.datetime.Now())),
                    ('delivered_at', models.DateTimeField(blank=True, null=True)),
                    ('last_status_code', models.PositiveSmallIntegerField(blank=True, null=True)),
                    ('last_error', models.CharField(blank=True, default='', max_length=2000)),
                    ('log', models.JSONField(blank=True, default=list)),
                    ('webhook', models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='deliveries', to='webhooks.webhook')),
                ],
                options={
                    'db_table': 'fleet_webhookdelivery',
                },
            ),
            migrations.AddIndex(
                model_name='webhook',
                index=models.Index(fields=['workspace', 'active'], name='webhook_ws_idx'),
            ),
            migrations.AddIndex(
                model_name='webhookdelivery',
                index=models.Index(condition=models.Q(('status', 'pending')), fields=['next_attempt_at'], name='delivery_due_idx'),
            ),
            migrations.AddIndex(
                model_name='webhookdelivery',
                index=models.Index(fields=['created_at'], name='delivery_created_idx'),
            ),
            migrations.AddIndex(
                model_name='webhookdelivery',
                index=models.Index(fields=['webhook', '-id'], name='delivery_webhook_idx'),
            ),
            migrations.AddConstraint(
                model_name='webhookdelivery',
                constraint=models.UniqueConstraint(fields=('webhook', 'event_id'), name='delivery_unique_event'),
            ),
            ],
            database_operations=[],
        ),
    ]
