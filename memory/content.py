"""Content normalisation (DESIGN §5): storage content, normalized content and the content hash."""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass

_WHITESPACE = re.compile(r"\s+")
_TRAILING_PUNCTUATION = re.compile(r"[.,!?;:]+$")


@dataclass(frozen=True)
class NormalizedContent:
    storage: str
    normalized: str
    hash: str


def normalize(text: str) -> NormalizedContent:
    """storage = trim + collapse whitespace; normalized = lowercase minus trailing .,!?;: run."""
    storage = _WHITESPACE.sub(" ", text).strip()
    normalized = _TRAILING_PUNCTUATION.sub("", storage.lower()).strip()
    basis = normalized or storage.lower()
    return NormalizedContent(
        storage=storage,
        normalized=basis,
        hash=hashlib.sha256(basis.encode("utf-8")).hexdigest(),
    )


def is_effectively_empty(text: str) -> bool:
    """True when nothing but whitespace and trailing punctuation remains after normalisation."""
    storage = _WHITESPACE.sub(" ", text).strip()
    return not _TRAILING_PUNCTUATION.sub("", storage.lower()).strip()
