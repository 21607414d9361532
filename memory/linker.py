"""Inline entity linker, pure part: candidate proper nouns from text (no I/O, no model)."""

from __future__ import annotations

import re

SKIP_WORDS = frozenset(
    [
        "a",
        "about",
        "above",
        "after",
        "again",
        "against",
        "all",
        "also",
        "always",
        "am",
        "an",
        "and",
        "any",
        "are",
        "as",
        "at",
        "be",
        "because",
        "been",
        "before",
        "being",
        "below",
        "between",
        "both",
        "but",
        "by",
        "can",
        "could",
        "did",
        "do",
        "does",
        "doing",
        "done",
        "down",
        "during",
        "each",
        "either",
        "even",
        "ever",
        "every",
        "few",
        "for",
        "from",
        "further",
        "had",
        "has",
        "have",
        "having",
        "he",
        "her",
        "here",
        "hers",
        "him",
        "his",
        "how",
        "however",
        "i",
        "if",
        "in",
        "into",
        "is",
        "it",
        "its",
        "just",
        "least",
        "less",
        "let",
        "like",
        "many",
        "may",
        "me",
        "might",
        "more",
        "most",
        "much",
        "must",
        "my",
        "neither",
        "never",
        "no",
        "nor",
        "not",
        "now",
        "of",
        "off",
        "often",
        "on",
        "once",
        "only",
        "or",
        "other",
        "our",
        "ours",
        "out",
        "over",
        "own",
        "perhaps",
        "please",
        "rather",
        "same",
        "shall",
        "she",
        "should",
        "since",
        "so",
        "some",
        "still",
        "such",
        "than",
        "that",
        "the",
        "their",
        "theirs",
        "them",
        "then",
        "there",
        "these",
        "they",
        "this",
        "those",
        "though",
        "through",
        "thus",
        "to",
        "today",
        "tomorrow",
        "too",
        "under",
        "until",
        "up",
        "upon",
        "us",
        "use",
        "used",
        "uses",
        "using",
        "very",
        "was",
        "we",
        "were",
        "what",
        "whatever",
        "when",
        "where",
        "whether",
        "which",
        "while",
        "who",
        "whom",
        "whose",
        "why",
        "will",
        "with",
        "within",
        "without",
        "would",
        "yes",
        "yesterday",
        "yet",
        "you",
        "your",
        "yours",
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
        "ok",
        "okay",
    ]
)
_SENTENCES = re.compile(r"[.!?\n]+")
_STRIP_TRAILING = ",;:'\"()[]{}"
_STRIP_LEADING = "'\"([]{}"
_CAPITALISED = re.compile(r"^[A-Z][a-z]")
_ACRONYM = re.compile(r"^[A-Z]{2,6}$")


def canonical_name(name: str) -> str:
    return " ".join(name.split()).lower()


def _qualifies(word: str) -> bool:
    if not word or word.lower() in SKIP_WORDS:
        return False
    return bool(_CAPITALISED.match(word) or _ACRONYM.match(word))


def candidate_names(text: str) -> list[str]:
    """Capitalised or short all-caps words, consecutive ones joined, de-duplicated, >= 3 chars."""
    names: list[str] = []
    for sentence in _SENTENCES.split(text):
        run: list[str] = []
        for raw in sentence.split() + [""]:
            word = raw.rstrip(_STRIP_TRAILING).lstrip(_STRIP_LEADING)
            if _qualifies(word):
                run.append(word)
                # A trailing comma ends a name ("Alice, Bob"): flush after adding the word.
                if raw.endswith((",", ";", ":")):
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
