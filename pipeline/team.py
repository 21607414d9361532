"""Tables of reviewing as a team: saved queues (a filter, guidelines, assigned reviewers) and the
staleness digest's runs. Imported by pipeline.models, so Django registers them there."""

from __future__ import annotations

from django.conf import settings
from django.core.exceptions import ValidationError
from django.db import models
from django.db.models import Q
from django.http import QueryDict

from memory.models import Authority, new_id
from pipeline import safety
from pipeline.models import QUEUE_AGES, Action, queue_q

# The filter fields a saved queue may name, as its querystring's keys (the review form's names):
# several values of a listed key select any of them.
MULTI = ("action", "flag", "authority")
SINGLE = ("review_needed", "agent", "model", "age")
ACTIONS = {*Action.values, "destructive"}
FLAGS = {"unsupported", "safety", *safety.KINDS}
AGES = {*QUEUE_AGES, "older"}


def parse_filters(querystring: str) -> dict:
    """A saved queue's filter querystring (`action=destructive&flag=pii&flag=secret`) as
    queue_q() arguments; ValueError naming the first key or value it does not know."""
    data = QueryDict(querystring.strip().lstrip("?"))
    unknown = sorted(set(data) - {*MULTI, *SINGLE})
    if unknown:
        raise ValueError(f"unknown filter {unknown[0]!r}; use {', '.join((*MULTI, *SINGLE))}")
    args: dict = {}
    for key, allowed in (("action", ACTIONS), ("flag", FLAGS), ("authority", Authority.values)):
        values = [v for v in data.getlist(key) if v]
        if bad := [v for v in values if v not in allowed]:
            raise ValueError(f"{key}={bad[0]} is not one of {', '.join(sorted(allowed))}")
        if values:
            args[key] = values
    needed = data.get("review_needed")
    if needed:
        if needed not in {"yes", "no"}:
            raise ValueError("review_needed must be yes or no")
        args["review_needed"] = needed == "yes"
    if data.get("age"):
        if data["age"] not in AGES:
            raise ValueError(f"age must be one of {', '.join(sorted(AGES))}")
        args["age"] = data["age"]
    for key in ("agent", "model"):
        if data.get(key, "").strip():
            args[key] = data[key].strip()
    return args


class SavedQueue(models.Model):
    """A named slice of the review queue with guidelines for it (Markdown, shown escaped)."""

    name = models.CharField(max_length=100, unique=True)
    slug = models.SlugField(max_length=100, unique=True)
    filters = models.CharField(
        max_length=500,
        blank=True,
        default="",
        help_text="The review queue's filter as a querystring, e.g. action=destructive or "
        "flag=pii&flag=secret. Keys: action (add, update, delete, destructive), review_needed "
        "(yes, no), flag (unsupported, safety, a safety kind), agent, model, age (1h, 24h, 7d, "
        "older), authority (person, agent, model, import).",
    )
    guidelines = models.TextField(
        blank=True, default="", help_text="Markdown: paragraphs, - lists, **bold**, `code`."
    )
    reviewers = models.ManyToManyField(
        settings.AUTH_USER_MODEL, blank=True, related_name="review_queues"
    )
    position = models.PositiveIntegerField(default=0)

    class Meta:
        db_table = "pipeline_saved_queues"
        ordering = ["position", "name"]
        verbose_name = "review queue"

    def __str__(self) -> str:
        return self.name

    def clean(self) -> None:
        try:
            parse_filters(self.filters)
        except ValueError as exc:
            raise ValidationError({"filters": str(exc)}) from None

    def condition(self) -> Q:
        """The proposals this queue holds (with status pending, like the review queue)."""
        return queue_q(**parse_filters(self.filters))


class DigestRun(models.Model):
    """One staleness digest: what it found, and how its email and its webhook went."""

    id = models.CharField(primary_key=True, max_length=36, default=new_id, editable=False)
    started_at = models.DateTimeField()
    finished_at = models.DateTimeField(null=True, blank=True)
    stale_hours = models.PositiveIntegerField()
    stale = models.PositiveIntegerField(default=0)  # proposals pending longer than stale_hours
    payload = models.JSONField(default=dict, blank=True)
    # sent / failed / skipped (nothing stale, or no recipient or no URL) / "" while running
    email_status = models.CharField(max_length=10, blank=True, default="")
    email_error = models.TextField(blank=True, default="")
    webhook_status = models.CharField(max_length=10, blank=True, default="")
    webhook_error = models.TextField(blank=True, default="")
    webhook_attempts = models.PositiveSmallIntegerField(default=0)

    class Meta:
        db_table = "pipeline_digest_runs"
        ordering = ["-started_at"]
        verbose_name = "staleness digest"

    def __str__(self) -> str:
        return f"digest of {self.started_at:%Y-%m-%d %H:%M} ({self.stale} stale)"

    @property
    def failed(self) -> bool:
        return "failed" in {self.email_status, self.webhook_status}
