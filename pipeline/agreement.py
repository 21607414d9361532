"""Agreement under the two-person rule, for the analytics page: per reviewer and action, how often
the second reviewer agreed with their first approval, and how often the final outcome overturned
it. One GROUP BY query, whatever the number of approvals. Definitions (also shown on the page):

- a first approval is *seconded* when a different reviewer decided the proposal next; they
  *agreed* when that decision was an approval too (the change was applied);
- a first approval is *settled* when its round ended in a decision (applied or rejected); it was
  *overturned* when the proposal was rejected (by anyone, the first approver included), or applied
  and then reverted or the decision undone. Rounds still waiting, gone stale or withdrawn count
  for neither.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

from django.db.models import Case, Count, F, Value, When
from django.utils import timezone

from pipeline.analytics import ACTIONS, Filters
from pipeline.models import Approval, ApprovalOutcome

SETTLED = (ApprovalOutcome.APPLIED, ApprovalOutcome.REJECTED, ApprovalOutcome.UNDONE)
AGREED = (ApprovalOutcome.APPLIED, ApprovalOutcome.UNDONE)  # the second reviewer approved too


@dataclass
class Agreement:
    """One reviewer's first approvals of one action (or of all: action "")."""

    reviewer: str
    action: str
    seconded: int = 0
    agreed: int = 0
    settled: int = 0
    overturned: int = 0

    @property
    def disagreed(self) -> int:
        return self.seconded - self.agreed

    @property
    def agreement_rate(self) -> float | None:
        """agreed ÷ seconded: how often the second reviewer agreed."""
        return self.agreed / self.seconded if self.seconded else None

    @property
    def overturn_rate(self) -> float | None:
        """overturned ÷ settled: how often the final outcome went against the first approval."""
        return self.overturned / self.settled if self.settled else None

    def add(self, outcome: str, seconded: bool, reverted: bool, n: int = 1) -> None:
        self.settled += n
        if seconded:
            self.seconded += n
            self.agreed += n if outcome in AGREED else 0
        if outcome != ApprovalOutcome.APPLIED or reverted:
            self.overturned += n


def _first_approvals(filters: Filters, now):
    query = Approval.objects.filter(position=1, outcome__in=SETTLED)
    start = filters.start(now)
    if start is not None:
        query = query.filter(at__date__gte=start)
    if filters.action:
        query = query.filter(proposal__action=filters.action)
    if filters.model:
        query = query.filter(proposal__model=filters.model)
    return query.order_by()


def agreement(filters: Filters, now=None) -> dict:
    """Rows per (reviewer, action), each reviewer's total over every action, and the team's."""
    now = now or timezone.now()
    rows = (
        _first_approvals(filters, now)
        .annotate(
            seconded=Case(When(ended_by=F("by"), then=Value(0)), default=Value(1)),
            reverted=Case(
                When(proposal__reverted_at__isnull=True, then=Value(0)), default=Value(1)
            ),
        )
        .values("by", "outcome", "proposal__action", "seconded", "reverted")
        .annotate(n=Count("id"))
    )
    per_action: dict[tuple[str, str], Agreement] = {}
    per_reviewer: dict[str, Agreement] = {}
    team = Agreement("", "")
    for row in rows:
        reviewer, action = row["by"], row["proposal__action"]
        cell = per_action.setdefault((reviewer, action), Agreement(reviewer, action))
        total = per_reviewer.setdefault(reviewer, Agreement(reviewer, ""))
        for tally in (cell, total, team):
            tally.add(row["outcome"], bool(row["seconded"]), bool(row["reverted"]), row["n"])
    order = {action: index for index, action in enumerate(ACTIONS)}
    by_reviewer: dict[str, list[Agreement]] = defaultdict(list)
    for (reviewer, _), cell in sorted(
        per_action.items(), key=lambda item: (item[0][0], order.get(item[0][1], 9))
    ):
        by_reviewer[reviewer].append(cell)
    return {
        "reviewers": [
            {"reviewer": name, "total": per_reviewer[name], "actions": by_reviewer[name]}
            for name in sorted(per_reviewer, key=lambda n: (-per_reviewer[n].settled, n))
        ],
        "team": team,
    }
