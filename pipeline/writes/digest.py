"""The staleness digest's writes: its claim (one run per period, however many schedulers ask) and
the record of how its email and webhook went. No network I/O here: pipeline.digest sends."""

from __future__ import annotations

from datetime import datetime, timedelta

from django.db import transaction
from django.db.models import Q

from pipeline.models import DigestRun, PipelineConfig


def claim(now: datetime, *, every: timedelta | None) -> DigestRun | None:
    """A new run, unless one was claimed less than `every` ago (None: claim whatever the last
    one was, for `manage.py digest`). The conditional UPDATE makes one claimant of many win."""
    with transaction.atomic():
        due = PipelineConfig.objects.filter(pk=1)
        if every is not None:
            due = due.filter(Q(last_digest_at__isnull=True) | Q(last_digest_at__lte=now - every))
        if not due.update(last_digest_at=now):
            return None
        stale_hours = PipelineConfig.objects.values_list("stale_hours", flat=True).get(pk=1)
        return DigestRun.objects.create(started_at=now, stale_hours=stale_hours)


def record(run: DigestRun, at: datetime, **outcome) -> DigestRun:
    """What the run found and how each channel went (DigestRun's columns), once it is over."""
    for name, value in outcome.items():
        setattr(run, name, value)
    run.finished_at = at
    run.save(update_fields=[*outcome, "finished_at"])
    return run
