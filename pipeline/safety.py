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
    "\u200e": "LRM",
    "\u200f": "RLM",
    "\u061c": "ALM",
    # The tag characters, which carry hidden ASCII past a reader.
    **{chr(code): "TAG" for code in range(0xE0000, 0xE0080)},
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


# --- passwords stated in prose ----------------------------------------------------------------------

# "the staging DB password is hunter2-prod", "pw: kT9#mm2x", "PIN 3390", "passphrase 'a b c'": the
# key word, an optional "for the VPN" or ", by the way," between, a connector, then the value. The
# finding's span is the value alone, so a redaction keeps "the staging DB password is".
_PASSWORD_KEY = re.compile(
    r"\b(?:pass(?:word|phrase|code)s?|passwd|pwd|pw|pin)(?:\s+(?:code|number))?\b", re.I
)
_QUALIFIER = re.compile(r"(?:'s)?\s+(?:for|of|on|at)\s+|\s*,(?=[^,.:;=\n]{1,30},)")
_QUALIFIER_STOP = re.compile(r"[,:;=?!\n'\"]|\.(?!\S)")
QUALIFIER_CHARS = 40
# (connector, strength the value needs): "weak" takes a plain word ("is swordfish"), "strong"
# wants a quoted value or one with a digit or a symbol ("password Winter2025", "to iron-bark").
_CONNECTORS = [
    (re.compile(r"\s*[:=]\s*"), "weak"),
    (re.compile(r"'s\s+"), "weak"),
    (
        re.compile(
            r"\s+(?:(?:is|was|are|were|has\s+been)\s+)?(?:now\s+)?(?:changed|set|reset|updated)\s+to\s+",
            re.I,
        ),
        "strong",
    ),
    (re.compile(r"\s+(?:is|was|are|were)(?:\s+(?:now|still|just))?\s+", re.I), "weak"),
    (re.compile(r"\s+to\s+", re.I), "strong"),
    (re.compile(r"\s+"), "strong"),
]
_QUOTED = re.compile(r"'([^'\n]{3,64})'|\"([^\"\n]{3,64})\"|“([^”\n]{3,64})”|‘([^’\n]{3,64})’")
_TOKEN = re.compile(r"[^\s'\"“”‘’\[\]()<>]{3,64}")
_TOKEN_TAIL = ".,;:!?)"
_SYMBOL = re.compile(r"[!@#$%^&*_+=~.\-/\\|]")
# Words that follow "the password is" without being one: what a sentence about passwords says.
_NOT_A_PASSWORD_WORDS = """a an the in on at to of for from by with and or but not no too very so this that these those
    it its our your their my his her required optional needed mandatory stored saved hashed salted
    encrypted rotated reset changed expired expires missing wrong incorrect correct invalid valid
    empty blank weak strong short long same different unknown secret private hidden shown visible
    case sensitive managed known there here below above attached included enabled disabled set
    unset new old temporary default shared available unavailable usually always never still now
    also just only must should will can could would may might being been be is are was were
    policy manager field hash reset rules screen prompt entry pad reader verification length
    limit change protected protection less free based public"""
_NOT_A_PASSWORD = frozenset(_NOT_A_PASSWORD_WORDS.split())
_PLAIN_WORD_SUFFIXES = ("ed", "ing", "ly", "able", "ible", "tion", "ment")
_PIN_VALUE = re.compile(r"\d{4,8}")


def _password_value(text: str, at: int, strength: str, key: str) -> tuple[int, int] | None:
    """The span of a password's value starting at `at`, or None when what follows is no value."""
    quoted = _QUOTED.match(text, at)
    if quoted:
        group = next(i for i in range(1, 5) if quoted.group(i) is not None)
        start, end = quoted.span(group)
        value = quoted.group(group)
    else:
        token = _TOKEN.match(text, at)
        if not token:
            return None
        value = token.group().rstrip(_TOKEN_TAIL)
        start, end = token.start(), token.start() + len(value)
        if len(value) < 3:
            return None
    if key.lower() == "pin":
        return (start, end) if _PIN_VALUE.fullmatch(value) else None
    if len(value) < 4 or value.startswith("[redacted:"):
        return None
    if quoted or any(c.isdigit() for c in value) or _SYMBOL.search(value.strip(".")):
        return start, end
    if strength == "strong" or not value.isalpha():
        return None
    lower = value.lower()
    if lower in _NOT_A_PASSWORD or lower.endswith(_PLAIN_WORD_SUFFIXES):
        return None
    return start, end


_PASSWORD_LABELS = {"passphrase": "Passphrase", "passcode": "Passcode", "pin": "PIN"}


def _passwords(text: str, found: list[Finding]) -> list[Finding]:
    taken = [(f.start, f.end) for f in found if f.kind in {"secret", "password"}]
    findings: list[Finding] = []
    for key in _PASSWORD_KEY.finditer(text):
        word = key.group().split()[0]
        # "Pin the version": a lowercase or capitalised pin is only a PIN before a number.
        if (
            word.lower() == "pin"
            and word != "PIN"
            and not re.match(r"\s*(?::|is)\s*\d", text[key.end() :])
        ):
            continue
        span = None
        for after in (key.end(), *_qualified(text, key.end())):
            span = _after_connector(text, after, word, qualified=after != key.end())
            if span:
                break
        if span is None or any(s < span[1] and span[0] < e for s, e in taken):
            continue
        taken.append(span)
        label = _PASSWORD_LABELS.get(word.lower().rstrip("s"), "Password")
        findings.append(Finding("password", label, text[span[0] : span[1]], *span))
    return findings


def _qualified(text: str, at: int) -> list[int]:
    """Where the value's connector may start after "for the VPN" or ", by the way,"."""
    qualifier = _QUALIFIER.match(text, at)
    if not qualifier:
        return []
    start = qualifier.end()
    stop = _QUALIFIER_STOP.search(text, start)
    end = min(stop.start() if stop else len(text), start + QUALIFIER_CHARS)
    if text[qualifier.start() : start].strip() == ",":  # an aside: the connector follows its comma
        return [end + 1] if stop and stop.group() == "," else []
    return list(range(start + 1, end + 1))


def _after_connector(
    text: str, at: int, key: str, *, qualified: bool = False
) -> tuple[int, int] | None:
    """The value after a connector at `at`. After a qualifier ("password for user 42") only an
    explicit one counts ("is", ":"): a bare space there is the qualifier's next word."""
    for connector, strength in _CONNECTORS[:-2] if qualified else _CONNECTORS:
        joined = connector.match(text, at)
        if joined and (span := _password_value(text, joined.end(), strength, key)):
            return span
    return None


# --- postal and home addresses ------------------------------------------------------------------

_STREET_WORDS = (
    "Street|St|Road|Rd|Avenue|Ave|Lane|Ln|Drive|Dr|Boulevard|Blvd|Way|Court|Ct|Close|Crescent|"
    "Cres|Place|Pl|Terrace|Parkway|Pkwy|Square|Sq|Walk|Mews|Grove|Gardens|Highway|Hwy|Circle|"
    "Trail|Quay|Alley"
)
_NAME = r"(?:[A-Z][\w'’-]*|\d+(?:st|nd|rd|th))"
_HOUSE = r"\b\d{1,5}[A-Za-z]?(?:[-/]\d{1,4})?"
_UNIT = r"(?:,?\s+(?:Apt\.?|Apartment|Suite|Unit|Flat|#)\s*\w+)?"
# Town, region and postcode after a street: ", Mountain View, CA 94043", " London NW1 6XE".
_POSTCODE = (
    r"(?:[A-Z]{1,2}\d[A-Z\d]?\s\d[A-Z]{2}|[A-Z]\d[A-Z]\s?\d[A-Z]\d|\d{5}(?:-\d{4})?|\d{4}\s?[A-Z]{2}"
    r"|\d{4})"
)
_TOWN = (
    rf"(?:,\s*(?:\d{{4,5}}\s+)?[A-Z][\w'’-]*(?:\s+[A-Z][\w'’-]*){{0,2}}(?:\s+{_POSTCODE}\b)?"
    rf"|,?\s+{_POSTCODE}\b)"
)
_DIRECTION = r"(?:N|S|E|W|NE|NW|SE|SW)"
_ADDRESSES = [
    # "42 Wallaby Way", "1234 NW Glisan St", "88 Queen St W, Toronto, ON M5H 2N2"
    (
        "Street address",
        re.compile(
            rf"{_HOUSE},?\s+(?:{_DIRECTION}\s+)?(?:{_NAME}\s+){{1,3}}(?:{_STREET_WORDS})\b\.?"
            rf"(?:\s+{_DIRECTION}\b)?{_UNIT}{_TOWN}{{0,3}}"
        ),
    ),
    # "12 Rue de Rivoli", "9 Calle Mayor", "8 Avenue Foch"
    (
        "Street address",
        re.compile(
            rf"{_HOUSE},?\s+(?:Rue|Calle|Via|Viale|Avenida|Rua|Avenue|Boulevard|Piazza|Plaza|Carrer)"
            rf"\s+(?:(?:de|del|de la|la|le|du|des|di|da|dos|das)\s+)*{_NAME}{_TOWN}{{0,2}}"
        ),
    ),
    # "Hauptstraße 5, 10115 Berlin", "Kastanienallee 12"
    (
        "Street address",
        re.compile(
            r"\b[A-Z][a-zäöüß]+(?:straße|strasse|str\.|weg|allee|gasse|platz|ring|damm|laan|straat"
            rf"|gracht|plein|gade|vej|gatan|vägen)\s+\d{{1,4}}[a-z]?\b{_TOWN}{{0,2}}"
        ),
    ),
    ("PO box", re.compile(r"\bP\.?\s?O\.?\s+Box\s+\d{1,6}\b" + _TOWN + "{0,2}")),
    # A postcode named as one: "postcode is EH1 2NG", "zip code 90210", "postal code: 3511 LX".
    (
        "Postcode",
        re.compile(
            r"\b(?:post\s?code|postal\s+code|zip(?:\s?code)?)\b[^.\n]{0,40}?(?:\bis\b|:)?\s*"
            rf"(?P<code>{_POSTCODE}|\d{{4,6}})\b",
            re.I,
        ),
    ),
    # "lives at 5 Kettle Yard": someone's home named with a number and words, street word or not.
    (
        "Home address",
        re.compile(
            r"\b(?:lives|living|live|stays|staying|resides|moved)\s+(?:at|on|in|to)\s+"
            rf"(?P<code>{_HOUSE},?\s+[A-Z][\w'’-]+(?:\s+[A-Z][\w'’-]+){{0,3}}{_TOWN}{{0,2}})"
        ),
    ),
]


def _addresses(text: str, found: list[Finding]) -> list[Finding]:
    taken = [(f.start, f.end) for f in found if f.kind in {"secret", "password", "pii"}]
    findings: list[Finding] = []
    for label, pattern in _ADDRESSES:
        for m in pattern.finditer(text):
            start, end = m.span("code") if "code" in pattern.groupindex else m.span()
            if any(s < end and start < e for s, e in taken):
                continue
            taken.append((start, end))
            findings.append(Finding("address", label, text[start:end], start, end))
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
    `redact`: its match is the sensitive text itself, which a reviewer may redact (replace by
    `[redacted:<name>]` in every copy: pipeline.redaction) and a purge's reason may not hold.
    """

    name: str
    words: str
    noun: str
    severity: Severity
    confirm: bool
    bulk: Bulk
    find: Callable[[str, list[Finding]], list[Finding]]
    redact: bool = False


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
            redact=True,
        ),
        Kind(
            name="pii",
            words="personal data",
            noun="personal data",
            severity=Severity.MEDIUM,
            confirm=False,
            bulk=Bulk.OPT_IN,
            find=_personal_data,
            redact=True,
        ),
        Kind(
            name="password",
            words="password",
            noun="a password",
            severity=Severity.HIGH,
            confirm=True,
            bulk=Bulk.NEVER,
            find=_passwords,
            redact=True,
        ),
        Kind(
            name="address",
            words="postal address",
            noun="a postal address",
            severity=Severity.MEDIUM,
            confirm=False,
            bulk=Bulk.OPT_IN,
            find=_addresses,
            redact=True,
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
# The kinds whose matched text a reviewer may redact (and a purge's reason may not hold).
REDACTABLE_KINDS = frozenset(name for name, k in KINDS.items() if k.redact)


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
