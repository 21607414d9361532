"""pipeline.llm.offline: heuristic replies in the model's JSON format, read back by the real parser."""

from __future__ import annotations

import json

import pytest

from pipeline.llm import offline
from pipeline.parsing import (
    Candidate,
    Decision,
    EntityTriple,
    Fact,
    parse_decision,
    parse_extraction,
)


def extract(text: str) -> list[tuple[str, str, float]]:
    facts, _, warnings = parse_extraction(offline.extract_reply(text))
    assert warnings == []
    return [(f.content, f.type, f.confidence) for f in facts]


# --- Extraction ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("sentence", "fact_type", "confidence"),
    [
        ("Alice prefers dark mode in VS Code.", "preference", 0.9),
        ("Bob hates long standups.", "preference", 0.9),
        ("I like short pull requests.", "preference", 0.9),
        ("We decided to use PostgreSQL 16 for billing.", "decision", 0.9),
        ("The team switched to uv for dependency management.", "decision", 0.9),
        ("We are going with Django 5.2 LTS.", "decision", 0.9),
        ("It was agreed to freeze deploys on Fridays.", "decision", 0.55),
        ("To deploy, run make release and tag the commit.", "procedural", 0.8),
        ("First build the image, then push it to the registry.", "procedural", 0.8),
        ("Always run the migrations before starting the workers.", "procedural", 0.8),
        ("A sidecar is a container that shares the pod network.", "semantic", 0.8),
        ("RAG stands for retrieval augmented generation.", "semantic", 0.8),
        ("There is a bug in the parser.", "fact", 0.55),
        ("The billing service listens on port 8080.", "fact", 0.8),
        ("Maybe the cache is too small.", "fact", 0.6),
        ("Carol probably prefers tabs.", "preference", 0.6),
        ("I think the staging database is shared.", "fact", 0.6),
        ("Not sure the nightly backup still runs.", "fact", 0.5),
    ],
)
def test_each_sentence_gets_its_type_and_confidence_by_rule(sentence, fact_type, confidence):
    assert extract(sentence) == [(sentence, fact_type, confidence)]


def test_a_question_is_never_a_fact():
    assert extract("Does the API paginate results?") == []
    text = "Who owns the Grafana alert rules? Kenji maintains the Grafana alert rules."
    assert [content for content, _, _ in extract(text)] == [
        "Kenji maintains the Grafana alert rules."
    ]


@pytest.mark.parametrize(
    ("raw", "fact"),
    [
        (
            "From the planning meeting: Dana runs the release train.",
            "Dana runs the release train.",
        ),
        ("FYI: the staging cluster moved to eu-west-1.", "The staging cluster moved to eu-west-1."),
        ("Per the team wiki: Kenji owns ingest-worker.", "Kenji owns ingest-worker."),
        ("Heads up: billing-api deploys need a migration review.", None),
        ("Standup notes: Kenji is on leave next week.", "Kenji is on leave next week."),
        ("Bug report: the avatar field rendered raw HTML.", "The avatar field rendered raw HTML."),
        ("Release retro notes: Dana runs the release train.", "Dana runs the release train."),
        (
            "Security policy: deny SSH from the office VPN.",
            "Security policy: deny SSH from the office VPN.",
        ),
    ],
)
def test_discourse_prefixes_are_not_part_of_the_fact(raw, fact):
    expected = fact or "Billing-api deploys need a migration review."
    assert [content for content, _, _ in extract(raw)] == [expected]


def test_a_contradiction_about_another_subject_is_not_an_update():
    # Shared words and conflicting antonyms, but one is about alerts, the other about logging.
    candidates = [Candidate(1, ID1, "Debug logging is enabled for the payments service.")]
    fact = "Alerts for the payments service are disabled during the freeze"
    decision = decide(fact, candidates, {ID1: 0.6})
    assert (decision.action, decision.target_id) == ("add", None)


def test_text_is_split_into_sentences_and_short_ones_are_skipped():
    text = "Ok. Alice uses Vim, e.g. for Python.\n- Bob uses Emacs for Lisp!\n1. Nine char\n2. Ten chars!\nThanks!"
    assert [content for content, _, _ in extract(text)] == [
        "Alice uses Vim, e.g. for Python.",
        "Bob uses Emacs for Lisp!",
        "Ten chars!",
    ]


def test_repeated_sentences_become_one_fact():
    assert (
        len(extract("The cache lives in Redis. The cache lives in Redis! the cache lives in redis"))
        == 1
    )


def test_truncation_marker_from_prepare_input_is_not_a_fact():
    assert extract("The billing service listens on port 8080.\n[truncated]") == [
        ("The billing service listens on port 8080.", "fact", 0.8)
    ]


def test_at_most_twenty_facts_are_produced():
    text = " ".join(f"Service number {i} listens on port {8000 + i}." for i in range(30))
    assert len(extract(text)) == 20


@pytest.mark.parametrize(
    ("sentence", "triples"),
    [
        ("Alice uses Vim.", [EntityTriple("Alice", "unknown", "uses", "Vim", "tool", 0.7)]),
        (
            "Bob maintains the billing service for the payments team.",
            [EntityTriple("Bob", "person", "maintains", "billing service", "project", 0.7)],
        ),
        (
            "The Billing Service decided to use PostgreSQL in March.",
            [
                EntityTriple(
                    "Billing Service", "unknown", "decided_to_use", "PostgreSQL", "tool", 0.7
                )
            ],
        ),
        (
            "Alice prefers dark mode and Bob uses Emacs.",
            [
                EntityTriple("Alice", "person", "prefers", "dark mode", "unknown", 0.7),
                EntityTriple("Bob", "unknown", "uses", "Emacs", "tool", 0.7),
            ],
        ),
        ("The team uses Docker for builds.", []),
    ],
)
def test_simple_name_verb_object_sentences_become_entity_triples(sentence, triples):
    _, entities, _ = parse_extraction(offline.extract_reply(sentence))
    assert entities == triples


def test_extraction_reply_is_plain_model_json():
    reply = json.loads(offline.extract_reply("Alice uses Vim for Python."))
    assert set(reply) == {"facts", "entities"}
    assert set(reply["entities"][0]) == {
        "source",
        "source_type",
        "relationship",
        "target",
        "target_type",
        "confidence",
    }


# --- Decisions -----------------------------------------------------------------------------

ID1, ID2 = "11111111-1111-4111-8111-111111111111", "22222222-2222-4222-8222-222222222222"


def decide(fact_text: str, candidates: list[Candidate], similarities: dict[str, float]) -> Decision:
    reply = offline.decide_reply(Fact(fact_text, "fact", 0.85), candidates, similarities)
    decision, warnings = parse_decision(reply, candidates)
    assert warnings == []
    return decision


def test_no_candidates_means_add_with_the_fact_confidence():
    assert decide("The cache lives in Redis", [], {}) == Decision(
        "add", None, 0.85, "No existing memories match this fact"
    )


def test_same_text_after_normalisation_means_none():
    candidates = [
        Candidate(1, ID1, "Unrelated memory about CI"),
        Candidate(2, ID2, "the cache lives in redis!"),
    ]
    decision = decide("The cache lives in Redis.", candidates, {ID1: 0.9, ID2: 0.2})
    # NONE names the memory that already says it.
    assert (decision.action, decision.target_id, decision.confidence) == ("none", ID2, 1.0)
    assert decision.reason == "Identical to existing memory [2]"


def test_contradicted_similar_candidate_is_updated_and_the_reason_says_why():
    candidates = [Candidate(1, ID1, "Dark mode is enabled in the admin dashboard")]
    decision = decide("Dark mode is disabled in the admin dashboard", candidates, {ID1: 0.4})
    assert (decision.action, decision.target_id) == ("update", ID1)
    assert '"disabled"' in decision.reason and '"enabled"' in decision.reason


def test_contradiction_with_a_dissimilar_candidate_is_ignored():
    candidates = [Candidate(1, ID1, "Dark mode is enabled in the admin dashboard")]
    decision = decide("Dark mode is disabled in the admin dashboard", candidates, {ID1: 0.2})
    assert (decision.action, decision.target_id) == ("add", None)


@pytest.mark.parametrize(
    ("fact_text", "candidate_text", "similarity", "action", "target"),
    [
        (
            "Alice prefers dark mode in VS Code",
            "Alice likes a dark theme in VS Code",
            0.85,
            "none",
            ID1,
        ),
        (
            "Alice prefers dark mode in VS Code and Vim",
            "Alice prefers dark mode",
            0.6,
            "update",
            ID1,
        ),
        ("Alice prefers dark mode", "Alice prefers dark mode in VS Code and Vim", 0.6, "add", None),
        (
            "Alice prefers dark mode in VS Code and Vim",
            "Alice prefers dark mode",
            0.45,
            "add",
            None,
        ),
    ],
    ids=["covered", "richer-update", "poorer-add", "too-far-add"],
)
def test_similarity_thresholds_pick_none_update_or_add(
    fact_text, candidate_text, similarity, action, target
):
    decision = decide(fact_text, [Candidate(1, ID1, candidate_text)], {ID1: similarity})
    assert (decision.action, decision.target_id) == (action, target)


def test_a_rewording_adds_no_detail_to_update_with():
    candidates = [
        Candidate(
            1, ID1, "Marco owns auth-service. Ping him before touching the session token format."
        )
    ]
    fact = "Marco is the owner of auth-service, so check with him before changing the session token format."
    assert decide(fact, candidates, {ID1: 0.6}).action == "add"


def test_a_memory_said_again_with_more_in_it_is_updated_even_when_very_similar():
    candidates = [
        Candidate(1, ID1, "Priya maintains billing-api and reviews every schema migration.")
    ]
    fact = (
        "Priya maintains billing-api and reviews every schema migration, plus the Stripe webhook "
        "handlers and the nightly reconciliation job."
    )
    decision = decide(fact, candidates, {ID1: 0.85})
    assert (decision.action, decision.target_id) == ("update", ID1)
    assert decision.reason == "Adds detail to memory [1]"


def test_decision_targets_the_most_similar_candidate_by_number():
    candidates = [
        Candidate(1, ID1, "Alice likes a dark theme"),
        Candidate(2, ID2, "Alice likes a dark theme in VS Code"),
    ]
    reply = json.loads(
        offline.decide_reply(
            Fact("Alice prefers dark mode", "fact", 0.8), candidates, {ID1: 0.81, ID2: 0.9}
        )
    )
    assert reply == {
        "action": "none",
        "targetId": 2,
        "confidence": 0.9,
        "reason": "Already covered by memory [2]",
    }


def test_replies_are_deterministic():
    text = "Alice prefers dark mode. We decided to use Postgres. Maybe the cache is slow? Bob uses Emacs."
    assert offline.extract_reply(text) == offline.extract_reply(text)
    fact = Fact("Dark mode is disabled in the admin dashboard", "fact", 0.8)
    candidates = [
        Candidate(1, ID1, "Dark mode is enabled in the admin dashboard"),
        Candidate(2, ID2, "Dark mode"),
    ]
    forward = offline.decide_reply(fact, candidates, {ID1: 0.6, ID2: 0.6})
    assert forward == offline.decide_reply(fact, candidates, {ID2: 0.6, ID1: 0.6})
    assert forward == offline.decide_reply(fact, list(reversed(candidates)), {ID1: 0.6, ID2: 0.6})
    assert json.loads(forward)["targetId"] == 1


def test_a_close_score_does_not_cover_a_fact_that_names_something_the_memory_does_not():
    candidates = [Candidate(1, ID1, "Priya maintains the ledger service for finance.")]
    decision = decide("Priya maintains the billing-api service.", candidates, {ID1: 0.85})
    assert (decision.action, decision.target_id) == ("add", None)
    same_names = decide("Priya maintains the ledger service.", candidates, {ID1: 0.85})
    assert (same_names.action, same_names.target_id) == ("none", ID1)
