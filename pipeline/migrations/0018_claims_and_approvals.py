"""Reviewing as a team: claims (who is reviewing a proposal now, review.claimMinutes, 5) and
approvals under the two-person rule (review.destructiveApprovals, 1)."""

import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("pipeline", "0017_import_runs"),
    ]

    operations = [
        migrations.CreateModel(
            name="Claim",
            fields=[
                (
                    "proposal",
                    models.OneToOneField(
                        on_delete=django.db.models.deletion.CASCADE,
                        primary_key=True,
                        related_name="claim",
                        serialize=False,
                        to="pipeline.proposal",
                    ),
                ),
                ("by", models.CharField(db_index=True, max_length=200)),
                ("page", models.CharField(blank=True, default="", max_length=64)),
                ("claimed_at", models.DateTimeField()),
                ("expires_at", models.DateTimeField()),
            ],
            options={
                "db_table": "pipeline_claims",
            },
        ),
        migrations.AddField(
            model_name="pipelineconfig",
            name="claim_minutes",
            field=models.PositiveIntegerField(default=5),
        ),
        migrations.AddField(
            model_name="pipelineconfig",
            name="destructive_approvals",
            field=models.PositiveSmallIntegerField(default=1),
        ),
        migrations.CreateModel(
            name="Approval",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                ("by", models.CharField(max_length=200)),
                ("at", models.DateTimeField()),
                ("position", models.PositiveSmallIntegerField(default=1)),
                ("action", models.CharField(max_length=10)),
                ("content", models.TextField()),
                ("note", models.TextField(blank=True, default="")),
                (
                    "outcome",
                    models.CharField(
                        blank=True,
                        choices=[
                            ("", "waiting"),
                            ("applied", "Applied"),
                            ("rejected", "Rejected"),
                            ("stale", "Stale"),
                            ("withdrawn", "Withdrawn"),
                            ("undone", "Undone"),
                        ],
                        default="",
                        max_length=10,
                    ),
                ),
                ("ended_by", models.CharField(blank=True, default="", max_length=200)),
                ("ended_at", models.DateTimeField(blank=True, null=True)),
                (
                    "proposal",
                    models.ForeignKey(
                        db_index=False,
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="approvals",
                        to="pipeline.proposal",
                    ),
                ),
            ],
            options={
                "db_table": "pipeline_approvals",
                "ordering": ["at", "id"],
                "indexes": [
                    models.Index(fields=["proposal", "outcome"], name="approvals_proposal")
                ],
                "constraints": [
                    models.UniqueConstraint(
                        condition=models.Q(("outcome", "")),
                        fields=("proposal", "by"),
                        name="approvals_once_per_reviewer",
                    )
                ],
            },
        ),
    ]
