"""The offline model's reading of a sentence's form: whether it is a clause, where a discourse
frame ("In today's sync Oskar said ...", "Standup 14/05 - Dmitri: ...") ends and the statement
begins, and whether it is small talk. Pure functions on text; closed word classes (auxiliaries,
determiners, prepositions, reporting verbs, interjections), no listed phrases."""

from __future__ import annotations

import re


def word_set(text: str) -> frozenset[str]:
    """The words of a space-separated list."""
    return frozenset(text.split())


# --- word classes ---------------------------------------------------------------------------

AUXILIARIES = word_set(
    "is are was were am be been being has have had will would shall should can could may might"
    " must do does did isnt arent wasnt werent hasnt havent hadnt wont wouldnt shouldnt cant"
    " couldnt dont doesnt didnt cannot"
)
DETERMINERS = word_set(
    "the a an this that these those our my your their his her its every each all some any no"
    " another both either neither"
)
SUBJECT_PRONOUNS = word_set("i we you he she they it everyone everybody someone somebody")
OBJECT_WORDS = word_set("me us him her them everyone everybody all you team")
PREPOSITIONS = word_set(
    "in at on during per from with via over after before since following by for to of about"
    " across into onto under within without like as through upon"
)
CONJUNCTIONS = word_set(
    "and but or so because which who whom whose where when while although though if unless"
    " whereas then than nor yet"
)
PARTICLES = word_set("out up down off back over away")
TIME_WORDS = word_set(
    "today yesterday tomorrow tonight earlier later now recently morning afternoon evening"
    " monday tuesday wednesday thursday friday saturday sunday last this next"
)
# Past tenses a suffix does not show.
IRREGULAR_PAST = word_set(
    "said told wrote ran went took made got found kept left set put cut sent built broke gave"
    " knew thought saw came became began chose fell grew held led lost meant met paid shut spoke"
    " stood threw won brought bought caught drew heard"
)
# Verbs that report what someone said or wrote: "Lena told me (that) ...", "as discussed ...".
_REPORTING_BASES = word_set(
    "say tell mention note write confirm explain remind point report clarify announce share"
    " suggest stress warn claim state post flag complain insist admit reply answer repeat"
    " highlight emphasise emphasize propose agree hear learn talk discuss inform ping message"
    " comment recap summarise summarize relay"
)
_REPORTING_IRREGULAR = word_set("said told wrote written heard spoke spoken per according")
# Where something was said: the noun of a meeting, a call, a thread.
EVENT_NOUNS = word_set(
    "meeting meetings sync syncs standup stand-up retro retrospective review call calls thread"
    " chat discussion conversation all-hands demo planning huddle 1:1 one-on-one email ticket"
    " channel slack workshop session interview offsite kickoff postmortem post-mortem wiki"
    " comment comments notes minutes recap"
)
# Words said to people rather than about the world: greetings, thanks, apologies, laughter,
# assent. An evaluative ("great", "nice") is one only before punctuation, "to" or a praise noun.
INTERJECTIONS = word_set(
    "hi hey hello heya hiya yo thx ty tysm cheers congrats congratulations kudos oops bye goodbye"
    " cya ciao lol lmao rofl haha hahaha hehe ok okay kk yeah yep yup nope nah np brb afk gtg ttyl"
    " wow oh ah aha hmm ugh gotcha yay phew"
)
# Words that are interjections only before punctuation, someone spoken to, or their usual
# preposition: "Sorry for ...", "Welcome to the team", "Thank you", but "Welcome emails are ...".
_SOMETIMES_INTERJECTIONS = word_set(
    "thanks thank welcome sorry apologies morning evening afternoon sure yes alright"
)
_AFTER_INTERJECTION = word_set("to for on you a so again back aboard")
EVALUATIVES = word_set(
    "great nice cool awesome perfect amazing good excellent lovely sweet fantastic brilliant"
    " wonderful happy"
)
_PRAISE_NOUNS = word_set(
    "work job catch luck stuff one call idea point morning evening afternoon night day weekend"
    " friday monday holidays holiday news"
)
# Verbs of wishing and thanking that open small talk without a subject ("Hope you ...",
# "Have a nice weekend", "See you Monday"), with what must follow them.
_WISHES = {
    "hope": None,
    "appreciate": None,
    "enjoy": word_set("your the it yourself"),
    "see": word_set("you ya"),
}
VOCATIVES = word_set("all everyone everybody folks team guys yall people mate friends you")
# Discourse abbreviations that open a sentence: "FYI the cluster moved", "BTW: ...".
DISCOURSE_ABBREVIATIONS = word_set("fyi btw psa nb ps tldr imo imho afaik iirc til")


def _inflections(base: str) -> set[str]:
    stem = base[:-1] if base.endswith("e") else base
    forms = {base, base + "s", stem + "ed", stem + "ing"}
    if base.endswith("y"):
        forms |= {base[:-1] + "ies", base[:-1] + "ied"}
    if base.endswith(("sh", "ss")):
        forms.add(base + "es")
    if re.fullmatch(r".*[^aeiou][aeiou][gpt]", base):  # ping -> pinged, but chat -> chatted
        forms |= {base + base[-1] + "ed", base + base[-1] + "ing"}
    return forms


REPORTING = frozenset(
    {form for base in _REPORTING_BASES for form in _inflections(base)} | _REPORTING_IRREGULAR
)

_EDGE = re.compile(r"^[^\w@#/]+|[^\w%/+#]+$")
_APOSTROPHE = re.compile(r"[\u2019\u02bc]")


def clean(word: str) -> str:
    """A word as the classes above hold it: lowercase, no surrounding punctuation, no
    apostrophe in a negative contraction ("doesn't" -> "doesnt")."""
    word = _APOSTROPHE.sub("'", word)
    word = _EDGE.sub("", word.lower())
    return word.replace("n't", "nt")


def words_of(text: str) -> list[str]:
    return text.split()


def is_name(word: str) -> bool:
    """A capitalised word or an @handle: "Oskar", "Mei-Ling", "@liam"."""
    bare = word.strip("\"'()[],.;:!?")
    return bool(bare) and (bare[0].isupper() or bare[0] == "@") and not bare.isupper()


# "'s" is "is" after these; after a noun it is a possessive ("today's sync").
_S_IS = word_set("it that there here what who where he she this everything nothing let")


def _contracted_auxiliary(word: str) -> bool:
    word = _APOSTROPHE.sub("'", word.lower()).strip('"()[],.;:!?')
    head, apostrophe, tail = word.partition("'")
    if not apostrophe or not head.isalpha():
        return False
    return tail in ("re", "m", "ve", "ll", "d") or (tail == "s" and head in _S_IS)


def verb_like(words: list[str], i: int) -> bool:
    """Could words[i] be the finite verb of a clause? Auxiliaries, past tenses, a bare verb after
    a personal pronoun, or a third-person "-s" form after a word that is not a determiner,
    preposition or number."""
    word = clean(words[i])
    previous = clean(words[i - 1]) if i > 0 else ""
    if not word.isalpha():
        return _contracted_auxiliary(words[i]) and i > 0
    if i > 0 and words[i][:1].isupper():
        return False  # a name, or a month ("2 May")
    if word in AUXILIARIES or word in IRREGULAR_PAST or _contracted_auxiliary(words[i]):
        return True
    if not words[i][:1].islower() or word in PREPOSITIONS or word in CONJUNCTIONS:
        return False
    if word in DETERMINERS or word in SUBJECT_PRONOUNS or word in TIME_WORDS:
        return False
    if previous in ("i", "we", "you", "they") and not words[i - 1].endswith(","):
        return True
    following = clean(words[i + 1]) if i + 1 < len(words) else ""
    after_noun = previous not in DETERMINERS and previous not in PREPOSITIONS
    if previous[:1].isdigit():  # "10,000 rows", but "version 3.2 starts on ..."
        after_noun = following in DETERMINERS or following in PREPOSITIONS or following in PARTICLES
    if len(word) > 3 and word.endswith("ed"):
        return after_noun
    ends_like_verb = word.endswith("s") and not word.endswith(("ss", "us", "is", "ous"))
    return len(word) > 3 and ends_like_verb and after_noun and i > 0


def has_verb(words: list[str], start: int = 0) -> bool:
    return any(verb_like(words, i) for i in range(start, len(words)))


def is_clause(words: list[str]) -> bool:
    """Words that make a statement of their own: a subject first (not a preposition or a
    conjunction), then something that can be its verb."""
    if len(words) < 3:
        return False
    first = clean(words[0])
    if first in CONJUNCTIONS or first in PREPOSITIONS or first in ("that", "what", "how", "why"):
        return False
    return has_verb(words, 1)


def capitalised(text: str) -> str:
    return text[:1].upper() + text[1:]


# --- discourse frames -----------------------------------------------------------------------

_LEADING_MARKER = re.compile(
    r"^(?:\[[^\]]{1,40}\]|<[^>\s]{1,30}>|\(\d[^)]{0,20}\)|\d{1,2}:\d{2}(?::\d{2})?(?:\s*[ap]m)?)"
    r"\s+",
    re.IGNORECASE,
)
_LABEL_END = re.compile(r":\s+|\s+[-\u2013\u2014]\s+|\u2014\s*")
_GROUPS = re.compile(r"\([^)]*\)|\[[^\]]*\]")
MAX_LABEL_WORDS = 8


def _strip_markers(sentence: str) -> str:
    """Chat-log stamps and nicks before the text: "[10:42]", "<pablo>", "(09:15)"."""
    while (match := _LEADING_MARKER.match(sentence)) and len(sentence) > match.end():
        sentence = sentence[match.end() :]
    return sentence


def _strip_label(sentence: str) -> str | None:
    """A short verbless label before a colon or a spaced dash ("Meeting notes (4 March):",
    "Standup 14/05 -", "fix(auth):", "Dmitri:"), when what follows is a clause. None: no label."""
    match = _LABEL_END.search(sentence)
    if match is None:
        return None
    label, rest = sentence[: match.start()], sentence[match.end() :]
    label_words = words_of(_GROUPS.sub(" ", label))
    rest_words = words_of(rest)
    if not label_words or len(label_words) > MAX_LABEL_WORDS or not rest_words:
        return None
    if any(clean(w) in AUXILIARIES or _contracted_auxiliary(w) for w in label_words):
        return None
    dash = not match.group().startswith(":")
    if dash and clean(label_words[0]) in DETERMINERS | SUBJECT_PRONOUNS:
        if clean(label_words[0]) in DETERMINERS and clean(rest_words[0]) in ("it", "this"):
            # "the flaky test - it was caused by ..." names what "it" is
            return " ".join([label.strip(), *rest_words[1:]])
        return None  # "The cache - which is shared - ..." is one sentence
    said_where = any(clean(w) in EVENT_NOUNS for w in label_words)
    if said_where and len(rest_words) >= 3 and _opens_statement(rest_words[0]):
        return rest  # "Follow-up from the incident review: alerts page the secondary ..."
    if not is_clause(rest_words):
        return None  # "Security policy: deny SSH ..." needs its label
    if _topic(label_words, rest_words):
        return None  # "Kafka: topics are created by Terraform"
    return rest


def _opens_statement(word: str) -> bool:
    first = clean(word)
    return first not in PREPOSITIONS and first not in CONJUNCTIONS and first not in _WH


def _topic(label: list[str], rest: list[str]) -> bool:
    """A label of names or versions before a bare noun is what the statement is about."""
    first = clean(rest[0])
    bare = rest[0][:1].islower() and first not in DETERMINERS and first not in SUBJECT_PRONOUNS
    bare = bare and not first.endswith("ing")
    return bare and all(is_name(w) or w[:1].isdigit() for w in label)


def _subject_end(lead: list[str]) -> int:
    """Where the subject at the end of `lead` starts (len(lead): no subject)."""
    team = lead and is_name(lead[0]) and len(lead) > 2 and clean(lead[1]) in ("from", "on", "at")
    if team and not has_verb(lead) and not any(w.endswith(",") for w in lead):
        return 0  # "Carlos from the data team says ..."
    start = len(lead)
    while start > 0 and not lead[start - 1].endswith(","):
        if is_name(lead[start - 1]):
            start -= 1
        elif start > 1 and clean(lead[start - 1]) in ("and", "&") and is_name(lead[start - 2]):
            start -= 1  # "Jane and Omar agreed that ..."
        else:
            break
    if start == len(lead) and lead and clean(lead[-1]) in SUBJECT_PRONOUNS:
        start -= 1
    if start == len(lead):
        # "The docs say ...", "the team agreed ..."
        for size in (2, 3, 4):
            if len(lead) == size and clean(lead[0]) in DETERMINERS:
                return 0
    return start


def _adverbial(words: list[str]) -> bool:
    """An introduction that states nothing itself: "In this morning's infra sync", "As",
    "Yesterday in meeting,", "From what"."""
    if not words:
        return True
    first = clean(words[0])
    opens = first in PREPOSITIONS or first in TIME_WORDS or first in ("as", "like", "just")
    return opens and not has_verb(words)


def _lead_ok(lead: list[str]) -> bool:
    while lead and clean(lead[-1]) in AUXILIARIES | {"also", "just", "again", "already", "then"}:
        lead = lead[:-1]  # "Jarek was saying", "Marta also said"
    return _adverbial(lead[: _subject_end(lead)])


_WH = word_set("how what why whether if when where who which")


def _clause_after(words: list[str], verb: int) -> int | None:
    """Where the reported clause starts after a reporting verb at `verb`: after "that", a comma
    or a colon within reach, else at its subject (a determiner or pronoun) right after an object."""
    reach = range(verb + 1, min(verb + 9, len(words)))
    for j in reach:
        before = words[j - 1]
        boundary = clean(before) == "that" or before.endswith((",", ":"))
        if boundary and is_clause(words[j:]):
            skipped = words[verb + 1 : j - (clean(before) == "that")]
            asks = any(clean(w) in _WH for w in skipped)
            return j if not has_verb(skipped) and not asks else None
        if boundary and j > verb + 1:
            return None
    found = None
    for j in range(verb + 1, min(verb + 4, len(words))):
        starts = clean(words[j]) in DETERMINERS or clean(words[j]) in ("he", "she", "they", "it")
        told = all(clean(w) in OBJECT_WORDS or is_name(w) for w in words[verb + 1 : j])
        if starts and told and is_clause(words[j:]):
            found = j
    return found


def _attribution(words: list[str], at: int) -> bool:
    """ "Per Ingrid's comment", "per the wiki": per names a source; "per user" is a rate."""
    following = words[at + 1] if at + 1 < len(words) else ""
    word = clean(following)
    return (
        word in DETERMINERS
        or is_name(following)
        or word.endswith("'s")
        or word in EVENT_NOUNS
        or word in TIME_WORDS
    )


def _strip_frame(words: list[str]) -> int | None:
    """Where the statement starts after a reporting frame: "[intro] [subject] said [to me] [that]".
    None: no frame."""
    for verb in range(min(len(words), 12)):
        word = clean(words[verb])
        if word not in REPORTING or words[verb][:1].isupper() and verb > 0:
            continue
        if word == "per" and not _attribution(words, verb):
            continue
        if (
            word in ("point", "points", "pointed")
            and clean(words[min(verb + 1, len(words) - 1)]) != "out"
        ):
            continue
        if not _lead_ok(words[:verb]):
            continue
        start = _clause_after(words, verb)
        if start is not None:
            return start
    return None


def _strip_event_intro(words: list[str]) -> int | None:
    """ "In the sync, the team chose Kafka": an introduction naming where it was said, up to a
    comma, before a clause."""
    for j in range(1, min(len(words), MAX_LABEL_WORDS + 1)):
        if words[j - 1].endswith(","):
            intro = words[:j]
            named = any(clean(w) in EVENT_NOUNS or w.startswith("#") for w in intro)
            if named and _adverbial(intro) and is_clause(words[j:]):
                return j
            return None
    return None


def _strip_abbreviation(words: list[str]) -> int | None:
    """ "FYI the cluster moved", "Just FYI, ...", "BTW: ..."."""
    for at in (0, 1):
        opens = at == 0 or words[0][:1].isupper()
        said = len(words) > at and clean(words[at]) in DISCOURSE_ABBREVIATIONS
        if said and opens and is_clause(words[at + 1 :]):
            return at + 1
    return None


def _strip_copula_that(words: list[str]) -> int | None:
    """ "My understanding from the call is that ...", "So the decision is: ...": a noun phrase
    that only announces the clause after "is that" or "is:"."""
    start = 1 if words and clean(words[0]) in ("so", "and", "anyway", "also") else 0
    for at in range(start + 1, min(len(words) - 1, start + 8)):
        word = clean(words[at])
        if word not in ("is", "was"):
            continue
        opener = clean(words[start])
        announces = opener in DETERMINERS or opener in ("my", "our", "their", "his", "her")
        if not announces or has_verb(words[start:at]):
            return None
        if words[at].endswith(":") and is_clause(words[at + 1 :]):
            return at + 1
        if clean(words[at + 1]) == "that" and is_clause(words[at + 2 :]):
            return at + 2
        return None
    return None


def without_frame(sentence: str) -> str:
    """The statement without what frames it: chat stamps, labels, "X said (that)", "per X,",
    "FYI". A pronoun the frame named ("1:1 with Greta - she wants ...") becomes the name."""
    original = sentence
    for _ in range(4):
        before = sentence
        sentence = _strip_markers(sentence)
        labelled = _strip_label(sentence)
        if labelled is not None:
            sentence = labelled
        words = words_of(sentence)
        for strip in (_strip_abbreviation, _strip_frame, _strip_event_intro, _strip_copula_that):
            start = strip(words)
            if start:
                sentence = " ".join(words[start:])
                break
        if sentence == before:
            break
    if sentence == original:
        return original
    return capitalised(_named(original[: len(original) - len(sentence)], sentence))


def _named(frame: str, statement: str) -> str:
    names = {w.strip(",.:;()-'") for w in words_of(frame) if is_name(w)}
    names = {n.removesuffix("'s") for n in names if n and clean(n) not in TIME_WORDS}
    first, _, rest = statement.partition(" ")
    if clean(first) in ("he", "she") and len(names) == 1:
        return f"{names.pop()} {rest}"
    return statement


# --- small talk -------------------------------------------------------------------------------

_EMOJI = re.compile(r"[\U0001F300-\U0001FAFF\u2600-\u27BF]|[:;]-?[()DPp]\B|<3")
_VALUE = re.compile(r"\d|[\w][-_./@#][\w]|[a-z][A-Z]|\b[A-Z]{2,}\b")


def has_value(text: str) -> bool:
    """A number, an identifier (billing-api, /etc/x, a.b), camelCase or an acronym."""
    return bool(_VALUE.search(text))


def _social_opener(words: list[str]) -> int:
    """How many leading words are said to people: interjections, vocatives, "good morning",
    "great work", "have a nice ...", "hope you ...". 0: none."""
    i = 0
    while i < len(words):
        word, raw = clean(words[i]), words[i]
        following = clean(words[i + 1]) if i + 1 < len(words) else ""
        ends = raw.endswith((",", "!", ".", "?")) or i + 1 == len(words)
        sometimes = word in _SOMETIMES_INTERJECTIONS and (
            ends or following in _AFTER_INTERJECTION or following in VOCATIVES
        )
        interjection = (word in INTERJECTIONS or sometimes) and (word, following) != (
            "thanks",
            "to",
        )
        evaluation = word in EVALUATIVES and (ends or following in EVALUATIVES or following == "to")
        if interjection or evaluation:
            i += 1
        elif word in EVALUATIVES and following in _PRAISE_NOUNS:
            i += 2
        elif i == 0 and word in ("sounds", "looks", "seems") and following in EVALUATIVES:
            i += 2  # "Sounds great, ..."
        elif i > 0 and (word in VOCATIVES or is_name(raw) and ends):
            i += 1
        elif word == "a" and following in ("ton", "lot", "bunch"):
            i += 2
        elif _EMOJI.fullmatch(raw):
            i += 1
        else:
            break
    return i


def _said_to_people(words: list[str]) -> bool:
    """Small talk by shape: opens with a wish or thanks verb and no subject, or speaks to "you"
    without stating anything with a value in it."""
    if not words:
        return True
    first = clean(words[0])
    following = clean(words[1]) if len(words) > 1 else ""
    if first in _WISHES and following not in AUXILIARIES:
        return _WISHES[first] is None or following in _WISHES[first]
    if first == "have" and following in ("a", "an", "fun"):
        # "Have a nice weekend", not "Have a look at the runbook".
        return following == "fun" or len(words) > 2 and clean(words[2]) in EVALUATIVES
    return False


def _personal_aside(words: list[str]) -> bool:
    """ "I'll be a bit late today, sorry!": the writer's own state, with no value in it, said
    with an interjection or about today."""
    first = clean(words[0]) if words else ""
    if first.split("'")[0] not in ("i", "we") or has_value(" ".join(words)):
        return False
    return any(
        clean(w) in INTERJECTIONS | _SOMETIMES_INTERJECTIONS or clean(w) in ("today", "tomorrow")
        for w in words[1:]
    )


def social_remainder(sentence: str) -> tuple[bool, str | None]:
    """(is it small talk at all, the statement left after it). "Thanks Noor! ..." is small talk
    with nothing left; "Sorry, the staging DB is down until 17:00" leaves the statement."""
    words = words_of(sentence)
    opened = _social_opener(words)
    rest = words[opened:]
    if not opened:
        if _said_to_people(words) or _personal_aside(words):
            return True, None
        if _EMOJI.search(sentence) and not has_value(sentence):
            return True, None
        return False, sentence
    if not rest or _said_to_people(rest) or not is_clause(rest) or slight(" ".join(rest)):
        return True, None
    first = clean(rest[0])
    personal = first in ("i", "you", "we", "that", "this", "it") or first.startswith(
        ("that'", "it'")
    )
    if (
        first in PREPOSITIONS
        or first in CONJUNCTIONS
        or (personal and not has_value(" ".join(rest)))
    ):
        return True, None
    return True, capitalised(" ".join(rest))


def slight(sentence: str) -> bool:
    """Few content words and no value: a remark that only means something in its chat."""
    words = [clean(w) for w in words_of(sentence)]
    content = [
        w
        for w in words
        if len(w) > 2
        and w not in DETERMINERS | SUBJECT_PRONOUNS | PREPOSITIONS | CONJUNCTIONS | AUXILIARIES
        and w not in TIME_WORDS
    ]
    concrete = bool(words) and words[0] in DETERMINERS
    return len(content) <= 3 and not has_value(sentence) and not concrete


def is_header(sentence: str) -> bool:
    """A verbless title before the text: "Retro notes:", "Weekly ops review, 2 May."."""
    words = words_of(sentence)
    if sentence.rstrip().endswith(":"):
        return not has_verb(words)
    dated = re.search(r"\d", sentence) is not None
    predicate = any(clean(w) in _PREDICATE_WORDS for w in words)
    return dated and len(words) <= 6 and not has_verb(words) and not predicate


# Words that place or time what a verb does ("happen at 09:30 every weekday"): not in a title.
_PREDICATE_WORDS = word_set("at in on every to by per until since")
