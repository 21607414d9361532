"""The lineage's records (`Step`, `Link`) and the plain words and links every story is told with."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime

from django.urls import reverse
from django.utils import timezone

from dashboard import wording

QUOTE_CHARS = 400


@dataclass
class Link:
    """Where a step points: a page of the dashboard or an anchor on this one."""

    label: str
    href: str


@dataclass
class Step:
    """One sentence of the story, with where it happened and who did it."""

    anchor: str
    kind: str  # raw, job, fact, candidates, decision, review, applied, updated, superseded, ...
    label: str  # the badge: a word or two
    text: str
    when: datetime | None = None
    actor: str = ""
    quote: str | None = None
    quote_label: str = ""
    outcome: str = ""  # raw memories: what became of a fact, in words
    fate: str = ""  # raw memories: applied / pending / rejected / suppressed / ...
    links: list[Link] = field(default_factory=list)
    tone: str = ""  # ok / warn / bad / muted: the dot's colour

    def __post_init__(self) -> None:
        """Capitalise the badge's first letter."""
        self.label = self.label[:1].upper() + self.label[1:]  # badges read as words: "Updated"


# --- words ----------------------------------------------------------------------------------------


def when_text(value: datetime | None) -> str:
    """'29 Nov 2026 at 14:03 UTC'."""
    if value is None:
        return "an unknown time"
    local = timezone.localtime(value)
    return f"{local.day} {local:%b %Y} at {local:%H:%M} {local.tzname() or ''}".strip()


def plural(n: int, word: str) -> str:
    """'no facts', '1 fact', '3 facts' (the plural is the word with an s)."""
    if n == 0:
        return f"no {word}s"
    return f"{n} {word}" if n == 1 else f"{n} {word}s"


def later_text(start: datetime | None, end: datetime | None) -> str:
    """'3 minutes later' (or 'at once' when it happened in the same second)."""
    if start is None or end is None:
        return ""
    seconds = (end - start).total_seconds()
    if seconds < 1:
        return "within a second"
    if seconds < 60:
        return plural(int(seconds), "second") + " later"
    if seconds < 3600:
        return plural(int(seconds // 60), "minute") + " later"
    if seconds < 2 * 86400:
        return plural(int(seconds // 3600), "hour") + " later"
    return plural(int(seconds // 86400), "day") + " later"


def pct(value) -> str:
    """A 0..1 confidence as a whole percentage ('87%'), or '?' when it is not a number."""
    try:
        return f"{float(value) * 100:.0f}%"
    except (TypeError, ValueError):
        return "?"


def clip(text: str | None, limit: int = QUOTE_CHARS) -> str | None:
    """The text cut to `limit` characters with an ellipsis (None stays None)."""
    if text is None:
        return None
    return text if len(text) <= limit else text[: limit - 1] + "…"


def prompt_version(proposal) -> str:
    """The version stored with the proposal; proposals made before it was stored show "v1"."""
    return proposal.prompt_version or "v1"


# --- links ----------------------------------------------------------------------------------------


def memory_link(memory_id: str, label: str | None = None) -> Link:
    """A link to a memory's page, labelled 'memory <short id>' unless a label is given."""
    return Link(
        label or f"memory {wording.short_id(memory_id)}",
        reverse("dashboard:memory", args=[memory_id]),
    )


def proposal_link(proposal) -> Link:
    """A link to the proposal's page, labelled 'proposal <short id>'."""
    return Link(
        f"proposal {wording.short_id(proposal.id)}",
        reverse("dashboard:proposal", args=[proposal.id]),
    )


def job_link(job_id: str, suffix: str = "") -> Link:
    """A link to the job's page (plus an optional '#fragment' suffix), labelled 'job <short id>'."""
    return Link(f"job {wording.short_id(job_id)}", reverse("dashboard:job", args=[job_id]) + suffix)


def audit_link(event) -> Link:
    """A link to the audit row of a history event on the same page."""
    return Link("audit row", f"#h-{event.id}")
