"""pipeline.llm.offline: heuristic replies in the model's JSON format, read back by the real parser."""

from __future__ import annotations

import json

import pytest

from pipeline.llm import offline
from pipeline.llm import offline_compare as compare
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


@pytest.mark.parametrize(
    ("raw", "fact"),
    [
        (
            "Yesterday Priya mentioned the cache is flushed nightly.",
            "The cache is flushed nightly.",
        ),
        (
            "It was mentioned in the sync that the cache TTL is 5 minutes.",
            "The cache TTL is 5 minutes.",
        ),
        (
            "We discussed in planning that the mobile team owns push notifications.",
            "The mobile team owns push notifications.",
        ),
        (
            "Carlos from the data team says the warehouse refresh takes about 3 hours.",
            "The warehouse refresh takes about 3 hours.",
        ),
        (
            "Update from Ana \u2014 the Android build is green again.",
            "The Android build is green again.",
        ),
        ("PSA the VPN is down on Friday night.", "The VPN is down on Friday night."),
        (
            "My understanding from the call is that the vendor supports SAML only.",
            "The vendor supports SAML only.",
        ),
        (
            "[09:15] <kai> the nightly build uploads to the artifacts bucket",
            "The nightly build uploads to the artifacts bucket",
        ),
        (
            "1:1 with Greta - she wants to own the onboarding docs.",
            "Greta wants to own the onboarding docs.",
        ),
        (
            "Re: the flaky test - it was caused by a timezone bug.",
            "The flaky test was caused by a timezone bug.",
        ),
    ],
)
def test_a_discourse_frame_is_recognised_by_its_form(raw, fact):
    # Speaker attributions, reporting verbs, meeting introductions, chat stamps and labels
    # phrased in ways no list holds; the statement after them is the fact.
    assert [content for content, _, _ in extract(raw)] == [fact]


@pytest.mark.parametrize(
    "sentence",
    [
        "In production, the cache is disabled.",
        "Per user, the API allows 100 requests per minute.",
        "Bob said no to Kubernetes for now.",
        "Dana explained how the release train works.",
        "Sam told the vendor about the outage.",
        "Our runbook says to restart the pods one at a time.",
        "Kafka: topics are created by Terraform.",
        "The cache - which is shared - uses Redis.",
        "Thanks to the new index, the query takes 40 ms.",
        "Welcome emails are sent by the onboarding service.",
        "Have a look at docs/runbook.md before deploying.",
        "See the runbook for rollback steps.",
        "Morning builds run at 06:00 UTC.",
        "Standups happen at 09:30 every weekday.",
    ],
)
def test_a_statement_that_only_looks_like_a_frame_or_small_talk_is_kept_whole(sentence):
    assert [content for content, _, _ in extract(sentence)] == [sentence]


@pytest.mark.parametrize(
    "text",
    [
        "Good luck with the interview tomorrow!",
        "Thx, will do",
        "Sounds great, let's do that.",
        "I'll be a bit late today, sorry!",
        "Cool cool cool",
        "Have a great vacation Pat!",
        "Merry Christmas everyone \U0001f384",
        "Morning all, hope the weekend was good. Coffee first, then we talk.",
    ],
)
def test_small_talk_is_recognised_by_its_shape_and_gives_no_fact(text):
    assert extract(text) == []


@pytest.mark.parametrize(
    ("text", "fact"),
    [
        ("Great catch, the fix is merged.", "The fix is merged."),
        ("Hey! The deploy key rotates every 90 days.", "The deploy key rotates every 90 days."),
        ("Sorry, the staging DB is down until 17:00.", "The staging DB is down until 17:00."),
    ],
)
def test_small_talk_around_a_statement_leaves_the_statement(text, fact):
    assert [content for content, _, _ in extract(text)] == [fact]


def test_the_frame_still_tells_the_type_of_the_fact():
    # "agreed" is in the frame, not in the statement: it is still a decision.
    assert extract("Jane and Omar agreed that the API freeze starts on Monday.") == [
        ("The API freeze starts on Monday.", "decision", 0.9)
    ]


def test_a_contradiction_about_another_subject_is_not_an_update():
    # Shared words and conflicting antonyms, but one is about alerts, the other about logging.
    candidates = [Candidate(1, ID1, "Debug logging is enabled for the payments service.")]
    fact = "Alerts for the payments service are disabled during the freeze"
    decision = decide(fact, candidates, {ID1: 0.6})
    assert (decision.action, decision.target_id) == ("add", None)


def test_text_is_split_into_sentences_and_short_ones_are_skipped():
    text = "Ok. Alice uses Vim, e.g. for Python.\n- Bob uses Emacs for Lisp!\n1. API is v2\n2. API is v21\nThanks!"
    assert [content for content, _, _ in extract(text)] == [
        "Alice uses Vim, e.g. for Python.",
        "Bob uses Emacs for Lisp!",
        "API is v21",
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


def test_a_memory_that_holds_the_fact_among_other_sentences_already_says_it():
    """A raw memory of several facts is a candidate too: a fact it states word for word is NONE,
    never an UPDATE that would rewrite the whole memory into this one sentence."""
    raw = (
        "Kenji deploys billing-api with Terraform every Friday. Priya prefers squash merges. "
        "Mara rotates the on-call pager on Mondays."
    )
    decision = decide(
        "Kenji deploys billing-api with Terraform every Friday.",
        [Candidate(1, ID1, raw)],
        {ID1: 0.8},
    )
    assert (decision.action, decision.target_id) == ("none", ID1)


def test_a_sentence_that_only_contains_the_fact_under_a_negation_is_not_the_same():
    negated = "It is not true that Kenji deploys billing-api with Terraform every Friday."
    fact = "Kenji deploys billing-api with Terraform every Friday."
    assert not compare.said_in(fact, negated)
    assert compare.said_in(fact, f"Priya prefers squash merges. {fact.lower()} Mara rotates.")


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


@pytest.mark.parametrize(
    ("fact_text", "memory", "action"),
    [
        # a value changes: the same statement with another value of the same kind
        (
            "The billing service now runs on port 8081.",
            "The billing service runs on port 8080.",
            "update",
        ),
        ("Logs are retained for 90 days.", "Logs are retained for 30 days.", "update"),
        ("Backups run at 03:00 UTC.", "Backups run at 01:00 UTC.", "update"),
        (
            "The ingest worker is written in Rust now.",
            "The ingest worker is written in Go.",
            "update",
        ),
        (
            "Sprint planning moved to Tuesdays at 10:00.",
            "Sprint planning happens on Mondays at 09:00.",
            "update",
        ),
        # ... said to be a change of owner, in the passive or with the old one named
        (
            "The Grafana alert rules are owned by Aiko now.",
            "Kenji owns the Grafana alert rules.",
            "update",
        ),
        (
            "Mina leads the platform team since March, taking over from Joel.",
            "Joel leads the platform team.",
            "update",
        ),
        # a refinement: everything the memory says, and more
        (
            "Priya maintains billing-api, ledger-api and the invoice worker.",
            "Priya maintains billing-api.",
            "update",
        ),
        # a reversal: the opposite state, or the same two things the other way round
        ("The nightly export is disabled.", "The nightly export is enabled.", "update"),
        ("Grace prefers tabs over spaces.", "Grace prefers spaces over tabs.", "update"),
        # a retraction: it ended, nothing in its place (an UPDATE to the retracting statement)
        (
            "The nightly export job was removed.",
            "The nightly export job uploads CSV files to S3.",
            "update",
        ),
        ("The team stopped using Jira.", "The team tracks work in Jira.", "update"),
        (
            "Nobody uses the old metrics dashboard anymore.",
            "The old metrics dashboard shows request latency per region.",
            "update",
        ),
        # the same statement in other words
        (
            "We are deploying with Argo CD in every cluster.",
            "Every cluster is deployed with Argo CD.",
            "none",
        ),
        ("The CI pipeline runs on GitHub Actions.", "Our CI runs on GitHub Actions.", "none"),
        # near misses: another subject, another thing of the subject, another attribute
        ("Ana owns the payments service.", "Ana owns the billing service.", "add"),
        (
            "The payments team owns the checkout service.",
            "The payments team owns the refunds service.",
            "add",
        ),
        (
            "Sven prefers pairing sessions in the morning.",
            "Ulla prefers pairing sessions in the morning.",
            "add",
        ),
        (
            "The orders service listens on port 9090.",
            "The inventory service listens on port 9090.",
            "add",
        ),
        ("The office in Berlin closes at 18:00.", "The office in Lisbon closes at 18:00.", "add"),
        (
            "The billing service exposes metrics on port 9100.",
            "The billing service runs on port 8080.",
            "add",
        ),
        ("Metrics are retained for 90 days.", "Logs are retained for 30 days.", "add"),
        (
            "The staging environment is shut down every night at 20:00.",
            "The staging environment runs around the clock.",
            "add",
        ),
    ],
)
def test_the_decision_reads_the_fact_against_the_memory(fact_text, memory, action):
    # The same similarity for every pair: the texts decide, as they do for a model.
    decision = decide(fact_text, [Candidate(1, ID1, memory)], {ID1: 0.7})
    assert (decision.action, decision.target_id) == (action, None if action == "add" else ID1)


def test_a_retraction_is_an_update_the_job_flags_for_review():
    from pipeline.decision import ScoredCandidate
    from pipeline.decision import decide as job_decide

    memory = Candidate(1, ID1, "The marketing site uses Google Analytics for tracking.")
    fact = Fact("The marketing site no longer uses Google Analytics.", "fact", 0.8)
    run = job_decide(
        offline.OfflineChat(), 0, fact, [ScoredCandidate(memory, 1, 0.7, None, None, False)]
    )
    assert (run.decided.action, run.decided.target.candidate.memory_id) == ("update", ID1)
    assert run.decided.reason.startswith("Replaces memory [1] (retraction)")
    assert run.decided.contradiction.flagged  # reviewNeeded: never applied without a reviewer


def test_a_negated_state_is_a_reversal_not_a_retraction():
    decision = decide(
        "Contractors are not allowed to access the production logs anymore.",
        [Candidate(1, ID1, "Contractors are allowed to access the production logs.")],
        {ID1: 0.7},
    )
    assert (decision.action, decision.target_id) == ("update", ID1)


# --- The labelled sets -----------------------------------------------------------------------

# Written before the heuristics were tuned (tests/fixtures/offline_heldout.jsonl, never tuned on)
# and the set they were tuned on. Before this work the offline model kept a discourse prefix in
# 24 / 25 facts, turned 8 / 9 chit-chat memories into facts and found 11/19 / 9/17 UPDATEs.
FLOORS = {
    "offline_tuning.jsonl": {
        "prefix_facts": 0,
        "chitchat_with_facts": 0,
        "noise_facts": 0,
        "changes_missed": 1,
        "false_destructive": 0,
        "facts_missing": 1,
        "false_none": 0,
    },
    "offline_heldout.jsonl": {
        "prefix_facts": 4,
        "chitchat_with_facts": 2,
        "noise_facts": 1,
        "changes_missed": 5,
        "false_destructive": 1,
        "facts_missing": 3,
        "false_none": 1,
    },
}


@pytest.mark.django_db
@pytest.mark.parametrize("name", sorted(FLOORS))
def test_the_offline_model_meets_its_floors_on_each_labelled_set(name):
    from tests.offline_sets import measure

    figures = measure(name)
    got = {
        "prefix_facts": figures.prefix_facts,
        "chitchat_with_facts": figures.chitchat_with_facts,
        "noise_facts": figures.noise_facts,
        "changes_missed": figures.changes_expected - figures.changes_found,
        "false_destructive": figures.false_destructive,
        "facts_missing": figures.facts_missing,
        "false_none": figures.false_none,
    }
    over = {key: (got[key], most) for key, most in FLOORS[name].items() if got[key] > most}
    assert not over, (figures.line(), over)
