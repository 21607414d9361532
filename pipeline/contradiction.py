"""Syntactic contradiction detector: given real lexical overlap, a negation on one side of the very
words the other side states, or a conflicting antonym pair; words are compared by their stems."""

from __future__ import annotations

import re
from dataclasses import dataclass

from memory.words import NEGATIONS, STOP_WORDS

__all__ = [
    "ANTONYM_PAIRS",
    "NEGATIONS",
    "POSITIONAL_PAIRS",
    "STOP_WORDS",
    "Contradiction",
    "detect",
    "stem",
    "tokenize",
]

MIN_OVERLAP = 2
# How far after a negation its object may sit ("isn't a member of", "is unable to access the").
NEGATION_REACH = 4
# Content words after a negation that the other side must state for the negation to conflict.
NEGATED_WORDS = 2

# Written in any form: both sides are compared by stem, so "allows" meets "denied".
ANTONYM_PAIRS: tuple[tuple[str, str], ...] = (
    ("enable", "disable"),
    ("allow", "deny"),
    ("allow", "forbid"),
    ("allow", "block"),
    ("allow", "prohibit"),
    ("permit", "deny"),
    ("permit", "forbid"),
    ("grant", "revoke"),
    ("accept", "reject"),
    ("approve", "reject"),
    ("approve", "deny"),
    ("include", "exclude"),
    ("add", "remove"),
    ("install", "uninstall"),
    ("start", "stop"),
    ("begin", "end"),
    ("open", "close"),
    ("lock", "unlock"),
    ("show", "hide"),
    ("visible", "hidden"),
    ("always", "never"),
    ("true", "false"),
    ("yes", "no"),
    ("love", "hate"),
    ("like", "dislike"),
    ("like", "hate"),
    ("prefer", "avoid"),
    ("use", "avoid"),
    ("want", "avoid"),
    ("increase", "decrease"),
    ("upgrade", "downgrade"),
    ("active", "inactive"),
    ("positive", "negative"),
    ("required", "optional"),
    ("mandatory", "optional"),
    ("public", "private"),
    ("internal", "external"),
    ("sync", "async"),
    ("synchronous", "asynchronous"),
    ("success", "failure"),
    ("succeed", "fail"),
    ("pass", "fail"),
    ("light", "dark"),
    ("buy", "sell"),
    ("win", "lose"),
    ("valid", "invalid"),
    ("supported", "unsupported"),
    ("available", "unavailable"),
    ("encrypted", "unencrypted"),
    ("encrypted", "plaintext"),
    ("online", "offline"),
    ("connected", "disconnected"),
    ("together", "apart"),
    ("married", "divorced"),
    ("married", "single"),
    ("alive", "dead"),
    ("present", "absent"),
    ("safe", "unsafe"),
    ("stable", "unstable"),
    ("healthy", "unhealthy"),
    ("fast", "slow"),
    ("hot", "cold"),
    ("early", "late"),
    ("schedule", "cancel"),
    ("confirm", "cancel"),
    ("allowlist", "denylist"),
    ("whitelist", "blacklist"),
    ("subscribe", "unsubscribe"),
)

# Short words that are mostly prepositions or particles ("runs on GitHub", "signed off on"): they
# only conflict when they replace each other in the same place, between the same neighbours
# ("is on in production" / "is off in production").
POSITIONAL_PAIRS: tuple[tuple[str, str], ...] = (
    ("on", "off"),
    ("up", "down"),
    ("before", "after"),
    ("in", "out"),
    ("above", "below"),
    ("more", "less"),
    ("more", "fewer"),
)

# "un-", "in-", "dis-" and "non-" in front of a word the other side says plainly ("unencrypted" /
# "encrypted", "disallow" / "allow"). Short stems are left out: "in" + "to" is not an antonym.
_NEGATING_PREFIXES = ("un", "in", "dis", "non")
_MIN_PREFIXED_STEM = 4

_ADVERB_ENDINGS = ("ously", "ally", "ively", "ently", "antly", "fully", "lessly")
_APOSTROPHES = re.compile(r"[\u2018\u2019\u02bc\u0060\u00b4]")
_NEGATIVE_CONTRACTION = re.compile(r"(\w)n't\b")
# Letters and digits in any script; underscores and punctuation separate tokens.
_WORD = re.compile(r"[^\W_]+")
# A negation joined by a hyphen ("no-longer", "not-allowed") stays a negation: split it off.
_HYPHENATED_NEGATION = re.compile(r"\b(no|not|never)-(?=[a-z])")
_HYPHENATED = re.compile(r"(?<=[a-z0-9])-(?=[a-z0-9])")


def tokenize(text: str) -> list[str]:
    """Lowercase word tokens of two or more characters; "don't" becomes the single token "dont"."""
    if not isinstance(text, str):
        return []
    text = _APOSTROPHES.sub("'", text.lower())
    text = _NEGATIVE_CONTRACTION.sub(r"\1nt", text)
    text = _HYPHENATED_NEGATION.sub(r"\1 ", text)
    # "billing-api" is one name, not two shared words: otherwise any two sentences about the same
    # service would count as overlapping.
    text = _HYPHENATED.sub("", text)
    return [token for token in _WORD.findall(text) if len(token) >= 2]


def stem(word: str) -> str:
    """A light suffix stemmer for comparison only: allows / allowed / allowing -> "allow",
    denies / denied -> "deny", enables / enabled -> "enabl". Not a dictionary form."""
    # Adverbs of adjectives: "synchronously" -> "synchronous" (not "apply" or "reply").
    if len(word) > 6 and word.endswith(_ADVERB_ENDINGS):
        word = word[:-2]
    if len(word) > 4 and word.endswith("ies"):
        word = word[:-3] + "y"
    elif len(word) > 4 and word.endswith(("sses", "shes", "ches", "xes", "zes")):
        word = word[:-2]
    elif len(word) > 3 and word.endswith("s") and not word.endswith(("ss", "us", "is")):
        word = word[:-1]
    if len(word) > 4 and word.endswith("ied"):
        word = word[:-3] + "y"
    elif len(word) > 5 and word.endswith("ing"):
        word = word[:-3]
    elif len(word) > 3 and word.endswith("ed"):
        # "used" -> "us" like "use" below; "allowed" -> "allow".
        word = word[:-2] if len(word) > 4 else word[:-1]
    # "stopped" -> "stopp" -> "stop", "cancelled" -> "cancel"; "pass" and "buzz" keep theirs.
    if len(word) > 3 and word[-1] == word[-2] and word[-1] not in "sz":
        word = word[:-1]
    if len(word) > 2 and word.endswith("e"):
        word = word[:-1]
    return word


_ANTONYMS = tuple((stem(a), stem(b)) for a, b in ANTONYM_PAIRS)
_POSITIONAL = tuple((stem(a), stem(b)) for a, b in POSITIONAL_PAIRS)


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


@dataclass
class _Side:
    tokens: list[str]
    stems: list[str]
    stem_set: frozenset[str]

    @classmethod
    def of(cls, text: str) -> _Side:
        tokens = tokenize(text)
        stems = [stem(t) for t in tokens]
        return cls(tokens, stems, frozenset(stems))

    def content_stems(self) -> set[str]:
        """Stems of the words that say what the text is about (no stop words, no negations)."""
        return {
            s
            for t, s in zip(self.tokens, self.stems, strict=True)
            if t not in STOP_WORDS and t not in NEGATIONS
        }

    def words_with(self, stems: set[str]) -> set[str]:
        return {t for t, s in zip(self.tokens, self.stems, strict=True) if s in stems}

    def first_with(self, wanted: str) -> str | None:
        return next((t for t, s in zip(self.tokens, self.stems, strict=True) if s == wanted), None)

    def neighbours(self, wanted: str) -> set[tuple[str | None, str | None]]:
        """(previous stem, next stem) around each occurrence of a stem; None at either end."""
        found = set()
        for i, s in enumerate(self.stems):
            if s == wanted:
                before = self.stems[i - 1] if i > 0 else None
                after = self.stems[i + 1] if i + 1 < len(self.stems) else None
                found.add((before, after))
        return found

    def negations(self) -> list[tuple[str, set[str]]]:
        """Each negation with the stems it negates: the next content words within reach.

        "no longer" and "no more" negate what follows them; two negations close together cancel
        ("cannot merge without approval" says merging needs approval, not that it never happens).
        """
        found = []
        i = 0
        while i < len(self.tokens):
            word = self.tokens[i]
            if word not in NEGATIONS:
                i += 1
                continue
            start = i + 1
            if (
                word == "no"
                and start < len(self.tokens)
                and self.tokens[start] in ("longer", "more")
            ):
                start += 1
            reach = self.tokens[start : start + NEGATION_REACH]
            second = next((n for n, t in enumerate(reach) if t in NEGATIONS), None)
            if second is not None:
                i = start + second + 1
                continue
            content = [t for t in reach if t not in STOP_WORDS][:NEGATED_WORDS]
            # "is not here": the negated word may itself be a stop word; with nothing after the
            # negation at all, nothing can be checked and the negation counts on its own.
            found.append((word, {stem(t) for t in (content or reach[:1])}))
            i = start
        return found


def _shown(negation: str) -> str:
    # Show contractions the way people write them ("dont" -> "don't").
    if negation.endswith("nt"):
        return negation[:-2] + "n't"
    return negation


def _clear(overlap: list[str], reason: str) -> Contradiction:
    return Contradiction(False, None, overlap, None, None, reason)


def _negation(fact: _Side, existing: _Side, overlap: list[str]) -> Contradiction | None:
    """Exactly one side negated, and what it negates is stated on the other side."""
    fact_negations, existing_negations = fact.negations(), existing.negations()
    if bool(fact_negations) == bool(existing_negations):
        return None
    side, negated, other = (
        ("fact", fact_negations, existing)
        if fact_negations
        else ("existing", existing_negations, fact)
    )
    word = next((w for w, stems in negated if stems <= other.stem_set), None)
    if word is None:
        return None
    if side == "fact":
        reason = f'The new fact is negated ("{_shown(word)}") while the existing memory is not'
    else:
        reason = f'The existing memory is negated ("{_shown(word)}") while the new fact is not'
    return Contradiction(True, "negation", overlap, side, None, reason)


def _prefixed_pairs(fact: _Side, existing: _Side) -> list[tuple[str, str]]:
    """(fact stem, existing stem) where one is the other with a negating prefix."""
    fact_stems, existing_stems = fact.stem_set, existing.stem_set
    pairs = []
    for prefix in _NEGATING_PREFIXES:
        for prefixed in sorted(existing_stems):
            if _unprefixed(prefixed, prefix) in fact_stems:
                pairs.append((prefixed[len(prefix) :], prefixed))
        for prefixed in sorted(fact_stems):
            if _unprefixed(prefixed, prefix) in existing_stems:
                pairs.append((prefixed, prefixed[len(prefix) :]))
    return pairs


def _unprefixed(word: str, prefix: str) -> str | None:
    plain = word[len(prefix) :]
    if word.startswith(prefix) and len(plain) >= _MIN_PREFIXED_STEM:
        return plain
    return None


def _one_sided(fact: _Side, existing: _Side, a: str, b: str) -> bool:
    fact_stems, existing_stems = fact.stem_set, existing.stem_set
    return (
        a in fact_stems and b not in fact_stems and b in existing_stems and a not in existing_stems
    )


def _antonym(fact: _Side, existing: _Side, overlap: list[str]) -> Contradiction | None:
    candidates = []
    for a, b in _ANTONYMS:
        candidates += [(a, b), (b, a)]
    candidates += _prefixed_pairs(fact, existing)
    for a, b in _POSITIONAL:
        for x, y in ((a, b), (b, a)):
            if fact.neighbours(x) & existing.neighbours(y):
                candidates.append((x, y))
    for fact_stem, existing_stem in candidates:
        if _one_sided(fact, existing, fact_stem, existing_stem):
            fact_word = fact.first_with(fact_stem)
            existing_word = existing.first_with(existing_stem)
            reason = (
                f'Antonyms "{fact_word}" / "{existing_word}" on opposite sides: the new fact '
                f'says "{fact_word}", the existing memory says "{existing_word}"'
            )
            return Contradiction(True, "antonym", overlap, None, (fact_word, existing_word), reason)
    return None


def detect(fact_text: str, existing_text: str | None) -> Contradiction:
    """Flag a likely contradiction between a new fact and an existing memory."""
    if not existing_text or not isinstance(existing_text, str):
        return _clear([], "No existing memory to compare against")
    fact, existing = _Side.of(fact_text), _Side.of(existing_text)
    if not fact.tokens or not existing.tokens:
        return _clear([], "One side has no words to compare")
    # Shared stop words ("the", "is") say nothing about being on the same topic.
    shared = fact.content_stems() & existing.content_stems()
    overlap = sorted(
        (fact.words_with(shared) | existing.words_with(shared)) - STOP_WORDS - NEGATIONS
    )
    if len(shared) < MIN_OVERLAP:
        return _clear(overlap, f"Too little shared vocabulary ({len(shared)} word(s)) to compare")
    found = _negation(fact, existing, overlap) or _antonym(fact, existing, overlap)
    return found or _clear(overlap, "No one-sided negation and no conflicting antonyms")
