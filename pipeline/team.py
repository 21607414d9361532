"""Reviewing as a team: the review queue's filters (queue_q), saved queues (a filter, guidelines,
assigned reviewers), the staleness digest's runs, claims (who is reviewing a proposal now) and
approvals under the two-person rule. Imported by pipeline.models, so Django registers the tables
there."""

from __future__ import annotations

from datetime import datetime

from django.conf import settings
from django.core.exceptions import ValidationError
from django.db import models
from django.db.models import Q
from django.http import QueryDict
from django.utils import timezone

from memory.models import Authority, new_id
from pipeline import safety
from pipeline.models import DESTRUCTIVE, QUEUE_AGES, Action


def _any_of(value) -> list[str]:
    """A filter's values: one string, or several (a saved queue may name more than one)."""
    values = [value] if isinstance(value, str) else list(value or [])
    return [v.strip() for v in values if v and v.strip()]


def queue_q(
    *,
    action=None,
    review_needed: bool | None = None,
    conf_min: float | None = None,
    conf_max: float | None = None,
    agent: str | None = None,
    model: str | None = None,
    source: str | None = None,
    age: str | None = None,
    flag=None,
    authority=None,
    now: datetime | None = None,
) -> Q:
    """The review queue's filters as one condition on Proposal: what a reviewer's filter form and
    a saved queue select. `action`, `flag` and `authority` take one value or several (any of
    them); action "destructive" is UPDATE or DELETE (and a flagged NONE, which may become an
    UPDATE), authority is who asserted the memory an UPDATE or DELETE changes. An empty or None filter filters nothing. The age filters count
    back from `now` (the present unless given: a bulk run keeps its preview's)."""
    where = Q()
    chosen = _any_of(action)
    actions = {a for v in chosen for a in (DESTRUCTIVE if v == "destructive" else {v})}
    if actions:
        of_action = Q(action__in=sorted(actions))
        if "destructive" in chosen:  # a NONE whose fact contradicts its memory may become one
            of_action |= Q(action=Action.NONE, review_needed=True)
        where &= of_action
    if review_needed is not None:
        where &= Q(review_needed=review_needed)
    if conf_min is not None:
        where &= Q(fact_confidence__gte=conf_min)
    if conf_max is not None:
        where &= Q(fact_confidence__lte=conf_max)
    for value, column in ((agent, "agent_id"), (model, "model"), (source, "source_memory_id")):
        if value and value.strip():
            where &= Q(**{column: value.strip()})
    now = now or timezone.now()
    if age in QUEUE_AGES:
        where &= Q(created_at__gte=now - QUEUE_AGES[age])
    elif age == "older":
        where &= Q(created_at__lt=now - QUEUE_AGES["7d"])
    flags = Q()
    for value in _any_of(flag):
        if value == "unsupported":
            flags |= Q(supported=False)
        elif value == "safety":
            flags |= ~Q(safety_kinds="")
        else:
            flags |= Q(safety_kinds__contains=value)
    if authorities := _any_of(authority):
        where &= Q(target_memory__asserted_by__in=authorities)
    return where & flags


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

    def condition(self, now: datetime | None = None) -> Q:
        """The proposals this queue holds (with status pending, like the review queue); its age
        filter counts back from `now`."""
        return queue_q(**parse_filters(self.filters), now=now)


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


class Claim(models.Model):
    """A reviewer is looking at a proposal (focused it in the queue or opened it) until
    `expires_at`: the others see it, their keyboard skips it, and they decide it only after taking
    it over. At most one per proposal; pipeline.claims reads them, pipeline.writes.claims writes."""

    proposal = models.OneToOneField(
        "pipeline.Proposal", on_delete=models.CASCADE, primary_key=True, related_name="claim"
    )
    by = models.CharField(max_length=200, db_index=True)
    # The browser page that holds it: leaving that page releases this claim, never a newer one
    # the same reviewer made from the next page.
    page = models.CharField(max_length=64, blank=True, default="")
    claimed_at = models.DateTimeField()
    expires_at = models.DateTimeField()

    class Meta:
        db_table = "pipeline_claims"

    def __str__(self) -> str:
        return f"{self.by} until {self.expires_at:%H:%M}"


class ApprovalOutcome(models.TextChoices):
    """How the round an approval belongs to ended ("" while it waits for the second approval)."""

    OPEN = "", "waiting"
    APPLIED = "applied"  # the second approval applied the change
    REJECTED = "rejected"  # a reviewer (either one) rejected it
    STALE = "stale"  # the target or the raw memory moved on first
    WITHDRAWN = "withdrawn"  # the first approver took their approval back
    UNDONE = "undone"  # applied, then a reviewer undid the decision
    REOPENED = "reopened"  # rejected, then a reviewer undid the rejection: it settled nothing
    CANCELLED = "cancelled"  # the proposal left the queue: a memory it needed was purged


class Approval(models.Model):
    """One reviewer's approval of a change the two-person rule holds (pipeline.approvals): the
    first (position 1) is recorded and waits, the second (position 2) applies what the first
    approved. Rounds are kept after they end: the analytics' agreement reads them."""

    proposal = models.ForeignKey(
        "pipeline.Proposal", on_delete=models.CASCADE, related_name="approvals", db_index=False
    )
    by = models.CharField(max_length=200)
    at = models.DateTimeField()
    position = models.PositiveSmallIntegerField(default=1)
    action = models.CharField(max_length=10)  # the action approved (the proposal's, or another)
    content = models.TextField()  # the text approved (a reviewer's edit, or the model's)
    note = models.TextField(blank=True, default="")
    outcome = models.CharField(
        max_length=10, choices=ApprovalOutcome.choices, blank=True, default=ApprovalOutcome.OPEN
    )
    ended_by = models.CharField(max_length=200, blank=True, default="")
    ended_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        db_table = "pipeline_approvals"
        ordering = ["at", "id"]
        indexes = [models.Index(fields=["proposal", "outcome"], name="approvals_proposal")]
        constraints = [
            # One open approval per reviewer: the same person never counts twice.
            models.UniqueConstraint(
                fields=["proposal", "by"],
                condition=Q(outcome=""),
                name="approvals_once_per_reviewer",
            )
        ]

    def __str__(self) -> str:
        return f"approval {self.position} by {self.by} ({self.outcome or 'waiting'})"

    @property
    def is_open(self) -> bool:
        return self.outcome == ApprovalOutcome.OPEN
