"""An approval round can end as cancelled: its proposal left the queue because a memory it
needed was purged. The first approvals an earlier purge left waiting on a cancelled proposal end
so now, at the moment their proposal was cancelled (they blocked a reviewer's rename and were
counted as waiting for a second reviewer)."""

from django.db import migrations, models
from django.db.models import OuterRef, Subquery


def close_cancelled_rounds(apps, schema_editor=None) -> int:
    Approval = apps.get_model("pipeline", "Approval")
    Proposal = apps.get_model("pipeline", "Proposal")
    when = Proposal.objects.filter(id=OuterRef("proposal_id")).values("updated_at")[:1]
    return Approval.objects.filter(outcome="", proposal__status="cancelled").update(
        outcome="cancelled", ended_by="purge", ended_at=Subquery(when)
    )


class Migration(migrations.Migration):
    dependencies = [("pipeline", "0022_approval_reopened")]

    operations = [
        migrations.AlterField(
            model_name="approval",
            name="outcome",
            field=models.CharField(
                blank=True,
                choices=[
                    ("", "waiting"),
                    ("applied", "Applied"),
                    ("rejected", "Rejected"),
                    ("stale", "Stale"),
                    ("withdrawn", "Withdrawn"),
                    ("undone", "Undone"),
                    ("reopened", "Reopened"),
                    ("cancelled", "Cancelled"),
                ],
                default="",
                max_length=10,
            ),
        ),
        migrations.RunPython(close_cancelled_rounds, migrations.RunPython.noop),
    ]
