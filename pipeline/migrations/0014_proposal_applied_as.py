"""A proposal keeps what the model proposed (`action`) apart from what a reviewer applied
(`applied_as`). Approvals used to overwrite `action` with the applied one; their approval audit
kept the model's as `proposedAction`, which puts both facts back where they differ."""

from django.db import migrations, models

RISK_OF = {"delete": 0, "update": 1, "add": 2, "none": 3}
CHUNK = 500


def split_applied_action(apps, schema_editor):
    """Decided proposals whose approval applied another action than the model proposed: the
    applied one moves to `applied_as` and `action` is the model's again. Returns the count."""
    history = apps.get_model("memory", "MemoryHistory")
    proposals = apps.get_model("pipeline", "Proposal")
    proposed = {}
    approvals = (
        history.objects.filter(event="reviewed", metadata__decision="approved")
        .order_by("created_at", "id")
        .values_list("metadata", flat=True)
    )
    for metadata in approvals.iterator(chunk_size=CHUNK):
        if metadata.get("proposalId") and metadata.get("proposedAction") in RISK_OF:
            proposed[metadata["proposalId"]] = metadata["proposedAction"]  # the latest wins
    ids, split = sorted(proposed), 0
    for start in range(0, len(ids), CHUNK):
        decided = proposals.objects.filter(
            id__in=ids[start : start + CHUNK],
            status__in=["applied", "deduped"],
            decided_by__isnull=False,
            applied_as__isnull=True,
        ).values_list("id", "action")
        for proposal_id, applied in list(decided):
            model_said = proposed[proposal_id]
            if model_said != applied:
                proposals.objects.filter(id=proposal_id).update(
                    action=model_said, applied_as=applied, risk=RISK_OF[model_said]
                )
                split += 1
    return split


def join_applied_action(apps, schema_editor):
    """Back to one field: `action` holds the applied action again."""
    proposals = apps.get_model("pipeline", "Proposal")
    for action in RISK_OF:
        proposals.objects.filter(applied_as=action).update(action=action, risk=RISK_OF[action])


class Migration(migrations.Migration):
    dependencies = [("pipeline", "0013_proposal_source_version")]

    operations = [
        migrations.AddField(
            model_name="proposal",
            name="applied_as",
            field=models.CharField(
                blank=True,
                choices=[
                    ("add", "Add"),
                    ("update", "Update"),
                    ("delete", "Delete"),
                    ("none", "None"),
                ],
                max_length=10,
                null=True,
            ),
        ),
        migrations.RunPython(split_applied_action, join_applied_action),
    ]
