"""Template helpers for the dashboard: diffs, marks, hidden characters, charts, and the one way a
length of time, a percentage and a safety severity are shown. Output is escaped HTML."""

from __future__ import annotations

import math
import re
from datetime import timedelta

from django import template
from django.urls import reverse
from django.utils import timezone
from django.utils.html import format_html
from django.utils.safestring import mark_safe
from django.utils.text import Truncator

from dashboard import charts, glossary, markdown, textdiff, wording
from pipeline import approvals, claims, safety
from pipeline.config import get_config
from pipeline.contradiction import NEGATIONS

register = template.Library()
NO_VALUE = "–"


@register.simple_tag
def worddiff(old, new):
    return textdiff.word_diff(old or "", new or "")


@register.filter
def short_id(identifier) -> str:
    """An id as the dashboard shows it (its link or title carries the whole one)."""
    return wording.short_id(str(identifier) if identifier else "")


@register.filter
def relabel(proposal) -> str:
    """Both facts, "model proposed UPDATE · reviewer applied as DELETE", or "" (wording.relabel)."""
    return wording.relabel(proposal)


@register.filter
def reveal(text):
    """Escaped text with zero-width and bidi characters made visible (a number as its digits)."""
    return textdiff.reveal("" if text is None else str(text))


@register.filter
def named_hidden(text):
    """Text for an attribute, its zero-width and bidi characters named ("[RLO]"); autoescaped."""
    return textdiff.named_hidden(text or "")


@register.simple_tag
def highlight_words(text, words, css="overlap"):
    return textdiff.highlight_words(text or "", set(words or []), css)


@register.simple_tag
def contradiction_marks(text, contradiction):
    """Shared words marked blue; the negation, antonym or end that conflicts marked red."""
    contradiction = contradiction or {}
    conflict = {word.replace("'", "") for word in NEGATIONS}
    # Each side of the pair as its text says it: "switched off" marks both words.
    conflict |= {word for said in contradiction.get("antonymPair") or [] for word in said.split()}
    conflict |= set((contradiction.get("ended") or "").split())  # "phased out": both words
    return textdiff.highlight_words(
        text or "", set(contradiction.get("overlap") or []), "overlap", conflict
    )


@register.simple_tag
def grounded(text, spans):
    """The raw memory with its supporting spans marked (escaped, hidden characters shown)."""
    return textdiff.mark_spans(
        text or "", [(s["start"], s["end"]) for s in spans or [] if s.get("score", 0) >= 0.5]
    )


# --- numbers and time -----------------------------------------------------------------------------


@register.filter
def pct(value):
    try:
        return f"{float(value) * 100:.0f}%"
    except (TypeError, ValueError):
        return NO_VALUE


@register.filter
def duration(value, unit="s"):
    """A length of time for people: 320 ms, 1.2 s, 25 s, 25 min, 3.0 h, 2.1 d.

    `value` is seconds (a number or a timedelta), or milliseconds with `|duration:"ms"`.
    """
    if isinstance(value, timedelta):
        seconds = value.total_seconds()
    else:
        try:
            seconds = float(value) / (1000 if unit == "ms" else 1)
        except (TypeError, ValueError):
            return NO_VALUE
    seconds = max(0.0, seconds)
    if seconds == 0:
        return "0 s"
    if seconds < 1:
        return f"{seconds * 1000:.0f} ms"
    if seconds < 10:
        return f"{seconds:.1f}".removesuffix(".0") + " s"
    if seconds < 60:
        return f"{seconds:.0f} s"
    if seconds < 3600:
        return f"{seconds / 60:.0f} min"
    if seconds < 48 * 3600:
        return f"{seconds / 3600:.1f} h"
    return f"{seconds / 86400:.1f} d"


@register.filter
def age(value):
    """How long ago a moment was, in whole seconds and the words of `duration`."""
    if not value:
        return NO_VALUE
    return duration(int(max(0.0, (timezone.now() - value).total_seconds())))


@register.filter
def minutes_until(value):
    """How long until a moment, in whole minutes rounded up ("5 minutes" for a claim just made:
    Django's timeuntil rounds down and said "4 minutes", "0 minutes" for a one-minute claim)."""
    if not value:
        return NO_VALUE
    seconds = (value - timezone.now()).total_seconds()
    if seconds <= 0:
        return "a moment"
    minutes = math.ceil(seconds / 60)
    return f"{minutes} minute{'' if minutes == 1 else 's'}"


NEAR_DAYS = 14  # within this of now a moment reads as a duration, further as its date


@register.filter
def relative(value):
    """A moment to come or gone, for people: "in 5.0 h", "3.0 d ago" near now, else "on
    2099-01-31" (a count of thousands of days says less than the date)."""
    if not value:
        return NO_VALUE
    seconds = (value - timezone.now()).total_seconds()
    if abs(seconds) > NEAR_DAYS * 86400:
        return f"on {value:%Y-%m-%d}"
    return f"in {duration(int(seconds))}" if seconds > 0 else f"{duration(int(-seconds))} ago"


# --- words: the glossary, and the memories a reason cites ---------------------------------------

CITATION = re.compile(r"\[(\d{1,3})\]")
SNIPPET_CHARS = 60


@register.simple_tag
def outcome(word, section="proposal", css="badge-status", count=None):
    """A status word as a badge linking to its glossary entry, its meaning as the tooltip
    (dashboard.glossary is the one table of meanings); a plain badge for a word it lacks."""
    text = word if count is None else f"{count} {word}"
    meaning = glossary.meaning(word, section)
    if not meaning:
        return format_html('<span class="badge {}">{}</span>', css, text)
    return format_html(
        '<a class="badge {} badge-link" href="{}#{}" title="{}" data-testid="outcome-word">{}</a>',
        css,
        reverse("dashboard:glossary"),
        glossary.anchor(word, section),
        meaning,
        text,
    )


@register.filter
def cited(reason, candidates):
    """The model's reason (escaped, hidden characters shown) with each [N] that numbers one of
    the proposal's candidates made a link to that memory, with a short quote of its content.
    Done when shown, so a stored reason from any model that cites [N] reads the same way."""
    numbered = {
        str(c.get("number")): c
        for c in candidates or []
        if isinstance(c, dict) and c.get("memoryId") and c.get("number") is not None
    }

    def link(match: re.Match) -> str:
        candidate = numbered.get(match.group(1))
        if candidate is None:
            return match.group(0)
        content = candidate.get("content") or ""
        return format_html(
            '<a class="cite" href="{}" title="{}" data-testid="cite">[{}] <q>{}</q></a>',
            reverse("dashboard:memory", args=[candidate["memoryId"]]),
            Truncator(content).chars(300),
            match.group(1),
            textdiff.reveal(Truncator(content).chars(SNIPPET_CHARS)),
        )

    return mark_safe(CITATION.sub(link, str(textdiff.reveal(reason or ""))))


# --- safety ---------------------------------------------------------------------------------------


def _kind(finding) -> str:
    return finding.get("kind", "") if isinstance(finding, dict) else str(finding or "")


@register.filter
def severity(finding):
    """The severity pipeline.safety gives a finding (a dict or its kind): "high" or "medium"."""
    return safety.severity(_kind(finding))


@register.filter
def finding_kind(kind):
    """A safety finding kind in the words of pipeline.safety.KINDS: "pii" -> "personal data"."""
    found = safety.KINDS.get(_kind(kind))
    return found.words if found else kind


@register.filter
def needs_confirmation(finding) -> bool:
    """Whether approving a fact with this finding (a dict or its kind) asks for a confirmation."""
    return safety.to_confirm([_kind(finding)]) is not None


@register.filter
def can_redact(finding) -> bool:
    """Whether a reviewer may redact this finding's match (its kind's `redact` in KINDS)."""
    found = safety.KINDS.get(_kind(finding))
    return bool(found and found.redact)


@register.simple_tag
def redactable(findings):
    """The findings a reviewer may redact, one per kind and span: of a text (scanned here, no
    model) or of stored findings (a proposal's `safety`)."""
    if isinstance(findings, str):
        findings = [finding.as_dict() for finding in safety.scan(findings)]
    offers, seen = [], set()
    for finding in findings or []:
        key = (finding.get("kind"), finding.get("match"))
        if key[1] and key not in seen and can_redact(finding):
            seen.add(key)
            offers.append(finding)
    return offers


@register.filter
def marked(text, span):
    """The text escaped (hidden characters shown) with every copy of `span`, in any case, in a
    <mark>: what a redaction would replace."""
    if not span:
        return textdiff.reveal(text or "")
    pieces = re.split(f"({re.escape(span)})", text or "", flags=re.IGNORECASE)
    return mark_safe(
        "".join(
            format_html("<mark>{}</mark>", textdiff.reveal(piece))
            if i % 2
            else textdiff.reveal(piece)
            for i, piece in enumerate(pieces)
        )
    )


# --- decisions ------------------------------------------------------------------------------------


@register.simple_tag
def waiting(proposal, banner=None) -> dict:
    """Why a proposal waits, in words (dashboard.wording.waiting): `now`, under the page's
    `banner`, and `brake_on` / `brake_off`, what the banner's refresh shows when the brake
    changes while the page is open."""
    on, off = wording.waiting(proposal, True), wording.waiting(proposal, False)
    return {"now": on if banner and banner.get("brake") else off, "brake_on": on, "brake_off": off}


@register.simple_tag(takes_context=True)
def claim_state(context, proposal):
    """Who is reviewing this proposal, as the signed-in reviewer sees it (pipeline.claims)."""
    request = context.get("request")
    user = getattr(request, "user", None)
    return claims.state_of(proposal, user.get_username() if user else None)


@register.simple_tag(takes_context=True)
def approval_standing(context, proposal):
    """Where the proposal stands under the two-person rule for the signed-in reviewer."""
    config = context.get("pipeline_config") or get_config()
    request = context.get("request")
    user = getattr(request, "user", None)
    # A list's view reads which of its UPDATEs retire their target in one query; a row alone
    # (a decision's reply, the proposal page) reads its own.
    retiring = context.get("retiring")
    if retiring is None:
        retiring = approvals.retiring([proposal], config.destructive_approvals)
    return approvals.standing(
        proposal,
        config.destructive_approvals,
        user.get_username() if user else None,
        retires=proposal.id in retiring,
    )


@register.inclusion_tag("dashboard/safety_badges.html")
def safety_badges(text, detailed=False):
    """Safety lint of any text (no model call): one badge per finding, with the matched span."""
    return {
        "findings": [finding.as_dict() for finding in safety.scan(text or "")],
        "detailed": detailed,
    }


# --- charts: every SVG is drawn by dashboard.charts ------------------------------------------


@register.simple_tag
def meter(value, css="bar", total=1):
    """A small bar filled to value/total (a confidence by default)."""
    return charts.meter(value, css, total)


@register.simple_tag
def legend(colours):
    return charts.legend(colours or {})


@register.simple_tag
def weekly_chart(weeks, series, colours, title):
    return charts.weekly_bars(weeks, series, colours, title)


@register.simple_tag
def reviewer_chart(rows, colours):
    """One bar per reviewer row ({"reviewer", "tally"}), split by the outcomes in `colours`."""
    return charts.horizontal_bars(
        [(row["reviewer"], {key: getattr(row["tally"], key) for key in colours}) for row in rows],
        colours,
        "Decisions per reviewer",
        "no human decisions in this period",
    )


@register.filter
def guidelines(text):
    """A saved queue's guidelines: escaped, with paragraphs, lists, bold and code (markdown.py)."""
    return markdown.render(text)
