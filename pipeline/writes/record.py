"""The job's one write and its gates: proposals, audits, applied changes, vectors, call log and
completion in one transaction. The apply step it shares with reviewers is in writes/apply.py.

The write is batched so the write lock is held briefly: one lookup for the dedupe and suppression
checks of every fact, then one insert per table (memories, proposals, audits, vectors, entity
mentions) whatever the number of facts. UPDATE and DELETE still go through the guarded one-by-one
paths (they are rare, and each takes its target's lock and version check). On PostgreSQL the
inserts and the completion that follow the gates' reads are pipelined (memory.backend.pipelined):
the server gets them back to back instead of one round trip each.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime

from django.db import transaction
from django.db.models import F
from django.utils import timezone

from memory import jobs as job_life
from memory import writes
from memory.backend import pipelined
from memory.backend.collector import COLLECTOR_PAUSE
from memory.content import NormalizedContent, normalize
from memory.models import (
    ExtractionStatus,
    Job,
    Memory,
    RowRead,
    lock_rows,
)
from memory.writes import Actor, BatchedWrite, Refused, Vector
from pipeline import grounding, safety
from pipeline.config import (
    PIPELINE_ACTOR,
    PIPELINE_NAME,
    SHADOW_ACTOR,
    applied_automatically,
    config_read,
    get_config,
    mode_of,
    policy_mode,
    write_policy,
)
from pipeline.llm.prompts import PROMPT_VERSION
from pipeline.models import (
    LlmCall,
    PipelineConfig,
    Proposal,
    ProposalStatus,
    RejectionFingerprint,
    TripleReview,
    risk_of,
)
from pipeline.writes.apply import apply_destructive, derived_fields, inherited, target_refusal
from pipeline.writes.jobs import Claim, call_rows, held_read
from pipeline.writes.lookup import fingerprint, look_up, target_of

REQUEUED = "the source memory was edited while the job ran: it runs again on the current text"
MOVED = "the source memory moved to another agent while the job ran: it runs again for that agent"


@dataclass
class JobOutcome:
    """Everything a job computed outside the transaction, ready for one atomic write."""

    claim: Claim
    provider: str
    model: str
    facts: list = field(default_factory=list)
    entities: list = field(default_factory=list)
    decisions: list = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    calls: list = field(default_factory=list)
    source_vector: Vector | None = None
    fact_vectors: dict[str, Vector] = field(default_factory=dict)
    mode: str = "shadow"
    # The text the model read and its content hash: a source edited since is not written over.
    source_hash: str | None = None
    source_text: str | None = None
    agent_id: str | None = None


@dataclass
class JobWrite:
    """What every proposal of one record write shares."""

    job: Job
    source: Memory
    config: PipelineConfig
    mode: str  # the effective mode (shadow under the brake)
    policy: str  # the WRITE_POLICY row: the mode, or the emergency brake; recorded on each
    # proposal (mode at decision) and in the result (writeMode)
    outcome: JobOutcome
    stats: dict[str, int]
    at: datetime
    batch: BatchedWrite
    # Content hash -> the agent's active memory with that content, looked up once for every fact
    # and kept in step with what this write adds, updates and deletes.
    active: dict[str, str] = field(default_factory=dict)
    # Content hash -> the agent's expired memory with that content (it holds the text's place
    # among the agent's memories): an ADD of that text brings it back instead of adding one.
    expired: dict[str, str] = field(default_factory=dict)
    rejected: dict[str, int] = field(default_factory=dict)  # fingerprint -> rejection pk
    hits: Counter[int] = field(default_factory=Counter)  # rejection pk -> proposals it suppressed
    ready: dict[int, Ready] = field(default_factory=dict)  # id(decided) -> its prepared rows


@dataclass
class Ready:
    """One decided fact made ready before the write opens (no database): its annotated proposal
    and, for an ADD, the memory it would derive. The gates inside the write only pick statuses."""

    proposal: Proposal
    text: NormalizedContent
    derived: writes.Derived | None = None


def _blank_stats() -> dict[str, int]:
    return dict.fromkeys(
        (
            "added",
            "updated",
            "deleted",
            "deduped",
            "skippedLowConfidence",
            "blockedDestructive",
            "reviewNeeded",
            "stale",
            "pending",
            "recorded",
            "embeddingsAdded",
        ),
        0,
    )


def record_job(outcome: JobOutcome) -> dict | None:
    """The job's one write: proposals, audits, applied changes, vectors, call log, completion.

    The source memory (locked) and the mode are read again inside the transaction: a memory
    forgotten or edited, or a brake pulled, while the model was thinking wins over what the job
    decided.
    """
    now = timezone.now()
    # Everything that needs no database is done before the write lock is taken.
    ready = {}
    if outcome.source_text is not None and outcome.agent_id is not None:
        ready = {
            id(d): prepare(d, outcome, outcome.source_text, outcome.agent_id, now)
            for d in outcome.decisions
        }
    # The new memories' entities, read before the lock (rarely changed; writes.entity_ids: race).
    entities = writes.entity_ids(
        [(r.derived.memory, r.derived.names) for r in ready.values() if r.derived is not None]
    )
    calls = call_rows(outcome.claim.job_id, outcome.calls, now)
    claim = outcome.claim
    # No garbage collection while the write holds its locks (see CollectorPause).
    with COLLECTOR_PAUSE.paused(), transaction.atomic():
        # The reads the gates need, sent together: one round trip on PostgreSQL (after its
        # BEGIN), and all read before anything is decided.
        with pipelined():
            job_read = held_read(claim)
            # Locked: a forget that commits while this write runs is waited for and seen below,
            # never written over (the forget's job update touches pending jobs only, never this
            # leased one: the two never wait on each other in a cycle).
            locks = lock_rows(Memory, [claim.memory_id, *_destructive_targets(outcome)])
            source_read = RowRead(Memory, "id = %s", [claim.memory_id], lock=True)
            settings_read = config_read()
            lookup = look_up(outcome, ready, outcome.agent_id)
        job, source, config = job_read.get(), source_read.get(), settings_read.get()
        _ = locks and locks.all()  # with its UPDATEs' and DELETEs' targets, in id order
        found = lookup.all() if lookup else []
        if job is None:
            return None
        if source is None:
            raise Memory.DoesNotExist(f"memory {job.memory_id} of job {job.id}")
        changed = _changed_since_read(source, outcome)
        if source.is_deleted or source.is_expired or changed:
            writes.insert_rows(LlmCall, calls)
            if source.is_deleted or source.is_expired:
                return _cancel(job, source, outcome, now)
            return _requeue(job, outcome, now, changed)
        if outcome.agent_id is None and outcome.decisions:  # an outcome without its agent
            lookup = look_up(outcome, ready, source.agent_id)
            found = lookup.all() if lookup else []
        config = config or get_config()
        mode = mode_of(config)
        if mode == "disabled":
            mode = "shadow"  # disabled while running: record, never write
        write = JobWrite(
            job=job,
            source=source,
            config=config,
            mode=mode,
            policy=policy_mode(mode, mutations_frozen=config.mutations_frozen),
            outcome=outcome,
            stats=_blank_stats(),
            at=now,
            batch=BatchedWrite(at=now, entities=entities),
            ready=ready,
        )
        for kind, key, ref in found:
            if kind == 1:
                write.rejected[key] = int(ref)
            else:  # 0: the agent's active memory with that text, 2: its expired one
                (write.active if kind == 0 else write.expired)[key] = ref
        if outcome.source_vector is not None:
            # Its embedding_model is set with the extraction status below: one update of the row.
            write.batch.store_vector(source, outcome.source_vector, mark_model=False)
        # Looked up by name on every call: fault tests wrap it to fail inside the open write.
        proposals = [write_proposal(decided, write) for decided in outcome.decisions]
        # Only writes from here on: PostgreSQL gets them without a round trip each.
        with pipelined():
            return _write_rows(write, proposals, calls)


def _destructive_targets(outcome: JobOutcome) -> list[str]:
    """The memories the job's UPDATE and DELETE decisions name (locked with the source)."""
    destructive = [d for d in outcome.decisions if d.action in {"update", "delete"}]
    return [target for decided in destructive if (target := target_of(decided))]


def _count_rejection_hits(write: JobWrite) -> None:
    """Each rejection this write's proposals repeat counts them: one UPDATE per rejection, in id
    order (two jobs repeating the same rejections in other orders would deadlock on PostgreSQL)."""
    for pk, n in sorted(write.hits.items()):
        RejectionFingerprint.objects.filter(pk=pk).update(hits=F("hits") + n, updated_at=write.at)


def _write_rows(write: JobWrite, proposals: list[Proposal], calls: list[LlmCall]) -> dict:
    """The rows every gate has decided, the job's result and its completion: writes only."""
    job, source, outcome, now = write.job, write.source, write.outcome, write.at
    writes.insert_rows(LlmCall, calls)
    _count_rejection_hits(write)
    write.batch.flush_memories()
    writes.insert_rows(Proposal, proposals)
    writes.insert_rows(
        TripleReview,
        [
            TripleReview(
                job=job,
                source_memory=source,
                position=index,
                source=triple.source,
                source_type=triple.source_type,
                relationship=triple.relationship,
                target=triple.target,
                target_type=triple.target_type,
                confidence=triple.confidence,
                created_at=now,
            )
            for index, triple in enumerate(outcome.entities)
        ],
    )
    result = {
        "facts": [fact.as_dict() for fact in outcome.facts],
        "entities": [entity.as_dict() for entity in outcome.entities],
        "proposals": [_result_summary(p) for p in proposals],
        "writeMode": write.policy,  # "frozen" under the brake: its own state, not shadow
        "writeStats": write.stats,
        "warnings": outcome.warnings,
        "provider": outcome.provider,
        "model": outcome.model,
        # The lease of the attempt that wrote this: the job page times that attempt alone.
        "leasedAt": outcome.claim.leased_at.isoformat(),
    }
    writes.set_extraction_status(
        [source.id],
        ExtractionStatus.COMPLETED,
        model=outcome.model,
        embedding_model=outcome.source_vector.model if outcome.source_vector else None,
    )
    _complete(job, result, now)
    write.batch.flush()  # last: its vectors' upsert waits for the rows it returns
    return result


def _complete(job: Job, result: dict, now: datetime) -> None:
    """The job's completion, in one UPDATE."""
    job_life.complete_in_transaction(job, result, at=now)


def _cancel(job: Job, source: Memory, outcome: JobOutcome, now: datetime) -> dict:
    """The source was forgotten or expired while the model read it: nothing is written from it."""
    why = "was forgotten" if source.is_deleted else "expired"
    result = {"cancelled": f"source memory {why}", "warnings": outcome.warnings}
    job_life.cancel_in_transaction(job, result, at=now)
    return result


def _changed_since_read(source: Memory, outcome: JobOutcome) -> str | None:
    """Why the source is not what the model read, or None: its text was edited, or it moved to
    another agent (whose memories the write's dedupe lookups did not look at)."""
    if outcome.source_hash is not None and source.content_hash != outcome.source_hash:
        return REQUEUED
    if outcome.agent_id is not None and source.agent_id != outcome.agent_id:
        return MOVED
    return None


def _requeue(job: Job, outcome: JobOutcome, now: datetime, why: str) -> dict:
    """The source changed after the model read it: no vector and no proposal from the old read;
    the job goes back to the queue (its attempt given back: an edit is not a failure)."""
    result = {"requeued": why, "warnings": outcome.warnings}
    job_life.requeue_in_transaction(job, result, at=now)
    return result


def _result_summary(p: Proposal) -> dict:
    """A proposal as the job's result lists it: its summary plus grounding and safety kinds."""
    return {**p.summary(), "supported": p.supported, "safety": p.safety_kinds}


def _decision_audit(proposal: Proposal, actor: Actor, write: JobWrite) -> None:
    """The decision's audit on the source memory: the proposal's summary and the job's counts."""
    outcome = write.outcome
    facts = proposal.summary()
    del facts["reason"]  # the audit row's own reason holds it
    write.batch.audit(
        write.source.id,
        "none",
        actor=actor,
        reason=proposal.reason,
        metadata={
            "proposalId": facts.pop("id"),
            "proposedAction": facts.pop("action"),
            **facts,
            "shadow": actor is SHADOW_ACTOR,
            "extractionModel": outcome.model,
            "factCount": len(outcome.facts),
            "entityCount": len(outcome.entities),
            "contradictionRisk": bool((proposal.contradiction or {}).get("flagged")),
        },
    )


def prepare(decided, outcome: JobOutcome, source_text: str, agent_id: str, at) -> Ready:
    """A decided fact's proposal (annotated) and, for an ADD, its derived memory: no database."""
    fact = decided.fact
    target = decided.target
    flagged = decided.contradiction
    proposal = Proposal(
        job_id=outcome.claim.job_id,
        source_memory_id=outcome.claim.memory_id,
        agent_id=agent_id,
        action=decided.action,
        fact_content=fact.content,
        fact_type=fact.type,
        fact_confidence=fact.confidence,
        target_memory_id=target.candidate.memory_id if target else None,
        target_version=target.version if target else None,
        target_content=target.candidate.content if target else None,
        confidence=decided.confidence,
        reason=decided.reason,
        review_needed=bool(flagged and flagged.flagged),
        contradiction=flagged.as_dict() if flagged else None,
        candidates=[c.as_dict() for c in decided.candidates],
        model=outcome.model,
        prompt_version=PROMPT_VERSION,
        # The fact's index in the extraction, so the decide call log lines up.
        position=decided.fact_index,
        risk=risk_of(decided.action, bool(flagged and flagged.flagged)),
        created_at=at,
        updated_at=at,
    )
    annotate(proposal, source_text)
    text = normalize(fact.content)
    ready = Ready(proposal, text)
    if decided.action == "add":
        try:
            ready.derived = writes.derived(
                fact.content,
                **derived_fields(proposal, agent_id),
                actor=PIPELINE_ACTOR,
                reason=decided.reason,
                at=at,
                vector=outcome.fact_vectors.get(text.hash),
            )
        except Refused:
            pass  # no visible content: the empty-content gate skips it
    return ready


def write_proposal(decided, write: JobWrite) -> Proposal:
    """One decided fact: its proposal through the gates, applied where the policy allows, audited.

    The proposal and its audit are written with the others at the end of the write.
    """
    ready = write.ready.get(id(decided)) or prepare(
        decided, write.outcome, write.source.content, write.source.agent_id, write.at
    )
    proposal = ready.proposal
    proposal.mode = write.policy  # the mode at decision, the brake ("frozen") included
    # The source as this write read it (locked; its text is the one the model read, or the job
    # was requeued): a later edit makes the proposal stale (apply.source_refusal).
    proposal.source_version = write.source.version
    stats = write.stats
    actor = SHADOW_ACTOR if write.mode == "shadow" else PIPELINE_ACTOR
    vector = write.outcome.fact_vectors.get(ready.text.hash)
    if proposal.review_needed:
        stats["reviewNeeded"] += 1
    # A NONE is suppressed only when flagged: a recorded one waits for nobody.
    checked = proposal.action != "none" or proposal.review_needed
    rejected = write.rejected.get(proposal.fingerprint) if checked else None
    recorded = write_policy(write.policy, decided.action).outcome == "recorded"
    if recorded and not proposal.review_needed:
        proposal.status = ProposalStatus.RECORDED
        stats["recorded"] += 1
    elif rejected is not None:
        # A reviewer already rejected this exact proposal: record it, do not queue it again.
        proposal.status = ProposalStatus.SUPPRESSED
        proposal.skipped_reason = "rejected_before"
        write.hits[rejected] += 1
        stats["suppressed"] = stats.get("suppressed", 0) + 1
    elif recorded:
        # A NONE whose fact contradicts the memory it names: a reviewer decides whether the
        # store still holds (pipeline.decision._none_against), in every mode.
        _hold(proposal, _held_none_reason(write.policy))
    elif _writes_anything(write.policy) and safety.needs_review(proposal.safety):
        proposal.status, proposal.blocked_reason = ProposalStatus.PENDING, "safety_review"
        held_as = "blockedDestructive" if proposal.is_destructive else "heldForSafety"
        stats[held_as] = stats.get(held_as, 0) + 1
    elif decided.action == "add":
        _gate_add(proposal, write, ready)
    else:
        _gate_destructive(proposal, write, vector)
    if proposal.status == ProposalStatus.PENDING:
        stats["pending"] += 1
    _decision_audit(proposal, actor, write)
    return proposal


def _held_none_reason(policy: str) -> str:
    """Why a flagged NONE waits: the mode's own reason where nothing is applied (shadow, the
    brake), else the contradiction."""
    if _writes_anything(policy):
        return "contradiction_review"
    return write_policy(policy, "update").blocked_reason or "contradiction_review"


def _writes_anything(policy: str) -> bool:
    """False for the modes that apply nothing (shadow, the brake): their reason comes first."""
    return bool(applied_automatically(policy))


def _hold(proposal: Proposal, reason: str | None) -> None:
    proposal.status, proposal.blocked_reason = ProposalStatus.PENDING, reason


def _dedupe(proposal: Proposal, write: JobWrite, existing_id: str) -> None:
    proposal.status, proposal.deduped_existing_id = ProposalStatus.DEDUPED, existing_id
    write.stats["deduped"] += 1


def _gate_add(proposal: Proposal, write: JobWrite, ready: Ready) -> None:
    """The seed's ADD gates, in its order: confidence, then empty content, then an active
    duplicate (so a low-confidence duplicate is skipped for its confidence, not deduped)."""
    stats, config = write.stats, write.config
    text = ready.text
    existing = write.active.get(text.hash)
    policy = write_policy(write.policy, "add")
    if policy.outcome != "applied":
        if existing is not None:  # a duplicate is never queued for review
            _dedupe(proposal, write, existing)
        else:
            _hold(proposal, policy.blocked_reason)
        return
    if proposal.fact_confidence < config.min_fact_confidence_for_write:
        proposal.status, proposal.skipped_reason = ProposalStatus.SKIPPED, "low_fact_confidence"
        stats["skippedLowConfidence"] += 1
        return
    if ready.derived is None or not text.normalized.strip(".,!?;: "):
        proposal.status, proposal.skipped_reason = ProposalStatus.SKIPPED, "empty_fact_content"
        stats["skippedLowConfidence"] += 1
        return
    if existing is not None:
        _dedupe(proposal, write, existing)
        return
    if text.hash in write.expired and _revived(proposal, write, ready):
        return
    memory = write.batch.add(inherited(ready.derived, write.source))
    write.active[text.hash] = memory.id
    proposal.status, proposal.created_memory_id = ProposalStatus.APPLIED, memory.id
    proposal.decided_by, proposal.decided_at = PIPELINE_NAME, proposal.created_at
    stats["added"] += 1
    if ready.derived.vector is not None:
        stats["embeddingsAdded"] += 1


def _revived(proposal: Proposal, write: JobWrite, ready: Ready) -> bool:
    """An applied ADD whose text an expired memory of the agent holds: that memory is live again,
    with the raw memory's expiry (an audited edit), and the proposal is deduped into it. False
    when the memory was forgotten or rewritten since the lookup (the ADD writes a new one)."""
    memory_id = write.expired.pop(ready.text.hash)
    write.batch.flush_memories()  # a guarded edit, after the rows this write has added
    # Still that text: the job's own UPDATE may have rewritten it since the lookup.
    target = (
        Memory.objects.select_for_update()
        .filter(id=memory_id, is_deleted=False, content_hash=ready.text.hash)
        .first()
    )
    if target is None:
        return False
    writes.revive_in_transaction(
        target,
        expires_at=write.source.expires_at,
        actor=PIPELINE_ACTOR,
        reason=f"stated again in memory {write.source.id}",
        at=write.at,
    )
    write.active[ready.text.hash] = target.id
    _dedupe(proposal, write, target.id)
    return True


def _gate_destructive(proposal: Proposal, write: JobWrite, vector: Vector | None) -> None:
    stats, config = write.stats, write.config
    policy = write_policy(write.policy, proposal.action)
    if not _writes_anything(write.policy):
        _hold(proposal, policy.blocked_reason)
        return
    if policy.outcome != "applied":
        # Controlled-write: UPDATE and DELETE wait for a reviewer, flagged or not (the flag stays
        # on the proposal as reviewNeeded).
        _hold(proposal, policy.blocked_reason)
        stats["blockedDestructive"] += 1
        return
    if proposal.review_needed:
        # Flagged contradictions are never applied automatically, in any mode.
        _hold(proposal, "contradiction_review")
        stats["blockedDestructive"] += 1
        return
    # The memories this write added must exist before a guarded path checks content against them.
    write.batch.flush_memories()
    target = Memory.objects.select_for_update().filter(id=proposal.target_memory_id).first()
    # The pipeline never forces: a pinned target waits for a reviewer.
    refusal = target_refusal(
        proposal, target, force=False, automatic=True, approvals=config.destructive_approvals
    )
    if refusal is not None and refusal.stale:
        proposal.status, proposal.blocked_reason = ProposalStatus.STALE, refusal.reason
        stats["stale"] += 1
        return
    if refusal is not None:
        _hold(proposal, refusal.reason)
        stats["blockedDestructive"] += 1
        return
    if proposal.fact_confidence < config.min_fact_confidence_for_write:
        proposal.status, proposal.skipped_reason = ProposalStatus.SKIPPED, "low_fact_confidence"
        stats["skippedLowConfidence"] += 1
        return
    old_hash = target.content_hash
    try:
        with transaction.atomic():  # savepoint: a refusal leaves no cold snapshot behind
            apply_destructive(
                proposal,
                target,
                proposal.fact_content,
                PIPELINE_ACTOR,
                vector,
                action=proposal.action,
            )
    except Refused as refused:
        proposal.status = ProposalStatus.SKIPPED
        proposal.skipped_reason = f"{proposal.action}_{refused.code}"
        return
    if write.active.get(old_hash) == target.id:
        del write.active[old_hash]
    if proposal.action == "update":
        write.active[target.content_hash] = target.id
    proposal.status = ProposalStatus.APPLIED
    proposal.decided_by, proposal.decided_at = PIPELINE_NAME, proposal.created_at
    stats["updated" if proposal.action == "update" else "deleted"] += 1


# --- annotation -----------------------------------------------------------------------------------


def annotate(proposal: Proposal, raw: str) -> None:
    """Fingerprint, supporting spans of the raw memory and safety findings (no model call)."""
    proposal.fingerprint = fingerprint(
        proposal.action, proposal.fact_content, proposal.target_memory_id
    )
    proposal.grounding = grounding.spans(raw, proposal.fact_content)
    proposal.supported = grounding.is_supported(proposal.grounding)
    proposal.safety = [finding.as_dict() for finding in safety.scan(proposal.fact_content)]
    proposal.safety_kinds = ",".join(sorted({finding["kind"] for finding in proposal.safety}))
