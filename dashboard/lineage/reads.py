"""The lineage's reads: a fixed number of queries, whatever the number of events or proposals."""

from __future__ import annotations

from collections import defaultdict

from django.db.models import Count, Q

from memory.models import DERIVED_SOURCE_TYPE as DERIVED
from memory.models import Job, Memory, MemoryHistory
from pipeline.models import LlmCall, Proposal, TripleReview


def proposals_of(memory: Memory) -> list:
    """Every proposal that came from, aimed at, made, changed or deduplicated into the memory."""
    return list(
        Proposal.objects.filter(
            Q(source_memory=memory)
            | Q(target_memory=memory)
            | Q(created_memory=memory)
            | Q(updated_memory=memory)
            | Q(deleted_memory=memory)
            | Q(deduped_existing=memory)
        ).order_by("created_at", "position")
    )


def creator_of(memory: Memory, proposals: list):
    """The proposal among `proposals` that created the memory, or None (no query)."""
    return next((p for p in proposals if p.created_memory_id == memory.id), None)


def source_of(memory: Memory) -> Memory | None:
    """The raw memory a derived memory came from, or None when it is no longer in the store."""
    return Memory.objects.filter(id=memory.source_id).first()


def source_created(source: Memory | None) -> MemoryHistory | None:
    """The raw source's 'created' audit row (who wrote it), or None (no query without a source)."""
    if source is None:
        return None
    return (
        MemoryHistory.objects.filter(memory_id=source.id, event="created")
        .order_by("created_at", "id")
        .first()
    )


def extraction_of(creator) -> tuple[Job | None, dict]:
    """(job, its model calls) of the creating proposal; (None, {}) without one."""
    if creator is None:
        return None, {}
    return Job.objects.filter(id=creator.job_id).first(), calls_by_job([creator.job_id])


def derived_of(memory: Memory) -> list[Memory]:
    """The memories derived from a raw memory, deleted ones included."""
    return list(Memory.objects.filter(source_id=memory.id, source_type=DERIVED))


def jobs_of(memory: Memory) -> list[Job]:
    """The raw memory's extraction jobs, oldest first."""
    return list(Job.objects.filter(memory_id=memory.id).order_by("created_at", "id"))


def calls_by_job(job_ids: list[str]) -> dict[str, dict]:
    """Per job: model calls by kind and the extraction model (one GROUP BY query)."""
    calls: dict[str, dict] = defaultdict(lambda: {"kinds": defaultdict(int), "models": set()})
    if not job_ids:
        return calls
    rows = (
        LlmCall.objects.filter(job_id__in=job_ids)
        .order_by()
        .values("job_id", "kind", "model", "provider")
        .annotate(n=Count("id"))
    )
    for row in rows:
        entry = calls[row["job_id"]]
        entry["kinds"][row["kind"]] += row["n"]
        if row["kind"] == "extract":
            entry["models"].add((row["model"], row["provider"]))
    return calls


def triple_counts(memory: Memory) -> dict[str, dict[str, int]]:
    """Per job: the raw memory's entity triples counted by review status (one GROUP BY query)."""
    counts: dict[str, dict[str, int]] = defaultdict(dict)
    rows = (
        TripleReview.objects.filter(source_memory_id=memory.id)
        .order_by()
        .values("job_id", "status")
        .annotate(n=Count("id"))
    )
    for row in rows:
        counts[row["job_id"]][row["status"]] = row["n"]
    return counts
