"""pipeline.contradiction: one test per rule of the syntactic detector."""

from __future__ import annotations

import pytest

from pipeline.contradiction import (
    ANTONYM_PAIRS,
    NEGATIONS,
    STOP_WORDS,
    Contradiction,
    detect,
    tokenize,
)


@pytest.mark.parametrize(
    ("text", "tokens"),
    [
        ("Alice don't use Vim", ["alice", "dont", "use", "vim"]),
        ("It isn't ready", ["it", "isnt", "ready"]),
        ("We can't deploy", ["we", "cant", "deploy"]),
        ("It won't ship", ["it", "wont", "ship"]),
        ("She doesn\u2019t like it", ["she", "doesnt", "like", "it"]),
        ("They aren\u2018t here", ["they", "arent", "here"]),
        ("No, A/B test_suite v2", ["no", "test", "suite", "v2"]),
        ("Caf\u00e9 LATTE", ["caf\u00e9", "latte"]),
    ],
)
def test_tokenize_lowercases_splits_and_keeps_negative_contractions_whole(text, tokens):
    assert tokenize(text) == tokens


def test_word_lists_keep_negations_out_of_stop_words():
    assert not NEGATIONS & STOP_WORDS
    assert {
        "dont",
        "isnt",
        "cant",
        "wont",
        "doesnt",
        "arent",
        "wasnt",
        "shouldnt",
        "didnt",
        "havent",
    } <= NEGATIONS
    assert len(ANTONYM_PAIRS) >= 30


@pytest.mark.parametrize(
    ("fact", "existing", "word"),
    [
        ("Alice don't use Vim for Python", "Alice uses Vim for Python", "don't"),
        ("The staging cluster isn't autoscaled", "The staging cluster is autoscaled", "isn't"),
        ("Bob can't access the billing database", "Bob can access the billing database", "can't"),
        (
            "The mobile app won't support Android 9",
            "The mobile app will support Android 9",
            "won't",
        ),
        ("Carol doesn\u2019t review frontend changes", "Carol reviews frontend changes", "doesn't"),
        ("The API does not paginate results", "The API paginates results", "not"),
    ],
)
def test_negation_on_the_new_fact_only_is_flagged(fact, existing, word):
    found = detect(fact, existing)
    assert (found.flagged, found.kind, found.negated_side) == (True, "negation", "fact")
    assert found.reason == f'The new fact is negated ("{word}") while the existing memory is not'


def test_negation_on_the_existing_memory_only_is_flagged_on_that_side():
    found = detect(
        "Dark mode is enabled in the dashboard", "Dark mode isn't enabled in the dashboard"
    )
    assert (found.flagged, found.kind, found.negated_side) == (True, "negation", "existing")
    assert "existing memory is negated" in found.reason


def test_both_sides_negated_is_not_a_contradiction():
    found = detect("The build does not cache wheels", "The build doesn't cache wheels either")
    assert found.flagged is False
    assert found.kind is None


def test_stop_words_do_not_count_as_overlap():
    # Only "team" is a real shared word; "the", "is" and "here" are stop words.
    found = detect("the team is not here", "the team is here")
    assert found.flagged is False
    assert found.overlap == ["team"]


def test_two_real_shared_words_are_enough_overlap():
    found = detect("the deploy team is not here", "the deploy team is here")
    assert found.flagged is True
    assert found.overlap == ["deploy", "team"]


def test_negation_words_themselves_are_not_overlap():
    found = detect("never deploy on Friday", "never deploy on Monday")
    assert found.overlap == ["deploy"]
    assert found.flagged is False


def test_unrelated_texts_are_not_flagged_even_with_negation():
    assert (
        detect("Alice does not drink coffee", "The CI pipeline runs on GitHub Actions").flagged
        is False
    )


@pytest.mark.parametrize(
    ("fact", "existing", "pair"),
    [
        (
            "Dark mode is disabled in the admin dashboard",
            "Dark mode is enabled in the admin dashboard",
            ("disabled", "enabled"),
        ),
        (
            "Dark mode is enabled in the admin dashboard",
            "Dark mode is disabled in the admin dashboard",
            ("enabled", "disabled"),
        ),
        (
            "The firewall will allow SSH from the office network",
            "The firewall will deny SSH from the office network",
            ("allow", "deny"),
        ),
        (
            "Reviewers reject large pull requests",
            "Reviewers accept large pull requests",
            ("reject", "accept"),
        ),
        (
            "Feature flag beta_search is off in production",
            "Feature flag beta_search is on in production",
            ("off", "on"),
        ),
        (
            "Strict mode config value is false",
            "Strict mode config value is true",
            ("false", "true"),
        ),
        (
            "Alice hates tabs in Python files",
            "Alice loves tabs in Python files",
            ("hates", "loves"),
        ),
        (
            "The login form uses a light theme",
            "The login form uses a dark theme",
            ("light", "dark"),
        ),
        ("The export job runs async jobs", "The export job runs sync jobs", ("async", "sync")),
        (
            "Type hints are optional in scripts",
            "Type hints are required in scripts",
            ("optional", "required"),
        ),
    ],
)
def test_antonym_pair_on_opposite_sides_is_flagged_either_way(fact, existing, pair):
    found = detect(fact, existing)
    assert (found.flagged, found.kind, found.antonym_pair) == (True, "antonym", pair)
    assert f'"{pair[0]}"' in found.reason and f'"{pair[1]}"' in found.reason


def test_antonym_present_on_both_sides_is_not_flagged():
    fact = "Dark mode enabled, light mode disabled in the dashboard"
    existing = "Dark mode disabled, light mode enabled in the dashboard"
    assert detect(fact, existing).flagged is False


def test_always_versus_never_counts_as_negation():
    found = detect(
        "Never run migrations during business hours", "Always run migrations during business hours"
    )
    assert (found.flagged, found.kind, found.negated_side) == (True, "negation", "fact")


@pytest.mark.parametrize("existing", [None, "", "   ", "!!! ??"])
def test_missing_or_wordless_existing_memory_is_not_flagged(existing):
    found = detect("The deploy team is not here today", existing)
    assert found.flagged is False
    assert found.overlap == []


def test_identical_statements_are_not_flagged():
    found = detect("Alice prefers dark mode in VS Code", "Alice prefers dark mode in VS Code")
    assert found.flagged is False
    assert found.reason == "No one-sided negation and no conflicting antonyms"


def test_as_dict_uses_camel_case_keys_and_json_friendly_values():
    found = detect(
        "Dark mode is disabled in the dashboard", "Dark mode is enabled in the dashboard"
    )
    assert found.as_dict() == {
        "flagged": True,
        "kind": "antonym",
        "overlap": ["dark", "dashboard", "mode"],
        "negatedSide": None,
        "antonymPair": ["disabled", "enabled"],
        "reason": found.reason,
    }
    assert Contradiction(False, None, [], None, None, "x").as_dict()["antonymPair"] is None
