"""Hybrid search: sanitised BM25, corrected normalisation, vector leg, merge, exclusions."""

import numpy as np
import pytest

from memory import keyword, writes
from memory.search import hybrid_search, merge
from memory.writes import Actor, Vector
from pipeline.llm.offline import OfflineEmbedder

AGENT = Actor("claude-code", "agent")
EMBEDDER = OfflineEmbedder(768)


def remember(text, agent_id="default", embed=True):
    memory = writes.remember(text, actor=AGENT, agent_id=agent_id).memory
    if embed:
        writes.store_vector(
            memory.id,
            memory.content_hash,
            Vector(EMBEDDER.embed_one(memory.content), EMBEDDER.model),
        )
    return memory


def search(text, **kw):
    kw.setdefault("query_vector", EMBEDDER.embed_one(text))
    kw.setdefault("model", EMBEDDER.model)
    return hybrid_search(text, **kw)


HOSTILE = [
    'billing: "postgres',
    "-postgres",
    "postgres*",
    "(postgres OR",
    "AND OR NOT",
    "postgres NEAR billing",
    "NEAR(postgres billing, 2)",
    'col:value "unterminated',
    "^start",
    "emoji 🚀 Straße naïve 数据库",
    "",
    "   ",
    '"""',
]


@pytest.mark.django_db
@pytest.mark.parametrize("query", HOSTILE)
def test_no_user_text_can_raise_an_fts_error(query):
    remember("Billing runs on Postgres 16 since March")
    hits = keyword.search(query, agent_id="default", limit=5)
    assert isinstance(hits, list)


def test_the_match_expression_quotes_every_token():
    assert keyword.match_expression('billing: "postgres" -xy*') == '"billing" OR "postgres" OR "xy"'
    assert keyword.match_expression("doesn't 7") == '"doesn" OR "7"'
    assert keyword.match_expression("the of and") == '"the" OR "of" OR "and"'
    assert keyword.match_expression("the billing") == '"billing"'
    assert keyword.match_expression(":::") is None


def test_bm25_normalisation_keeps_stronger_matches_higher():
    assert (
        keyword.normalise_bm25(-8.0) > keyword.normalise_bm25(-2.0) > keyword.normalise_bm25(-0.1)
    )
    assert 0 <= keyword.normalise_bm25(-1e9) < 1


@pytest.mark.django_db
def test_the_stronger_keyword_match_scores_higher_in_the_store():
    strong = remember("postgres postgres postgres billing postgres", embed=False)
    weak = remember(
        "billing notes mention postgres once among many other words here today", embed=False
    )
    for i in range(8):
        remember(f"unrelated note number {i} about lunch", embed=False)
    hits = dict(keyword.search("postgres billing", agent_id="default", limit=5))
    assert hits[strong.id] > hits[weak.id]


@pytest.mark.django_db
def test_the_vector_leg_finds_similar_text_without_keyword_overlap():
    target = remember("Deployments of the billing service happen through GitHub Actions")
    remember("Lunch is at noon on Fridays")
    hits = hybrid_search(
        "deployment billing-services githubactions",
        query_vector=EMBEDDER.embed_one("Deployment of billing services via GitHub Action"),
        model=EMBEDDER.model,
        k=1,
    )
    assert hits[0].memory_id == target.id and hits[0].vector_score > 0.3


def test_merge_weights_both_legs_drops_low_scores_and_keeps_top_k():
    hits = merge(
        [("a", 0.5), ("b", 0.9), ("c", 0.05)],
        [("a", 1.0), ("d", 0.2)],
        alpha=0.7,
        min_score=0.1,
        k=3,
    )
    assert [h.memory_id for h in hits] == ["b", "a", "d"]
    assert hits[1].score == pytest.approx(0.7 * 1.0 + 0.3 * 0.5)
    assert hits[0].score == 0.9 and hits[0].vector_score is None


@pytest.mark.django_db
def test_it_never_returns_deleted_other_agents_or_the_excluded_memory_and_still_fills_k():
    source = remember("Redis caches sessions for auth-service")
    deleted = [remember(f"Redis caches sessions for auth-service replica {i}") for i in range(6)]
    for memory in deleted:
        writes.forget(memory.id, actor=Actor("dana"), reason="test")
    remember("Redis caches sessions for auth-service in ops", agent_id="ops-bot")
    live = [remember(f"Redis cache note {i} for sessions") for i in range(5)]
    hits = search(
        "Redis caches sessions for auth-service", k=5, exclude_id=source.id, min_score=0.0
    )
    ids = {h.memory_id for h in hits}
    assert len(hits) == 5
    assert ids == {m.id for m in live}


@pytest.mark.django_db
def test_vectors_of_another_model_are_never_mixed_into_a_search():
    memory = remember("Terraform state lives in S3", embed=False)
    other = Vector(EMBEDDER.embed_one(memory.content), "some-other-model")
    writes.store_vector(memory.id, memory.content_hash, other)
    hits = hybrid_search(
        "zzz",
        query_vector=EMBEDDER.embed_one("Terraform state lives in S3"),
        model=EMBEDDER.model,
        min_score=0.0,
    )
    assert hits == []
    hits = hybrid_search("zzz", query_vector=other.values, model="some-other-model", min_score=0.0)
    assert [h.memory_id for h in hits] == [memory.id]


def test_the_offline_embedder_is_deterministic_and_normalised():
    a = EMBEDDER.embed_one("Priya prefers squash merges")
    assert np.allclose(a, OfflineEmbedder(768).embed_one("Priya prefers squash merges"))
    assert np.linalg.norm(a) == pytest.approx(1.0, abs=1e-5)
    near = EMBEDDER.embed_one("Priya prefers squash merging")
    far = EMBEDDER.embed_one("The cafeteria serves soup on Mondays")
    assert float(a @ near) > float(a @ far)


@pytest.mark.django_db
def test_more_and_rarer_matched_terms_score_higher_below_one_on_either_engine():
    both = remember("Kafka carries billing events", embed=False)
    rare = remember("Kafka retention is seven days", embed=False)
    common = remember("billing totals for the week", embed=False)
    for i in range(3):
        remember(f"billing report number {i}", embed=False)
    for i in range(5):
        remember(f"unrelated note number {i} about lunch", embed=False)
    hits = dict(keyword.search("kafka billing", agent_id="default", limit=10))
    assert hits[both.id] > hits[rare.id] > hits[common.id] > 0
    assert all(0 <= score < 1 for score in hits.values())
