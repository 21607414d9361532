"""Second opinion: replay recorded decisions with another model, as a queued task.

A second opinion re-asks the decision of a recorded proposal with another client, on the very
candidates the original decision saw (rebuilt from `Proposal.candidates`), so the two answers are
comparable. Optionally the extraction is re-run on the raw memory to see whether the other model
would have found the same fact at all.

A run covers one proposal or the first SLICE_LIMIT of a review queue slice. The request only
records the run and queues `run_replay`; the task calls the model proposal by proposal with no
transaction open and saves each result as it arrives (pipeline.writes.replay), so the page can
show it at once. Nothing else is written: no call log, no store change. A reviewer may adopt the
other answer through the normal review path.
"""

from __future__ import annotations

import logging
from dataclasses import asdict, dataclass, field, replace
from datetime import timedelta

from memory.content import normalize
from pipeline import extraction, handoff, parsing
from pipeline.config import get_config
from pipeline.decision import NO_CANDIDATES_REASON
from pipeline.llm import CallRecord, ChatClient, ProviderError, get_chat_client
from pipeline.models import DESTRUCTIVE, Action, LlmCall, Proposal, ReplayRun, ReplayStatus
from pipeline.parsing import Candidate, Fact
from pipeline.writes import replay as writes

log = logging.getLogger(__name__)

SLICE_LIMIT = 25


@dataclass
class Answer:
    """One model's decision about the fact: what a card shows on one side."""

    model: str
    action: str | None  # None: the reply was unusable (see warnings)
    target_id: str | None = None
    target_content: str | None = None
    confidence: float | None = None
    reason: str = ""
    prompt: str = ""
    raw: str = ""
    warnings: list[str] = field(default_factory=list)
    called: bool = True  # False: no candidates, so no model call was made

    @property
    def usable(self) -> bool:
        return self.action is not None


@dataclass
class ExtractionCheck:
    """Whether the other model's extraction of the raw memory contains the proposal's fact."""

    found: bool
    facts: list[str]
    warnings: list[str]
    prompt: str = ""
    raw: str = ""


@dataclass
class ReplayResult:
    proposal: Proposal
    original: Answer
    other: Answer
    agrees: bool
    extraction: ExtractionCheck | None = None

    @property
    def compared(self) -> bool:
        """A model decision was made on both sides (not an ADD for want of candidates)."""
        return self.other.called

    @property
    def action_differs(self) -> bool:
        return self.other.action != self.original.action

    @property
    def other_target_differs(self) -> bool:
        """The two answers name different targets (either may have none)."""
        return self.other.target_id != self.original.target_id

    @property
    def target_differs(self) -> bool:
        """The other answer changes a memory other than the one the proposal targets."""
        return self.other.action in DESTRUCTIVE and self.other.target_id != changed_memory(
            self.proposal
        )


@dataclass
class SliceReplay:
    results: list[ReplayResult]
    total: int  # proposals in the slice before the cap
    limit: int
    error: str | None = None  # a provider error stopped the run after len(results)

    @property
    def compared(self) -> list[ReplayResult]:
        return [r for r in self.results if r.compared]

    @property
    def agreed(self) -> int:
        return sum(1 for r in self.compared if r.agrees)

    @property
    def disagreed(self) -> int:
        return len(self.compared) - self.agreed

    @property
    def without_candidates(self) -> int:
        return len(self.results) - len(self.compared)

    @property
    def agreement_rate(self) -> float | None:
        """Share of model decisions both models agree on; None when nothing was compared."""
        compared = self.compared
        return self.agreed / len(compared) if compared else None

    @property
    def agreement_percent(self) -> int | None:
        rate = self.agreement_rate
        return None if rate is None else round(rate * 100)


def changed_memory(proposal: Proposal) -> str | None:
    """The memory the proposal would change: an UPDATE's or DELETE's target, and a flagged
    NONE's (it is approved as the UPDATE it may become); an answer adopted must name that one."""
    changes = proposal.is_destructive or proposal.contradicting_none
    return proposal.target_memory_id if changes else None


def _target(action: str | None, target_id: str | None) -> str | None:
    return target_id if action in DESTRUCTIVE else None


def candidates_of(proposal: Proposal) -> tuple[list[Candidate], dict[str, float]]:
    """The candidate list (and fused scores) exactly as the original decision saw them."""
    candidates, similarities = [], {}
    for item in proposal.candidates or []:
        if not isinstance(item, dict) or not item.get("memoryId"):
            continue
        try:
            number = int(item.get("number"))
        except (TypeError, ValueError):
            continue
        memory_id = str(item["memoryId"])
        candidates.append(
            Candidate(number, memory_id, str(item.get("content") or ""), item.get("type") or "fact")
        )
        score = item.get("score")
        similarities[memory_id] = float(score) if isinstance(score, int | float) else 0.0
    candidates.sort(key=lambda c: c.number)
    return candidates, similarities


def fact_of(proposal: Proposal) -> Fact:
    return Fact(proposal.fact_content, proposal.fact_type, proposal.fact_confidence)


def original_answer(proposal: Proposal, candidates: list[Candidate]) -> Answer:
    """The recorded decision, with the prompt and reply from the job's call log when present."""
    call = (
        LlmCall.objects.filter(job_id=proposal.job_id, kind="decide", fact_index=proposal.position)
        .order_by("created_at", "id")
        .first()
    )
    target_id = _target(proposal.action, proposal.target_memory_id)
    return Answer(
        model=proposal.model,
        action=proposal.action,
        target_id=target_id,
        target_content=_content_of(target_id, candidates) or proposal.target_content,
        confidence=proposal.confidence,
        reason=proposal.reason,
        prompt=call.prompt if call else "",
        raw=call.raw_response if call else "",
        called=bool(candidates),
    )


def _content_of(memory_id: str | None, candidates: list[Candidate]) -> str | None:
    return next((c.content for c in candidates if c.memory_id == memory_id), None)


def _answer_from(call: CallRecord, candidates: list[Candidate], model: str) -> Answer:
    decision, warnings = parsing.parse_decision(call.raw_response, candidates)
    answer = Answer(model=model, action=None, prompt=call.prompt, raw=call.raw_response)
    answer.warnings = warnings
    if decision is not None:
        answer.action = decision.action
        answer.target_id = _target(decision.action, decision.target_id)
        answer.target_content = _content_of(answer.target_id, candidates)
        answer.confidence = decision.confidence
        answer.reason = decision.reason
    return answer


def extract_source(client: ChatClient, proposal: Proposal) -> ExtractionCheck:
    """Re-run the extraction on the proposal's raw memory (`found` is filled in per fact)."""
    result = extraction.extract(client, proposal.source_memory.content)
    return ExtractionCheck(
        found=False,
        facts=[fact.content for fact in result.facts],
        warnings=result.warnings,
        prompt=result.call.prompt if result.call else "",
        raw=result.call.raw_response if result.call else "",
    )


def replay_proposal(
    proposal: Proposal,
    client: ChatClient,
    *,
    with_extraction: bool = False,
    extractions: dict[str, ExtractionCheck] | None = None,
) -> ReplayResult:
    """Ask `client` the same decision on the same candidates. Provider errors propagate.

    `extractions` caches extraction checks per source memory, so a slice with several facts of
    one raw memory extracts it once.
    """
    candidates, similarities = candidates_of(proposal)
    fact = fact_of(proposal)
    original = original_answer(proposal, candidates)
    if candidates:
        call = client.decide(fact, candidates, similarities)
        other = _answer_from(call, candidates, client.model)
    else:
        # Like the pipeline: no candidates means ADD without asking any model.
        other = Answer(
            model=client.model,
            action=Action.ADD,
            confidence=fact.confidence,
            reason=NO_CANDIDATES_REASON,
            called=False,
        )
    agrees = (
        other.usable and other.action == original.action and other.target_id == original.target_id
    )
    check = None
    if with_extraction:
        cache = extractions if extractions is not None else {}
        if proposal.source_memory_id not in cache:
            cache[proposal.source_memory_id] = extract_source(client, proposal)
        extracted = cache[proposal.source_memory_id]
        wanted = normalize(proposal.fact_content).normalized
        found = any(normalize(text).normalized == wanted for text in extracted.facts)
        check = replace(extracted, found=found)
    return ReplayResult(proposal, original, other, agrees, check)


# --- a run: asked for by a request, done by a queued task -----------------------------------------


def ask_second_opinion(
    queryset,
    *,
    requested_by: str,
    provider: str,
    model: str,
    proposal: Proposal | None = None,
    filters: str = "",
    with_extraction: bool = False,
) -> ReplayRun:
    """Record a run over the first SLICE_LIMIT proposals of the queryset (in its order) and queue
    its task. No model is called here."""
    run = writes.create_run(
        requested_by=requested_by,
        provider=provider,
        model=model,
        proposal_ids=list(queryset.values_list("id", flat=True)[:SLICE_LIMIT]),
        total=queryset.count(),
        proposal=proposal,
        filters=filters,
        with_extraction=with_extraction,
    )
    if not run.finished:
        _hand_off(run.id)
    return run


def _hand_off(run_id: str, *, again: bool = False) -> None:
    """Queue `run_replay(run_id)`; a run that cannot be queued fails with the reason (handed off
    `again` by the sweep, it stays queued for the next sweep)."""
    handoff.hand_off(
        "pipeline.replay.run_replay", run_id, kind="replay", fail=writes.finish_run, again=again
    )


def run_replay(run_id: str) -> str | None:
    """The queued task: compare each proposal of the run not compared yet, saving each result as it
    arrives; the first provider error fails the run. Returns the final status (None: not claimed).
    """
    config = get_config()
    run = writes.claim_run(
        run_id,
        lease_timeout=timedelta(seconds=config.lease_timeout_seconds),
        max_attempts=config.max_attempts,
    )
    if run is None:
        return None
    results = list(run.results)
    compared = {saved["proposal"] for saved in results}
    proposals = Proposal.objects.select_related("source_memory", "target_memory").in_bulk(
        [pid for pid in run.proposal_ids if pid not in compared]
    )
    extractions: dict[str, ExtractionCheck] = {}
    try:
        client = get_chat_client(run.provider, run.model)
        for proposal_id in run.proposal_ids:
            proposal = proposals.get(proposal_id)
            if proposal is None:  # compared by an earlier attempt of this task, or gone since
                continue
            result = replay_proposal(
                proposal, client, with_extraction=run.with_extraction, extractions=extractions
            )
            results.append(_saved(result))
            writes.save_results(run.id, results)
    except ProviderError as exc:
        writes.finish_run(run.id, str(exc))
        return ReplayStatus.FAILED
    except Exception as exc:  # whatever it was, the page must stop waiting and say so
        log.exception("second opinion %s failed", run_id)
        writes.finish_run(run.id, f"{type(exc).__name__}: {exc}")
        return ReplayStatus.FAILED
    writes.finish_run(run.id)
    return ReplayStatus.DONE


def reclaim_stale_runs() -> dict[str, int]:
    """The sweep's part for runs: a running run whose lease outlived the jobs' lease timeout lost
    its worker (a task never runs longer than Q_TIMEOUT, which that timeout exceeds). It is queued
    again to go on after its saved results, or, out of attempts, failed saying so."""
    config = get_config()
    retried, failed = writes.reclaim_stale_runs(
        timedelta(seconds=config.lease_timeout_seconds), max_attempts=config.max_attempts
    )
    for run_id in retried:
        _hand_off(run_id)
    lost = writes.lost_runs()  # queued five minutes and no task took them
    for run_id in lost:
        _hand_off(run_id, again=True)
    return {"retried": len(retried) + len(lost), "failed": failed}


# Runs looked through for the answer a reviewer adopts: the latest ones, newest first.
ADOPTABLE_RUNS = 50


def answered(proposal_id: str, model: str, action: str, target_id: str | None) -> bool:
    """Whether a recent second opinion of `model` on this proposal answered `action` (on
    `target_id`): what a reviewer adopts must be what a model said, not what a form posts."""
    runs = ReplayRun.objects.filter(model=model).order_by("-created_at")[:ADOPTABLE_RUNS]
    for results in runs.values_list("results", flat=True):
        for saved in results or []:
            other = saved.get("other") or {}
            said = (other.get("model"), other.get("action"), other.get("target_id") or None)
            if saved.get("proposal") == proposal_id and said == (model, action, target_id):
                return True
    return False


def results_of(run: ReplayRun) -> SliceReplay:
    """The run's saved results as comparisons, beside the proposals as they are now."""
    proposals = Proposal.objects.in_bulk([saved["proposal"] for saved in run.results])
    results = [
        _loaded(saved, proposals[saved["proposal"]])
        for saved in run.results
        if saved["proposal"] in proposals
    ]
    return SliceReplay(results=results, total=run.total, limit=SLICE_LIMIT, error=run.error or None)


def _saved(result: ReplayResult) -> dict:
    return {
        "proposal": result.proposal.id,
        "original": asdict(result.original),
        "other": asdict(result.other),
        "agrees": result.agrees,
        "extraction": asdict(result.extraction) if result.extraction else None,
    }


def _loaded(saved: dict, proposal: Proposal) -> ReplayResult:
    extraction = saved.get("extraction")
    return ReplayResult(
        proposal=proposal,
        original=Answer(**saved["original"]),
        other=Answer(**saved["other"]),
        agrees=saved["agrees"],
        extraction=ExtractionCheck(**extraction) if extraction else None,
    )
