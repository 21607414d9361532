"""Syntactic contradiction detector: given real lexical overlap, a negation on one side of what the
other side states, a conflicting antonym pair ("turned on" reads as "enabled"), the same two
things the other way round ("tabs over spaces" / "spaces over tabs"), an end the new fact says
of what the memory states ("the freeze was lifted"), or a scope said of everything on one side
and of only some on the other ("on every PR" / "only on release PRs"), when both texts speak of
the same thing.
`check` is the job's view of it: an end is what a DELETE does, so it holds an UPDATE only.

Words are compared by their roots: a light stem, a noun of the verb ("owner" / "owns") and a few
synonyms ("need" / "require"). A negation is a negation word ("not", "don't", "no longer", "never",
"without"), "stopped doing" or "used to do". Two things keep precision: what a negation negates
must be stated on the other side ("does not drink coffee" / "drinks tea" is no conflict), and two
texts that each say something the other does not in the same place are about different things
("Alice is not on the team" / "Bob is on the team"). A negated antonym agrees ("not enabled" /
"disabled")."""

from __future__ import annotations

from dataclasses import dataclass

from memory.words import NEGATIONS, STOP_WORDS
from pipeline.contradiction_scope import narrowed_scope
from pipeline.contradiction_text import joined, root, stem, switched, tokenize, written_as_names
from pipeline.contradiction_words import (
    ADVERBS,
    ANTONYM_PAIRS,
    AUXILIARIES,
    BE_OR_GET,
    CEASING,
    CLAUSE_BREAKS,
    DETERMINERS,
    ENDING_VERBS,
    FELL,
    FILLERS,
    IRREGULAR_DONE,
    MIN_PREFIXED_STEM,
    NEGATING_PREFIXES,
    NOT_YET,
    OBJECT_ENDS,
    ORDERING,
    PASSIVE_DONE,
    PAST_HELPERS,
    PHRASAL_ENDINGS,
    PLACE_WORDS,
    POSITIONAL_PAIRS,
    RECURRING,
    RESUMING,
    SUBJECT_ENDINGS,
    SYNONYMS,
)

__all__ = [
    "ANTONYM_PAIRS",
    "NEGATIONS",
    "POSITIONAL_PAIRS",
    "STOP_WORDS",
    "SYNONYMS",
    "Contradiction",
    "check",
    "detect",
    "root",
    "stem",
    "tokenize",
]

MIN_OVERLAP = 2
# How far after a negation its object may sit ("isn't a member of", "is unable to access the").
NEGATION_REACH = 4
# Content words after a negation that the other side must state for the negation to conflict.
NEGATED_WORDS = 2


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
    ended: str | None = None  # a retraction's end, as the new fact says it ("shut down")

    def as_dict(self) -> dict:
        return {
            "flagged": self.flagged,
            "kind": self.kind,
            "overlap": list(self.overlap),
            "negatedSide": self.negated_side,
            "antonymPair": list(self.antonym_pair) if self.antonym_pair else None,
            "ended": self.ended,
            "reason": self.reason,
        }


@dataclass
class _Negation:
    word: str  # as written, for the reason ("don't", "no", "stopped", "used to")
    at: int  # index of the negation's (first) token
    reach: range  # the tokens it can negate
    scope: list[int]  # the content words it negates: what the other side must state


@dataclass
class _Side:
    tokens: list[str]
    stems: list[str]
    roots: list[str]
    stem_set: frozenset[str]
    root_set: frozenset[str]
    negations: list[_Negation]
    # Tokens that only carry a negation ("stopped" in "stopped using", "used" in "used to").
    triggers: frozenset[int]
    # Each token as the text says it: "switched off" where the token reads "disabled".
    said: list[str]
    # Stems of the words written as names ("Instatus", "Unleash": capitalised, not the first
    # word): a product's name is no negated word ("Instatus" / "Statuspage" is no "in-status").
    names: frozenset[str] = frozenset()

    @classmethod
    def of(cls, text: str, other: frozenset[str] = frozenset()) -> _Side:
        """The text read for comparison; `other`: the other text's tokens (`joined`)."""
        tokens = tokenize(text)
        said = list(tokens)  # the words as the text says them, for the reasons shown
        tokens = joined(switched(tokens, said), other, said)
        stems = [stem(t) for t in tokens]
        roots = [t if t in STOP_WORDS else root(s) for t, s in zip(tokens, stems, strict=True)]
        negations, triggers = _negations(tokens)
        return cls(
            tokens,
            stems,
            roots,
            frozenset(stems),
            frozenset(roots),
            negations,
            frozenset(triggers),
            said,
            frozenset(stem(name) for name in written_as_names(text)),
        )

    def content(self) -> list[int]:
        """Positions of the words that say what the text is about: no stop words, no negations,
        no fillers ("any longer", "currently")."""
        return [
            i
            for i, t in enumerate(self.tokens)
            if t not in STOP_WORDS
            and t not in NEGATIONS
            and t not in FILLERS
            and i not in self.triggers
        ]

    def content_roots(self) -> set[str]:
        return {self.roots[i] for i in self.content()}

    def words_with(self, roots: set[str]) -> set[str]:
        return {t for t, r in zip(self.tokens, self.roots, strict=True) if r in roots}

    def first_with(self, wanted: str) -> str | None:
        """The first word with the stem `wanted`, as the text says it ("switched off")."""
        return next((w for w, s in zip(self.said, self.stems, strict=True) if s == wanted), None)

    def positions(self, wanted: str) -> set[int]:
        return {i for i, s in enumerate(self.stems) if s == wanted}

    def negated(self, position: int) -> bool:
        return any(position in n.reach for n in self.negations)

    def neighbours(self, wanted: str) -> set[tuple[str | None, str | None]]:
        """(previous stem, next stem) around each occurrence of a stem; None at either end."""
        found = set()
        for i, s in enumerate(self.stems):
            if s == wanted:
                before = self.stems[i - 1] if i > 0 else None
                after = self.stems[i + 1] if i + 1 < len(self.stems) else None
                found.add((before, after))
        return found


def _trigger(tokens: list[str], i: int) -> tuple[str, int] | None:
    """(the negation as written, where its reach starts) when tokens[i] starts a negation.

    Besides the negation words: "no longer" and "no more"; "stopped doing" and "quit doing"; and
    "used to do", which says it is no longer done ("is used to" and "got used to" do not).
    """
    word = tokens[i]
    after = tokens[i + 1] if i + 1 < len(tokens) else ""
    if word in NEGATIONS:
        if word == "no" and after in ("longer", "more"):
            return word, i + 2
        return word, i + 1
    if word in CEASING and after.endswith("ing") and len(after) >= 5:
        return word, i + 1
    if word == "used" and after == "to" and (i == 0 or tokens[i - 1] not in BE_OR_GET):
        return "used to", i + 2
    return None


def _negations(tokens: list[str]) -> tuple[list[_Negation], set[int]]:
    """Each negation with the words it negates: the next content words within reach.

    Two negations close together cancel ("cannot merge without approval" says merging needs
    approval, not that it never happens). A negation with nothing after it ("production is not")
    is about the word before it.
    """
    found, triggers = [], set()
    i = 0
    while i < len(tokens):
        started = _trigger(tokens, i)
        if started is None:
            i += 1
            continue
        word, start = started
        if tokens[i] not in NEGATIONS:
            triggers.add(i)
        reach = range(start, min(start + NEGATION_REACH, len(tokens)))
        cut = next((j for j in reach if tokens[j] in CLAUSE_BREAKS), None)
        reach = reach if cut is None else range(start, cut)
        second = next((j for j in reach if tokens[j] in NEGATIONS), None)
        if second is not None:
            i = second + 1
            continue
        words = [j for j in reach if tokens[j] not in STOP_WORDS]
        # "is not allowed to deploy" negates the deploying; "is not allowed" negates allowing.
        said = [j for j in words if tokens[j] not in FILLERS and tokens[j] not in PLACE_WORDS]
        scope = said[:NEGATED_WORDS] or words[:NEGATED_WORDS]
        # "Elena no longer does", "production is not": about the word before it. Other words
        # of no meaning after it ("is not done yet", "does not have any") stay its scope.
        if not scope and not all(tokens[j] in AUXILIARIES for j in reach):
            scope = list(reach)[:1]
        if not scope:
            before = [
                j for j in range(i) if tokens[j] not in STOP_WORDS and tokens[j] not in NEGATIONS
            ]
            scope = before[-1:]
        found.append(_Negation(word, i, reach, scope))
        i = start
    return found, triggers


def _shown(negation: str) -> str:
    # Show contractions the way people write them ("dont" -> "don't").
    if negation.endswith("nt") and negation in NEGATIONS:
        return negation[:-2] + "n't"
    return negation


def _clear(overlap: list[str], reason: str) -> Contradiction:
    return Contradiction(False, None, overlap, None, None, reason)


def _apart(a: _Side, b: _Side, skip_a: set[int], skip_b: set[int], near_a: range) -> bool:
    """True when each side says something the other does not, in the same place: "Alice" / "Bob"
    before "is on the billing team", "mobile" / "web" in "dark mode is enabled in the ... app".
    Then the texts are about different things, and a negation or an antonym between them is no
    conflict. A word only one side adds ("nightly", "every morning") is a detail.

    The place of a word is the shared words around it. Past the last shared word both sides often
    go on differently ("... to cut write latency" / "... with AOF fsync every second"): that only
    counts within `near_a`, a negation's reach on side a ("doesn't use Vim for Go" / "uses Vim for
    Python").
    """
    words_a = [(i, a.roots[i]) for i in a.content() if i not in skip_a]
    words_b = [(i, b.roots[i]) for i in b.content() if i not in skip_b]
    shared = {r for _, r in words_a} & {r for _, r in words_b}

    def places(words: list[tuple[int, str]], near: range | None) -> set:
        found, before, pending = set(), None, []
        for i, r in words + [(None, None)]:
            if r is None or r in shared:
                after = r
                found |= {
                    (before, after)
                    for j in pending
                    if after is not None or near is None or j in near
                }
                before, pending = r, []
            else:
                pending.append(i)
        return found

    return bool(places(words_a, near_a) & places(words_b, None))


def _negation(fact: _Side, existing: _Side, overlap: list[str]) -> Contradiction | None:
    """Exactly one side negated, what it negates is stated on the other side, and both speak of
    the same thing."""
    if bool(fact.negations) == bool(existing.negations):
        return None
    side, negated, other = (
        ("fact", fact, existing) if fact.negations else ("existing", existing, fact)
    )
    for negation in negated.negations:
        if not all(negated.roots[j] in other.root_set for j in negation.scope):
            continue
        # "works without a shared secret" / "needs a shared secret": the verb before "without"
        # is part of saying it is not needed.
        skip = {negation.at - 1} if negation.word == "without" else set()
        skip |= _replaced(negated, other, negation)
        if _apart(negated, other, skip, set(), negation.reach):
            continue
        word = _shown(negation.word)
        if side == "fact":
            reason = f'The new fact is negated ("{word}") while the existing memory is not'
        else:
            reason = f'The existing memory is negated ("{word}") while the new fact is not'
        return Contradiction(True, "negation", overlap, side, None, reason)
    return None


def _replaced(negated: _Side, other: _Side, negation: _Negation) -> set[int]:
    """The words a contrasting "not" puts in place of what it negates ("hit the primary
    database, not read replicas"): back from it to the last word both sides say. They differ
    from the other side by design, so they do not show that the texts are about different
    things."""
    at = negation.at
    if negation.word != "not" or at == 0:
        return set()
    before = negated.tokens[at - 1]
    # After a verb's helper or a word of no meaning ("is also not", "currently not", "probably
    # not") it is an ordinary negation.
    if before in AUXILIARIES or before in STOP_WORDS or before in FILLERS:
        return set()
    if before.endswith("ly"):
        return set()
    shared = negated.content_roots() & other.content_roots()
    replaced, j = set(), at - 1
    # Back to the last shared word, never past a verb's helper (the subject is before it).
    while j >= 0 and negated.roots[j] not in shared and negated.tokens[j] not in AUXILIARIES:
        replaced.add(j)
        j -= 1
    return replaced


def _ordered(side: _Side) -> dict[tuple[str, str, str], tuple[int, int]]:
    """(thing before, word, thing after) around each word that makes an order matter ("tabs
    over spaces", "X reports to Y": the one who reports, "to", whom), with the two things'
    positions."""
    content = [i for i in side.content() if side.tokens[i] not in PLACE_WORDS]
    found = {}
    for i, token in enumerate(side.tokens):
        reporting = [j for j in range(max(0, i - 2), i) if side.stems[j] == "report"]
        if token not in ORDERING and not (token == "to" and reporting):
            continue
        before = [j for j in content if j < (reporting[0] if token == "to" else i)]
        after = [j for j in content if j > i]
        if before and after:
            first, second = before[-1], after[0]
            found[(side.roots[first], token, side.roots[second])] = (first, second)
    return found


def _reversal(fact: _Side, existing: _Side, overlap: list[str]) -> Contradiction | None:
    """The same two things the other way round, and not both ways on either side, by the same
    subject: "tabs over spaces" / "spaces over tabs", "Kenji reports to Priya" / "Priya reports
    to Kenji" ("Alice prefers ..." / "Bob prefers ..." speak of different people)."""
    ours, theirs = _ordered(fact), _ordered(existing)
    for (a, word, b), at_fact in sorted(ours.items()):
        swapped = (b, word, a)
        if a == b or swapped not in theirs or (a, word, b) in theirs or swapped in ours:
            continue
        if _apart(fact, existing, set(at_fact), set(theirs[swapped]), range(0)):
            continue
        said = " ".join(fact.tokens[at_fact[0] : at_fact[1] + 1])
        before = " ".join(existing.tokens[theirs[swapped][0] : theirs[swapped][1] + 1])
        reason = f'The order is reversed: "{said}" / "{before}"'
        return Contradiction(True, "reversal", overlap, None, None, reason)
    return None


def _prefixed_pairs(fact: _Side, existing: _Side) -> list[tuple[str, str]]:
    """(fact stem, existing stem) where one is the other with a negating prefix."""
    fact_stems, existing_stems = fact.stem_set, existing.stem_set
    pairs = []
    for prefix in NEGATING_PREFIXES:
        for prefixed in sorted(existing_stems - existing.names):
            if _unprefixed(prefixed, prefix) in fact_stems:
                pairs.append((prefixed[len(prefix) :], prefixed))
        for prefixed in sorted(fact_stems - fact.names):
            if _unprefixed(prefixed, prefix) in existing_stems:
                pairs.append((prefixed, prefixed[len(prefix) :]))
    return pairs


def _unprefixed(word: str, prefix: str) -> str | None:
    plain = word[len(prefix) :]
    if word.startswith(prefix) and len(plain) >= MIN_PREFIXED_STEM:
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
        if not _one_sided(fact, existing, fact_stem, existing_stem):
            continue
        at_fact, at_existing = fact.positions(fact_stem), existing.positions(existing_stem)
        # "is not enabled" / "is disabled" agree: a negated antonym says the same thing.
        fact_negated = all(fact.negated(i) for i in at_fact)
        existing_negated = all(existing.negated(i) for i in at_existing)
        if fact_negated != existing_negated:
            continue
        if _apart(fact, existing, at_fact, at_existing, range(0)):
            continue
        fact_word = fact.first_with(fact_stem)
        existing_word = existing.first_with(existing_stem)
        reason = (
            f'Antonyms "{fact_word}" / "{existing_word}" on opposite sides: the new fact '
            f'says "{fact_word}", the existing memory says "{existing_word}"'
        )
        return Contradiction(True, "antonym", overlap, None, (fact_word, existing_word), reason)
    return None


_SUBJECT_ENDING = frozenset(stem(w) for w in SUBJECT_ENDINGS)
_RESUMED = frozenset(stem(w) for w in RESUMING)
PAST_STEMS = frozenset(stem(w) for w in PAST_HELPERS)
_ENDING = frozenset(stem(w) for w in ENDING_VERBS) | _SUBJECT_ENDING
_PHRASAL = {
    particle: frozenset(stem(v) for v in verbs) for particle, verbs in PHRASAL_ENDINGS.items()
}


def _ended(side: _Side) -> list[tuple[int, int, bool]]:
    """(where it starts, its last word, passive) of each end the text says as done: "was
    (finally) decommissioned", "has been lifted", "got shut down" (passive: from its helper),
    "we dropped the rule" (active: from its verb). Not a plan, habit or state ("will be
    deprecated", "plan to shut down", "is terminated at the load balancer", "are archived after
    90 days"), a schedule ("every night"), a value that fell or rose ("dropped to 40 ms", "was
    lifted to 1000 a minute"), an adjective ("the deprecated API", "Removed features are ..."),
    or an end negated ("was not cancelled")."""
    found = []
    tokens = side.tokens
    for at, token in enumerate(tokens):
        verb = at
        after = tokens[at + 1] if at + 1 < len(tokens) else ""
        if after in _PHRASAL and side.stems[at] in _PHRASAL[after]:
            continue  # "shut down": found at its particle, with its verb
        if token in _PHRASAL and at and side.stems[at - 1] in _PHRASAL[token]:
            verb = at - 1
        elif side.stems[at] not in _ENDING or token in CEASING:
            continue  # "stopped the deploy" is one act; "stopped deploying" a negation
        helper = verb - 1  # past the adverbs: "was finally decommissioned"
        while helper > 0 and (tokens[helper].endswith("ly") or tokens[helper] in ADVERBS):
            helper -= 1
        before = tokens[helper] if helper >= 0 else ""
        done = tokens[verb].endswith("ed") or tokens[verb] in IRREGULAR_DONE
        if not done or before in NOT_YET or before in DETERMINERS or side.negated(at):
            continue
        if set(tokens[at:]) & RECURRING:  # "the monthly sessions were dropped" is an end
            continue
        passive = before in PASSIVE_DONE or side.stems[verb] in _SUBJECT_ENDING
        rest = tokens[at + 1 : at + 3]
        if after in FELL and (not passive or any(c.isdigit() for c in "".join(rest))):
            continue
        if not passive and verb == 0:
            continue
        found.append((helper if passive else verb, at, passive))
    return found


def _retraction(fact: _Side, existing: _Side, overlap: list[str]) -> Contradiction | None:
    """The new fact says that what the memory states ended ("the hiring freeze was lifted" / "the
    hiring freeze stays in effect"): said of the same thing (what the fact says before the end
    does not set the two apart, and what an active verb ended is what the memory speaks of);
    not when the memory is negated or speaks of an end itself."""
    if existing.negations or _ended(existing) or existing.stem_set & _ENDING:
        return None
    if fact.stem_set & _RESUMED:  # "expired and we renewed it": it goes on
        return None
    for start, at, passive in _ended(fact):
        if fact.stems[at] in _SUBJECT_ENDING and _told_as_past(existing):
            continue  # "the internship ended in August" / "its project was the CLI"
        if _apart(fact, existing, set(range(start, at + 1)), set(), range(start)):
            continue
        if not passive and not _object_stated(fact, existing, at):
            continue  # "the team cancelled the retro" / "the team owns checkout"
        verb = at - 1 if fact.tokens[at] in _PHRASAL else at
        word = " ".join(fact.said[verb : at + 1])
        reason = f'The new fact says it ended ("{word}") while the existing memory says it holds'
        return Contradiction(True, "retraction", overlap, "fact", None, reason, word)
    return None


def _told_as_past(side: _Side) -> bool:
    """Whether the text tells of what was ("its project was the CLI"): an end of its subject
    since then is no conflict with it. Only by its helpers: a word in "-ed" is as often a
    state ("unlimited", "a managed database"), and a missed end is applied in full mode."""
    return bool(side.stem_set & PAST_STEMS)


def _object_stated(fact: _Side, existing: _Side, at: int) -> bool:
    """Whether the memory says at least half of what an active verb at `at` ended (its object:
    the content words after it, to the clause's end or a preposition: "dropped Jenkins for
    GitHub Actions" ended Jenkins)."""
    stop = CLAUSE_BREAKS | OBJECT_ENDS
    cut = next((j for j in range(at + 1, len(fact.tokens)) if fact.tokens[j] in stop), None)
    roots = {fact.roots[j] for j in fact.content() if at < j < (cut or len(fact.tokens))}
    return bool(roots) and 2 * len(roots & existing.content_roots()) >= len(roots)


def _scope(fact: _Side, existing: _Side, overlap: list[str]) -> Contradiction | None:
    found = narrowed_scope(fact, existing)
    if found is None:
        return None
    side, said, word, everything = found
    reason = f'The new fact {said} the scope: "{word}" on one side, "{everything}" on the other'
    return Contradiction(True, "scope", overlap, side, (word, everything), reason)


def detect(fact_text: str, existing_text: str | None) -> Contradiction:
    """Flag a likely contradiction between a new fact and an existing memory."""
    if not existing_text or not isinstance(existing_text, str):
        return _clear([], "No existing memory to compare against")
    fact_tokens = frozenset(switched(tokenize(fact_text)))
    existing = _Side.of(existing_text, fact_tokens)
    fact = _Side.of(fact_text, frozenset(existing.tokens))
    if not fact.tokens or not existing.tokens:
        return _clear([], "One side has no words to compare")
    # Shared stop words ("the", "is") say nothing about being on the same topic.
    shared = fact.content_roots() & existing.content_roots()
    overlap = sorted(
        (fact.words_with(shared) | existing.words_with(shared)) - STOP_WORDS - NEGATIONS
    )
    if len(shared) < MIN_OVERLAP:
        return _clear(overlap, f"Too little shared vocabulary ({len(shared)} word(s)) to compare")
    found = (
        _negation(fact, existing, overlap)
        or _antonym(fact, existing, overlap)
        or _reversal(fact, existing, overlap)
        or _retraction(fact, existing, overlap)
        or _scope(fact, existing, overlap)
    )
    return found or _clear(
        overlap,
        "No one-sided negation, no conflicting antonyms, no reversal, no retraction and no "
        "narrowed scope",
    )


def check(action: str, fact_text: str, existing_text: str | None) -> Contradiction:
    """`detect` for a model's decision about the memory: an end the fact says is what a DELETE
    does, so a retraction holds an UPDATE (which would rewrite the memory into it) only."""
    found = detect(fact_text, existing_text)
    if action == "delete" and found.kind == "retraction":
        return _clear(found.overlap, f"{found.reason}: what a DELETE does")
    return found
