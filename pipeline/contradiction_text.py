"""How the contradiction detector (pipeline.contradiction) reads a text: lowercase word tokens
("don't" as one token), a light stemmer, each stem's root (a noun of the verb, a few synonyms),
"turned on" read as "enabled", and two words the other text writes as one."""

from __future__ import annotations

import re

from pipeline.contradiction_words import SWITCH_VERBS, SWITCHED, SYNONYMS

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


_NAME = re.compile(r"(?<![.!?:]\s)(?<!^)\b[A-Z][a-z]+\b")


def written_as_names(text: str) -> list[str]:
    """The lowercase words the text writes as names: a capital and then small letters, not at
    the start of a sentence ("The public status page is hosted on Instatus": "instatus")."""
    if not isinstance(text, str):
        return []
    return [word.lower() for word in _NAME.findall(text.strip())]


def stem(word: str) -> str:
    """A light suffix stemmer for comparison only: allows / allowed / allowing -> "allow",
    denies / denied -> "deny", enables / enabled -> "enabl". Not a dictionary form."""
    if word == "using":  # like "uses" and "used": too short for the "-ing" rule below
        return "us"
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


_SYNONYM_OF = {stem(a): stem(b) for a, b in SYNONYMS}
# Endings that make a noun of a verb: "owner" / "owns", "ownership", "requirement", "deployment".
_DERIVED = ("ership", "ement", "ment", "ion", "er")
_MIN_ROOT = 3


def root(stem_: str) -> str:
    """What a stem means for comparison: "owner" and "owns" -> "own", "need" -> "requir"."""
    stem_ = _SYNONYM_OF.get(stem_, stem_)
    for ending in _DERIVED:
        plain = stem_[: -len(ending)]
        if stem_.endswith(ending) and len(plain) >= _MIN_ROOT:
            return plain
    return stem_


def switched(tokens: list[str], said: list[str] | None = None) -> list[str]:
    """ "turned on" / "switched off" as "enabled" / "disabled", so the antonym pair finds them.
    With `said` (the words as written, one per token), it is kept in step: "switched off"."""
    return _merged(
        tokens,
        said,
        lambda last, token: SWITCHED[token] if token in SWITCHED and last in SWITCH_VERBS else None,
    )


def joined(tokens: list[str], other: frozenset[str], said: list[str] | None = None) -> list[str]:
    """Two neighbouring words as the one word the other text writes ("on call" / "on-call",
    which the tokenizer makes "oncall"); `said` kept in step, as in `switched`."""
    return _merged(
        tokens, said, lambda last, token: last + token if last + token in other else None
    )


def _merged(tokens: list[str], said: list[str] | None, merge) -> list[str]:
    """The tokens with each one that `merge(previous, token)` joins to the one before it read as
    what it returns (None: kept apart); `said` kept in step, its words joined by a space."""
    out: list[str] = []
    words: list[str] = []
    for token, word in zip(tokens, said or tokens, strict=True):
        one = merge(out[-1], token) if out else None
        if one is not None:
            out[-1] = one
            words[-1] += f" {word}"
        else:
            out.append(token)
            words.append(word)
    if said is not None:
        said[:] = words
    return out
