"""Run evaluation cases through the job's own code: the extraction step (pipeline.extraction) and
the decision step (pipeline.decision.decide: prompt, candidate formatting, parsing, validation,
contradiction detector). The case's candidates stand in for the store's search; nothing is read
from or written to the store."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from concurrent.futures import as_completed

import numpy as np

from memory.guard import ensure_outside_transaction
from memory.threads import process_pool
from pipeline import decision, extraction
from pipeline.decision import ScoredCandidate
from pipeline.eval.cases import Case, CaseCandidate, CaseSet, DecisionCase, ExtractionCase
from pipeline.eval.outcome import Outcome
from pipeline.eval.report import build_report
from pipeline.llm import ChatClient, ProviderError
from pipeline.llm.offline import OfflineEmbedder
from pipeline.parsing import Candidate, Fact

# The similarity of a candidate without a `score`: lexical (feature hashing) and fixed, so a set's
# results do not depend on the embedding server or a setting. Only the offline model reads it;
# a real model sees the prompt alone.
_SIMILARITY = OfflineEmbedder(768, model="eval-similarity")

Progress = Callable[[int, int], None]


def similarity(fact: str, candidate: str) -> float:
    vectors = _SIMILARITY.embed_one(fact), _SIMILARITY.embed_one(candidate)
    return round(max(0.0, float(np.dot(*vectors))), 4)


def scored_candidates(case: DecisionCase) -> list[ScoredCandidate]:
    """The case's candidates as a job's search hands them to the decision: numbered in order,
    named by the case's own ids (as a job names memory ids)."""
    return [_scored(number, c, case.fact_content) for number, c in enumerate(case.candidates, 1)]


def _scored(number: int, c: CaseCandidate, fact: str) -> ScoredCandidate:
    score = c.score if c.score is not None else similarity(fact, c.content)
    return ScoredCandidate(
        Candidate(number, c.id, c.content, c.type), 1, score, None, None, c.pinned
    )


def run_decision(client: ChatClient, case: DecisionCase) -> Outcome:
    fact = Fact(case.fact_content, case.fact_type, case.fact_confidence)
    try:
        run = decision.decide(client, 0, fact, scored_candidates(case))
    except ProviderError as exc:
        return Outcome(case, getattr(exc, "call", None), error=str(exc))
    return Outcome(case, run.call, warnings=run.warnings, decided=run.decided)


def run_extraction(client: ChatClient, case: ExtractionCase) -> Outcome:
    try:
        found = extraction.extract(client, case.raw)
    except extraction.UnusableReply as exc:  # the model answered: nothing to read is 0 facts
        return Outcome(case, exc.call, warnings=[str(exc)])
    except ProviderError as exc:
        return Outcome(case, getattr(exc, "call", None), error=str(exc))
    return Outcome(
        case, found.call, warnings=found.warnings, facts=[f.content for f in found.facts]
    )


def run_case(client: ChatClient, case: Case) -> Outcome:
    if isinstance(case, DecisionCase):
        return run_decision(client, case)
    return run_extraction(client, case)


def each_outcome(
    client: ChatClient, cases: list[Case], *, concurrency: int = 1
) -> Iterator[tuple[int, Outcome]]:
    """(index, outcome) of every case as each is done; at most `concurrency` calls at a time."""
    ensure_outside_transaction("evaluation calls")
    if concurrency <= 1:
        for index, case in enumerate(cases):
            yield index, run_case(client, case)
        return
    pool = process_pool("eval", concurrency)
    futures = {pool.submit(run_case, client, case): i for i, case in enumerate(cases)}
    try:
        for future in as_completed(futures):
            yield futures[future], future.result()
    finally:
        for future in futures:  # an unexpected failure (or a stop) ends the run: start no more
            future.cancel()


def run_cases(
    client: ChatClient, cases: list[Case], *, concurrency: int = 1, progress: Progress | None = None
) -> list[Outcome]:
    """Every case's outcome, in the cases' order; at most `concurrency` model calls at a time."""
    total = len(cases)
    outcomes: list[Outcome | None] = [None] * total
    for done, (index, outcome) in enumerate(
        each_outcome(client, cases, concurrency=concurrency), start=1
    ):
        outcomes[index] = outcome
        if progress:
            progress(done, total)
    return outcomes  # type: ignore[return-value]


def run_set(
    case_set: CaseSet,
    client: ChatClient,
    *,
    concurrency: int = 1,
    progress: Progress | None = None,
) -> dict:
    """Run a set with `client` and return the report (the JSON `manage.py eval` writes)."""
    outcomes = run_cases(client, case_set.cases, concurrency=concurrency, progress=progress)
    return build_report(case_set, client.provider, client.model, outcomes)
