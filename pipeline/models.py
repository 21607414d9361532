"""Pipeline tables: the config singleton and its change log, proposals, and the model-call log."""

from __future__ import annotations

from datetime import timedelta

from django.db import models

from memory.models import Job, Memory, new_id
from pipeline import safety


class PipelineConfig(models.Model):
    """One row (id=1) holding the mode flags and numbers of DESIGN §5. Fresh installs: shadow."""

    enabled = models.BooleanField(default=True)
    shadow_mode = models.BooleanField(default=True)
    allow_update_delete = models.BooleanField(default=False)
    mutations_frozen = models.BooleanField(default=False)
    autonomous_enabled = models.BooleanField(default=True)
    autonomous_frozen = models.BooleanField(default=False)
    autonomous_interval_minutes = models.PositiveIntegerField(default=30)
    min_fact_confidence_for_write = models.FloatField(default=0.7)
    search_alpha = models.FloatField(default=0.7)
    search_min_score = models.FloatField(default=0.1)
    max_attempts = models.PositiveIntegerField(default=3)
    # Just above the queue timeout: a lease this old belongs to a worker that died or was killed,
    # and django-q2's re-delivery (after Q_RETRY) can take it over at once.
    lease_timeout_seconds = models.PositiveIntegerField(default=1830)
    retention_days = models.PositiveIntegerField(default=14)
    rejections_as_examples = models.BooleanField(default=False)
    # A proposal pending longer than this is in the daily staleness digest (pipeline.digest).
    stale_hours = models.PositiveIntegerField(default=24)
    # Focusing a proposal claims it for this long (pipeline.claims); a destructive change needs
    # this many different reviewers' approvals (pipeline.approvals: 1, or 2 for the two-person rule).
    claim_minutes = models.PositiveIntegerField(default=5)
    destructive_approvals = models.PositiveSmallIntegerField(default=1)
    last_digest_at = models.DateTimeField(null=True, blank=True)
    # Days an expired memory is kept (out of recall) before maintenance purges it; 0: never.
    expired_purge_days = models.PositiveIntegerField(default=30)
    last_maintenance_at = models.DateTimeField(null=True, blank=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        db_table = "pipeline_config"
        verbose_name = "pipeline config"

    def __str__(self) -> str:
        return "Pipeline config"


class ConfigChange(models.Model):
    changed_by = models.CharField(max_length=200)
    changed_at = models.DateTimeField()
    before = models.JSONField()
    after = models.JSONField()
    reason = models.TextField()

    class Meta:
        db_table = "pipeline_config_changes"
        ordering = ["-changed_at", "-id"]

    def __str__(self) -> str:
        return f"config change by {self.changed_by} at {self.changed_at:%Y-%m-%d %H:%M}"


class ProposalStatus(models.TextChoices):
    PENDING = "pending"
    APPLIED = "applied"
    REJECTED = "rejected"
    SKIPPED = "skipped"
    DEDUPED = "deduped"
    RECORDED = "recorded"
    STALE = "stale"
    CANCELLED = "cancelled"
    SUPPRESSED = "suppressed"


class Action(models.TextChoices):
    ADD = "add"
    UPDATE = "update"
    DELETE = "delete"
    NONE = "none"


# The blocked reason of a proposal made stale by its raw memory (writes.apply.source_refusal).
SOURCE_CHANGED = "source_changed"

RISK_OF = {Action.DELETE: 0, Action.UPDATE: 1, Action.ADD: 2, Action.NONE: 3}


def risk_of(action: str, review_needed: bool) -> int:
    """Queue rank, riskiest first; a flagged NONE ranks as the UPDATE it may become."""
    return RISK_OF.get(Action.UPDATE if action == Action.NONE and review_needed else action, 3)


DESTRUCTIVE = frozenset({Action.UPDATE, Action.DELETE})

# What a reviewer may still do with a proposal, by its status (DESIGN section 7): approve a pending
# one or a skipped one (a human overrides the confidence gate), reject a pending or a stale one, and
# re-decide a stale one. The reviewer writes, the dashboard and the API all read these.
APPROVABLE = frozenset({ProposalStatus.PENDING, ProposalStatus.SKIPPED})
REJECTABLE = frozenset({ProposalStatus.PENDING, ProposalStatus.STALE})
OPEN = APPROVABLE | REJECTABLE  # a reviewer can still decide it

# The review queue's orders; each ends with the id, a unique key, so a page can start right after
# any row (dashboard/paging.py).
QUEUE_ORDER = {
    "risk": ("risk", "fact_confidence", "created_at", "id"),
    "confidence": ("fact_confidence", "created_at", "id"),
    "age": ("created_at", "id"),
    "newest": ("-created_at", "-id"),
}
QUEUE_AGES = {"1h": timedelta(hours=1), "24h": timedelta(days=1), "7d": timedelta(days=7)}
QUEUE_FLAGS = ("unsupported", "safety", *safety.KINDS)  # "safety": any finding


def queue_order(sort: str | None) -> tuple[str, ...]:
    """The order of the review queue for a sort name (risk when none is given)."""
    return QUEUE_ORDER[sort or "risk"]


class ProposalQuerySet(models.QuerySet):
    def queue(
        self, *, status: str | None = None, sort: str | None = None, **filters
    ) -> ProposalQuerySet:
        """The review queue as a reviewer filtered it (queue_q(**filters)), in its order
        (queue_order(sort)): pending unless another status is asked for."""
        query = self.filter(status=status or ProposalStatus.PENDING).filter(queue_q(**filters))
        return query.order_by(*queue_order(sort))


class Proposal(models.Model):
    """One decision the pipeline made about one extracted fact."""

    objects = ProposalQuerySet.as_manager()

    id = models.CharField(primary_key=True, max_length=36, default=new_id, editable=False)
    # No single-column index on job, source and target: the composite indexes in Meta lead with
    # them, and every extra index is one more b-tree each job's insert writes under the lock.
    job = models.ForeignKey(Job, on_delete=models.PROTECT, related_name="proposals", db_index=False)
    source_memory = models.ForeignKey(
        Memory, on_delete=models.PROTECT, related_name="proposals_from", db_index=False
    )
    agent_id = models.CharField(max_length=200, default="default")
    action = models.CharField(max_length=10, choices=Action.choices)
    fact_content = models.TextField()
    fact_type = models.CharField(max_length=40, default="fact")
    fact_confidence = models.FloatField()
    target_memory = models.ForeignKey(
        Memory,
        null=True,
        blank=True,
        on_delete=models.PROTECT,
        related_name="proposals_targeting",
        db_index=False,
    )
    target_version = models.PositiveIntegerField(null=True, blank=True)
    target_content = models.TextField(null=True, blank=True)
    # The raw memory's version when its job wrote this proposal (the text the model read): one
    # that moved on since makes the proposal stale (writes.apply.source_refusal). None: recorded
    # before versions were kept, never checked.
    source_version = models.PositiveIntegerField(null=True, blank=True)
    confidence = models.FloatField()
    reason = models.TextField()
    status = models.CharField(max_length=12, choices=ProposalStatus.choices)
    review_needed = models.BooleanField(default=False)
    contradiction = models.JSONField(null=True, blank=True)
    blocked_reason = models.CharField(max_length=60, null=True, blank=True)
    skipped_reason = models.CharField(max_length=60, null=True, blank=True)
    created_memory = models.ForeignKey(
        Memory, null=True, blank=True, on_delete=models.PROTECT, related_name="created_by_proposals"
    )
    updated_memory = models.ForeignKey(
        Memory, null=True, blank=True, on_delete=models.PROTECT, related_name="updated_by_proposals"
    )
    deleted_memory = models.ForeignKey(
        Memory, null=True, blank=True, on_delete=models.PROTECT, related_name="deleted_by_proposals"
    )
    deduped_existing = models.ForeignKey(
        Memory, null=True, blank=True, on_delete=models.PROTECT, related_name="deduped_by_proposals"
    )
    candidates = models.JSONField(default=list, blank=True)
    model = models.CharField(max_length=200)
    prompt_version = models.CharField(max_length=20, blank=True, default="")
    mode = models.CharField(max_length=20)
    position = models.PositiveIntegerField(default=0)
    # Blast radius, stored so the queue's default order walks an index: DELETE, UPDATE, ADD, NONE.
    risk = models.PositiveSmallIntegerField(default=3)
    decided_by = models.CharField(max_length=200, null=True, blank=True)
    decided_at = models.DateTimeField(null=True, blank=True)
    review_note = models.TextField(null=True, blank=True)
    applied_content = models.TextField(null=True, blank=True)
    # What a reviewer's approval applied when it is not `action`, which always stays what the
    # model proposed: "Keep both" applies an UPDATE as an ADD, an UPDATE whose new text is
    # already a memory retires the target (DELETE). None: applied as proposed, or not applied.
    applied_as = models.CharField(max_length=10, choices=Action.choices, null=True, blank=True)
    fingerprint = models.CharField(max_length=64, blank=True, default="")
    grounding = models.JSONField(default=list, blank=True)
    supported = models.BooleanField(default=True)
    safety = models.JSONField(default=list, blank=True)
    safety_kinds = models.CharField(
        max_length=100, blank=True, default=""
    )  # "secret,pii" for filters
    reverted_at = models.DateTimeField(null=True, blank=True)
    reverted_by = models.CharField(max_length=200, null=True, blank=True)
    created_at = models.DateTimeField()
    updated_at = models.DateTimeField()

    class Meta:
        db_table = "pipeline_proposals"
        ordering = ["created_at", "position"]
        indexes = [
            models.Index(fields=["status", "created_at"], name="proposals_status_created"),
            models.Index(fields=["status", "review_needed"], name="proposals_status_review"),
            models.Index(fields=["source_memory"], name="proposals_source"),
            models.Index(fields=["target_memory"], name="proposals_target"),
            models.Index(fields=["job", "position"], name="proposals_job"),
            models.Index(fields=["fingerprint"], name="proposals_fingerprint"),
            models.Index(fields=["status", "action"], name="proposals_status_action"),
            models.Index(
                fields=["status", "risk", "fact_confidence", "created_at", "id"],
                name="proposals_queue_risk",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.action.upper()} {self.fact_content[:60]} ({self.status})"

    def save(self, *args, **kwargs):
        self.risk = risk_of(self.action, self.review_needed)
        super().save(*args, **kwargs)

    @property
    def is_destructive(self) -> bool:
        return self.action in DESTRUCTIVE

    @property
    def contradicting_none(self) -> bool:
        """A NONE whose fact contradicts its memory: approved as another action, never as is."""
        return self.action == Action.NONE and self.review_needed

    @property
    def applied_action(self) -> str:
        """The action applied (or to apply): a reviewer's `applied_as`, else the proposed one."""
        return self.applied_as or self.action

    # What a reviewer may do with it now: templates ask these, never the status words.

    @property
    def can_approve(self) -> bool:
        return self.status in APPROVABLE

    @property
    def can_reject(self) -> bool:
        return self.status in REJECTABLE

    @property
    def is_open(self) -> bool:
        """A reviewer can still decide it: approve, reject or re-decide."""
        return self.status in OPEN

    @property
    def is_pending(self) -> bool:
        return self.status == ProposalStatus.PENDING

    @property
    def is_stale(self) -> bool:
        """Its target (or its raw memory) changed since the decision: a reviewer re-decides on
        the current version."""
        return self.status == ProposalStatus.STALE

    @property
    def stale_source(self) -> bool:
        """Stale because its raw memory changed since its job (not its target)."""
        return self.is_stale and self.blocked_reason == SOURCE_CHANGED

    @property
    def source_changed(self) -> bool:
        """Its raw memory is no longer at the version its job read (reads source_memory)."""
        return self.source_version is not None and self.source_memory.version != self.source_version

    @property
    def awaiting_second_approval(self) -> bool:
        """A first reviewer approved it under the two-person rule: a second, different one applies
        it (reads the approvals; the queue prefetches them)."""
        return self.can_approve and any(a.is_open for a in self.approvals.all())

    @property
    def can_revert(self) -> bool:
        """Applied: it can be reverted (or, once reverted, the revert undone)."""
        return self.status == ProposalStatus.APPLIED

    @property
    def can_reopen(self) -> bool:
        """Rejected: the rejection can be undone."""
        return self.status == ProposalStatus.REJECTED

    @property
    def can_unsuppress(self) -> bool:
        return self.status == ProposalStatus.SUPPRESSED

    @property
    def needs_force(self) -> bool:
        """It would change or delete a pinned memory: applied only with the reviewer's `force`."""
        changes = self.is_destructive or self.contradicting_none
        return changes and self.target_memory_id is not None and self.target_memory.pinned

    @property
    def needs_confirmation(self) -> bool:
        """Its fact holds a finding the dashboard asks to confirm before approving (a secret)."""
        return safety.to_confirm(self.safety_kinds) is not None

    def summary(self) -> dict:
        """What was proposed and what became of it, in camelCase: the one proposal shape that the
        job's result, its decision audit and the API's proposal JSON build on."""
        return {
            "id": self.id,
            "action": self.action,
            "status": self.status,
            "fact": {
                "content": self.fact_content,
                "type": self.fact_type,
                "confidence": self.fact_confidence,
            },
            "targetMemoryId": self.target_memory_id,
            "targetContent": self.target_content,
            "confidence": self.confidence,
            "reason": self.reason,
            "reviewNeeded": self.review_needed,
            "blockedReason": self.blocked_reason,
            "skippedReason": self.skipped_reason,
            "createdMemoryId": self.created_memory_id,
            "updatedMemoryId": self.updated_memory_id,
            "deletedMemoryId": self.deleted_memory_id,
            "dedupedExistingId": self.deduped_existing_id,
        }


class LlmCall(models.Model):
    """What the model saw and said, for every call a job made."""

    job = models.ForeignKey(  # indexed by llm_calls_job (job, created_at)
        Job,
        null=True,
        blank=True,
        on_delete=models.CASCADE,
        related_name="llm_calls",
        db_index=False,
    )
    kind = models.CharField(max_length=20)  # extract / decide / embed
    provider = models.CharField(max_length=20)
    model = models.CharField(max_length=200)
    prompt = models.TextField(blank=True, default="")
    raw_response = models.TextField(blank=True, default="")
    duration_ms = models.FloatField(default=0)
    prompt_tokens = models.PositiveIntegerField(null=True, blank=True)
    completion_tokens = models.PositiveIntegerField(null=True, blank=True)
    error = models.TextField(null=True, blank=True)
    fact_index = models.IntegerField(null=True, blank=True)
    created_at = models.DateTimeField()

    class Meta:
        db_table = "pipeline_llm_calls"
        ordering = ["created_at", "id"]
        indexes = [models.Index(fields=["job", "created_at"], name="llm_calls_job")]
        verbose_name = "model call"

    def __str__(self) -> str:
        return f"{self.kind} {self.model} ({self.duration_ms:.0f} ms)"


class RejectionFingerprint(models.Model):
    """A rejected proposal's fingerprint: the same proposal from a later job is suppressed."""

    agent_id = models.CharField(max_length=200)
    fingerprint = models.CharField(max_length=64)
    proposal = models.ForeignKey(Proposal, on_delete=models.CASCADE, related_name="fingerprints")
    active = models.BooleanField(default=True)
    hits = models.PositiveIntegerField(default=0)
    created_at = models.DateTimeField()
    updated_at = models.DateTimeField()

    class Meta:
        db_table = "pipeline_rejection_fingerprints"
        constraints = [
            models.UniqueConstraint(
                fields=["agent_id", "fingerprint"], name="fingerprint_per_agent"
            )
        ]

    def __str__(self) -> str:
        return f"{self.fingerprint[:12]} ({'active' if self.active else 'lifted'})"


class TripleStatus(models.TextChoices):
    PENDING = "pending"
    APPROVED = "approved"
    REJECTED = "rejected"


class TripleReview(models.Model):
    """An entity triple the extraction found, waiting for a reviewer to add it to the graph."""

    job = models.ForeignKey(Job, on_delete=models.CASCADE, related_name="triples")
    source_memory = models.ForeignKey(Memory, on_delete=models.CASCADE, related_name="triples")
    position = models.PositiveIntegerField(default=0)
    source = models.CharField(max_length=300)
    source_type = models.CharField(max_length=40, default="unknown")
    relationship = models.CharField(max_length=200)
    target = models.CharField(max_length=300)
    target_type = models.CharField(max_length=40, default="unknown")
    confidence = models.FloatField(default=0.5)
    status = models.CharField(
        max_length=10, choices=TripleStatus.choices, default=TripleStatus.PENDING
    )
    decided_by = models.CharField(max_length=200, null=True, blank=True)
    decided_at = models.DateTimeField(null=True, blank=True)
    note = models.TextField(null=True, blank=True)
    created_at = models.DateTimeField()

    class Meta:
        db_table = "pipeline_triples"
        ordering = ["job", "position"]
        indexes = [models.Index(fields=["status"], name="triples_status")]

    def __str__(self) -> str:
        return f"{self.source} -{self.relationship}-> {self.target}"

    @property
    def can_decide(self) -> bool:
        """Pending: a reviewer can still approve or reject it."""
        return self.status == TripleStatus.PENDING

    @property
    def is_approved(self) -> bool:
        return self.status == TripleStatus.APPROVED

    @property
    def is_rejected(self) -> bool:
        return self.status == TripleStatus.REJECTED


class ReplayStatus(models.TextChoices):
    QUEUED = "queued"
    RUNNING = "running"
    DONE = "done"
    FAILED = "failed"


class QueuedRun(models.Model):
    """A run a queued task does (a second opinion, an evaluation, an import): its status, its
    error, its times and the workers that died on it (attempts)."""

    status = models.CharField(
        max_length=10, choices=ReplayStatus.choices, default=ReplayStatus.QUEUED
    )
    error = models.TextField(blank=True, default="")
    attempts = models.PositiveIntegerField(default=0)
    created_at = models.DateTimeField()
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        abstract = True

    @property
    def finished(self) -> bool:
        return self.status in {ReplayStatus.DONE, ReplayStatus.FAILED}

    @property
    def is_queued(self) -> bool:
        """No worker has picked it up yet."""
        return self.status == ReplayStatus.QUEUED

    @property
    def is_done(self) -> bool:
        return self.status == ReplayStatus.DONE

    @property
    def is_failed(self) -> bool:
        return self.status == ReplayStatus.FAILED


class ReplayRun(QueuedRun):
    """A second opinion: recorded decisions asked again of another model, by a queued task.

    The request fixes the proposals to compare and queues the run; the task appends one result
    per proposal to `results` as each answer arrives, so the page shows progress while the model
    takes its time. The run row is the only thing a replay writes.
    """

    id = models.CharField(primary_key=True, max_length=36, default=new_id, editable=False)
    requested_by = models.CharField(max_length=200)
    provider = models.CharField(max_length=20)
    model = models.CharField(max_length=200)
    with_extraction = models.BooleanField(default=False)
    # The scope as it was asked for: one proposal, or a slice of the review queue (its filters).
    proposal = models.ForeignKey(
        Proposal, null=True, blank=True, on_delete=models.SET_NULL, related_name="replay_runs"
    )
    filters = models.TextField(blank=True, default="")
    proposal_ids = models.JSONField(default=list)  # compared in this order
    total = models.PositiveIntegerField(default=0)  # proposals in the slice before the cap
    results = models.JSONField(default=list, blank=True)  # one comparison per proposal, in order
    started_at = models.DateTimeField(null=True, blank=True)
    # Like a job's lease: renewed at each claim and each saved result; a running run whose lease is
    # older than the lease timeout lost its worker, and the sweep retries or fails it. A queued
    # run's leased_at says when it was queued (None: when it was created): five minutes and no task took
    # it, the sweep hands it off again.
    leased_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        db_table = "pipeline_replay_runs"
        ordering = ["-created_at"]
        verbose_name = "second opinion run"

    def __str__(self) -> str:
        return f"second opinion by {self.model} ({self.status})"


class LeasedRun(QueuedRun):
    """A queued run held by one named worker at a time (pipeline.writes.leased_runs).
    Evaluations and imports share it."""

    # The lease: who holds the run and its heartbeat, renewed by every record; a running run whose
    # heartbeat outlived the lease timeout lost its worker and the sweep queues it again. A queued
    # run's heartbeat says when it was queued (None: when it was created): five minutes and no
    # task took it, the sweep hands it off again.
    worker = models.CharField(max_length=200, blank=True, default="")
    claimed_at = models.DateTimeField(null=True, blank=True)
    heartbeat_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        abstract = True


class EvalRun(LeasedRun):
    """An evaluation of a model on a case set (pipeline.eval.runs), done by a queued task.

    The request freezes the set (`set_text`: a reviewed export is built from the store then); the
    task claims the run, calls the model with no transaction open and records each batch of
    outcomes as EvalResult rows beside the progress and the heartbeat; the last record builds the
    report (the JSON `manage.py eval` writes) and drops the rows.
    """

    id = models.CharField(primary_key=True, max_length=36, default=new_id, editable=False)
    requested_by = models.CharField(max_length=200)
    set_kind = models.CharField(max_length=20)  # shipped, or reviewed (the team's verdicts)
    set_name = models.CharField(max_length=200)
    set_sha256 = models.CharField(max_length=64)
    # Which of the set's cases ran, in words ("category rejected, the first 50"); "" for all.
    selection = models.CharField(max_length=200, blank=True, default="")
    set_text = models.TextField()  # the cases as JSON Lines, as run
    provider = models.CharField(max_length=20)
    model = models.CharField(max_length=200)
    prompt_version = models.CharField(max_length=20)
    done = models.PositiveIntegerField(default=0)
    total = models.PositiveIntegerField(default=0)
    report = models.JSONField(null=True, blank=True)
    counts = models.JSONField(default=dict, blank=True)  # the settings page's evidence (runs.py)

    class Meta:
        db_table = "pipeline_eval_runs"
        ordering = ["-created_at"]

    def __str__(self) -> str:
        return f"evaluation of {self.model} on {self.set_name} ({self.status})"


class EvalResult(models.Model):
    """One case's outcome of a run still in progress (pipeline.eval.outcome's JSON)."""

    # No index of its own: the unique constraint leads with it.
    run = models.ForeignKey(
        EvalRun, on_delete=models.CASCADE, related_name="results", db_index=False
    )
    position = models.PositiveIntegerField()  # the case's index in the set
    outcome = models.JSONField()

    class Meta:
        db_table = "pipeline_eval_results"
        constraints = [
            models.UniqueConstraint(fields=["run", "position"], name="eval_results_once")
        ]


# Reviewing as a team: its tables and the queue's filters (queue_q, which ProposalQuerySet.queue
# reads when called) live beside the saved queues that read them too; an import's run row lives
# with the imports.
from pipeline.imports.models import ImportRun  # noqa: E402, F401
from pipeline.team import (  # noqa: E402, F401
    Approval,
    ApprovalOutcome,
    Claim,
    DigestRun,
    SavedQueue,
    queue_q,
)
