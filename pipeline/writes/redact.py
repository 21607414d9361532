"""A redaction's writes, each one short transaction: the redaction itself (the memories that hold
the span rewritten with their `redacted` audits, every copy found elsewhere scrubbed with the
marker, the proposals whose text changed annotated again, the vectors of the old texts dropped),
and the scrub of copies a verification found (the receipt is kept with the event by purge's
keep_receipt). pipeline.redaction decides what to redact and verifies; no model call here."""

from __future__ import annotations

from dataclasses import dataclass, field

from django.db import transaction
from django.utils import timezone

from memory import jobs
from memory.batch import history_row, insert_rows
from memory.erasure import Copies, Texts
from memory.erasure_rows import scrub_copies_in_transaction
from memory.models import Memory, MemoryHistory
from memory.redaction import (
    REDACTED_EVENT,
    Changed,
    drop_vectors_in_transaction,
    holding,
    old_hashes,
    redact_memories_in_transaction,
    stale_vectors,
)
from memory.writes import Actor
from pipeline import grounding, safety
from pipeline.erasure import PLACES
from pipeline.models import Proposal, RejectionFingerprint
from pipeline.writes.record import fingerprint


@dataclass
class Written:
    """What a redaction wrote: the memories rewritten, its event, rows per table, the vectors
    dropped (their matrix rows are zeroed after the commit)."""

    changed: list[Changed]
    event: str
    rows: dict[str, int] = field(default_factory=dict)
    vectors: list[tuple[int, str, int]] = field(default_factory=list)


def redact(
    memory_id: str,
    family: list[str],
    copies: dict[str, Copies],
    texts: Texts,
    replacement: str,
    *,
    kind: str,
    reason: str,
    actor: Actor,
) -> Written:
    """One transaction: the family's memories that hold the span rewritten (each with its audit;
    the one asked about gets one even when only its proposals held the span), their running jobs
    restarted, the copies `copies` found scrubbed, and the vectors of the old texts dropped."""
    with transaction.atomic():
        now = timezone.now()
        metadata = {"kind": kind, "redactedFromMemoryId": memory_id}
        held = holding(family, texts)
        # First, as a purge does, and as a worker's write takes its job's row before memories:
        # locking the memories first, this write and a worker's would wait for each other.
        jobs.restart_redacted_in_transaction(sorted(held), at=now)
        changed = redact_memories_in_transaction(
            sorted(held, key=lambda pk: (pk != memory_id, pk)),
            texts,
            replacement,
            actor=actor,
            reason=reason,
            metadata=metadata,
            at=now,
        )
        event = next((c.event for c in changed if c.memory_id == memory_id), None)
        if event is None:
            audit = history_row(
                memory_id,
                REDACTED_EVENT,
                actor=actor,
                reason=reason,
                metadata={**metadata, "changed": False},
                at=now,
            )
            insert_rows(MemoryHistory, [audit])
            event = audit.id
        ids = [c.memory_id for c in changed]
        hashes = old_hashes(ids, texts, [c.old_hash for c in changed])
        _move_versions(changed)
        rows = _scrub(copies, texts, replacement, redacted_sources=ids)
        dropped = stale_vectors(hashes)
        drop_vectors_in_transaction(dropped)
        if changed:
            rows[Memory._meta.db_table] = len(changed)
        if dropped:
            rows["embeddings"] = len(dropped)
    return Written(changed, event, dict(sorted(rows.items())), dropped)


def scrub_copies(copies: dict[str, Copies], texts: Texts, replacement: str) -> dict[str, int]:
    """Copies of the span a verification found, scrubbed with the marker (rows per table)."""
    with transaction.atomic():
        return _scrub(copies, texts, replacement, redacted_sources=[])


def _move_versions(changed: list[Changed]) -> None:
    """Proposals made from or aimed at a redacted memory at its old version are at its new one:
    their copies were redacted in the same write, so they are not stale because of it."""
    for c in changed:
        Proposal.objects.filter(source_memory_id=c.memory_id, source_version=c.old_version).update(
            source_version=c.version
        )
        Proposal.objects.filter(target_memory_id=c.memory_id, target_version=c.old_version).update(
            target_version=c.version
        )


def _scrub(
    copies: dict[str, Copies], texts: Texts, replacement: str, *, redacted_sources: list[str]
) -> dict[str, int]:
    """Scrub the copies in place, then annotate again the proposals whose fact changed (its
    fingerprint, which a scrub empties, and its findings) or whose raw memory did (grounding)."""
    rows = scrub_copies_in_transaction(PLACES, copies, texts, replacement)
    found = copies.get("pipeline.Proposal")
    facts = [pk for pk, names in (found.rows.items() if found else []) if "fact_content" in names]
    _annotate_again(facts, redacted_sources)
    return rows


def _annotate_again(fact_changed: list[str], sources: list[str]) -> None:
    proposals = Proposal.objects.filter(id__in=fact_changed) | Proposal.objects.filter(
        source_memory_id__in=sources
    )
    texts = dict(Memory.objects.filter(id__in=sources).values_list("id", "content"))
    for p in proposals.order_by("id"):
        changes = {}
        if p.id in fact_changed:
            findings = [f.as_dict() for f in safety.scan(p.fact_content)]
            changes.update(
                fingerprint=fingerprint(p.action, p.fact_content, p.target_memory_id),
                safety=findings,
                safety_kinds=",".join(sorted({f["kind"] for f in findings})),
            )
            _refingerprint(p, changes["fingerprint"])
        if p.source_memory_id in texts:
            spans = grounding.spans(texts[p.source_memory_id], p.fact_content)
            changes.update(grounding=spans, supported=grounding.is_supported(spans))
        Proposal.objects.filter(id=p.id).update(**changes)


def _refingerprint(proposal: Proposal, new: str) -> None:
    """A rejection's fingerprint follows its redacted fact (a hash of the old one could be
    guessed back); one that now equals another rejection of the agent goes (that one suppresses
    the same proposal)."""
    for row in RejectionFingerprint.objects.filter(proposal_id=proposal.id):
        taken = (
            RejectionFingerprint.objects.filter(agent_id=row.agent_id, fingerprint=new)
            .exclude(pk=row.pk)
            .exists()
        )
        if taken:
            row.delete()
        else:
            RejectionFingerprint.objects.filter(pk=row.pk).update(fingerprint=new)
