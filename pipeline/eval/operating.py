"""Operating points for `minFactConfidenceForWrite`, from the reviewers' verdicts: for each
threshold, how many judged proposals the pipeline would write automatically (their fact
confidence at or above it: the write gate holds the rest, DESIGN section 5), how many of those
writes reviewers rejected, and how many would be held for review instead; and the lowest threshold
that keeps rejected automatic writes at or under the target share. Reads only (one query).

A verdict is a reviewer's judgement of an ADD, UPDATE or DELETE proposal (NONE writes nothing):
rejected, or applied and later reverted (by a reviewer's revert, an automatic write included),
counts as rejected; applied and never reverted, by a reviewer or by the pipeline itself (a write
the team left standing), or deduplicated by a reviewer's approval, counts as accepted. Not
verdicts: what the job deduplicated itself (its fact was already stored: nothing was written or
judged), and proposals flagged for review (a contradiction, a safety finding): no threshold
writes those automatically. A QA pass found 260 of a job's own dedupes counted as accepted
writes, and a threshold recommended from them.
"""

from __future__ import annotations

from dataclasses import dataclass

from django.db.models import Count, Q

from pipeline.config import PIPELINE_NAME
from pipeline.models import DESTRUCTIVE, Action, Proposal, ProposalStatus

THRESHOLDS = tuple(round(0.5 + 0.05 * i, 2) for i in range(10))  # 0.5 .. 0.95
TARGET = 0.02  # rejected automatic writes at or under 2%
WRITING_ACTIONS = (Action.ADD, *sorted(DESTRUCTIVE))


@dataclass(frozen=True)
class Point:
    threshold: float
    written: int  # judged proposals at or above the threshold: written automatically
    rejected: int  # of those, the ones reviewers rejected or reverted
    held: int  # judged proposals below the threshold: held for a reviewer

    @property
    def rate(self) -> float:
        return self.rejected / self.written if self.written else 0.0

    @property
    def rate_percent(self) -> str:
        return f"{100 * self.rate:.1f}%"

    @property
    def within_target(self) -> bool:
        return self.written > 0 and self.rate <= TARGET


@dataclass(frozen=True)
class OperatingPoints:
    points: list[Point]
    judged: int  # proposals with a verdict
    rejected: int  # of those, rejected or reverted
    current: float  # minFactConfidenceForWrite now
    recommended: Point | None  # the lowest threshold within the target (None: none is)
    target: float = TARGET

    @property
    def changes_setting(self) -> bool:
        return self.recommended is not None and self.recommended.threshold != self.current


def _judged() -> Q:
    applied = Q(status=ProposalStatus.APPLIED)
    by_a_reviewer = Q(status=ProposalStatus.DEDUPED, decided_by__isnull=False) & ~Q(
        decided_by=PIPELINE_NAME
    )
    accepted = (applied | by_a_reviewer) & Q(reverted_at=None)
    return (accepted | _rejected()) & Q(review_needed=False)


def _rejected() -> Q:
    return Q(reverted_at__isnull=False) | (
        Q(status=ProposalStatus.REJECTED) & ~Q(decided_by=PIPELINE_NAME)
    )


def operating_points(current: float, thresholds: tuple[float, ...] = THRESHOLDS):
    """The table for `thresholds` (and the recommendation) from every verdict on record."""
    verdicts = Proposal.objects.filter(_judged(), action__in=WRITING_ACTIONS)
    aggregates = {"judged": Count("id"), "rejected": Count("id", filter=_rejected())}
    for i, threshold in enumerate(thresholds):
        above = Q(fact_confidence__gte=threshold)
        aggregates[f"w{i}"] = Count("id", filter=above)
        aggregates[f"r{i}"] = Count("id", filter=above & _rejected())
    counts = verdicts.aggregate(**aggregates)
    points = [
        Point(t, counts[f"w{i}"], counts[f"r{i}"], counts["judged"] - counts[f"w{i}"])
        for i, t in enumerate(thresholds)
    ]
    recommended = next((p for p in points if p.within_target), None)
    return OperatingPoints(points, counts["judged"], counts["rejected"], current, recommended)
