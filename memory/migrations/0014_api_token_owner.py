"""An API token's owner (the two-person rule, docs/team.md): the dashboard user who holds it, so a
review through the token counts as that person's. Existing tokens have none."""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("memory", "0013_keyword_changes"),
    ]

    operations = [
        migrations.AddField(
            model_name="apitoken",
            name="owner",
            field=models.CharField(blank=True, default="", max_length=150),
        ),
    ]
