"""pipeline.purge: what each scope names, the dry run against the purge itself, copies found in
places no link leads to (scrubbed, then verified), a purge that cannot verify (failed, never
done), the vectors' copies (the shared matrix's rows zeroed) and a job running meanwhile."""

from __future__ import annotations

import hashlib

import numpy as np
import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from memory import matrix, vectors, writes
from memory.erasure import PURGED, Texts
from memory.models import Embedding, Job, JobStatus, Memory
from memory.vectors import Vector
from memory.writes import Actor, Refused
from pipeline import purge, review
from pipeline.llm.clients import CallRecord
from pipeline.models import Approval, EvalRun, LlmCall, Proposal, ProposalStatus
from pipeline.purge import Request, Scope
from pipeline.tasks import compute, process_pending
from pipeline.writes import purge as purge_writes
from pipeline.writes import review as review_writes
from pipeline.writes.jobs import LiveCalls, claim_job
from pipeline.writes.record import record_job
from tests.pipeline_support import (
    RAW_TEXT,
    ScriptedModel,
    configure,
    decision,
    fact,
    four_decisions,
    raw,
    seed_store,
    set_mode,
)

ADMIN = Actor("ada", "operator")
WRITER = Actor("agent-one", "agent")
SECRET = "the staging DB password is hunter2-prod"

pytestmark = pytest.mark.django_db(transaction=True)  # PostgreSQL vacuums after the commit


def remember(text: str, **kwargs) -> Memory:
    return writes.remember(text, actor=WRITER, create_job=False, **kwargs).memory


def an_update_waiting(fake_ollama) -> tuple[Memory, Memory, Proposal]:
    """(its target, its raw memory, the proposal) of an UPDATE a job proposed and a reviewer has
    not decided (controlled-write mode)."""
    set_mode("controlled-write")
    target = remember("The vault sits in the Hamburg office")
    update = "The vault sits in the Munich office"
    ScriptedModel(
        fake_ollama,
        facts=[fact("Priya owns the vault key ring"), fact(update)],
        decisions={update: decision("update", target)},
    )
    source = raw("Priya owns the vault key ring; the vault moved to Munich.").memory
    process_pending()
    pending = Proposal.objects.get(target_memory=target, status=ProposalStatus.PENDING)
    return target, source, pending


def test_lineage_names_the_derived_memories_and_those_its_updates_wrote(fake_ollama):
    target, source, pending = an_update_waiting(fake_ollama)
    review.approve(pending.id, ADMIN)
    derived = Memory.objects.get(source_id=source.id)
    named = purge.memory_ids_for(Request(Scope.LINEAGE, memory_id=source.id))
    assert sorted(named) == sorted([source.id, derived.id, target.id])
    assert purge.memory_ids_for(Request(Scope.MEMORY, memory_id=source.id)) == [source.id]


def test_a_raw_memory_purged_alone_names_the_derived_memories_it_leaves(
    fake_ollama, admin_client_role
):
    """A QA pass read "verified" as every sentence gone; its derived memories kept theirs."""
    target, source, pending = an_update_waiting(fake_ollama)
    review.approve(pending.id, ADMIN)
    derived = sorted(purge.lineage_of(source.id))
    request = Request(Scope.MEMORY, memory_id=source.id)
    preview = purge.purge(request, reason="asked", actor=ADMIN, dry_run=True)
    assert preview.derived_kept == derived and len(derived) == 2
    form = {"scope": "memory", "memory": source.id, "reason": "asked", "step": "preview"}
    shown = admin_client_role.post("/purge/", form).content.decode()
    assert 'data-testid="preview-derived-kept"' in shown and "2 memories derived" in shown
    receipt = purge.purge(request, reason="asked", actor=ADMIN)
    assert receipt.verified and receipt.as_json()["derivedKept"] == derived
    page = admin_client_role.get(f"/purge/receipts/{receipt.tombstone}/").content.decode()
    assert "2 memories derived from it stay" in page
    assert all(f'href="/memories/{pk}/"' in page for pk in derived)
    lineage = purge.purge(
        Request(Scope.LINEAGE, memory_id=derived[0]), reason="r", actor=ADMIN, dry_run=True
    )
    assert lineage.derived_kept == []


def test_the_dry_run_names_the_rows_the_purge_then_erases():
    memory = remember(SECRET)
    writes.modify(memory.id, {"content": SECRET + " (rotated monthly)"}, actor=ADMIN, reason="r")
    request = Request(Scope.MEMORY, memory_id=memory.id)
    preview = purge.purge(request, reason="leaked", actor=ADMIN, dry_run=True)
    done = purge.purge(request, reason="leaked", actor=ADMIN)
    assert preview.rows == done.rows == {"memories": 1, "memories_cold": 1, "memory_history": 2}
    assert done.verified and done.status == "done" and preview.status == "dry run"


def test_copies_no_link_leads_to_are_found_scrubbed_and_then_verified():
    """An evaluation set built from the store and another job's model call quote the memory:
    the verification finds them, they are scrubbed, the store is checked again."""
    memory = remember(SECRET)
    other = remember("Kenji rotates the staging credentials on Fridays.")
    job = Job.objects.create(memory=other, created_at=timezone.now(), updated_at=timezone.now())
    LlmCall.objects.create(
        job=job,
        kind="decide",
        provider="offline",
        model="m",
        prompt=f'Candidates:\n[1] "{SECRET}"\nNew fact: rotation',
        created_at=timezone.now(),
    )
    set_text = f'{{"fact": "{SECRET}"}}\n'
    run = EvalRun.objects.create(
        requested_by="rita",
        set_kind="reviewed",
        set_name="team",
        set_text=set_text,
        set_sha256=hashlib.sha256(set_text.encode()).hexdigest(),
        provider="offline",
        model="m",
        prompt_version="v1",
        created_at=timezone.now(),
    )
    receipt = purge.purge(Request(Scope.MEMORY, memory_id=memory.id), reason="leak", actor=ADMIN)
    assert receipt.verified and receipt.found == []
    assert receipt.rows["pipeline_llm_calls"] == 1 and receipt.rows["pipeline_eval_runs"] == 1
    # The receipt says the check found them and they were scrubbed (it said "nothing found").
    assert receipt.repaired == [
        {"where": "pipeline_llm_calls.prompt", "count": 1},
        {"where": "pipeline_eval_runs.set_text", "count": 1},
    ]
    assert receipt.as_json()["repaired"] == receipt.repaired
    call = LlmCall.objects.get(job=job)
    assert SECRET not in call.prompt and PURGED in call.prompt and "rotation" in call.prompt
    run.refresh_from_db()
    assert SECRET not in run.set_text
    assert run.set_sha256 == hashlib.sha256(run.set_text.encode()).hexdigest()


def test_a_kept_memory_holding_the_same_text_makes_the_purge_fail_and_says_where():
    memory = remember(SECRET)
    remember(SECRET, agent_id="another-agent")  # the same words, kept by a memory not purged
    receipt = purge.purge(Request(Scope.MEMORY, memory_id=memory.id), reason="leak", actor=ADMIN)
    assert not receipt.verified and receipt.status == "failed"
    assert {"where": "memories.content", "count": 1} in receipt.found
    tombstone = Memory.objects.get(id=memory.id).history.get(event="purged")
    assert tombstone.metadata["receipt"]["verified"] is False


def test_purge_by_text_widens_to_every_memory_holding_it():
    holders = [remember(f"Ticket {n}: {SECRET}.") for n in range(2)]
    receipt = purge.purge(Request(Scope.TEXT, text="hunter2-prod"), reason="leak", actor=ADMIN)
    assert sorted(receipt.memories) == sorted(m.id for m in holders) and receipt.verified


def test_a_key_only_in_why_tags_or_source_id_is_named_by_the_refusal():
    """A QA pass: a key put in why, tags and sourceId only got 'nothing matches'."""
    key = "Xq7-palomino-3312"
    in_why = remember("Deploy notes for the staging cluster.", why=f"db password is {key}")
    in_tags = remember("Rotation happens monthly.", tags=[f"pw-{key}"])
    in_source = remember("The vault moved racks.", source_id=key)
    unicode_tag = remember("Badge list updated.", tags=["Weißmüller-Ausweis-7781"])
    remember("An unrelated note about Xq7 palominos.")

    with pytest.raises(Refused) as refused:
        purge.purge(Request(Scope.TEXT, text=key), reason="leaked key", actor=ADMIN)

    assert refused.value.code == "nothing_to_purge"
    held = ", ".join(sorted([in_why.id, in_tags.id, in_source.id]))
    assert refused.value.message == (
        "no memory's text holds this text, but the why, tags, sourceId or type of these 3 "
        f"memories do: {held}. Purge them by id"
    )
    assert purge.held_beside("Weißmüller-Ausweis-7781") == [unicode_tag.id]


def test_the_purged_memory_is_a_tombstone_with_who_and_when():
    memory = remember(SECRET, why="ops channel", tags=["creds"])
    receipt = purge.purge(Request(Scope.MEMORY, memory_id=memory.id), reason="leak", actor=ADMIN)
    memory.refresh_from_db()
    assert (memory.content, memory.normalized_content, memory.content_hash) == (PURGED, PURGED, "")
    assert (memory.why, memory.tags, memory.who, memory.is_deleted) == ("", [], "agent-one", True)
    created = memory.history.get(event="created")
    # Its reason was the writer's `why`, emptied with the memory: its copy goes too.
    assert (created.new_content, created.changed_by, created.reason) == (
        PURGED,
        "agent-one",
        PURGED,
    )
    tombstone = memory.history.get(event="purged")
    assert tombstone.id == receipt.tombstone and tombstone.changed_by == "ada"
    assert tombstone.metadata["counts"]["memories"] == 1
    with pytest.raises(Refused) as refused:
        writes.recover(memory.id, actor=ADMIN, reason="undo")
    assert refused.value.code == "purged"


def test_a_running_job_of_a_purged_memory_is_cancelled_and_records_nothing(fake_ollama):
    set_mode("controlled-write")
    ScriptedModel(fake_ollama, facts=[fact("Priya keeps the staging password in a vault")])
    source = raw(SECRET).memory
    job = Job.objects.get(memory=source)
    outcome = compute(claim_job(job.id), [])  # a worker holds it and has the model's answer
    purge.purge(Request(Scope.MEMORY, memory_id=source.id), reason="leak", actor=ADMIN)
    assert record_job(outcome) is None  # the lease is gone: nothing recorded
    late = LiveCalls(job.id)  # a model call that returns after the purge is not logged
    late.append(CallRecord("decide", "ollama", "qwen3:4b", prompt=f"Fact: {SECRET}"))
    assert not LlmCall.objects.filter(prompt__contains="hunter2").exists()
    assert Job.objects.get(id=job.id).status == JobStatus.CANCELLED
    assert not Proposal.objects.filter(source_memory=source).exists()
    assert not Memory.objects.filter(source_id=source.id).exists()


def test_another_memorys_running_job_that_read_the_purged_text_starts_again(fake_ollama):
    """A QA pass: a job running for another memory had the purged one as a candidate; after the
    purge had verified, it logged its prompt and recorded an UPDATE of the tombstone."""
    set_mode("controlled-write")
    kept = remember(SECRET)
    ScriptedModel(fake_ollama, facts=[fact("The staging DB password is hunter3-prod")])
    other = raw("Rotated: the staging DB password is hunter3-prod now").memory
    job = Job.objects.get(memory=other)
    outcome = compute(claim_job(job.id), [])  # read the secret as its candidate
    assert any(SECRET in call.prompt for call in outcome.calls)
    unrelated = raw("Lunch is at noon", agent_id="another-agent").memory
    elsewhere = Job.objects.get(memory=unrelated)
    claim_job(elsewhere.id)

    receipt = purge.purge(Request(Scope.MEMORY, memory_id=kept.id), reason="leak", actor=ADMIN)

    assert receipt.verified
    assert record_job(outcome) is None  # its lease is gone: nothing recorded
    late = LiveCalls(job.id)
    late.append(CallRecord("decide", "ollama", "qwen3:4b", prompt=f"Candidates: {SECRET}"))
    assert not LlmCall.objects.filter(prompt__contains="hunter2").exists()
    assert not Proposal.objects.filter(target_memory=kept).exists()
    cancelled = Job.objects.get(id=job.id)
    assert cancelled.status == JobStatus.CANCELLED and "was purged" in cancelled.error
    fresh = Job.objects.get(memory=other, status=JobStatus.PENDING)
    assert fresh.id != job.id
    assert Job.objects.get(id=elsewhere.id).status == JobStatus.LEASED  # another agent's: read none


def test_a_purge_of_what_no_job_can_read_restarts_no_job():
    """A second review: the expiry purge, each maintenance run, restarted every running job
    of the agent, though an expired or forgotten memory is no job's candidate."""
    from datetime import timedelta

    expired = remember("The old door code", expires_at=timezone.now() - timedelta(days=40))
    forgotten = remember("The older door code")
    writes.forget(forgotten.id, actor=ADMIN, reason="old")
    running = Job.objects.get(memory=raw("A new note about the door").memory)
    claim_job(running.id)
    for memory in (expired, forgotten):
        purge.purge(Request(Scope.MEMORY, memory_id=memory.id), reason="gone", actor=ADMIN)
    assert Job.objects.get(id=running.id).status == JobStatus.LEASED


def test_a_key_in_its_own_reasons_changers_who_and_type_is_purged_with_the_text():
    """A QA pass: the receipt said verified while the purged memory's own trail kept its keys:
    an edit's reason and changer, a forget's reason, its who and its type."""
    memory = remember(
        "Lena Fischer wifi password is tulip-9934.",
        who="Lena Fischer tulip-9934",
        type="wifi tulip-9934",
    )
    writes.modify(
        memory.id,
        {"content": "Lena Fischer wifi password is rose-5521."},
        actor=Actor("rose-5521 Lena", "operator"),
        reason="rotated: tulip-9934 replaced by rose-5521",
    )
    writes.forget(memory.id, actor=ADMIN, reason="forget rose-5521 now")

    receipt = purge.purge(Request(Scope.MEMORY, memory_id=memory.id), reason="asked", actor=ADMIN)

    assert receipt.verified, receipt.found
    trail = list(memory.history.values_list("reason", "changed_by"))
    assert not any("9934" in str(row) or "5521" in str(row) for row in trail), trail
    assert ("rotated: [purged] replaced by [purged]", "[purged] Lena") in trail
    tombstone = Memory.objects.get(id=memory.id)
    assert (tombstone.who, tombstone.type) == ("Lena Fischer [purged]", "wifi [purged]")


def test_a_purged_text_in_a_type_is_scrubbed_on_the_tombstone_and_named_on_another_memory():
    """A second review: a type holding the whole text stayed on the tombstone, and another
    memory's type holding it was never looked at; both receipts said verified."""
    text = "blood type AB negative"
    memory = remember(f"Lena has {text} today.", type=text)
    other = remember("A note on a form field.", type=f"{text} form")
    receipt = purge.purge(Request(Scope.TEXT, text=text), reason="health data", actor=ADMIN)
    assert receipt.memories == [memory.id]
    assert Memory.objects.get(id=memory.id).type == "[purged]"
    assert not receipt.verified
    assert receipt.found == [{"where": "memories.type", "count": 1}]
    assert Memory.objects.get(id=other.id).type == f"{text} form"  # named, not rewritten


def test_a_kept_part_of_the_trail_fails_the_check(monkeypatch):
    from memory import erasure_rows

    memory = remember("The vault code is 7713-AXQ-0098 for the Berlin office.")
    writes.forget(memory.id, actor=ADMIN, reason="code 7713-AXQ-0098 rotated")
    monkeypatch.setattr(erasure_rows, "scrub_parts", lambda value, texts: value)  # a broken scrub
    receipt = purge.purge(Request(Scope.MEMORY, memory_id=memory.id), reason="r", actor=ADMIN)
    assert not receipt.verified
    assert {
        "where": "memory_history.reason/changed_by (a key or a run of the text's words)",
        "count": 1,
    } in receipt.found


@pytest.mark.sqlite_only(reason="the shared matrix exists on SQLite only")
def test_the_purged_vectors_rows_are_zeroed_in_the_matrix():
    memory = remember(SECRET)
    vector = np.random.default_rng(7).standard_normal(768).astype(np.float32)
    writes.store_vector(memory.id, memory.content_hash, Vector(vector, "m1"))
    eid = Embedding.objects.get(content_hash=memory.content_hash).id
    assert matrix.INDEX.nearest(vector, model="m1", k=1)[0][0] == eid
    mapping = matrix.INDEX.mapping
    row = mapping.rows_of(np.asarray([eid]))[eid]
    receipt = purge.purge(Request(Scope.MEMORY, memory_id=memory.id), reason="leak", actor=ADMIN)
    assert receipt.verified and receipt.rows["embeddings"] == 1
    # The row keeps its id (a number: the rows' order by id stays sorted), nothing of the vector.
    assert mapping.nonzero([row]) == 0
    assert not mapping.codes[row].any() and not mapping.bits[:, row].any()
    assert mapping.scale[row] == 0 and mapping.alive[row] == 0
    assert vectors.nearest(vector, model="m1", k=1) == []


@pytest.mark.sqlite_only(reason="SQLite's secure_delete and write-ahead log")
def test_every_connection_zeroes_what_it_frees():
    with connection.cursor() as cursor:
        cursor.execute("PRAGMA secure_delete")
        assert cursor.fetchone()[0] == 1


def test_a_big_purge_is_written_in_parts_and_checked_once_word_by_word(monkeypatch):
    """An agent's 40 memories: more texts than are looked for one by one (rows are matched by
    word first) and more memories than one write takes (three transactions); one receipt."""
    monkeypatch.setattr(purge_writes, "WRITE_CHUNK", 15)
    texts = [f"Retired agent note {n}: the runbook step {n} uses lever {n * 7}." for n in range(40)]
    mine = [remember(text, agent_id="retired") for text in texts]
    remember(texts[3], agent_id="keeper")  # one of them, kept by another agent
    receipt = purge.purge(Request(Scope.AGENT, agent="retired"), reason="retired", actor=ADMIN)
    assert sorted(receipt.memories) == sorted(m.id for m in mine)
    assert {item["where"] for item in receipt.found} == {
        "memories.content",
        "memories.normalized_content",
    }
    receipts = {
        m.history.get(event="purged").metadata["receiptId"]
        for m in Memory.objects.filter(agent_id="retired")
    }
    assert receipts == {receipt.tombstone}
    assert Texts.of(texts).many and not Texts.of(texts[:5]).many


def a_first_approval_waiting(fake_ollama) -> tuple[Memory, Proposal]:
    """(raw memory, its DELETE proposal) with a first approval of two recorded, nothing applied."""
    store = seed_store()
    configure(review__destructiveApprovals=2)
    four_decisions(fake_ollama, store)
    source = raw(RAW_TEXT).memory
    process_pending()
    pending = Proposal.objects.get(source_memory=source, action="delete")
    review.approve(pending.id, ADMIN)
    return source, pending


def test_a_purged_proposals_first_approval_loses_its_text(fake_ollama):
    """The two-person rule keeps the text a first approval approved: a purge of the raw memory
    wipes it there too, and the receipt still verifies."""
    source, pending = a_first_approval_waiting(fake_ollama)
    approval = Approval.objects.get(proposal=pending)
    assert approval.content and approval.content != PURGED
    receipt = purge.purge(Request(Scope.MEMORY, memory_id=source.id), reason="leak", actor=ADMIN)
    approval.refresh_from_db()
    assert approval.content == PURGED and receipt.verified
    # Its round ends with the proposal (a QA pass found it still waiting for a second reviewer).
    assert (approval.outcome, approval.ended_by) == ("cancelled", "ada")
    assert approval.ended_at is not None


def test_a_proposal_a_purge_cancelled_says_so_at_the_end_of_its_trail(fake_ollama):
    """A QA pass: its page said 'cancelled' while its trail ended on a waiting approval."""
    from pipeline.trail import trail_of

    target, source, pending = an_update_waiting(fake_ollama)
    purge.purge(Request(Scope.MEMORY, memory_id=target.id), reason="asked", actor=ADMIN)
    pending.refresh_from_db()
    assert pending.status == "cancelled"
    last = trail_of(pending)[-1]
    assert (last.label, last.by, last.memory_id) == (
        "cancelled: its memory was purged",
        "ada",
        target.id,
    )
    # A later purge of its raw memory cancelled nothing: the trail does not say it did.
    purge.purge(Request(Scope.MEMORY, memory_id=source.id), reason="r", actor=Actor("bo"))
    assert [row.label for row in trail_of(pending)].count("cancelled: its memory was purged") == 1
    assert not any(row.label.startswith("cancelled: its raw") for row in trail_of(pending))


def test_a_purged_memorys_pending_proposals_leave_the_queue_cancelled(fake_ollama):
    """Found by a day of QA: they stayed pending as "[purged]", counted as waiting, and approving
    one was refused (source_forgotten)."""
    store = seed_store()
    four_decisions(fake_ollama, store)
    source = raw(RAW_TEXT).memory
    process_pending()
    pending = set(
        Proposal.objects.filter(source_memory=source, status="pending").values_list("id", flat=True)
    )
    decided = set(
        Proposal.objects.filter(source_memory=source)
        .exclude(status="pending")
        .values_list("id", "status")
    )
    assert pending
    purge.purge(Request(Scope.MEMORY, memory_id=source.id), reason="leak", actor=ADMIN)
    statuses = dict(Proposal.objects.filter(source_memory=source).values_list("id", "status"))
    assert {statuses[p] for p in pending} == {"cancelled"}
    assert {(p, statuses[p]) for p, _ in decided} == decided  # decided ones keep their status
    assert not Proposal.objects.filter(status="pending", fact_content=PURGED).exists()


def test_open_proposals_that_would_change_a_purged_memory_leave_the_queue_cancelled(fake_ollama):
    """Found by a second reviewer: an UPDATE of a purged memory stayed pending, its target shown
    as "[purged]", and approving it could only find the target gone. Another memory's own
    decided proposals keep their status."""
    target, source, pending = an_update_waiting(fake_ollama)
    decided = dict(
        Proposal.objects.filter(source_memory=source)
        .exclude(pk=pending.pk)
        .values_list("id", "status")
    )
    purge.purge(Request(Scope.MEMORY, memory_id=target.id), reason="leak", actor=ADMIN)
    pending.refresh_from_db()
    assert pending.status == ProposalStatus.CANCELLED and pending.target_content == PURGED
    assert decided == dict(
        Proposal.objects.filter(source_memory=source)
        .exclude(pk=pending.pk)
        .values_list("id", "status")
    )


QUOTING = 'The value changed from "walrus-copper-4417" to "heron-silver-9902"'


def _an_update_quoting_its_target(fake_ollama) -> tuple[Memory, Memory, Proposal]:
    """(its target, its raw memory, the proposal) of an UPDATE whose model reason quotes a part
    of the target's text (controlled-write: it waits for a reviewer)."""
    set_mode("controlled-write")
    target = remember("The deploy password is Walrus-Copper-4417 for staging")
    update = "The deploy password is Heron-Silver-9902 for staging"
    ScriptedModel(
        fake_ollama,
        facts=[fact(update)],
        decisions={update: {**decision("update", target), "reason": QUOTING}},
    )
    source = raw("Rotated today: staging's deploy password is now Heron-Silver-9902.").memory
    process_pending()
    return target, source, Proposal.objects.get(target_memory=target)


@pytest.mark.parametrize("approved", [False, True])
def test_a_reason_quoting_part_of_a_purged_memory_is_replaced_where_it_was_copied(
    fake_ollama, approved
):
    """Found by a QA pass and a second reviewer: the model's reason for another memory's UPDATE
    of the purged one quoted its password, and it stayed in the proposal, its audits (the
    target's own "updated" one when approved), the job's result and the model's reply, under a
    purge reported verified."""
    target, source, proposal = _an_update_quoting_its_target(fake_ollama)
    if approved:
        review.approve(proposal.id, ADMIN, note="rotated, checked")
    receipt = purge.purge(Request(Scope.MEMORY, memory_id=target.id), reason="leak", actor=ADMIN)
    assert receipt.verified, receipt.found
    proposal.refresh_from_db()
    job = Job.objects.get(pk=proposal.job_id)
    reply = LlmCall.objects.get(job=job, kind="decide", fact_index=proposal.position)
    assert (proposal.reason, reply.raw_response) == (PURGED, PURGED)
    assert job.result["proposals"][0]["reason"] == PURGED
    trails = [*source.history.all(), *Memory.objects.get(id=target.id).history.all()]
    assert not [a.event for a in trails if "walrus" in f"{a.reason} {a.metadata}".lower()]
    # A reviewer's own words are theirs: kept, on the memory that stays and on the purged one.
    notes = [a.reason for a in source.history.filter(event="reviewed")]
    assert notes == (["rotated, checked"] if approved else [])
    updated = Memory.objects.get(id=target.id).history.filter(event="updated")
    assert [a.reason for a in updated] == (["rotated, checked"] if approved else [])


def test_a_quoting_reason_leaves_the_trail_of_what_keep_both_made(fake_ollama):
    """ "Keep both" makes a new memory whose "created" audit repeats the model's reason."""
    target, _, proposal = _an_update_quoting_its_target(fake_ollama)
    review.approve(proposal.id, ADMIN, action="add")  # keep both, from the API: no note
    made = Memory.objects.get(id=Proposal.objects.get(pk=proposal.pk).created_memory_id)
    assert "walrus" in made.history.get(event="created").reason.lower()
    receipt = purge.purge(Request(Scope.MEMORY, memory_id=target.id), reason="leak", actor=ADMIN)
    assert receipt.verified, receipt.found
    assert "walrus" not in (made.history.get(event="created").reason or "").lower()


def test_a_reviewers_notes_on_what_keep_both_made_stay_through_a_purge(fake_ollama):
    """Found by a second reviewer: the purge replaced every audit about the proposal on the
    memory "keep both" made, a reviewer's note and a revert's reason with them."""
    target, _, proposal = _an_update_quoting_its_target(fake_ollama)
    review.approve(proposal.id, ADMIN, action="add", note="Keep both: ops asked us to")
    made_id = Proposal.objects.get(pk=proposal.pk).created_memory_id
    review_writes.revert(proposal.id, reviewer=ADMIN, reason="Dana said the old one is gone")
    receipt = purge.purge(Request(Scope.MEMORY, memory_id=target.id), reason="leak", actor=ADMIN)
    assert receipt.verified, receipt.found
    trail = Memory.objects.get(id=made_id).history.order_by("created_at", "id")
    assert [(a.event, a.reason) for a in trail] == [
        ("created", "Keep both: ops asked us to"),
        ("deleted", "Dana said the old one is gone"),
    ]


def test_a_reason_about_a_purged_raw_memory_leaves_the_trail_of_the_fact_it_made(fake_ollama):
    """Found by a second reviewer: the raw memory purged alone (its fact stays), the model's
    reason for the fact's ADD quoted the raw memory and stayed on the fact's "created" audit."""
    set_mode("controlled-write")
    remember("Staging runs in the eu-west-1 region")  # a candidate: the model is asked
    made = "Staging runs in eu-central-1"
    quoting = "New: staging left the Orca-Ridge-88 racks for eu-central-1"
    ScriptedModel(
        fake_ollama,
        facts=[fact(made)],
        decisions={made: {"action": "add", "reason": quoting, "confidence": 0.9}},
    )
    source = raw("Staging moved today to eu-central-1 from the old Orca-Ridge-88 racks.").memory
    process_pending()
    derived = Memory.objects.get(content=made)
    assert "orca-ridge-88" in derived.history.get(event="created").reason.lower()
    receipt = purge.purge(Request(Scope.MEMORY, memory_id=source.id), reason="leak", actor=ADMIN)
    assert receipt.verified, receipt.found
    assert "orca" not in (derived.history.get(event="created").reason or "").lower()
    assert Memory.objects.get(id=derived.id).content == made  # the fact itself stays


def test_a_purge_rewrites_no_result_of_the_purged_memories_own_jobs_one_by_one(fake_ollama):
    """Found by a second reviewer: a result UPDATE a purged memory's job, inside the write."""
    set_mode("controlled-write")
    ScriptedModel(fake_ollama, facts=[fact("The retired agent kept scratch notes")])
    for i in range(6):
        raw(f"Scratch note number {i} of the retired agent", agent_id="scratch")
    process_pending()
    assert Proposal.objects.filter(agent_id="scratch").count() >= 6
    with CaptureQueriesContext(connection) as queries:
        purge.purge(Request(Scope.AGENT, agent="scratch"), reason="agent retired", actor=ADMIN)
    one_by_one = [
        q["sql"] for q in queries if q["sql"].startswith('UPDATE "memory_jobs" SET "result"')
    ]
    assert one_by_one == []


def test_a_purge_in_parts_checks_every_part(monkeypatch):
    """Found by a second reviewer: parts merged for the check lost the purged memories' ids and
    their writers' whys, so a purge of more than a part was checked for neither."""
    monkeypatch.setattr(purge_writes, "WRITE_CHUNK", 1)
    memories = [
        remember(f"Note {i} for the lunch order", why=f"asked by person {i}") for i in range(2)
    ]
    written = purge_writes.plan([m.id for m in memories], Texts.of([m.content for m in memories]))
    assert sorted(written.pipeline.memory_ids) == sorted(m.id for m in memories)
    assert sorted(dict(written.store.whys)) == sorted(m.id for m in memories)


def test_a_purge_reaches_the_reasons_of_many_proposals_pointing_at_a_memory(fake_ollama):
    """Found by a second reviewer: one SQL term a proposal passed SQLite's depth limit (1000),
    and the purge of a much-repeated memory failed."""
    target, _, proposal = _an_update_quoting_its_target(fake_ollama)
    clones = []
    for n in range(1100):
        clone = Proposal.objects.get(pk=proposal.pk)
        clone.pk, clone.position, clone.status = None, 100 + n, ProposalStatus.REJECTED
        clones.append(clone)
    Proposal.objects.bulk_create(clones)
    receipt = purge.purge(Request(Scope.MEMORY, memory_id=target.id), reason="leak", actor=ADMIN)
    assert receipt.verified, receipt.found
    assert not Proposal.objects.filter(target_memory_id=target.id).exclude(reason=PURGED).exists()


def test_the_writers_why_and_reference_go_with_the_purged_memory():
    """Found by a QA pass: the purge emptied `why` but its copy stayed as the "created" audit's
    reason, and the caller's sourceId (free text, here naming a person) was kept."""
    memory = remember(
        "Allergy note for the team lunch order on Thursday",
        why="Hortensia Blackwood asked",
        source_type="chat",
        source_id="dm with Hortensia Blackwood re her nut allergy",
    )
    receipt = purge.purge(Request(Scope.MEMORY, memory_id=memory.id), reason="erasure", actor=ADMIN)
    assert receipt.verified, receipt.found
    memory.refresh_from_db()
    assert (memory.why, memory.source_id, memory.source_type) == ("", None, "chat")
    created = memory.history.get(event="created")
    assert created.reason == PURGED and created.changed_by == WRITER.name


def test_a_purge_whose_reason_says_the_writers_why_again_still_verifies():
    """Found by a second reviewer: the tombstone's own reason counted as a copy of the why."""
    memory = remember("Allergy note for the team lunch on Friday", why="user request")
    receipt = purge.purge(
        Request(Scope.MEMORY, memory_id=memory.id), reason="user request", actor=ADMIN
    )
    assert receipt.verified, receipt.found


def test_a_derived_memory_keeps_its_raw_memorys_id_through_a_purge(fake_ollama):
    set_mode("controlled-write")
    derived_text = "Priya owns the vault key ring"
    ScriptedModel(fake_ollama, facts=[fact(derived_text)], decisions={})
    source = raw("Priya owns the vault key ring, as of today.").memory
    process_pending()
    derived = Memory.objects.get(content=derived_text)
    purge.purge(Request(Scope.MEMORY, memory_id=derived.id), reason="erasure", actor=ADMIN)
    derived.refresh_from_db()
    assert derived.source_id == source.id and derived.purged_at is not None


def test_migration_0023_ends_the_first_approvals_earlier_purges_left_waiting(fake_ollama):
    """Before 0023 a purge cancelled the proposal and left its first approval waiting."""
    import importlib

    from django.apps import apps

    source, pending = a_first_approval_waiting(fake_ollama)
    purge.purge(Request(Scope.MEMORY, memory_id=source.id), reason="leak", actor=ADMIN)
    Approval.objects.filter(proposal=pending).update(outcome="", ended_by="", ended_at=None)
    module = importlib.import_module("pipeline.migrations.0023_approval_cancelled")
    assert module.close_cancelled_rounds(apps) == 1
    approval = Approval.objects.get(proposal=pending)
    pending.refresh_from_db()
    assert (approval.outcome, approval.ended_by) == ("cancelled", "purge")
    assert approval.ended_at == pending.updated_at
    assert module.close_cancelled_rounds(apps) == 0
