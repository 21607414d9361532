"""Reviewers' verdicts as decision cases: one case per proposal a reviewer decided, with the fact
and the candidates exactly as the model saw them, the approved action (and target) as `action`,
the rejected one as `notAction`. Reads only."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import datetime

from memory.models import MemoryHistory
from pipeline.config import PIPELINE_NAME
from pipeline.eval.cases import DESTRUCTIVE_ACTIONS, CaseCandidate, DecisionCase
from pipeline.llm import prompts
from pipeline.models import LlmCall, Proposal, ProposalStatus
from pipeline.parsing import FACT_TYPES, Candidate

# Applied, deduped (an approved ADD whose text was already stored) and rejected proposals carry a
# reviewer's verdict, unless the pipeline applied them on its own (decided_by PIPELINE_NAME).
DECIDED = (ProposalStatus.APPLIED, ProposalStatus.DEDUPED, ProposalStatus.REJECTED)

_PROMPT_FACT = re.compile(
    r'New fact \(type: ([^,]*), confidence: [^)]*\):\n"(.*)"\n\nCandidates:\n', re.DOTALL
)
_PROMPT_CANDIDATE = re.compile(
    r"\[(\d+)\] ID: (.*?)\nType: (.*?)\nContent: (.*?)(?=\n\n\[\d+\] ID: |\Z)", re.DOTALL
)
_ANSWER_START = "\n\ntargetId is"  # the start of the answer instructions after the candidates


@dataclass
class Export:
    cases: list[DecisionCase] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)  # proposals left out or recovered, and why
    from_call_log: int = 0  # cases whose candidates were checked against the logged prompt


def _recorded(proposal: Proposal) -> list[tuple[Candidate, bool, float | None]]:
    """The candidates the job recorded with the proposal when it decided (Proposal.candidates)."""
    found = []
    for item in proposal.candidates or []:
        if not isinstance(item, dict) or not item.get("memoryId"):
            continue
        try:
            number = int(item.get("number"))
        except (TypeError, ValueError):
            continue
        candidate = Candidate(
            number,
            str(item["memoryId"]),
            str(item.get("content") or ""),
            item.get("type") or "fact",
        )
        score = item.get("score")
        score = float(score) if isinstance(score, int | float) and 0 <= score <= 1 else None
        found.append((candidate, bool(item.get("pinned")), score))
    found.sort(key=lambda entry: entry[0].number)
    return found


def _from_prompt(prompt: str) -> tuple[str, str, list[Candidate]] | None:
    """(fact type, fact content, candidates) as the logged decision prompt shows them."""
    fact = _PROMPT_FACT.search(prompt)
    if fact is None:
        return None
    block = prompt[fact.end() :]
    end = block.find(_ANSWER_START)
    block = block[:end] if end >= 0 else block
    candidates = [
        Candidate(int(n), memory_id, content, kind)
        for n, memory_id, kind, content in _PROMPT_CANDIDATE.findall(block)
    ]
    return fact.group(1), fact.group(2), candidates


def _approvals(proposals: list[Proposal]) -> dict[str, dict]:
    """Each proposal's latest approval audit (metadata: appliedAction, proposedAction, edited)."""
    rows = MemoryHistory.objects.filter(
        memory_id__in={p.source_memory_id for p in proposals}, event="reviewed"
    ).order_by("created_at", "id")
    found: dict[str, dict] = {}
    for metadata in rows.values_list("metadata", flat=True):
        if isinstance(metadata, dict) and metadata.get("decision") == "approved":
            found[str(metadata.get("proposalId"))] = metadata
    return found


def _decide_calls(proposals: list[Proposal]) -> dict[tuple[str, int], LlmCall]:
    """The answered decide call of each proposal's fact (the latest, if a job was retried)."""
    calls = LlmCall.objects.filter(
        job_id__in={p.job_id for p in proposals}, kind="decide", error__isnull=True
    ).order_by("created_at", "id")
    return {(c.job_id, c.fact_index): c for c in calls.only("job_id", "fact_index", "prompt")}


def _expect(proposal: Proposal, approval: dict | None) -> tuple[str | None, str | None, str]:
    """(action, notAction, category) of a decided proposal."""
    if proposal.status == ProposalStatus.REJECTED:
        return None, proposal.action, "rejected"
    approval = approval or {}
    proposed = approval.get("proposedAction") or proposal.action
    # appliedAction is what the reviewer chose (a replace by retiring still counts as the update).
    applied = approval.get("appliedAction") or proposal.action
    if applied != proposed:
        return applied, None, "overridden"
    return applied, None, "edited" if approval.get("edited") else "approved"


def _case(proposal: Proposal, approval: dict | None, call: LlmCall | None, export: Export):
    recorded = _recorded(proposal)
    fact_type, fact_content = proposal.fact_type, proposal.fact_content
    candidates = [c for c, _, _ in recorded]
    if call is not None and call.prompt:
        export.from_call_log += 1
        block = f"Candidates:\n{prompts.format_candidates(candidates)}\n\n"
        if block not in call.prompt or f'\n"{fact_content}"\n' not in call.prompt:
            seen = _from_prompt(call.prompt)
            if seen is None:
                export.notes.append(f"proposal {proposal.id}: its logged prompt is unreadable")
                return None
            fact_type, fact_content, candidates = seen
            export.notes.append(f"proposal {proposal.id}: candidates taken from the logged prompt")
    extra = {c.memory_id: (pinned, score) for c, pinned, score in recorded}
    action, not_action, category = _expect(proposal, approval)
    target = proposal.target_memory_id if action in DESTRUCTIVE_ACTIONS else None
    ids = {c.memory_id for c in candidates}
    if target is not None and target not in ids:
        export.notes.append(f"proposal {proposal.id}: its target is not among its candidates")
        return None
    if action not in (None, "add") and not candidates:
        export.notes.append(f"proposal {proposal.id}: approved {action} without candidates")
        return None
    if not_action == "add" and not candidates:
        # No model call is made without candidates (the answer is add): no model could pass it.
        export.notes.append(f"proposal {proposal.id}: a rejected add without candidates")
        return None
    return DecisionCase(
        id=f"reviewed-{proposal.id}",
        category=category,
        fact_content=fact_content,
        fact_type=fact_type if fact_type in FACT_TYPES else "fact",
        fact_confidence=min(1.0, max(0.0, float(proposal.fact_confidence))),
        candidates=tuple(
            CaseCandidate(
                c.memory_id,
                c.content,
                c.type if c.type in FACT_TYPES else "fact",
                *extra.get(c.memory_id, (False, None)),
            )
            for c in candidates
        ),
        action=action,
        not_action=not_action,
        target=target,
    )


def export_reviewed(*, since: datetime | None = None, agent: str | None = None) -> Export:
    """One decision case per reviewer-decided proposal (oldest decision first); reverted
    approvals are left out: the team took that verdict back."""
    query = (
        Proposal.objects.filter(status__in=DECIDED, decided_by__isnull=False)
        .exclude(decided_by="")
        .exclude(decided_by=PIPELINE_NAME)  # applied by the pipeline itself: no verdict
    )
    if since is not None:
        query = query.filter(decided_at__gte=since)
    if agent:
        query = query.filter(agent_id=agent)
    proposals = list(query.order_by("decided_at", "id"))
    export = Export()
    approvals, calls = _approvals(proposals), _decide_calls(proposals)
    for proposal in proposals:
        if proposal.reverted_at is not None:
            export.notes.append(f"proposal {proposal.id}: left out, its approval was reverted")
            continue
        approval = approvals.get(proposal.id)
        if approval is None and proposal.status != ProposalStatus.REJECTED:
            export.notes.append(f"proposal {proposal.id}: left out, no reviewer approval on record")
            continue
        call = calls.get((proposal.job_id, proposal.position))
        case = _case(proposal, approval, call, export)
        if case is not None:
            export.cases.append(case)
    return export
