"""Size limits on remember and every list field (issue 10, item 10): 400 with the limit in the
message and nothing written; the largest body allowed keeps remember's transaction bounded."""

import json

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from api.mcp_server import run_tool
from api.memory_service import (
    MAX_TAGS,
    MAX_TRIPLES,
    TAG_CHARS,
    TRIPLE_NAME_CHARS,
    TRIPLE_TYPE_CHARS,
)
from memory.models import Entity, Memory, Relation

pytestmark = pytest.mark.django_db


def triple(i: int, **extra) -> dict:
    return {"source": f"Service {i}", "relationship": "depends on", "target": f"Queue {i}", **extra}


def remember(client, auth, body):
    return client.post(
        "/api/memory/remember", json.dumps(body), content_type="application/json", **auth
    )


def assert_refused_with_limit(response, limit: int) -> None:
    assert response.status_code == 400, response.content
    assert str(limit) in response.json()["message"]
    assert not Memory.objects.exists() and not Entity.objects.exists()


def test_more_triples_than_the_limit_are_refused(client, ingest_auth):
    body = {"content": "A graph too large.", "entities": [triple(i) for i in range(6000)]}
    assert_refused_with_limit(remember(client, ingest_auth, body), MAX_TRIPLES)
    body["entities"] = body["entities"][: MAX_TRIPLES + 1]
    assert_refused_with_limit(remember(client, ingest_auth, body), MAX_TRIPLES)


@pytest.mark.parametrize(
    ("entity", "limit"),
    [
        (triple(1, source="S" * (TRIPLE_NAME_CHARS + 1)), TRIPLE_NAME_CHARS),
        (triple(1, relationship="r" * (TRIPLE_NAME_CHARS + 1)), TRIPLE_NAME_CHARS),
        (triple(1, targetType="t" * (TRIPLE_TYPE_CHARS + 1)), TRIPLE_TYPE_CHARS),
    ],
)
def test_oversized_triple_fields_are_refused(client, ingest_auth, entity, limit):
    body = {"content": "One oversized triple.", "entities": [entity]}
    assert_refused_with_limit(remember(client, ingest_auth, body), limit)


def test_more_tags_than_the_limit_or_a_long_tag_are_refused(client, ingest_auth):
    many = {"content": "Tagged too much.", "tags": [f"t{i}" for i in range(MAX_TAGS + 1)]}
    assert_refused_with_limit(remember(client, ingest_auth, many), MAX_TAGS)
    long = {"content": "One tag too long.", "tags": ["x" * (TAG_CHARS + 1)]}
    assert_refused_with_limit(remember(client, ingest_auth, long), TAG_CHARS)


def test_patch_and_recall_filters_share_the_tag_limit(client, admin_auth):
    created = remember(client, admin_auth, {"content": "Kenji owns the billing dashboard."})
    memory_id = created.json()["id"]
    response = client.patch(
        f"/api/memory/{memory_id}",
        json.dumps({"reason": "retag", "tags": [f"t{i}" for i in range(MAX_TAGS + 1)]}),
        content_type="application/json",
        **admin_auth,
    )
    assert response.status_code == 400 and str(MAX_TAGS) in response.json()["message"]
    assert Memory.objects.get(id=memory_id).tags == []


def test_the_mcp_remember_tool_has_the_same_limits(db):
    from api.auth import create_token

    _, plain = create_token("mcp-agent", scopes=["ingest"])
    payload, is_error = run_tool(
        "remember",
        {"content": "Tagged over MCP.", "tags": [f"t{i}" for i in range(MAX_TAGS + 1)]},
        f"Bearer {plain}",
        "test-client",
    )
    assert is_error and str(MAX_TAGS) in payload["message"]
    assert not Memory.objects.exists()


def test_the_largest_body_allowed_keeps_the_write_bounded(client, ingest_auth):
    """Every limit at its maximum: the write's statements are bounded by the limits, not the body."""
    names = " ".join(f"Name{i:05d}" for i in range(9000))  # 90,000 characters of proper nouns
    body = {
        "content": names,
        "tags": [f"{i:02d}" + "t" * (TAG_CHARS - 2) for i in range(MAX_TAGS)],
        "entities": [
            {
                "source": f"S{i:02d}" + "s" * (TRIPLE_NAME_CHARS - 3),
                "relationship": "r" * TRIPLE_NAME_CHARS,
                "target": f"T{i:02d}" + "t" * (TRIPLE_NAME_CHARS - 3),
                "sourceType": "x" * TRIPLE_TYPE_CHARS,
                "targetType": "y" * TRIPLE_TYPE_CHARS,
            }
            for i in range(MAX_TRIPLES)
        ],
    }
    with CaptureQueriesContext(connection) as queries:
        response = remember(client, ingest_auth, body)
    assert response.status_code == 201, response.content
    assert Relation.objects.count() == MAX_TRIPLES and Entity.objects.count() == 2 * MAX_TRIPLES
    # About a dozen statements per triple (entities, relation, mentions) plus the memory's own.
    assert len(queries) <= 20 * MAX_TRIPLES + 50
