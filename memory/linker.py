"""Inline entity linker, pure part: candidate proper nouns from text (no I/O, no model)."""

from __future__ import annotations

import re
import unicodedata

from memory.content import visible_text
from memory.words import NEGATIONS, STOP_WORDS

# Words that start sentences or headings often enough to look like names, beyond the shared
# stop words and negations.
_NOT_NAMES = frozenset(
    [
        "always",
        "like",
        "use",
        "used",
        "uses",
        "using",
        "please",
        "yes",
        "ok",
        "okay",
        "today",
        "tomorrow",
        "yesterday",
        "monday",
        "tuesday",
        "wednesday",
        "thursday",
        "friday",
        "saturday",
        "sunday",
        "note",
        "notes",
        "key",
        "facts",
        "preferences",
        "events",
        "relationships",
    ]
)
SKIP_WORDS = STOP_WORDS | NEGATIONS | _NOT_NAMES
# A sentence ends at . ! ? followed by a space or the end, or at a line break: the dot inside
# "Node.js" or "v2.1" is part of a name.
_SENTENCES = re.compile(r"[.!?]+(?=\s|$)|\n+")
_APOSTROPHES = "'\u2019\u02bc"  # straight, curly (’) and the modifier letter (ʼ)
_STRIP_TRAILING = ',;:"()[]{}\u201c\u201d\u2018' + _APOSTROPHES
_STRIP_LEADING = '"([]{}\u201c\u201d\u2018' + _APOSTROPHES
# "Priya's team", "Priya’s team": the name is the word without its possessive ending. A plain
# trailing apostrophe ("James' laptop") is stripped like a closing quote.
_POSSESSIVE = re.compile(f"[{_APOSTROPHES}]s$")
_ENDS_NAME = re.compile(f"(?:[,;:]|s[{_APOSTROPHES}]s?)$")


def canonical_name(name: str) -> str:
    return unicodedata.normalize("NFC", " ".join(name.split())).lower()


# What an erasure writes where a name was (memory.redaction.marker, memory.erasure.PURGED), with
# the number memory.graph.rename_entity gives a second entity so named.
_ERASURE_MARKER = re.compile(r"\[(?:redacted:[^\]\s]*|purged)\](?: \(\d+\))?")


def is_erasure_marker(name: str) -> bool:
    """The name is only what a redaction or a purge wrote in place of one (`[redacted:pii]`,
    `[purged]`, `[redacted:pii] (2)`): a placeholder that stands for different people, so no
    entity is linked by it."""
    return _ERASURE_MARKER.fullmatch(canonical_name(name)) is not None


def _capitalised(word: str) -> bool:
    # Any script's capitals count ("Émile", "Łukasz"); the second letter shows it is not an acronym.
    # "O'Brien" and "D’Angelo" are capitalised after their apostrophe.
    if len(word) >= 4 and word[0].isupper() and word[1] in _APOSTROPHES:
        word = word[2:]
    return len(word) >= 2 and word[0].isupper() and word[1].islower()


def _acronym(word: str) -> bool:
    return 2 <= len(word) <= 6 and word.isalpha() and word.isupper()


def _qualifies(word: str) -> bool:
    if not word or word.lower() in SKIP_WORDS:
        return False
    return _capitalised(word) or _acronym(word)


def candidate_names(text: str) -> list[str]:
    """Capitalised or short all-caps words, consecutive ones joined, de-duplicated, >= 3 chars."""
    names: list[str] = []
    for sentence in _SENTENCES.split(visible_text(text)):
        run: list[str] = []
        for raw in sentence.split() + [""]:
            word = raw.rstrip(_STRIP_TRAILING).lstrip(_STRIP_LEADING)
            possessive = _POSSESSIVE.search(word)
            if possessive:
                word = word[: possessive.start()]
            if _qualifies(word):
                run.append(word)
                # A trailing comma ends a name ("Alice, Bob"), and so does a possessive
                # ("Marco Rossi's Kafka cluster"): flush after adding the word.
                if possessive or _ENDS_NAME.search(raw.rstrip('.!?")]}\u201d')):
                    names.append(" ".join(run))
                    run = []
                continue
            if run:
                names.append(" ".join(run))
                run = []
    # A longer name also offers its single words: "Alice Johnson" links an entity named "Alice".
    names += [word for name in list(names) if " " in name for word in name.split()]
    seen: dict[str, str] = {}
    for name in names:
        key = canonical_name(name)
        if len(key) >= 3 and key not in seen:
            seen[key] = name
    return list(seen.values())
