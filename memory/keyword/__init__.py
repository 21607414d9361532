"""The keyword leg over the store's full-text index, whichever engine holds it: FTS5 on SQLite
(memory.keyword.sqlite), a tsvector with a GIN index on PostgreSQL (memory.keyword.postgres).
Each call picks the engine's module once; both turn user text into the same plain terms and score
with the same BM25 (memory.keyword.bm25) in [0, 1), stronger matches higher, so the hybrid formula
is the same on both."""

from __future__ import annotations

from collections.abc import Sequence
from concurrent.futures import Future

from django.db import connection

from memory import backend
from memory.keyword import postgres, sqlite
from memory.keyword.bm25 import (  # noqa: F401 (re-exported: callers use keyword.STOP_WORDS, ...)
    STOP_WORDS,
    normalise_bm25,
    query_terms,
    stem,
)
from memory.keyword.sqlite import match_expression  # noqa: F401 (re-exported for its tests)
from memory.threads import BESIDE, submit_beside

# Every memory holding a query term is weighed (summed IDF of the terms it holds); this many of the
# best-weighed ones the agent sees are scored exactly. Recall@10 against the exhaustive BM25
# ranking rises with it (tests/test_keyword_recall.py, `make bench`); the cost is reading and
# scoring their text. Read at each search, so it is changed here.
CANDIDATE_WINDOW = 100


def _engine():
    """The keyword module of the store's engine."""
    return postgres if backend.is_postgres() else sqlite


def search(
    text: str,
    *,
    agent_id: str,
    limit: int,
    exclude_id: str | None = None,
    where: tuple[str, list] | None = None,
) -> list[tuple[str, float]]:
    """(memory id, normalised score) of the best keyword matches among the agent's live memories;
    `where` (SQL on the memory row `m`, and its parameters) narrows them inside the search."""
    return search_many([text], agent_id=agent_id, limit=limit, exclude_id=exclude_id, where=where)[
        0
    ]


def search_many(
    texts: list[str],
    *,
    agent_id: str,
    limit: int,
    exclude_id: str | None = None,
    where: tuple[str, list] | None = None,
) -> list[list[tuple[str, float]]]:
    """`search` for several texts at once, each ranked exactly as a search of its own."""
    return _engine().search_many(
        texts, agent_id=agent_id, limit=limit, exclude_id=exclude_id, where=where
    )


class Soon(Sequence):
    """Keyword results still being made in other threads (each future's list covers a run of
    the texts, in order): waited for when first read, where an error of theirs is raised."""

    def __init__(self, futures: list[Future]):
        self.futures = futures
        self.found: list | None = None

    def _all(self) -> list:
        if self.found is None:
            self.found = [hits for future in self.futures for hits in future.result()]
        return self.found

    def __getitem__(self, index):
        return self._all()[index]

    def __len__(self) -> int:
        return len(self._all())


def search_many_soon(
    texts: list[str], *, agent_id: str, limit: int, exclude_id: str | None = None
) -> Sequence[list[tuple[str, float]]]:
    """`search_many`, started now. On PostgreSQL, outside a transaction (a connection of its own
    would not see what one wrote), it runs in threads with connections of their own (half the
    texts each: every text is ranked on its own) while the caller goes on, and is waited for when
    first read; elsewhere it runs here. A job's ten texts cost the server about 60 ms at 100k
    memories: each half goes to its own backend (and core)."""
    if backend.is_postgres() and not connection.in_atomic_block:
        half = (len(texts) + 1) // 2
        parts = [part for part in (texts[:half], texts[half:]) if part]
        return Soon(
            [
                thread.submit(
                    search_many, part, agent_id=agent_id, limit=limit, exclude_id=exclude_id
                )
                for thread, part in zip(BESIDE, parts, strict=False)
            ]
        )
    return search_many(texts, agent_id=agent_id, limit=limit, exclude_id=exclude_id)


def search_many_beside(
    texts: list[str], *, agent_id: str, limit: int, exclude_id: str | None = None
) -> Sequence[list[tuple[str, float]]]:
    """`search_many`, started now on a connection beside the caller's that has nothing to do (on
    PostgreSQL, outside a transaction) and waited for when first read, so a search's keyword leg
    runs on one server backend while its vector leg runs on the caller's; run here when none is
    idle (never queued behind another caller's work), or elsewhere."""
    if backend.is_postgres() and not connection.in_atomic_block:
        future = submit_beside(
            search_many, texts, agent_id=agent_id, limit=limit, exclude_id=exclude_id
        )
        if future is not None:
            return Soon([future])
    return search_many(texts, agent_id=agent_id, limit=limit, exclude_id=exclude_id)


def scores_for(text: str, memory_ids: list[str]) -> dict[str, float]:
    """Normalised BM25 of specific memories for `text` (0.0 when they do not match at all)."""
    return scores_for_many([text], [memory_ids])[0]


def scores_for_many(texts: list[str], memory_ids: list[list[str]]) -> list[dict[str, float]]:
    """`scores_for` of several texts, each with its own memories."""
    return _engine().scores_for_many(texts, memory_ids)


def scores_for_many_beside(
    texts: list[str], memory_ids: list[list[str]]
) -> Sequence[dict[str, float]]:
    """`scores_for_many`, started now on an idle connection beside the caller's (on PostgreSQL,
    outside a transaction) and waited for when first read (an error of its own is raised there),
    so the server reads these texts while the caller's connection does something else. Run here,
    before returning, when no connection beside is idle, when there is nothing to score, inside
    a transaction, or on SQLite."""
    if backend.is_postgres() and not connection.in_atomic_block and any(memory_ids):
        future = submit_beside(scores_for_many, texts, memory_ids)
        if future is not None:
            return Soon([future])
    return scores_for_many(texts, memory_ids)


def merge_index() -> None:
    """Rewrite the full-text index without any entry a delete left behind (SQLite's FTS5)."""
    _engine().merge_index()


def trim_changes() -> int:
    """Trim the log of changed texts the processes' cached posting lists are brought up to date
    from (SQLite); how many entries went."""
    return _engine().trim_changes()


def still_indexed(memory_ids: list[str], texts: list[str], *, but: str = "") -> int:
    """How many of these memories the full-text index still finds by a word of the texts (other
    than the words of `but`, what they hold now: a purge's marker)."""
    ignored = {stem(term) for term in query_terms(but)}
    terms = sorted(
        {term for text in texts for term in query_terms(text) if stem(term) not in ignored}
    )
    return _engine().still_indexed(memory_ids, terms) if memory_ids and terms else 0


def memories_holding_words(texts: list[str]) -> list[tuple[str, str, str]] | None:
    """(id, content, normalized content) of the memories whose text holds the words of one of
    the texts in a row, found through the full-text index; None when a text has no word to look
    for (the caller reads the table instead)."""
    if not texts or any(not query_terms(text) for text in texts):
        return None
    return _engine().memories_holding_words(texts)
