"""A proposal's own trail: every audit row that names it, oldest first, read from the memories it
can have touched (its raw memory, its target, the memory it made, changed or deduplicated into),
so the proposal page tells who proposed, approved, undid, withdrew, took over or reverted it."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from memory.erasure import PURGED_EVENT
from memory.models import MemoryHistory
from pipeline.models import Proposal, ProposalStatus

# The decision a `reviewed` row records, in words (metadata.decision; others are shown as they are).
DECISIONS = {
    "approved_first": "first approval",
    "approval_withdrawn": "first approval withdrawn",
    "undone": "decision undone",
    "reopened": "rejection undone",
    "stale": "found stale",
    "taken_over": "taken over",
    "keep_both": "kept both",
    "kept": "existing memory kept",
    "kept_undone": "keeping undone",
}


# The columns a trail row shows (only these are read).
FIELDS = (
    "id",
    "memory_id",
    "event",
    "changed_by",
    "actor_type",
    "reason",
    "metadata",
    "created_at",
)


@dataclass(frozen=True)
class TrailRow:
    label: str
    by: str
    actor_type: str
    at: datetime
    reason: str
    memory_id: str
    row_id: str


def trail_of(proposal: Proposal) -> list[TrailRow]:
    """The proposal's audit rows (a query on the memory_id index, then its JSON filter; one more
    for the memories an undone decision had changed, which the proposal no longer names)."""
    memories = {
        proposal.source_memory_id,
        proposal.target_memory_id,
        proposal.created_memory_id,
        proposal.updated_memory_id,
        proposal.deleted_memory_id,
        proposal.deduped_existing_id,
    } - {None}
    rows = list(_rows(memories, proposal))
    undone = (
        {
            row.metadata.get("memoryId")
            for row in rows
            if row.event == "reviewed" and isinstance(row.metadata, dict)
        }
        - memories
        - {None}
    )
    if undone:
        rows = sorted([*rows, *_rows(undone, proposal)], key=lambda row: (row.created_at, row.id))
    if proposal.status == ProposalStatus.CANCELLED:
        # A purge cancels it without naming it: the tombstone of the purge that did says who
        # and when (a QA pass read a trail that ended on a waiting first approval). The last
        # one by its cancellation: a later purge of its other memory cancelled nothing.
        cancelled_by = (
            MemoryHistory.objects.filter(
                memory_id__in={proposal.source_memory_id, proposal.target_memory_id} - {None},
                event=PURGED_EVENT,
                created_at__lte=proposal.updated_at,
            )
            .only(*FIELDS)
            .order_by("-created_at", "-id")
            .first()
        )
        if cancelled_by is not None:
            rows = sorted([*rows, cancelled_by], key=lambda row: (row.created_at, row.id))
    return [
        TrailRow(
            _label(row, proposal),
            row.changed_by,
            row.actor_type,
            row.created_at,
            row.reason or "",
            row.memory_id,
            row.id,
        )
        for row in rows
    ]


def _rows(memories: set[str], proposal: Proposal):
    """The audit rows of `memories` that name the proposal, oldest first."""
    return (
        MemoryHistory.objects.filter(memory_id__in=memories, metadata__proposalId=proposal.id)
        .only(*FIELDS)
        .order_by("created_at", "id")
    )


def _label(row: MemoryHistory, proposal: Proposal) -> str:
    """What the row did to the proposal, in a few words."""
    meta = row.metadata if isinstance(row.metadata, dict) else {}
    if row.event == PURGED_EVENT:
        whose = "raw memory" if row.memory_id == proposal.source_memory_id else "memory"
        return f"cancelled: its {whose} was purged"
    if row.event == "reviewed":
        decision = str(meta.get("decision") or "reviewed")
        return DECISIONS.get(decision, decision.replace("_", " "))
    if row.event == "none":
        return f"{(meta.get('proposedAction') or proposal.action).upper()} proposed"
    if meta.get("undoRevert"):
        return "revert undone"
    if meta.get("revert"):
        return "reverted"
    whose = "raw memory" if row.memory_id == proposal.source_memory_id else "memory"
    return f"{whose} {row.event}"
