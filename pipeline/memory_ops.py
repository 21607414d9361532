"""Memory reads and edits that involve the embedding model, shared by the API and the dashboard:
recall (embed the query in one of a few slots, keyword-only past a short timeout) and modify
(write and commit the text, then queue its vector for the queue workers: embed_later)."""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Iterable
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any

from django.conf import settings
from django.db.models import Q
from django_q.tasks import async_task

from memory import writes
from memory.guard import ensure_outside_transaction
from memory.models import Memory
from memory.search import Hit, hybrid_search_many, keyword_leg
from memory.threads import process_pool
from memory.vectors import Vector
from pipeline.config import search_settings
from pipeline.llm import embed_many_or_none, embed_or_none

log = logging.getLogger(__name__)

# How long a recall waits for a free embedding slot. A healthy server answers a query's embed in
# tens of milliseconds, so a slot frees up within this; a hung one frees none for the whole
# recall timeout, and the recalls past the slots then answer keyword-only at once.
SLOT_WAIT_SECONDS = 0.05


@dataclass(frozen=True)
class Recalled:
    hits: list[Hit]
    keyword_only: bool  # the embedding server did not answer in time: no vector leg


def recall(query: str, agent_ids: Iterable[str], *, k: int, where: Q | None = None) -> Recalled:
    """The best k live memories of these agents for `query` (of those `where` admits: the filter
    is applied inside the search), best first, with the configured alpha and min_score. The query
    is embedded once, up front (query_vector), and while that call is on the wire the keyword
    legs (they need no vector) run: on PostgreSQL on a connection beside this one when one is
    idle (so a fast embedding's vector leg need not wait for them), else here. A filtered search
    runs both legs after the embedding."""
    alpha, min_score = search_settings()
    agent_ids = list(agent_ids)
    embedding = query_vector_soon(query)
    keyword_hits = (
        {
            agent_id: keyword_leg([query], agent_id=agent_id, k=k, beside=True)
            for agent_id in agent_ids
        }
        if where is None
        else {}
    )
    vector = embedding.result() if embedding is not None else None
    hits: list[Hit] = []
    for agent_id in agent_ids:
        hits += hybrid_search_many(
            [query],
            agent_id=agent_id,
            k=k,
            alpha=alpha,
            min_score=min_score,
            query_vectors=[vector.values if vector else None],
            model=vector.model if vector else None,
            keyword_hits=keyword_hits.get(agent_id),
            where=where,
        )[0]
    hits.sort(key=lambda hit: (-hit.score, hit.memory_id))
    return Recalled(hits[:k], keyword_only=vector is None)


_slots: dict[tuple[int, int], threading.BoundedSemaphore] = {}
_slots_lock = threading.Lock()


def _embed_slots() -> threading.BoundedSemaphore:
    """This process's MEMORY_RECALL_EMBED_PARALLEL slots (made again after a fork)."""
    key = (os.getpid(), settings.MEMORY_RECALL_EMBED_PARALLEL)
    with _slots_lock:
        slots = _slots.get(key)
        if slots is None:
            slots = _slots[key] = threading.BoundedSemaphore(key[1])
        return slots


def query_vector(query: str) -> Vector | None:
    """The query's vector, or None (keyword-only) when the embedding server does not answer
    within MEMORY_RECALL_EMBED_TIMEOUT_SECONDS or when this process already has
    MEMORY_RECALL_EMBED_PARALLEL recalls waiting on it. A hung server so holds at most that many
    of a web process's threads; remember, health and every other request keep the rest."""
    embedding = query_vector_soon(query)
    return embedding.result() if embedding is not None else None


def query_vector_soon(query: str) -> Future[Vector | None] | None:
    """`query_vector`, started now: the embedding call runs in a thread of this process's
    recall pool (HTTP only, no database) while the caller goes on. None, at once, when every
    embedding slot is taken (keyword-only). The slot is taken here, so the pool never holds more
    calls than it has threads: none waits in its queue."""
    # The pool's thread cannot see a transaction this one holds: checked here, where it is.
    ensure_outside_transaction("embedding call")
    slots = _embed_slots()
    if not slots.acquire(timeout=SLOT_WAIT_SECONDS):
        log.warning("every recall embedding slot is waiting on the model: keyword results only")
        return None
    slot = _Slot(slots)
    try:
        pool = process_pool("recall-embed", settings.MEMORY_RECALL_EMBED_PARALLEL)
        return pool.submit(_embed_in_slot, query, slot)
    except BaseException:
        slot.abandon()
        raise


class _Slot:
    """A taken embedding slot, given back exactly once: by its call when the call ends, or by the
    caller when the call could not be started. (A thread pool queues a call before it starts a
    thread for it: a start that fails leaves the call queued, and a busy thread may run it later.
    It then finds the slot given back, and does not call the model.)"""

    def __init__(self, slots: threading.BoundedSemaphore) -> None:
        self.slots = slots
        self.lock = threading.Lock()
        self.state = "queued"

    def start(self) -> bool:
        """True when the call may run (its caller still waits for it)."""
        with self.lock:
            if self.state != "queued":
                return False
            self.state = "running"
            return True

    def abandon(self) -> None:
        """The caller gives up on a call not started yet; a running call gives the slot back."""
        with self.lock:
            if self.state != "queued":
                return
            self.state = "done"
        self.slots.release()

    def finish(self) -> None:
        with self.lock:
            self.state = "done"
        self.slots.release()


def _embed_in_slot(query: str, slot: _Slot) -> Vector | None:
    if not slot.start():
        return None
    try:
        return embed_or_none(query, timeout=settings.MEMORY_RECALL_EMBED_TIMEOUT_SECONDS)
    finally:
        slot.finish()


def modify(
    memory: Memory,
    changes: dict[str, Any],
    *,
    actor: writes.Actor,
    reason: str,
    if_version: int | None = None,
) -> Memory:
    """writes.modify, never waiting on the embedding server: the new text is written and
    committed first, then its vector is queued (embed_later) unless a vector of that text is
    stored already (a revert). Until it arrives the memory is found by its keywords."""
    updated = writes.modify(memory.id, changes, actor=actor, reason=reason, if_version=if_version)
    if updated.content != memory.content and not updated.embedding_model:
        embed_later(updated.id)
    return updated


def embed_later(memory_id: str) -> None:
    """Queue embed_stored(memory_id) for the queue workers. Call it after the write committed
    (a worker must see the text). A hand-off that fails is logged; the maintenance run embeds
    every live memory without a vector (pipeline.tasks.embed_missing)."""
    try:
        async_task(
            "pipeline.memory_ops.embed_stored",
            memory_id,
            task_name=f"embed-{memory_id}",
            q_options={"group": "embeddings"},
        )
    except Exception:
        log.exception(
            "could not queue the vector of memory %s; maintenance will embed it", memory_id
        )


def embed_later_many(memory_ids: list[str]) -> None:
    """Queue embed_stored_many(memory_ids) for the queue workers, after the write committed (an
    import's batch: one model call for the batch instead of one a memory). A hand-off that fails
    is logged; the maintenance run embeds every live memory without a vector."""
    if not memory_ids:
        return
    try:
        async_task(
            "pipeline.memory_ops.embed_stored_many",
            list(memory_ids),
            task_name=f"embed-{memory_ids[0]}-{len(memory_ids)}",
            q_options={"group": "embeddings"},
        )
    except Exception:
        log.exception("could not queue %d vectors; maintenance will embed them", len(memory_ids))


def embed_stored_many(memory_ids: list[str]) -> int:
    """The queued task: embed the live memories among these that have no vector yet, in one call
    outside any transaction, and store each vector unless its text changed meanwhile. Returns
    how many were stored (0 when the server failed: maintenance embeds them later)."""
    rows = list(
        Memory.objects.filter(id__in=memory_ids, is_deleted=False, embedding_model__isnull=True)
        .order_by("id")
        .values_list("id", "content", "content_hash")
    )
    if not rows:
        return 0
    vectors = embed_many_or_none([content for _, content, _ in rows])
    if vectors is None:
        return 0
    return sum(
        writes.store_vector(memory_id, content_hash, vector)
        for (memory_id, _, content_hash), vector in zip(rows, vectors, strict=True)
    )


def embed_stored(memory_id: str) -> bool:
    """The queued task: embed the memory's current text, outside any transaction, and store the
    vector unless the text changed meanwhile (writes.store_vector). Nothing to do for a memory
    forgotten or embedded since. False when nothing was stored."""
    row = (
        Memory.objects.filter(id=memory_id, is_deleted=False)
        .values_list("content", "content_hash", "embedding_model")
        .first()
    )
    if row is None or row[2]:
        return False
    content, content_hash, _ = row
    vector = embed_or_none(content)
    if vector is None:  # the server failed: maintenance embeds it later
        return False
    return writes.store_vector(memory_id, content_hash, vector)
