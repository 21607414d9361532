"""A job's work in batches (issue 12): one embedding call and one candidate search for every fact,
the same candidates as one search per fact, decisions side by side within MEMORY_LLM_PARALLEL,
and one record write of a few statements that keeps every row the one-by-one write kept."""

import json
import threading

import pytest
from django.db import connection, transaction
from django.utils import timezone

from memory.guard import ModelCallInTransaction
from memory.models import Embedding, Entity, Memory, MemoryEntityMention, MemoryHistory
from pipeline import decision, tasks
from pipeline.llm import get_chat_client
from pipeline.models import LlmCall, Proposal
from pipeline.parsing import Fact
from pipeline.writes import jobs, record
from tests.conftest import TEST_ENGINE
from tests.pipeline_support import ScriptedModel, fact, is_extraction, raw, seed, set_mode

pytestmark = pytest.mark.django_db

FACTS = [
    "Priya prefers squash merges for every repository",
    "Kenji deploys the billing service with Terraform",
    "The staging cluster runs in the eu-west-1 region",
    "Lena reviews every database migration before release",
    "Mara rotates the on-call pager on Mondays",
    "The search cluster keeps thirty days of logs",
    "Omar owns the payments gateway runbook",
    "Ivo documents the public API in the handbook",
    "Sana moved the ledger service to Postgres 16",
    "Yuki tests the mobile app on every Friday",
]


def statements(work) -> int:
    count = 0

    def counter(execute, sql, params, many, context):
        nonlocal count
        count += 1
        return execute(sql, params, many, context)

    with connection.execute_wrapper(counter):
        work()
    return count


def ten_fact_job(fake_ollama):
    """A raw memory of ten facts, its job computed and ready for its write."""
    set_mode("controlled-write")
    now = timezone.now()
    Entity.objects.create(name="Priya", canonical_name="priya", created_at=now, updated_at=now)
    for text in ("Kenji deploys billing", "Lena reviews migrations", "The search cluster"):
        seed(text)  # candidates, so every fact also gets a decision call
    ScriptedModel(fake_ollama, facts=[fact(text) for text in FACTS])
    result = raw("Notes from the platform sync: " + ". ".join(FACTS) + ".")
    outcome = tasks.compute(jobs.claim_job(result.job.id), [])
    assert len(outcome.decisions) == 10
    return result, outcome


def assert_every_row_of_the_ten_facts(result, written) -> None:
    assert written["writeStats"]["added"] == 10 and written["writeStats"]["embeddingsAdded"] == 10
    derived = Memory.objects.filter(source_type="pipeline-v2")
    assert sorted(derived.values_list("content", flat=True)) == sorted(FACTS)
    # Every row the one-by-one write kept: a created audit per memory, a decision audit per fact,
    # a vector per memory and for the raw memory, the inline entity link, the proposals.
    assert MemoryHistory.objects.filter(event="created", memory__in=derived).count() == 10
    assert MemoryHistory.objects.filter(event="none", memory=result.memory).count() == 10
    assert Embedding.objects.filter(content_hash__in=derived.values("content_hash")).count() == 10
    source = Memory.objects.get(id=result.memory.id)
    assert source.embedding_model == "nomic-embed-text"
    assert Embedding.objects.filter(content_hash=source.content_hash).exists()
    priya = Entity.objects.get(canonical_name="priya")
    assert priya.mentions == 2  # the raw memory's link (at remember time) and the derived one
    assert MemoryEntityMention.objects.filter(entity=priya, memory__in=derived).count() == 1
    proposals = Proposal.objects.filter(job=result.job).order_by("position")
    assert [p.position for p in proposals] == list(range(10))
    assert all(p.status == "applied" and p.risk == 2 for p in proposals)


@pytest.mark.sqlite_only(reason="the statement budget is SQLite's (one write lock for the store)")
def test_a_job_of_ten_facts_is_written_with_at_most_twenty_statements(fake_ollama):
    result, outcome = ten_fact_job(fake_ollama)

    written = {}
    count = statements(lambda: written.update(record.record_job(outcome)))

    assert count <= 20, count
    assert_every_row_of_the_ten_facts(result, written)


@pytest.mark.skipif(TEST_ENGINE != "postgres", reason="psycopg's pipeline mode: PostgreSQL only")
def test_on_postgresql_the_job_sends_its_writes_without_waiting_for_each_answer(fake_ollama):
    """Each statement the write waits for costs a round trip to the server while its locks are
    held: the reads the gates need go together, then every write, each batch in one pipeline."""
    from psycopg import pq

    result, outcome = ten_fact_job(fake_ollama)
    waited, pipelined = [], []

    def watch(execute, sql, params, many, context):
        on = connection.connection.pgconn.pipeline_status != pq.PipelineStatus.OFF
        (pipelined if on else waited).append(sql.split("(")[0].split(" WHERE ")[0][:60])
        return execute(sql, params, many, context)

    written = {}
    with connection.execute_wrapper(watch):
        written.update(record.record_job(outcome))

    # The test's own transaction makes the write's atomic() a savepoint: the write is what runs
    # between SAVEPOINT and RELEASE (the entities are read before it, on purpose).
    start = next(i for i, sql in enumerate(waited) if sql.startswith("SAVEPOINT"))
    inside = [sql for sql in waited[start + 1 :] if not sql.startswith("RELEASE")]
    assert not inside, inside
    assert any("memory_jobs" in sql for sql in pipelined), pipelined  # the reads, together
    assert any("pipeline_proposals" in sql for sql in pipelined), pipelined
    assert_every_row_of_the_ten_facts(result, written)


def test_two_facts_with_the_same_text_in_one_job_make_one_memory(fake_ollama):
    set_mode("controlled-write")
    ScriptedModel(fake_ollama, facts=[FACTS[0], FACTS[0] + "."])
    result = raw("Priya prefers squash merges for every repository, she said twice.")
    tasks.process_pending()
    statuses = sorted(Proposal.objects.filter(job=result.job).values_list("status", flat=True))
    assert statuses == ["applied", "deduped"]
    assert Memory.objects.filter(source_type="pipeline-v2").count() == 1


def test_the_job_embeds_the_memory_and_every_fact_in_one_call(fake_ollama):
    ScriptedModel(fake_ollama, facts=FACTS[:4])
    result = raw("Notes from the platform sync with four facts in them.")
    tasks.process_pending()
    (embed,) = fake_ollama.calls("/api/embed")
    assert embed["input"] == [result.memory.content, *FACTS[:4]]


def test_decisions_run_side_by_side_never_more_than_the_limit(fake_ollama, settings):
    settings.MEMORY_LLM_PARALLEL = 3
    seed("Priya and Kenji and Lena and Mara and Omar and Sana share notes")
    # Each decision call waits until two others are in flight with it: if the calls ran one by one
    # the barrier would break (its timeout only detects that failure).
    barrier = threading.Barrier(3, timeout=10)
    lock = threading.Lock()
    in_flight, most = 0, 0

    def on_decide(content, prompt):
        nonlocal in_flight, most
        with lock:
            in_flight += 1
            most = max(most, in_flight)
        try:
            barrier.wait()
        finally:
            with lock:
                in_flight -= 1

    names = ["Priya", "Kenji", "Lena", "Mara", "Omar", "Sana"]
    ScriptedModel(
        fake_ollama,
        facts=[f"{name} shares notes every week" for name in names],
        on_decide=on_decide,
    )
    result = raw("Weekly notes: who shares notes with whom, and when.")
    assert tasks.run_job(result.job.id) == "completed"
    assert most == 3 and not barrier.broken
    decides = LlmCall.objects.filter(job=result.job, kind="decide")
    assert sorted(decides.values_list("fact_index", flat=True)) == list(range(6))
    proposals = Proposal.objects.filter(job=result.job).order_by("position")
    assert [p.fact_content for p in proposals] == [f"{n} shares notes every week" for n in names]


def test_decision_calls_refuse_to_start_inside_a_transaction():
    facts = [Fact("Priya prefers squash merges", "fact", 0.9)]
    candidates = decision.find_candidates_many(
        facts,
        agent_id="default",
        source_id="none",
        alpha=0.7,
        min_score=0.0,
        vectors=[None],
        model=None,
    )
    with transaction.atomic(), pytest.raises(ModelCallInTransaction):
        list(decision.decide_all(get_chat_client(), facts, candidates, parallel=4))


def test_a_failed_decision_fails_the_job_and_logs_what_was_sent(fake_ollama, settings):
    settings.MEMORY_LLM_PARALLEL = 4
    seed("Priya and Kenji share notes")

    def handler(payload):
        if is_extraction(payload):
            facts = [fact("Priya shares notes weekly"), fact("Kenji shares notes weekly")]
            return json.dumps({"facts": facts, "entities": []})
        raise ConnectionError("the model runner crashed")

    fake_ollama.chat_handler = handler
    result = raw("Weekly notes about who shares notes.")
    assert tasks.run_job(result.job.id) == "pending"
    assert not Proposal.objects.exists()
    assert LlmCall.objects.filter(job=result.job, kind="decide").exclude(error=None).exists()
