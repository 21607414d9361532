"""The memory JSON API: every endpoint, every error, and no write on bad input."""

import json
from datetime import UTC, datetime

import pytest
from django.db import connection

from memory.models import ApiToken, Entity, Job, Memory, MemoryHistory
from memory.moments import iso

pytestmark = pytest.mark.django_db


JSON = {"content_type": "application/json"}


def post(client, url, body, auth, raw=None):
    data = raw if raw is not None else json.dumps(body)
    return client.post(url, data, content_type="application/json", **auth)


def counts():
    return (
        Memory.objects.count(),
        MemoryHistory.objects.count(),
        Job.objects.count(),
        Entity.objects.count(),
    )


def remember(client, auth, **body):
    response = post(client, "/api/memory/remember", body, auth)
    assert response.status_code in (200, 201), response.content
    return response.json()


def test_remember_returns_201_with_id_hash_and_job_then_200_for_a_duplicate(client, ingest_auth):
    first = remember(
        client,
        ingest_auth,
        content="Priya prefers squash merges.",
        who="cursor",
        tags=["git"],
        importance=0.9,
    )
    assert first["deduped"] is False and first["jobId"] and len(first["contentHash"]) == 64
    response = post(
        client, "/api/memory/remember", {"content": "priya prefers squash merges"}, ingest_auth
    )
    assert response.status_code == 200
    assert response.json() == {**response.json(), "id": first["id"], "deduped": True, "jobId": None}
    memory = Memory.objects.get(id=first["id"])
    assert (memory.who, memory.tags, memory.importance, memory.agent_id) == (
        "cursor",
        ["git"],
        0.9,
        "default",
    )


def test_remember_with_entities_creates_the_graph(client, ingest_auth):
    body = {
        "content": "Priya maintains billing-api",
        "entities": [
            {
                "source": "Priya",
                "relationship": "maintains",
                "target": "billing-api",
                "sourceType": "person",
            }
        ],
    }
    result = remember(client, ingest_auth, **body)
    assert len(result["linkedEntityIds"]) == 2
    assert Entity.objects.get(canonical_name="priya").entity_type == "person"


@pytest.mark.parametrize(
    ("raw", "status", "message"),
    [
        ("{not json", 400, "not valid JSON"),
        ("[1, 2]", 400, "must be a JSON object"),
        ('"a string"', 400, "must be a JSON object"),
        ("", 400, "must be a JSON object"),
        ("{}", 400, "content is required"),
        ('{"content": 42}', 400, "content must be a string"),
        ('{"content": null}', 400, "content is required"),
        ('{"content": "   \\n\\t "}', 400, "empty after normalisation"),
        ('{"content": "..."}', 400, "empty after normalisation"),
        ('{"content": "ok text", "pinned": "yes"}', 400, "pinned must be a boolean"),
        (
            '{"content": "ok text", "importance": 7}',
            400,
            "importance must be a number between 0 and 1",
        ),
        ('{"content": "ok text", "importance": true}', 400, "importance must be"),
        ('{"content": "ok text", "tags": "a,b"}', 400, "tags must be a list of strings"),
        ('{"content": "ok text", "tags": [1]}', 400, "tags must be a list of strings"),
        ('{"content": "ok text", "who": ["x"]}', 400, "who must be a string"),
        ('{"content": "ok text", "agentId": 5}', 400, "agentId must be a string"),
        ('{"content": "ok text", "entities": {"a": 1}}', 400, "entities must be a list"),
        (
            '{"content": "ok text", "entities": [{"source": "A", "target": "B"}]}',
            400,
            "relationship must be a non-empty string",
        ),
        ('{"content": "ok text", "entities": ["x"]}', 400, "entities[0] must be an object"),
        ('{"content": "bad \\u0000 byte"}', 400, "NUL byte"),
        ('{"content": "bad \\ud800 surrogate"}', 400, "invalid unicode surrogate"),
        ('{"content": "fine", "who": "bad \\udfff"}', 400, "invalid unicode surrogate"),
        ('{"content": "ok text", "type": "   "}', 400, "type must not be blank"),
        ('{"content": "ok text", "type": ""}', 400, "type must not be blank"),
    ],
)
def test_bad_remember_bodies_get_a_clear_error_and_write_nothing(
    client, ingest_auth, raw, status, message
):
    before = counts()
    response = post(client, "/api/memory/remember", None, ingest_auth, raw=raw)
    assert response.status_code == status
    assert message in response.json()["message"] and response.json()["error"]
    assert counts() == before


def test_invalid_utf8_is_rejected(client, ingest_auth):
    response = client.post(
        "/api/memory/remember",
        b'{"content": "\xff\xfe"}',
        content_type="application/json",
        **ingest_auth,
    )
    assert response.status_code == 400 and "UTF-8" in response.json()["message"]
    assert Memory.objects.count() == 0


def test_content_over_the_limit_is_413_and_unknown_fields_are_ignored(
    client, ingest_auth, settings
):
    settings.MEMORY_MAX_CONTENT_CHARS = 50
    response = post(client, "/api/memory/remember", {"content": "x" * 51}, ingest_auth)
    assert response.status_code == 413 and Memory.objects.count() == 0
    response = post(
        client, "/api/memory/remember", {"content": "x" * 50, "colour": "blue"}, ingest_auth
    )
    assert response.status_code == 201


@pytest.mark.parametrize("header", [None, "Bearer", "Bearer nope", "Token abc", "bearer x"])
def test_a_missing_or_invalid_token_is_401(client, header):
    kwargs = {"HTTP_AUTHORIZATION": header} if header else {}
    response = client.post(
        "/api/memory/remember", {"content": "x y z"}, content_type="application/json", **kwargs
    )
    assert response.status_code == 401 and "Bearer" in response.json()["message"]
    assert Memory.objects.count() == 0


def test_a_revoked_token_is_401_and_tokens_are_stored_hashed(client, ingest_auth):
    token = ingest_auth["HTTP_AUTHORIZATION"].split()[1]
    row = ApiToken.objects.get()
    assert token not in (row.token_hash, row.prefix) and len(row.token_hash) == 64
    row.revoked = True
    row.save()
    assert (
        post(client, "/api/memory/remember", {"content": "x y z"}, ingest_auth).status_code == 401
    )


def test_the_wrong_scope_is_403(client, ingest_auth, review_auth):
    memory = remember(client, ingest_auth, content="Redis is the session cache")
    response = client.patch(
        f"/api/memory/{memory['id']}",
        {"content": "x", "reason": "r"},
        content_type="application/json",
        **ingest_auth,
    )
    assert response.status_code == 403
    assert (
        post(client, "/api/memory/remember", {"content": "x y z"}, review_auth).status_code == 403
    )
    assert post(client, f"/api/memory/{memory['id']}/recover", {}, ingest_auth).status_code == 403
    assert Memory.objects.get(id=memory["id"]).version == 1


@pytest.mark.parametrize(
    ("method", "url"),
    [
        ("get", "/api/memory/remember"),
        ("put", "/api/memory/remember"),
        ("post", "/api/memory/abc"),
        ("get", "/api/memory/recall"),
        ("delete", "/api/memory/abc/history"),
    ],
)
def test_the_wrong_method_is_405_with_json(client, ingest_auth, method, url):
    response = getattr(client, method)(url, **ingest_auth)
    assert response.status_code == 405 and response.json()["error"] == "method_not_allowed"
    assert response["Allow"]


def test_unknown_ids_are_404(client, admin_auth):
    assert client.get("/api/memory/nope", **admin_auth).status_code == 404
    assert client.get("/api/memory/nope/history", **admin_auth).status_code == 404
    assert (
        client.patch(
            "/api/memory/nope",
            {"content": "x", "reason": "r"},
            content_type="application/json",
            **admin_auth,
        ).status_code
        == 404
    )
    assert (
        client.delete(
            "/api/memory/nope", {"reason": "r"}, content_type="application/json", **admin_auth
        ).status_code
        == 404
    )
    assert post(client, "/api/memory/nope/recover", {}, admin_auth).status_code == 404


def test_get_returns_the_memory_shape(client, admin_auth):
    memory = remember(client, admin_auth, content="Kenji owns Terraform", type="fact", pinned=True)
    body = client.get(f"/api/memory/{memory['id']}", **admin_auth).json()
    expected = {
        "id",
        "content",
        "normalizedContent",
        "contentHash",
        "type",
        "who",
        "why",
        "agentId",
        "pinned",
        "importance",
        "tags",
        "sourceType",
        "sourceId",
        "isDeleted",
        "deletedAt",
        "version",
        "extractionStatus",
        "extractionModel",
        "createdAt",
        "updatedAt",
    }
    assert expected <= set(body)
    assert body["pinned"] is True and body["version"] == 1 and body["extractionStatus"] == "pending"


def test_a_type_is_stored_without_surrounding_blanks_and_an_edit_to_a_blank_one_is_refused(
    client, admin_auth
):
    made = remember(client, admin_auth, content="Dana likes short reviews", type=" preference ")
    memory = Memory.objects.get(id=made["id"])
    assert memory.type == "preference"
    url = f"/api/memory/{made['id']}"
    for blank in ("", " \t"):
        response = client.patch(
            url, {"type": blank, "reason": "tidy"}, content_type="application/json", **admin_auth
        )
        assert (
            response.status_code == 400 and "type must not be blank" in response.json()["message"]
        )
    memory.refresh_from_db()
    assert (memory.type, memory.version) == ("preference", 1)
    response = client.patch(
        url, {"type": " decision", "reason": "tidy"}, content_type="application/json", **admin_auth
    )
    assert response.status_code == 200 and response.json()["memory"]["type"] == "decision"
    # A second review: a zero-width space passed for a type; the length counted the padding;
    # and a filter padded as a remember may be no longer found what it stored.
    for blank in ("\u200b", "\u3164 "):
        refused = client.patch(
            url, {"type": blank, "reason": "tidy"}, content_type="application/json", **admin_auth
        )
        assert refused.status_code == 400, blank
    padded = client.patch(
        url,
        {"type": "fact" + " " * 40, "reason": "t"},
        content_type="application/json",
        **admin_auth,
    )
    assert padded.status_code == 200 and padded.json()["memory"]["type"] == "fact"
    query = {"query": "Dana short reviews", "type": " fact "}
    found = post(client, "/api/memory/recall", query, admin_auth).json()
    assert [m["id"] for m in found["results"]] == [made["id"]]


def test_patch_needs_a_reason_honours_if_version_and_reports_duplicates(client, admin_auth):
    a = remember(client, admin_auth, content="Billing uses Postgres 14")
    b = remember(client, admin_auth, content="Billing uses Postgres 15")
    url = f"/api/memory/{a['id']}"
    response = client.patch(
        url, {"content": "Billing uses Postgres 16"}, content_type="application/json", **admin_auth
    )
    assert response.status_code == 400 and response.json()["error"] == "reason_required"
    response = client.patch(
        url,
        {"content": "Billing uses Postgres 16", "reason": "upgrade", "ifVersion": 3},
        content_type="application/json",
        **admin_auth,
    )
    assert (
        response.status_code == 409
        and response.json()["error"] == "version_conflict"
        and response.json()["currentVersion"] == 1
    )
    response = client.patch(
        url,
        {"content": "billing uses postgres 15.", "reason": "dup"},
        content_type="application/json",
        **admin_auth,
    )
    assert response.status_code == 409 and response.json()["duplicateMemoryId"] == b["id"]
    response = client.patch(
        url,
        {"content": "Billing uses Postgres 16", "reason": "upgrade", "ifVersion": 1},
        content_type="application/json",
        **admin_auth,
    )
    assert response.status_code == 200 and response.json()["version"] == 2
    response = client.patch(
        url, {"pinned": "no", "reason": "x"}, content_type="application/json", **admin_auth
    )
    assert response.status_code == 400
    response = client.patch(
        url,
        {"content": "Billing uses Postgres 16", "reason": "same"},
        content_type="application/json",
        **admin_auth,
    )
    assert response.json()["status"] == "no_changes"


def test_a_delete_checks_an_if_version_given_in_the_query(client, admin_auth):
    memory = remember(client, admin_auth, content="Staging resets every Monday")
    url = f"/api/memory/{memory['id']}"
    response = client.delete(url + "?reason=old&ifVersion=99", **admin_auth)
    assert response.status_code == 409 and response.json()["error"] == "version_conflict"
    for odd in ("soon", "%C2%B2"):  # a word, and a digit that is no number ("²")
        response = client.delete(url + f"?reason=old&ifVersion={odd}", **admin_auth)
        assert response.status_code == 400 and "ifVersion" in response.json()["message"]
    assert client.get(url, **admin_auth).json()["isDeleted"] is False
    response = client.delete(url + "?reason=old&ifVersion=1", **admin_auth)
    assert response.status_code == 200 and response.json()["status"] == "deleted"


def test_an_edit_and_a_recover_check_an_if_version_and_take_a_reason_from_the_query(
    client, admin_auth
):
    """Every write reads ifVersion and reason from the query as DELETE does: PATCH and recover
    ignored them, so a stale edit went through (a QA pass)."""
    memory = remember(client, admin_auth, content="Staging resets every Monday")
    url = f"/api/memory/{memory['id']}"
    stale = client.patch(
        url + "?ifVersion=99", {"tags": ["ops"], "reason": "tag it"}, **JSON, **admin_auth
    )
    assert (stale.status_code, stale.json()["error"]) == (409, "version_conflict")
    assert client.get(url, **admin_auth).json()["tags"] == []
    edited = client.patch(
        url + "?ifVersion=1&reason=from+the+query", {"tags": ["ops"]}, **JSON, **admin_auth
    )
    assert edited.status_code == 200, edited.content
    client.delete(url + "?reason=gone", **admin_auth)
    version = client.get(url, **admin_auth).json()["version"]
    stale = client.post(f"{url}/recover?ifVersion={version - 1}&reason=back", **JSON, **admin_auth)
    assert (stale.status_code, stale.json()["error"]) == (409, "version_conflict")
    back = client.post(
        f"{url}/recover?ifVersion={version}&reason=back+via+the+query", **JSON, **admin_auth
    )
    assert back.status_code == 200, back.content
    reasons = [
        row["reason"] for row in client.get(f"{url}/history", **admin_auth).json()["history"]
    ]
    assert "from the query" in reasons and "back via the query" in reasons


def test_delete_is_soft_pinned_needs_force_and_recover_restores(client, admin_auth):
    memory = remember(client, admin_auth, content="Never deploy on Fridays", pinned=True)
    url = f"/api/memory/{memory['id']}"
    assert client.delete(url, **admin_auth).status_code == 400  # reason required
    response = client.delete(url, {"reason": "old"}, content_type="application/json", **admin_auth)
    assert response.status_code == 409 and response.json()["error"] == "pinned_requires_force"
    response = client.delete(url + "?reason=old&force=true", **admin_auth)
    assert response.status_code == 200 and response.json()["status"] == "deleted"
    assert client.get(url, **admin_auth).json()["isDeleted"] is True
    assert (
        client.delete(url + "?reason=again&force=true", **admin_auth).json()["error"]
        == "already_deleted"
    )
    response = post(client, url + "/recover", {"reason": "mistake"}, admin_auth)
    assert response.status_code == 200 and response.json()["version"] == 3
    assert (
        post(client, url + "/recover", {"reason": "twice"}, admin_auth).json()["error"]
        == "not_deleted"
    )


def test_history_lists_events_oldest_first_with_actor_and_reason(client, admin_auth):
    memory = remember(client, admin_auth, content="Use pnpm for the web app")
    url = f"/api/memory/{memory['id']}"
    client.patch(
        url,
        {"content": "Use pnpm 9 for the web app", "reason": "version pin"},
        content_type="application/json",
        **admin_auth,
    )
    client.delete(url, {"reason": "obsolete"}, content_type="application/json", **admin_auth)
    body = client.get(url + "/history", **admin_auth).json()
    assert body["memoryId"] == memory["id"]
    events = [(h["event"], h["reason"], h["actorType"]) for h in body["history"]]
    assert events == [
        ("created", "remember", "agent"),
        ("updated", "version pin", "operator"),
        ("deleted", "obsolete", "operator"),
    ]
    assert body["history"][1]["oldContent"] == "Use pnpm for the web app"
    assert body["history"][1]["newContent"] == "Use pnpm 9 for the web app"
    assert body["history"][0]["changedBy"] == "admin-bot"


def test_recall_returns_ranked_live_results_of_the_tokens_agent(client, ingest_auth):
    target = remember(client, ingest_auth, content="The billing-api deploys through GitHub Actions")
    remember(client, ingest_auth, content="Lunch is at noon")
    from api.auth import create_token

    _, ops = create_token("ops-writer", agent_id="ops-bot", scopes=["ingest"])
    remember(
        client,
        {"HTTP_AUTHORIZATION": f"Bearer {ops}"},
        content="billing-api deploys through Jenkins",
    )
    from pipeline.tasks import embed_missing

    embed_missing()
    response = post(
        client,
        "/api/memory/recall",
        {"query": "how does billing-api deploy?", "limit": 3},
        ingest_auth,
    )
    assert response.status_code == 200
    results = response.json()["results"]
    assert results[0]["id"] == target["id"] and results[0]["score"] > 0
    assert all(r["agentId"] == "default" for r in results)


def test_recall_leaves_out_a_memory_that_vanished_after_the_search(
    client, ingest_auth, monkeypatch
):
    kept = remember(client, ingest_auth, content="The billing-api deploys through GitHub Actions")
    gone = remember(client, ingest_auth, content="The billing-api deploys on Fridays")
    real_in_bulk = Memory.objects.in_bulk

    def purged_meanwhile(*args, **kwargs):
        # The row is gone by the time recall reads the hits' memories (a purge racing the search).
        found = real_in_bulk(*args, **kwargs)
        found.pop(gone["id"], None)
        return found

    monkeypatch.setattr(Memory.objects, "in_bulk", purged_meanwhile)
    response = post(client, "/api/memory/recall", {"query": "billing-api deploys"}, ingest_auth)
    assert response.status_code == 200
    assert [row["id"] for row in response.json()["results"]] == [kept["id"]]


@pytest.mark.parametrize(
    ("body", "status"),
    [
        ({}, 400),
        ({"query": ""}, 400),
        ({"query": 3}, 400),
        ({"query": "x", "limit": 0}, 400),
        ({"query": "x", "limit": "5"}, 400),
        ({"query": "x", "limit": 101}, 400),
    ],
)
def test_bad_recall_bodies_are_400(client, ingest_auth, body, status):
    assert post(client, "/api/memory/recall", body, ingest_auth).status_code == status


def test_recall_with_hostile_query_text_does_not_fail(client, ingest_auth):
    remember(client, ingest_auth, content="Kafka: billing events")
    from pipeline.tasks import embed_missing

    embed_missing()
    response = post(
        client, "/api/memory/recall", {"query": 'kafka: "billing AND (NOT*'}, ingest_auth
    )
    assert response.status_code == 200 and response.json()["results"]


def test_health_reports_database_vectors_provider_and_queue(client, ingest_auth):
    remember(client, ingest_auth, content="a memory with a pending job")
    body = client.get("/api/health", **ingest_auth).json()  # the full report needs a token
    assert body["database"]["ok"] is True
    if connection.vendor == "postgresql":
        assert body["database"]["engine"] == "postgresql"
        assert body["vector"]["backend"] == "pgvector" and body["vector"]["pgvectorVersion"]
    else:
        assert body["vector"]["sqliteVecLoaded"] is True and body["vector"][
            "sqliteVecVersion"
        ].startswith("v0.")
    assert body["llm"]["active"] == "offline"
    assert body["queue"]["pending"] == 1
    assert body["mode"] == "shadow" and body["mutationsFrozen"] is False


def test_health_says_the_brake_is_on_where_the_mode_reads_shadow(client, ingest_auth):
    from pipeline.config import get_config

    config = get_config()
    config.shadow_mode, config.allow_update_delete, config.mutations_frozen = False, True, True
    config.save()
    body = client.get("/api/health", **ingest_auth).json()
    assert (body["mode"], body["mutationsFrozen"]) == ("shadow", True)


def test_forgetting_a_pinned_memory_takes_a_json_true_not_a_string(client, admin_auth):
    """`force` is a boolean in a JSON body and in MCP (its schema says so): "yes" force-deleted a
    pinned memory. A query parameter is text, and `?force=true` still works."""
    from api.auth import create_token
    from api.mcp_server import run_tool

    memory = remember(client, admin_auth, content="Never deploy on Fridays", pinned=True)
    url = f"/api/memory/{memory['id']}"
    body = {"reason": "old", "force": "yes"}
    response = client.delete(url, body, content_type="application/json", **admin_auth)
    assert (
        response.status_code == 400 and "force must be true or false" in response.json()["message"]
    )
    _, plain = create_token("mcp-agent", scopes=["ingest", "review"])
    payload, is_error = run_tool("forget", {"id": memory["id"], **body}, f"Bearer {plain}", "t")
    assert is_error and payload["error"] == "invalid_request"
    assert client.get(url, **admin_auth).json()["isDeleted"] is False
    payload, is_error = run_tool(
        "forget", {"id": memory["id"], "reason": "old", "force": True}, f"Bearer {plain}", "t"
    )
    assert not is_error and payload["status"] == "deleted"


def test_health_says_a_queue_that_runs_no_task_while_tasks_wait_is_stalled(
    client, ingest_auth, settings, tmp_path
):
    """A queue worker killed while it held django-q2's task pipe left the others waiting for good,
    every process alive, and health said ok (a QA pass): each task's start and end is recorded
    (django-q2's signals), and a queue with no task running, quiet for longer than a job attempt
    and two ticks while tasks wait in the broker, is a problem."""
    import os
    import time

    from django_q.signals import post_execute_in_worker, pre_execute
    from django_q.tasks import async_task

    from memory import queue_beat

    settings.DATA_DIR = tmp_path
    body = client.get("/api/health", **ingest_auth).json()
    assert body["queue"]["lastTaskAt"] is None and body["queue"]["stalled"] is False
    assert body["ok"] is True and body["problems"] == []
    async_task("time.sleep", 0)  # a task waiting in the broker
    pre_execute.send(sender="django_q", func=None, task={})  # what a worker sends first
    assert abs(queue_beat.last_task_at() - time.time()) < 5
    long_ago = time.time() - queue_beat.stall_seconds() - 60
    os.utime(queue_beat.beat_path(), (long_ago, long_ago))
    # A worker running a long task (an import's 15-minute slice) is work, not a stall (a live
    # check saw two long tasks killed as a stalled queue).
    assert queue_beat.busy_workers() == 1
    assert client.get("/api/health", **ingest_auth).json()["ok"] is True
    post_execute_in_worker.send(sender="django_q", func=None, task={})
    assert queue_beat.busy_workers() == 0
    os.utime(queue_beat.beat_path(), (long_ago, long_ago))
    body = client.get("/api/health", **ingest_auth).json()
    assert body["queue"]["stalled"] is True and body["ok"] is False
    # Written as every moment of the API is (it was "+00:00").
    assert body["queue"]["lastTaskAt"] == iso(datetime.fromtimestamp(long_ago, UTC))
    assert body["queue"]["lastTaskAt"].endswith("Z")
    assert "the queue has run no task for" in body["problems"][0]
    # The file of a worker killed mid-task counts for nothing (its process is gone).
    dead = queue_beat.busy_path(2**22 + 12345)
    dead.touch()
    assert queue_beat.busy_workers() == 0 and not dead.exists()
