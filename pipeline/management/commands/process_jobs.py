"""process_jobs [--limit N]: claim and run pending jobs in this process until none are left."""

from django.core.management.base import BaseCommand

from pipeline.config import get_config
from pipeline.tasks import process_pending


class Command(BaseCommand):
    help = "Run pending pipeline jobs in this process (tests, cron, debugging)."

    def add_arguments(self, parser):
        parser.add_argument("--limit", type=int, default=None, help="run at most N jobs")

    def handle(self, *args, limit, **options):
        if not get_config().enabled:
            self.stdout.write("The pipeline is disabled (enabled=false): jobs stay pending.")
            return
        counts = process_pending(limit)
        total = sum(counts.values())
        summary = (
            ", ".join(f"{n} {status}" for status, n in sorted(counts.items())) or "nothing to do"
        )
        self.stdout.write(f"Processed {total} job(s): {summary}.")
