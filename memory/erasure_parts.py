"""The telling parts of a purged text: a key-like word (a key, a code, an id: itself the secret)
or RUN_OF_WORDS of its words in a row. `quoted_part` finds one in free text (a purge refuses a
reason that repeats one), `scrub_parts` replaces each in the purged memory's own free text that
is kept (its audits' reasons and changers, its tombstone's who and type). No database here."""

from __future__ import annotations

import re

from memory.erasure import PURGED, Texts

_WORD = re.compile(r"[\w-]+")
RUN_OF_WORDS = 6  # this many words of a purged text in a row, in a reason, repeat it
KEY_CHARS = 8  # a word this long holding a digit is a key, a code or an id: itself the secret
# ...but for the shapes of a date, a version and a name with a small number ("2026-12-07",
# "1.2.3", "eu-west-1", "billing-api-v2"), which a reason names to say what it is about.
_NAMED = re.compile(
    r"^(?:\d{4}-\d{2}-\d{2}(?:t[\d:.]+z?)?|v?\d+(?:\.\d+)+|[a-z]+(?:[-_][a-z]+)*[-_]v?\d{1,3})$"
)


def _key_like(word: str) -> bool:
    return len(word) >= KEY_CHARS and any(c.isdigit() for c in word) and not _NAMED.match(word)


def quoted_part(reason: str, texts: Texts) -> str | None:
    """The telling part of a purged text the reason repeats, if any: a key-like word, or
    RUN_OF_WORDS words in a row (lowercase, as the texts' words are compared)."""
    return next(iter(_parts_in(reason, texts)), None)


def scrub_parts(value: str | None, texts: Texts) -> str | None:
    """`value` with each telling part of the texts it repeats replaced by the marker (whole
    words, any case); None and text without one unchanged."""
    if not value:
        return value
    for part in sorted(_parts_in(value, texts), key=len, reverse=True):
        words = r"[^\w-]+".join(re.escape(word) for word in part.split(" "))
        value = re.sub(rf"(?<![\w-]){words}(?![\w-])", PURGED, value, flags=re.IGNORECASE)
    return value


def _parts_in(value: str, texts: Texts) -> list[str]:
    heard_in_order = _WORD.findall(value.lower())
    heard, said = set(heard_in_order), f" {' '.join(heard_in_order)} "
    found: dict[str, None] = {}
    for needle in texts.needles:
        words = _WORD.findall(needle.lower())
        for word in words:
            if word in heard and _key_like(word):
                found[word] = None
        for i in range(len(words) - RUN_OF_WORDS + 1):
            run = " ".join(words[i : i + RUN_OF_WORDS])
            if f" {run} " in said:  # whole words: "on" is not the end of "python"
                found[run] = None
    return list(found)
