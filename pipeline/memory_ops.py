"""Memory reads and edits that need the embedding model first, shared by the API and the dashboard:
recall (embed the query, keyword-only past a short timeout) and modify (embed the new storage text
before the write transaction opens)."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from django.conf import settings

from memory import writes
from memory.content import normalize
from memory.models import Memory
from memory.search import Hit, hybrid_search
from pipeline.config import search_settings
from pipeline.llm import embed_or_none


@dataclass(frozen=True)
class Recalled:
    hits: list[Hit]
    keyword_only: bool  # the embedding server did not answer in time: no vector leg


def recall(query: str, agent_ids: Iterable[str], *, k: int) -> Recalled:
    """The best k live memories of these agents for `query`, best first, with the configured
    alpha and min_score. The query is embedded once, up front."""
    alpha, min_score = search_settings()
    # A person or an agent waits on this answer: past a short timeout, keyword results only.
    vector = embed_or_none(query, timeout=settings.MEMORY_RECALL_EMBED_TIMEOUT_SECONDS)
    hits: list[Hit] = []
    for agent_id in agent_ids:
        hits += hybrid_search(
            query,
            agent_id=agent_id,
            k=k,
            alpha=alpha,
            min_score=min_score,
            query_vector=vector.values if vector else None,
            model=vector.model if vector else None,
        )
    hits.sort(key=lambda hit: (-hit.score, hit.memory_id))
    return Recalled(hits[:k], keyword_only=vector is None)


def modify(
    memory: Memory,
    changes: dict[str, Any],
    *,
    actor: writes.Actor,
    reason: str,
    if_version: int | None = None,
) -> Memory:
    """writes.modify, with the vector of the new content's storage text (the text that is stored)
    fetched first when the content changes: the model call never runs inside the transaction."""
    vector = None
    if changes.get("content") is not None:
        storage = normalize(changes["content"]).storage
        if storage != memory.content:
            vector = embed_or_none(storage)
    return writes.modify(
        memory.id, changes, actor=actor, reason=reason, if_version=if_version, vector=vector
    )
