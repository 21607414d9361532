"""An import's run row: what was asked (the file, the agent, whether to process), how far it
went (the file's items handled, the counts) and the per-line report. Imported by
pipeline.models, so Django registers the table there."""

from __future__ import annotations

from django.db import models

from memory.models import new_id
from pipeline.models import LeasedRun

DASHBOARD, COMMAND = "dashboard", "command"
# Refusals kept on the run with their line and field; the counts stay exact beyond it.
REFUSALS_KEPT = 1000


class ImportRun(LeasedRun):
    """One import of a file. From the dashboard the upload is kept here until the run finishes
    (a queued task reads it, on whichever machine its worker runs); `manage.py import` reads
    its file itself and records its run here too, so the page lists every import."""

    id = models.CharField(primary_key=True, max_length=36, default=new_id, editable=False)
    requested_by = models.CharField(max_length=200)
    origin = models.CharField(max_length=10, default=DASHBOARD)
    file_name = models.CharField(max_length=300)
    format = models.CharField(max_length=10, blank=True, default="")  # "" = detect it
    agent = models.CharField(max_length=200, blank=True, default="")  # "" = as the file says
    process = models.BooleanField(default=False)
    upload = models.BinaryField(null=True, blank=True)  # dropped when the run finishes
    size = models.PositiveBigIntegerField(default=0)
    lines = models.PositiveIntegerField(default=0)
    # Items of the file handled so far (a reclaimed run goes on after them) and the last line.
    position = models.PositiveIntegerField(default=0)
    last_line = models.PositiveIntegerField(default=0)
    imported = models.PositiveIntegerField(default=0)
    deduped = models.PositiveIntegerField(default=0)
    refused = models.PositiveIntegerField(default=0)
    # {"imported": [[first, last] line ranges], "deduped": [...], "refused": [{line, field,
    # message}] (the first REFUSALS_KEPT)}
    report = models.JSONField(default=dict, blank=True)
    # The lease (LeasedRun) is renewed by every batch recorded.

    class Meta:
        db_table = "pipeline_import_runs"
        ordering = ["-created_at"]

    def __str__(self) -> str:
        return f"import of {self.file_name} ({self.status})"

    @property
    def handled(self) -> int:
        return self.imported + self.deduped + self.refused

    @property
    def percent(self) -> int:
        """How far through the file's lines the run is."""
        if self.finished:
            return 100 if self.is_done else round(100 * self.last_line / max(self.lines, 1))
        return min(99, round(100 * self.last_line / self.lines)) if self.lines else 0
