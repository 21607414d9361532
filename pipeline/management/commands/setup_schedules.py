"""setup_schedules: the one django-q2 schedule (idempotent): pipeline.tasks.tick every minute
(the sweep, maintenance when due and the daily staleness digest)."""

from django.core.management.base import BaseCommand
from django_q.models import Schedule


class Command(BaseCommand):
    help = "Create or update the periodic sweep/maintenance schedule."

    def handle(self, *args, **options):
        Schedule.objects.update_or_create(
            name="pipeline-tick",
            defaults={
                "func": "pipeline.tasks.tick",
                "schedule_type": Schedule.MINUTES,
                "minutes": 1,
                "repeats": -1,
            },
        )
        self.stdout.write(
            "Schedule 'pipeline-tick' runs every minute (sweep, maintenance when due, daily digest)."
        )
