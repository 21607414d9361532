"""The built-in offline provider: deterministic heuristics that answer extraction and decision
prompts in the JSON a model would, and a feature-hashing embedder, so the product runs without a
model server. No database, no network."""

from __future__ import annotations

import hashlib
import json
import re
import time
from dataclasses import dataclass
from typing import ClassVar

import numpy as np
from django.conf import settings

from memory.guard import ensure_outside_transaction
from pipeline.llm import offline_compare as compare
from pipeline.llm import offline_forms as forms
from pipeline.llm import prompts
from pipeline.llm.clients import CallRecord
from pipeline.parsing import MAX_ENTITIES, MAX_FACTS, MIN_FACT_CHARS, Candidate, Fact

# v2: discourse frames and small talk read by their form; decisions read the fact against each
# candidate (value changes, refinements, reversals, retractions, restatements).
OFFLINE_MODEL = "offline-heuristic-v2"

# Replies are JSON text, exactly what a real model returns, so the same parser handles both.

_SENTENCE_END = re.compile(r"(?<=[.!?])\s+|\s*\n+\s*|(?<=:)\s+(?=[-*\u2022]\s)")
_ABBREVIATIONS = ("e.g.", "i.e.", "etc.", "vs.", "mr.", "mrs.", "ms.", "dr.", "approx.", "cf.")
_LIST_MARKER = re.compile(r"^(?:[-*\u2022]|\d+[.)])\s+")
_TRUNCATION_MARK = "[truncated]"
_DECISION = re.compile(
    r"\b(?:decided|decide to|agreed|chose|chosen|will use|we'll use|switched to|switching to"
    r"|going with|settled on|opted for)\b",
    re.IGNORECASE,
)
_PREFERENCE = re.compile(
    r"\b(?:prefers?|preferred|loves?|hates?|wants?|dislikes?|enjoys?|favou?rite|likes)\b"
    r"|\b(?:i|we|they|you|he|she)\s+(?:really\s+)?like\b",
    re.IGNORECASE,
)
_PROCEDURAL = re.compile(
    r"\b(?:steps?|run|install|to deploy|how to|always run|make sure to)\b|\bfirst\b.*\bthen\b",
    re.IGNORECASE,
)
_SEMANTIC = re.compile(
    r"\b(?:is an?|are an?|means|refers to|stands for|is defined as|is short for)\b", re.IGNORECASE
)
_STRONG_DOUBT = re.compile(r"\b(?:not sure|i guess|no idea)\b", re.IGNORECASE)
_HEDGE = re.compile(
    r"\b(?:maybe|might|probably|perhaps|possibly|i think|i believe|could be)\b", re.IGNORECASE
)
# Sentences opening with these have no concrete subject, so a preference or decision in them is
# less trustworthy.
_VAGUE_OPENERS = frozenset(
    ["it", "this", "that", "they", "these", "those", "he", "she", "there", "someone", "something"]
)

# Names are at most four capitalised words, which also keeps matching linear on long inputs.
_NAME = r"[A-Z][\w.+#-]*(?:[ \t]+[A-Z][\w.+#-]*){0,3}"
_PHRASE = (
    r"(?:the\s+)?[a-z][\w-]*"
    r"(?:\s+(?!(?:for|in|on|at|because|and|with|to|when|since|as|but|or|so|instead|over|of|from"
    r"|by|than)\b)[a-z][\w-]*){0,2}"
)
# Relationship -> (source type, target type); longer verbs first so "decided to use" wins.
_RELATIONS = {
    "decided to use": ("unknown", "tool"),
    "switched to": ("unknown", "tool"),
    "depends on": ("unknown", "unknown"),
    "works on": ("person", "project"),
    "maintains": ("person", "project"),
    "prefers": ("person", "unknown"),
    "uses": ("unknown", "tool"),
    "owns": ("person", "unknown"),
}
_TRIPLE = re.compile(rf"\b({_NAME})\s+({'|'.join(_RELATIONS)})\s+({_NAME}|{_PHRASE})")
_SOURCE_LEAD = frozenset(
    [
        "the",
        "this",
        "that",
        "it",
        "we",
        "i",
        "they",
        "he",
        "she",
        "our",
        "my",
        "their",
        "his",
        "her",
        "yesterday",
        "today",
    ]
)


def _sentences(text: str) -> list[str]:
    pieces: list[str] = []
    for piece in _SENTENCE_END.split(text or ""):
        piece = _LIST_MARKER.sub("", piece.strip())
        if not piece:
            continue
        # "e.g. Redis" is not the end of a sentence.
        if pieces and pieces[-1].lower().endswith(_ABBREVIATIONS):
            pieces[-1] += " " + piece
        else:
            pieces.append(piece)
    return [p for p in pieces if p != _TRUNCATION_MARK]


def _fact_type(sentence: str) -> str:
    if _DECISION.search(sentence):
        return "decision"
    if _PREFERENCE.search(sentence):
        return "preference"
    if _PROCEDURAL.search(sentence):
        return "procedural"
    if _SEMANTIC.search(sentence) and sentence.split()[0].lower() not in _VAGUE_OPENERS:
        return "semantic"
    return "fact"


def _confidence(sentence: str, fact_type: str, said: str | None = None) -> float:
    """How clearly `sentence` states its fact; `said` is the sentence as written, whose frame
    may hedge it ("I think Dana said ...")."""
    said = said or sentence
    if sentence.endswith("?"):
        return 0.3
    if _STRONG_DOUBT.search(said):
        return 0.5
    if _HEDGE.search(said):
        return 0.6
    clear_subject = sentence.split()[0].lower().strip(",") not in _VAGUE_OPENERS
    if not clear_subject:
        # "It posts a summary..." means nothing without the sentence before it: not atomic.
        return 0.55
    if fact_type in ("decision", "preference"):
        return 0.9
    return 0.8


def _clean_name(name: str) -> str:
    words = name.strip().rstrip(".,;:!?").split()
    while words and words[0].lower() in _SOURCE_LEAD:
        words = words[1:]
    return " ".join(words)


def _entities(sentence: str) -> list[dict]:
    found = []
    for match in _TRIPLE.finditer(sentence):
        source, verb, target = (
            _clean_name(match.group(1)),
            match.group(2),
            _clean_name(match.group(3)),
        )
        if not source or not target:
            continue
        source_type, target_type = _RELATIONS[verb]
        found.append(
            {
                "source": source,
                "source_type": source_type,
                "relationship": verb.replace(" ", "_"),
                "target": target,
                "target_type": target_type,
                "confidence": 0.7,
            }
        )
    return found


def _statements(text: str) -> list[tuple[str, str]]:
    """(statement, sentence as written) of each sentence that states something: no question,
    no title, no small talk, without its discourse frame. In a message with small talk in it,
    a slight remark with no value ("Coffee first, then we talk.") is small talk too."""
    found, social = [], False
    for sentence in _sentences(text):
        if sentence.endswith("?") or forms.is_header(sentence):
            continue
        is_social, rest = forms.social_remainder(sentence)
        if rest is None:
            social = social or is_social
            continue
        statement = forms.without_frame(rest)
        if not statement.endswith("?"):
            found.append((statement, sentence))
    if social:
        found = [(s, said) for s, said in found if not forms.slight(s)]
    return found


def extract_reply(text: str) -> str:
    """Each statement of MIN_FACT_CHARS or more becomes a fact, without its discourse frame
    ("From the planning meeting:", "Oskar said that"); questions, titles and small talk are
    not facts. Simple "X uses Y" triples."""
    facts, entities, seen_facts, seen_triples = [], [], set(), set()
    for sentence, said in _statements(text):
        if len(sentence) < MIN_FACT_CHARS or _normalise(sentence) in seen_facts:
            continue
        seen_facts.add(_normalise(sentence))
        fact_type = _fact_type(said)
        facts.append(
            {
                "content": sentence,
                "type": fact_type,
                "confidence": _confidence(sentence, fact_type, said),
            }
        )
        for triple in _entities(sentence):
            key = (triple["source"].lower(), triple["relationship"], triple["target"].lower())
            if key not in seen_triples:
                seen_triples.add(key)
                entities.append(triple)
        if len(facts) == MAX_FACTS:
            break
    return json.dumps({"facts": facts, "entities": entities[:MAX_ENTITIES]})


def _normalise(text: str) -> str:
    return " ".join(re.sub(r"[^\w\s]", " ", text.lower()).split())


def _reply(action: str, target: int | None, confidence: float, reason: str) -> str:
    return json.dumps(
        {"action": action, "targetId": target, "confidence": round(confidence, 2), "reason": reason}
    )


def _names(text: str) -> set[str]:
    """What a statement names: capitalised words after the first, and identifiers with a hyphen,
    underscore, dot or digit (billing-api, eu-west-1, Node.js)."""
    words = re.findall(r"[\w][\w.\-]*[\w]|\w", text)
    return {
        word.lower()
        for position, word in enumerate(words)
        if (position > 0 and word[0].isupper()) or re.search(r"[-_.\d]", word)
    }


# Below this similarity the search barely matched the memory: the two are not compared.
_COMPARABLE = 0.35
# A fact that only adds detail replaces a memory this similar (less: it is likely another one).
_REFINES = 0.5
# A fact this similar to a memory that names all it names is already said (a paraphrase).
_COVERED = 0.8
# A retraction is proposed as an UPDATE to the retracting statement, never as a DELETE: the memory
# keeps that the thing ended, and a reviewer who approves an UPDATE whose text is the whole raw
# memory retires the old one anyway (applied as DELETE).
_ACTIONS = {"reversal": "update", "value-change": "update", "retraction": "update"}


def decide_reply(fact: Fact, candidates: list[Candidate], similarities: dict[str, float]) -> str:
    """ADD / UPDATE / NONE from reading the fact against each candidate, most similar first: the
    same statement (none); a changed value, added detail, a reversal or a retraction (update);
    otherwise add."""
    if not candidates:
        return _reply("add", None, fact.confidence, "No existing memories match this fact")
    similarities = similarities or {}
    # Most similar first; ties go to the lower candidate number so the answer is stable.
    ranked = sorted(candidates, key=lambda c: (-similarities.get(c.memory_id, 0.0), c.number))
    normalised = _normalise(fact.content)
    for candidate in ranked:
        if _normalise(candidate.content) == normalised:
            return _reply(
                "none", candidate.number, 1.0, f"Identical to existing memory [{candidate.number}]"
            )
    for candidate in ranked:
        score = similarities.get(candidate.memory_id, 0.0)
        if score < _COMPARABLE:
            break
        relation = compare.relate(fact.content, candidate.content)
        if relation is None or relation.kind == "refinement" and score < _REFINES:
            continue
        number = candidate.number
        if relation.kind == "same":
            return _reply("none", number, max(score, 0.8), f"Says what memory [{number}] says")
        if relation.kind == "refinement":
            return _reply("update", number, score, f"Adds detail to memory [{number}]")
        reason = f"Replaces memory [{number}] ({relation.kind}): {relation.reason}"
        return _reply(_ACTIONS[relation.kind], number, 0.7, reason)
    best = ranked[0]
    score = similarities.get(best.memory_id, 0.0)
    # A close score is "already said" only when the memory names everything the fact names and
    # speaks of the same subject: a fact about billing-api is not covered by one about the ledger.
    read_fact, read_best = compare.read(fact.content), compare.read(best.content)
    if (
        score >= _COVERED
        and _names(fact.content) <= _names(best.content)
        and compare.same_subject(read_fact, read_best)
        and not compare.substituted(read_fact, read_best, modifiers_only=True)
    ):
        return _reply("none", best.number, score, f"Already covered by memory [{best.number}]")
    return _reply("add", None, fact.confidence, "No existing memory covers this fact")


# --- the provider's clients ------------------------------------------------------------------


class OfflineChat:
    """The heuristics above behind the chat interface; replies go through the same parser."""

    provider = "offline"
    model = OFFLINE_MODEL

    @classmethod
    def from_settings(cls, model: str | None = None) -> OfflineChat:
        # There is one offline model, so a requested model name has nothing to select.
        return cls()

    def _record(self, kind: str, prompt: str, reply_fn) -> CallRecord:
        ensure_outside_transaction("offline model")
        started = time.perf_counter()
        reply = reply_fn()
        return CallRecord(
            kind=kind,
            provider=self.provider,
            model=self.model,
            prompt=prompt,
            raw_response=reply,
            duration_ms=(time.perf_counter() - started) * 1000,
        )

    def extract(self, text: str) -> CallRecord:
        return self._record("extract", prompts.extraction_prompt(text), lambda: extract_reply(text))

    def decide(
        self,
        fact: Fact,
        candidates: list[Candidate],
        similarities: dict[str, float],
        examples: list[dict] | None = None,
    ) -> CallRecord:
        return self._record(
            "decide",
            prompts.decision_prompt(fact, candidates, examples),
            lambda: decide_reply(fact, candidates, similarities),
        )


_TOKEN = re.compile(r"\w+", re.UNICODE)


@dataclass
class OfflineEmbedder:
    """Deterministic feature hashing (words, word pairs, character trigrams), L2-normalised.

    A fallback for trying the product without a model server: it captures lexical similarity,
    not meaning. Point MEMORY_EMBEDDING_PROVIDER at Ollama for real semantic vectors.
    """

    provider: ClassVar[str] = "offline"

    dimensions: int
    model: str = ""

    def __post_init__(self) -> None:
        self.model = self.model or f"offline-hash-{self.dimensions}"

    @classmethod
    def from_settings(cls) -> OfflineEmbedder:
        return cls(settings.MEMORY_EMBEDDING_DIMENSIONS)

    def _features(self, text: str):
        words = _TOKEN.findall(text.lower())
        for word in words:
            yield f"w:{word}", 1.0
            padded = f"#{word}#"
            for i in range(len(padded) - 2):
                yield f"c:{padded[i : i + 3]}", 0.35
        for left, right in zip(words, words[1:], strict=False):
            yield f"b:{left} {right}", 0.5

    def embed_one(self, text: str) -> np.ndarray:
        vector = np.zeros(self.dimensions, dtype=np.float32)
        for feature, weight in self._features(text):
            digest = hashlib.blake2b(feature.encode("utf-8"), digest_size=8).digest()
            bucket = int.from_bytes(digest[:4], "little") % self.dimensions
            sign = 1.0 if digest[4] & 1 else -1.0
            vector[bucket] += sign * weight
        norm = float(np.linalg.norm(vector))
        return vector / norm if norm > 0 else vector

    def embed(self, texts: list[str]) -> list[np.ndarray]:
        ensure_outside_transaction("offline embedder")
        return [self.embed_one(text) for text in texts]
