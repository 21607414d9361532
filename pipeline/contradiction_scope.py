"""The contradiction detector's scope rule (pipeline.contradiction): a statement said of
everything on one side and of only some on the other ("on every PR" / "only on release PRs").
It reads the detector's sides (tokens, roots, what is negated, the content words)."""

from __future__ import annotations

from pipeline.contradiction_words import NOT_A_SCOPE, RESTRICTIVE, UNIVERSAL


def _scopes(side) -> tuple[list[int], list[int]]:
    """Where the text speaks of everything ("every", "anyone", "always") and where it narrows
    ("only", "restricted to"), each not negated ("not only ... but also" widens nothing)."""
    universal, restrictive = [], []
    for i, token in enumerate(side.tokens):
        if side.negated(i):
            continue
        if token in UNIVERSAL:
            universal.append(i)
        elif token in RESTRICTIVE and not (i and side.tokens[i - 1] in NOT_A_SCOPE):
            restricted_to = token != "restricted" or side.tokens[i + 1 : i + 2] == ["to"]
            restrictive += [i] if restricted_to else []
    return universal, restrictive


def narrowed_scope(fact, existing) -> tuple[str, str, str, str] | None:
    """One side says it of everything, the other of only some, and neither says both ("on every
    PR" / "only on release PRs"; "every PR needs one approval and release PRs two" says both).
    What each side names in its scope differs by design (the words from the quantifier to the
    next word both sides say); every other word must be said on both sides, or the two speak of
    different things ("only the on-call engineer gets paged at night" / "everyone gets paged
    for sev1 incidents"). (side narrowing or widening, "narrows"/"widens", the two words)."""
    fact_all, fact_only = _scopes(fact)
    existing_all, existing_only = _scopes(existing)
    if fact_only and existing_all and not fact_all and not existing_only:
        narrow, wide, side, said = fact, existing, "fact", "narrows"
    elif fact_all and existing_only and not fact_only and not existing_all:
        narrow, wide, side, said = existing, fact, "existing", "widens"
    else:
        return None
    shared = fact.content_roots() & existing.content_roots()
    skip_narrow = _scope_words(narrow, _scopes(narrow)[1], shared)
    skip_wide = _scope_words(wide, _scopes(wide)[0], shared)
    for side_, skip in ((narrow, skip_narrow), (wide, skip_wide)):
        if any(side_.roots[i] not in shared for i in side_.content() if i not in skip):
            return None
    # The narrow side names what it narrows to ("only on *release* PRs", "only the *ops* team"):
    # without it, "only" says "merely" or "just then" ("needs only one approval", "runs only at
    # 02:00" / "always runs at 02:00"), which every other word agreeing leaves compatible.
    wide_words = {t.removesuffix("s") for t in wide.tokens}
    named = {
        narrow.roots[i]
        for i in skip_narrow
        if narrow.tokens[i].removesuffix("s") not in wide_words  # "PRs" / "every PR"
    }
    if not named & (narrow.content_roots() - shared):
        return None
    return side, said, narrow.said[_scopes(narrow)[1][0]], wide.said[_scopes(wide)[0][0]]


def _scope_words(side, at: list[int], shared: set[str]) -> set[int]:
    """The quantifiers at `at` and the words after each, up to the next word both sides say.
    Each word is read once, however many quantifiers run together ("only only only ...")."""
    words: set[int] = set()
    for start in at:
        j = start
        while j < len(side.tokens) and (j == start or j not in words):
            if j != start and side.roots[j] in shared:
                break
            words.add(j)
            j += 1
    return words
