"""Memory browser: list, search and filters, detail with the audit trail, reviewer actions."""

from __future__ import annotations

import pytest
from django.db import connection, transaction
from django.test.utils import CaptureQueriesContext
from django.utils import timezone
from django.utils.html import escape

from memory import writes
from memory.models import Memory, MemoryCold, MemoryHistory
from memory.writes import Actor, Triple
from pipeline.models import Proposal
from tests.aria_checks import assert_errors_described

pytestmark = pytest.mark.django_db

AGENT = Actor("x", "agent")
XSS = "<script>alert(1)</script><img src=x onerror=alert(2)>"


def remember(text, **kwargs):
    return writes.remember(text, actor=AGENT, **kwargs).memory


def state(memory_id):
    memory = Memory.objects.get(id=memory_id)
    return (
        memory.version,
        memory.pinned,
        memory.is_deleted,
        memory.content,
        MemoryHistory.objects.filter(memory_id=memory_id).count(),
        MemoryCold.objects.filter(memory_id=memory_id).count(),
    )


def detail_url(memory):
    return f"/memories/{memory.id}/"


def action_url(memory):
    return f"/memories/{memory.id}/action/"


# --- access ---------------------------------------------------------------------------------------


def test_anonymous_users_are_sent_to_login(client):
    memory = remember("Billing runs on Postgres 16")
    for response in (
        client.get("/memories/"),
        client.get(detail_url(memory)),
        client.post(action_url(memory), {"action": "pin"}),
    ):
        assert response.status_code == 302
        assert response["Location"].startswith("/login/")
    assert state(memory.id)[0] == 1


def test_a_viewer_can_read_but_every_action_is_forbidden_and_changes_nothing(viewer_client, hx):
    memory = remember("Billing runs on Postgres 16")
    assert viewer_client.get("/memories/").status_code == 200
    page = viewer_client.get(detail_url(memory))
    assert page.status_code == 200
    assert 'id="actions"' not in page.content.decode()
    before = state(memory.id)
    for data in (
        {"action": "pin", "reason": "x"},
        {"action": "unpin", "reason": "x"},
        {"action": "edit", "content": "Billing runs on MySQL", "reason": "x", "if_version": 1},
        {"action": "forget", "reason": "x", "force": "on"},
        {"action": "recover", "reason": "x"},
    ):
        assert viewer_client.post(action_url(memory), data).status_code == 403
        assert viewer_client.post(action_url(memory), data, **hx).status_code == 403
    assert state(memory.id) == before


def test_actions_are_post_only_and_unknown_ones_are_rejected(reviewer_client):
    memory = remember("Billing runs on Postgres 16")
    assert reviewer_client.get(action_url(memory)).status_code == 405
    assert reviewer_client.post(action_url(memory), {"action": "explode"}).status_code == 400
    assert reviewer_client.get("/memories/no-such-id/").status_code == 404


# --- list -----------------------------------------------------------------------------------------


def test_the_list_renders_as_a_page_and_as_a_results_fragment(viewer_client, hx):
    memory = remember("Billing runs on Postgres 16", who="cursor", agent_id="harbor")
    page = viewer_client.get("/memories/")
    body = page.content.decode()
    assert page.status_code == 200 and "<html" in body
    assert 'id="results"' in body and 'hx-push-url="true"' in body and "data-search" in body
    assert f'id="memory-{memory.id}" data-row data-open="1"' in body
    assert 'data-action="open"' in body and detail_url(memory) in body
    assert "cursor" in body and "harbor" in body and "v1" in body
    fragment = viewer_client.get("/memories/", **hx)
    text = fragment.content.decode()
    assert fragment.status_code == 200 and "<html" not in text
    assert text.lstrip().startswith('<section id="results"')
    assert "Billing runs on Postgres 16" in text
    assert fragment["Vary"] and "HX-Request" in fragment["Vary"]


def test_a_history_restore_request_gets_the_whole_page(viewer_client, hx):
    remember("Billing runs on Postgres 16")
    response = viewer_client.get("/memories/", HTTP_HX_HISTORY_RESTORE_REQUEST="true", **hx)
    assert "<html" in response.content.decode()


def test_newest_first_and_long_content_is_truncated(viewer_client):
    older = remember("An older memory about lunch " + "word " * 100)
    newer = remember("A newer memory about dinner")
    body = viewer_client.get("/memories/").content.decode()
    assert body.index(f"memory-{newer.id}") < body.index(f"memory-{older.id}")
    assert "word " * 100 not in body and "…" in body


def test_search_finds_by_keyword_and_shows_scores(viewer_client, hx):
    hit = remember("Billing runs on Postgres 16 since March")
    miss = remember("The team eats lunch at noon")
    other_agent = remember("Postgres backups run nightly", agent_id="ops")
    for i in range(8):  # BM25 needs a corpus: a term in most documents scores about zero
        remember(f"Unrelated note number {i} about lunch")
    body = viewer_client.get("/memories/", {"q": "postgres"}).content.decode()
    assert f"memory-{hit.id}" in body and f"memory-{other_agent.id}" in body
    assert f"memory-{miss.id}" not in body
    assert "Score" in body and '<mark class="q">Postgres</mark>' in body
    scoped = viewer_client.get("/memories/", {"q": "postgres", "agent": "ops"}).content.decode()
    assert f"memory-{other_agent.id}" in scoped and f"memory-{hit.id}" not in scoped
    fragment = viewer_client.get("/memories/", {"q": "postgres"}, **hx).content.decode()
    assert "<html" not in fragment and f"memory-{hit.id}" in fragment


def test_a_search_filters_inside_itself_and_says_when_it_shows_only_the_best(
    viewer_client, monkeypatch
):
    """Found by a QA pass: the page filtered the search's best 50 afterwards (2 of 9 procedural
    matches shown) and said nothing about the matches past them."""
    from dashboard.views import memories as memory_views

    monkeypatch.setattr(memory_views, "SEARCH_K", 3)
    facts = [remember(f"Postgres {i} on Postgres") for i in range(5)]  # ranked first
    steps = [
        remember(f"Step {i}: restart Postgres after the maintenance window", type="procedural")
        for i in range(2)
    ]
    for i in range(8):
        remember(f"Unrelated note number {i} about lunch")
    body = viewer_client.get("/memories/", {"q": "postgres", "type": "procedural"}).content.decode()
    assert all(f"memory-{step.id}" in body for step in steps)
    assert not any(f"memory-{fact.id}" in body for fact in facts)
    capped = viewer_client.get("/memories/", {"q": "postgres billing"}).content.decode()
    assert "Showing the best 3 matches" in capped
    # Not beside an empty list: a search's state other than live keeps no match (a QA pass).
    expired = viewer_client.get("/memories/", {"q": "postgres billing", "deleted": "expired"})
    assert "Showing the best" not in expired.content.decode()
    assert "Search looks at live memories only" in expired.content.decode()
    # The agents' feedback slice too (second review): a step reported as contradicted is found.
    from memory.feedback import record_feedback

    record_feedback(steps[1].id, actor=Actor("agent-one", "agent"), verdict="contradicted")
    params = {"q": "postgres", "feedback": "contradicted"}
    reported = viewer_client.get("/memories/", params).content.decode()
    assert f"memory-{steps[1].id}" in reported and f"memory-{steps[0].id}" not in reported


def test_a_search_text_too_long_is_an_error_next_to_the_box_and_lists_nothing(viewer_client):
    """Found by a QA pass: a query over the limit was dropped, and the page listed every memory
    under the query still in the box, as if they matched."""
    memory = remember("Billing runs on Postgres 16")
    body = viewer_client.get("/memories/", {"q": "postgres " * 60}).content.decode()
    assert 'data-testid="search-error"' in body and 'aria-describedby="mb-q-error"' in body
    assert "at most 500 characters" in body and f"memory-{memory.id}" not in body
    nul = viewer_client.get("/memories/", {"q": "post\x00gres"}).content.decode()
    assert "Null characters are not allowed" in nul and "at most" not in nul
    assert 'maxlength="500"' in viewer_client.get("/memories/").content.decode()


def test_hostile_search_text_never_breaks_the_page(viewer_client):
    remember("Billing runs on Postgres 16")
    for q in ('billing: "postgres', "NEAR(a b)", "***", "AND OR NOT"):
        assert viewer_client.get("/memories/", {"q": q}).status_code == 200


def test_filters_deleted_derived_pinned_and_agent(viewer_client):
    raw = remember("Raw note: Priya maintains billing-api and prefers squash merges")
    derived = remember("Priya prefers squash merges", source_type="pipeline-v2", source_id=raw.id)
    pinned = remember("Harbor is the deployment dashboard", pinned=True)
    gone = remember("The office closes at six")
    writes.forget(gone.id, actor=AGENT, reason="obsolete")
    ops = remember("Backups run nightly", agent_id="ops")

    def ids(**params):
        body = viewer_client.get("/memories/", params).content.decode()
        return {m.id for m in (raw, derived, pinned, gone, ops) if f"memory-{m.id}" in body}

    assert ids() == {raw.id, derived.id, pinned.id, ops.id}
    assert ids(deleted="deleted") == {gone.id}
    assert ids(deleted="all") == {raw.id, derived.id, pinned.id, gone.id, ops.id}
    assert ids(origin="derived") == {derived.id}
    assert ids(origin="raw") == {raw.id, pinned.id, ops.id}
    assert ids(pinned="yes") == {pinned.id}
    assert ids(pinned="no") == {raw.id, derived.id, ops.id}
    assert ids(agent="ops") == {ops.id}
    assert ids(who="x") == {raw.id, derived.id, pinned.id, ops.id}
    assert ids(who="nobody") == set()
    assert ids(type="fact", agent="default", pinned="no") == {raw.id, derived.id}
    assert ids(pinned="maybe", deleted="bogus") == {raw.id, derived.id, pinned.id, ops.id}


def test_the_tag_filter_lists_and_searches_only_memories_carrying_that_tag(viewer_client):
    """The API and MCP filtered by tag and the page could not; a tag on a memory's page links to
    the list of its agent's memories with that tag."""
    release = remember("Postgres upgrade planned for the release train", tags=["release", "db"])
    other = remember("Postgres upgrade checklist lives in the wiki", tags=["db"])
    lookalike = remember("Postgres notes for the release-train team", tags=["release-train"])
    untagged = remember("Postgres runs the billing database")

    def ids(**params):
        body = viewer_client.get("/memories/", params).content.decode()
        found = (release, other, lookalike, untagged)
        return {m.id for m in found if f"memory-{m.id}" in body}

    assert ids(tag="release") == {release.id}  # exactly that tag, not one it begins
    assert ids(tag="db") == {release.id, other.id}
    assert ids(tag="db", q="postgres upgrade") == {release.id, other.id}
    assert ids(tag="release", q="release train") == {release.id}  # inside the search too
    assert ids(tag="nothing-carries-this") == set()
    # Exactly, on both engines (a QA pass: SQLite ignored the case of A-Z, PostgreSQL did not).
    umlaut = remember("Postgres notes for the Munich office", tags=["Ümlaut", "DB2"])
    body = viewer_client.get("/memories/", {"tag": "Ümlaut"}).content.decode()
    assert f"memory-{umlaut.id}" in body
    for other_case in ("ümlaut", "db2", "RELEASE"):
        body = viewer_client.get("/memories/", {"tag": other_case}).content.decode()
        assert f"memory-{umlaut.id}" not in body and f"memory-{release.id}" not in body
    ignored = ids(tag="x" * 101)
    assert ignored == {release.id, other.id, lookalike.id, untagged.id}  # ignored
    page = viewer_client.get(detail_url(release)).content.decode()
    assert '/memories/?tag=release&amp;agent=default"' in page
    assert 'id="mb-tag"' in viewer_client.get("/memories/").content.decode()


def test_pagination_keeps_the_filters(viewer_client, hx):
    for i in range(55):
        remember(f"Note number {i} about the release train", agent_id="ops")
    body = viewer_client.get("/memories/", {"agent": "ops"}).content.decode()
    assert "Page 1 of 2" in body and "?agent=ops&amp;page=2" in body
    second = viewer_client.get("/memories/", {"agent": "ops", "page": 2}, **hx).content.decode()
    assert "Page 2 of 2" in second and second.count("data-row") == 5


# --- untrusted content ----------------------------------------------------------------------------


def test_hostile_content_is_escaped_on_list_and_detail(viewer_client, hx):
    memory = remember(XSS)
    for i in range(8):
        remember(f"Unrelated note number {i} about lunch")
    for response in (
        viewer_client.get("/memories/"),
        viewer_client.get("/memories/", {"q": "script alert"}),
        viewer_client.get(detail_url(memory)),
        viewer_client.get(detail_url(memory), **hx),
    ):
        body = response.content.decode()
        assert "&lt;script&gt;alert(1)&lt;/script&gt;" in body
        assert "<script>alert(1)" not in body and "<img src=x" not in body


def test_hidden_characters_are_shown_as_visible_markers(viewer_client):
    memory = remember("Deploy\u200bon Fridays is fine")
    for response in (viewer_client.get("/memories/"), viewer_client.get(detail_url(memory))):
        body = response.content.decode()
        assert 'class="hidden-char"' in body and ">ZWSP<" in body


def test_a_right_to_left_override_in_an_audits_details_is_shown_not_obeyed(viewer_client):
    """Found by a QA pass: the timeline printed a fact's text from an audit's metadata as it
    was, so "\u202e9876-5432" read backwards (as 2345-6789) and turned the fields after it."""
    memory = remember("Frank pays the vendor invoices")
    MemoryHistory.objects.create(
        memory=memory,
        event="reviewed",
        changed_by="rita",
        actor_type="operator",
        reason="approved",
        metadata={"fact": {"content": "pays via account \u202e9876-5432", "type": "fact"}},
        created_at=timezone.now(),
    )
    body = viewer_client.get(detail_url(memory)).content.decode()
    assert "\u202e" not in body and 'title="hidden character U+202E"' in body


def test_a_right_to_left_override_in_a_lineage_outcome_an_actor_or_a_tag_is_shown_not_obeyed(
    viewer_client,
):
    """Found by a QA pass: a rejection's note ("ok \u202eevil" read "ok live"), a reviewer's
    name and a tag were printed as they were on the memory page."""
    raw, _, proposal = _raw_with_pipeline_trail()
    Proposal.objects.filter(id=proposal.id).update(
        status="rejected",
        created_memory=None,
        decided_by="ri\u202eta",
        decided_at=timezone.now(),
        review_note="ok \u202eevil",
    )
    Memory.objects.filter(id=raw.id).update(tags=["rtl\u202eevil"])
    body = viewer_client.get(detail_url(raw)).content.decode()
    assert "\u202e" not in body
    assert body.count('title="hidden character U+202E"') >= 3  # the note, the name, the tag


# --- detail ---------------------------------------------------------------------------------------


def _raw_with_pipeline_trail():
    raw = remember(
        "Priya maintains billing-api and prefers squash merges",
        triples=[Triple("Priya", "maintains", "billing-api", "person", "service")],
    )
    fact = remember("Priya prefers squash merges", source_type="pipeline-v2", source_id=raw.id)
    now = timezone.now()
    proposal = Proposal.objects.create(
        job=raw.jobs.first(),
        source_memory=raw,
        action="add",
        fact_content="Priya prefers squash merges",
        fact_confidence=0.9,
        confidence=0.9,
        reason="new fact",
        status="applied",
        created_memory=fact,
        model="offline",
        mode="controlled-write",
        created_at=now,
        updated_at=now,
    )
    with transaction.atomic():
        writes.audit(
            raw.id,
            "none",
            actor=Actor("pipeline", "pipeline"),
            reason="decision recorded",
            metadata={"proposalId": proposal.id, "createdMemoryId": fact.id, "shadow": False},
        )
    return raw, fact, proposal


def test_the_detail_shows_metadata_timeline_provenance_entities_and_proposals(viewer_client, hx):
    raw, fact, proposal = _raw_with_pipeline_trail()
    writes.modify(
        raw.id,
        {"content": "Priya maintains billing-api and prefers rebase merges"},
        actor=Actor("rita"),
        reason="she changed her mind",
    )
    body = viewer_client.get(detail_url(raw)).content.decode()
    assert raw.id in body and "<html" in body
    assert "she changed her mind" in body and "<del>squash</del>" in body
    assert "<ins>rebase</ins>" in body
    assert f'href="/proposals/{proposal.id}/"' in body
    assert f'href="/memories/{fact.id}/"' in body
    assert "Facts derived from it" in body
    assert "/entities/" in body and "Priya" in body and "billing-api" in body
    assert "from this raw memory" in body
    assert "Cold-tier snapshots" in body and "edited" in body
    assert body.index(">created<") < body.index(">none<") < body.index(">updated<")
    fact_page = viewer_client.get(detail_url(fact)).content.decode()
    assert "Raw source" in fact_page and f'href="/memories/{raw.id}/"' in fact_page
    assert "created this" in fact_page
    fragment = viewer_client.get(detail_url(raw), **hx).content.decode()
    assert "<html" not in fragment and fragment.lstrip().startswith('<div id="memory-main"')


def test_reviewers_see_the_action_forms_with_the_current_version(reviewer_client):
    memory = remember("Billing runs on Postgres 16", pinned=True)
    body = reviewer_client.get(detail_url(memory)).content.decode()
    assert 'id="actions"' in body and 'name="if_version" value="1"' in body
    assert "Unpin" in body and 'name="force"' in body


# --- actions --------------------------------------------------------------------------------------


def test_a_reviewer_pins_and_unpins_with_history(reviewer_client, hx):
    memory = remember("Billing runs on Postgres 16")
    response = reviewer_client.post(action_url(memory), {"action": "pin"}, follow=True)
    assert response.redirect_chain[-1][0] == detail_url(memory)
    assert "Pinned (now version 2)." in response.content.decode()
    assert Memory.objects.get(id=memory.id).pinned
    row = MemoryHistory.objects.filter(memory_id=memory.id, event="updated").get()
    assert (row.changed_by, row.actor_type) == ("rita", "operator")
    assert row.reason == "pinned from the memory browser"
    fragment = reviewer_client.post(
        action_url(memory), {"action": "unpin", "reason": "not essential"}, **hx
    )
    text = fragment.content.decode()
    assert fragment.status_code == 200 and "<html" not in text
    assert 'id="timeline"' in text and 'id="actions"' in text and "not essential" in text
    assert "Unpinned (now version 3)." in text and "toast" in fragment["HX-Trigger"]
    assert not Memory.objects.get(id=memory.id).pinned


def test_a_reviewer_edits_content_with_a_reason(reviewer_client, drain_queue):
    memory = remember("Billing runs on Postgres 16")
    response = reviewer_client.post(
        action_url(memory),
        {
            "action": "edit",
            "content": "Billing runs on Postgres 17",
            "reason": "upgraded",
            "if_version": 1,
        },
    )
    assert response.status_code == 302
    memory.refresh_from_db()
    assert (memory.content, memory.version, memory.updated_by) == (
        "Billing runs on Postgres 17",
        2,
        "rita",
    )
    # The reviewer never waits on the embedding server: the vector is queued after the commit.
    assert not memory.embedding_model
    assert drain_queue() == 1
    memory.refresh_from_db()
    assert memory.embedding_model
    row = MemoryHistory.objects.get(memory_id=memory.id, event="updated")
    assert (row.reason, row.old_content, row.new_content) == (
        "upgraded",
        "Billing runs on Postgres 16",
        "Billing runs on Postgres 17",
    )
    assert MemoryCold.objects.get(memory_id=memory.id).content == "Billing runs on Postgres 16"
    page = reviewer_client.get(detail_url(memory)).content.decode()
    assert "<del>16</del> <ins>17</ins>" in page  # a space: never "1617"


def test_an_edit_embeds_the_stored_text_not_the_typed_one(
    reviewer_client, fake_ollama, drain_queue
):
    memory = remember("Billing runs on Postgres 16")
    typed = "  Billing   runs on\tPostgres 17  "
    response = reviewer_client.post(
        action_url(memory),
        {"action": "edit", "content": typed, "reason": "upgraded", "if_version": 1},
    )
    assert response.status_code == 302
    memory.refresh_from_db()
    assert memory.content == "Billing runs on Postgres 17"
    drain_queue()  # the queued embedding, as a queue worker runs it
    memory.refresh_from_db()
    # The vector is stored under the content's hash: it must be the vector of that content.
    assert [call["input"] for call in fake_ollama.calls("/api/embed")] == [[memory.content]]
    assert memory.embedding_model == "nomic-embed-text"


def test_an_edit_by_htmx_updates_the_fragment_in_place(reviewer_client, hx):
    memory = remember("Billing runs on Postgres 16")
    response = reviewer_client.post(
        action_url(memory),
        {"action": "edit", "content": "Billing runs on MySQL", "reason": "moved", "if_version": 1},
        **hx,
    )
    text = response.content.decode()
    assert response.status_code == 200 and "<html" not in text
    assert "Saved as version 2" in text and 'name="if_version" value="2"' in text
    assert "<del>Postgres 16</del> <ins>MySQL</ins>" in text


def test_an_edit_without_a_reason_shows_the_error_and_writes_nothing(reviewer_client, hx):
    memory = remember("Billing runs on Postgres 16")
    before = state(memory.id)
    data = {"action": "edit", "content": "Billing runs on MySQL", "if_version": 1}
    for extra in ({}, hx):
        response = reviewer_client.post(action_url(memory), data, **extra)
        body = response.content.decode()
        assert "Give a reason: it is kept in the audit trail." in body
        assert "Billing runs on MySQL" in body  # the reviewer's text is kept
    assert response.status_code == 200
    assert state(memory.id) == before


def test_an_edit_that_changes_nothing_is_reported_on_the_content(reviewer_client, hx):
    memory = remember("Billing runs on Postgres 16")
    before = state(memory.id)
    data = {"action": "edit", "content": " Billing  runs on Postgres 16 ", "reason": "x"}
    body = reviewer_client.post(action_url(memory), data, **hx).content.decode()
    assert "Nothing changed" in body and state(memory.id) == before


def test_a_stale_version_shows_the_conflict_and_writes_nothing(reviewer_client, hx):
    memory = remember("Billing runs on Postgres 16")
    writes.modify(memory.id, {"pinned": True}, actor=AGENT, reason="someone else")
    before = state(memory.id)
    data = {"action": "edit", "content": "Billing on MySQL", "reason": "moved", "if_version": 1}
    response = reviewer_client.post(action_url(memory), data)
    body = response.content.decode()
    assert response.status_code == 400
    assert "This memory changed since you opened it (now version 2)" in body
    assert "Billing on MySQL" in body and 'name="if_version" value="2"' in body
    fragment = reviewer_client.post(action_url(memory), data, **hx).content.decode()
    assert "This memory changed since you opened it (now version 2)" in fragment
    assert state(memory.id) == before
    forget = {"action": "forget", "reason": "old", "force": "on", "if_version": 1}
    assert "now version 2" in reviewer_client.post(action_url(memory), forget).content.decode()
    assert state(memory.id) == before


def test_an_edit_refused_because_the_memory_was_forgotten_meanwhile_gives_the_text_back(
    reviewer_client, hx
):
    """Before, the page showed the store's "memory is deleted; recover it first" and the typed
    text was gone (found by a day of QA)."""
    memory = remember("Billing runs on Postgres 16")
    typed = "Billing moved to <Postgres 17> in March"
    writes.forget(memory.id, actor=AGENT, reason="someone else")
    data = {"action": "edit", "content": typed, "reason": "upgrade", "if_version": 2}
    body = reviewer_client.post(action_url(memory), data, **hx).content.decode()
    assert "This memory was forgotten since you opened it: recover it first." in body
    assert 'data-testid="kept-edit"' in body and f">{escape(typed)}</textarea>" in body
    assert 'value="recover"' in body


def test_an_edit_refused_because_the_memory_was_purged_meanwhile_says_so_and_gives_it_back(
    reviewer_client, hx
):
    from django.utils import timezone

    memory = remember("Billing runs on Postgres 16")
    typed = "Billing moved to Postgres 17 in March"
    Memory.objects.filter(id=memory.id).update(
        is_deleted=True, purged_at=timezone.now(), content="[purged]"
    )
    data = {"action": "edit", "content": typed, "reason": "upgrade", "if_version": 1}
    body = reviewer_client.post(action_url(memory), data, **hx).content.decode()
    assert "This memory was erased since you opened it: its text is gone for good." in body
    assert "recover it first" not in body  # it cannot be recovered
    assert 'data-testid="kept-edit"' in body and f">{typed}</textarea>" in body


def test_an_edit_to_another_memorys_text_links_to_that_memory(reviewer_client, hx):
    other = remember("Billing runs on Postgres 16")
    memory = remember("Billing runs on MySQL 8")
    data = {"action": "edit", "content": other.content, "reason": "same", "if_version": 1}
    body = reviewer_client.post(action_url(memory), data, **hx).content.decode()
    assert "Another active memory already has this content." in body
    assert (
        f'<a href="/memories/{other.id}/" data-testid="duplicate-of">Open that memory</a>' in body
    )


def test_a_recover_refused_as_a_duplicate_links_to_the_memory_with_the_text(reviewer_client, hx):
    """Found by a QA pass: the refusal named no memory a reviewer could open."""
    memory = remember("Billing runs on Postgres 16")
    writes.forget(memory.id, actor=AGENT, reason="gone")
    again = remember("Billing runs on Postgres 16")
    data = {"action": "recover", "reason": "still true", "if_version": 2}
    body = reviewer_client.post(action_url(memory), data, **hx).content.decode()
    assert "Another active memory already has this content." in body
    assert (
        f'<a href="/memories/{again.id}/" data-testid="duplicate-of">Open that memory</a>' in body
    )
    assert Memory.objects.get(id=memory.id).is_deleted


def test_forgetting_a_pinned_memory_needs_force_then_recover_brings_it_back(reviewer_client, hx):
    memory = remember("Billing runs on Postgres 16", pinned=True)
    before = state(memory.id)
    data = {"action": "forget", "reason": "obsolete", "if_version": 1}
    body = reviewer_client.post(action_url(memory), data).content.decode()
    assert "This memory is pinned: tick “force” to forget it anyway." in body
    assert state(memory.id) == before
    no_reason = reviewer_client.post(action_url(memory), {"action": "forget", "force": "on"})
    assert "Give a reason" in no_reason.content.decode() and state(memory.id) == before

    response = reviewer_client.post(action_url(memory), {**data, "force": "on"}, **hx)
    text = response.content.decode()
    assert "Forgotten" in text and 'value="recover"' in text and "<html" not in text
    memory.refresh_from_db()
    assert memory.is_deleted and memory.version == 2
    row = MemoryHistory.objects.get(memory_id=memory.id, event="deleted")
    assert (row.reason, row.changed_by, row.metadata["force"]) == ("obsolete", "rita", True)

    response = reviewer_client.post(
        action_url(memory), {"action": "recover", "reason": "still true", "if_version": 2}
    )
    assert response.status_code == 302
    memory.refresh_from_db()
    assert not memory.is_deleted and memory.version == 3
    assert MemoryHistory.objects.get(memory_id=memory.id, event="recovered").reason == "still true"


def test_recover_needs_a_reason_and_a_deleted_memory(reviewer_client):
    memory = remember("Billing runs on Postgres 16")
    body = reviewer_client.post(
        action_url(memory), {"action": "recover", "reason": "why not"}
    ).content.decode()
    assert "memory is not deleted" in body
    writes.forget(memory.id, actor=AGENT, reason="gone")
    before = state(memory.id)
    body = reviewer_client.post(action_url(memory), {"action": "recover"}).content.decode()
    assert "Give a reason" in body and state(memory.id) == before
    assert_errors_described(body)


# --- query counts ---------------------------------------------------------------------------------


def _count_queries(client, url, **params):
    client.get(url, **params)  # warm up: session, config row
    with CaptureQueriesContext(connection) as queries:
        response = client.get(url, **params)
    assert response.status_code == 200
    return len(queries)


def test_the_list_uses_a_fixed_number_of_queries(viewer_client, hx):
    for i in range(3):
        remember(f"Memory number {i} about the release train", pinned=i == 0)
    small = _count_queries(viewer_client, "/memories/")
    small_hx = _count_queries(viewer_client, "/memories/", **hx)
    for i in range(3, 30):
        remember(f"Memory number {i} about the release train", agent_id=f"agent-{i % 2}")
    assert Memory.objects.count() == 30
    assert _count_queries(viewer_client, "/memories/") == small
    assert _count_queries(viewer_client, "/memories/", **hx) == small_hx


def test_the_detail_uses_a_fixed_number_of_queries(reviewer_client, hx):
    raw, fact, _ = _raw_with_pipeline_trail()
    small = _count_queries(reviewer_client, detail_url(raw))
    small_hx = _count_queries(reviewer_client, detail_url(raw), **hx)
    for i in range(30):
        writes.modify(
            raw.id,
            {"content": f"Priya maintains billing-api, revision {i}"},
            actor=AGENT,
            reason=f"r{i}",
        )
        remember(f"Derived fact {i} about Priya", source_type="pipeline-v2", source_id=raw.id)
    assert MemoryHistory.objects.filter(memory_id=raw.id).count() > 30
    assert _count_queries(reviewer_client, detail_url(raw)) == small
    assert _count_queries(reviewer_client, detail_url(raw), **hx) == small_hx


def test_names_and_prompts_holding_a_right_to_left_override_show_it_and_do_not_obey_it(
    reviewer_client,
):
    """Found by a QA pass: an RLO in changedBy, who, why or an agent id reached the pages raw,
    where it reversed the "via <token>" that followed it."""
    from memory.writes import Actor, modify, remember

    sly = "cb \u202eRTL"
    memory = remember(
        "Kenji deploys billing-api on Fridays.",
        actor=Actor("agent-one", "agent"),
        who=sly,
        why=sly,
        agent_id="ops\u202e",
    ).memory
    modify(memory.id, {"tags": ["deploy"]}, actor=Actor(f"{sly} via rita-cli"), reason="tag it")
    page = reviewer_client.get(f"/memories/{memory.id}/").content.decode()
    assert "\u202e" not in page and page.count("hidden character U+202E") >= 4
