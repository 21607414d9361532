"""Filtered recall filters inside the search, not after it (issue 20, item 7): 300 memories that
match the query better but lack the tag, 3 that hold it, and a recall filtered by the tag (MCP's
`project`, the JSON API's `tags`) returns the 3, on both legs and both engines, whether the
filtered set is searched exactly (few memories) or by the widened legs (many)."""

import json

import pytest

from api.mcp_server import run_tool
from memory import search, writes
from memory.backend import list_holds
from memory.search import hybrid_search
from memory.writes import Actor
from pipeline.llm import get_embedder
from pipeline.tasks import embed_missing

pytestmark = pytest.mark.django_db

AGENT = Actor("claude-code", "agent")
QUERY = "kafka consumer lag on the billing service"


@pytest.fixture
def store():
    for i in range(300):
        writes.remember(
            f"Kafka consumer lag on the billing service, alert {i}",
            actor=AGENT,
            tags=["project:other"],
            create_job=False,
        )
    tagged = {
        writes.remember(
            f"Atlas note {i}: kafka lag seen once",
            actor=AGENT,
            tags=["project:atlas"],
            create_job=False,
        ).memory.id
        for i in range(3)
    }
    while embed_missing():
        pass
    return tagged


@pytest.fixture(params=["exact", "widened"])
def path(request, monkeypatch):
    if request.param == "widened":  # the filtered set counts as big: both legs widen instead
        monkeypatch.setattr(search, "EXACT_FILTERED", 2)
    return request.param


@pytest.fixture
def token():
    from api.auth import create_token

    _, plain = create_token("mcp-agent", scopes=["ingest"])
    return plain


def test_mcp_recall_by_project_returns_the_three_tagged_memories_behind_300_better_matches(
    store, path, token
):
    payload, is_error = run_tool(
        "recall", {"query": QUERY, "project": "atlas", "limit": 5}, f"Bearer {token}", "test"
    )
    assert not is_error, payload
    assert {r["id"] for r in payload["results"]} == store


def test_api_recall_by_tag_returns_the_three_tagged_memories(store, path, client, token):
    response = client.post(
        "/api/memory/recall",
        json.dumps({"query": QUERY, "tags": ["project:atlas"], "limit": 10}),
        content_type="application/json",
        HTTP_AUTHORIZATION=f"Bearer {token}",
    )
    assert response.status_code == 200, response.content
    assert {r["id"] for r in response.json()["results"]} == store


def test_each_leg_alone_finds_the_tagged_memories_inside_the_search(store, path):
    embedder = get_embedder()
    where = list_holds("tags", "project:atlas")
    keyword_only = hybrid_search(QUERY, k=5, min_score=0.0, where=where)
    assert {hit.memory_id for hit in keyword_only} == store
    assert all(hit.vector_score is None for hit in keyword_only)
    both = hybrid_search(
        QUERY,
        k=5,
        min_score=0.0,
        where=where,
        query_vector=embedder.embed_one(QUERY),
        model=embedder.model,
    )
    assert {hit.memory_id for hit in both} == store
    assert all(hit.vector_score is not None for hit in both)
