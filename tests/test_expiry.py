"""Expiry in the store (issue 22, item 8): a memory past its `expires_at` leaves recall and the
pipeline's candidate search the moment it expires (at query time, inside each leg's SQL on both
engines, no sweep), whichever path the search takes (both legs, keyword only, a filtered search
exact or widened), without a query more; one that expires later is found until then. The
reading of an expiry (`memory.expiry.parse`) and the partial index the maintenance purge uses."""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from memory import expiry, keyword, search, vectors, writes
from memory.backend import list_holds
from memory.models import Memory, MemoryHistory
from memory.moments import iso
from memory.search import hybrid_search
from memory.writes import Actor
from pipeline.decision import find_candidates_many, keyword_candidates
from pipeline.llm import get_embedder
from pipeline.parsing import Fact
from pipeline.tasks import embed_missing

pytestmark = pytest.mark.django_db

AGENT = Actor("claude-code", "agent")
REVIEWER = Actor("ada", "operator")
QUERY = "kafka consumer lag on the billing service"


def remember(text: str, **kwargs) -> Memory:
    return writes.remember(text, actor=AGENT, create_job=False, **kwargs).memory


def expire(memory: Memory, at: datetime | None = None) -> Memory:
    """Set the memory's expiry (default: a second ago), as a PATCH or the dashboard does."""
    at = at or timezone.now() - timedelta(seconds=1)
    return writes.modify(memory.id, {"expires_at": at}, actor=REVIEWER, reason="no longer true")


def embed_all() -> None:
    while embed_missing():
        pass


def found(text: str = QUERY, **kwargs) -> set[str]:
    """The ids hybrid search returns for `text`, with both legs (and min_score 0: whatever
    either leg finds at all)."""
    embedder = get_embedder()
    hits = hybrid_search(
        text,
        k=10,
        min_score=0.0,
        query_vector=embedder.embed_one(text),
        model=embedder.model,
        **kwargs,
    )
    return {hit.memory_id for hit in hits}


@pytest.fixture
def store():
    """Three memories that match the query, all embedded while they did not expire."""
    memories = [remember(f"Kafka consumer lag on the billing service, alert {i}") for i in range(3)]
    remember("The deploy freeze starts on Friday")
    embed_all()
    return memories


# --- reading an expiry ------------------------------------------------------------------------


def test_parse_reads_iso_8601_with_a_zone_and_answers_utc():
    assert expiry.parse("2027-01-31T00:00:00Z") == datetime(2027, 1, 31, tzinfo=UTC)
    assert expiry.parse(" 2027-01-31T02:30:00+02:00 ") == datetime(2027, 1, 31, 0, 30, tzinfo=UTC)
    assert iso(expiry.parse("2027-01-31T02:30:00+02:00")) == "2027-01-31T00:30:00Z"


@pytest.mark.parametrize(
    ("value", "says"),
    [
        ("2027-01-31T00:00:00", "needs a time zone"),
        ("2027-01-31", "needs a time zone"),
        ("tomorrow", "is not an ISO 8601 date and time"),
        ("2027-02-30T00:00:00Z", "is not an ISO 8601 date and time"),
        ("2027-01-31T00:00:00+25:00", "is not an ISO 8601 date and time"),
        ("", "is not an ISO 8601 date and time"),
        ("9999-12-31T23:00:00-05:00", "out of range"),
        (1798675200, "must be a string"),
    ],
)
def test_parse_refuses_what_is_not_a_moment_and_says_why(value, says):
    with pytest.raises(expiry.BadExpiry, match=says):
        expiry.parse(value)


def test_a_form_whose_field_says_utc_may_leave_the_zone_out():
    moment = expiry.parse("2027-01-31T09:15", default_utc=True)
    assert moment == datetime(2027, 1, 31, 9, 15, tzinfo=UTC)


# --- recall -------------------------------------------------------------------------------------


def test_a_memory_that_expired_leaves_recall_at_once_on_both_legs(store):
    gone, kept = store[0], {m.id for m in store[1:]}
    assert {m.id for m in store} <= found()
    expire(gone)
    # No sweep, no maintenance: the next search leaves it out.
    assert gone.id not in found() and kept <= found()
    keyword_only = hybrid_search(QUERY, k=10, min_score=0.0)
    assert {hit.memory_id for hit in keyword_only} == kept
    embedder = get_embedder()
    vector_only = vectors.search(
        embedder.embed_one(QUERY), model=embedder.model, agent_id="default", limit=10
    )
    assert gone.id not in {memory_id for memory_id, _ in vector_only}
    assert gone.id not in {mid for mid, _ in keyword.search(QUERY, agent_id="default", limit=10)}


def test_a_memory_that_expires_later_is_found_until_that_moment(store):
    soon = timezone.now() + timedelta(seconds=2)
    expire(store[0], at=soon)
    assert store[0].id in found()
    while timezone.now() <= soon:
        time.sleep(0.1)
    # The clock passed the expiry; nothing was written since.
    assert Memory.objects.get(id=store[0].id).version == 2
    assert store[0].id not in found()


def test_a_memory_expiring_next_year_is_found_and_lifting_an_expiry_brings_one_back(store):
    expire(store[0], at=timezone.now() + timedelta(days=365))
    assert store[0].id in found()
    expire(store[1])
    assert store[1].id not in found()
    writes.modify(store[1].id, {"expires_at": None}, actor=REVIEWER, reason="still true")
    assert store[1].id in found()


@pytest.mark.parametrize("path", ["exact", "widened"])
def test_a_filtered_recall_leaves_expired_memories_out_on_either_path(store, path, monkeypatch):
    if path == "widened":  # the filtered set counts as big: the legs widen instead
        monkeypatch.setattr(search, "EXACT_FILTERED", 1)
    for memory in store:
        writes.modify(memory.id, {"tags": ["project:atlas"]}, actor=REVIEWER, reason="tag")
    expire(store[0])
    where = list_holds("tags", "project:atlas")
    assert found(where=where) == {m.id for m in store[1:]}
    assert {h.memory_id for h in hybrid_search(QUERY, min_score=0, where=where)} == {
        m.id for m in store[1:]
    }


def test_expired_memories_that_match_better_do_not_hide_the_live_ones():
    """300 better matches, all expired, crowd the top of both legs: the search reads on past
    them (in SQL) and still returns the 3 live ones."""
    crowd = [remember(f"Kafka consumer lag on the billing service, alert {i}") for i in range(300)]
    live = {remember(f"Atlas note {i}: kafka lag seen once").id for i in range(3)}
    embed_all()
    Memory.objects.filter(id__in=[m.id for m in crowd]).update(
        expires_at=timezone.now() - timedelta(days=1)
    )
    assert found() & {m.id for m in crowd} == set()
    assert live <= found()


def test_excluding_expired_memories_costs_no_query_more(store):
    embedder = get_embedder()
    vector = embedder.embed_one(QUERY)

    def queries() -> list[str]:
        with CaptureQueriesContext(connection) as captured:
            hybrid_search(QUERY, k=10, min_score=0.0, query_vector=vector, model=embedder.model)
        return [q["sql"] for q in captured.captured_queries]

    queries()  # the first search maps the shared matrix
    before = queries()
    expire(store[0])
    expire(store[1], at=timezone.now() + timedelta(days=1))
    after = queries()
    assert len(after) == len(before)
    # The condition is part of the legs' own SQL: no per-row check in Python.
    assert sum("expires_at" in sql for sql in after) >= 2


# --- the pipeline's candidate search ------------------------------------------------------------


def test_an_expired_memory_is_no_candidate_for_the_pipeline(store):
    source = remember("Notes from the Tuesday sync")
    facts = [Fact("Kafka consumer lag on the billing service is high", "fact", 0.9)]
    embedder = get_embedder()

    def candidates() -> set[str]:
        found = find_candidates_many(
            facts,
            agent_id="default",
            source_id=source.id,
            alpha=0.7,
            min_score=0.0,
            vectors=[embedder.embed_one(facts[0].content)],
            model=embedder.model,
            keyword_hits=keyword_candidates(facts, agent_id="default", source_id=source.id),
        )[0]
        return {c.candidate.memory_id for c in found}

    assert {m.id for m in store} <= candidates()
    expire(store[0])
    assert store[0].id not in candidates()
    assert {m.id for m in store[1:]} <= candidates()


# --- the index the maintenance purge reads ------------------------------------------------------


def test_an_expiry_set_in_the_past_expires_now_and_leaves_the_whole_grace_before_the_purge():
    """Found by a day of QA: a year typed wrong (2026 for 2027) was stored as given, so the
    memory, pinned or not, was due for erasure at the next maintenance run."""
    memory = remember("The Lisbon office badge readers are replaced in January", pinned=True)
    before = timezone.now()
    expired = expire(memory, at=before - timedelta(days=365))
    assert before <= expired.expires_at <= timezone.now() and expired.is_expired
    assert expiry.due_for_purge(30, now=timezone.now()) == []
    assert expiry.due_for_purge(30, now=timezone.now() + timedelta(days=31)) == [memory.id]
    event = MemoryHistory.objects.filter(memory_id=memory.id, event="updated").latest("created_at")
    assert event.metadata["expiresAt"] == expired.expires_at.isoformat().replace("+00:00", "Z")


def test_a_past_moment_sent_again_for_a_memory_already_expired_changes_nothing():
    """A client saving the whole object sends the expiry back with its edit: the memory keeps the
    moment it expired at, and the wait before its purge is not started over (a review of the
    change above found it restarting)."""
    memory = remember("The Porto office closes in November")
    expire(memory)
    long_ago = timezone.now() - timedelta(days=29)
    Memory.objects.filter(id=memory.id).update(expires_at=long_ago)  # 29 days gone by
    memory = Memory.objects.get(id=memory.id)
    with pytest.raises(writes.Refused) as same:
        expire(memory, at=long_ago)
    assert same.value.code == "no_changes"
    with pytest.raises(writes.Refused):
        expire(memory, at=long_ago - timedelta(days=3))  # another past moment: still expired
    tagged = writes.modify(
        memory.id, {"tags": ["porto"], "expires_at": long_ago}, actor=REVIEWER, reason="tag"
    )
    assert tagged.expires_at == long_ago and tagged.tags == ["porto"]
    assert expiry.due_for_purge(28, now=timezone.now()) == [memory.id]


NOW = datetime(2026, 12, 6, 12, 0, tzinfo=UTC)


@pytest.mark.parametrize(
    ("current", "moment", "says"),
    [
        (None, None, "expiry lifted"),
        (None, datetime(2027, 1, 31, tzinfo=UTC), "expiry set to 2027-01-31 00:00:00 UTC"),
        (
            None,
            datetime(2001, 1, 1, tzinfo=UTC),
            "expired now (the moment given, 2001-01-01 00:00:00 UTC, had passed)",
        ),
        (  # a later moment of its own is no expiry yet: the change expires it now
            datetime(2027, 1, 1, tzinfo=UTC),
            datetime(2001, 1, 1, tzinfo=UTC),
            "expired now (the moment given, 2001-01-01 00:00:00 UTC, had passed)",
        ),
        (
            datetime(2026, 11, 1, tzinfo=UTC),
            datetime(2001, 1, 1, tzinfo=UTC),
            "already expired at 2026-11-01 00:00:00 UTC, which it keeps "
            "(the moment given, 2001-01-01 00:00:00 UTC, had passed)",
        ),
    ],
)
def test_an_expiry_change_is_described_as_the_store_keeps_it(current, moment, says):
    assert expiry.change_described(current, moment, NOW) == says
    if moment is not None and moment < NOW:  # the words follow what as_changed stores
        stored = expiry.as_changed(current, {"expires_at": moment}, NOW)["expires_at"]
        assert (stored == NOW) == says.startswith("expired now")


def test_due_for_purge_names_what_expired_long_enough_ago_soonest_first():
    now = timezone.now()
    old = remember("Expired forty days ago", expires_at=now - timedelta(days=40))
    older = remember("Expired fifty days ago", expires_at=now - timedelta(days=50))
    remember("Expired ten days ago", expires_at=now - timedelta(days=10))
    remember("Expires next week", expires_at=now + timedelta(days=7))
    remember("Never expires")
    assert expiry.due_for_purge(30, now=now) == [older.id, old.id]
    assert expiry.due_for_purge(30, now=now, limit=1) == [older.id]
    assert expiry.due_for_purge(0, now=now) == []


def test_due_for_purge_reads_the_partial_expiry_index():
    sql, params = (
        Memory.objects.filter(expires_at__lte=timezone.now(), purged_at__isnull=True)
        .values("id")
        .query.sql_with_params()
    )
    explain = "EXPLAIN (COSTS OFF) " if connection.vendor == "postgresql" else "EXPLAIN QUERY PLAN "
    with connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            cursor.execute("SET LOCAL enable_seqscan = off")  # an empty table: a scan is cheaper
        cursor.execute(explain + sql, params)
        plan = " ".join(str(row) for row in cursor.fetchall())
    assert "memories_expiry" in plan, plan
