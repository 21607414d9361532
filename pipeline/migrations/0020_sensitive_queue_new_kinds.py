"""The shipped "Personal data and secrets" queue also holds the two new safety kinds (a password
stated in prose, a postal address), unless an admin already changed its filter."""

from django.db import migrations

SLUG = "personal-data-and-secrets"
BEFORE = "flag=pii&flag=secret"
AFTER = "flag=pii&flag=secret&flag=password&flag=address"


def widen(apps, schema_editor):
    SavedQueue = apps.get_model("pipeline", "SavedQueue")
    SavedQueue.objects.filter(slug=SLUG, filters=BEFORE).update(filters=AFTER)


def narrow(apps, schema_editor):
    SavedQueue = apps.get_model("pipeline", "SavedQueue")
    SavedQueue.objects.filter(slug=SLUG, filters=AFTER).update(filters=BEFORE)


class Migration(migrations.Migration):
    dependencies = [("pipeline", "0019_expired_purge_days")]

    operations = [migrations.RunPython(widen, narrow)]
