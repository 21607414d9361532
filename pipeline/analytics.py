"""Reviewer analytics: how people and the automatic write path decided, per action, model and ISO week.

Every number comes from a handful of GROUP BY queries whose count does not depend on how many
proposals exist. Definitions (also shown on the page):

- a *human decision* is a proposal decided by someone other than the pipeline that ended applied,
  deduplicated or rejected; it is *edited* when the applied text differs from the model's fact;
- an *automatic write* is a proposal applied by `pipeline-v2` itself; it is *reverted* when a
  reviewer undid it; precision of automatic writes = 1 - reverted / automatic writes;
- decision time = decided_at - created_at of human decisions (median and nearest-rank p90).
"""

from __future__ import annotations

import math
import statistics
from collections import defaultdict
from dataclasses import dataclass, field
from datetime import date, datetime, timedelta
from urllib.parse import urlencode

from django.db.models import (
    Case,
    CharField,
    Count,
    DurationField,
    ExpressionWrapper,
    F,
    Q,
    Value,
    When,
)
from django.db.models.functions import TruncWeek
from django.utils import timezone

from pipeline.config import PIPELINE_ACTOR
from pipeline.models import Action, Proposal, ProposalStatus

AUTO = PIPELINE_ACTOR.name
OUTCOMES = ("approved", "edited", "rejected")
OUTCOME_COLOURS = {"approved": "#0f9d58", "edited": "#2563eb", "rejected": "#c62828"}
AUTO_COLOURS = {"kept": "#0f766e", "reverted": "#f59e0b"}
ACTIONS = (Action.ADD, Action.UPDATE, Action.DELETE)
DAY_CHOICES = (
    ("7", "7 days"),
    ("30", "30 days"),
    ("90", "90 days"),
    ("365", "1 year"),
    ("all", "all time"),
)
DEFAULT_DAYS = "90"
DECIDED = (ProposalStatus.APPLIED, ProposalStatus.DEDUPED, ProposalStatus.REJECTED)
CSV_HEADER = ("week", "week_start", "action", "model", "reviewer", "outcome", "count")


# --- filters ----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Filters:
    days: int | None = 90  # None: all time
    action: str = ""
    model: str = ""

    @property
    def days_param(self) -> str:
        return "all" if self.days is None else str(self.days)

    def querystring(self) -> str:
        params = {"days": self.days_param, "action": self.action, "model": self.model}
        return urlencode({key: value for key, value in params.items() if value})

    def since(self, now) -> datetime | None:
        """The window's first moment: `days` times 24 hours before `now` (None: all time)."""
        return None if self.days is None else now - timedelta(days=self.days)

    def start(self, now) -> date | None:
        """The day the window starts on (its first week's chart bar)."""
        since = self.since(now)
        return None if since is None else since.date()


def parse_filters(params) -> Filters:
    """Filters from a querystring; unknown values fall back to the defaults instead of failing."""
    raw_days = (params.get("days") or DEFAULT_DAYS).strip()
    if raw_days == "all":
        days = None
    else:
        try:
            days = max(1, min(int(raw_days), 3660))
        except ValueError:
            days = int(DEFAULT_DAYS)
    action = (params.get("action") or "").strip()
    if action not in ACTIONS:
        action = ""
    model = (params.get("model") or "").strip()[:200]
    return Filters(days=days, action=action, model=model)


def _scoped(filters: Filters, now):
    query = Proposal.objects.filter(decided_at__isnull=False)
    since = filters.since(now)
    if since is not None:  # the last 7 days are 7 x 24 hours, not 8 calendar days (a QA pass)
        query = query.filter(decided_at__gte=since)
    if filters.action:
        query = query.filter(action=filters.action)
    if filters.model:
        query = query.filter(model=filters.model)
    return query.order_by()


def _human(query):
    return query.filter(status__in=DECIDED, decided_by__isnull=False).exclude(decided_by=AUTO)


def _outcome_expression():
    edited = Q(applied_content__isnull=False) & ~Q(applied_content=F("fact_content"))
    return Case(
        When(status=ProposalStatus.REJECTED, then=Value("rejected")),
        When(edited, then=Value("edited")),
        default=Value("approved"),
        output_field=CharField(),
    )


# --- queries (constant in number) ----------------------------------------------------------------------


def _monday(value) -> date:
    day = value.date() if hasattr(value, "date") and callable(value.date) else value
    return day - timedelta(days=day.weekday())


def decision_counts(filters: Filters, now=None) -> list[dict]:
    """Human decisions grouped by (week, action, model, reviewer, outcome): one query."""
    now = now or timezone.now()
    rows = (
        _human(_scoped(filters, now))
        .annotate(week=TruncWeek("decided_at"), outcome=_outcome_expression())
        .values("week", "action", "model", "decided_by", "outcome")
        .annotate(n=Count("id"))
    )
    return [
        {
            "week": _monday(row["week"]),
            "action": row["action"],
            "model": row["model"],
            "reviewer": row["decided_by"],
            "outcome": row["outcome"],
            "n": row["n"],
        }
        for row in rows
    ]


def automatic_counts(filters: Filters, now=None) -> list[dict]:
    """Automatic writes grouped by (week, action, model, who reverted it): one query."""
    now = now or timezone.now()
    rows = (
        _scoped(filters, now)
        .filter(decided_by=AUTO, status=ProposalStatus.APPLIED)
        .annotate(week=TruncWeek("decided_at"))
        .values("week", "action", "model", "reverted_by")
        .annotate(n=Count("id"), reverted=Count("id", filter=Q(reverted_at__isnull=False)))
    )
    return [
        {
            "week": _monday(row["week"]),
            "action": row["action"],
            "model": row["model"],
            "reverted_by": row["reverted_by"],
            "n": row["n"],
            "reverted": row["reverted"],
        }
        for row in rows
    ]


def decision_seconds(filters: Filters, now=None) -> list[tuple[str, str, float]]:
    """(action, reviewer, seconds from proposal to decision) of every human decision: one query."""
    now = now or timezone.now()
    waited = ExpressionWrapper(F("decided_at") - F("created_at"), output_field=DurationField())
    rows = (
        _human(_scoped(filters, now))
        .annotate(waited=waited)
        .values_list("action", "decided_by", "waited")
    )
    return [
        (action, reviewer, max(0.0, waited.total_seconds()))
        for action, reviewer, waited in rows
        if waited is not None
    ]


def filter_options() -> dict[str, list[str]]:
    """The models seen in any decided proposal, for the filter drop-down: one query."""
    models = (
        Proposal.objects.filter(decided_at__isnull=False)
        .order_by("model")
        .values_list("model", flat=True)
        .distinct()
    )
    return {"actions": list(ACTIONS), "models": list(models)}


# --- arithmetic ---------------------------------------------------------------------------------------


def percentile(values: list[float], fraction: float) -> float | None:
    """Nearest-rank percentile (p90 of 10 values is the 9th smallest); None for no values."""
    if not values:
        return None
    ordered = sorted(values)
    rank = max(1, math.ceil(fraction * len(ordered)))
    return ordered[rank - 1]


def median(values: list[float]) -> float | None:
    return statistics.median(values) if values else None


@dataclass
class Tally:
    """Counts of one group (a week, an action+model, a reviewer...)."""

    approved: int = 0
    edited: int = 0
    rejected: int = 0
    auto: int = 0
    reverted: int = 0
    seconds: list[float] = field(default_factory=list)

    @property
    def decided(self) -> int:
        return self.approved + self.edited + self.rejected

    @property
    def approval_rate(self) -> float | None:
        return (self.approved + self.edited) / self.decided if self.decided else None

    @property
    def edit_rate(self) -> float | None:
        accepted = self.approved + self.edited
        return self.edited / accepted if accepted else None

    @property
    def rejection_rate(self) -> float | None:
        return self.rejected / self.decided if self.decided else None

    @property
    def precision(self) -> float | None:
        return 1 - self.reverted / self.auto if self.auto else None

    @property
    def median_seconds(self) -> float | None:
        return median(self.seconds)

    @property
    def p90_seconds(self) -> float | None:
        return percentile(self.seconds, 0.9)

    def add_decision(self, outcome: str, n: int) -> None:
        setattr(self, outcome, getattr(self, outcome) + n)


def week_label(monday: date) -> str:
    year, week, _ = monday.isocalendar()
    return f"{year}-W{week:02d}"


def _weeks(start: date | None, data_weeks: set[date], now) -> list[date]:
    last = _monday(now)
    first = _monday(start) if start is not None else min(data_weeks | {last})
    weeks, week = [], first
    while week <= last:
        weeks.append(week)
        week += timedelta(days=7)
    return weeks


def report(filters: Filters, now=None) -> dict:
    """Everything the analytics page shows, from four queries."""
    now = now or timezone.now()
    decisions = decision_counts(filters, now)
    automatic = automatic_counts(filters, now)
    seconds = decision_seconds(filters, now)

    total = Tally()
    by_week: dict[date, Tally] = defaultdict(Tally)
    by_action_model: dict[tuple[str, str], Tally] = defaultdict(Tally)
    by_reviewer: dict[str, Tally] = defaultdict(Tally)
    by_action: dict[str, Tally] = defaultdict(Tally)
    for row in decisions:
        for tally in (
            total,
            by_week[row["week"]],
            by_action_model[(row["action"], row["model"])],
            by_reviewer[row["reviewer"]],
            by_action[row["action"]],
        ):
            tally.add_decision(row["outcome"], row["n"])
    for row in automatic:
        for tally in (
            total,
            by_week[row["week"]],
            by_action_model[(row["action"], row["model"])],
            by_action[row["action"]],
        ):
            tally.auto += row["n"]
            tally.reverted += row["reverted"]
    for action, reviewer, waited in seconds:
        for tally in (total, by_reviewer[reviewer], by_action[action]):
            tally.seconds.append(waited)

    weeks = _weeks(filters.start(now), set(by_week), now)
    order = {action: index for index, action in enumerate(ACTIONS)}
    action_model_rows = [
        {"action": action, "model": model, "tally": tally}
        for (action, model), tally in sorted(
            by_action_model.items(), key=lambda item: (order.get(item[0][0], 9), item[0][1])
        )
    ]
    reviewer_rows = [
        {"reviewer": name, "tally": tally}
        for name, tally in sorted(by_reviewer.items(), key=lambda item: (-item[1].decided, item[0]))
    ]
    week_rows = [
        {"week": week, "label": week_label(week), "tally": by_week[week]}
        for week in sorted(by_week, reverse=True)
        if by_week[week].decided or by_week[week].auto
    ]
    return {
        "filters": filters,
        "total": total,
        "weeks": weeks,
        "week_rows": week_rows,
        "action_model_rows": action_model_rows,
        "action_rows": [
            {"action": action, "tally": by_action[action]}
            for action in ACTIONS
            if action in by_action
        ],
        "reviewer_rows": reviewer_rows,
        # Numbers per week for the charts, which the dashboard draws.
        "weekly_decisions": {
            week: {outcome: getattr(t, outcome) for outcome in OUTCOMES}
            for week, t in by_week.items()
        },
        "weekly_auto": {
            week: {"kept": t.auto - t.reverted, "reverted": t.reverted}
            for week, t in by_week.items()
        },
    }


def csv_rows(filters: Filters, now=None) -> list[tuple]:
    """One row per (week, action, model, reviewer, outcome) with its count, sorted.

    Outcomes: approved / edited / rejected (by a reviewer), auto_applied (reviewer `pipeline-v2`),
    reverted (an automatic write undone; the reviewer is who reverted it).
    """
    now = now or timezone.now()
    counts: dict[tuple, int] = defaultdict(int)
    for row in decision_counts(filters, now):
        counts[(row["week"], row["action"], row["model"], row["reviewer"], row["outcome"])] += row[
            "n"
        ]
    for row in automatic_counts(filters, now):
        counts[(row["week"], row["action"], row["model"], AUTO, "auto_applied")] += row["n"]
        if row["reverted"]:
            reviewer = row["reverted_by"] or "unknown"
            counts[(row["week"], row["action"], row["model"], reviewer, "reverted")] += row[
                "reverted"
            ]
    return [
        (week_label(week), week.isoformat(), action, model, reviewer, outcome, n)
        for (week, action, model, reviewer, outcome), n in sorted(counts.items())
    ]


def csv_safe(value) -> str:
    """Spreadsheet-safe cell: text that a spreadsheet would run as a formula is quoted."""
    text = str(value)
    if text and text[0] in "=+-@\t\r":
        return "'" + text
    return text
