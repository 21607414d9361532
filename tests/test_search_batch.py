"""Hybrid search in batches and in small stores: a job's batched search ranks each fact's
candidates exactly as one search per fact does (issue 12), a memory without a vector of the
current model keeps its keyword score, and keyword matches count in a store of two memories
(issue 10 item 6)."""

import numpy as np
import pytest

from memory import keyword, matrix, writes
from memory.search import hybrid_search, hybrid_search_many
from memory.writes import Actor, Vector
from pipeline import decision, tasks
from pipeline.llm.offline import OfflineEmbedder
from pipeline.models import LlmCall
from pipeline.parsing import Fact
from tests.pipeline_support import ScriptedModel, raw, seed, set_mode

pytestmark = pytest.mark.django_db

AGENT = Actor("claude-code", "agent")
EMBEDDER = OfflineEmbedder(768)
PEOPLE = ["Priya", "Kenji", "Lena", "Mara", "Omar", "Sana", "Ivo", "Yuki"]
TOOLS = ["Postgres", "Redis", "Kafka", "Terraform", "Grafana", "Sentry"]
SERVICES = ["billing", "search", "ledger", "payments", "auth"]


def remember(text, agent_id="default", model=EMBEDDER.model):
    memory = writes.remember(text, actor=AGENT, agent_id=agent_id, create_job=False).memory
    if model:
        vector = Vector(EMBEDDER.embed_one(memory.content), model)
        writes.store_vector(memory.id, memory.content_hash, vector)
    return memory


def sentence(i: int) -> str:
    person, tool = PEOPLE[i % len(PEOPLE)], TOOLS[(i * 7) % len(TOOLS)]
    service = SERVICES[(i * 3) % len(SERVICES)]
    return f"{person} moved the {service} service to {tool} in sprint {i}."


@pytest.fixture
def store():
    """Sixty memories: most embedded, some not, some of another model, agent or forgotten."""
    memories = []
    for i in range(60):
        model = None if i % 9 == 0 else ("old-model" if i % 11 == 0 else EMBEDDER.model)
        memories.append(remember(sentence(i), model=model))
    remember("Priya moved the billing service to Postgres for the ops team", agent_id="ops")
    for memory in memories[1::13]:
        writes.forget(memory.id, actor=Actor("dana"), reason="test")
    return memories


QUERIES = [
    "Priya moved billing to Postgres",
    "Kenji and the search service on Redis",
    "Who moved the ledger service to Kafka?",
    "Terraform for payments in sprint 12",
    "Grafana dashboards for auth",
    "lunch menu on Fridays",
    "",
]


@pytest.mark.parametrize("pool", [matrix.POOL, 8])  # 8: the hamming cut runs on this small store
def test_a_batched_search_ranks_every_query_exactly_as_one_search_each(store, monkeypatch, pool):
    monkeypatch.setattr(matrix, "POOL", pool)
    vectors = [EMBEDDER.embed_one(q) if i != 3 else None for i, q in enumerate(QUERIES)]
    for min_score in (0.0, 0.1):
        batched = hybrid_search_many(
            QUERIES,
            query_vectors=vectors,
            model=EMBEDDER.model,
            exclude_id=store[2].id,
            min_score=min_score,
        )
        one_by_one = [
            hybrid_search(
                q, query_vector=v, model=EMBEDDER.model, exclude_id=store[2].id, min_score=min_score
            )
            for q, v in zip(QUERIES, vectors, strict=True)
        ]
        assert batched == one_by_one
        assert any(len(hits) == 5 for hits in batched)


def test_a_jobs_candidates_equal_one_search_per_fact(store):
    facts = [Fact(q, "fact", 0.9) for q in QUERIES if q]
    vectors = [EMBEDDER.embed_one(f.content) for f in facts]
    options = {"agent_id": "default", "source_id": store[0].id, "alpha": 0.7, "min_score": 0.1}
    batched = decision.find_candidates_many(facts, vectors=vectors, model=EMBEDDER.model, **options)
    single = [
        decision.find_candidates(f, vector=v, model=EMBEDDER.model, **options)
        for f, v in zip(facts, vectors, strict=True)
    ]
    assert [[c.as_dict() for c in found] for found in batched] == [
        [c.as_dict() for c in found] for found in single
    ]


@pytest.mark.sqlite_only(reason="the per-process numpy matrix serves KNN only on SQLite")
@pytest.mark.sqlite_only(reason="the shared matrix serves SQLite; PostgreSQL answers from HNSW")
def test_the_matrix_ranks_exactly_past_the_hamming_cut():
    """Three times more rows than the hamming cut keeps: the neighbours that are really near (a
    cluster of look-alikes) all survive it, and come back in exact order with exact distances."""
    from django.utils import timezone

    from memory.models import Embedding
    from memory.vectors import index_vector, vector_to_blob

    rng = np.random.default_rng(11)
    base = rng.standard_normal(768).astype(np.float32)
    rows = []
    for n in range(matrix.POOL * 3):
        noise = rng.standard_normal(768).astype(np.float32)
        v = base + (0.5 + n * 0.01) * noise if n < 30 else noise
        v /= np.linalg.norm(v)
        e = Embedding.objects.create(
            content_hash=f"h{n}",
            vector=vector_to_blob(v),
            dimensions=768,
            model="m",
            created_at=timezone.now(),
        )
        index_vector(e.id, v, "m")
        rows.append((e.id, v))
    ids = np.array([i for i, _ in rows])
    stacked = np.vstack([v for _, v in rows])
    queries = [base + 0.6 * rng.standard_normal(768).astype(np.float32) for _ in range(4)]
    found = matrix.INDEX.nearest_many(np.vstack(queries), model="m", k=10)
    for query, hits in zip(queries, found, strict=True):
        scores = stacked @ (query / np.linalg.norm(query))
        exact = ids[np.lexsort((ids, -scores))[:10]]
        assert [eid for eid, _ in hits] == [int(i) for i in exact]
        assert np.allclose([1 - d for _, d in hits], np.sort(scores)[::-1][:10], atol=1e-5)


# --- issue 10 item 6 --------------------------------------------------------------------------------


def test_keyword_matches_count_in_a_store_of_two_memories():
    billing = remember("The billing service runs on Postgres 14", model=None)
    remember("Lunch is at noon on Fridays", model=None)
    hits = hybrid_search("Which Postgres version runs the billing service?")
    assert [h.memory_id for h in hits] == [billing.id]
    assert hits[0].score >= 0.3 and hits[0].vector_score is None
    # With a query vector too: the memories have no vector, so their keyword score stands alone.
    query = "billing service Postgres 16"
    hits = hybrid_search(query, query_vector=EMBEDDER.embed_one(query), model=EMBEDDER.model)
    assert [h.memory_id for h in hits] == [billing.id] and hits[0].score >= 0.3


def test_a_fact_in_a_store_of_two_memories_gets_a_decision(fake_ollama):
    set_mode("controlled-write")
    seed("The billing service runs on Postgres 14")  # no vector: its job never ran
    ScriptedModel(fake_ollama, facts=["The billing service runs on Postgres 16"])
    result = raw("Notes: the billing service moved to a new Postgres.")
    tasks.process_pending()
    assert LlmCall.objects.filter(job=result.job, kind="decide").count() == 1


def test_a_memory_not_yet_re_embedded_keeps_its_keyword_score():
    # Halfway through a switch of embedding model: one memory still has the old model's vector.
    old = remember("Kafka retention for the billing events is seven days", model="old-model")
    new = remember("Billing events flow through Kafka topics", model=EMBEDDER.model)
    for i in range(6):
        remember(f"Unrelated note number {i} about the cafeteria menu", model=EMBEDDER.model)
    query = "Kafka retention for billing events"
    hits = {
        h.memory_id: h
        for h in hybrid_search(
            query, query_vector=EMBEDDER.embed_one(query), model=EMBEDDER.model, min_score=0.0
        )
    }
    assert hits[old.id].vector_score is None
    assert hits[old.id].score == hits[old.id].keyword_score > 0.5
    assert hits[new.id].vector_score is not None
    assert hits[old.id].score > hits[new.id].score  # the better match still ranks first


def test_a_window_of_one_candidate_still_finds_the_best_match(monkeypatch):
    monkeypatch.setattr(keyword, "CANDIDATE_WINDOW", 1)  # only the best-weighed memory is scored
    best = remember("Sana tunes Redis eviction for the search cluster", model=None)
    for i in range(8):
        remember(f"The search cluster note number {i}", model=None)
    hits = keyword.search("Sana search cluster Redis eviction", agent_id="default", limit=3)
    assert hits[0][0] == best.id
