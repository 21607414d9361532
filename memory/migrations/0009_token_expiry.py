"""API tokens may expire: expires_at (None: never); past it the token is refused with a 401."""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [("memory", "0008_recompute_content_hashes")]

    operations = [
        migrations.AddField(
            model_name="apitoken",
            name="expires_at",
            field=models.DateTimeField(blank=True, null=True),
        ),
    ]
