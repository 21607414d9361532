"""Evaluation runs started from the dashboard: a queued task (pipeline.tasks.run_eval) runs a
frozen case set through the job's code (pipeline.eval.run) and records the outcomes batch by
batch (pipeline.writes.evaluation), so the page shows progress and a dead worker's run goes on
where it stopped. The report is the one `manage.py eval` writes.

Two sets: the shipped one, and the reviewers' own verdicts (pipeline.eval.reviewed), exported
from the store when the run is asked for and kept with the run, so the run measures the model on
the verdicts of that moment.
"""

from __future__ import annotations

import contextlib
import logging
import time
from dataclasses import dataclass
from datetime import timedelta

from django.conf import settings
from django.utils import timezone

from pipeline import handoff
from pipeline.config import get_config
from pipeline.eval import cases as case_format
from pipeline.eval.outcome import Outcome
from pipeline.eval.report import (
    build_report,
    decision_correct,
    harmless_cases,
    provider_errors,
)
from pipeline.eval.reviewed import export_reviewed
from pipeline.eval.run import each_outcome
from pipeline.llm import ChatClient, ProviderError, get_chat_client
from pipeline.llm.prompts import PROMPT_VERSION
from pipeline.models import EvalRun, ReplayStatus
from pipeline.writes import evaluation as writes

log = logging.getLogger(__name__)

SHIPPED, REVIEWED = "shipped", "reviewed"
SETS = {SHIPPED: "The shipped set", REVIEWED: "Your reviewers' verdicts"}
# A batch of outcomes is recorded once this many are in, or this long after the last record.
FLUSH_CASES = 25
FLUSH_SECONDS = 1.0


class NoCases(ValueError):
    """The set asked for has no case to run; the message says why (`categories`: the set's own,
    when it was the category that matched none)."""

    def __init__(self, message: str, categories: list[str] | None = None):
        super().__init__(message)
        self.categories = categories


def frozen_set(kind: str, *, category: str | None = None, limit: int | None = None):
    """The cases a run will use, chosen now: (CaseSet, its text as a case file)."""
    if kind == REVIEWED:
        export = export_reviewed()
        name = f"reviewed-{timezone.now():%Y-%m-%d}.jsonl"
        text = case_format.CaseSet(name, "", list(export.cases)).as_jsonl()
        if not export.cases:
            raise NoCases("No reviewer has decided a proposal yet: there is no verdict to run.")
        case_set = case_format.parse(text, name)
    else:
        case_set = case_format.load()
    chosen = case_set.select(category=category or None, limit=limit)
    if not chosen.cases:
        known = sorted({case.category for case in case_set.cases})
        raise NoCases(
            f"No case of category {category!r} in {case_set.name}: its categories are "
            f"{', '.join(known)}.",
            categories=known,
        )
    return chosen, chosen.as_jsonl()


def start_run(
    kind: str,
    client: ChatClient,
    *,
    requested_by: str,
    category: str | None = None,
    limit: int | None = None,
) -> EvalRun:
    """Record a run of `client` on the set and queue its task; no model is called here."""
    case_set, text = frozen_set(kind, category=category, limit=limit)
    run = writes.create_run(
        requested_by=requested_by,
        set_kind=kind,
        set_name=case_set.name,
        set_sha256=case_set.sha256,
        selection=case_set.selection,
        set_text=text,
        total=len(case_set.cases),
        provider=client.provider,
        model=client.model,
        prompt_version=PROMPT_VERSION,
    )
    hand_off(run.id)
    return run


def hand_off(run_id: str, *, again: bool = False) -> None:
    """Queue `run_eval(run_id)`; a run that cannot be queued fails with the reason (handed off
    `again` by the sweep, it stays queued for the next sweep)."""
    handoff.hand_off(
        "pipeline.tasks.run_eval", run_id, kind="eval", fail=writes.fail_run, again=again
    )


def cases_of(run: EvalRun) -> case_format.CaseSet:
    parsed = case_format.parse(run.set_text, run.set_name, run.set_sha256)
    parsed.selection = run.selection
    return parsed


# --- the task's steps: claim, call, record ----------------------------------------------------------


def claim(run_id: str) -> tuple[EvalRun, str] | None:
    """(the run, the worker's name) when this task may run it."""
    return handoff.claim(writes.claim_run, run_id)


def call_and_record(run: EvalRun, worker: str, client: ChatClient) -> str | None:
    """Run the cases not recorded yet, recording them in batches. None: every case is recorded;
    "released": the time slice is used up and the run is queued again; "lost": another worker
    holds the run now."""
    case_set = cases_of(run)
    saved = writes.recorded(run.id)
    todo = [(i, case) for i, case in enumerate(case_set.cases) if i not in saved]
    started = last = time.monotonic()
    batch: dict[int, dict] = {}
    outcomes = each_outcome(
        client, [case for _, case in todo], concurrency=settings.MEMORY_LLM_PARALLEL
    )
    with contextlib.closing(outcomes):  # closing cancels the calls not started yet
        for n, (k, outcome) in enumerate(outcomes, start=1):
            batch[todo[k][0]] = outcome.as_json()
            now = time.monotonic()
            if len(batch) < FLUSH_CASES and now - last < FLUSH_SECONDS:
                continue
            if not writes.record(run.id, worker, batch):
                return "lost"
            batch, last = {}, now
            if now - started >= handoff.slice_seconds() and n < len(todo):
                return "released" if _release(run.id, worker) else "lost"
    if batch and not writes.record(run.id, worker, batch):
        return "lost"
    return None


def _release(run_id: str, worker: str) -> bool:
    if not writes.release_run(run_id, worker):
        return False
    hand_off(run_id)
    return True


def finish(run: EvalRun, worker: str, client: ChatClient) -> str:
    """Build the report from every recorded outcome and finish the run; a model server that
    answered none of the calls fails it, as `manage.py eval` does."""
    case_set = cases_of(run)
    saved = writes.recorded(run.id)
    outcomes = [Outcome.from_json(case, saved[i]) for i, case in enumerate(case_set.cases)]
    failed = provider_errors(outcomes)
    asked = sum(1 for o in outcomes if o.call is not None or o.error)
    if asked and failed == asked:
        first = next(o.error for o in outcomes if o.error)
        writes.fail_run(run.id, f"the model server answered none of the {asked} calls: {first}")
        return ReplayStatus.FAILED
    report = build_report(case_set, client.provider, client.model, outcomes)
    if not writes.finish_run(run.id, worker, report, evidence_counts(outcomes)):
        return "lost"
    return ReplayStatus.DONE


def evidence_counts(outcomes: list[Outcome]) -> dict:
    """The counts behind the settings page's sentence: decisions, agreed, destructive false
    positives of the cases where one is possible, and the calls that failed."""
    decisions = [o for o in outcomes if o.case.kind == "decision"]
    harmless = harmless_cases(decisions)
    return {
        "decisions": len(decisions),
        "agreed": sum(1 for o in decisions if decision_correct(o)),
        "destructive": sum(1 for o in harmless if o.action in ("update", "delete")),
        "harmless": len(harmless),
        "providerErrors": provider_errors(outcomes),
    }


def reclaim_stale_runs() -> dict[str, int]:
    """The sweep's part for evaluation runs: a running run whose heartbeat outlived the jobs'
    lease timeout lost its worker. It is queued again to go on after its recorded outcomes, or,
    out of attempts, failed saying so."""
    config = get_config()
    retried, failed = writes.reclaim_stale_runs(
        timedelta(seconds=config.lease_timeout_seconds), max_attempts=config.max_attempts
    )
    for run_id in retried:
        hand_off(run_id)
    lost = writes.lost_runs()  # queued five minutes and no task took them
    for run_id in lost:
        hand_off(run_id, again=True)
    return {"retried": len(retried) + len(lost), "failed": failed}


# --- reading -----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Evidence:
    """What the settings page says about the configured model before a switch to write modes:
    its latest finished run on the reviewers' verdicts (`run`), or failing that on the shipped
    set (`shipped_only`), or nothing (`run` None)."""

    provider: str
    model: str
    run: EvalRun | None = None
    shipped_only: bool = False
    error: str = ""  # the configured provider cannot be named

    @property
    def decisions(self) -> int:
        return self.run.counts.get("decisions", 0) if self.run else 0

    @property
    def agreed_percent(self) -> int:
        agreed = self.run.counts.get("agreed", 0) if self.run else 0
        return round(100 * agreed / self.decisions) if self.decisions else 0

    @property
    def destructive(self) -> int:
        return self.run.counts.get("destructive", 0) if self.run else 0

    @property
    def harmless(self) -> int:
        return self.run.counts.get("harmless", 0) if self.run else 0


def configured_model_evidence() -> Evidence:
    """The evidence for the model jobs use now (MEMORY_LLM_PROVIDER, MEMORY_EXTRACTION_MODEL)."""
    try:
        client = get_chat_client()
    except ProviderError as exc:
        return Evidence("", "", error=str(exc))
    # A run on a whole set only: one category's cases (or the first few) would speak for the
    # model as if it were all of them ("agrees 0%" on the rejected verdicts alone).
    done = finished_runs().filter(provider=client.provider, model=client.model, selection="")
    reviewed = done.filter(set_kind=REVIEWED).first()
    if reviewed is not None:
        return Evidence(client.provider, client.model, reviewed)
    shipped = done.first()
    return Evidence(client.provider, client.model, shipped, shipped_only=shipped is not None)


def finished_runs():
    """Runs with a report, newest first (the side-by-side choices), without their big columns."""
    return (
        EvalRun.objects.filter(status=ReplayStatus.DONE)
        .defer("set_text", "report")
        .order_by("-finished_at")
    )
