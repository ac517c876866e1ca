"""Workspaces, members, lanes, hands, keys and replay records, moved here from `fleet`."""

import django.db.models.deletion
import django.db.models.functions.datetime
from django.conf import settings
from django.db import migrations, models


class Migration(migrations.Migration):

    initial = True

    dependencies = [
        ('fleet', '0006_finished_slots_done'),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    # State only: the tables were made by fleet's migrations and keep their names
    # (`db_table`); no statement runs against the database.
    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
            migrations.CreateModel(
                name='Workspace',
                fields=[
                    ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                    ('name', models.CharField(max_length=200, unique=True)),
                    ('created_at', models.DateTimeField(db_default=django.db.models.functions.datetime.Now())),
                ],
                options={
                    'db_table': 'fleet_workspace',
                },
            ),
            migrations.CreateModel(
                name='Lane',
                fields=[
                    ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                    ('slug', models.SlugField(max_length=100)),
                    ('name', models.CharField(max_length=200)),
                    ('heartbeat_interval_s', models.PositiveIntegerField(blank=True, null=True)),
                    ('grace_s', models.PositiveIntegerField(blank=True, null=True)),
                    ('closed_at', models.DateTimeField(blank=True, null=True)),
                    ('created_at', models.DateTimeField(db_default=django.db.models.functions.datetime.Now())),
                    ('workspace', models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='lanes', to='hands.workspace')),
                ],
                options={
                    'db_table': 'fleet_lane',
                },
            ),
            migrations.CreateModel(
                name='IdempotencyRecord',
                fields=[
                    ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                    ('key_prefix', models.CharField(max_length=32)),
                    ('idempotency_key', models.CharField(max_length=200)),
                    ('method', models.CharField(max_length=10)),
                    ('path', models.CharField(max_length=1024)),
                    ('body_hash', models.CharField(max_length=64)),
                    ('status_code', models.PositiveSmallIntegerField()),
                    ('response', models.JSONField()),
                    ('created_at', models.DateTimeField(db_default=django.db.models.functions.datetime.Now())),
                    ('workspace', models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='+', to='hands.workspace')),
                ],
                options={
                    'db_table': 'fleet_idempotencyrecord',
                },
            ),
            migrations.CreateModel(
                name='Hand',
                fields=[
                    ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                    ('name', models.CharField(max_length=200)),
                    ('is_supervisor', models.BooleanField(default=False)),
                    ('created_at', models.DateTimeField(db_default=django.db.models.functions.datetime.Now())),
                    ('lane', models.ForeignKey(blank=True, null=True, on_delete=django.db.models.deletion.SET_NULL, related_name='+', to='hands.lane')),
                    ('workspace', models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='hands', to='hands.workspace')),
                ],
                options={
                    'db_table': 'fleet_hand',
                },
            ),
            migrations.CreateModel(
                name='HandKey',
                fields=[
                    ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                    ('prefix', models.CharField(max_length=32, unique=True)),
                    ('secret_hash', models.CharField(max_length=128)),
                    ('scopes', models.JSONField(default=list)),
                    ('expires_at', models.DateTimeField(blank=True, null=True)),
                    ('revoke_when_done', models.BooleanField(default=False)),
                    ('created_at', models.DateTimeField(db_default=django.db.models.functions.datetime.Now())),
                    ('created_by', models.CharField(blank=True, default='', max_length=200)),
                    ('revoked_at', models.DateTimeField(blank=True, null=True)),
                    ('revoked_by', models.CharField(blank=True, default='', max_length=200)),
                    ('revoke_reason', models.CharField(blank=True, default='', max_length=2000)),
                    ('last_used_at', models.DateTimeField(blank=True, null=True)),
                    ('hand', models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='keys', to='hands.hand')),
                    ('lane', models.ForeignKey(blank=True, null=True, on_delete=django.db.models.deletion.SET_NULL, related_name='+', to='hands.lane')),
                ],
                options={
                    'db_table': 'fleet_handkey',
                    'indexes': [models.Index(condition=models.Q(('expires_at__isnull', False), ('revoked_at', None)), fields=['expires_at'], name='key_expiry_idx')],
                },
            ),
            migrations.CreateModel(
                name='Membership',
                fields=[
                    ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                    ('role', models.CharField(choices=[('admin', 'Admin'), ('supervisor', 'Supervisor'), ('viewer', 'Viewer')], default='viewer', max_length=16)),
                    ('user', models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='memberships', to=settings.AUTH_USER_MODEL)),
                    ('workspace', models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='memberships', to='hands.workspace')),
                ],
                options={
                    'db_table': 'fleet_membership',
                    'constraints': [models.UniqueConstraint(fields=('workspace', 'user'), name='membership_unique')],
                },
            ),
            migrations.AddConstraint(
                model_name='lane',
                constraint=models.UniqueConstraint(fields=('workspace', 'slug'), name='lane_unique_slug'),
            ),
            migrations.AddConstraint(
                model_name='idempotencyrecord',
                constraint=models.UniqueConstraint(fields=('workspace', 'key_prefix', 'idempotency_key'), name='idempotency_unique'),
            ),
            migrations.AddConstraint(
                model_name='hand',
                constraint=models.UniqueConstraint(fields=('workspace', 'name'), name='hand_unique_name'),
            ),
            ],
            database_operations=[],
        ),
    ]
