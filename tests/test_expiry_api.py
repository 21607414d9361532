"""Expiry through the JSON API and MCP (issue 22, item 8): `expiresAt` on remember (ISO 8601 with
a time zone; a malformed, zone-less or past value is a 400 and nothing is written), on PATCH (null
lifts it, a past moment expires the memory now; reason and ifVersion as ever), in the memory JSON
(null when unset, with `expired`), and out of recall and lists at once."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest
from django.utils import timezone

from api.auth import create_token
from api.mcp_server import TOOLS, run_tool
from memory.models import Job, Memory, MemoryHistory

pytestmark = pytest.mark.django_db

LATER = "2099-01-31T00:00:00Z"


def post(client, url, body, auth):
    return client.post(url, json.dumps(body), content_type="application/json", **auth)


def patch(client, memory_id, body, auth):
    return client.patch(
        f"/api/memory/{memory_id}", json.dumps(body), content_type="application/json", **auth
    )


def counts():
    return (Memory.objects.count(), MemoryHistory.objects.count(), Job.objects.count())


def remember(client, auth, **body):
    response = post(client, "/api/memory/remember", {"content": "x", **body}, auth)
    assert response.status_code == 201, response.content
    return response.json()["id"]


def recall(client, auth, query):
    response = post(client, "/api/memory/recall", {"query": query}, auth)
    assert response.status_code == 200, response.content
    return [r["id"] for r in response.json()["results"]]


@pytest.fixture
def mcp():
    _, plain = create_token("mcp-agent", scopes=["ingest", "review"])

    def call(tool: str, **args):
        return run_tool(tool, args, f"Bearer {plain}", "test-client")

    return call


# --- remember and the memory JSON -----------------------------------------------------------------


def test_remember_keeps_expires_at_in_utc_and_the_memory_json_shows_it(client, ingest_auth):
    memory_id = remember(
        client, ingest_auth, content="The deploy freeze lasts all January", expiresAt=LATER
    )
    body = client.get(f"/api/memory/{memory_id}", **ingest_auth).json()
    assert (body["expiresAt"], body["expired"]) == (LATER, False)
    shifted = remember(
        client,
        ingest_auth,
        content="The office closes early",
        expiresAt="2099-01-31T02:00:00+02:00",
    )
    assert client.get(f"/api/memory/{shifted}", **ingest_auth).json()["expiresAt"] == LATER


def test_a_memory_without_expiry_has_expires_at_null(client, ingest_auth):
    memory_id = remember(client, ingest_auth, content="Billing runs on Postgres 16")
    body = client.get(f"/api/memory/{memory_id}", **ingest_auth).json()
    assert body["expiresAt"] is None and body["expired"] is False
    explicit = remember(client, ingest_auth, content="Kenji owns billing", expiresAt=None)
    assert Memory.objects.get(id=explicit).expires_at is None


BAD = [
    ("tomorrow", "invalid_request", "is not an ISO 8601 date and time"),
    ("2099-01-31T00:00:00", "invalid_request", "needs a time zone"),
    ("2099-01-31", "invalid_request", "needs a time zone"),
    ("2099-13-01T00:00:00Z", "invalid_request", "is not an ISO 8601 date and time"),
    (4102444800, "invalid_request", "must be a string"),
    (True, "invalid_request", "must be a string"),
    ("2001-01-31T00:00:00Z", "expiry_in_past", "is in the past"),
    # Its purge date (up to ten years later) would fall off the calendar: every page of it broke.
    ("9999-12-31T23:59:59Z", "invalid_request", "is too far ahead"),
    ("9000-01-01T00:00:00Z", "invalid_request", "is too far ahead"),
]


@pytest.mark.parametrize(("value", "code", "says"), BAD)
def test_remember_refuses_a_bad_expiry_with_400_and_writes_nothing(
    client, ingest_auth, value, code, says
):
    before = counts()
    response = post(
        client, "/api/memory/remember", {"content": "Freeze", "expiresAt": value}, ingest_auth
    )
    assert response.status_code == 400, response.content
    assert response.json()["error"] == code and says in response.json()["message"]
    assert "expiresAt" in response.json()["message"]
    assert counts() == before


@pytest.mark.parametrize(("value", "code", "says"), BAD)
def test_mcp_remember_refuses_the_same_values_the_same_way(mcp, value, code, says):
    before = counts()
    payload, is_error = mcp("remember", content="Freeze", expiresAt=value)
    assert is_error and payload["error"] == code and says in payload["message"]
    assert counts() == before


def test_mcp_remember_and_get_memory_carry_the_expiry(mcp):
    payload, is_error = mcp("remember", content="The freeze lasts all January", expiresAt=LATER)
    assert not is_error, payload
    memory, _ = mcp("get_memory", id=payload["id"])
    assert (memory["expiresAt"], memory["expired"]) == (LATER, False)
    assert "expiresAt" in TOOLS["remember"].properties and "expiresAt" in TOOLS["modify"].properties


# --- at once out of recall and lists ---------------------------------------------------------------


def test_an_expired_memory_leaves_api_and_mcp_recall_and_lists(
    client, ingest_auth, review_auth, mcp
):
    kept = remember(client, ingest_auth, content="The vault sits in the Hamburg office")
    gone = remember(client, ingest_auth, content="The vault key sits in the Hamburg safe")
    assert {kept, gone} <= set(recall(client, ingest_auth, "vault Hamburg"))
    response = patch(
        client, gone, {"expiresAt": "2001-01-01T00:00:00Z", "reason": "moved"}, review_auth
    )
    assert response.status_code == 200, response.content
    assert response.json()["expired"] is True
    assert recall(client, ingest_auth, "vault Hamburg") == [kept]
    recalled, _ = mcp("recall", query="vault Hamburg")
    assert [r["id"] for r in recalled["results"]] == [kept]
    listed, _ = mcp("list_memories")
    assert [m["id"] for m in listed["memories"]] == [kept]
    everything, _ = mcp("list_memories", includeExpired=True)
    assert {m["id"]: m["expired"] for m in everything["memories"]} == {kept: False, gone: True}


# --- PATCH ----------------------------------------------------------------------------------------


def test_patch_sets_moves_and_lifts_an_expiry_each_an_audited_edit(
    client, ingest_auth, review_auth
):
    memory_id = remember(client, ingest_auth, content="The freeze lasts all January")
    response = patch(client, memory_id, {"expiresAt": LATER, "reason": "ends in 2099"}, review_auth)
    assert response.status_code == 200, response.content
    assert (response.json()["expiresAt"], response.json()["version"]) == (LATER, 2)
    response = patch(client, memory_id, {"expiresAt": None, "reason": "lasts"}, review_auth)
    assert response.status_code == 200
    assert (response.json()["expiresAt"], response.json()["version"]) == (None, 3)
    events = [
        h
        for h in client.get(f"/api/memory/{memory_id}/history", **review_auth).json()["history"]
        if h["event"] == "updated"
    ]
    assert [(h["metadata"]["changedFields"], h["metadata"]["expiresAt"]) for h in events] == [
        (["expires_at"], LATER),
        (["expires_at"], None),
    ]
    assert [h["reason"] for h in events] == ["ends in 2099", "lasts"]
    assert [h["changedBy"] for h in events] == ["reviewer-bot", "reviewer-bot"]


def test_patch_keeps_its_contract_reason_required_and_if_version(client, ingest_auth, review_auth):
    memory_id = remember(client, ingest_auth, content="The freeze lasts all January")
    before = counts()
    no_reason = patch(client, memory_id, {"expiresAt": LATER}, review_auth)
    assert (no_reason.status_code, no_reason.json()["error"]) == (400, "reason_required")
    stale = patch(
        client, memory_id, {"expiresAt": LATER, "reason": "r", "ifVersion": 7}, review_auth
    )
    assert (stale.status_code, stale.json()["error"]) == (409, "version_conflict")
    for value in ("next week", "2099-01-31T00:00:00", 5):
        bad = patch(client, memory_id, {"expiresAt": value, "reason": "r"}, review_auth)
        assert bad.status_code == 400 and "expiresAt" in bad.json()["message"]
    assert counts() == before
    assert Memory.objects.get(id=memory_id).version == 1
    ingest_only = patch(client, memory_id, {"expiresAt": LATER, "reason": "r"}, ingest_auth)
    assert ingest_only.status_code == 403
    same = patch(client, memory_id, {"expiresAt": None, "reason": "r"}, review_auth)
    assert same.json()["status"] == "no_changes"


def test_mcp_modify_sets_and_lifts_an_expiry(mcp):
    created, _ = mcp("remember", content="The freeze lasts all January")
    payload, is_error = mcp("modify", id=created["id"], reason="ends", expiresAt=LATER)
    assert not is_error and payload["expiresAt"] == LATER
    payload, is_error = mcp("modify", id=created["id"], reason="lasts", expiresAt=None)
    assert not is_error and payload["expiresAt"] is None
    payload, is_error = mcp("modify", id=created["id"], reason="r", expiresAt="soon")
    assert is_error and payload["error"] == "invalid_request"
    assert Memory.objects.get(id=created["id"]).version == 3


def test_an_expiry_set_in_the_past_by_patch_expires_the_memory_now(
    client, ingest_auth, review_auth
):
    memory_id = remember(client, ingest_auth, content="The Hamburg vault code is rotated weekly")
    past = (timezone.now() - timedelta(minutes=5)).isoformat()
    response = patch(client, memory_id, {"expiresAt": past, "reason": "retired"}, review_auth)
    assert response.status_code == 200 and response.json()["expired"] is True
    assert recall(client, ingest_auth, "Hamburg vault code") == []
