"""GET /api/export (issue 22, item 6): admin scope only, streamed line by line, the token's agent
rules (a single-agent token exports its own agent), and JSON errors for bad parameters."""

import json

import pytest
from django.http import StreamingHttpResponse

from api.auth import create_token
from memory import export
from memory.writes import Actor, forget, remember

pytestmark = pytest.mark.django_db

AGENT = Actor("agent-one", "agent")


def lines_of(response) -> list[dict]:
    assert isinstance(response, StreamingHttpResponse) and response.streaming
    return [json.loads(line) for line in b"".join(response.streaming_content).splitlines()]


def token(scopes, agent="default", multi_agent=False):
    _, plain = create_token(
        "t-" + "-".join(scopes), agent_id=agent, scopes=scopes, multi_agent=multi_agent
    )
    return {"HTTP_AUTHORIZATION": f"Bearer {plain}"}


@pytest.fixture
def store():
    mine = remember("Kenji deploys billing-api with Terraform.", actor=AGENT).memory
    theirs = remember("The ops runbook lives in Notion.", actor=AGENT, agent_id="ops").memory
    gone = remember("Staging is rebuilt nightly.", actor=AGENT).memory
    forget(gone.id, actor=AGENT, reason="wrong")
    return {"mine": mine, "theirs": theirs, "gone": gone}


def test_an_admin_token_gets_a_streamed_json_lines_download(client, store):
    response = client.get("/api/export", **token(["admin"], multi_agent=True))
    assert response.status_code == 200
    assert response["Content-Type"] == "application/x-ndjson; charset=utf-8"
    assert response["Content-Disposition"].startswith('attachment; filename="memories-')
    header, *records = lines_of(response)
    assert header["format"] == export.FORMAT and header["version"] == export.VERSION
    assert sorted(r["id"] for r in records) == sorted([store["mine"].id, store["theirs"].id])


@pytest.mark.parametrize("scopes", [["ingest"], ["review"], ["ingest", "review", "assert"]])
def test_tokens_without_the_admin_scope_are_refused(client, store, scopes):
    response = client.get("/api/export", **token(scopes))
    assert response.status_code == 403
    assert response.json()["error"] == "forbidden" and "admin" in response.json()["message"]


def test_without_a_token_the_export_answers_401(client, store):
    assert client.get("/api/export").status_code == 401


def test_a_single_agent_admin_token_exports_its_own_agent_and_may_not_name_another(client, store):
    auth = token(["admin"], agent="ops")
    header, *records = lines_of(client.get("/api/export", **auth))
    assert header["agent"] == "ops" and [r["id"] for r in records] == [store["theirs"].id]
    refused = client.get("/api/export?agent=default", **auth)
    assert refused.status_code == 403 and refused.json()["error"] == "forbidden"


def test_history_and_forgotten_memories_come_when_asked(client, store):
    auth = token(["admin"], multi_agent=True)
    response = client.get("/api/export?agent=default&includeHistory=true&includeDeleted=1", **auth)
    header, *records = lines_of(response)
    assert header["includeHistory"] is True and header["includeDeleted"] is True
    gone = next(r for r in records if r["id"] == store["gone"].id)
    assert gone["isDeleted"] is True
    assert [h["event"] for h in gone["history"]] == ["created", "deleted"]


def test_a_bad_parameter_is_a_json_400_before_anything_streams(client, store):
    response = client.get("/api/export?includeHistory=maybe", **token(["admin"]))
    assert response.status_code == 400 and not response.streaming
    assert response.json() == {
        "error": "invalid_request",
        "message": "includeHistory must be true or false",
    }


def test_only_get_is_allowed(client, store):
    response = client.post("/api/export", **token(["admin"]))
    assert response.status_code == 405 and response.json()["error"] == "method_not_allowed"
