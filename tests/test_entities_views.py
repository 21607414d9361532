"""Entity pages: the list (search, mentions first) and one entity's relations and memories."""

from __future__ import annotations

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from django.utils import timezone

from memory.models import Entity, Memory, MemoryEntityMention, Relation
from memory.writes import Actor, Triple, remember

pytestmark = pytest.mark.django_db
AGENT = Actor("x", "agent")


@pytest.fixture
def graph(db):
    """Alice -works_on-> Harbor, Bob -works_on-> Harbor; two memories mention Harbor."""
    first = remember(
        "Alice works on Harbor, the deployment dashboard.",
        actor=AGENT,
        triples=[Triple("Alice", "works_on", "Harbor", "person", "project", 0.9)],
    ).memory
    second = remember(
        "Bob works on Harbor too.",
        actor=AGENT,
        triples=[Triple("Bob", "works_on", "Harbor", "person", "project", 0.8)],
    ).memory
    return {
        "harbor": Entity.objects.get(canonical_name="harbor"),
        "alice": Entity.objects.get(canonical_name="alice"),
        "memories": [first, second],
    }


def _queries(client, url, **extra) -> int:
    with CaptureQueriesContext(connection) as ctx:
        assert client.get(url, **extra).status_code == 200
    return len(ctx.captured_queries)


def test_anonymous_goes_to_login(client, graph):
    for url in (
        reverse("dashboard:entities"),
        reverse("dashboard:entity", args=[graph["harbor"].pk]),
    ):
        response = client.get(url)
        assert response.status_code == 302 and response["Location"].startswith("/login/")


def test_list_orders_by_mentions_and_counts_memories(viewer_client, graph):
    response = viewer_client.get(reverse("dashboard:entities"))
    assert response.status_code == 200
    html = response.content.decode()
    assert "<html" in html
    assert html.index(">Harbor<") < html.index(">Alice<")  # 2 mentions before 1
    harbor = graph["harbor"]
    assert f'href="/entities/{harbor.pk}/"' in html
    assert "project" in html and "default" in html


def test_an_expired_memory_is_marked_on_the_entity_and_not_counted_as_live(viewer_client, graph):
    """Found by a QA pass: the entity's page showed an expired memory unmarked, and the list
    counted it among the memories mentioning the entity."""
    from datetime import timedelta

    from memory import writes

    expired = graph["memories"][1]
    writes.modify(
        expired.id,
        {"expires_at": timezone.now() - timedelta(days=1)},
        actor=AGENT,
        reason="over",
    )
    harbor = graph["harbor"]
    page = viewer_client.get(reverse("dashboard:entity", args=[harbor.pk])).content.decode()
    row = page[page.index(f"/memories/{expired.id}/") :]
    assert 'data-testid="expired"' in row[: row.index("</tr>")]
    assert Entity.objects.count() == 3
    listed = viewer_client.get(reverse("dashboard:entities")).context["page"]
    counts = {entity.canonical_name: entity.memory_count for entity in listed}
    assert counts == {"harbor": 1, "alice": 1, "bob": 0}


def test_list_htmx_fragment_and_search(viewer_client, graph, hx):
    response = viewer_client.get(reverse("dashboard:entities"), {"q": "ali"}, **hx)
    assert response.status_code == 200
    body = response.content.decode()
    assert "<html" not in body
    assert 'id="entity-list"' in body
    assert ">Alice<" in body and ">Harbor<" not in body
    empty = viewer_client.get(reverse("dashboard:entities"), {"q": "zzz"}, **hx).content.decode()
    assert "No entity matches" in empty


def test_hidden_characters_in_names_are_shown_on_the_entity_and_memory_pages(viewer_client):
    """Found by a QA pass: a right-to-left override in an entity's name reversed the text after
    it on the entity's page and on its memory's page."""
    memory = remember(
        "Ophelia joined the Harbor team.",
        actor=AGENT,
        triples=[Triple("Ophelia \u202eRTL", "works_on", "Harbor", "person", "project", 0.9)],
    ).memory
    ophelia = Entity.objects.get(name="Ophelia \u202eRTL")
    pages = [
        viewer_client.get(reverse("dashboard:entity", args=[ophelia.pk])).content.decode(),
        viewer_client.get(f"/memories/{memory.id}/").content.decode(),
    ]
    for html in pages:
        assert "\u202e" not in html and "hidden character U+202E" in html


def test_a_search_too_long_is_an_error_and_lists_no_entity(viewer_client, graph, hx):
    """Found by a QA pass: a name over 200 characters listed every entity, as if they matched."""
    body = viewer_client.get(reverse("dashboard:entities"), {"q": "Harbor" * 60}, **hx)
    text = body.content.decode()
    assert 'data-testid="search-error"' in text and "at most 200 characters" in text
    assert ">Harbor<" not in text and ">Alice<" not in text


def test_detail_shows_relations_and_memories(viewer_client, graph, hx):
    harbor = graph["harbor"]
    html = viewer_client.get(reverse("dashboard:entity", args=[harbor.pk])).content.decode()
    assert "<html" in html
    assert "works_on" in html
    assert f'href="/entities/{graph["alice"].pk}/"' in html  # incoming from Alice
    for memory in graph["memories"]:
        assert f'href="/memories/{memory.id}/"' in html
    assert "90%" in html

    alice = viewer_client.get(
        reverse("dashboard:entity", args=[graph["alice"].pk])
    ).content.decode()
    assert f'href="/entities/{harbor.pk}/"' in alice  # outgoing to Harbor

    fragment = viewer_client.get(reverse("dashboard:entity", args=[harbor.pk]), **hx)
    body = fragment.content.decode()
    assert fragment.status_code == 200 and "<html" not in body
    assert 'id="entity-memories"' in body


def test_detail_says_how_many_memories_stated_each_relation(viewer_client, graph):
    remember(
        "Alice still works on Harbor.",
        actor=AGENT,
        triples=[Triple("Alice", "works_on", "Harbor", "person", "project", 0.9)],
    )
    html = viewer_client.get(reverse("dashboard:entity", args=[graph["alice"].pk])).content.decode()
    assert "Stated by" in html and "2 memories" in html
    html = viewer_client.get(
        reverse("dashboard:entity", args=[graph["harbor"].pk])
    ).content.decode()
    assert "2 memories" in html and "1 memory" in html  # Alice's twice, Bob's once


def test_detail_of_unknown_entity_is_404(viewer_client):
    assert viewer_client.get(reverse("dashboard:entity", args=[999])).status_code == 404


def test_entity_names_and_memory_content_are_escaped(viewer_client):
    memory = remember(
        "<script>alert(1)</script> mentions Evil",
        actor=AGENT,
        triples=[Triple("<b>Evil</b>", "is", "<i>bad</i>")],
    ).memory
    evil = Entity.objects.get(canonical_name="<b>evil</b>")
    listing = viewer_client.get(reverse("dashboard:entities")).content.decode()
    assert "<b>Evil</b>" not in listing and "&lt;b&gt;Evil&lt;/b&gt;" in listing
    detail = viewer_client.get(reverse("dashboard:entity", args=[evil.pk])).content.decode()
    assert "<script>alert(1)</script>" not in detail
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in detail
    assert "<i>bad</i>" not in detail
    assert f'href="/memories/{memory.id}/"' in detail


def _grow(n: int, hub: Entity, start: int) -> None:
    """n more entities, each related to the hub and mentioned by a memory of its own."""
    now = timezone.now()
    for i in range(start, start + n):
        other = Entity.objects.create(
            name=f"Thing {i}",
            canonical_name=f"thing {i}",
            mentions=i,
            created_at=now,
            updated_at=now,
        )
        Relation.objects.create(
            source=hub, target=other, relation_type="uses", created_at=now, updated_at=now
        )
        Relation.objects.create(
            source=other, target=hub, relation_type="part_of", created_at=now, updated_at=now
        )
        memory = remember(f"Memory about thing number {i}.", actor=AGENT, create_job=False).memory
        for entity in (hub, other):
            MemoryEntityMention.objects.create(
                memory=memory, entity=entity, mention_text=entity.name, created_at=now
            )


def test_query_counts_are_constant(viewer_client, hx):
    now = timezone.now()
    hub = Entity.objects.create(
        name="Hub", canonical_name="hub", mentions=0, created_at=now, updated_at=now
    )
    list_url = reverse("dashboard:entities")
    detail_url = reverse("dashboard:entity", args=[hub.pk])
    _grow(3, hub, 0)
    few = [
        _queries(viewer_client, list_url),
        _queries(viewer_client, list_url, **hx),
        _queries(viewer_client, detail_url),
        _queries(viewer_client, detail_url, **hx),
    ]
    _grow(27, hub, 3)
    assert Memory.objects.count() == 30
    many = [
        _queries(viewer_client, list_url),
        _queries(viewer_client, list_url, **hx),
        _queries(viewer_client, detail_url),
        _queries(viewer_client, detail_url, **hx),
    ]
    assert many == few
