"""A remember's structured triples are written in a fixed number of statements (issue 21, item 8):
one client looping 50-triple remembers held the write lock for ~260 statements each and raised
every other writer's latency. The graph it writes is the same as one triple at a time."""

import threading

import pytest
from django.db import connection, connections
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from memory import writes
from memory.graph import TRIPLE_STATEMENTS, persist_triples
from memory.models import Entity, MemoryEntityMention, Relation
from memory.writes import Actor, Triple
from tests.conftest import TEST_ENGINE

pytestmark = pytest.mark.django_db
AGENT = Actor("agent-one", "agent")


def triples(n: int, offset: int = 0) -> list[Triple]:
    return [
        Triple(f"Person {offset + i}", "works on", f"Project {i % 7}", "person", "project", 0.9)
        for i in range(n)
    ]


def statements_of(memory, batch: list[Triple]) -> int:
    with CaptureQueriesContext(connection) as queries:
        persist_triples(memory, batch, at=timezone.now())
    return len(queries)


@pytest.mark.parametrize("n", [1, 50])
def test_the_triples_of_a_remember_take_a_fixed_number_of_statements(n):
    memory = writes.remember("A note the graph hangs on.", actor=AGENT).memory
    Entity.objects.create(  # one of the names exists already, with a placeholder type
        name="Project 0",
        canonical_name="project 0",
        entity_type="unknown",
        created_at=timezone.now(),
        updated_at=timezone.now(),
    )
    assert statements_of(memory, triples(n)) <= TRIPLE_STATEMENTS
    assert Relation.objects.count() == n
    assert Entity.objects.get(canonical_name="project 0").entity_type == "project"


def test_a_whole_remember_with_fifty_triples_stays_a_short_write():
    with CaptureQueriesContext(connection) as queries:
        writes.remember("Fifty people work on seven projects.", actor=AGENT, triples=triples(50))
    # The memory's own few statements plus the triples' fixed number (was ~260).
    assert len(queries) <= 10 + TRIPLE_STATEMENTS


def test_an_edge_named_again_is_counted_and_its_confidence_averaged():
    first = writes.remember("Priya maintains billing-api.", actor=AGENT).memory
    edge = Triple("Priya", "maintains", "billing-api", "person", "project", 0.9)
    persist_triples(first, [edge], at=timezone.now())
    second = writes.remember("Priya still maintains billing-api.", actor=AGENT).memory
    again = Triple("priya", "maintains", "Billing-API", "unknown", "unknown", 0.6)
    persist_triples(second, [again, again], at=timezone.now())
    relation = Relation.objects.get()
    assert relation.mentions == 3
    assert relation.confidence == pytest.approx((0.9 + 0.6 + 0.6) / 3)
    priya = Entity.objects.get(canonical_name="priya")
    # The name as first written and the type first stated stay; one mention per memory.
    assert (priya.name, priya.entity_type, priya.mentions) == ("Priya", "person", 2)
    assert MemoryEntityMention.objects.filter(memory=second, entity=priya).count() == 1


def test_a_type_someone_chose_is_not_overwritten():
    now = timezone.now()
    Entity.objects.create(
        name="Kafka", canonical_name="kafka", entity_type="tool", created_at=now, updated_at=now
    )
    memory = writes.remember("Kafka carries billing events.", actor=AGENT).memory
    persist_triples(memory, [Triple("Kafka", "carries", "billing events", "queue")], at=now)
    assert Entity.objects.get(canonical_name="kafka").entity_type == "tool"
    assert Entity.objects.get(canonical_name="billing events").entity_type == "unknown"


@pytest.mark.skipif(TEST_ENGINE != "postgres", reason="SQLite runs one writer at a time")
@pytest.mark.django_db(transaction=True)
def test_concurrent_remembers_naming_the_same_new_entities_both_succeed():
    """On PostgreSQL both read "no such entity" and insert it: the second used to fail on the
    UNIQUE index (a 500). Now it skips the name and reads the row the first committed."""
    barrier = threading.Barrier(2)
    errors: list[BaseException] = []

    def writer(n: int) -> None:
        try:
            for round_ in range(10):
                barrier.wait(timeout=30)
                batch = [
                    Triple(f"Shared {round_}-{i}", "knows", f"Other {round_}-{i}") for i in range(5)
                ]
                writes.remember(f"Writer {n} round {round_}.", actor=AGENT, triples=batch)
        except BaseException as exc:  # reported by the test's thread
            errors.append(exc)
            barrier.abort()
        finally:
            connections.close_all()

    threads = [threading.Thread(target=writer, args=(n,)) for n in (1, 2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    assert errors == []
    assert Entity.objects.count() == 10 * 10
    assert sorted(set(Relation.objects.values_list("mentions", flat=True))) == [2]
