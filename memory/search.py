"""Hybrid search: BM25 leg + vector leg merged by id with alpha, dropped below min_score, top k."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from memory import keyword, vectors

LEG_LIMIT = 10


@dataclass
class Hit:
    memory_id: str
    score: float
    keyword_score: float | None = None
    vector_score: float | None = None


@dataclass
class SearchResult:
    hits: list[Hit]
    warnings: list[str] = field(default_factory=list)


def merge(
    keyword_hits: list[tuple[str, float]],
    vector_hits: list[tuple[str, float]],
    *,
    alpha: float,
    min_score: float,
    k: int,
) -> list[Hit]:
    """alpha*vector + (1-alpha)*bm25 when both legs scored an id, else the one score."""
    merged: dict[str, Hit] = {}
    for memory_id, score in keyword_hits:
        merged[memory_id] = Hit(memory_id, score, keyword_score=score)
    for memory_id, score in vector_hits:
        hit = merged.setdefault(memory_id, Hit(memory_id, score))
        hit.vector_score = score
    for hit in merged.values():
        if hit.keyword_score is not None and hit.vector_score is not None:
            hit.score = alpha * hit.vector_score + (1 - alpha) * hit.keyword_score
        else:
            hit.score = hit.vector_score if hit.vector_score is not None else hit.keyword_score
    kept = [hit for hit in merged.values() if hit.score >= min_score]
    kept.sort(key=lambda hit: (-hit.score, hit.memory_id))
    return kept[:k]


def hybrid_search(
    text: str,
    *,
    agent_id: str = "default",
    k: int = 5,
    alpha: float = 0.7,
    min_score: float = 0.1,
    exclude_id: str | None = None,
    query_vector: np.ndarray | None = None,
    model: str | None = None,
) -> list[Hit]:
    """Top-k live memories of one agent for `text`; pass the query's vector to use the vector leg.

    With both legs, every memory either leg found is scored on both (a memory without any keyword
    match scores 0 on that leg), so the weighted formula ranks them all alike.

    The caller embeds the query (a model call) before calling, so this function never waits on
    a model server and can run anywhere.
    """
    leg_limit = max(LEG_LIMIT, k * 2)
    keyword_hits = keyword.search(text, agent_id=agent_id, limit=leg_limit, exclude_id=exclude_id)
    if query_vector is None or not model:
        return merge(keyword_hits, [], alpha=alpha, min_score=min_score, k=k)
    vector_hits = vectors.search(
        query_vector, model=model, agent_id=agent_id, limit=leg_limit, exclude_id=exclude_id
    )
    # Score every candidate on both legs: a memory just outside one leg's top list would otherwise
    # keep its single score and outrank memories that match on both.
    keyword_scores = dict(keyword_hits)
    vector_scores = dict(vector_hits)
    missing_keyword = [mid for mid in vector_scores if mid not in keyword_scores]
    missing_vector = [mid for mid in keyword_scores if mid not in vector_scores]
    keyword_scores.update(keyword.scores_for(text, missing_keyword))
    vector_scores.update(
        vectors.similarities_for(query_vector, model=model, memory_ids=missing_vector)
    )
    # A memory with no vector yet (its job has not run) has no similarity evidence: 0, not a pass
    # to rank on its keyword score alone above memories that match on both legs.
    for memory_id in missing_vector:
        vector_scores.setdefault(memory_id, 0.0)
    return merge(
        list(keyword_scores.items()),
        list(vector_scores.items()),
        alpha=alpha,
        min_score=min_score,
        k=k,
    )
