"""Decision step: candidates from hybrid search, then ADD/UPDATE/DELETE/NONE for one fact.

No candidates means ADD without a model call. A reply that cannot be used drops the proposal
with a warning that the job page shows. Reads the store; never writes.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from memory.models import Memory
from memory.search import hybrid_search
from pipeline import contradiction, parsing
from pipeline.llm import CallRecord, ChatClient
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
    hits = hybrid_search(
        fact.content,
        agent_id=agent_id,
        k=CANDIDATE_LIMIT,
        alpha=alpha,
        min_score=min_score,
        exclude_id=source_id,
        query_vector=vector,
        model=model,
    )
    memories = Memory.objects.in_bulk([hit.memory_id for hit in hits])
    scored = []
    for number, hit in enumerate(hits, start=1):
        memory = memories[hit.memory_id]
        scored.append(
            ScoredCandidate(
                Candidate(number, memory.id, memory.content, memory.type),
                memory.version,
                hit.score,
                hit.keyword_score,
                hit.vector_score,
                memory.pinned,
            )
        )
    return scored


def decide(
    client: ChatClient,
    index: int,
    fact: Fact,
    candidates: list[ScoredCandidate],
    examples: list[dict] | None = None,
) -> DecisionRun:
    if not candidates:
        return DecisionRun(
            Decided(index, fact, "add", None, fact.confidence, NO_CANDIDATES_REASON, candidates)
        )
    similarities = {c.candidate.memory_id: c.score for c in candidates}
    call = client.decide(fact, [c.candidate for c in candidates], similarities, examples)
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
        )
    target = next((c for c in candidates if c.candidate.memory_id == decision.target_id), None)
    flagged = None
    if decision.action in {"update", "delete"} and target is not None:
        flagged = contradiction.detect(fact.content, target.candidate.content)
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
    return DecisionRun(decided, warnings, call)


def recent_rejections(agent_id: str, limit: int = 5) -> list[dict]:
    """The agent's latest rejected proposals, shown to the model as counter-examples."""
    from pipeline.models import Proposal

    rows = (
        Proposal.objects.filter(agent_id=agent_id, status="rejected")
        .exclude(action="none")
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
