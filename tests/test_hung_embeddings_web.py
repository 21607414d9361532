"""A hung embedding server does not stall the web tier (issue 21, item 7): `manage.py serve` with one
web process, recalls blocked on /api/embed, and remember and health still answered while they wait.

Before: one synchronous gunicorn worker per process, so a recall waiting on the model held the whole
process and remember waited behind it (p50 ~20 ms -> 1.5 s). Now the web runs threads, and at most
MEMORY_RECALL_EMBED_PARALLEL recalls per process wait on the model: the next answers keyword-only
at once (flagged degraded), and every other request has a thread.
"""

from __future__ import annotations

import threading
import time

import httpx
import pytest

from tests.fake_ollama import FakeOllama, Script
from tests.mcp_support import Store, free_port
from tests.test_mcp_http import Served, reachable, wait_for

pytestmark = pytest.mark.slow
RECALL_TIMEOUT = 6.0  # seconds a recall waits for the query's vector
HUNG = 10.0  # seconds the fake server sits on an embedding: longer than every recall waits
QUERY = "billing-api deploys"


@pytest.fixture
def fake():
    server = FakeOllama().start()
    yield server
    server.scripts.clear()
    server.stop()


@pytest.fixture
def served(tmp_path, fake):
    store = Store(
        tmp_path,
        MEMORY_EMBEDDING_PROVIDER="ollama",
        OLLAMA_URL=fake.url,
        MEMORY_RECALL_EMBED_TIMEOUT_SECONDS=str(RECALL_TIMEOUT),
        MEMORY_RECALL_EMBED_PARALLEL="2",
        WEB_THREADS="4",
    )
    store.tokens = {"ingest": store.token("agent-one", "ingest")}
    server = Served(store, free_port(), free_port())
    try:
        wait_for(lambda: reachable(server.web + "/login/"), 60, "the web to answer")
        yield server
    finally:
        server.stop()


def post(served, path: str, body: dict, timeout: float = 30) -> httpx.Response:
    headers = {"Authorization": f"Bearer {served.store.tokens['ingest']}"}
    return httpx.post(served.web + path, json=body, headers=headers, timeout=timeout)


def test_remember_and_health_answer_while_recalls_wait_on_a_hung_embedding_server(served, fake):
    for content in (
        "The billing-api deploys through GitHub Actions.",
        "Lunch is at noon on Fridays.",
    ):
        assert post(served, "/api/memory/remember", {"content": content}).status_code == 201
    fake.script("/api/embed", *[Script({"embeddings": []}, delay=HUNG) for _ in range(20)])

    answers: dict[int, tuple[httpx.Response, float]] = {}

    def recall(n: int) -> None:
        started = time.perf_counter()
        response = post(served, "/api/memory/recall", {"query": QUERY})
        answers[n] = (response, time.perf_counter() - started)

    def waiting_on_the_model() -> int:
        return sum(call.get("input") == [QUERY] for call in fake.calls("/api/embed"))

    blocked = [threading.Thread(target=recall, args=(n,), daemon=True) for n in (1, 2)]
    for thread in blocked:
        thread.start()
    wait_for(lambda: waiting_on_the_model() == 2, 20, "two recalls to wait on the model")

    recall(3)  # every embedding slot of the process is taken: keywords, at once
    response, took = answers[3]
    assert response.status_code == 200 and took < RECALL_TIMEOUT / 2
    assert response.json()["degraded"] == "keyword_only" and response.json()["results"]
    assert waiting_on_the_model() == 2  # it never asked the model

    started = time.perf_counter()
    remembered = post(served, "/api/memory/remember", {"content": "Kenji owns billing."})
    remember_ms = (time.perf_counter() - started) * 1000
    started = time.perf_counter()
    health = httpx.get(served.web + "/api/health", timeout=30)
    health_ms = (time.perf_counter() - started) * 1000
    assert remembered.status_code == 201 and health.status_code == 200
    # By structure: both were answered while the two recalls were still waiting on the model.
    assert all(thread.is_alive() for thread in blocked), (remember_ms, health_ms)
    assert remember_ms < 1000 and health_ms < 1000  # generous: ~20 ms on an idle machine

    for thread in blocked:
        thread.join(timeout=RECALL_TIMEOUT + 10)
    for n in (1, 2):
        response, took = answers[n]
        assert response.status_code == 200 and response.json()["degraded"] == "keyword_only"
        assert RECALL_TIMEOUT - 0.5 < took < HUNG
