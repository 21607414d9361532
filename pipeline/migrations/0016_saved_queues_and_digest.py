"""Saved review queues (three shipped: Destructive, Contradictions, Personal data and secrets),
the staleness digest's runs, and review.staleHours (24) with the last digest's time on the config."""

from django.conf import settings
from django.db import migrations, models

import memory.models

# The three queues every install starts with; admins edit them (and add others) in the admin.
QUEUES = [
    (
        "Destructive",
        "destructive",
        "action=destructive",
        "UPDATE and DELETE proposals: each one changes or retires a memory someone relies on.\n\n"
        "- Read the target as it is now, beside the proposed text.\n"
        "- A **pinned** memory or one **asserted by a person** changes only when the source "
        "clearly says so; when in doubt, reject with a reason.\n"
        "- Prefer an UPDATE that keeps what is still true over a DELETE.",
    ),
    (
        "Contradictions",
        "contradictions",
        "review_needed=yes",
        "Proposals the detector flagged as contradicting an existing memory.\n\n"
        "- Decide which statement is current: the newer source is not always right.\n"
        "- Keep both (as separate memories) when they are true in different contexts.\n"
        "- Use the contradictions workbench to compare them side by side.",
    ),
    (
        "Personal data and secrets",
        "personal-data-and-secrets",
        "flag=pii&flag=secret",
        "Facts holding personal data or something that looks like a secret.\n\n"
        "- A secret (a key, a password, a token) is **never** stored: reject it and rotate it.\n"
        "- Personal data is kept only when the team needs it to work; otherwise reject it.\n"
        "- Edit the fact to drop the sensitive part when the rest is worth keeping.",
    ),
]


def ship_queues(apps, schema_editor):
    SavedQueue = apps.get_model("pipeline", "SavedQueue")
    for position, (name, slug, filters, guidelines) in enumerate(QUEUES):
        SavedQueue.objects.get_or_create(
            slug=slug,
            defaults={
                "name": name,
                "filters": filters,
                "guidelines": guidelines,
                "position": position,
            },
        )


class Migration(migrations.Migration):
    dependencies = [
        ("pipeline", "0015_eval_runs"),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.CreateModel(
            name="DigestRun",
            fields=[
                (
                    "id",
                    models.CharField(
                        default=memory.models.new_id,
                        editable=False,
                        max_length=36,
                        primary_key=True,
                        serialize=False,
                    ),
                ),
                ("started_at", models.DateTimeField()),
                ("finished_at", models.DateTimeField(blank=True, null=True)),
                ("stale_hours", models.PositiveIntegerField()),
                ("stale", models.PositiveIntegerField(default=0)),
                ("payload", models.JSONField(blank=True, default=dict)),
                ("email_status", models.CharField(blank=True, default="", max_length=10)),
                ("email_error", models.TextField(blank=True, default="")),
                ("webhook_status", models.CharField(blank=True, default="", max_length=10)),
                ("webhook_error", models.TextField(blank=True, default="")),
                ("webhook_attempts", models.PositiveSmallIntegerField(default=0)),
            ],
            options={
                "verbose_name": "staleness digest",
                "db_table": "pipeline_digest_runs",
                "ordering": ["-started_at"],
            },
        ),
        migrations.AddField(
            model_name="pipelineconfig",
            name="last_digest_at",
            field=models.DateTimeField(blank=True, null=True),
        ),
        migrations.AddField(
            model_name="pipelineconfig",
            name="stale_hours",
            field=models.PositiveIntegerField(default=24),
        ),
        migrations.CreateModel(
            name="SavedQueue",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                ("name", models.CharField(max_length=100, unique=True)),
                ("slug", models.SlugField(max_length=100, unique=True)),
                (
                    "filters",
                    models.CharField(
                        blank=True,
                        default="",
                        help_text="The review queue's filter as a querystring, e.g. action=destructive or flag=pii&flag=secret. Keys: action (add, update, delete, destructive), review_needed (yes, no), flag (unsupported, safety, a safety kind), agent, model, age (1h, 24h, 7d, older), authority (person, agent, model, import).",
                        max_length=500,
                    ),
                ),
                (
                    "guidelines",
                    models.TextField(
                        blank=True,
                        default="",
                        help_text="Markdown: paragraphs, - lists, **bold**, `code`.",
                    ),
                ),
                ("position", models.PositiveIntegerField(default=0)),
                (
                    "reviewers",
                    models.ManyToManyField(
                        blank=True, related_name="review_queues", to=settings.AUTH_USER_MODEL
                    ),
                ),
            ],
            options={
                "verbose_name": "review queue",
                "db_table": "pipeline_saved_queues",
                "ordering": ["position", "name"],
            },
        ),
        migrations.RunPython(ship_queues, migrations.RunPython.noop),
    ]
