"""Decision step: candidates from hybrid search, then ADD/UPDATE/DELETE/NONE for one fact.

No candidates means ADD without a model call. A reply that cannot be used drops the proposal
with a warning that the job page shows. Reads the store; never writes.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from concurrent.futures import as_completed
from dataclasses import dataclass, field

import numpy as np

from memory.guard import ensure_outside_transaction
from memory.models import Memory, RowsRead
from memory.search import hybrid_search_many, keyword_leg
from memory.threads import process_pool
from pipeline import contradiction, parsing
from pipeline.llm import CallRecord, ChatClient
from pipeline.models import DESTRUCTIVE, Action, Proposal, ProposalStatus
from pipeline.parsing import Candidate, Fact

CANDIDATE_LIMIT = 5
NO_CANDIDATES_REASON = "No existing memories match this fact"


@dataclass
class ScoredCandidate:
    candidate: Candidate
    version: int
    score: float
    keyword_score: float | None
    vector_score: float | None
    pinned: bool

    def as_dict(self) -> dict:
        return {
            "number": self.candidate.number,
            "memoryId": self.candidate.memory_id,
            "content": self.candidate.content,
            "type": self.candidate.type,
            "version": self.version,
            "pinned": self.pinned,
            "score": round(self.score, 4),
            "keywordScore": None if self.keyword_score is None else round(self.keyword_score, 4),
            "vectorScore": None if self.vector_score is None else round(self.vector_score, 4),
        }


@dataclass
class Decided:
    """A usable decision about one fact, with the context it was made in."""

    fact_index: int
    fact: Fact
    action: str
    target: ScoredCandidate | None
    confidence: float
    reason: str
    candidates: list[ScoredCandidate]
    contradiction: contradiction.Contradiction | None = None
    call: CallRecord | None = None


@dataclass
class DecisionRun:
    decided: Decided | None
    warnings: list[str] = field(default_factory=list)
    call: CallRecord | None = None
    index: int = 0  # the fact's position in the extraction


def find_candidates(
    fact: Fact,
    *,
    agent_id: str,
    source_id: str,
    alpha: float,
    min_score: float,
    vector: np.ndarray | None,
    model: str | None,
) -> list[ScoredCandidate]:
    """Top-5 live memories of the same agent, never the source memory itself."""
    return find_candidates_many(
        [fact],
        agent_id=agent_id,
        source_id=source_id,
        alpha=alpha,
        min_score=min_score,
        vectors=[vector],
        model=model,
    )[0]


def find_candidates_many(
    facts: list[Fact],
    *,
    agent_id: str,
    source_id: str,
    alpha: float,
    min_score: float,
    vectors: list[np.ndarray | None],
    model: str | None,
    keyword_hits: list[list[tuple[str, float]]] | None = None,
) -> list[list[ScoredCandidate]]:
    """`find_candidates` of every fact of a job in one batched search (the same candidates, in the
    same order, as one search per fact) and one read of the candidate memories. `keyword_hits`:
    `keyword_candidates` of the same facts, found earlier (while the embedding call ran)."""
    found = hybrid_search_many(
        [fact.content for fact in facts],
        agent_id=agent_id,
        k=CANDIDATE_LIMIT,
        alpha=alpha,
        min_score=min_score,
        exclude_id=source_id,
        query_vectors=vectors,
        model=model,
        keyword_hits=keyword_hits,
    )
    rows = _candidate_rows({hit.memory_id for hits in found for hit in hits})
    results = []
    for hits in found:
        scored = []
        for number, hit in enumerate(hits, start=1):
            memory_id, content, memory_type, version, pinned = rows[hit.memory_id]
            scored.append(
                ScoredCandidate(
                    Candidate(number, memory_id, content, memory_type),
                    version,
                    hit.score,
                    hit.keyword_score,
                    hit.vector_score,
                    pinned,
                )
            )
        results.append(scored)
    return results


def _candidate_rows(memory_ids: set[str]) -> dict[str, tuple]:
    """memory id -> (id, content, type, version, pinned) of each candidate, in one read."""
    if not memory_ids:
        return {}
    ids = sorted(memory_ids)
    # Written out, plain rows: the ORM took longer to build this query than the database to
    # answer it (50 candidates: 0.5 against 0.15 ms). `pinned` comes back a bool on both engines:
    # on SQLite through the backend's converter for the column's declared type, which a bare
    # column keeps (an expression such as COALESCE would give 0 or 1).
    rows = RowsRead(
        f"SELECT id, content, type, version, pinned FROM {Memory._meta.db_table} "
        f"WHERE id IN ({', '.join(['%s'] * len(ids))})",
        ids,
    ).all()
    return {row[0]: row for row in rows}


def keyword_candidates(
    facts: list[Fact], *, agent_id: str, source_id: str
) -> Sequence[list[tuple[str, float]]]:
    """The keyword leg of `find_candidates_many` for these facts (it needs no vector), started
    now: on PostgreSQL it goes on beside the vector search and is read when first used."""
    return keyword_leg(
        [fact.content for fact in facts],
        agent_id=agent_id,
        k=CANDIDATE_LIMIT,
        exclude_id=source_id,
        soon=True,
    )


def decide(
    client: ChatClient,
    index: int,
    fact: Fact,
    candidates: list[ScoredCandidate],
    examples: list[dict] | None = None,
) -> DecisionRun:
    if not candidates:
        return _no_candidates(index, fact)
    similarities = {c.candidate.memory_id: c.score for c in candidates}
    call = client.decide(fact, [c.candidate for c in candidates], similarities, examples)
    return _decision_of(index, fact, candidates, call)


def _no_candidates(index: int, fact: Fact) -> DecisionRun:
    """ADD, without a model call: nothing in the store is like the fact."""
    return DecisionRun(
        Decided(index, fact, Action.ADD, None, fact.confidence, NO_CANDIDATES_REASON, []),
        index=index,
    )


def _decision_of(
    index: int, fact: Fact, candidates: list[ScoredCandidate], call: CallRecord
) -> DecisionRun:
    """The decision the model's reply (`call`) makes about the fact, or a warning saying why the
    reply cannot be used."""
    call.fact_index = index
    decision, warnings = parsing.parse_decision(
        call.raw_response, [c.candidate for c in candidates]
    )
    if decision is None:
        short = fact.content if len(fact.content) <= 80 else fact.content[:77] + "..."
        return DecisionRun(
            None,
            [f'Dropped decision for fact {index + 1} ("{short}"): {w}' for w in warnings]
            or [f"Dropped decision for fact {index + 1}"],
            call,
            index,
        )
    target = next((c for c in candidates if c.candidate.memory_id == decision.target_id), None)
    flagged = None
    if decision.action in DESTRUCTIVE and target is not None:
        flagged = contradiction.check(decision.action, fact.content, target.candidate.content)
    elif decision.action == Action.NONE:
        target, flagged = _none_against(fact, target, candidates)
    decided = Decided(
        index,
        fact,
        decision.action,
        target,
        decision.confidence,
        decision.reason,
        candidates,
        flagged,
        call,
    )
    return DecisionRun(decided, warnings, call, index)


def _none_against(
    fact: Fact, target: ScoredCandidate | None, candidates: list[ScoredCandidate]
) -> tuple[ScoredCandidate | None, contradiction.Contradiction | None]:
    """A NONE ("the store already says this") is checked like an UPDATE: against the memory it
    names, else the most similar one. A fact that contradicts it would otherwise be dropped
    unseen, the memory it negates kept as true (a review found a NONE on "Kenji no longer
    deploys billing-api"). Flagged, the proposal names that memory and waits for a reviewer;
    not flagged, it stays as the model gave it."""
    checked = target or (candidates[0] if candidates else None)
    if checked is None:
        return target, None
    flagged = contradiction.check(Action.NONE, fact.content, checked.candidate.content)
    return (checked, flagged) if flagged.flagged else (target, None)


def decide_all(
    client: ChatClient,
    facts: list[Fact],
    candidates: list[list[ScoredCandidate]],
    examples: list[dict] | None = None,
    *,
    parallel: int = 1,
) -> Iterator[DecisionRun]:
    """`decide` for every fact, at most `parallel` model calls at a time; runs are yielded as they
    finish. The decisions are independent (every fact's candidates come from the store as it was
    before the job's write), so their order does not matter; each run knows its fact's index.
    An HTTP client sends them side by side from one event loop (`decide_each`); any other client
    (offline, a recording) is called from a thread pool.

    Call it with no transaction open (threads cannot see one the caller opened, so it is checked
    here, once, in the caller's thread).
    """
    ensure_outside_transaction("decision calls")
    jobs = list(enumerate(zip(facts, candidates, strict=True)))
    asked = [(index, fact, found) for index, (fact, found) in jobs if found]
    for index, (fact, found) in jobs:
        if not found:
            yield _no_candidates(index, fact)
    if parallel <= 1 or len(asked) <= 1:
        for index, fact, found in asked:
            yield decide(client, index, fact, found, examples)
        return
    if hasattr(client, "decide_each"):
        by_index = {index: (fact, found) for index, fact, found in asked}
        asks = [(index, fact, [c.candidate for c in found]) for index, fact, found in asked]
        for index, call in client.decide_each(asks, examples, parallel=parallel):
            yield _decision_of(index, *by_index[index], call)
        return
    pool = process_pool("decide", parallel)
    futures = [
        pool.submit(decide, client, index, fact, found, examples) for index, fact, found in asked
    ]
    try:
        for future in as_completed(futures):
            yield future.result()
    finally:
        for future in futures:  # a failed call fails the job: do not start the rest
            future.cancel()


def recent_rejections(agent_id: str, limit: int = 5) -> list[dict]:
    """The agent's latest rejected proposals, shown to the model as counter-examples."""
    rows = (
        Proposal.objects.filter(agent_id=agent_id, status=ProposalStatus.REJECTED)
        .exclude(action=Action.NONE)
        .order_by("-decided_at")
        .values("action", "fact_content", "target_content", "review_note")[:limit]
    )
    return [
        {
            "action": r["action"],
            "fact": r["fact_content"],
            "target": r["target_content"],
            "note": r["review_note"],
        }
        for r in rows
    ]
