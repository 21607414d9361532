"""Edits and approvals never wait on the embedding server (issue 21, item 7; issue 20's carried
note): PATCH /api/memory/<id>, the dashboard's edit and a reviewer's approve write the text and
commit, then queue the vector for the queue workers. With /api/embed hung they answer at once,
and the vector arrives when a worker runs the queued task."""

import json
import threading
import time

import pytest
from django.urls import reverse

from memory import writes
from memory.models import Embedding, Memory
from memory.writes import Actor
from pipeline import memory_ops, tasks
from pipeline.models import Proposal
from tests.fake_ollama import Script
from tests.pipeline_support import RAW_TEXT, four_decisions, raw, seed_store

pytestmark = pytest.mark.django_db
HUNG = 3.0  # seconds the fake server sits on an embedding: far beyond any wait allowed here


@pytest.fixture
def hung_embeddings(fake_ollama, settings):
    """The embedding server takes every request and answers none in time."""
    settings.MEMORY_EMBED_TIMEOUT_SECONDS = 30  # the workers' generous timeout: never reached
    fake_ollama.script("/api/embed", *[Script({"embeddings": []}, delay=HUNG) for _ in range(5)])
    yield fake_ollama
    fake_ollama.scripts.clear()


def timed(call):
    started = time.perf_counter()
    response = call()
    return response, time.perf_counter() - started


def answer_embeddings(fake_ollama) -> None:
    """The server answers again: what the hung scripts held back is dropped."""
    fake_ollama.scripts.clear()


def stored_vector(memory_id: str) -> str | None:
    memory = Memory.objects.get(id=memory_id)
    if not Embedding.objects.filter(content_hash=memory.content_hash).exists():
        return None
    return memory.embedding_model


def test_patch_answers_without_waiting_and_the_vector_arrives_later(
    hung_embeddings, client, admin_auth, drain_queue
):
    memory = writes.remember("Billing runs on Postgres 16", actor=Actor("ops")).memory
    response, took = timed(
        lambda: client.patch(
            f"/api/memory/{memory.id}",
            json.dumps({"content": "Billing runs on Postgres 17", "reason": "upgraded"}),
            content_type="application/json",
            **admin_auth,
        )
    )
    assert response.status_code == 200 and took < HUNG / 2
    assert hung_embeddings.calls("/api/embed") == []  # the request never asked the model
    assert Memory.objects.get(id=memory.id).content == "Billing runs on Postgres 17"
    assert stored_vector(memory.id) is None
    answer_embeddings(hung_embeddings)
    assert drain_queue() == 1
    assert hung_embeddings.calls("/api/embed")[-1]["input"] == ["Billing runs on Postgres 17"]
    assert stored_vector(memory.id) == "nomic-embed-text"


def test_the_dashboard_edit_answers_without_waiting(hung_embeddings, reviewer_client, drain_queue):
    memory = writes.remember("Billing runs on Postgres 16", actor=Actor("ops")).memory
    response, took = timed(
        lambda: reviewer_client.post(
            reverse("dashboard:memory-action", args=[memory.id]),
            {
                "action": "edit",
                "content": "Billing runs on Postgres 17",
                "reason": "upgraded",
                "if_version": 1,
            },
        )
    )
    assert response.status_code == 302 and took < HUNG / 2
    assert hung_embeddings.calls("/api/embed") == []
    answer_embeddings(hung_embeddings)
    drain_queue()
    assert stored_vector(memory.id) == "nomic-embed-text"


def test_approve_answers_without_waiting_and_the_vector_arrives_later(
    fake_ollama, settings, client, review_auth, drain_queue
):
    add = pending_add(fake_ollama)
    settings.MEMORY_EMBED_TIMEOUT_SECONDS = 30
    fake_ollama.script("/api/embed", *[Script({"embeddings": []}, delay=HUNG) for _ in range(5)])
    asked_before = len(fake_ollama.calls("/api/embed"))
    response, took = timed(
        lambda: client.post(
            f"/api/proposals/{add.id}/approve", "{}", content_type="application/json", **review_auth
        )
    )
    assert response.status_code == 200 and took < HUNG / 2
    assert len(fake_ollama.calls("/api/embed")) == asked_before
    created = response.json()["createdMemoryId"]
    assert stored_vector(created) is None
    answer_embeddings(fake_ollama)
    drain_queue()
    assert stored_vector(created) == "nomic-embed-text"


def pending_add(fake_ollama) -> Proposal:
    """A pending ADD proposal (shadow mode), made by a job against the fake server."""
    four_decisions(fake_ollama, seed_store())
    result = raw(RAW_TEXT)
    tasks.process_pending()
    return Proposal.objects.get(job=result.job, action="add")


def test_queued_vectors_are_of_the_text_as_it_is_when_the_worker_runs(fake_ollama, drain_queue):
    memory = writes.remember("Billing runs on Postgres 16", actor=Actor("ops")).memory
    for text in ("Billing runs on Postgres 17", "Billing runs on Postgres 18"):
        memory = memory_ops.modify(memory, {"content": text}, actor=Actor("a"), reason="upgraded")
    assert drain_queue() == 2  # one task per edit; the second finds the vector stored already
    assert [call["input"] for call in fake_ollama.calls("/api/embed")] == [
        ["Billing runs on Postgres 18"]
    ]
    assert stored_vector(memory.id) == "nomic-embed-text"
    assert memory_ops.embed_stored(memory.id) is False  # nothing left to do


def test_a_recall_past_the_embedding_slots_answers_keyword_only_at_once(fake_ollama, settings):
    settings.MEMORY_RECALL_EMBED_PARALLEL = 2
    settings.MEMORY_EMBED_TIMEOUT_SECONDS = 30
    settings.MEMORY_RECALL_EMBED_TIMEOUT_SECONDS = HUNG
    fake_ollama.script("/api/embed", *[Script({"embeddings": []}, delay=HUNG) for _ in range(2)])
    waiting = [
        threading.Thread(target=memory_ops.query_vector, args=(f"query {n}",), daemon=True)
        for n in (1, 2)
    ]
    for thread in waiting:
        thread.start()
    deadline = time.monotonic() + 10
    while len(fake_ollama.calls("/api/embed")) < 2 and time.monotonic() < deadline:
        time.sleep(0.01)
    vector, took = timed(lambda: memory_ops.query_vector("query 3"))
    assert vector is None and took < 0.5  # no slot free: no wait for the model
    assert len(fake_ollama.calls("/api/embed")) == 2 and all(t.is_alive() for t in waiting)
    for thread in waiting:
        thread.join(timeout=HUNG + 5)
    assert memory_ops.query_vector("query 4") is not None  # the slots are free again


def test_a_recalls_keyword_leg_runs_while_its_query_is_being_embedded(
    fake_ollama, settings, monkeypatch
):
    """The keyword leg needs no vector: it is done before the embedding call answers, and the
    hits are those of a search run after it, with the same vector."""
    from memory import keyword
    from memory.search import hybrid_search
    from pipeline.config import search_settings

    settings.MEMORY_RECALL_EMBED_TIMEOUT_SECONDS = 10
    for text in ("Billing runs on Postgres 16.", "The search service runs on Redis."):
        memory = writes.remember(text, actor=Actor("ops"), create_job=False).memory
        assert memory_ops.embed_stored(memory.id)
    query = "Where does billing run?"
    answer = fake_ollama._default("/api/embed", {"input": [query]})
    fake_ollama.script("/api/embed", Script(answer, delay=0.5))  # its usual answer, late
    moments: dict[str, float] = {}
    search_many, embed_or_none = keyword.search_many, memory_ops.embed_or_none

    def keyword_leg(*args, **kwargs):
        found = search_many(*args, **kwargs)
        moments.setdefault("keyword leg done", time.monotonic())
        return found

    def embedded(*args, **kwargs):
        vector = embed_or_none(*args, **kwargs)
        moments["embedding answered"] = time.monotonic()
        return vector

    monkeypatch.setattr(keyword, "search_many", keyword_leg)
    monkeypatch.setattr(memory_ops, "embed_or_none", embedded)
    recalled = memory_ops.recall(query, ["default"], k=5)
    assert moments["keyword leg done"] < moments["embedding answered"]
    assert not recalled.keyword_only and recalled.hits[0].vector_score is not None
    vector = memory_ops.embed_or_none(query)
    alpha, min_score = search_settings()
    assert recalled.hits == hybrid_search(
        query,
        k=5,
        alpha=alpha,
        min_score=min_score,
        query_vector=vector.values,
        model=vector.model,
    )


def test_a_recall_embedding_that_could_not_start_gives_its_slot_back_once(
    fake_ollama, settings, monkeypatch
):
    """A thread pool queues a call before it starts a thread for it: when the start fails the
    call stays queued and a busy thread may run it later. The caller gives the slot back, and the
    late call neither calls the model nor gives the slot back a second time."""
    settings.MEMORY_RECALL_EMBED_PARALLEL = 2
    queued: list = []

    class RefusingPool:
        def submit(self, work, *args):
            queued.append((work, args))
            raise RuntimeError("can't start new thread")

    monkeypatch.setattr(memory_ops, "process_pool", lambda name, workers: RefusingPool())
    with pytest.raises(RuntimeError, match="can't start new thread"):
        memory_ops.recall("Where does billing run?", ["default"], k=5)
    slots = memory_ops._embed_slots()
    assert [slots.acquire(blocking=False) for _ in range(3)] == [True, True, False]
    slots.release()
    slots.release()  # both free: the failed start gave its slot back
    ((work, args),) = queued
    assert work(*args) is None  # run late by another thread: no model call, no second release
    assert fake_ollama.calls("/api/embed") == []
    with pytest.raises(ValueError):  # a BoundedSemaphore refuses one release too many
        slots.release()
