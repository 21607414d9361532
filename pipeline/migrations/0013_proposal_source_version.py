"""Proposals keep the version of the raw memory their job read, so one whose source was corrected
since is stale (writes.apply.source_refusal). Older proposals keep None: never checked."""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [("pipeline", "0012_replay_run_lease")]

    operations = [
        migrations.AddField(
            model_name="proposal",
            name="source_version",
            field=models.PositiveIntegerField(blank=True, null=True),
        ),
    ]
