"""The offline model's comparison of a new fact with one stored memory, from the two texts alone
(as a model reads the decision prompt): do they speak of the same subject, and if so does the fact
say the same thing, change a value, add detail, reverse it, or retract it."""

from __future__ import annotations

import re
from dataclasses import dataclass

from pipeline import contradiction
from pipeline.contradiction_words import ENDING_VERBS, PHRASAL_ENDINGS, RECURRING
from pipeline.llm import offline_forms as forms
from pipeline.llm.offline_forms import word_set

_ENDING = frozenset(contradiction.stem(w) for w in ENDING_VERBS)
_PHRASAL_ENDING = {particle: frozenset(verbs) for particle, verbs in PHRASAL_ENDINGS.items()}


def _phrasal_ending(tokens: list[str]) -> bool:
    return any(
        token in _PHRASAL_ENDING and contradiction.stem(tokens[i - 1]) in _PHRASAL_ENDING[token]
        for i, token in enumerate(tokens)
        if i > 0
    )


# "no longer", "not ... anymore": what was done is not done now.
_CESSATION = word_set("longer anymore")
# Words that mark a value as the old one: "from S3 to ...", "instead of Marek", "not at 04:00",
# "(before 25 MB)", "was 10 s".
_OLD_MARKERS = word_set("from instead rather not before was were previously formerly")
# Words that say a value changed: "moved to", "now", "raised", "switched".
_CHANGE_WORDS = frozenset(
    contradiction.stem(w)
    for w in word_set(
        "now new moved switched changed raised lowered increased decreased reduced bumped"
        " migrated replaced upgraded downgraded again anymore longer renamed updated"
    )
)
_DAYS = word_set(
    "monday tuesday wednesday thursday friday saturday sunday mondays tuesdays wednesdays"
    " thursdays fridays saturdays sundays january february march april may june july august"
    " september october november december"
)
_UNITS = (
    "ms s sec secs seconds? mins? minutes? h hrs? hours? days? weeks? months? years? kb mb gb tb"
    " k m x rps qps requests? messages? users? rows? nodes? replicas? workers? cores? attempts?"
    " times? percent"
)
# Units written several ways: "30 s", "30 sec", "30 seconds" are one value.
_UNIT_OF = {"sec": "s", "secs": "s", "second": "s", "min": "min", "minute": "min", "hr": "h"}
_UNIT_OF |= {"hrs": "h", "hour": "h", "percent": "%"}
_VALUE = re.compile(
    r"(?P<time>\b\d{1,2}:\d{2}\b)"
    rf"|(?P<number>\d+(?:[.,]\d+)*)(?:\s?(?P<unit>%|(?:{'|'.join(_UNITS.split())})\b))?"
    r"|(?P<ident>[A-Za-z][\w]*(?:[-_./@][\w]+)+)"
    r"|(?P<word>[A-Za-z][\w']*)",
    re.IGNORECASE,
)


@dataclass(frozen=True)
class Value:
    text: str  # normalised: lowercase, no spaces
    kind: str  # time | number:<unit> | ident | name | day
    before: str  # the content word before it ("port" in "port 3000")
    old: bool  # marked as the old value in its own text ("instead of Marek")
    in_subject: bool = False  # before the verb: part of what the statement is about


@dataclass
class Text:
    words: list[str]
    roots: set[str]
    subject: set[str]
    values: list[Value]
    negated: bool
    ending: bool  # says its subject ended ("was decommissioned")

    @property
    def current(self) -> set[str]:
        return {v.text for v in self.values if not v.old}

    @property
    def all_values(self) -> set[str]:
        return {v.text for v in self.values}


def _roots(text: str) -> list[str]:
    return [
        contradiction.root(contradiction.stem(t))
        for t in contradiction.tokenize(text)
        if t not in contradiction.STOP_WORDS
        and t not in contradiction.NEGATIONS
        and t not in _CESSATION
        and len(t) > 1
    ]


def _values(text: str, subject_chars: int = 0) -> list[Value]:
    found, previous, prior = [], "", ""
    for match in _VALUE.finditer(text):
        raw = match.group()
        word = raw.lower()
        kind = None
        if match.group("time"):
            kind = "time"
        elif match.group("number"):
            unit = (match.group("unit") or "").lower()
            unit = unit if len(unit) <= 2 else unit.removesuffix("s")
            unit = _UNIT_OF.get(unit, unit)
            kind, word = f"number:{unit}", match.group("number") + unit
        elif match.group("ident"):
            kind = "ident"
        elif word in _DAYS and raw[0].isupper():
            kind = "day"
        elif raw[0].isupper() and not _starts_sentence(text, match.start()) or _acronym(raw):
            kind = "name"
        if kind is not None:
            old = previous in _OLD_MARKERS or prior in _OLD_MARKERS and previous in ("of", "at")
            value = re.sub(r"\s+", "", word).rstrip(".,")
            if kind == "day":
                value = value.removesuffix("s")  # "on Thursdays" / "every Thursday"
            before = _before(text, match.start())
            found.append(Value(value, kind, before, old, match.start() < subject_chars))
        prior, previous = previous, word
    return _from_to(found, text)


def _starts_sentence(text: str, at: int) -> bool:
    return not text[:at].strip() or text[:at].rstrip()[-1] in ".!?:"


def _acronym(word: str) -> bool:
    return len(word) > 1 and word.isupper()


def _from_to(values: list[Value], text: str) -> list[Value]:
    """In "from X to Y", X is the old value even when "from" is not right before it."""
    marked = re.search(r"\bfrom\s+(\S+(?:\s+\S+)?)\s+to\b", text, re.IGNORECASE)
    if marked is None:
        return values
    span = marked.group(1).lower()
    return [
        Value(v.text, v.kind, v.before, True, v.in_subject)
        if v.text in span.replace(" ", "")
        else v
        for v in values
    ]


def _before(text: str, at: int) -> str:
    words = [
        w
        for w in contradiction.tokenize(text[:at])
        if w not in contradiction.STOP_WORDS and not w.isdigit()
    ]
    return contradiction.root(contradiction.stem(words[-1])) if words else ""


def _takes_object(words: list[str], i: int) -> bool:
    """What follows words[i] is what a verb takes: a determiner, a preposition, a value, an
    adverb, a negation, or nothing."""
    if i + 1 >= len(words):
        return True
    following, raw = forms.clean(words[i + 1]), words[i + 1]
    return (
        following in forms.DETERMINERS
        or following in forms.PREPOSITIONS
        or following in forms.PARTICLES
        or following in forms.AUXILIARIES
        or following in contradiction.NEGATIONS
        or following.endswith("ly")
        or forms.is_name(raw)
        or raw.strip(".,;:").isupper()
        or bool(re.search(r"\d|[-_./]\w", raw))
    )


def _plain_verb(words: list[str], i: int) -> bool:
    """A word that is no auxiliary nor "-s" form, yet a verb: after a plural noun and before what
    a verb takes ("proxies serve HTTP/3", "reviews happen on Fridays")."""
    bare = forms.clean(words[i])
    if i == 0 or not bare.isalpha() or not words[i][:1].islower():
        return False
    if bare in forms.PREPOSITIONS | forms.DETERMINERS | forms.CONJUNCTIONS:
        return False
    return forms.clean(words[i - 1]).endswith("s") and _takes_object(words, i)


def _verb_index(words: list[str]) -> int:
    """Where the main verb is (len(words): none found). A "-s" word is a verb only before what a
    verb takes ("reviews happen" / "happens on"); a plain word after a plural noun is one there
    too ("proxies serve HTTP/3")."""
    start = 2 if words and forms.clean(words[0]) == "there" else 1
    for i in range(start, len(words)):
        bare = forms.clean(words[i])
        if forms.verb_like(words, i):
            plural = bare.endswith("s") and bare not in forms.AUXILIARIES and bare.isalpha()
            if not plural or i + 1 == len(words) or not _plain_verb(words, i + 1):
                return i
        elif _plain_verb(words, i):
            return i
    return len(words)


def _subject(words: list[str], verb: int) -> set[str]:
    """The content roots before the verb, up to a preposition: roughly what the statement is
    about. After "there is" it is the noun phrase that follows."""
    start = 2 if words and forms.clean(words[0]) == "there" and len(words) > 2 else 0
    taken = []
    for word in words[start:verb]:
        bare = forms.clean(word)
        if taken and bare in forms.PREPOSITIONS:
            break
        if bare in forms.CONJUNCTIONS or bare in contradiction.NEGATIONS:
            break
        taken.append(word)
        if word.endswith((",", ":", ";")):
            break
    subject = set(_roots(" ".join(taken)))
    return subject - {"we", "they", "it", "this", "that"}


def read(text: str) -> Text:
    words = forms.words_of(text)
    verb = _verb_index(words)
    subject_chars = len(" ".join(words[:verb]))
    tokens = contradiction.tokenize(text)
    negated = any(t in contradiction.NEGATIONS for t in tokens) or "anymore" in tokens
    stems = {contradiction.stem(t) for t in tokens}
    ending = bool(stems & _ENDING) or _phrasal_ending(tokens)
    # "is shut down every night" is a schedule (in the predicate; "the nightly job" is a name).
    scheduled = set(contradiction.tokenize(" ".join(words[verb:]))) & RECURRING
    return Text(
        words,
        set(_roots(text)),
        _subject(words, verb),
        _values(text, subject_chars),
        negated,
        ending and not scheduled,
    )


def same_subject(fact: Text, existing: Text) -> bool:
    """Each side's subject is said on the other side; one side may add a word to it."""

    if not fact.subject and not existing.subject:
        return False
    named_fact = {v.text for v in fact.values if v.in_subject} - existing.all_values
    named_existing = {v.text for v in existing.values if v.in_subject} - fact.all_values
    if named_fact and named_existing:
        return False  # "service 4" / "service 3", "the office in Berlin" / "... in Lisbon"
    extra_fact, extra_existing = fact.subject - existing.roots, existing.subject - fact.roots
    if extra_fact and extra_existing:
        return False  # "the nightly export job" / "the weekly export job"
    # One side may name its subject more fully: "Our CI" / "The CI pipeline".
    extra = extra_fact or extra_existing
    longer = fact.subject if extra_fact else existing.subject
    return len(extra) == 0 or len(extra) == 1 and len(longer) >= 2


@dataclass
class Relation:
    kind: str  # same | value-change | refinement | reversal | retraction
    reason: str


def _changed_values(fact: Text, existing: Text) -> tuple[Value, Value] | None:
    """(old, new): a value of the memory the fact replaces with one of the same kind, in the same
    place or said to be a change ("from X to Y", "now", "instead of X")."""
    gone = [v for v in existing.values if v.text not in fact.current]
    new = [v for v in fact.values if not v.old and v.text not in existing.all_values]
    if not gone or not new:
        return None
    announced = any(v.old and v.text in existing.all_values for v in fact.values)
    changing = announced or bool({contradiction.stem(w) for w in _tokens(fact)} & _CHANGE_WORDS)
    restated = _predicate_share(fact, existing) >= 0.67
    if not announced and len(_new_words(fact, existing)) > 1:
        return None  # "exposes metrics on port 9100" says something else than "runs on port 8080"
    for old in gone:
        for value in new:
            if old.in_subject and value.in_subject:
                continue  # "the office in Berlin" / "the office in Lisbon": two offices
            same_kind = old.kind == value.kind or {old.kind, value.kind} <= {"name", "ident"}
            same_place = old.before and old.before == value.before
            if (same_kind and (same_place or changing or restated)) or announced:
                return old, value
    return None


def _new_words(fact: Text, existing: Text) -> set[str]:
    """Content roots only the fact has, besides its values and the words of a change."""
    value_words = {re.sub(r"\W", "", v.text) for v in fact.values}
    plain = fact.roots - existing.roots - value_words - _CHANGE_WORDS
    return {r for r in plain if r not in forms.TIME_WORDS and not r.isdigit()}


def _tokens(text: Text) -> list[str]:
    return contradiction.tokenize(" ".join(text.words))


def _predicate_share(fact: Text, existing: Text) -> float:
    """How much of what the memory says besides its values the fact says again."""
    value_words = {re.sub(r"\W", "", v.text) for v in existing.values}
    words = existing.roots - value_words
    return len(words & fact.roots) / len(words) if words else 0.0


def _plain(sentence: str) -> str:
    return " ".join(sentence.lower().split()).rstrip(".,!?;: ")


def said_in(fact_text: str, existing_text: str) -> bool:
    """The memory already holds the fact as one of its sentences, word for word (a raw memory
    of several facts is a candidate too: its other sentences change nothing of this one)."""
    fact = _plain(fact_text)
    return bool(fact) and any(
        _plain(sentence) == fact for sentence in re.split(r"(?<=[.!?;])\s+", existing_text)
    )


def relate(fact_text: str, existing_text: str) -> Relation | None:
    """What the fact does to the memory, or None when they are about different things."""
    if said_in(fact_text, existing_text):
        return Relation("same", "The memory already says this")
    fact, existing = read(fact_text), read(existing_text)
    swapped = _agent_swap(fact, existing) or _agent_swap(existing, fact, reverse=True)
    if swapped:
        return swapped
    if not same_subject(fact, existing):
        return _taken_over(fact, existing)
    swap = _swapped(fact, existing)
    if swap:
        return Relation("reversal", swap)
    found = contradiction.detect(fact_text, existing_text)
    if found.flagged:
        if found.kind == "retraction":
            return Relation("retraction", found.reason)
        if found.kind == "negation" and found.negated_side == "fact" and _retracts(fact, existing):
            return Relation("retraction", found.reason)
        return Relation("reversal", found.reason)
    if (
        fact.ending
        and not existing.ending
        and not fact.current - existing.all_values - _dates(fact)
    ):
        return Relation("retraction", "The new fact says this ended")
    ceased = fact.negated and set(_tokens(fact)) & _CESSATION and not existing.negated
    if ceased and existing.subject <= fact.roots and _retracts(fact, existing):
        return Relation("retraction", "The new fact says this is no longer so")
    if ceased and _predicate_share(fact, existing) >= 0.5:
        return Relation(
            "reversal", "The new fact says this is no longer so, and why or what instead"
        )
    changed = _changed_values(fact, existing)
    kept = _predicate_share(fact, existing) >= 0.5
    if changed and (kept or changed[0].text in fact.all_values):
        old, new = changed
        return Relation("value-change", f'The value changed from "{old.text}" to "{new.text}"')
    return _refines_or_repeats(fact, existing)


# Words between two things that say which comes first: "tabs over spaces", "A instead of B".
_ORDERED = word_set("over than instead before after vs versus")


def _pairs(text: Text) -> set[tuple[str, str, str]]:
    """(word before, ordering word, word after) around each ordering word, as roots."""
    tokens = _tokens(text)
    found = set()
    for i, token in enumerate(tokens):
        if token not in _ORDERED:
            continue
        before = [t for t in tokens[:i] if t not in contradiction.STOP_WORDS]
        after = [t for t in tokens[i + 1 :] if t not in contradiction.STOP_WORDS and t != "of"]
        if before and after:
            root = contradiction.root
            found.add(
                (root(contradiction.stem(before[-1])), token, root(contradiction.stem(after[0])))
            )
    return found


def _swapped(fact: Text, existing: Text) -> str | None:
    """ "tabs over spaces" / "spaces over tabs": the same two things the other way round."""
    for a, word, b in _pairs(fact):
        if (b, word, a) in _pairs(existing) and a != b:
            return f'The order is reversed: "{a} {word} {b}" / "{b} {word} {a}"'
    return None


def _taken_over(fact: Text, existing: Text) -> Relation | None:
    """ "Mina leads the platform team, taking over from Joel" / "Joel leads the platform team":
    the fact names the memory's subject as the old value and says the rest again."""
    for value in fact.values:
        named = value.old and value.kind == "name" and set(_roots(value.text)) == existing.subject
        if named and _predicate_share(fact, existing) >= 0.67:
            return Relation("value-change", f'"{value.text}" is replaced')
    return None


def _agent(text: Text) -> str | None:
    """The name after "by" in a passive statement ("are owned by Aiko")."""
    for i, word in enumerate(text.words[:-1]):
        if forms.clean(word) == "by" and forms.is_name(text.words[i + 1]):
            return forms.clean(text.words[i + 1])
    return None


def _agent_swap(passive: Text, active: Text, reverse: bool = False) -> Relation | None:
    """ "The alert rules are owned by Aiko now" / "Kenji owns the alert rules": the same thing
    said of another person, once in the passive."""
    agent = _agent(passive)
    doer = forms.clean(active.words[0]) if active.words else ""
    if agent is None or not forms.is_name(active.words[0]) or active.subject != set(_roots(doer)):
        return None
    if agent == doer or not passive.subject or not passive.subject <= active.roots:
        return None
    if not active.roots - active.subject <= passive.roots:
        return None
    old, new = (agent, doer) if reverse else (doer, agent)
    return Relation("value-change", f'The value changed from "{old}" to "{new}"')


def _dates(text: Text) -> set[str]:
    return {v.text for v in text.values if v.kind in ("day", "time") or v.kind.startswith("number")}


_COPULAS = word_set("is are was were be been isnt arent wasnt werent")


def _retracts(fact: Text, existing: Text) -> bool:
    """A negated fact that puts nothing in the memory's place, about something done ("no longer
    uses", "does not happen anymore"); a negated state ("are not allowed", "is not enabled") is
    the state reversed, not a retraction."""
    added = fact.roots - existing.roots - {"longer", "anymore", "since", "all"}
    if fact.current - existing.all_values - _dates(fact) or len(added) > 1:
        return False
    tokens = _tokens(fact)
    if not set(tokens) & _CESSATION:
        return False  # "reachable without VPN" reverses, it does not say something ended
    for i, token in enumerate(tokens):
        if token in contradiction.NEGATIONS:
            state = token in _COPULAS or i > 0 and tokens[i - 1] in _COPULAS
            return not state
    return True


def _refines_or_repeats(fact: Text, existing: Text) -> Relation | None:
    shared = fact.roots & existing.roots
    if not existing.roots or not fact.roots:
        return None
    covers = len(shared) >= 0.75 * len(existing.roots) and existing.all_values <= fact.all_values
    new_values = fact.current - existing.all_values
    # More than it leaves out: a rewording ("owns" / "is the owner of") adds nothing.
    adds = len(fact.roots - existing.roots) - len(existing.roots - fact.roots) >= 2
    if covers and (adds or new_values):
        return Relation("refinement", "The new fact says more about the same thing")
    same_values = fact.current == existing.current or fact.all_values == existing.all_values
    close = len(shared) >= 0.75 * len(fact.roots | existing.roots)
    if same_values and close and not substituted(fact, existing):
        return Relation("same", "Says the same thing")
    return None


def substituted(fact: Text, existing: Text, *, modifiers_only: bool = False) -> bool:
    """Each side has a word the other lacks between the same shared words: "owns the payments
    service" / "owns the billing service" say different things. With `modifiers_only`, only a
    word that names which one ("the payments service") counts, not a verb or a head noun
    ("prefers dark mode" / "likes a dark theme")."""
    shared = fact.roots & existing.roots
    return bool(_places(fact, shared, modifiers_only) & _places(existing, shared, modifiers_only))


def _places(text: Text, shared: set[str], modifiers_only: bool) -> set:
    found, before, run, previous = set(), None, [], ""
    items = []
    for word in text.words:
        roots = _roots(word)
        items.append((roots[0] if roots else None, forms.clean(word)))
    for root, bare in [*items, ("<end>", "")]:
        if root is None:
            previous = bare
            continue
        if root == "<end>" or root in shared:
            after = None if root == "<end>" else root
            if run and (not modifiers_only or after is not None and _modifies(run[0])):
                found.add((before, after))
            before, run = after, []
        else:
            if not run:
                run.append(previous)
        previous = bare
    return found


def _modifies(word_before: str) -> bool:
    """A run of words after a determiner or a possessive names which thing the next word is."""
    return word_before in forms.DETERMINERS or word_before.endswith("'s")
