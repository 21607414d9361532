"""Who asserted each memory (Memory.asserted_by). Existing rows: a memory the pipeline derived
(source_type pipeline-v2) was asserted by the model, every other one by an agent."""

from django.db import migrations, models

DERIVED_SOURCE_TYPE = "pipeline-v2"  # memory.models.DERIVED_SOURCE_TYPE when this was written


def fill(apps, schema_editor):
    Memory = apps.get_model("memory", "Memory")
    Memory.objects.filter(source_type=DERIVED_SOURCE_TYPE).update(asserted_by="model")


class Migration(migrations.Migration):
    dependencies = [("memory", "0009_token_expiry")]

    operations = [
        migrations.AddField(
            model_name="memory",
            name="asserted_by",
            field=models.CharField(
                choices=[
                    ("person", "Person"),
                    ("agent", "Agent"),
                    ("model", "Model"),
                    ("import", "Import"),
                ],
                default="agent",
                max_length=10,
            ),
        ),
        migrations.RunPython(fill, migrations.RunPython.noop),
    ]
