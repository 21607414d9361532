"""The purge API (issue 22's contract, to the letter): `POST /api/memory/{id}/purge` and
`POST /api/purge` with the admin scope answer 200 with the receipt's exact keys; a dry run writes
nothing and answers what would go; bad input gets a clear JSON error and writes nothing."""

from __future__ import annotations

import pytest
from django.db import connection

from api.auth import create_token
from api.mcp_server import TOOLS
from memory import writes
from memory.erasure import PURGED
from memory.models import Memory
from memory.writes import Actor

RECEIPT_KEYS = {
    *("dryRun", "memories", "rows", "verified", "found", "repaired", "outOfReach", "tombstone")
}
KEY = "sk-live-4f9a2c7e1b3d5f6a8c0e"
WRITER = Actor("agent-one", "agent")


def snapshot() -> dict[str, list]:
    """Every row of every table (the full-text and vector shadow tables included)."""
    quote = connection.ops.quote_name
    rows = {}
    with connection.cursor() as cursor:
        for table in connection.introspection.table_names(cursor):
            cursor.execute(f"SELECT * FROM {quote(table)}")
            rows[table] = sorted(repr(row) for row in cursor.fetchall())
    return rows


def post(client, auth, path, body):
    return client.post(path, body, content_type="application/json", **auth)


@pytest.fixture
def multi_admin(db):
    _, plain = create_token("ops-admin", scopes=["admin"], multi_agent=True)
    return {"HTTP_AUTHORIZATION": f"Bearer {plain}"}


def remember(text: str, agent: str = "default") -> Memory:
    return writes.remember(text, actor=WRITER, agent_id=agent, create_job=False).memory


@pytest.mark.django_db(transaction=True)
def test_purging_one_memory_answers_the_receipt_with_its_exact_keys(client, admin_auth):
    memory = remember(f"The billing key is {KEY} for the staging cluster.")
    response = post(client, admin_auth, f"/api/memory/{memory.id}/purge", {"reason": "leaked key"})
    assert response.status_code == 200
    receipt = response.json()
    assert set(receipt) == RECEIPT_KEYS
    assert receipt["dryRun"] is False and receipt["verified"] is True and receipt["found"] == []
    assert receipt["memories"] == [memory.id] and receipt["rows"]["memories"] == 1
    assert receipt["tombstone"] and receipt["outOfReach"]
    memory.refresh_from_db()
    assert memory.content == PURGED and memory.is_purged


def test_a_dry_run_writes_nothing_and_answers_what_would_go(client, admin_auth):
    memory = remember(f"The billing key is {KEY} for the staging cluster.")
    client.get(f"/api/memory/{memory.id}", **admin_auth)  # the token's once-a-minute use stamp
    before = snapshot()
    response = post(
        client,
        admin_auth,
        f"/api/memory/{memory.id}/purge",
        {"reason": "leaked key", "lineage": True, "dryRun": True},
    )
    assert response.status_code == 200
    receipt = response.json()
    assert receipt["dryRun"] is True and receipt["tombstone"] is None
    assert receipt["memories"] == [memory.id]
    assert receipt["rows"] == {"memories": 1, "memory_history": 1}
    assert snapshot() == before


@pytest.mark.django_db(transaction=True)
def test_purge_by_text_reaches_every_agent_and_the_copies_in_other_memories_history(
    client, multi_admin
):
    leaked = remember(f"Deploy with {KEY} tonight.", agent="ci-bot")
    other = remember(f"Kenji pasted {KEY} into the runbook.", agent="docs-bot")
    edited = remember(f"Rotate the staging key {KEY} on Friday.", agent="docs-bot")
    writes.modify(
        edited.id, {"content": "Rotate the staging key on Friday."}, actor=WRITER, reason="r"
    )
    kept = remember("The runbook lives in the wiki.", agent="docs-bot")
    receipt = post(client, multi_admin, "/api/purge", {"text": KEY, "reason": "leaked key"}).json()
    assert sorted(receipt["memories"]) == sorted([leaked.id, other.id])
    assert receipt["verified"] is True, receipt["found"]
    edited.refresh_from_db()
    assert edited.content == "Rotate the staging key on Friday." and not edited.is_purged
    assert not any(KEY in (row.old_content or "") for row in edited.history.all())
    assert not any(KEY in row.content for row in edited.cold_snapshots.all())
    kept.refresh_from_db()
    assert kept.content == "The runbook lives in the wiki."


@pytest.mark.django_db(transaction=True)
def test_purge_by_agent_takes_every_memory_of_that_agent_only(client, multi_admin):
    mine = [remember(f"Note {n} of the scratch agent about its work.", "scratch") for n in range(3)]
    theirs = remember("A note of another agent about its work.", "keeper")
    receipt = post(
        client, multi_admin, "/api/purge", {"agent": "scratch", "reason": "agent retired"}
    )
    assert receipt.status_code == 200
    assert sorted(receipt.json()["memories"]) == sorted(m.id for m in mine)
    assert Memory.objects.filter(agent_id="scratch", purged_at__isnull=True).count() == 0
    theirs.refresh_from_db()
    assert not theirs.is_purged


@pytest.mark.parametrize(
    ("body", "status", "code"),
    [
        ({}, 400, "reason_required"),
        ({"reason": "   "}, 400, "reason_required"),
        ({"reason": "x", "lineage": "yes"}, 400, "invalid_request"),
        ({"reason": "x", "agent": "default"}, 400, "invalid_request"),
        ({"reason": f"it held {KEY}"}, 400, "reason_holds_text"),
    ],
)
def test_a_bad_memory_purge_gets_a_clear_error_and_writes_nothing(
    client, admin_auth, body, status, code
):
    memory = remember(f"The billing key is {KEY} for the staging cluster.")
    client.get(f"/api/memory/{memory.id}", **admin_auth)
    before = snapshot()
    response = post(client, admin_auth, f"/api/memory/{memory.id}/purge", body)
    assert (response.status_code, response.json()["error"]) == (status, code)
    assert response.json()["message"]
    assert snapshot() == before


@pytest.mark.parametrize(
    ("body", "status", "code"),
    [
        ({"reason": "x"}, 400, "invalid_scope"),
        ({"reason": "x", "agent": "a", "text": "some text"}, 400, "invalid_scope"),
        ({"reason": "x", "agent": "nobody-ever"}, 404, "unknown_agent"),
        ({"reason": "x", "text": ""}, 400, "empty_text"),
        ({"reason": "x", "text": "   "}, 400, "empty_text"),
        ({"reason": "x", "text": "sk-"}, 400, "text_too_short"),
        ({"reason": "x", "text": 42}, 400, "invalid_request"),
        ({"agent": "default"}, 400, "reason_required"),
        ({"reason": "x", "text": "no memory holds this"}, 409, "nothing_to_purge"),
        (
            {"reason": "the staging cluster note", "text": "staging cluster"},
            400,
            "reason_holds_text",
        ),
    ],
)
def test_a_bad_store_purge_gets_a_clear_error_and_writes_nothing(
    client, multi_admin, body, status, code
):
    remember(f"The billing key is {KEY} for the staging cluster.")
    client.get("/api/health", **multi_admin)
    before = snapshot()
    response = post(client, multi_admin, "/api/purge", body)
    assert (response.status_code, response.json()["error"]) == (status, code), response.json()
    assert snapshot() == before


def test_only_the_admin_scope_purges_and_only_for_its_agents(client, review_auth, admin_auth):
    memory = remember("A note of agent default about its work.")
    other = remember("A note of another agent about its work.", agent="elsewhere")
    refused = post(client, review_auth, f"/api/memory/{memory.id}/purge", {"reason": "x"})
    assert (refused.status_code, refused.json()["error"]) == (403, "forbidden")
    assert "admin" in refused.json()["message"]
    foreign = post(client, admin_auth, f"/api/memory/{other.id}/purge", {"reason": "x"})
    assert (foreign.status_code, foreign.json()["error"]) == (403, "forbidden")
    anonymous = client.post("/api/purge", {"agent": "default"}, content_type="application/json")
    assert anonymous.status_code == 401
    assert client.get("/api/purge", **admin_auth).status_code == 405
    assert not Memory.objects.filter(purged_at__isnull=False).exists()


@pytest.mark.parametrize("text", ["A note of another agent", "no memory holds this"])
def test_a_token_of_one_agent_cannot_purge_by_text_whoever_holds_it(client, admin_auth, text):
    """Found by a QA pass: a single-agent admin token's dry run answered 403 when another agent
    held the text and 409 when nobody did, telling it what other agents' memories say."""
    remember("A note of another agent about its work.", agent="elsewhere")
    before = snapshot()
    body = {"text": text, "reason": "x", "dryRun": True}
    response = post(client, admin_auth, "/api/purge", body)
    assert (response.status_code, response.json()["error"]) == (403, "forbidden")
    assert "looks at every agent's memories" in response.json()["message"]
    assert snapshot() == before


@pytest.mark.parametrize("agent", ["elsewhere", "nobody-ever"])
def test_a_token_of_one_agent_is_refused_another_agent_whether_it_exists_or_not(
    client, admin_auth, agent
):
    remember("A note of another agent about its work.", agent="elsewhere")
    response = post(client, admin_auth, "/api/purge", {"agent": agent, "reason": "x"})
    assert (response.status_code, response.json()["error"]) == (403, "forbidden")


def test_an_unknown_or_purged_memory_is_refused(client, admin_auth):
    missing = post(client, admin_auth, "/api/memory/no-such-id/purge", {"reason": "x"})
    assert (missing.status_code, missing.json()["error"]) == (404, "not_found")


@pytest.mark.django_db(transaction=True)
def test_a_purged_memory_cannot_be_purged_again_or_recovered(client, admin_auth):
    memory = remember("A note that has to go for good.")
    assert post(client, admin_auth, f"/api/memory/{memory.id}/purge", {"reason": "x"}).json()[
        "verified"
    ]
    again = post(client, admin_auth, f"/api/memory/{memory.id}/purge", {"reason": "x"})
    assert (again.status_code, again.json()["error"]) == (409, "already_purged")
    recover = post(client, admin_auth, f"/api/memory/{memory.id}/recover", {"reason": "oops"})
    assert (recover.status_code, recover.json()["error"]) == (409, "purged")
    # An edit says so too (it said "recover it first", and recover is refused: a QA day).
    edit = client.patch(
        f"/api/memory/{memory.id}",
        {"content": "Back again.", "reason": "oops"},
        content_type="application/json",
        **admin_auth,
    )
    assert (edit.status_code, edit.json()["error"]) == (409, "purged")
    assert "gone for good" in edit.json()["message"]


def test_purge_is_not_an_mcp_tool():
    """Agents connect over MCP too; none of them may erase: only an admin's token or session."""
    assert not [name for name in TOOLS if "purge" in name or "erase" in name]
