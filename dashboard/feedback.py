"""Agent feedback for reviewers: the memories agents reported as contradicted or never used.

Agents report through the MCP `feedback` tool; each report is one "feedback" row in the memory's
audit trail with its verdict in the metadata. Counting them per memory is reads only.
"""

from __future__ import annotations

from django.db.models import Count, Exists, IntegerField, OuterRef, Q, Subquery, Value
from django.db.models.functions import Coalesce

from memory.feedback import FEEDBACK_EVENT, FEEDBACK_VERDICTS
from memory.models import MemoryHistory

# "ignored" as a slice means never used: reported ignored and never reported used.
FEEDBACK_CHOICES = [("", "any"), ("contradicted", "contradicted"), ("ignored", "never used")]


def _reports(verdict: str):
    return MemoryHistory.objects.filter(
        memory=OuterRef("pk"), event=FEEDBACK_EVENT, metadata__verdict=verdict
    )


def _count(verdict: str):
    counted = _reports(verdict).order_by().values("memory").annotate(n=Count("id")).values("n")
    return Coalesce(Subquery(counted, output_field=IntegerField()), Value(0))


def in_slice(slice_: str) -> Q | None:
    """The slice ('contradicted' or 'ignored') as a filter a search applies inside itself."""
    if slice_ not in {"contradicted", "ignored"}:
        return None
    where = Q(Exists(_reports(slice_)))
    return where & ~Q(Exists(_reports("used"))) if slice_ == "ignored" else where


def reported(memories, slice_: str):
    """Memories in the slice ('contradicted' or 'ignored'), most reported first, with counts.

    Each row gets fb_used, fb_ignored and fb_contradicted; without a slice nothing is added, so
    the plain list pays no subquery per row.
    """
    where = in_slice(slice_)
    if where is None:
        return memories
    memories = memories.filter(where)
    counts = {f"fb_{verdict}": _count(verdict) for verdict in FEEDBACK_VERDICTS}
    return memories.annotate(**counts).order_by(f"-fb_{slice_}", "-created_at", "-id")


def counts_of(history_rows) -> dict[str, int]:
    """Reports per verdict among a memory's (already loaded) history rows."""
    counts = dict.fromkeys(FEEDBACK_VERDICTS, 0)
    for row in history_rows:
        verdict = (row.metadata or {}).get("verdict") if row.event == FEEDBACK_EVENT else None
        if verdict in counts:
            counts[verdict] += 1
    return counts
