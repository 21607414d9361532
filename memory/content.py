"""Content normalisation (DESIGN §5): storage content, normalized content and the content hash.

Storage content is the caller's text with whitespace collapsed, hidden characters included (the
safety lint must still see them). Normalized content and the hash are of the *visible* text: NFC,
without zero-width, byte-order-mark, soft-hyphen, bidi-control or tag characters, controls,
variation selectors and blank fillers, so the same visible words dedupe to one memory however
they were encoded.
"""

from __future__ import annotations

import hashlib
import re
import unicodedata
from dataclasses import dataclass

_WHITESPACE = re.compile(r"\s+")
_TRAILING_PUNCTUATION = re.compile(r"[.,!?;:]+$")
# Characters that render as nothing: soft hyphen, Mongolian vowel separator, zero-width space /
# joiners, LRM/RLM, bidi embeddings and isolates, word joiner and invisible operators, BOM, and
# the Unicode tag block (used to smuggle hidden ASCII).
_INVISIBLE = re.compile(
    "[\u00ad\u180e\u200b-\u200f\u202a-\u202e\u2060-\u2064\u2066-\u2069\ufeff\U000e0000-\U000e007f]"
)


@dataclass(frozen=True)
class NormalizedContent:
    storage: str
    normalized: str
    hash: str


# More characters that show nothing, which no text is made of alone: controls, the combining
# grapheme joiner, the Arabic letter mark, Hangul fillers, Khmer inherent vowels, the blank braille
# pattern and variation selectors. The comparable text drops them too, so a text padded with them
# dedupes into the same memory (migration 0015 rehashed the stored texts that held them; an emoji
# with or without its U+FE0F is one text).
_BLANK = re.compile(
    "[\x00-\x08\x0e-\x1f\x7f-\x9f\u034f\u061c\u115f\u1160\u17b4\u17b5\u2800\u3164"
    "\ufe00-\ufe0f\uffa0\U000e0100-\U000e01ef]"
)


def visible_text(text: str) -> str:
    """The text a reader sees: hidden characters removed, then composed to NFC."""
    return unicodedata.normalize("NFC", _INVISIBLE.sub("", text))


def _comparable(text: str) -> str:
    return _WHITESPACE.sub(" ", _BLANK.sub("", visible_text(text))).strip().lower()


def normalize(text: str) -> NormalizedContent:
    """storage = trim + collapse whitespace; normalized = visible text, lowercase, minus a trailing
    .,!?;: run (or the whole visible text when only punctuation is left); hash = its SHA-256."""
    storage = _WHITESPACE.sub(" ", text).strip()
    basis = _basis(_comparable(storage))
    return NormalizedContent(storage=storage, normalized=basis, hash=_digest(basis))


def _basis(comparable: str) -> str:
    """The comparable text minus a trailing .,!?;: run (or whole, when only that is left)."""
    return _TRAILING_PUNCTUATION.sub("", comparable).strip() or comparable


def _digest(basis: str) -> str:
    return hashlib.sha256(basis.encode("utf-8")).hexdigest()


def hashes_ever(text: str) -> set[str]:
    """Every hash a normalisation of this project ever gave the text: today's, the one before
    migration 0015 (blank characters kept) and the one before 0008 (no visible-text step). A
    vector stored under an old hash of an old version stays keyed by it (0008 and 0015 rekey
    only the current texts' vectors), and an erasure must find it (a review: a purge after 0015
    left an edited-out version's vector)."""
    storage = _WHITESPACE.sub(" ", text).strip()
    before_0015 = _WHITESPACE.sub(" ", visible_text(storage)).strip().lower()
    before_0008 = storage.lower()
    return {normalize(text).hash} | {_digest(_basis(c)) for c in (before_0015, before_0008)}


def is_effectively_empty(text: str) -> bool:
    """True when no visible character but trailing punctuation remains after normalisation, or
    only blank characters and combining marks with nothing to combine with (a QA pass wrote
    memories of U+0001, U+3164 and a lone accent)."""
    left = _TRAILING_PUNCTUATION.sub("", _comparable(text)).strip()
    return not left or all(unicodedata.category(char)[0] in "MZ" for char in left)
