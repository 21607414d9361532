"""Candidate proper nouns for the inline entity linker."""

import pytest

from memory.linker import candidate_names, canonical_name


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("Priya prefers squash merges.", ["Priya"]),
        ("The billing team uses Kafka.", ["Kafka"]),
        ("Ask Marco Rossi about AWS costs.", ["Ask Marco Rossi", "AWS", "Ask", "Marco", "Rossi"]),
        ("We met on Monday. It was fine.", []),
        ("(Redis), 'Kafka' and \"Grafana\"!", ["Redis", "Kafka", "Grafana"]),
        ("an all-lowercase sentence", []),
        ("Jo and Al", []),
    ],
)
def test_it_finds_capitalised_names_and_acronyms(text, expected):
    assert candidate_names(text) == expected


def test_canonical_names_are_lowercase_with_collapsed_spaces():
    assert canonical_name("  Marco   Rossi ") == "marco rossi"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("The API moved to Node.js last week.", ["API", "Node.js"]),
        ("Émile pairs with Łukasz on ÖBB tickets.", ["Émile", "Łukasz", "ÖBB"]),
        ("\ufeffPri\u200bya uses Kafka", ["Priya", "Kafka"]),
    ],
)
def test_it_finds_dotted_and_non_ascii_names_in_the_visible_text(text, expected):
    assert candidate_names(text) == expected


def test_canonical_names_compose_accents_so_nfd_and_nfc_link_the_same_entity():
    assert canonical_name("E\u0301mile") == canonical_name("Émile") == "émile"
