"""Overview charts as inline SVG built from database aggregates. Labels are fixed words, not content."""

from __future__ import annotations

from collections import defaultdict
from datetime import date, timedelta

from django.db.models import Count
from django.db.models.functions import TruncDate
from django.utils import timezone
from django.utils.html import escape
from django.utils.safestring import mark_safe

from pipeline.models import Proposal

ACTION_COLOURS = {"add": "#0f9d58", "update": "#2563eb", "delete": "#c62828", "none": "#9ca3af"}
OUTCOME_COLOURS = {
    "applied": "#0f9d58",
    "pending": "#7c3aed",
    "rejected": "#c62828",
    "skipped": "#f59e0b",
    "deduped": "#06b6d4",
    "recorded": "#9ca3af",
    "stale": "#78716c",
    "cancelled": "#d1d5db",
}


def per_day(days: int = 30) -> tuple[list[date], dict, dict]:
    """Proposals per day by action and by status over the last `days` days (two queries)."""
    start = timezone.now().date() - timedelta(days=days - 1)
    base = Proposal.objects.filter(created_at__date__gte=start).annotate(
        day=TruncDate("created_at")
    )
    by_action: dict = defaultdict(lambda: defaultdict(int))
    for row in base.values("day", "action").annotate(n=Count("id")):
        by_action[row["day"]][row["action"]] = row["n"]
    by_status: dict = defaultdict(lambda: defaultdict(int))
    for row in base.values("day", "status").annotate(n=Count("id")):
        by_status[row["day"]][row["status"]] = row["n"]
    return [start + timedelta(days=i) for i in range(days)], by_action, by_status


def stacked_bars(days: list[date], series: dict, colours: dict[str, str], title: str) -> str:
    width, height, left, bottom = 640, 180, 32, 22
    plot_w, plot_h = width - left - 8, height - bottom - 10
    totals = [sum(series.get(day, {}).values()) for day in days]
    peak = max(totals + [1])
    bar_w = plot_w / len(days)
    parts = [
        f'<svg class="chart" viewBox="0 0 {width} {height}" role="img" aria-label="{escape(title)}">'
    ]
    for fraction in (0.5, 1.0):
        y = 10 + plot_h * (1 - fraction)
        parts.append(
            f'<line x1="{left}" x2="{width - 8}" y1="{y:.1f}" y2="{y:.1f}" stroke="#eef0f3"/>'
        )
        parts.append(
            f'<text x="{left - 4}" y="{y + 3:.1f}" text-anchor="end">{round(peak * fraction)}</text>'
        )
    for index, day in enumerate(days):
        x = left + index * bar_w + 1
        y = 10 + plot_h
        for key, colour in colours.items():
            n = series.get(day, {}).get(key, 0)
            if not n:
                continue
            h = plot_h * n / peak
            y -= h
            parts.append(
                f'<rect x="{x:.1f}" y="{y:.1f}" width="{max(bar_w - 2, 1):.1f}" height="{h:.1f}" fill="{colour}">'
                f"<title>{day:%b %d}: {n} {key}</title></rect>"
            )
        if index % 5 == 0 or index == len(days) - 1:
            parts.append(
                f'<text x="{x + bar_w / 2:.1f}" y="{height - 6}" text-anchor="middle">{day:%b %d}</text>'
            )
    parts.append("</svg>")
    return mark_safe("".join(parts))


def approval_rates() -> list[dict]:
    """Per action: how many human-decided proposals were approved vs rejected."""
    rows = Proposal.objects.filter(decided_by__isnull=False).exclude(decided_by="pipeline-v2")
    counts: dict = defaultdict(lambda: {"approved": 0, "rejected": 0})
    for row in rows.values("action", "status").annotate(n=Count("id")):
        bucket = "rejected" if row["status"] == "rejected" else "approved"
        if row["status"] in {"applied", "deduped", "rejected"}:
            counts[row["action"]][bucket] += row["n"]
    result = []
    for action in ("add", "update", "delete"):
        approved, rejected = counts[action]["approved"], counts[action]["rejected"]
        total = approved + rejected
        result.append(
            {
                "action": action,
                "approved": approved,
                "rejected": rejected,
                "total": total,
                "rate": approved / total if total else None,
            }
        )
    return result


def confidence_histogram(bins: int = 10) -> str:
    counts = [0] * bins
    for value in Proposal.objects.values_list("fact_confidence", flat=True).iterator():
        counts[min(bins - 1, int(max(0.0, min(1.0, value)) * bins))] += 1
    width, height, left, bottom = 640, 180, 32, 22
    plot_w, plot_h = width - left - 6, height - bottom - 8
    peak = max(counts + [1])
    bar_w = plot_w / bins
    parts = [
        f'<svg class="chart" viewBox="0 0 {width} {height}" role="img" aria-label="Fact confidence histogram">'
    ]
    parts.append(f'<text x="{left - 4}" y="12" text-anchor="end">{peak}</text>')
    for index, n in enumerate(counts):
        h = plot_h * n / peak
        x = left + index * bar_w + 1
        low = index / bins
        parts.append(
            f'<rect x="{x:.1f}" y="{8 + plot_h - h:.1f}" width="{bar_w - 2:.1f}" height="{h:.1f}" fill="#6366f1">'
            f"<title>{low:.1f}–{low + 1 / bins:.1f}: {n} facts</title></rect>"
        )
        if index % 2 == 0:
            parts.append(f'<text x="{x:.1f}" y="{height - 5}">{low:.1f}</text>')
    parts.append(f'<text x="{width - 6}" y="{height - 5}" text-anchor="end">1.0</text></svg>')
    return mark_safe("".join(parts))
