"""The word lists the contradiction detector (pipeline.contradiction) reads: antonym pairs,
short positional pairs and synonyms, written in any form (both sides are compared by stem), the
verbs that end what they name, and the word classes its rules look for."""

from __future__ import annotations

# Written in any form: both sides are compared by stem, so "allows" meets "denied".
ANTONYM_PAIRS: tuple[tuple[str, str], ...] = (
    ("enable", "disable"),
    ("allow", "deny"),
    ("allow", "forbid"),
    ("allow", "block"),
    ("allow", "prohibit"),
    ("allow", "forbidden"),
    ("permit", "forbidden"),
    ("permit", "block"),
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
    ("enjoy", "hate"),
    ("enjoy", "dislike"),
    ("love", "dislike"),
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
    ("renew", "cancel"),
    ("allowlist", "denylist"),
    ("whitelist", "blacklist"),
    ("subscribe", "unsubscribe"),
    # Added after a fourth blind set missed "prefers" / "dislikes" and "supports" / "lacks":
    # common opposites in a team's notes, from general vocabulary (not from any set's pairs).
    ("prefer", "dislike"),
    ("prefer", "hate"),
    ("like", "avoid"),
    ("love", "avoid"),
    ("enjoy", "avoid"),
    ("favor", "oppose"),
    ("favour", "oppose"),
    ("support", "oppose"),
    ("recommend", "discourage"),
    ("encourage", "discourage"),
    ("support", "lack"),
    ("include", "lack"),
    ("provide", "lack"),
    ("manual", "automatic"),
    ("manual", "automated"),
    ("manually", "automatically"),
    ("static", "dynamic"),
    ("strict", "lenient"),
    ("strict", "relaxed"),
    ("strict", "loose"),
    ("tighten", "loosen"),
    ("tighten", "relax"),
    ("temporary", "permanent"),
    ("ephemeral", "persistent"),
    ("mutable", "immutable"),
    ("possible", "impossible"),
    ("join", "leave"),
    ("join", "left"),
    ("cheap", "expensive"),
    ("often", "rarely"),
    ("often", "seldom"),
    ("frequently", "rarely"),
    ("remote", "onsite"),
    ("remotely", "onsite"),
    ("centralized", "decentralized"),
    ("activate", "deactivate"),
    ("mandatory", "voluntary"),
    ("compulsory", "optional"),
    ("ascending", "descending"),
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

# Words that name the same thing for comparison: "does not need an API key" / "requires an API
# key".
SYNONYMS: tuple[tuple[str, str], ...] = (
    ("need", "require"),
    ("mandatory", "require"),
    ("permit", "allow"),
    ("enjoy", "like"),
    ("want", "prefer"),
    ("belong", "own"),
)

# Verbs that end what they name ("was decommissioned", "we dropped the rule", "the freeze was
# lifted"), any form: the detector's retraction and the offline model's read the same list.
ENDING_VERBS: tuple[str, ...] = (
    "decommission",
    "retire",
    "remove",
    "deprecate",
    "discontinue",
    "sunset",
    "shut",
    "delete",
    "drop",
    "archive",
    "kill",
    "abandon",
    "disband",
    "cancel",
    "scrap",
    "stop",
    "quit",
    "cease",
    "lift",
    "revoke",
    "rescind",
    "abolish",
    "terminate",
    "withdraw",
)
# Verbs that say their subject ended ("the freeze ended on December 20", "the contract
# expired"): the detector reads them as it reads a passive end; the offline model does not.
SUBJECT_ENDINGS: tuple[str, ...] = ("end", "expire", "conclude", "lapse")
# Said with an end, these say it goes on: "expired and was renewed", "ended, then resumed".
RESUMING: tuple[str, ...] = ("renew", "extend", "restart", "resume", "reopen", "reinstate")
# A memory that tells of what was ("its project was the CLI"): an end since is no conflict.
PAST_HELPERS = frozenset(["was", "were", "had", "did"])
# A verb and a particle that end something: "phased out", "wound down", "taken offline".
PHRASAL_ENDINGS: dict[str, tuple[str, ...]] = {
    "off": ("turn", "switch", "take", "took", "taken"),
    "down": ("shut", "wind", "wound", "spin", "spun", "take", "took", "taken"),
    "out": ("phase",),
}
# "shut down every night" is a schedule, not an end.
RECURRING = frozenset(
    ["every", "each", "daily", "nightly", "weekly", "hourly", "monthly", "night", "nights"]
)


def _word_set(text: str) -> frozenset[str]:
    return frozenset(text.split())


# Words in a negation's reach that do not say what is negated ("does not need an API key any
# longer", "is not currently enabled", "is not allowed to deploy"), and that never show that two
# texts speak of different things.
FILLERS = frozenset(
    [
        "longer",
        "anymore",
        "currently",
        "really",
        "actually",
        "necessarily",
        "allowed",
        "able",
        "permitted",
        "supposed",
        "going",
    ]
)


# Words of place in a negation's reach: "isn't behind a CDN" negates the CDN, not being behind.
PLACE_WORDS = frozenset(
    ["behind", "via", "across", "inside", "outside", "beside", "beyond", "toward", "towards"]
    + ["onto", "along", "around", "near", "past", "directly"]
)
# "turned on" / "switched off": said as the words the antonym pairs know.
SWITCHED = {"on": "enabled", "off": "disabled"}
# A new clause: a negation before it does not reach past it ("is no longer disabled and runs").
CLAUSE_BREAKS = frozenset(["and", "but"])
SWITCH_VERBS = _word_set("turn turns turned turning switch switches switched switching")
# Words between two things that make their order matter ("tabs over spaces"); "reports to" is
# read apart (`_ordered`).
ORDERING = frozenset(["over", "than", "instead", "rather"])
# A verb's helper: before "not" it makes an ordinary negation ("is not", "does not"), where a
# word that says something makes a contrast ("hit the primary, not read replicas": `_replaced`).
AUXILIARIES = _word_set(
    "is are was were am be been being do does did has have had will would shall should can"
    " could may might must"
)

# A scope said of everything on one side and narrowed on the other ("on every PR" / "only on
# release PRs", "anyone in the company" / "restricted to the SRE team"), or the other way round.
UNIVERSAL = frozenset(["every", "all", "always", "anyone", "anybody", "everyone", "everybody"])
RESTRICTIVE = frozenset(["only", "solely", "exclusively", "restricted"])
# "read-only" and "write-only" say what may be done, not to whom.
NOT_A_SCOPE = frozenset(["read", "write", "append", "invite", "members"])
# "stopped using Jenkins", "quit commuting": the verb after them is no longer done.
CEASING = frozenset(["stop", "stops", "stopped", "quit", "quits", "ceased", "ceases"])
# "is used to working nights" and "got used to it" are not "used to" a habit that ended.
BE_OR_GET = frozenset(
    ["is", "am", "are", "was", "were", "be", "been", "being", "get", "gets", "got", "getting"]
)

# Past forms that do not end in "-ed": "was shut", "has been withdrawn".
IRREGULAR_DONE = frozenset(["shut", "sunset", "quit", "withdrawn", "withdrew", "taken", "took"])
IRREGULAR_DONE |= frozenset(["wound", "spun"])
# Before an ending verb: said as done in the passive ("was lifted", "has been retired", "got
# shut down"); a plan, a habit or a state, not an end ("will be deprecated", "to shut down",
# "is terminated at the load balancer", "are archived after 90 days").
PASSIVE_DONE = frozenset(["was", "were", "been", "got", "gotten"])
NOT_YET = frozenset(
    ["to", "will", "would", "should", "must", "can", "could", "may", "might", "shall", "is", "are"]
    + ["am", "be", "being", "gets", "get", "getting"]
)
# After an ending verb: a value that fell or rose ("latency dropped to 40 ms", "by 30%"; "was
# lifted to 1000 a minute", when a number follows: "was dropped from the roadmap" is an end).
FELL = frozenset(["to", "by", "from", "below", "under", "into"])
# Between a passive helper and its verb besides "-ly" words: "was now retired".
ADVERBS = frozenset(["now", "already", "just", "also", "since", "then", "recently"])
# Where what an active verb ended stops: "dropped Jenkins for GitHub Actions" ended Jenkins.
OBJECT_ENDS = frozenset(["for", "in", "with", "to", "from", "at", "on", "by", "after", "because"])
# Before an ending word, these make it a name's adjective ("the deprecated v1 API"), not an end.
DETERMINERS = frozenset(["the", "a", "an", "our", "its", "their", "this", "that", "these", "those"])

# "un-", "in-", "dis-" and "non-" in front of a word the other side says plainly ("unencrypted" /
# "encrypted", "disallow" / "allow"). Short stems are left out: "in" + "to" is not an antonym.
NEGATING_PREFIXES = ("un", "in", "dis", "non")
MIN_PREFIXED_STEM = 4
