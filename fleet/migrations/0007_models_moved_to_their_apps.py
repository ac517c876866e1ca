"""The models now in `hands`, `webhooks` and `ops` leave fleet's state; their tables stay."""

import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('ops', '0001_initial'),
        ('webhooks', '0001_initial'),
        ('fleet', '0006_finished_slots_done'),
        ('hands', '0001_initial'),
    ]

    # State only: the tables were made by fleet's migrations and keep their names
    # (`db_table`); no statement runs against the database.
    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
            migrations.RemoveField(
                model_name='hand',
                name='lane',
            ),
            migrations.RemoveField(
                model_name='hand',
                name='workspace',
            ),
            migrations.RemoveField(
                model_name='handkey',
                name='hand',
            ),
            migrations.AlterField(
                model_name='attempt',
                name='hand',
                field=models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='attempts', to='hands.hand'),
            ),
            migrations.RemoveField(
                model_name='handkey',
                name='lane',
            ),
            migrations.RemoveField(
                model_name='idempotencyrecord',
                name='workspace',
            ),
            migrations.DeleteModel(
                name='JobRun',
            ),
            migrations.RemoveField(
                model_name='lane',
                name='workspace',
            ),
            migrations.AlterField(
                model_name='workpackage',
                name='lane',
                field=models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='work_packages', to='hands.lane'),
            ),
            migrations.AlterField(
                model_name='attempt',
                name='lane',
                field=models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='+', to='hands.lane'),
            ),
            migrations.RemoveField(
                model_name='membership',
                name='user',
            ),
            migrations.RemoveField(
                model_name='membership',
                name='workspace',
            ),
            migrations.RemoveField(
                model_name='webhook',
                name='workspace',
            ),
            migrations.RemoveField(
                model_name='webhookdelivery',
                name='webhook',
            ),
            migrations.AlterField(
                model_name='workpackage',
                name='workspace',
                field=models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='+', to='hands.workspace'),
            ),
            migrations.AlterField(
                model_name='run',
                name='workspace',
                field=models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='+', to='hands.workspace'),
            ),
            migrations.AlterField(
                model_name='attempt',
                name='workspace',
                field=models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='+', to='hands.workspace'),
            ),
            migrations.DeleteModel(
                name='Hand',
            ),
            migrations.DeleteModel(
                name='HandKey',
            ),
            migrations.DeleteModel(
                name='IdempotencyRecord',
            ),
            migrations.DeleteModel(
                name='Lane',
            ),
            migrations.DeleteModel(
                name='Membership',
            ),
            migrations.DeleteModel(
                name='Webhook',
            ),
            migrations.DeleteModel(
                name='WebhookDelivery',
            ),
            migrations.DeleteModel(
                name='Workspace',
            ),
            ],
            database_operations=[],
        ),
    ]
