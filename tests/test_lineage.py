"""Lineage: a memory's story in plain words, from raw source to what happened since."""

from datetime import timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from dashboard import lineage
from dashboard.wording import short_id
from memory import writes
from memory.models import Memory
from memory.writes import Actor
from pipeline import review
from pipeline.llm.prompts import PROMPT_VERSION
from pipeline.models import Proposal
from pipeline.writes import review as review_writes
from tests.pipeline_support import ScriptedModel, decision, fact, raw, seed, set_mode

pytestmark = pytest.mark.django_db
RITA, ADA = Actor("rita", "operator"), Actor("ada", "operator")
MODEL = "offline-heuristic-v2"
TEXT = "Priya maintains the billing-api service. It runs on Postgres 14. Ok then."
# Enough unrelated rows that BM25 still scores the words a fact shares with one of them.
STORE = [
    "Priya maintains the ledger service for finance.",
    "The staging cluster lives in the eu-west-1 region",
    "Kenji reviews every pull request on Fridays",
    "Lunch orders go in the kitchen channel",
    "Design reviews happen on Wednesday afternoons",
    "The office closes early before public holidays",
    "Incident reports are due within two working days",
    "New laptops are ordered through the IT portal",
]


def kinds(steps):
    return [step.kind for step in steps]


def step(steps, kind):
    return next(s for s in steps if s.kind == kind)


def _waited(proposal, minutes):
    Proposal.objects.filter(id=proposal.id).update(
        created_at=timezone.now() - timedelta(minutes=minutes)
    )


@pytest.fixture
def approved(pipeline_run):
    """Shadow mode: rita approves fact 1 three minutes after it was proposed, rejects fact 2."""
    for text in STORE:  # candidates for the decision (enough rows for BM25 to score)
        seed(text)
    (source,) = pipeline_run(TEXT)
    first, second = Proposal.objects.filter(source_memory=source).order_by("position")
    _waited(first, 3)
    first = review.approve(first.id, RITA, note="matches the wiki")
    review.reject(second.id, RITA, reason="too vague")
    return source, first, Memory.objects.get(id=first.created_memory_id)


def test_a_derived_memory_tells_its_story_in_order(approved):
    source, proposal, memory = approved
    writes.modify(
        memory.id,
        {"content": "Priya maintains the billing-api and ledger services."},
        actor=ADA,
        reason="she took over the ledger",
    )
    steps = lineage.build(Memory.objects.get(id=memory.id))
    assert kinds(steps) == [
        "raw",
        "job",
        "fact",
        "candidates",
        "decision",
        "review",
        "applied",
        "updated",
        "superseded",
    ]
    raw_step = step(steps, "raw")
    assert raw_step.actor == "test-agent" and raw_step.quote == source.content
    assert "written by test-agent (agent)" in raw_step.text
    assert raw_step.links[0].href == f"/memories/{source.id}/"
    job = step(steps, "job")
    assert job.text.startswith(f"Extracted by {MODEL} (via offline) from that raw memory on ")
    assert "2 facts" in job.text and "1 extract" in job.text
    assert job.links[0].href == f"/jobs/{proposal.job_id}/"
    assert step(steps, "fact").quote == "Priya maintains the billing-api service."
    assert step(steps, "candidates").text.startswith("Hybrid search found")
    assert "closest scored" in step(steps, "candidates").text
    decided = step(steps, "decision")
    assert (
        decided.actor == MODEL and f"{MODEL} (prompt {PROMPT_VERSION}) decided ADD" in decided.text
    )
    assert "shadow mode" in decided.text
    assert decided.links[0].href == f"/proposals/{proposal.id}/"
    reviewed = step(steps, "review")
    assert reviewed.actor == "rita"
    assert reviewed.text == "Approved by rita 3 minutes later: “matches the wiki”"
    assert step(steps, "applied").text.startswith("Written to the store as this memory")
    assert (
        step(steps, "updated").actor == "ada"
        and "she took over the ledger" in step(steps, "updated").text
    )
    superseded = step(steps, "superseded")
    assert superseded.quote == "Priya maintains the billing-api service."
    assert len({s.anchor for s in steps}) == len(steps)  # every step can be linked to


def test_an_automatic_write_then_a_revert_and_its_undo(pipeline_run):
    set_mode("controlled-write")
    (source,) = pipeline_run("Kenji uses Grafana for dashboards. Ok then.")
    proposal = Proposal.objects.get(source_memory=source)
    assert proposal.decided_by == "pipeline-v2"
    review_writes.revert(proposal.id, reviewer=RITA, reason="Grafana was retired")
    review_writes.revert(proposal.id, reviewer=ADA, reason="it is back")
    steps = lineage.build(Memory.objects.get(id=proposal.created_memory_id))
    assert kinds(steps)[:7] == [
        "raw",
        "job",
        "fact",
        "candidates",
        "decision",
        "review",
        "applied",
    ]
    review_step = step(steps, "review")
    assert review_step.actor == "pipeline-v2" and review_step.label == "Automatic"
    assert "Applied automatically by pipeline-v2 in controlled-write mode" in review_step.text
    reverts = [s for s in steps if s.kind == "reverted"]
    assert [s.actor for s in reverts] == ["rita", "ada"]
    assert reverts[0].text.startswith("Reverted by rita: the ADD was undone")
    assert "Grafana was retired" in reverts[0].text
    assert reverts[1].text.startswith("ada undid the revert of the ADD")


def test_an_update_by_a_later_proposal_is_linked(fake_ollama):
    from pipeline.tasks import process_pending

    set_mode("full")
    ScriptedModel(fake_ollama, facts=[fact("The billing service runs on Postgres 14.")])
    first = raw("The billing service runs on Postgres 14. From the wiki.").memory
    process_pending()
    derived = Memory.objects.get(source_id=first.id)
    newer = "The billing service runs on Postgres 16."
    ScriptedModel(
        fake_ollama,
        facts=[fact(newer)],
        decisions={newer: decision("update", derived, reason="upgraded")},
    )
    second = raw("The billing service runs on Postgres 16. Upgraded last night.").memory
    process_pending()
    update = Proposal.objects.get(source_memory=second)
    assert update.status == "applied" and update.updated_memory_id == derived.id
    steps = lineage.build(Memory.objects.get(id=derived.id))
    updated = step(steps, "updated")
    assert f"by proposal {short_id(update.id)}" in updated.text
    assert "applied automatically by pipeline-v2 in full mode" in updated.text
    assert {link.href for link in updated.links} >= {
        f"/proposals/{update.id}/",
        f"/memories/{second.id}/",
    }
    assert step(steps, "superseded").quote == "The billing service runs on Postgres 14."
    # The raw memory that caused it tells the same change from its side.
    fates = {s.fate for s in lineage.build(second) if s.kind == "fact"}
    assert fates == {"applied"}


def _pending_update_of_an_agents_memory(fake_ollama):
    """Controlled-write: an agent's memory and a raw memory's UPDATE of it, waiting for review."""
    from pipeline.tasks import process_pending

    set_mode("controlled-write")
    target = writes.remember(
        "The worker pool has 4 threads.", actor=Actor("agent-one", "agent"), create_job=False
    ).memory
    newer = "The worker pool has 6 threads."
    ScriptedModel(fake_ollama, facts=[fact(newer)], decisions={newer: decision("update", target)})
    raw("The worker pool has 6 threads now.")
    process_pending()
    return target, Proposal.objects.get(target_memory=target, action="update")


def test_an_update_a_reviewer_edited_says_so_and_its_reverts_undo_says_what_came_back(
    fake_ollama,
):
    """Found by a QA pass: the target's page told a reviewer's text as the raw memory's UPDATE,
    and the undo of its revert was labelled "reverted", saying "the previous text is back"."""
    target, proposal = _pending_update_of_an_agents_memory(fake_ollama)
    review.approve(proposal.id, RITA, content="The worker pool has 6 threads (8 at peak).")
    review_writes.revert(proposal.id, reviewer=RITA, reason="wrong")
    review_writes.revert(proposal.id, reviewer=ADA, reason="it was right")
    steps = lineage.build(Memory.objects.get(id=target.id))
    updated = [s for s in steps if s.kind == "updated"]
    assert "(text edited by the reviewer)." in updated[0].text
    undo = [s for s in steps if s.kind == "reverted"][-1]
    assert undo.label == "Revert undone"
    assert "the text it applied is back" in undo.text and "previous" not in undo.text


def test_a_decision_undone_and_made_again_names_each_reviewer_at_its_own_version(fake_ollama):
    """Found by a QA pass: after rita's approval was undone and ada approved again, the target's
    page said both versions were "approved by ada", quoting ada's note for rita's step."""
    from pipeline.writes.revert import undo_decision

    target, proposal = _pending_update_of_an_agents_memory(fake_ollama)
    review.approve(proposal.id, RITA, note="matches the runbook")
    undo_decision(proposal.id, reviewer=RITA, reason="too early")
    review.approve(proposal.id, ADA)
    updates = [s for s in lineage.build(Memory.objects.get(id=target.id)) if s.kind == "updated"]
    assert [s.actor for s in updates] == ["rita", "ada"]
    assert "approved by rita" in updates[0].text and "“matches the runbook”" in updates[0].text
    assert "approved by ada" in updates[1].text
    # ada gave no note: the write's own reason ("approved: <the model's reason>") is not one.
    assert "“" not in updates[1].text and "rita" not in updates[1].text


def test_a_raw_memory_lists_the_facts_derived_and_what_became_of_each(approved, pipeline_run):
    source, proposal, memory = approved
    steps = lineage.build(Memory.objects.get(id=source.id))
    assert kinds(steps) == ["raw", "job", "fact", "fact", "triples"]
    assert step(steps, "raw").actor == "test-agent"
    assert step(steps, "job").text.startswith(f"Extracted by {MODEL} (via offline)")
    facts = [s for s in steps if s.kind == "fact"]
    assert [s.fate for s in facts] == ["applied", "rejected"]
    assert facts[0].outcome.startswith(
        f"Became memory {short_id(memory.id)}, approved by rita 3 minutes"
    )
    assert "“matches the wiki”" in facts[0].outcome
    assert {link.href for link in facts[0].links} == {
        f"/proposals/{proposal.id}/",
        f"/memories/{memory.id}/",
    }
    assert facts[1].outcome.startswith("Rejected by rita") and "too vague" in facts[1].outcome
    assert "1 entity triple for the graph: 1 pending" in step(steps, "triples").text
    # The same rejected fact from a later raw memory: while the first raw memory is live it
    # already says it word for word (recorded, nothing to write); once no live memory says it,
    # the reviewer's rejection suppresses it. A new fact waits for review either way.
    (again,) = pipeline_run("It runs on Postgres 14. Lena prefers short standups on Monday.")
    assert fates_of(again) == {
        "It runs on Postgres 14.": "recorded",
        "Lena prefers short standups on Monday.": "pending",
    }
    for earlier in (source, again):
        writes.forget(earlier.id, actor=ADA, reason="superseded")
    (third,) = pipeline_run("Lena prefers short standups on Monday. It runs on Postgres 14.")
    assert fates_of(third) == {
        "It runs on Postgres 14.": "suppressed",
        "Lena prefers short standups on Monday.": "pending",
    }


def fates_of(raw_memory) -> dict[str, str]:
    return {s.quote: s.fate for s in lineage.build(raw_memory) if s.kind == "fact"}


def test_proposals_that_target_a_memory_are_in_its_story(fake_ollama):
    from pipeline.tasks import process_pending

    target = [seed(text) for text in STORE][1]
    gone = "The staging cluster was shut down."
    ScriptedModel(fake_ollama, facts=[fact(gone)], decisions={gone: decision("delete", target)})
    later = raw("The staging cluster was shut down. Announced today.").memory
    process_pending()  # shadow: the DELETE waits for review
    steps = lineage.build(Memory.objects.get(id=target.id))
    targeted = step(steps, "targeted")
    assert targeted.fate == "pending" and "proposed to DELETE this memory" in targeted.text
    assert f"/memories/{later.id}/" in {link.href for link in targeted.links}


def test_the_page_shows_the_lineage_escaped_and_linkable(viewer_client, pipeline_run, hx):
    (source,) = pipeline_run("Kenji likes <script>alert(1)</script> dashboards a lot. Ok then.")
    proposal = Proposal.objects.get(source_memory=source)
    review.approve(proposal.id, RITA, note="<img src=x onerror=alert(2)>")
    memory = Memory.objects.get(id=Proposal.objects.get(id=proposal.id).created_memory_id)
    for url in (f"/memories/{memory.id}/", f"/memories/{source.id}/"):
        body = viewer_client.get(url).content.decode()
        assert 'id="lineage"' in body and 'id="lin-raw"' in body
        assert "<script>alert(1)</script>" not in body and "&lt;script&gt;alert(1)" in body
        assert "<img src=x" not in body and "&lt;img src=x onerror=alert(2)&gt;" in body
        assert f'href="/proposals/{proposal.id}/"' in body
    body = viewer_client.get(f"/memories/{memory.id}/").content.decode()
    assert f'id="lin-review-{short_id(proposal.id)}"' in body and 'href="#lin-review-' in body
    fragment = viewer_client.get(f"/memories/{memory.id}/", **hx).content.decode()
    assert 'id="lineage"' in fragment


def _count(client, url, **extra):
    client.get(url, **extra)  # warm up: session, config row
    with CaptureQueriesContext(connection) as queries:
        assert client.get(url, **extra).status_code == 200
    return len(queries)


def test_the_lineage_uses_a_fixed_number_of_queries(viewer_client, approved):
    source, _, memory = approved
    for i in range(3):
        writes.modify(
            memory.id,
            {"content": f"Priya maintains billing-api, take {i}."},
            actor=ADA,
            reason=f"r{i}",
        )
        writes.modify(source.id, {"content": f"{TEXT} Revision {i}."}, actor=ADA, reason=f"r{i}")
    derived_page, raw_page = (
        _count(viewer_client, f"/memories/{memory.id}/"),
        _count(viewer_client, f"/memories/{source.id}/"),
    )
    with CaptureQueriesContext(connection) as few:
        lineage.build(Memory.objects.get(id=memory.id))
    for i in range(3, 30):
        writes.modify(
            memory.id,
            {"content": f"Priya maintains billing-api, take {i}."},
            actor=ADA,
            reason=f"r{i}",
        )
        writes.modify(source.id, {"content": f"{TEXT} Revision {i}."}, actor=ADA, reason=f"r{i}")
    steps = lineage.build(Memory.objects.get(id=memory.id))
    assert len([s for s in steps if s.kind == "updated"]) == 30
    with CaptureQueriesContext(connection) as many:
        lineage.build(Memory.objects.get(id=memory.id))
    assert len(many) == len(few)
    assert _count(viewer_client, f"/memories/{memory.id}/") == derived_page
    assert _count(viewer_client, f"/memories/{source.id}/") == raw_page


def test_words_for_times():
    start = timezone.now()
    assert lineage.later_text(start, start + timedelta(minutes=3, seconds=10)) == "3 minutes later"
    assert lineage.later_text(start, start + timedelta(minutes=1)) == "1 minute later"
    assert lineage.later_text(start, start) == "within a second"
    assert lineage.later_text(start, start + timedelta(days=3)) == "3 days later"
    assert lineage.when_text(start.replace(year=2026, month=11, day=29, hour=9, minute=5)) == (
        "29 Nov 2026 at 09:05 UTC"
    )
