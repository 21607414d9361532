"""Template helpers for the dashboard: diffs, highlights, hidden characters, small formatting."""

from __future__ import annotations

from django import template
from django.utils import timezone

from dashboard import textdiff

register = template.Library()


@register.simple_tag
def worddiff(old, new):
    return textdiff.word_diff(old or "", new or "")


@register.filter
def reveal(text):
    """Escaped text with zero-width and bidi characters made visible."""
    return textdiff.reveal(text or "")


@register.simple_tag
def highlight(text, phrase):
    return textdiff.highlight_phrase(text or "", phrase or "")


@register.simple_tag
def highlight_words(text, words, css="overlap"):
    return textdiff.highlight_words(text or "", set(words or []), css)


@register.simple_tag
def contradiction_marks(text, contradiction):
    """Shared words marked blue; the negation or antonym that conflicts marked red."""
    from pipeline.contradiction import NEGATIONS

    contradiction = contradiction or {}
    conflict = {word.replace("'", "") for word in NEGATIONS}
    conflict |= set(contradiction.get("antonymPair") or [])
    return textdiff.highlight_words(
        text or "", set(contradiction.get("overlap") or []), "overlap", conflict
    )


@register.simple_tag
def grounded(text, spans):
    """The raw memory with its supporting spans marked (escaped, hidden characters shown)."""
    return textdiff.mark_spans(
        text or "", [(s["start"], s["end"]) for s in spans or [] if s.get("score", 0) >= 0.5]
    )


@register.filter
def pct(value):
    try:
        return f"{float(value) * 100:.0f}%"
    except (TypeError, ValueError):
        return "–"


@register.filter
def age(value):
    """Compact age like 5m, 3h, 2d."""
    if not value:
        return "–"
    seconds = max(0, int((timezone.now() - value).total_seconds()))
    for size, unit in ((86400, "d"), (3600, "h"), (60, "m")):
        if seconds >= size:
            return f"{seconds // size}{unit}"
    return f"{seconds}s"


@register.inclusion_tag("dashboard/safety_badges.html")
def safety_badges(text, detailed=False):
    """Safety lint of any text (no model call): one badge per finding, with the matched span."""
    from pipeline.safety import scan

    return {"findings": [finding.as_dict() for finding in scan(text or "")], "detailed": detailed}
