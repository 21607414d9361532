"""Fresh installs start in shadow mode: nothing is written without review until an admin says so."""

from django.db import migrations


def create_config(apps, schema_editor):
    PipelineConfig = apps.get_model("pipeline", "PipelineConfig")
    PipelineConfig.objects.get_or_create(pk=1, defaults={"shadow_mode": True})


class Migration(migrations.Migration):
    dependencies = [("pipeline", "0001_initial")]

    operations = [migrations.RunPython(create_config, migrations.RunPython.noop)]
