"""A hung embedding server does not hold web requests (issue 10, item 11): recall falls back to
keyword results after a short timeout and says so, health never waits on a model, and remember
never calls one. The fake Ollama server is made slow with scripted delays."""

import json
import time

import pytest

from tests.fake_ollama import Script

pytestmark = pytest.mark.django_db
HUNG = 3.0  # seconds the fake server sits on a request: far beyond any wait the web path allows


def post(client, url, body, auth):
    return client.post(url, json.dumps(body), content_type="application/json", **auth)


def timed(call):
    started = time.perf_counter()
    response = call()
    return response, time.perf_counter() - started


def test_recall_answers_with_keywords_only_when_embeddings_hang(
    fake_ollama, settings, client, ingest_auth
):
    settings.MEMORY_EMBED_TIMEOUT_SECONDS = 30  # the pipeline's own, generous timeout
    settings.MEMORY_RECALL_EMBED_TIMEOUT_SECONDS = 0.3
    for content in (
        "The billing-api deploys through GitHub Actions.",
        "Lunch is at noon on Fridays.",
        "Kenji owns the billing dashboard.",
    ):
        assert post(client, "/api/memory/remember", {"content": content}, ingest_auth).status_code
    fake_ollama.script("/api/embed", Script({"embeddings": []}, delay=HUNG))
    response, took = timed(
        lambda: post(client, "/api/memory/recall", {"query": "billing-api deploys"}, ingest_auth)
    )
    assert response.status_code == 200 and took < HUNG / 2
    body = response.json()
    assert body["degraded"] == "keyword_only"
    assert body["results"] and body["results"][0]["vectorScore"] is None


def test_recall_is_not_flagged_when_embeddings_answer(fake_ollama, client, ingest_auth):
    response = post(client, "/api/memory/recall", {"query": "anything at all"}, ingest_auth)
    assert response.status_code == 200 and response.json()["degraded"] is None


def test_health_never_waits_on_a_hung_model_server(fake_ollama, settings, client, ingest_auth):
    settings.MEMORY_LLM_PROVIDER = "auto"  # resolving 'auto' means asking whether Ollama answers
    settings.MEMORY_PROBE_TIMEOUT_SECONDS = 10
    fake_ollama.script("/api/tags", Script({"models": []}, delay=HUNG))
    for auth in ({}, ingest_auth):  # the public liveness and the full report
        response, took = timed(lambda auth=auth: client.get("/api/health", **auth))
        assert response.status_code == 200 and took < HUNG / 2
    llm = response.json()["llm"]
    assert llm["ollamaReachable"] is None and llm["active"].startswith("unknown")


def test_health_reports_a_reachable_server_at_once(fake_ollama, settings, client, ingest_auth):
    settings.MEMORY_LLM_PROVIDER = "auto"
    llm = client.get("/api/health", **ingest_auth).json()["llm"]
    assert (llm["ollamaReachable"], llm["active"]) == (True, "ollama")


def test_remember_never_calls_a_model(fake_ollama, settings, client, ingest_auth):
    settings.MEMORY_LLM_PROVIDER = "auto"
    for path in ("/api/tags", "/api/embed", "/api/chat"):
        fake_ollama.script(path, Script({}, delay=HUNG))
    response, took = timed(
        lambda: post(client, "/api/memory/remember", {"content": "Raw first."}, ingest_auth)
    )
    assert response.status_code == 201 and took < HUNG / 2
    assert fake_ollama.requests == []
