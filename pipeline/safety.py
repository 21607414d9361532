"""Safety lint without a model: secrets, personal data, hidden characters and prompt injection.
Each finding carries the matched span so the reviewer sees exactly what triggered it."""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass

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
    kind: str  # secret | pii | hidden | injection
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


def scan(text: str) -> list[Finding]:
    """Every finding in text, in order of position; never raises."""
    text = text or ""
    findings: list[Finding] = []
    secret_spans: list[tuple[int, int]] = []
    for label, pattern in SECRET_PATTERNS:
        for m in pattern.finditer(text):
            if any(s <= m.start() < e for s, e in secret_spans):
                continue
            secret_spans.append((m.start(), m.end()))
            findings.append(Finding("secret", label, m.group(), m.start(), m.end()))
    for m in EMAIL.finditer(text):
        if not any(s <= m.start() < e for s, e in secret_spans):
            findings.append(Finding("pii", "Email address", m.group(), m.start(), m.end()))
    for m in CARD.finditer(text):
        digits = re.sub(r"\D", "", m.group())
        if 13 <= len(digits) <= 19 and _luhn(digits):
            findings.append(Finding("pii", "Card-like number", m.group(), m.start(), m.end()))
    card_spans = [(f.start, f.end) for f in findings if f.label == "Card-like number"]
    for m in PHONE.finditer(text):
        digits = re.sub(r"\D", "", m.group())
        overlaps = any(s <= m.start() < e for s, e in card_spans + secret_spans)
        # A bare run of digits is an id, not a phone number: require "+" or separators.
        formatted = m.group().startswith("+") or any(c in m.group() for c in " ()-.")
        date_like = re.fullmatch(r"\d{4}-\d{2}-\d{2}", m.group())
        if 9 <= len(digits) <= 15 and formatted and not overlaps and not date_like:
            findings.append(Finding("pii", "Phone number", m.group(), m.start(), m.end()))
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
    for label, pattern in INJECTION_PATTERNS:
        for m in pattern.finditer(text):
            findings.append(Finding("injection", label, m.group(), m.start(), m.end()))
    return sorted(findings, key=lambda f: (f.start, f.kind))


# Secrets and injection phrasing are never written without a human look; personal data and hidden
# characters are shown to the reviewer but do not hold a write back.
HIGH_SEVERITY_KINDS = frozenset({"secret", "injection"})


def severity(kind: str) -> str:
    """The severity of a finding kind: "high" holds a write for review, "medium" is shown only."""
    return "high" if kind in HIGH_SEVERITY_KINDS else "medium"


def has_secret(findings: list[dict]) -> bool:
    return any(f.get("kind") == "secret" for f in findings or [])


def needs_review(findings: list[dict]) -> bool:
    """Whether any finding is of high severity: such a fact is never written without review."""
    return any(severity(f.get("kind", "")) == "high" for f in findings or [])
