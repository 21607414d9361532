"""Writes that count mentions of several entities update them in id order (remember's inline linker
and the job's batched linker alike): on PostgreSQL two transactions locking the same entity rows in
different orders deadlock, which the benchmark's remember-under-load met."""

import pytest
from django.db import connection
from django.utils import timezone

from memory import writes
from memory.models import Entity
from tests.pipeline_support import raw

pytestmark = pytest.mark.django_db

NAMES = ["Zoe", "Priya", "Marco", "Bruno", "Kenji"]  # created in an order that is not by name


def entity_update_order(work) -> list[int]:
    updated = []

    def spy(execute, sql, params, many, context):
        if sql.lstrip().upper().startswith("UPDATE") and "entities" in sql:
            rows = params if many else [params]
            updated.extend(int(row[-1]) for row in rows)
        return execute(sql, params, many, context)

    with connection.execute_wrapper(spy):
        work()
    return updated


@pytest.fixture
def entities():
    now = timezone.now()
    return [
        Entity.objects.create(name=n, canonical_name=n.lower(), created_at=now, updated_at=now).pk
        for n in NAMES
    ]


def test_remember_counts_mentions_in_entity_id_order(entities):
    order = entity_update_order(lambda: raw("Zoe, Priya, Marco, Bruno and Kenji met on Monday."))
    assert sorted(order) == sorted(entities) and order == sorted(order)


def test_the_jobs_batched_linker_counts_mentions_in_entity_id_order(entities):
    memory = raw("A note about nothing in particular.").memory
    names = {n.lower(): n for n in reversed(NAMES)}  # asked for in the opposite order
    order = entity_update_order(
        lambda: writes.link_entities_of([(memory, names)], at=timezone.now())
    )
    assert sorted(order) == sorted(entities) and order == sorted(order)


def test_a_remember_with_triples_counts_inline_links_and_triples_in_one_id_ordered_pass(entities):
    # Inline links (Zoe, Kenji) and the triples' entities (Priya, Marco) used to be counted in two
    # id-ordered passes: one transaction's two passes then crossed another's in opposite order.
    triples = [writes.Triple("Priya", "works with", "Marco", "person", "person", 0.9)]
    order = entity_update_order(
        lambda: writes.remember(
            "Zoe and Kenji met.", actor=writes.Actor("a", "agent"), triples=triples
        )
    )
    named = [entities[NAMES.index(n)] for n in ("Zoe", "Kenji", "Priya", "Marco")]
    assert sorted(order) == sorted(named) and order == sorted(order)
