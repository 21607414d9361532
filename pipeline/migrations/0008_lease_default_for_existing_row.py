"""Fresh installs got the old 600 s lease from the data migration: raise it above the queue timeout."""

from django.db import migrations


def raise_old_default(apps, schema_editor):
    PipelineConfig = apps.get_model("pipeline", "PipelineConfig")
    PipelineConfig.objects.filter(lease_timeout_seconds=600).update(lease_timeout_seconds=1830)


class Migration(migrations.Migration):
    dependencies = [("pipeline", "0007_proposal_prompt_version")]

    operations = [migrations.RunPython(raise_old_default, migrations.RunPython.noop)]
