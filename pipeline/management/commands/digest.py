"""digest: send the staleness digest now (the schedule sends it once a day)."""

from django.core.management.base import BaseCommand

from pipeline import digest


class Command(BaseCommand):
    help = "Send the digest of proposals pending longer than review.staleHours now."

    def handle(self, *args, **options):
        run = digest.run(force=True)
        if not run.stale:
            self.stdout.write(f"Nothing pending longer than {run.stale_hours} h: nothing sent.")
            return
        self.stdout.write(
            f"{run.stale} proposal(s) pending longer than {run.stale_hours} h. "
            f"Email: {run.email_status}{f' ({run.email_error})' if run.email_error else ''}. "
            f"Webhook: {run.webhook_status}"
            f"{f' after {run.webhook_attempts} attempt(s): {run.webhook_error}' if run.webhook_error else ''}."
        )
