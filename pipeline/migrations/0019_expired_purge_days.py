"""retention.expiredPurgeDays (30; 0 = never): how long an expired memory is kept, out of recall,
before the maintenance schedule purges it (pipeline.expiry)."""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [("pipeline", "0018_claims_and_approvals")]

    operations = [
        migrations.AddField(
            model_name="pipelineconfig",
            name="expired_purge_days",
            field=models.PositiveIntegerField(default=30),
        ),
    ]
