"""Every chart the dashboard draws, as inline SVG built from numbers; labels are fixed words and
escaped names, never raw content. Sizes and colours are SVG attributes, so the pages need no inline
style and pass a `style-src 'self'` Content-Security-Policy. Also the overview's aggregates."""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Callable, Hashable
from datetime import date, timedelta

from django.db.models import Count
from django.db.models.functions import TruncDate
from django.utils import timezone
from django.utils.html import escape
from django.utils.safestring import SafeString, mark_safe

from pipeline.analytics import week_label
from pipeline.config import PIPELINE_NAME
from pipeline.models import Action, Proposal, ProposalStatus

ACTION_COLOURS = {
    Action.ADD: "#0f9d58",
    Action.UPDATE: "#2563eb",
    Action.DELETE: "#c62828",
    Action.NONE: "#9ca3af",
}
OUTCOME_COLOURS = {
    ProposalStatus.APPLIED: "#0f9d58",
    ProposalStatus.PENDING: "#7c3aed",
    ProposalStatus.REJECTED: "#c62828",
    ProposalStatus.SKIPPED: "#f59e0b",
    ProposalStatus.DEDUPED: "#06b6d4",
    ProposalStatus.RECORDED: "#9ca3af",
    ProposalStatus.STALE: "#78716c",
    ProposalStatus.CANCELLED: "#d1d5db",
}
# A human decision counted as approved (the change was applied or already stored) or rejected.
HUMAN_DECIDED = {ProposalStatus.APPLIED, ProposalStatus.DEDUPED, ProposalStatus.REJECTED}
HISTOGRAM_COLOUR = "#6366f1"
WIDTH = 640


# --- drawing --------------------------------------------------------------------------------------


def _number(value: float) -> str:
    return f"{value:.0f}" if value == int(value) else f"{value:.1f}"


def stacked_columns(
    columns: list[Hashable],
    series: dict,
    colours: dict[str, str],
    title: str,
    *,
    axis_label: Callable[[Hashable], str],
    tooltip: Callable[[Hashable], str],
    unit: Callable[[str], str] = str,
) -> SafeString:
    """One stacked column per entry of `columns`; series[column][key] is the height of `key`.

    About 13 columns are labelled on the axis (always the last one, and none too close to it),
    about 6 of them on a phone (the others are `wide-only`); the grid marks half and full height;
    every segment has a tooltip "<tooltip(column)>: <n> <unit(key)>". Axis labels are `tick`s:
    app.css draws them larger on a phone, where the chart is scaled to half its width, so they
    stay readable (11 px or more); the margins leave room for that size.
    """
    height, left, bottom, top = 206, 60, 32, 18
    plot_w, plot_h = WIDTH - left - 8, height - bottom - top
    peak = max([sum(series.get(column, {}).values()) for column in columns] + [1])
    bar_w = plot_w / max(len(columns), 1)
    every = max(1, math.ceil(len(columns) / 13))
    every_on_phone = every * max(1, math.ceil(len(columns) / every / 6))
    last = len(columns) - 1
    parts = [
        f'<svg class="chart" viewBox="0 0 {WIDTH} {height}" role="img" aria-label="{escape(title)}">'
        f"<title>{escape(title)}</title>"
    ]
    for fraction in (0.5, 1.0):
        y = top + plot_h * (1 - fraction)
        parts.append(
            f'<line x1="{left}" x2="{WIDTH - 8}" y1="{y:.1f}" y2="{y:.1f}" stroke="#eef0f3"/>'
            f'<text class="tick" x="{left - 4}" y="{y + 3:.1f}" text-anchor="end">'
            f"{_number(peak * fraction)}</text>"
        )
    parts.append(
        f'<line x1="{left}" x2="{WIDTH - 8}" y1="{top + plot_h}" y2="{top + plot_h}" stroke="#d0d5dd"/>'
    )
    for index, column in enumerate(columns):
        x = left + index * bar_w + 1
        y = top + plot_h
        counts = series.get(column, {})
        for key, colour in colours.items():
            n = counts.get(key, 0)
            if not n:
                continue
            h = plot_h * n / peak
            y -= h
            parts.append(
                f'<rect x="{x:.1f}" y="{y:.1f}" width="{max(bar_w - 2, 1):.1f}" height="{h:.1f}" '
                f'fill="{colour}"><title>{escape(tooltip(column))}: {n} {escape(unit(key))}</title></rect>'
            )
        if index == last or (index % every == 0 and last - index >= every):
            on_phone = index == last or (
                index % every_on_phone == 0 and last - index >= every_on_phone
            )
            # The last label ends at the chart's right edge instead of running past it.
            at, anchor = (x + bar_w - 2, "end") if index == last else (x + bar_w / 2 - 1, "middle")
            parts.append(
                f'<text class="{"tick" if on_phone else "tick wide-only"}" '
                f'x="{at:.1f}" y="{height - 8}" text-anchor="{anchor}">'
                f"{escape(axis_label(column))}</text>"
            )
    parts.append("</svg>")
    return mark_safe("".join(parts))


def stacked_bars(days: list[date], series: dict, colours: dict[str, str], title: str) -> SafeString:
    """Stacked columns per day (series[day][key] = count), labelled "Nov 03"."""
    return stacked_columns(
        days,
        series,
        colours,
        title,
        axis_label=lambda day: f"{day:%b %d}",
        tooltip=lambda day: f"{day:%b %d}",
    )


def weekly_bars(weeks: list[date], series: dict, colours: dict[str, str], title: str) -> SafeString:
    """Stacked columns per ISO week (series[monday][key] = count), labelled W48."""
    return stacked_columns(
        weeks,
        series,
        colours,
        title,
        axis_label=lambda week: f"W{week.isocalendar()[1]:02d}",
        tooltip=lambda week: f"{week_label(week)} (from {week:%d %b})",
    )


def horizontal_bars(
    rows: list[tuple[str, dict[str, int]]], colours: dict[str, str], title: str, empty: str
) -> SafeString:
    """One labelled horizontal stacked bar per (name, {key: count}) row, its total at its end."""
    rows = rows[:15]
    bar_h, gap, left, right, top = 18, 8, 110, 40, 6
    height = top * 2 + max(len(rows), 1) * (bar_h + gap)
    plot_w = WIDTH - left - right
    peak = max([sum(counts.values()) for _, counts in rows] + [1])
    parts = [
        f'<svg class="chart" viewBox="0 0 {WIDTH} {height}" role="img" '
        f'aria-label="{escape(title)}"><title>{escape(title)}</title>'
    ]
    if not rows:
        parts.append(
            f'<text x="{WIDTH / 2}" y="{height / 2 + 4}" text-anchor="middle">{escape(empty)}</text>'
        )
    for index, (name, counts) in enumerate(rows):
        y = top + index * (bar_h + gap)
        short = name if len(name) <= 16 else name[:15] + "…"
        parts.append(
            f'<text x="{left - 6}" y="{y + bar_h / 2 + 4:.1f}" text-anchor="end">{escape(short)}</text>'
        )
        x = float(left)
        for key, colour in colours.items():
            n = counts.get(key, 0)
            if not n:
                continue
            w = plot_w * n / peak
            parts.append(
                f'<rect x="{x:.1f}" y="{y}" width="{w:.1f}" height="{bar_h}" fill="{colour}">'
                f"<title>{escape(name)}: {n} {escape(key)}</title></rect>"
            )
            x += w
        total = sum(counts.values())
        parts.append(f'<text x="{x + 5:.1f}" y="{y + bar_h / 2 + 4:.1f}">{total}</text>')
    parts.append("</svg>")
    return mark_safe("".join(parts))


def meter(value: float | None, css: str = "bar", total: float = 1) -> SafeString:
    """A small bar filled to value/total, e.g. a confidence; the width is an SVG attribute."""
    try:
        percent = max(0.0, min(100.0, 100 * float(value or 0) / total))
    except (TypeError, ValueError, ZeroDivisionError):
        percent = 0.0
    return mark_safe(
        f'<span class="{escape(css)}"><svg viewBox="0 0 100 1" preserveAspectRatio="none" '
        f'aria-hidden="true"><rect width="{percent:.1f}" height="1"/></svg></span>'
    )


def legend(colours: dict[str, str]) -> SafeString:
    """The names of a chart's series, each after a swatch of its colour."""
    items = "".join(
        f'<span><svg class="swatch" viewBox="0 0 10 10" aria-hidden="true">'
        f'<rect width="10" height="10" rx="2" fill="{colour}"/></svg>{escape(name)}</span>'
        for name, colour in colours.items()
    )
    return mark_safe(f'<div class="legend">{items}</div>')


# --- overview aggregates ----------------------------------------------------------------------------


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


def approval_rates() -> list[dict]:
    """Per action: how many human-decided proposals were approved vs rejected."""
    rows = Proposal.objects.filter(decided_by__isnull=False).exclude(decided_by=PIPELINE_NAME)
    counts: dict = defaultdict(lambda: {"approved": 0, "rejected": 0})
    for row in rows.values("action", "status").annotate(n=Count("id")):
        bucket = "rejected" if row["status"] == ProposalStatus.REJECTED else "approved"
        if row["status"] in HUMAN_DECIDED:
            counts[row["action"]][bucket] += row["n"]
    result = []
    for action in (Action.ADD, Action.UPDATE, Action.DELETE):
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


def confidence_histogram(bins: int = 10) -> SafeString:
    """Fact confidence of every proposal in `bins` equal buckets from 0 to 1."""
    counts = [0] * bins
    for value in Proposal.objects.values_list("fact_confidence", flat=True).iterator():
        counts[min(bins - 1, int(max(0.0, min(1.0, value)) * bins))] += 1
    return stacked_columns(
        list(range(bins)),
        {index: {"facts": n} for index, n in enumerate(counts)},
        {"facts": HISTOGRAM_COLOUR},
        "Fact confidence histogram",
        axis_label=lambda index: f"{index / bins:.1f}–{(index + 1) / bins:.1f}",
        tooltip=lambda index: f"{index / bins:.1f}–{(index + 1) / bins:.1f}",
    )
