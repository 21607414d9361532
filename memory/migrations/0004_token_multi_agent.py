"""API tokens are bound to their agent; a multi-agent token (an admin's choice) may act for others."""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("memory", "0003_embedding_changes"),
    ]

    operations = [
        migrations.AddField(
            model_name="apitoken",
            name="multi_agent",
            field=models.BooleanField(default=False),
        ),
    ]
