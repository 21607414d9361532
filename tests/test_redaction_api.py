"""The redaction API: `POST /api/memory/{id}/redact` with the review scope answers 200 with the
receipt's exact keys; every bad request gets the API's JSON error with the right status and
writes nothing (docs/api.md and docs/erasure.md list them)."""

from __future__ import annotations

import pytest

from memory import writes
from memory.models import Memory
from memory.writes import Actor
from tests.test_purge_api import snapshot

RECEIPT_KEYS = {
    "kind",
    "memories",
    "rows",
    "verified",
    "found",
    "repaired",
    "outOfReach",
    "event",
    "otherMemories",
    "deletedAsDuplicates",
}
TEXT = "The wifi password is BlueFalcon77 for the guest network"


def remember(text: str = TEXT, agent: str = "default") -> Memory:
    return writes.remember(
        text, actor=Actor("agent-one", "agent"), agent_id=agent, create_job=False
    ).memory


def post(client, auth, memory_id, body):
    return client.post(
        f"/api/memory/{memory_id}/redact", body, content_type="application/json", **auth
    )


@pytest.mark.django_db(transaction=True)
def test_redacting_answers_the_receipt_with_its_exact_keys(client, multi_review):
    memory = remember()
    body = {"span": "BlueFalcon77", "kind": "password", "reason": "leaked wifi password"}
    response = post(client, multi_review, memory.id, body)
    assert response.status_code == 200, response.content
    receipt = response.json()
    assert set(receipt) == RECEIPT_KEYS
    assert receipt["verified"] is True and receipt["found"] == [] and receipt["kind"] == "password"
    assert receipt["memories"] == [memory.id] and receipt["rows"]["memories"] == 1
    memory.refresh_from_db()
    assert memory.content == "The wifi password is [redacted:password] for the guest network"


@pytest.mark.parametrize(
    ("body", "status", "code"),
    [
        ({"kind": "password", "reason": "r"}, 400, "empty_span"),
        ({"span": "", "kind": "password", "reason": "r"}, 400, "empty_span"),
        ({"span": "Blu", "kind": "password", "reason": "r"}, 400, "span_too_short"),
        ({"span": "RedFalcon88", "kind": "password", "reason": "r"}, 400, "span_not_found"),
        ({"span": "BlueFalcon77", "kind": "hidden", "reason": "r"}, 400, "invalid_kind"),
        ({"span": "BlueFalcon77", "reason": "r"}, 400, "invalid_kind"),
        ({"span": "BlueFalcon77", "kind": "password"}, 400, "reason_required"),
        (
            {"span": "BlueFalcon77", "kind": "password", "reason": "BlueFalcon77"},
            400,
            "reason_holds_text",
        ),
        ({"span": 7, "kind": "password", "reason": "r"}, 400, "invalid_request"),
        ({"span": "BlueFalcon77", "kind": "password", "reason": 5}, 400, "invalid_request"),
        (
            {"span": "BlueFalcon77", "kind": "password", "reason": "r", "all": True},
            400,
            "invalid_request",
        ),
        (
            {"span": "BlueFalcon77", "kind": "password", "reason": "r", "proposalId": "nope"},
            404,
            "not_found",
        ),
    ],
)
def test_a_bad_request_gets_a_json_error_and_writes_nothing(
    client, multi_review, body, status, code
):
    memory = remember()
    before = snapshot()
    response = post(client, multi_review, memory.id, body)
    assert (response.status_code, response.json()["error"]) == (status, code), response.json()
    assert response.json()["message"]
    if code == "reason_required":  # a redaction's reason, not a purge's
        assert response.json()["message"].endswith("say why this is redacted")
    assert snapshot() == before


def test_tokens_scopes_agents_and_memories_are_checked(
    client, multi_review, review_auth, ingest_auth
):
    memory = remember()
    other = remember("Agent two's wifi password is GreenFalcon99", agent="agent-two")
    body = {"span": "BlueFalcon77", "kind": "password", "reason": "leak"}
    before = snapshot()
    assert (
        client.post(
            f"/api/memory/{memory.id}/redact", body, content_type="application/json"
        ).status_code
        == 401
    )
    assert post(client, ingest_auth, memory.id, body).status_code == 403  # no review scope
    # A token of one agent, even on its own memory (found by a QA pass: a redaction rewrote the
    # copies other agents held, and its receipt named them): an erasure needs any agent's.
    for target, span in ((memory, "BlueFalcon77"), (other, "GreenFalcon99")):
        forbidden = post(client, review_auth, target.id, {**body, "span": span})
        assert (forbidden.status_code, forbidden.json()["error"]) == (403, "forbidden")
        assert "any agent" in forbidden.json()["message"]
    missing = post(client, multi_review, "no-such-memory", body)
    assert (missing.status_code, missing.json()["error"]) == (404, "not_found")
    wrong = client.get(f"/api/memory/{memory.id}/redact", **multi_review)
    assert (wrong.status_code, wrong.json()["error"]) == (405, "method_not_allowed")
    assert snapshot() == before


@pytest.mark.django_db(transaction=True)
def test_a_purged_memory_is_a_conflict(client, multi_review, multi_admin):
    memory = remember()
    client.post(
        f"/api/memory/{memory.id}/purge",
        {"reason": "gone"},
        content_type="application/json",
        **multi_admin,
    )
    body = {"span": "BlueFalcon77", "kind": "password", "reason": "leak"}
    response = post(client, multi_review, memory.id, body)
    assert (response.status_code, response.json()["error"]) == (409, "already_purged")


@pytest.mark.django_db(transaction=True)
def test_a_token_of_one_agent_reads_its_memorys_erasures_without_other_agents_figures(
    client, multi_review, multi_admin, review_auth
):
    """Found by a QA pass: the history of a token's own memory carried the receipt of a
    redaction or a purge, which named another agent's memory holding the text and counted the
    copies there; the erasure itself needs a token that may act for any agent for that reason."""
    mine, theirs = remember(), remember("BlueFalcon77 also opens the printer", agent="other")

    def trail(auth):
        response = client.get(f"/api/memory/{mine.id}/history", **auth)
        assert response.status_code == 200
        return {row["event"]: row["metadata"] for row in response.json()["history"]}

    body = {"span": "BlueFalcon77", "kind": "password", "reason": "leaked wifi password"}
    assert post(client, multi_review, mine.id, body).json()["otherMemories"] == [theirs.id]
    full, own = trail(multi_review)["redacted"], trail(review_auth)["redacted"]
    assert theirs.id in str(full["receipt"]) and "receipt" not in own
    assert theirs.id not in str(own) and own["kind"] == "password"

    purge = client.post(
        "/api/purge",
        {"text": "guest network", "reason": "GDPR request 42 from the tenant"},
        content_type="application/json",
        **multi_admin,
    )
    assert purge.status_code == 200, purge.content
    full, own = trail(multi_review)["purged"], trail(review_auth)["purged"]
    assert {"receipt", "counts", "memories"} <= set(full)
    assert not {"receipt", "counts", "memories"} & set(own) and own["scope"] == full["scope"]

    # The export of the same memories, by an admin token of one agent: the same rule.
    from api.auth import create_token

    _, plain = create_token("default-admin", scopes=["admin"])
    response = client.get(
        "/api/export?includeHistory=true&includeDeleted=true", HTTP_AUTHORIZATION=f"Bearer {plain}"
    )
    body = b"".join(response.streaming_content).decode()
    assert mine.id in body and theirs.id not in body and '"receipt"' not in body


@pytest.mark.django_db(transaction=True)
def test_a_review_token_redacts_a_findings_span_only_and_an_admin_token_any(
    client, multi_review, multi_admin
):
    """A QA pass redacted "staging database" as a password with a review token: every copy of
    it in every agent's records became [redacted:password], irreversibly."""
    memory = remember("The staging database runs on host db-staging-02 in the eu region.")
    client.get(f"/api/memory/{memory.id}", **multi_review)  # the token's once-a-minute use stamp
    before = snapshot()
    for span, kind in (("staging database", "password"), ("eu region", "pii")):
        body = {"span": span, "kind": kind, "reason": "not a secret"}
        refused = post(client, multi_review, memory.id, body)
        assert refused.status_code == 400 and refused.json()["error"] == "span_not_a_finding"
        assert f"finds no {kind} that is this span" in refused.json()["message"]
    assert snapshot() == before
    # A finding of another kind is not one of this kind either, nor a piece of a finding (a
    # second review redacted "Falcon" from a password, and every "Falcon" with it).
    secret = remember("The wifi password is BlueFalcon77 for the guest network")
    for span, kind in (("BlueFalcon77", "address"), ("Falcon", "password")):
        body = {"span": span, "kind": kind, "reason": "r"}
        refused = post(client, multi_review, secret.id, body)
        assert refused.json()["error"] == "span_not_a_finding"
    body = {"span": "eu region", "kind": "pii", "reason": "an admin's call"}
    done = post(client, multi_admin, memory.id, body)
    assert done.status_code == 200 and done.json()["verified"]
    memory.refresh_from_db()
    assert memory.content.endswith("in the [redacted:pii].")


@pytest.mark.parametrize(
    ("match", "span", "covered"),
    [
        ("hunter2-prod", "hunter2-prod", True),
        ("12 Birchwood Lane, Leeds", "12 Birchwood Lane", True),  # most of it, in whole words
        ("hunter2-prod", "prod", False),  # a short piece: every "production" would go too
        ("12 Birchwood Lane, Leeds", "Birchwood", False),
        ("hunter2-prod", "unter2-prod", False),  # not on a word's edge
    ],
)
def test_a_reviewer_may_redact_a_finding_or_most_of_it_in_whole_words(match, span, covered):
    from pipeline.redaction import covers

    assert covers(match, span) is covered
