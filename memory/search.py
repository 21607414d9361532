"""Hybrid search: BM25 leg + vector leg merged by id with alpha, dropped below min_score, top k.

`hybrid_search_many` answers several queries in one pass (a job's facts: one KNN pass over the
shared matrix, one owner lookup, one candidate query for the keyword leg); `hybrid_search` is the
same function for one query, so a fact's candidates are the same whichever way they were found.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from django.db.models import Q

from memory import expiry, keyword, vectors
from memory.models import Memory

LEG_LIMIT = 10
# A filter that admits at most this many of the agent's live memories is searched exactly: every
# one of them is scored on both legs (their text and their vectors), cheaper than widening.
EXACT_FILTERED = 2000


@dataclass
class Hit:
    memory_id: str
    score: float
    keyword_score: float | None = None
    vector_score: float | None = None


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
    where: Q | None = None,
) -> list[Hit]:
    """Top-k live memories of one agent for `text`; pass the query's vector to use the vector leg.
    Live: not deleted and not expired (memory.expiry), both checked inside each leg's SQL.
    `where` (a filter on Memory) narrows the search inside both legs, never after them.

    The caller embeds the query (a model call) before calling, so this function never waits on
    a model server and can run anywhere.
    """
    return hybrid_search_many(
        [text],
        agent_id=agent_id,
        k=k,
        alpha=alpha,
        min_score=min_score,
        exclude_id=exclude_id,
        query_vectors=[query_vector],
        model=model,
        where=where,
    )[0]


def keyword_leg(
    texts: list[str],
    *,
    agent_id: str = "default",
    k: int = 5,
    exclude_id: str | None = None,
    soon: bool = False,
    beside: bool = False,
) -> Sequence[list[tuple[str, float]]]:
    """The keyword leg of `hybrid_search_many` on its own: it needs no vector, so a job runs it
    while its embedding call is on the wire and passes the result in as `keyword_hits`; with
    `soon`, beside the vector search too where the engine can (`keyword.search_many_soon`, a
    job's texts in halves); with `beside`, on a connection beside the caller's when one is idle
    (`keyword.search_many_beside`, a recall's one text)."""
    if soon:
        search = keyword.search_many_soon
    elif beside:
        search = keyword.search_many_beside
    else:
        search = keyword.search_many
    return search(texts, agent_id=agent_id, limit=max(LEG_LIMIT, k * 2), exclude_id=exclude_id)


def hybrid_search_many(
    texts: list[str],
    *,
    agent_id: str = "default",
    k: int = 5,
    alpha: float = 0.7,
    min_score: float = 0.1,
    exclude_id: str | None = None,
    query_vectors: list[np.ndarray | None] | None = None,
    model: str | None = None,
    keyword_hits: list[list[tuple[str, float]]] | None = None,
    where: Q | None = None,
) -> list[list[Hit]]:
    """`hybrid_search` of each text (with its vector, when given), all legs batched.

    With both legs, every memory either leg found is scored on both: its keyword score (0 when no
    term matches) and its similarity. A memory with no vector of this model (not embedded yet, or
    embedded by the previous model during a switch) has only the keyword score, and keeps it.
    `keyword_hits`, when given, is `keyword_leg` of the same texts, agent, k and exclusion.
    With `where`, both legs look at the memories it admits only: exactly, every one of them scored,
    when they are few (EXACT_FILTERED); otherwise the filter is part of the keyword leg's SQL and
    the vector leg widens its scan until it found enough of them.
    """
    leg_limit = max(LEG_LIMIT, k * 2)
    query_vectors = query_vectors or [None] * len(texts)
    with_vector = [i for i, v in enumerate(query_vectors) if v is not None] if model else []
    vector_hits: list[list[tuple[str, float]]] = [[] for _ in texts]
    found = keep = None
    if where is not None:
        keyword_hits, found, keep = _filtered(
            texts, query_vectors, with_vector, agent_id, exclude_id, where, model, leg_limit
        )
    if keyword_hits is None:
        # With a vector leg to wait on, PostgreSQL runs the keyword leg beside it (another
        # backend, another core); it is read only after the vector leg is done.
        keyword_hits = keyword_leg(
            texts, agent_id=agent_id, k=k, exclude_id=exclude_id, beside=bool(with_vector)
        )
    if found is None:
        found = vectors.search_many(
            [query_vectors[i] for i in with_vector],
            model=model or "",
            agent_id=agent_id,
            limit=leg_limit,
            exclude_id=exclude_id,
            keep=keep,
        )
    legs = (keyword_hits, vector_hits, with_vector, found, query_vectors, model)
    return _merged(texts, *legs, alpha, min_score, k)


def _filtered(texts, query_vectors, with_vector, agent_id, exclude_id, where, model, leg_limit):
    """(keyword hits, vector hits or None, the vector leg's filter) of a filtered search: both
    legs exactly over the admitted memories when they are few; else the keyword leg with the
    filter in its SQL, and the filter for the vector leg's widening scan."""
    admitted = Memory.objects.filter(expiry.unexpired(), agent_id=agent_id, is_deleted=False)
    admitted = admitted.filter(where)
    if exclude_id:
        admitted = admitted.exclude(id=exclude_id)
    few = list(admitted.values_list("id", flat=True)[: EXACT_FILTERED + 1])
    if len(few) <= EXACT_FILTERED:
        keyword_hits, found = _exact_legs(texts, query_vectors, with_vector, few, model, leg_limit)
        return keyword_hits, found, None
    sql, params = admitted.values("id").query.sql_with_params()
    keyword_hits = keyword.search_many(
        texts,
        agent_id=agent_id,
        limit=leg_limit,
        exclude_id=exclude_id,
        where=(f"m.id IN ({sql})", list(params)),
    )

    def keep(memory_ids: list[str]) -> set[str]:
        return set(admitted.filter(id__in=memory_ids).values_list("id", flat=True))

    return keyword_hits, None, keep


def _exact_legs(texts, query_vectors, with_vector, memory_ids, model, leg_limit):
    """Both legs over a few memories, every one scored: (keyword hits, vector hits per query
    with a vector)."""

    def best(scores: dict[str, float]) -> list[tuple[str, float]]:
        ranked = sorted(
            ((mid, s) for mid, s in scores.items() if s > 0), key=lambda h: (-h[1], h[0])
        )
        return ranked[:leg_limit]

    keyword_hits = [
        best(scores) for scores in keyword.scores_for_many(texts, [memory_ids] * len(texts))
    ]
    similarities = vectors.similarities_for_many(
        [query_vectors[i] for i in with_vector],
        model=model or "",
        memory_ids=[memory_ids] * len(with_vector),
    )
    return keyword_hits, [best(scores) for scores in similarities]


def _merged(
    texts, keyword_hits, vector_hits, with_vector, found, query_vectors, model, alpha, min_score, k
) -> list[list[Hit]]:
    """Every candidate of either leg scored on both, merged per text."""
    for i, hits in zip(with_vector, found, strict=True):
        vector_hits[i] = hits
    # Score every candidate on both legs: a memory just outside one leg's top list would otherwise
    # keep its single score and outrank memories that match on both.
    keyword_scores = [dict(hits) for hits in keyword_hits]
    vector_scores = [dict(hits) for hits in vector_hits]
    missing_keyword = [
        [mid for mid in vector_scores[i] if mid not in keyword_scores[i]] for i in range(len(texts))
    ]
    missing_vector = [
        [mid for mid in keyword_scores[i] if mid not in vector_scores[i]] for i in with_vector
    ]
    # The two reads need nothing of each other: on PostgreSQL the keyword scores are read on a
    # connection beside this one while it reads the vectors (when it has any to read).
    score = keyword.scores_for_many_beside if any(missing_vector) else keyword.scores_for_many
    found_keyword = score(texts, missing_keyword)
    similarities = vectors.similarities_for_many(
        [query_vectors[i] for i in with_vector], model=model or "", memory_ids=missing_vector
    )
    for i, scores in enumerate(found_keyword):
        keyword_scores[i].update(scores)
    for i, scores in zip(with_vector, similarities, strict=True):
        vector_scores[i].update(scores)
    return [
        merge(
            list(keyword_scores[i].items()),
            list(vector_scores[i].items()),
            alpha=alpha,
            min_score=min_score,
            k=k,
        )
        for i in range(len(texts))
    ]
