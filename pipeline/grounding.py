"""Grounding: the span(s) of the raw memory that support a fact, found by word overlap (no model)."""

from __future__ import annotations

import re

from memory.words import STOP_WORDS

_SENTENCE = re.compile(r"[^.!?\n]+[.!?]*")
_WORD = re.compile(r"\w+")
SUPPORTED_AT = 0.5


def _words(text: str) -> set[str]:
    return {w for w in _WORD.findall(text.lower()) if w not in STOP_WORDS and len(w) > 1}


def spans(raw: str, fact: str, *, limit: int = 2) -> list[dict]:
    """Best-supporting sentences of raw for fact: [{start, end, text, score}], strongest first.

    score = share of the fact's content words found in the sentence; an exact occurrence of the
    fact scores 1.0 and spans exactly the fact.
    """
    raw, fact = raw or "", (fact or "").strip()
    if not raw or not fact:
        return []
    exact = raw.lower().find(fact.lower().rstrip(".!?"))
    if exact >= 0:
        end = exact + len(fact.rstrip(".!?"))
        return [{"start": exact, "end": end, "text": raw[exact:end], "score": 1.0}]
    wanted = _words(fact)
    if not wanted:
        return []
    scored = []
    for m in _SENTENCE.finditer(raw):
        text = m.group().strip()
        if not text:
            continue
        start = m.start() + (len(m.group()) - len(m.group().lstrip()))
        score = len(wanted & _words(text)) / len(wanted)
        if score > 0:
            scored.append(
                {"start": start, "end": start + len(text), "text": text, "score": round(score, 3)}
            )
    scored.sort(key=lambda s: (-s["score"], s["start"]))
    return scored[:limit]


def is_supported(found: list[dict]) -> bool:
    return bool(found) and found[0]["score"] >= SUPPORTED_AT
