"""Syntactic contradiction detector: negation on one side or a conflicting antonym pair, given real lexical overlap."""

from __future__ import annotations

import re
from dataclasses import dataclass

MIN_OVERLAP = 2

# Contractions are stored without the apostrophe, which is what tokenize() turns "don't" into.
NEGATIONS = frozenset(
    [
        "not",
        "no",
        "never",
        "cannot",
        "without",
        "nor",
        "neither",
        "nobody",
        "nothing",
        "nowhere",
        "cant",
        "dont",
        "doesnt",
        "didnt",
        "isnt",
        "arent",
        "wasnt",
        "werent",
        "wont",
        "wouldnt",
        "shouldnt",
        "couldnt",
        "mustnt",
        "neednt",
        "havent",
        "hasnt",
        "hadnt",
        "aint",
        "shant",
    ]
)

# Kept disjoint from NEGATIONS on purpose: negations are looked for separately and excluded
# from the overlap on their own.
STOP_WORDS = frozenset(
    [
        "a",
        "about",
        "above",
        "after",
        "again",
        "against",
        "all",
        "also",
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
        "else",
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
        "herself",
        "him",
        "himself",
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
        "itself",
        "just",
        "let",
        "me",
        "might",
        "more",
        "most",
        "much",
        "must",
        "my",
        "myself",
        "now",
        "of",
        "off",
        "often",
        "on",
        "once",
        "only",
        "or",
        "other",
        "ought",
        "our",
        "ours",
        "ourselves",
        "out",
        "over",
        "own",
        "same",
        "shall",
        "she",
        "should",
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
        "themselves",
        "then",
        "there",
        "these",
        "they",
        "this",
        "those",
        "though",
        "through",
        "to",
        "too",
        "under",
        "until",
        "up",
        "upon",
        "us",
        "very",
        "was",
        "we",
        "were",
        "what",
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
        "would",
        "yet",
        "you",
        "your",
        "yours",
        "yourself",
        "yourselves",
    ]
)

ANTONYM_PAIRS: tuple[tuple[str, str], ...] = (
    ("enabled", "disabled"),
    ("enable", "disable"),
    ("allow", "deny"),
    ("allowed", "denied"),
    ("accept", "reject"),
    ("accepted", "rejected"),
    ("always", "never"),
    ("on", "off"),
    ("true", "false"),
    ("yes", "no"),
    ("love", "hate"),
    ("loves", "hates"),
    ("like", "dislike"),
    ("likes", "dislikes"),
    ("prefer", "avoid"),
    ("prefers", "avoids"),
    ("start", "stop"),
    ("started", "stopped"),
    ("begin", "end"),
    ("open", "closed"),
    ("open", "close"),
    ("include", "exclude"),
    ("included", "excluded"),
    ("increase", "decrease"),
    ("add", "remove"),
    ("added", "removed"),
    ("before", "after"),
    ("active", "inactive"),
    ("positive", "negative"),
    ("required", "optional"),
    ("public", "private"),
    ("sync", "async"),
    ("synchronous", "asynchronous"),
    ("success", "failure"),
    ("succeeded", "failed"),
    ("up", "down"),
    ("light", "dark"),
    ("more", "less"),
    ("buy", "sell"),
    ("win", "lose"),
    ("valid", "invalid"),
    ("supported", "unsupported"),
    ("online", "offline"),
)

_APOSTROPHES = re.compile(r"[\u2018\u2019\u02bc\u0060\u00b4]")
_NEGATIVE_CONTRACTION = re.compile(r"(\w)n't\b")
# Letters and digits in any script; underscores and punctuation separate tokens.
_WORD = re.compile(r"[^\W_]+")


_HYPHENATED = re.compile(r"(?<=[a-z0-9])-(?=[a-z0-9])")


def tokenize(text: str) -> list[str]:
    """Lowercase word tokens of two or more characters; "don't" becomes the single token "dont"."""
    if not isinstance(text, str):
        return []
    text = _APOSTROPHES.sub("'", text.lower())
    text = _NEGATIVE_CONTRACTION.sub(r"\1nt", text)
    # "billing-api" is one name, not two shared words: otherwise any two sentences about the same
    # service would count as overlapping.
    text = _HYPHENATED.sub("", text)
    return [token for token in _WORD.findall(text) if len(token) >= 2]


@dataclass
class Contradiction:
    flagged: bool
    kind: str | None
    overlap: list[str]
    negated_side: str | None
    antonym_pair: tuple[str, str] | None
    reason: str

    def as_dict(self) -> dict:
        return {
            "flagged": self.flagged,
            "kind": self.kind,
            "overlap": list(self.overlap),
            "negatedSide": self.negated_side,
            "antonymPair": list(self.antonym_pair) if self.antonym_pair else None,
            "reason": self.reason,
        }


def _shown(negation: str) -> str:
    # Show contractions the way people write them ("dont" -> "don't").
    if negation.endswith("nt"):
        return negation[:-2] + "n't"
    return negation


def _clear(overlap: list[str], reason: str) -> Contradiction:
    return Contradiction(False, None, overlap, None, None, reason)


def detect(fact_text: str, existing_text: str | None) -> Contradiction:
    """Flag a likely contradiction between a new fact and an existing memory."""
    if not existing_text or not isinstance(existing_text, str):
        return _clear([], "No existing memory to compare against")
    fact_tokens, existing_tokens = tokenize(fact_text), tokenize(existing_text)
    if not fact_tokens or not existing_tokens:
        return _clear([], "One side has no words to compare")
    fact_set, existing_set = set(fact_tokens), set(existing_tokens)
    # Shared stop words ("the", "is") say nothing about being on the same topic.
    overlap = sorted((fact_set & existing_set) - STOP_WORDS - NEGATIONS)
    if len(overlap) < MIN_OVERLAP:
        return _clear(overlap, f"Too little shared vocabulary ({len(overlap)} word(s)) to compare")

    fact_negations = [t for t in fact_tokens if t in NEGATIONS]
    existing_negations = [t for t in existing_tokens if t in NEGATIONS]
    if bool(fact_negations) != bool(existing_negations):
        side = "fact" if fact_negations else "existing"
        word = _shown((fact_negations or existing_negations)[0])
        if side == "fact":
            reason = f'The new fact is negated ("{word}") while the existing memory is not'
        else:
            reason = f'The existing memory is negated ("{word}") while the new fact is not'
        return Contradiction(True, "negation", overlap, side, None, reason)

    for a, b in ANTONYM_PAIRS:
        for fact_word, existing_word in ((a, b), (b, a)):
            fact_only = fact_word in fact_set and existing_word not in fact_set
            existing_only = existing_word in existing_set and fact_word not in existing_set
            if fact_only and existing_only:
                reason = (
                    f'Antonyms "{fact_word}" / "{existing_word}" on opposite sides: the new fact '
                    f'says "{fact_word}", the existing memory says "{existing_word}"'
                )
                return Contradiction(
                    True, "antonym", overlap, None, (fact_word, existing_word), reason
                )
    return _clear(overlap, "No one-sided negation and no conflicting antonyms")
