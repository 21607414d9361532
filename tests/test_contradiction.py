"""pipeline.contradiction: one test per rule of the syntactic detector."""

from __future__ import annotations

import json
from pathlib import Path

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


def test_an_antonym_said_as_a_switch_is_named_as_the_text_says_it():
    """ "switched off" reads as "disabled" for the pair, but the reason and the pair the page
    marks name the words the texts use (the reason said "disabled", which neither text holds)."""
    found = detect("SSO is switched off in staging", "SSO login is turned on for staging")
    assert found.antonym_pair == ("switched off", "turned on")
    assert 'the new fact says "switched off", the existing memory says "turned on"' in found.reason
    assert "disabled" not in found.reason and "enabled" not in found.reason


def test_the_page_marks_both_words_of_a_switch_as_the_conflict():
    from dashboard.templatetags.curation import contradiction_marks

    found = detect("SSO is switched off in staging", "SSO login is turned on for staging")
    marked = str(contradiction_marks("SSO is switched off in staging", found.as_dict()))
    assert '<mark class="conflict">switched</mark>' in marked
    assert '<mark class="conflict">off</mark>' in marked


def test_the_page_marks_the_end_a_retraction_says_as_the_conflict():
    from dashboard.templatetags.curation import contradiction_marks

    fact = "The old build farm was phased out"
    found = detect(fact, "The old build farm runs the Android builds")
    assert (found.kind, found.ended) == ("retraction", "phased out")
    marked = str(contradiction_marks(fact, found.as_dict()))
    assert '<mark class="conflict">phased</mark>' in marked
    assert '<mark class="conflict">out</mark>' in marked


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
    assert found.reason == (
        "No one-sided negation, no conflicting antonyms, no reversal, no retraction and no "
        "narrowed scope"
    )


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
        "ended": None,
        "reason": found.reason,
    }
    assert Contradiction(False, None, [], None, None, "x").as_dict()["antonymPair"] is None


# --- Issue 10 item 5: stems, hyphenated and "unable" negations, constrained prepositions ---------


@pytest.mark.parametrize(
    ("fact", "existing", "pair"),
    [
        (
            "The firewall allows SSH from the office network",
            "The firewall denies SSH from the office network",
            ("allows", "denies"),
        ),
        ("Dave and Erin live apart", "Dave and Erin live together", ("apart", "together")),
        ("Frank is divorced from Grace", "Frank is married to Grace", ("divorced", "married")),
        (
            "The search index is unencrypted at rest",
            "The search index is encrypted at rest",
            ("unencrypted", "encrypted"),
        ),
    ],
)
def test_antonyms_match_in_any_word_form(fact, existing, pair):
    found = detect(fact, existing)
    assert (found.flagged, found.kind, found.antonym_pair) == (True, "antonym", pair)


@pytest.mark.parametrize(
    ("fact", "existing", "word"),
    [
        ("Bob is no-longer the on-call lead", "Bob is the on-call lead", "no"),
        (
            "Carol is unable to access the prod database",
            "Carol can access the prod database",
            "unable",
        ),
    ],
)
def test_hyphenated_and_unable_negations_are_negations(fact, existing, word):
    found = detect(fact, existing)
    assert (found.flagged, found.kind, found.negated_side) == (True, "negation", "fact")
    assert f'("{word}")' in found.reason


def test_a_negation_of_something_the_other_side_does_not_say_is_not_a_conflict():
    assert (
        detect("Alice does not drink coffee", "Alice drinks green tea every morning").flagged
        is False
    )
    assert (
        detect("Alice does not drink coffee", "Alice drinks coffee every morning").flagged is True
    )


@pytest.mark.parametrize(
    ("fact", "existing", "flagged"),
    [
        ("Bob turned off alerts for the ops channel", "Bob is on call for the ops channel", False),
        ("The backup job runs after midnight", "The backup job runs before the deploy job", False),
        (
            "Rate limiting is turned off for internal clients",
            "Rate limiting is turned on for internal clients",
            True,
        ),
        ("The VPN is up for the Berlin office", "The VPN is down for the Berlin office", True),
    ],
)
def test_prepositional_pairs_only_conflict_in_the_same_place(fact, existing, flagged):
    assert detect(fact, existing).flagged is flagged


def test_one_stop_word_list_serves_search_the_linker_and_the_pipeline():
    from memory import keyword, linker, words
    from pipeline import grounding

    assert STOP_WORDS is words.STOP_WORDS and NEGATIONS is words.NEGATIONS
    assert grounding.STOP_WORDS is words.STOP_WORDS
    assert keyword.STOP_WORDS == words.STOP_WORDS | words.NEGATIONS
    assert words.STOP_WORDS | words.NEGATIONS <= linker.SKIP_WORDS


# (new fact, existing memory, is a contradiction): the kind of memories agents store. Value changes
# ("port 8080" -> "port 9090") are left out: no word list can see those.
LABELLED_PAIRS = [
    # --- contradictions: config rules ---
    (
        "The firewall allows SSH from the office network",
        "The firewall denies SSH from the office network",
        True,
    ),
    (
        "The staging firewall denied inbound traffic on port 22",
        "The staging firewall allows inbound traffic on port 22",
        True,
    ),
    (
        "Dark mode is enabled for the admin dashboard",
        "Dark mode was disabled for the admin dashboard",
        True,
    ),
    ("The main repository disables auto-merge", "The main repository enables auto-merge", True),
    (
        "Deploys to production are never allowed on Fridays",
        "Deploys to production are allowed on Fridays",
        True,
    ),
    (
        "The API gateway accepts requests without a token",
        "The API gateway rejects requests without a token",
        True,
    ),
    (
        "Two-factor authentication is required for admin accounts",
        "Two-factor authentication is optional for admin accounts",
        True,
    ),
    ("The billing service API is public", "The billing service API is private", True),
    (
        "The feature flag new_checkout is on in production",
        "The feature flag new_checkout is off in production",
        True,
    ),
    (
        "Rate limiting is turned off for internal clients",
        "Rate limiting is turned on for internal clients",
        True,
    ),
    (
        "Database backups run before the nightly deploy",
        "Database backups run after the nightly deploy",
        True,
    ),
    ("The staging cluster scales up at night", "The staging cluster scales down at night", True),
    ("The VPN is up for the Berlin office", "The VPN is down for the Berlin office", True),
    (
        "The password policy allows reuse of old passwords",
        "The password policy forbids reuse of old passwords",
        True,
    ),
    ("The search index is encrypted at rest", "The search index is unencrypted at rest", True),
    ("The cron job for invoices isn't enabled", "The cron job for invoices is enabled", True),
    ("Signups are open for the beta program", "Signups are closed for the beta program", True),
    ("Staging uses synchronous replication", "Staging uses asynchronous replication", True),
    (
        "The legacy importer is supported on Windows",
        "The legacy importer is unsupported on Windows",
        True,
    ),
    ("The v1 export endpoint is active", "The v1 export endpoint is inactive", True),
    (
        "The cache layer was removed from the search service",
        "The cache layer was added to the search service",
        True,
    ),
    ("The docs site does not use Google Analytics", "The docs site uses Google Analytics", True),
    (
        "The CI pipeline passed on the release branch",
        "The CI pipeline failed on the release branch",
        True,
    ),
    ("The payments API is online", "The payments API is offline", True),
    ("Wei unlocked the release branch", "Wei locked the release branch", True),
    # --- contradictions: people ---
    ("Alice no longer works on the billing team", "Alice works on the billing team", True),
    (
        "Bob is no-longer the on-call lead for payments",
        "Bob is the on-call lead for payments",
        True,
    ),
    (
        "Carol is unable to access the production database",
        "Carol can access the production database",
        True,
    ),
    ("Dave and Erin live apart", "Dave and Erin live together", True),
    ("Frank is divorced from Grace", "Frank is married to Grace", True),
    ("Ivan isn't a member of the security team", "Ivan is a member of the security team", True),
    ("Lena cannot approve production deploys", "Lena can approve production deploys", True),
    ("Mateo rejected the offer from Acme", "Mateo accepted the offer from Acme", True),
    ("Sara and Tom are no longer married", "Sara and Tom are married", True),
    ("Uma is unavailable for on-call next week", "Uma is available for on-call next week", True),
    # --- contradictions: schedules ---
    ("Kenji always reviews database migrations", "Kenji never reviews database migrations", True),
    ("The mobile team never ships on Mondays", "The mobile team always ships on Mondays", True),
    (
        "Nina will not attend the Thursday planning meeting",
        "Nina will attend the Thursday planning meeting",
        True,
    ),
    ("Julia has stopped running the weekly demo", "Julia started running the weekly demo", True),
    (
        "The Friday retro is cancelled for the platform team",
        "The Friday retro is scheduled for the platform team",
        True,
    ),
    # --- contradictions: preferences ---
    ("Priya avoids squash merges", "Priya prefers squash merges", True),
    (
        "Priya dislikes squash merges for feature branches",
        "Priya likes squash merges for feature branches",
        True,
    ),
    ("Hana doesn't drink coffee in the morning", "Hana drinks coffee in the morning", True),
    (
        "Omar hates tabs for indentation in Go files",
        "Omar loves tabs for indentation in Go files",
        True,
    ),
    ("Quinn wants fewer meetings on Wednesdays", "Quinn wants more meetings on Wednesdays", True),
    # --- not contradictions: same topic, compatible ---
    (
        "The firewall allows SSH from the office network",
        "The firewall allows HTTPS from the office network",
        False,
    ),
    ("Alice works on the billing team", "Alice leads the billing team standup", False),
    ("Alice does not drink coffee", "Alice drinks green tea every morning", False),
    (
        "The billing service does not log card numbers",
        "The billing service logs request ids",
        False,
    ),
    ("Dave doesn't attend the Monday standup", "Dave attends the Friday demo", False),
    ("Kenji is not available on weekends", "Kenji is available on weekdays", False),
    ("Rosa doesn't use tabs; she uses spaces", "Rosa uses spaces for indentation", False),
    ("The backup script no longer needs root", "The backup script runs as root", False),
    ("Sam never deploys on Fridays", "Sam deploys the billing service on Tuesdays", False),
    (
        "The deploy bot cannot merge without approval",
        "The deploy bot merges after approval from two reviewers",
        False,
    ),
    (
        "The old importer is not used anymore",
        "The old importer used to crash on large files",
        False,
    ),
    (
        "The staging cluster doesn't autoscale at night",
        "The staging cluster doesn't autoscale on weekends",
        False,
    ),
    (
        "Julia never uses the staging database for load tests",
        "Julia never uses production for load tests",
        False,
    ),
    (
        "Tara prefers Postgres for new services",
        "Tara prefers PostgreSQL for all new services",
        False,
    ),
    (
        "Staging is locked during the release freeze",
        "Production is locked during the release freeze",
        False,
    ),
    (
        "Erin enabled two-factor authentication on her laptop",
        "Erin enabled disk encryption on her laptop",
        False,
    ),
    (
        "Priya prefers squash merges for small pull requests",
        "Priya prefers merge commits for large pull requests",
        False,
    ),
    ("Lena approved the migration plan", "Lena approved the rollback plan", False),
    ("Reviewers must approve schema changes", "Reviewers must approve dependency upgrades", False),
    ("Uma is married and lives in Lisbon", "Uma lives in Lisbon with her sister", False),
    # --- not contradictions: prepositions that only look like antonyms ---
    (
        "Bob turned off notifications for the alerts channel",
        "Bob is on call for the alerts channel",
        False,
    ),
    (
        "The backup job runs after midnight",
        "The backup job runs before the deploy job on weekdays",
        False,
    ),
    (
        "Carol set up the staging database",
        "Carol shut down the staging database for maintenance",
        False,
    ),
    (
        "The support team logs on to the VPN before standup",
        "The support team signs off after the retro",
        False,
    ),
    ("Ivan logs off at six on Fridays", "Ivan is on call on Fridays", False),
    ("Mateo turned on dark mode in Slack", "Mateo turned off notifications in Slack", False),
    ("Nina signed off on the release notes", "Nina is on the release team", False),
    (
        "The CI runs unit tests before integration tests",
        "The CI runs linting after unit tests",
        False,
    ),
    ("Alice moved the standup before lunch", "Alice moved the retro after lunch", False),
    (
        "Grace backs up the wiki every night",
        "Grace writes the wiki pages on the design system",
        False,
    ),
    # --- written after the rules, not tuned against ---
    ("The nightly ETL job is disabled in staging", "The nightly ETL job runs in staging", True),
    ("Marta does not own the billing runbook", "Marta owns the billing runbook", True),
    (
        "Uploads larger than the limit are rejected by the CDN",
        "Uploads larger than the limit are accepted by the CDN",
        True,
    ),
    (
        "The mobile app no longer supports offline mode",
        "The mobile app supports offline mode",
        True,
    ),
    ("Jonas prefers spaces over tabs", "Jonas prefers tabs over spaces", True),
    ("The staging database is not backed up", "The staging database is backed up nightly", True),
    (
        "Cookies are blocked on the marketing site",
        "Cookies are allowed on the marketing site",
        True,
    ),
    ("Ravi has left the data team", "Ravi is on the data team", True),
    (
        "Emails to customers are sent synchronously",
        "Emails to customers are sent asynchronously",
        True,
    ),
    ("Helga is not the owner of the auth service", "Helga is the owner of the auth service", True),
    ("The linter fails on unused imports", "The linter passes on unused imports", True),
    ("Our team stopped using Jira", "Our team started using Jira", True),
    ("Marta owns the billing runbook", "Marta updated the billing runbook last week", False),
    (
        "Uploads are rejected when they exceed the size limit",
        "Uploads are accepted in PNG and JPEG formats",
        False,
    ),
    (
        "The staging database is not shared with the analytics team",
        "The staging database is backed up nightly",
        False,
    ),
    ("Helga is not on call this week", "Helga owns the on-call rotation", False),
    ("The linter runs before every commit", "The formatter runs after every commit", False),
    ("Jonas reviews frontend pull requests", "Jonas does not review backend pull requests", False),
    (
        "Cookies are disabled in the test browser profile",
        "Cookies are enabled on the marketing site",
        False,
    ),
    ("Ravi does not like long meetings", "Ravi likes short meetings", False),
    ("The API returns errors as JSON", "The API never returns HTML error pages", False),
    # --- not contradictions: unrelated ---
    ("Alice does not drink coffee", "The CI pipeline runs on GitHub Actions", False),
    ("The deploy script is not idempotent", "Priya prefers squash merges", False),
]


def test_precision_and_recall_on_labelled_pairs():
    assert len(LABELLED_PAIRS) >= 60
    flagged = [(detect(fact, existing).flagged, truth) for fact, existing, truth in LABELLED_PAIRS]
    true_positives = sum(1 for got, truth in flagged if got and truth)
    precision = true_positives / sum(1 for got, _ in flagged if got)
    recall = true_positives / sum(1 for _, truth in flagged if truth)
    assert (precision >= 0.90, recall >= 0.85) == (True, True), (precision, recall)


# --- Issue 20 item 1: one-sided negations the other side states in other words ----------------


@pytest.mark.parametrize(
    ("fact", "existing", "word"),
    [
        # The two: "owner" / "owns", "need" / "requires", "any longer" says nothing.
        ("Alice is not the owner of the billing service", "Alice owns the billing service", "not"),
        (
            "The billing API does not need an API key any longer",
            "The billing API requires an API key",
            "not",
        ),
        (
            "Code review is not mandatory for the infra repo",
            "Code review is required for the infra repo",
            "not",
        ),
        ("Alice is not allowed to deploy to production", "Alice can deploy to production", "not"),
        ("The team stopped using Jenkins for CI", "The team uses Jenkins for CI", "stopped"),
        ("Omar has stopped running the Monday sync", "Omar runs the Monday sync", "stopped"),
        ("Bob used to work on payments", "Bob works on payments", "used to"),
        (
            "The webhook works without a shared secret",
            "The webhook needs a shared secret",
            "without",
        ),
        ("Priya no longer wants squash merges", "Priya prefers squash merges", "no"),
        (
            "Marco is no longer the owner of the payments runbook",
            "Marco owns the payments runbook",
            "no",
        ),
    ],
)
def test_a_one_sided_negation_of_the_same_statement_in_other_words_is_flagged(fact, existing, word):
    found = detect(fact, existing)
    assert (found.flagged, found.kind, found.negated_side) == (True, "negation", "fact")
    assert found.reason == f'The new fact is negated ("{word}") while the existing memory is not'
    # And the other way round: the existing memory is the negated one.
    assert detect(existing, fact).negated_side == "existing"


@pytest.mark.parametrize(
    ("fact", "existing"),
    [
        # A negated antonym says the same thing.
        ("The metrics endpoint is not enabled", "The metrics endpoint is disabled"),
        ("Uploads over 10 MB are not accepted", "Uploads over 10 MB are rejected"),
        ("The feature is not required for free users", "The feature is optional for free users"),
        ("The legacy endpoint is no longer active", "The legacy endpoint is inactive"),
        # The same words about another subject, or in another place.
        ("Alice is not on the billing team", "Bob is on the billing team"),
        ("Marta does not own the search service", "Kenji owns the search service"),
        ("The desktop client doesn't cache images", "The web client caches images"),
        ("Dark mode is disabled in the web app", "Dark mode is enabled in the mobile app"),
        ("Bob never reviews frontend changes", "Alice always reviews frontend changes"),
        ("Tom doesn't use Vim for Go", "Tom uses Vim for Python"),
        # "used to" is itself a "no longer"; "production is not" is about production.
        ("The old importer is no longer used", "The old importer used to crash on big files"),
        ("Bob doesn't work on payments", "Bob used to work on payments"),
        (
            "Staging is deployed automatically, production is not",
            "Staging is deployed automatically",
        ),
        # "is used to" and "stopped the" are no negation.
        ("Sphinx is used to build the docs site", "Sphinx builds the docs site"),
        ("Bob stopped the deploy of the billing service", "Bob deploys the billing service"),
    ],
)
def test_negations_that_agree_or_speak_of_something_else_are_not_flagged(fact, existing):
    found = detect(fact, existing)
    assert found.flagged is False, found.reason
    assert detect(existing, fact).flagged is False


def test_a_detail_only_one_side_adds_does_not_hide_the_conflict():
    # Several sentences, each side going on differently after the conflict (demo memories).
    assert detect(
        "Debug logging is on in production for billing-api until the rounding bug is found.",
        "Debug logging is off in production for billing-api. Turn it up in staging for traces.",
    ).flagged
    assert detect(
        "The Redis cluster for sessions has persistence disabled to cut write latency.",
        "The Redis cluster for sessions has persistence enabled with AOF fsync every second.",
    ).flagged
    assert detect(
        "Alice no longer owns the billing service", "Alice owns the billing service since 2023"
    ).flagged


# Written for this round's tuning, after a fourth blind set missed antonyms the lists lacked, a
# scope narrowed without a negation and an end said with a date (its pairs were not copied).
@pytest.mark.parametrize(
    ("fact", "existing"),
    [
        ("Marta dislikes pairing on Fridays", "Marta prefers pairing on Fridays"),
        (
            "Schema migrations are applied manually by the DBA",
            "Schema migrations are applied automatically on deploy",
        ),
        ("Feature flags are static at build time", "Feature flags are dynamic at runtime"),
        ("The review policy for hotfixes is lenient", "The review policy for hotfixes is strict"),
        ("The cache entries are temporary", "The cache entries are permanent"),
        ("Log volumes are ephemeral on the workers", "Log volumes are persistent on the workers"),
        ("Kenji left the platform team", "Kenji joined the platform team"),
        (
            "The frontend guild opposes server-side rendering",
            "The frontend guild favors server-side rendering",
        ),
        (
            "Security discourages personal access tokens",
            "Security recommends personal access tokens",
        ),
        ("The staging database is cheap to run", "The staging database is expensive to run"),
        ("We rarely rotate the signing keys", "We often rotate the signing keys"),
        ("Nobody on the team uses Vim", "Everyone on the team uses Vim"),
        ("Config files are immutable after release", "Config files are mutable after release"),
        ("Dana works remotely", "Dana works onsite"),
        (
            "CI runs the integration tests only on release PRs",
            "CI runs the integration tests on every PR",
        ),
        ("Only the ops team can read the runbooks", "Anyone in the company can read the runbooks"),
        ("Everyone can deploy to staging", "Only the release managers can deploy to staging"),
        ("All services log to Loki", "Only the billing service logs to Loki"),
        ("Production access is restricted to the SRE team", "Every engineer has production access"),
        ("The deploy freeze ended on December 20", "The deploy freeze holds until the release"),
        ("Our Datadog contract expired in March", "Our Datadog contract covers all environments"),
        ("The beta program concluded last week", "The beta program runs with ten customers"),
    ],
)
def test_more_antonyms_a_narrowed_or_widened_scope_and_an_end_of_its_subject_are_flagged(
    fact, existing
):
    assert detect(fact, existing).flagged


@pytest.mark.parametrize(
    ("fact", "existing"),
    [
        (
            "Only the ops team can rotate the vault keys",
            "The ops team rotates the vault keys monthly",
        ),
        ("Every PR needs one approval and release PRs need two", "Every PR needs one approval"),
        ("The standup ends at 10:15", "The standup starts at 10:00 in the big room"),
        ("The sprint ends on Friday", "The sprint lasts two weeks"),
        (
            "Marta prefers pairing on Fridays and dislikes meetings",
            "Marta prefers pairing on Fridays",
        ),
        ("The SDK supports streaming uploads since 2.3", "The SDK supports streaming uploads"),
        ("Kenji joined the platform team in May", "Kenji works on the platform team"),
        ("The trial license expires in 30 days", "The trial license covers five seats"),
        ("Only billing uses the EU region", "Billing runs in the EU region"),
        ("All services log to Loki; only billing also logs to Datadog", "All services log to Loki"),
        ("Temporary credentials last one hour", "Permanent credentials are banned for CI"),
        (
            "We often rotate the signing keys and rarely the root CA",
            "We often rotate the signing keys",
        ),
        ("Only the on-call engineer gets paged at night", "Everyone gets paged for sev1 incidents"),
        ("Only admins can delete projects", "All members can create projects"),
        ("The read-only replica serves all dashboards", "All dashboards read from the replica"),
        ("Only Go services use the shared linter config", "All Python services use ruff"),
        (
            "The old contract expired and a new one covers all environments",
            "Our contract covers all environments",
        ),
        (
            "Access to prod is granted only through the bastion",
            "Every engineer reaches prod through the bastion",
        ),
    ],
)
def test_the_same_words_in_compatible_statements_are_not_flagged(fact, existing):
    assert not detect(fact, existing).flagged


# Found by a second reviewer, in their own words: "only" that says "merely" or "just then"
# against "every" or "always", and an end of what the memory tells of as past, or that went on.
@pytest.mark.parametrize(
    ("fact", "existing"),
    [
        ("CI runs the linter on every PR", "CI runs the linter only on PRs"),
        ("All PRs need one approval", "PRs need only one approval"),
        (
            "The nightly backup job always runs at 02:00",
            "The nightly backup job runs only at 02:00",
        ),
        ("We deploy only on weekdays", "We always deploy on weekdays"),
        (
            "The release manager always tags the release",
            "Only the release manager tags the release",
        ),
        ("The job retries only twice", "The job always retries twice"),
        ("The cron job runs only once a day", "The cron job always runs once a day"),
        ("Everyone agreed to use Postgres", "Only Postgres is used"),
        ("Every deploy goes through staging", "Deploys go through staging only"),
        ("Only staging deploys are automatic", "Staging deploys are always automatic"),
        ("The trial expired for Acme and we renewed it", "The trial for Acme covers ten seats"),
        (
            "The lease on the build server expired and was renewed",
            "The lease on the build server is paid by IT",
        ),
        ("Kenji's internship ended in August", "Kenji's internship project was the CLI"),
    ],
)
def test_only_as_merely_and_an_end_of_what_was_or_goes_on_are_not_flagged(fact, existing):
    assert not detect(fact, existing).flagged


@pytest.mark.parametrize(
    "existing",
    [
        "The Acme contract covers unlimited seats",
        "The Acme contract includes a dedicated support engineer",
        "The Acme contract needs a signed order form",
    ],
)
def test_an_end_is_flagged_against_a_memory_whose_words_in_ed_are_states_not_a_past(existing):
    """A second reviewer: "told as past" took any word in "-ed" for a past tense ("unlimited",
    "dedicated"), and the contract's end went unflagged; only its helpers tell a past now."""
    assert detect("The Acme contract expired in March", existing).kind == "retraction"


def test_a_scope_names_its_two_words_and_which_side_narrows():
    found = detect(
        "Only the ops team can read the runbooks", "Anyone in the company can read the runbooks"
    )
    assert (found.kind, found.negated_side, found.antonym_pair) == (
        "scope",
        "fact",
        ("only", "anyone"),
    )
    assert (
        found.reason == 'The new fact narrows the scope: "only" on one side, "anyone" on the other'
    )
    widened = detect(
        "Everyone can deploy to staging", "Only the release managers can deploy to staging"
    )
    assert (widened.kind, widened.negated_side) == ("scope", "existing")
    assert widened.reason.startswith("The new fact widens the scope")


FIXTURES = Path(__file__).parent / "fixtures"


def _labelled(name: str) -> list[dict]:
    path = FIXTURES / f"contradiction_pairs_{name}.jsonl"
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line]


def _precision_recall(rows: list[dict]) -> tuple[float, float]:
    got = [(detect(row["new"], row["existing"]).flagged, row["contradicts"]) for row in rows]
    true_positives = sum(1 for flagged, truth in got if flagged and truth)
    return (
        true_positives / sum(1 for flagged, _ in got if flagged),
        true_positives / sum(1 for _, truth in got if truth),
    )


def test_the_labelled_pair_files_are_disjoint_and_varied():
    tune, held_out = _labelled("tune"), _labelled("heldout")
    assert len(tune) + len(held_out) >= 200 and len(held_out) >= 100
    key = lambda row: (row["existing"], row["new"])  # noqa: E731
    assert not {key(r) for r in tune} & {key(r) for r in held_out}
    for rows in (tune, held_out):
        assert {r["kind"] for r in rows} == {r["kind"] for r in tune + held_out}
        assert 0.4 <= sum(r["contradicts"] for r in rows) / len(rows) <= 0.6


@pytest.mark.parametrize("name", ["heldout", "tune"])
def test_precision_and_recall_on_the_labelled_pair_files(name):
    # Written before the detector changed; tuned on "tune" only. Measured before: tune 0.79 /
    # 0.80, held-out 0.80 / 0.87; after: tune 1.00 / 0.95, held-out 0.93 / 0.92. The retraction
    # rule left held-out at 0.935 / 0.951 and raised tune's recall to 0.96.
    precision, recall = _precision_recall(_labelled(name))
    assert (precision >= 0.90, recall >= 0.85) == (True, True), (precision, recall)


# Two sets written by others, blind to the detector and to the sets above (issue: the detector
# scored 0.46 recall on the first, against 0.92 on its own held-out set). "others_tune" was
# tuned on; "others_heldout" was written before that tuning began and only measured after it.
# A changed value ("port 8080" / "port 8081") is an ordinary UPDATE, which the detector leaves
# alone by design: those pairs are left out. Measured before -> after: others_tune 0.905 / 0.463
# -> 0.938 / 0.732; others_heldout 0.886 / 0.456 -> 0.900 / 0.529. Then an end said without a
# negation ("was decommissioned", "the freeze was lifted") became a retraction, shaped by
# others_tune's misses (-> 0.944 / 0.829); others_heldout went to 0.917 / 0.647, and a third
# blind set, "others_third", written before that rule and measured only before and after it,
# from 0.941 / 0.400 to 0.957 / 0.550; after a second reviewer's false alarms were fixed (what
# an active verb ended must be what the memory says; plans, states and falling values are no
# end) it reads 0.955 / 0.525, the others unchanged. More antonyms, a narrowed scope and an end
# said of its subject (tuned on examples of our own, the figures of these sets watched for false
# alarms, never their pairs) left others_tune and others_third as they were and took
# others_heldout to 0.922 / 0.691.
OTHERS_FLOORS = {
    "others_tune": (0.94, 0.82),
    "others_heldout": (0.92, 0.69),
    "others_third": (0.95, 0.52),
}


@pytest.mark.parametrize("name", sorted(OTHERS_FLOORS))
def test_precision_and_recall_on_pairs_written_by_others(name):
    rows = _labelled(name)
    assert len(rows) == 160 and sum(r["contradicts"] for r in rows) == 80
    judged = [r for r in rows if not (r["contradicts"] and r["kind"] == "value-change")]
    precision, recall = _precision_recall(judged)
    low_precision, low_recall = OTHERS_FLOORS[name]
    assert (precision >= low_precision, recall >= low_recall) == (True, True), (precision, recall)


def test_precision_and_recall_on_a_fourth_blind_set():
    """20 pairs (16 contradictions) a QA helper wrote to attack full mode, measured once when
    they came: 1.000 / 0.5625. Its misses were antonyms the word lists lacked, a scope narrowed
    without a negation and an end said as a date; the next round wrote examples of its own of
    those three kinds (not this set's pairs) and tuned on them: 1.000 / 0.8125. This set is no
    longer blind: it named what to work on."""
    precision, recall = _precision_recall(_labelled("others_fourth"))
    assert (precision >= 0.99, recall >= 0.81) == (True, True), (precision, recall)


def test_precision_and_recall_on_a_fifth_blind_set_measured_before_and_after_tuning():
    """160 pairs (80 contradictions, none a mere changed value) a helper wrote before the
    round's tuning, blind to the detector and to every set, and measured only before and after
    it, never read: 0.795 / 0.388 before, 0.837 / 0.512 after. Recall on sets written by
    others stays near half: a reviewer sees the rest only when the model flags them."""
    rows = _labelled("others_fifth")
    assert len(rows) == 160 and sum(r["contradicts"] for r in rows) == 80
    precision, recall = _precision_recall(rows)
    assert (precision >= 0.83, recall >= 0.51) == (True, True), (precision, recall)


@pytest.mark.parametrize(
    ("fact", "existing"),
    [
        ("The nightly export job was retired in June", "The nightly export job writes to S3"),
        ("We scrapped the staging freeze", "The staging freeze holds until the release"),
        ("The on-call bonus got discontinued this year", "Engineers get an on-call bonus"),
        ("The shared dev database was shut down", "The shared dev database runs on pg-dev-2"),
        ("The VPN requirement for the wiki has been lifted", "The wiki requires the VPN"),
        ("The old build farm was phased out", "The old build farm runs the Android builds"),
        # Found by a second reviewer: "got", an adverb before the verb, what an active verb
        # ended before a preposition, and an end from a place.
        ("The hiring freeze got lifted", "The hiring freeze stays in effect"),
        ("The staging cluster got shut down on Friday", "The staging cluster lives in eu-west-1"),
        ("The legacy VPN was finally decommissioned", "The legacy VPN serves contractors"),
        ("The v1 API has been officially retired", "The v1 API serves the mobile clients"),
        ("The team dropped Jenkins for GitHub Actions", "The team builds with Jenkins"),
        (
            "The mobile redesign was dropped from the roadmap",
            "The mobile redesign is on the roadmap",
        ),
    ],
)
def test_an_end_said_without_a_negation_is_a_retraction(fact, existing):
    found = detect(fact, existing)
    assert (found.flagged, found.kind, found.negated_side) == (True, "retraction", "fact")
    assert "ended" in found.reason


@pytest.mark.parametrize(
    ("fact", "existing"),
    [
        # A schedule, an adjective, a negated end, an end on both sides, the memory negated,
        # and another thing that ended.
        ("The staging cluster is shut down every night", "The staging cluster runs the demos"),
        ("The deprecated v1 API serves the mobile app", "The v1 API serves the mobile app"),
        ("The quarterly review was not cancelled", "The quarterly review is on Friday"),
        ("The old cron host was decommissioned", "The old cron host will be decommissioned"),
        ("The wiki was archived", "The wiki is no longer edited"),
        ("The Jenkins staging runner was retired", "The GitHub staging runner builds releases"),
        # Found by a second reviewer: what an active verb ended is not what the memory says, a
        # qualifier before the verb, a value that fell, a state, a plan, a habit, a policy.
        ("The payments team cancelled the Thursday retro", "The payments team owns checkout"),
        ("The data team deleted the staging bucket", "The data team uses BigQuery"),
        (
            "The staging cluster in eu-west was decommissioned",
            "The staging cluster in us-east runs",
        ),
        ("The hiring freeze for engineering was lifted", "The hiring freeze for sales stays"),
        ("p99 latency dropped to 40ms", "p99 latency is 120ms"),
        ("TLS is terminated at the load balancer", "nginx handles TLS at the load balancer"),
        ("The v1 API will be deprecated in June", "The v1 API serves the mobile app"),
        ("We plan to shut down the legacy cluster", "The legacy cluster runs batch jobs"),
        ("We shut down the staging cluster at night", "The staging cluster runs the demos"),
        ("Old tickets are archived after 90 days", "Old tickets stay in the queue"),
        ("Removed features are listed in the changelog", "The changelog lists features"),
        ("The password length was dropped from 16 to 12", "The password length is 16"),
        ("The rate limit was lifted to 1000 a minute", "The rate limit is 100 a minute"),
    ],
)
def test_what_only_looks_like_an_end_is_no_retraction(fact, existing):
    found = detect(fact, existing)
    assert not (found.flagged and found.kind == "retraction"), found.reason


@pytest.mark.parametrize(
    ("fact", "existing", "kind"),
    [
        ("SSO is switched off in staging", "SSO login is turned on for staging", "antonym"),
        ("Priya prefers spaces over tabs", "Priya prefers tabs over spaces", "reversal"),
        ("Priya reports directly to Kenji", "Kenji reports directly to Priya", "reversal"),
        (
            "Marta isn't on call this week; Diego is",
            "Marta is the on-call engineer this week",
            "negation",
        ),
        (
            "Queries hit the primary database, not read replicas",
            "Queries are served by read replicas",
            "negation",
        ),
        (
            "Marco approves access requests now; Elena no longer does",
            "Elena approves access requests",
            "negation",
        ),
    ],
)
def test_swaps_switches_and_corrections_are_flagged(fact, existing, kind):
    found = detect(fact, existing)
    assert (found.flagged, found.kind) == (True, kind), found.reason


@pytest.mark.parametrize(
    ("fact", "existing"),
    [
        ("Kenji and Priya own billing", "Priya and Kenji own billing"),
        ("Priya works with Kenji on billing", "Kenji works with Priya on billing"),
        # Found by a second reviewer: a negation with only empty words after it, a "not" after a
        # word of no meaning, another person's order, both orders said, another reporting line.
        ("The billing migration is not done yet", "The billing migration is scheduled for Friday"),
        ("The billing service does not have any", "The billing service has a dedicated database"),
        ("Alice is also not on the billing team", "Bob is on the billing team"),
        ("Alice is currently not on the billing team", "Bob is on the billing team"),
        ("Bob prefers spaces over tabs", "Alice prefers tabs over spaces"),
        (
            "Alice prefers tabs over spaces",
            "Alice prefers tabs over spaces and Bob prefers spaces over tabs",
        ),
        ("Kenji reports to Priya", "Priya says Dana reports to Kenji"),
    ],
)
def test_lists_and_symmetric_relations_are_not_flagged(fact, existing):
    found = detect(fact, existing)
    assert found.flagged is False, found.reason


# --- in the pipeline's own terms: full mode holds such an UPDATE for review --------------------


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("existing", "fact", "flagged"),
    [
        ("Alice owns the billing service", "Alice is not the owner of the billing service", True),
        (
            "The billing API requires an API key",
            "The billing API does not need an API key any longer",
            True,
        ),
        # The control: an UPDATE that does not contradict is applied in full mode.
        ("Alice owns the billing service", "Alice owns the billing service and its runbook", False),
    ],
)
def test_full_mode_holds_a_one_sided_negation_for_review(fake_ollama, existing, fact, flagged):
    from memory.models import Memory, MemoryCold
    from pipeline import tasks
    from pipeline.models import Proposal
    from tests.pipeline_support import ScriptedModel, decision, raw, seed, set_mode

    set_mode("full")
    target = seed(existing)
    seed("The staging cluster lives in the eu-west-1 region")
    seed("Kenji prefers tabs over spaces in Go files")
    ScriptedModel(fake_ollama, facts=[fact], decisions={fact: decision("update", target)})
    job = raw(f"From today's notes: {fact}.").job
    tasks.process_pending()

    proposal = Proposal.objects.get(job=job)
    assert proposal.action == "update" and proposal.target_memory_id == target.id
    target.refresh_from_db()
    if flagged:
        assert proposal.status == "pending" and proposal.review_needed
        assert proposal.blocked_reason == "contradiction_review"
        assert proposal.contradiction["kind"] == "negation"
        assert target.content == existing and target.version == 1
        assert not MemoryCold.objects.exists()
    else:
        assert proposal.status == "applied" and not proposal.review_needed
        assert Memory.objects.get(id=target.id).content == fact


@pytest.mark.parametrize(
    ("fact", "existing"),
    [
        # A name that begins like a negating prefix is a name: the eval set's pinned target
        # ("Instatus" read as "in-status") was flagged once NONE decisions were checked.
        (
            "The public status page is hosted on Instatus",
            "The public status page is hosted on Statuspage",
        ),
    ],
)
def test_a_product_name_that_starts_like_a_negating_prefix_is_no_antonym(fact, existing):
    assert not detect(fact, existing).flagged
    assert detect("The checkout flags are unavailable", "The checkout flags are available").flagged
