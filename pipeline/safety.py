"""Safety lint without a model: secrets, personal data, hidden characters and prompt injection.
Each finding carries the matched span so the reviewer sees exactly what triggered it, and KINDS is
the one table of what each kind of finding means for a write and for a reviewer."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass
from enum import StrEnum

# Zero-width and bidi control characters hide text from a reader: show them as visible codes.
HIDDEN_CHARS = {
    "\u200b": "ZWSP",
    "\u200c": "ZWNJ",
    "\u200d": "ZWJ",
    "\u2060": "WJ",
    "\ufeff": "BOM",
    "\u202a": "LRE",
    "\u202b": "RLE",
    "\u202c": "PDF",
    "\u202d": "LRO",
    "\u202e": "RLO",
    "\u2066": "LRI",
    "\u2067": "RLI",
    "\u2068": "FSI",
    "\u2069": "PDI",
    "\u00ad": "SHY",
}


@dataclass(frozen=True)
class Finding:
    kind: str  # a key of KINDS
    label: str
    match: str
    start: int
    end: int

    def as_dict(self) -> dict:
        return asdict(self)


SECRET_PATTERNS = [
    ("AWS access key", re.compile(r"\b(?:AKIA|ASIA)[0-9A-Z]{16}\b")),
    ("GitHub token", re.compile(r"\bgh[pousr]_[A-Za-z0-9]{30,}\b")),
    ("Slack token", re.compile(r"\bxox[abprs]-[A-Za-z0-9-]{10,}")),
    ("API key", re.compile(r"\bsk-(?:proj-)?[A-Za-z0-9_-]{20,}")),
    ("JSON web token", re.compile(r"\beyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}")),
    (
        "Private key",
        re.compile(r"-----BEGIN (?:RSA |EC |DSA |OPENSSH |PGP )?PRIVATE KEY(?: BLOCK)?-----"),
    ),
    ("Password in URL", re.compile(r"\b[a-z][a-z0-9+.-]*://[^\s/:@]+:[^\s/@]{3,}@[^\s/]+", re.I)),
    (
        "Credential assignment",
        re.compile(
            r"\b(?:api[_-]?key|secret|token|passw(?:or)?d|pwd)\b\s*[:=]\s*['\"]?[^\s'\"]{8,}", re.I
        ),
    ),
]
EMAIL = re.compile(r"\b[A-Za-z0-9._%+-]+@[A-Za-z0-9.-]+\.[A-Za-z]{2,}\b")
PHONE = re.compile(r"(?<![\w/])\+?\d[\d ()./-]{7,}\d(?![\w/])")
CARD = re.compile(r"\b(?:\d[ -]?){12,18}\d\b")
INJECTION_PATTERNS = [
    (
        "Instruction override",
        re.compile(
            r"\b(?:ignore|disregard|forget)\s+(?:all\s+|any\s+|the\s+)?(?:previous|prior|above|earlier)\s+(?:instructions|prompts?|rules|messages)",
            re.I,
        ),
    ),
    (
        "Role play",
        re.compile(r"\byou are now\b|\bact as (?:the )?(?:system|admin|developer)\b", re.I),
    ),
    (
        "Prompt probing",
        re.compile(r"\b(?:reveal|print|show)\s+(?:your|the)\s+system\s+prompt\b", re.I),
    ),
    (
        "Role tag",
        re.compile(
            r"<\|?(?:system|assistant|user|im_start|im_end)\|?>|</?(?:system|instructions)>|\[/?INST\]",
            re.I,
        ),
    ),
]
_HIDDEN = re.compile("[" + "".join(HIDDEN_CHARS) + "]")


def _luhn(digits: str) -> bool:
    total, double = 0, False
    for char in reversed(digits):
        value = int(char)
        if double:
            value = value * 2 - 9 if value > 4 else value * 2
        total += value
        double = not double
    return total % 10 == 0


def _overlaps(start: int, spans: list[tuple[int, int]]) -> bool:
    return any(s <= start < e for s, e in spans)


def _secrets(text: str, found: list[Finding]) -> list[Finding]:
    findings: list[Finding] = []
    spans: list[tuple[int, int]] = []
    for label, pattern in SECRET_PATTERNS:
        for m in pattern.finditer(text):
            if _overlaps(m.start(), spans):
                continue
            spans.append((m.start(), m.end()))
            findings.append(Finding("secret", label, m.group(), m.start(), m.end()))
    return findings


def _personal_data(text: str, found: list[Finding]) -> list[Finding]:
    # A secret's span is not personal data too (a password in a URL holds an "email").
    secret_spans = [(f.start, f.end) for f in found if f.kind == "secret"]
    findings: list[Finding] = []
    for m in EMAIL.finditer(text):
        if not _overlaps(m.start(), secret_spans):
            findings.append(Finding("pii", "Email address", m.group(), m.start(), m.end()))
    for m in CARD.finditer(text):
        digits = re.sub(r"\D", "", m.group())
        if 13 <= len(digits) <= 19 and _luhn(digits):
            findings.append(Finding("pii", "Card-like number", m.group(), m.start(), m.end()))
    card_spans = [(f.start, f.end) for f in findings if f.label == "Card-like number"]
    for m in PHONE.finditer(text):
        digits = re.sub(r"\D", "", m.group())
        overlaps = _overlaps(m.start(), card_spans + secret_spans)
        # A bare run of digits is an id, not a phone number: require "+" or separators.
        formatted = m.group().startswith("+") or any(c in m.group() for c in " ()-.")
        date_like = re.fullmatch(r"\d{4}-\d{2}-\d{2}", m.group())
        if 9 <= len(digits) <= 15 and formatted and not overlaps and not date_like:
            findings.append(Finding("pii", "Phone number", m.group(), m.start(), m.end()))
    return findings


def _hidden(text: str, found: list[Finding]) -> list[Finding]:
    findings = []
    for m in _HIDDEN.finditer(text):
        name = HIDDEN_CHARS[m.group()]
        kind_label = (
            "Bidi control"
            if name in {"LRE", "RLE", "PDF", "LRO", "RLO", "LRI", "RLI", "FSI", "PDI"}
            else "Zero-width character"
        )
        findings.append(
            Finding(
                "hidden", f"{kind_label} ({name})", f"U+{ord(m.group()):04X}", m.start(), m.end()
            )
        )
    return findings


def _injection(text: str, found: list[Finding]) -> list[Finding]:
    return [
        Finding("injection", label, m.group(), m.start(), m.end())
        for label, pattern in INJECTION_PATTERNS
        for m in pattern.finditer(text)
    ]


# --- the table of kinds ---------------------------------------------------------------------------


class Severity(StrEnum):
    HIGH = "high"  # never written without a human look: the job holds it for review
    MEDIUM = "medium"  # shown to the reviewer, holds nothing back


class Bulk(StrEnum):
    ALLOWED = "allowed"  # a bulk approval takes it like any other proposal
    OPT_IN = "opt_in"  # only when the reviewer ticks "include <words>"
    NEVER = "never"  # left for a one-by-one approval


@dataclass(frozen=True)
class Kind:
    """One kind of finding: how people read it, what it holds back and what approving it asks.

    `words` name it in the filter form, the badges and the bulk counts ("personal data"); `noun`
    reads in a sentence ("a secret"). `find(text, found so far)` returns its findings (the kinds
    run in table order, so a later kind can skip an earlier one's spans). `confirm`: approving
    one in the dashboard asks "approve it anyway?" first (pipeline.review.decide refuses it with
    `confirm_secret` until it is confirmed). The JSON API's approve is not asked again: a token
    with the review scope naming one proposal is itself the explicit act, and that is the API's
    behaviour since it was built (tests/test_badges.py proves both). `bulk`: see Bulk.
    """

    name: str
    words: str
    noun: str
    severity: Severity
    confirm: bool
    bulk: Bulk
    find: Callable[[str, list[Finding]], list[Finding]]


# Adding a kind is one row here (and its finder above): the review rules (pipeline/review.py),
# the queue's filter form and the template tags all read this table. `confirm` is the dashboard's
# question only; the JSON API approves a confirm kind as asked (see Kind).
KINDS: dict[str, Kind] = {
    kind.name: kind
    for kind in (
        Kind(
            name="secret",
            words="secret",
            noun="a secret",
            severity=Severity.HIGH,
            confirm=True,
            bulk=Bulk.NEVER,
            find=_secrets,
        ),
        Kind(
            name="pii",
            words="personal data",
            noun="personal data",
            severity=Severity.MEDIUM,
            confirm=False,
            bulk=Bulk.OPT_IN,
            find=_personal_data,
        ),
        Kind(
            name="hidden",
            words="hidden characters",
            noun="hidden characters",
            severity=Severity.MEDIUM,
            confirm=False,
            bulk=Bulk.ALLOWED,
            find=_hidden,
        ),
        Kind(
            name="injection",
            words="prompt injection",
            noun="a prompt injection",
            severity=Severity.HIGH,
            confirm=False,
            bulk=Bulk.ALLOWED,
            find=_injection,
        ),
    )
}
# Secrets and injection phrasing are never written without a human look; personal data and hidden
# characters are shown to the reviewer but do not hold a write back.
HIGH_SEVERITY_KINDS = frozenset(name for name, k in KINDS.items() if k.severity == Severity.HIGH)


def scan(text: str) -> list[Finding]:
    """Every finding in text, in order of position; never raises."""
    text = text or ""
    findings: list[Finding] = []
    for kind in KINDS.values():
        findings += kind.find(text, findings)
    return sorted(findings, key=lambda f: (f.start, f.kind))


def severity(kind: str) -> str:
    """The severity of a finding kind: "high" holds a write for review, "medium" is shown only."""
    found = KINDS.get(kind)
    return found.severity if found else Severity.MEDIUM


def kinds_of(joined: str | Iterable[str] | None) -> list[Kind]:
    """The table rows of a proposal's `safety_kinds` ("secret,pii") or of kind names, in table
    order; names the table does not know are left out."""
    names = set(joined.split(",") if isinstance(joined, str) else joined or ())
    return [kind for name, kind in KINDS.items() if name in names]


def to_confirm(joined: str | Iterable[str] | None) -> Kind | None:
    """The first kind among these that needs the dashboard's explicit confirmation, if any."""
    return next((kind for kind in kinds_of(joined) if kind.confirm), None)


def bulk_rule(joined: str | Iterable[str] | None) -> tuple[Bulk, Kind | None]:
    """The strictest bulk rule among these kinds (never > opt-in > allowed) and the kind it is."""
    kinds = kinds_of(joined)
    for rule in (Bulk.NEVER, Bulk.OPT_IN):
        for kind in kinds:
            if kind.bulk == rule:
                return rule, kind
    return Bulk.ALLOWED, None


def words_of(rule: Bulk) -> str:
    """The nouns of the kinds a bulk rule holds, for a sentence: "a secret" (joined with "or")."""
    return " or ".join(kind.noun for kind in KINDS.values() if kind.bulk == rule)


def needs_review(findings: list[dict]) -> bool:
    """Whether any finding is of high severity: such a fact is never written without review."""
    return any(severity(f.get("kind", "")) == Severity.HIGH for f in findings or [])
