"""django-q2 entry points. Every job: claim (conditional UPDATE) -> model calls, no transaction
open -> one short atomic write (pipeline.writes.record). Arguments are ids only."""

from __future__ import annotations

import logging
import time
from datetime import timedelta

from django.conf import settings
from django.db.models import Q
from django.utils import timezone

from memory import expiry as memory_expiry
from memory import queue, vectors, writes
from memory.content import normalize
from memory.guard import ensure_outside_transaction
from memory.jobs import Claim
from memory.models import Embedding, Job, JobStatus, Memory, RowRead
from memory.threads import process_pool
from memory.writes import Vector
from pipeline import decision, digest, expiry, extraction, replay
from pipeline.config import get_config, maintenance_allowed, mode_of
from pipeline.eval import runs as eval_runs
from pipeline.imports import runs as import_runs
from pipeline.llm import CallRecord, ProviderError, get_chat_client, get_embedder
from pipeline.writes import evaluation as eval_writes
from pipeline.writes import jobs
from pipeline.writes.record import JobOutcome, record_job

log = logging.getLogger(__name__)

MATRIX_CHECK_SECONDS = 600


def run_job(job_id: str) -> str | None:
    """Process one job if it can be claimed; returns the job's new status (None: not claimed)."""
    claim = jobs.claim_job(job_id)
    if claim is None:
        return None
    calls = jobs.LiveCalls(job_id)  # logged as they happen: the job page shows progress
    try:
        outcome = compute(claim, calls)
    except Exception as exc:  # any failure is retried; the raw memory is never touched
        if isinstance(exc, ProviderError) and getattr(exc, "call", None) is not None:
            calls.extend([exc.call])  # logged by fail_job after the calls before it, in order
        log.warning("job %s attempt %s failed: %s", job_id, claim.attempts, exc)
        return jobs.fail_job(claim, f"{type(exc).__name__}: {exc}", calls)
    if outcome is None:  # source forgotten or expired before any model call
        record_job(JobOutcome(claim=claim, provider="-", model="-", calls=calls))
        return JobStatus.CANCELLED
    try:
        result = record_job(outcome)
    except Exception as exc:
        log.exception("job %s write failed", job_id)
        # The calls were logged inside the rolled-back write: log them with the failure instead.
        return jobs.fail_job(claim, f"write failed: {type(exc).__name__}: {exc}", outcome.calls)
    if result is None:
        return None
    if "requeued" in result:
        return JobStatus.PENDING
    return JobStatus.CANCELLED if "cancelled" in result else JobStatus.COMPLETED


def compute(claim: Claim, calls: list[CallRecord], client=None) -> JobOutcome | None:
    """All model calls of a job, with no transaction open. Reads the store, writes nothing.

    `client` defaults to the configured chat client (the demo passes a recorded one).
    """
    # Raw: the ORM took three times as long to build this one-row read as SQLite to run it.
    source = RowRead(Memory, "id = %s", [claim.memory_id]).get()
    if source is None:
        raise Memory.DoesNotExist(f"memory {claim.memory_id} of job {claim.job_id}")
    if source.is_deleted or source.is_expired:  # nothing is extracted from either
        return None
    config = get_config()
    client = client or get_chat_client()
    # Before the first model call: nothing between the extraction's reply and its log may fail.
    embedder = get_embedder()
    # The embedding thread cannot see a transaction this one holds: check here, where the caller is.
    ensure_outside_transaction("embedding call")
    extracted = extraction.extract(client, source.content)
    warnings = list(extracted.warnings)

    texts = [source.content] + [fact.content for fact in extracted.facts]
    # One embedding call for the memory and every fact, on the wire in another thread (HTTP only)
    # while the keyword leg of the candidate search runs, which needs no vector (here; on
    # PostgreSQL in a thread with its own connection, on to the vector search's end).
    try:
        embedding = process_pool("embed", 1).submit(_embed_call, embedder, texts)
    finally:
        if extracted.call is not None:  # None: input too short, no model call made
            calls.append(extracted.call)  # its log's write, while the embedding call is out
    keyword_hits = decision.keyword_candidates(
        extracted.facts, agent_id=source.agent_id, source_id=source.id
    )
    # The vectors the last jobs stored are taken into the shared matrix while the call is out.
    vectors.catch_up(embedder.model)
    embedded = _embedded(embedder, texts, embedding.result(), warnings, calls)
    source_vector = embedded[0] if embedded else None
    fact_vectors = {
        normalize(fact.content).hash: vector
        for fact, vector in zip(extracted.facts, embedded[1:], strict=False)
    }
    # Every fact's candidates come from the store as it is now, before this job writes anything:
    # one batched search, then the decisions side by side.
    candidates = decision.find_candidates_many(
        extracted.facts,
        agent_id=source.agent_id,
        source_id=source.id,
        alpha=config.search_alpha,
        min_score=config.search_min_score,
        vectors=[v.values for v in embedded[1:]] if embedded else [None] * len(extracted.facts),
        model=embedder.model if embedded else None,
        keyword_hits=keyword_hits,
    )
    examples = (
        decision.recent_rejections(source.agent_id) if config.rejections_as_examples else None
    )
    decisions = _decide(client, extracted.facts, candidates, examples, warnings, calls)
    return JobOutcome(
        claim=claim,
        provider=client.provider,
        model=client.model,
        facts=extracted.facts,
        entities=extracted.entities,
        decisions=decisions,
        warnings=warnings,
        calls=calls,
        source_vector=source_vector,
        fact_vectors=fact_vectors,
        mode=mode_of(config),
        source_hash=source.content_hash,
        source_text=source.content,
        agent_id=source.agent_id,
    )


def _decide(client, facts, candidates, examples, warnings: list[str], calls: list) -> list:
    """Every fact's decision, side by side; their warnings and calls join the job's."""
    runs = {}
    try:
        for run in decision.decide_all(
            client, facts, candidates, examples, parallel=settings.MEMORY_LLM_PARALLEL
        ):
            runs[run.index] = run
    finally:
        # The decisions return together (side by side): their calls are logged with the job's
        # write (or its failure) in one statement, not in one write each.
        calls.extend(runs[i].call for i in sorted(runs) if runs[i].call is not None)
    decisions = []
    for index in sorted(runs):
        warnings.extend(runs[index].warnings)
        if runs[index].decided is not None:
            decisions.append(runs[index].decided)
    return decisions


def _embed_call(embedder, texts: list[str]) -> tuple[list | ProviderError, float]:
    """The embedding call alone (any thread: no database): its vectors or its error, and its ms."""
    started = time.perf_counter()
    try:
        values = embedder.embed(texts)
    except ProviderError as exc:
        values = exc
    return values, (time.perf_counter() - started) * 1000


def _embedded(
    embedder, texts: list[str], answer, warnings: list[str], calls: list[CallRecord]
) -> list[Vector]:
    """The call's record and its vectors; a failure leaves a warning, not a failed job."""
    values, duration_ms = answer
    record = CallRecord(
        kind="embed",
        provider=embedder.provider,
        model=embedder.model,
        prompt=f"{len(texts)} texts",
        duration_ms=duration_ms,
    )
    # Logged with the job's write (or its failure), as the decisions are: a write of its own here
    # would sit between the embedding's return and the candidate search.
    if isinstance(values, ProviderError):
        record.error = str(values)
        calls.extend([record])
        warnings.append(f"Embedding prefetch failed: {values}")
        return []
    record.raw_response = (
        f"{len(values)} vectors of {values[0].shape[0] if values else 0} dimensions"
    )
    calls.extend([record])
    return [Vector(v, embedder.model) for v in values]


def run_eval(run_id: str) -> str | None:
    """An evaluation run (pipeline.eval.runs): claim it, call the model on every case not recorded
    yet, recording batch by batch, then finish with the report. Returns the run's status (None:
    not claimed; "released": queued again to go on in a new task; "lost": taken over)."""
    claimed = eval_runs.claim(run_id)
    if claimed is None:
        return None
    run, worker = claimed
    try:
        client = get_chat_client(run.provider, run.model)
        stopped = eval_runs.call_and_record(run, worker, client)
        return stopped or eval_runs.finish(run, worker, client)
    except Exception as exc:  # whatever it was, the page must stop waiting and say so
        log.exception("evaluation %s failed", run_id)
        eval_writes.fail_run(run_id, f"{type(exc).__name__}: {exc}")
        return "failed"


# --- periodic work ------------------------------------------------------------------------------


def sweep() -> dict:
    """Every minute: reclaim stale leases, hand off pending jobs whose hand-off was lost, and
    index vectors whose post-commit index insert was lost (see memory.vectors.index_vectors)."""
    config = get_config()
    reclaimed = jobs.reclaim_stale_leases(timedelta(seconds=config.lease_timeout_seconds))
    runs = replay.reclaim_stale_runs()  # second opinions whose worker died, the same way
    evals = eval_runs.reclaim_stale_runs()  # and evaluation runs
    imports = import_runs.reclaim_stale_runs()  # and imports
    repaired = vectors.repair_index()
    # The whole shared matrix file against the stored vectors, every ten minutes per worker:
    # rows no search meets (zeroed, say) would otherwise drop out of every top k unnoticed.
    damaged = vectors.repair_matrix(every=MATRIX_CHECK_SECONDS)
    handed = 0
    if config.enabled:
        now = timezone.now()
        # Five quiet minutes before a pending job counts as lost; the hand-off then touches it, so
        # a cluster that is down gets at most one duplicate queue entry per job every 5 minutes.
        quiet = now - timedelta(minutes=5)
        due = Job.objects.filter(status=JobStatus.PENDING, updated_at__lt=quiet).exclude(
            next_attempt_at__gt=now
        )
        # Jobs retried with backoff were updated recently; they are due once next_attempt_at passes.
        retry_due = Job.objects.filter(
            status=JobStatus.PENDING, next_attempt_at__lte=now, updated_at__gte=quiet
        )
        job_ids = list(due.values_list("id", flat=True)[:500])
        job_ids += list(retry_due.values_list("id", flat=True)[:500])
        handed = _hand_off(job_ids)
    report = {**reclaimed, "handedOff": handed}
    if repaired:
        report["vectorsIndexed"] = repaired
    if damaged:
        report["matrixRebuilt"] = damaged
    if any(runs.values()):
        report["replayRuns"] = runs
    if any(evals.values()):
        report["evalRuns"] = evals
    if any(imports.values()):
        report["importRuns"] = imports
    return report


def hand_off_waiting(limit: int = 500) -> int:
    """Hand the oldest `limit` pending jobs that are due to the queue (the sweep hands off the
    rest, `limit` a minute): after the pipeline is enabled again, the jobs that waited run at
    once, before the ones that come after (a QA pass: they waited for the 5-minute lost hand-off
    rule, behind newer memories). Returns how many."""
    now = timezone.now()
    job_ids = list(
        Job.objects.filter(status=JobStatus.PENDING)
        .exclude(next_attempt_at__gt=now)
        .order_by("created_at", "id")
        .values_list("id", flat=True)[:limit]
    )
    return _hand_off(job_ids)


def _hand_off(job_ids: list[str]) -> int:
    """Queue the pending jobs again, noted as handed off first (the sweep then leaves them for
    five quiet minutes); returns how many."""
    jobs.mark_handed_off(job_ids)
    for job_id in job_ids:
        queue.hand_off(job_id)
    return len(job_ids)


def tick() -> dict:
    """The scheduled entry point: sweep always, the staleness digest once a day, maintenance
    when due and allowed."""
    report = {"sweep": sweep()}
    if (sent := digest.run()) is not None:
        report["digest"] = {"stale": sent.stale, "failed": sent.failed}
    config = get_config()
    if maintenance_allowed(config):
        now = timezone.now()
        due = config.last_maintenance_at is None or now - config.last_maintenance_at >= timedelta(
            minutes=config.autonomous_interval_minutes
        )
        if due:
            report["maintenance"] = maintenance()
    return report


def maintenance(batch: int = 200) -> dict:
    """Embed live memories missing a vector (model call outside any transaction), purge old logs
    and the expired memories past retention.expiredPurgeDays (pipeline.expiry)."""
    now = timezone.now()
    jobs.mark_maintenance_run(now)
    embedded = embed_missing(batch)
    purged = jobs.purge_old(now - timedelta(days=get_config().retention_days))
    report = {"embedded": embedded, "purged": purged}
    if (expired := expiry.purge_expired(now=now)) is not None:
        report["expired"] = expired
    return report


def embed_missing(batch: int = 200) -> int:
    """Embed up to `batch` live memories without a searchable vector of the current model: none,
    another model's, or one of another size than the store's (kept before such vectors were
    refused; no search reads it). An expired memory is never searched: it waits, and is
    embedded if its expiry is lifted."""
    embedder = get_embedder()
    live = Memory.objects.filter(memory_expiry.unexpired(), is_deleted=False)
    columns = ("id", "content", "content_hash")
    missing = list(live.exclude(embedding_model=embedder.model).values_list(*columns)[:batch])
    if len(missing) < batch:
        missing += _wrong_size(live, embedder.model, batch - len(missing))
    if not missing:
        return 0
    try:
        values = embedder.embed([content for _, content, _ in missing])
    except ProviderError as exc:
        log.warning("maintenance could not embed: %s", exc)
        return 0
    stored = 0
    for (memory_id, _, content_hash), vector in zip(missing, values, strict=True):
        stored += writes.store_vector(memory_id, content_hash, Vector(vector, embedder.model))
    return stored


def _wrong_size(live, model: str, batch: int) -> list[tuple[str, str, str]]:
    """Up to `batch` live memories whose vector of `model` has another size than the store's.
    Asked apart from the memories without one: PostgreSQL plans `... OR content_hash IN
    (subquery)` as a scan of the whole list per memory (minutes at 1M), where this is a semi-join.
    The ranges are seeks in the (model, dimensions) index, so nearly always, with no such
    vector, it costs one seek."""
    dims = settings.MEMORY_EMBEDDING_DIMENSIONS
    wrong = Embedding.objects.filter(Q(dimensions__lt=dims) | Q(dimensions__gt=dims), model=model)
    if not wrong.exists():
        return []
    found = live.filter(embedding_model=model, content_hash__in=wrong.values("content_hash"))
    return list(found.values_list("id", "content", "content_hash")[:batch])


def process_pending(limit: int | None = None) -> dict[str, int]:
    """Claim and run pending jobs in this process until none are left (or `limit` were run)."""
    counts: dict[str, int] = {}
    ran = 0
    if not get_config().enabled:
        return counts  # disabled: jobs wait, nothing is claimed
    while limit is None or ran < limit:
        now = timezone.now()
        job_id = (
            Job.objects.filter(status=JobStatus.PENDING)
            .exclude(next_attempt_at__gt=now)
            .order_by("created_at")
            .values_list("id", flat=True)
            .first()
        )
        if job_id is None:
            break
        status = run_job(job_id) or "skipped"
        counts[status] = counts.get(status, 0) + 1
        ran += 1
        if status == "skipped" and not get_config().enabled:
            break
    return counts
