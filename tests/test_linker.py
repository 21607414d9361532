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


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("Priya's team owns Kafka.", ["Priya", "Kafka"]),
        ("Priya\u2019s team owns Kafka.", ["Priya", "Kafka"]),
        ("Priya\u02bcs team", ["Priya"]),
        ("James' laptop and James\u2019 phone", ["James"]),
        ("AWS's bill went up.", ["AWS"]),
        ("O'Brien's desk is next to D\u2019Angelo.", ["O'Brien", "D\u2019Angelo"]),
        # A possessive ends a name: the next capitalised word starts another one.
        (
            "Ask Marco Rossi's Kafka cluster",
            ["Ask Marco Rossi", "Kafka", "Ask", "Marco", "Rossi"],
        ),
        # Contractions of skipped words stay skipped.
        ("It's Bob's turn. Let's see what Today's sync says.", ["Bob"]),
        ("the \u201cGrafana\u201d board and \u2018Redis\u2019", ["Grafana", "Redis"]),
    ],
)
def test_possessives_and_curly_quotes_leave_the_name(text, expected):
    assert candidate_names(text) == expected


@pytest.mark.django_db
def test_remember_links_an_existing_entity_named_in_a_possessive():
    from django.utils import timezone

    from memory import writes
    from memory.models import Entity, MemoryEntityMention
    from memory.writes import Actor

    now = timezone.now()
    entities = {
        name: Entity.objects.create(
            name=name,
            canonical_name=name.lower(),
            agent_id="default",
            created_at=now,
            updated_at=now,
        )
        for name in ("Priya", "James", "Kafka")
    }
    agent = Actor("claude-code", "agent")
    plain = writes.remember("Priya's team moved to James\u2019 laptop", actor=agent)
    assert sorted(plain.linked_entity_ids) == sorted([entities["Priya"].pk, entities["James"].pk])
    mentions = MemoryEntityMention.objects.filter(memory=plain.memory)
    assert sorted(m.mention_text for m in mentions) == ["James", "Priya"]
    # Still no false link and never a new entity: "Priyas" is not Priya.
    other = writes.remember("Priyas and Jameson use Kafka", actor=agent)
    assert other.linked_entity_ids == [entities["Kafka"].pk]
    assert Entity.objects.count() == 3
