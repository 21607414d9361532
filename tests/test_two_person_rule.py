"""The two-person rule (issue 26, item 2): with review.destructiveApprovals 2, every DELETE and an
UPDATE of a pinned or person-asserted memory needs approvals from two different reviewers, through
the API (202 / 409 same_approver / 200) and the door the dashboard uses; a rejection by either ends
it, bulk counts once per reviewer, full mode leaves such a change for review, exactly once holds
when two second approvers race, and the stale, pinned and frozen refusals stay in force."""

import json
import threading
from datetime import timedelta

import pytest
from django.db import connection, connections
from django.test.utils import CaptureQueriesContext
from django.utils import timezone
from django.utils.html import escape

from memory import writes
from memory.models import Authority, Memory, MemoryHistory
from memory.writes import Actor, Refused
from pipeline import review, tasks
from pipeline.models import Approval, Claim, Proposal
from tests.conftest import _token
from tests.pipeline_support import (
    RAW_TEXT,
    UPDATE_FACT,
    approve,
    configure,
    four_decisions,
    pending_delete,
    raw,
    reject,
    seed_store,
    set_mode,
)

RITA, SAM = Actor("rita", "operator"), Actor("sam", "operator")


@pytest.fixture
def store(db):
    return seed_store()


@pytest.fixture
def pending(fake_ollama, store):
    """Shadow mode, the two-person rule on: ADD, UPDATE and DELETE pending review."""
    configure(review__destructiveApprovals=2)
    four_decisions(fake_ollama, store)
    job = raw(RAW_TEXT).job
    tasks.process_pending()
    return {p.action: p for p in Proposal.objects.filter(job=job)}


@pytest.fixture
def first_bot(db):
    return _token(["review"], name="first-bot")


@pytest.fixture
def second_bot(db):
    return _token(["review"], name="second-bot")


# --- the API ---------------------------------------------------------------------------------------


def test_a_delete_needs_two_different_token_approvals_through_the_api(
    client, pending, store, first_bot, second_bot
):
    delete = pending["delete"]
    first = approve(client, first_bot, delete)
    assert first.status_code == 202
    body = first.json()
    assert set(body) == {"status", "approvals"}
    assert body["status"] == "awaiting_second_approval"
    assert [a["by"] for a in body["approvals"]] == ["first-bot"] and body["approvals"][0]["at"]
    assert not Memory.objects.get(id=store.staging.id).is_deleted

    again = approve(client, first_bot, delete)
    assert again.status_code == 409 and again.json()["error"] == "same_approver"
    assert "second, different reviewer" in again.json()["message"]
    # The same moment written the same way in both answers (a QA pass: "+00:00" in the 409).
    assert again.json()["approvals"][0]["at"] == body["approvals"][0]["at"]
    assert body["approvals"][0]["at"].endswith("Z")
    assert not Memory.objects.get(id=store.staging.id).is_deleted
    listed = client.get(f"/api/proposals?sourceMemoryId={delete.source_memory_id}", **first_bot)
    shown = {p["id"]: p for p in listed.json()["proposals"]}[delete.id]
    assert shown["status"] == "pending" and [a["by"] for a in shown["approvals"]] == ["first-bot"]

    second = approve(client, second_bot, delete)
    assert second.status_code == 200
    assert second.json()["status"] == "applied" and second.json()["decidedBy"] == "second-bot"
    assert second.json()["approvals"] == []
    assert Memory.objects.get(id=store.staging.id).is_deleted
    rounds = list(Approval.objects.filter(proposal=delete).values_list("by", "position", "outcome"))
    assert rounds == [("first-bot", 1, "applied"), ("second-bot", 2, "applied")]
    decisions = MemoryHistory.objects.filter(event="reviewed", metadata__proposalId=delete.id)
    assert sorted(decisions.values_list("metadata__decision", flat=True)) == [
        "approved",
        "approved_first",
    ]


def test_a_rejection_by_either_reviewer_ends_the_round(
    client, pending, store, first_bot, second_bot
):
    delete = pending["delete"]
    assert approve(client, first_bot, delete).status_code == 202
    assert reject(client, second_bot, delete, reason="the cluster still runs").status_code == 200
    assert Proposal.objects.get(id=delete.id).status == "rejected"
    assert not Memory.objects.get(id=store.staging.id).is_deleted
    assert Approval.objects.get(proposal=delete).outcome == "rejected"
    late = approve(client, second_bot, delete)
    assert late.status_code == 409 and late.json()["error"] == "already_decided"


def test_the_first_approver_rejecting_also_ends_it(pending, store):
    update = pending["update"]
    Memory.objects.filter(id=store.postgres.id).update(pinned=True)
    review.approve(update.id, RITA, force=True)
    review.reject(update.id, RITA, reason="changed my mind")
    assert Approval.objects.get(proposal=update).outcome == "rejected"
    assert Memory.objects.get(id=store.postgres.id).version == 1


def test_an_add_and_an_update_of_an_agents_memory_need_one_approval(pending, store):
    assert review.approve(pending["add"].id, RITA).status == "applied"
    assert review.approve(pending["update"].id, RITA).status == "applied"
    assert not Approval.objects.exists()


def test_an_update_whose_text_is_already_a_memory_retires_its_target_only_with_two(pending, store):
    """Found by a QA pass: such an approval retires the target (applied as a DELETE), and one
    reviewer's approval did it: the rule was checked for the UPDATE."""
    writes.remember(UPDATE_FACT, actor=Actor("agent-one", "agent"), create_job=False)
    first = review.approve(pending["update"].id, RITA)
    assert first.status == "pending" and Approval.objects.filter(by="rita").exists()
    assert not Memory.objects.get(id=store.postgres.id).is_deleted
    second = review.approve(pending["update"].id, SAM)
    assert (second.status, second.applied_as) == ("applied", "delete")
    assert Memory.objects.get(id=store.postgres.id).is_deleted
    # Its trail names both, and quotes no note: the write's own reason is not a reviewer's.
    from dashboard import lineage

    steps = lineage.build(Memory.objects.get(id=store.postgres.id))
    retired = next(step for step in steps if step.kind == "deleted")
    assert "approved by rita, then sam (two approvals)" in retired.text
    assert "replaced: the new text" not in retired.text


@pytest.mark.parametrize("protect", ["pinned", "person"])
def test_an_update_of_a_pinned_or_person_asserted_memory_needs_two(pending, store, protect):
    changes = {"pinned": True} if protect == "pinned" else {"asserted_by": Authority.PERSON}
    Memory.objects.filter(id=store.postgres.id).update(**changes)
    update = pending["update"]
    force = protect == "pinned"
    if force:  # a pinned target still needs the reviewer's confirmation, at each approval
        with pytest.raises(Refused) as refused:
            review.approve(update.id, RITA)
        assert refused.value.code == "pinned_requires_force"
    assert review.approve(update.id, RITA, force=force).awaiting_second_approval
    assert Memory.objects.get(id=store.postgres.id).content != UPDATE_FACT
    assert review.approve(update.id, SAM, force=force).status == "applied"
    assert Memory.objects.get(id=store.postgres.id).content == UPDATE_FACT


def test_keeping_both_instead_of_a_delete_is_an_add_and_needs_one(pending, store):
    kept = review.approve(pending["delete"].id, RITA, action="add")
    assert kept.status == "applied" and kept.applied_as == "add"
    assert not Memory.objects.get(id=store.staging.id).is_deleted


def test_the_second_approval_applies_what_the_first_approved(pending, store):
    update = pending["update"]
    Memory.objects.filter(id=store.postgres.id).update(asserted_by=Authority.PERSON)
    edited = "The billing service runs on Postgres 16 since March"
    review.approve(update.id, RITA, content=edited)
    with pytest.raises(Refused) as refused:
        review.approve(update.id, SAM, content="The billing service runs on MySQL")
    assert refused.value.code == "approval_differs" and "rita" in refused.value.message
    with pytest.raises(Refused) as other_action:
        review.approve(update.id, SAM, action="delete")
    assert other_action.value.code == "approval_differs"
    assert review.approve(update.id, SAM).status == "applied"
    assert Memory.objects.get(id=store.postgres.id).content == edited


def test_the_first_approver_can_withdraw_and_the_undo_says_so(pending, store):
    delete = pending["delete"]
    review.approve(delete.id, RITA)
    assert review.can_undo(Proposal.objects.get(id=delete.id), "rita")
    assert not review.can_undo(Proposal.objects.get(id=delete.id), "sam")
    review.undo(delete.id, RITA)
    assert Approval.objects.get(proposal=delete).outcome == "withdrawn"
    # A fresh round: rita's approval is a first one again.
    assert review.approve(delete.id, RITA).awaiting_second_approval


def test_undoing_an_applied_two_person_decision_counts_the_round_as_undone(pending, store):
    delete = pending["delete"]
    review.approve(delete.id, RITA)
    review.approve(delete.id, SAM)
    review.undo(delete.id, SAM)
    assert set(Approval.objects.filter(proposal=delete).values_list("outcome", flat=True)) == {
        "undone"
    }
    assert not Memory.objects.get(id=store.staging.id).is_deleted


# --- refusals that stay in force ------------------------------------------------------------------


def test_a_target_edited_after_the_first_approval_is_stale_at_the_second(pending, store):
    delete = pending["delete"]
    review.approve(delete.id, RITA)
    writes.modify(store.staging.id, {"content": "The staging cluster moved"}, actor=SAM, reason="x")
    with pytest.raises(Refused) as refused:
        review.approve(delete.id, SAM)
    assert refused.value.code == "stale"
    assert Proposal.objects.get(id=delete.id).status == "stale"
    assert Approval.objects.get(proposal=delete).outcome == "stale"
    assert not Memory.objects.get(id=store.staging.id).is_deleted


def test_re_deciding_ends_the_round_so_an_edit_since_the_first_approval_needs_two_again(
    pending, store
):
    """Found by a QA pass: a second approval with redecide moved the proposal to the target's
    new version and applied it over an edit made after the first approval, which counted as
    the first of two though it was given to the text as it stood."""
    delete = pending["delete"]
    review.approve(delete.id, RITA)
    writes.modify(store.staging.id, {"content": "The staging cluster moved"}, actor=SAM, reason="x")
    review.approve(delete.id, SAM, redecide=True)
    assert Proposal.objects.get(id=delete.id).status == "pending"
    assert not Memory.objects.get(id=store.staging.id).is_deleted
    rounds = Approval.objects.filter(proposal=delete).order_by("at")
    assert [(a.by, a.outcome) for a in rounds] == [("rita", "stale"), ("sam", "")]  # "": open
    review.approve(delete.id, RITA, redecide=True)  # nothing moved since: the second approval
    assert Memory.objects.get(id=store.staging.id).is_deleted


def test_a_stale_proposal_re_decided_by_one_reviewer_waits_pending_for_the_second(pending, store):
    """It stayed stale, so the second reviewer could only re-decide too, and be the first again."""
    delete = pending["delete"]
    writes.modify(store.staging.id, {"content": "The staging cluster moved"}, actor=SAM, reason="x")
    with pytest.raises(Refused):
        review.approve(delete.id, RITA)
    assert Proposal.objects.get(id=delete.id).status == "stale"
    review.approve(delete.id, SAM, redecide=True)
    waiting = Proposal.objects.get(id=delete.id)
    # Pending, no longer said to be stale (a second review: it kept "target_changed").
    assert (waiting.status, waiting.blocked_reason) == ("pending", None)
    review.approve(delete.id, RITA)
    assert Memory.objects.get(id=store.staging.id).is_deleted


def test_ending_a_round_on_a_re_decision_is_audited_and_an_old_proposal_is_not_moved(
    pending, store
):
    delete = pending["delete"]
    review.approve(delete.id, RITA)
    writes.modify(store.staging.id, {"content": "The staging cluster moved"}, actor=SAM, reason="x")
    review.approve(delete.id, SAM, redecide=True)
    ended = MemoryHistory.objects.filter(metadata__decision="stale", metadata__endedRound="rita")
    assert ended.count() == 1 and "no longer counts" in ended.get().reason
    # A proposal older than source versions (None) is judged by its target alone, as the stale
    # check judges it: nothing moved, so a re-deciding second approval completes the round.
    add_update = pending["update"]
    configure(review__destructiveApprovals=2)
    Memory.objects.filter(id=add_update.target_memory_id).update(pinned=True)
    review.approve(add_update.id, RITA, force=True)
    Proposal.objects.filter(id=add_update.id).update(source_version=None)
    review.approve(add_update.id, SAM, redecide=True, force=True)
    assert Proposal.objects.get(id=add_update.id).status == "applied"


def test_a_skipped_proposal_approved_once_waits_pending_for_the_second(pending, store):
    """Left skipped, the second reviewer found it only under the Skipped filter (a review)."""
    delete = pending["delete"]
    Proposal.objects.filter(id=delete.id).update(
        status="skipped", skipped_reason="low_fact_confidence"
    )
    review.approve(delete.id, RITA)
    waiting = Proposal.objects.get(id=delete.id)
    assert (waiting.status, waiting.skipped_reason) == ("pending", None)
    review.approve(delete.id, SAM)
    assert Memory.objects.get(id=store.staging.id).is_deleted


def test_an_update_retiring_its_target_for_an_expired_holder_brings_the_holder_back(pending, store):
    """The target was retired for a memory recall no longer finds: the text was lost from
    recall (a review). The holder is live again, as a remember of its text revives it."""
    update = pending["update"]
    holder = writes.remember(update.fact_content, actor=SAM, create_job=False).memory
    Memory.objects.filter(id=holder.id).update(expires_at=timezone.now() - timedelta(days=1))
    configure(review__destructiveApprovals=1)
    review.approve(update.id, RITA)
    holder.refresh_from_db()
    assert not holder.is_expired and not holder.is_deleted
    assert Memory.objects.get(id=update.target_memory_id).is_deleted


def test_the_queue_reads_which_updates_retire_their_target_in_one_query(
    pending, store, reviewer_client
):
    """The badge of each UPDATE row must not cost a query of its own (a review)."""
    base = pending["update"]

    def queries() -> int:
        with CaptureQueriesContext(connection) as ctx:
            assert reviewer_client.get("/review/").status_code == 200
        return len(ctx.captured_queries)

    def copies(n: int) -> None:
        for i in range(n):
            copy = Proposal.objects.get(id=base.id)
            copy.id, copy.position = f"copy-{n}-{i}", 100 + n * 10 + i
            copy.save(force_insert=True)

    copies(2)
    few = queries()
    copies(8)
    assert queries() == few


def test_nothing_is_applied_by_the_second_approval_while_frozen(pending, store):
    delete = pending["delete"]
    review.approve(delete.id, RITA)
    configure(mutationsFrozen=True)
    with pytest.raises(Refused) as refused:
        review.approve(delete.id, SAM)
    assert refused.value.code == "frozen"
    assert not Memory.objects.get(id=store.staging.id).is_deleted
    assert Approval.objects.get(proposal=delete).is_open


def test_with_one_approval_configured_a_delete_applies_at_once(fake_ollama, store):
    four_decisions(fake_ollama, store)
    job = raw(RAW_TEXT).job
    tasks.process_pending()
    delete = Proposal.objects.get(job=job, action="delete")
    assert review.approve(delete.id, RITA).status == "applied"


# --- bulk -----------------------------------------------------------------------------------------


def test_bulk_approval_counts_once_per_reviewer(pending, store):
    ids = [pending["add"].id, pending["delete"].id]
    first = {o.proposal_id: o for o in review.bulk_approve(ids, RITA, note="bulk")}
    assert first[pending["add"].id].done and not first[pending["add"].id].awaiting
    assert first[pending["delete"].id].done and first[pending["delete"].id].awaiting
    assert not Memory.objects.get(id=store.staging.id).is_deleted
    again = {o.proposal_id: o for o in review.bulk_approve([pending["delete"].id], RITA, note="b")}
    assert again[pending["delete"].id].yours  # left out: it waits for another reviewer
    (second,) = review.bulk_approve([pending["delete"].id], SAM, note="bulk")
    assert second.done and not second.awaiting
    assert Memory.objects.get(id=store.staging.id).is_deleted


def test_the_first_approvers_late_claim_does_not_hold_the_row_from_the_second(pending, store):
    delete, add = pending["delete"], pending["add"]
    review.claim(add.id, RITA)
    review.approve(delete.id, RITA)  # 1 of 2: her claims on it end with it
    # The claim her page sent when she focused the row lands after her approval.
    late = review.claim(delete.id, RITA)
    assert late.state == "free"
    assert not Claim.objects.filter(by="rita").exists()  # she moved on from the ADD too
    (second,) = review.bulk_approve([delete.id], SAM, note="bulk")
    assert second.done and Memory.objects.get(id=store.staging.id).is_deleted


def test_the_first_approver_can_still_take_the_row_over_to_reject_it(pending, store):
    delete = pending["delete"]
    review.approve(delete.id, RITA)
    review.claim(delete.id, SAM)
    assert review.claim(delete.id, RITA, takeover=True).state == "mine"  # on purpose: audited
    assert review.claim(delete.id, RITA).state == "mine"  # her page's focus keeps what she took
    assert review.reject(delete.id, RITA, reason="changed my mind").status == "rejected"
    assert not Memory.objects.get(id=store.staging.id).is_deleted


def test_the_bulk_preview_counts_no_second_approval_for_a_row_it_leaves_out(pending, store):
    """Found by a QA pass: a DELETE another reviewer holds was counted as needing two."""
    review.claim(pending["delete"].id, SAM)
    summary = review.bulk_summary(Proposal.objects.filter(status="pending"), "rita")
    assert (summary["claimed"], summary["two_person"]) == (1, 0)


def test_the_bulk_preview_leaves_out_what_this_reviewer_approved_already(pending, store):
    """Found by a QA pass: it offered "Approve 2 proposals?" for rows rita had approved, and
    the run approved none (each refused as the same approver)."""
    review.approve(pending["delete"].id, RITA)
    pending_rows = Proposal.objects.filter(status="pending")
    mine = review.bulk_summary(pending_rows, "rita")
    assert (mine["approved_by_you"], mine["two_person"]) == (1, 0)
    assert mine["approves"] == mine["total"] - 1
    theirs = review.bulk_summary(pending_rows, "sam")
    assert (theirs["approved_by_you"], theirs["approves"]) == (0, theirs["total"])
    # The run leaves it out as the preview said, refusing nothing (a second review).
    (outcome,) = review.bulk_approve([pending["delete"].id], RITA, note="bulk")
    assert outcome.yours and "you approved it already" in outcome.error
    assert Approval.objects.get(proposal=pending["delete"]).by == "rita"


def test_an_update_whose_text_a_memory_holds_shows_and_counts_as_needing_two(
    pending, store, reviewer_client
):
    """Approving it retires its target (a DELETE), so it needs two approvals; the queue showed
    a plain Approve and the bulk preview did not count it."""
    update = pending["update"]
    writes.remember(update.fact_content, actor=SAM, create_job=False)
    summary = review.bulk_summary(Proposal.objects.filter(id=update.id), "rita")
    assert summary["two_person"] == 1
    body = reviewer_client.get("/review/").content.decode()
    row = body[body.index(f'id="p-{update.id}"') :]
    assert "1 of 2" in row[: row.index("</tr>")]


def test_replace_as_the_second_approval_of_a_delete_the_old_one_is_refused_not_a_delete(
    pending, store, reviewer_client, sam_client
):
    """Found by a QA pass: rita chose "Delete the old one" on the workbench (1 of 2); sam's
    Replace then deleted the memory ("Approved: memory deleted"), the card having shown nothing
    of rita's approval. Replace now asks for the UPDATE by name; the card, the queue row and the
    proposal page say what the first approval applies."""
    update = pending["update"]
    target = update.target_memory_id
    Memory.objects.filter(id=target).update(asserted_by=Authority.PERSON)  # needs two
    Proposal.objects.filter(id=update.id).update(review_needed=True)  # on the workbench
    review.decide(update.id, RITA, "delete_old")
    card = sam_client.get("/contradictions/").content.decode()
    assert "rita approved this as DELETE (1 of 2)" in card
    assert 'name="decision" value="replace"' in card  # Replace says the UPDATE by name
    with pytest.raises(Refused) as refused:
        review.decide(update.id, SAM, "replace")
    assert refused.value.code == "approval_differs"
    assert not Memory.objects.get(id=target).is_deleted
    page = sam_client.get(f"/proposals/{update.id}/").content.decode()
    assert 'data-testid="approved-action">DELETE</strong>, not the proposed UPDATE' in page
    assert "Approve as DELETE (2 of 2)" in page
    review.decide(update.id, SAM, "delete_old")  # the same action: applied
    assert Memory.objects.get(id=target).is_deleted


def test_the_bulk_preview_counts_what_needs_a_second_approval(pending, store):
    summary = review.bulk_summary(Proposal.objects.filter(status="pending"), "rita")
    assert summary["two_person"] == 1  # the DELETE (the UPDATE's target is an agent's)
    configure(review__destructiveApprovals=1)
    assert review.bulk_summary(Proposal.objects.filter(status="pending"), "rita")["two_person"] == 0


# --- full mode ------------------------------------------------------------------------------------


@pytest.mark.parametrize("approvals,status", [(2, "pending"), (1, "applied")])
def test_full_mode_leaves_a_delete_for_two_reviewers(fake_ollama, store, approvals, status):
    set_mode("full")
    configure(review__destructiveApprovals=approvals)
    four_decisions(fake_ollama, store)
    job = raw(RAW_TEXT).job
    tasks.process_pending()
    delete = Proposal.objects.get(job=job, action="delete")
    update = Proposal.objects.get(job=job, action="update")
    assert delete.status == status and update.status == "applied"
    assert delete.blocked_reason == ("two_person_rule" if approvals == 2 else None)
    assert Memory.objects.get(id=store.staging.id).is_deleted == (approvals == 1)


def test_the_setting_is_one_or_two(multi_admin, client, db):
    for bad in (0, 3, 1.5):
        response = client.patch(
            "/api/pipeline/config",
            json.dumps({"review": {"destructiveApprovals": bad}, "reason": "t"}),
            content_type="application/json",
            **multi_admin,
        )
        assert response.status_code == 400
    response = client.patch(
        "/api/pipeline/config",
        json.dumps({"review": {"destructiveApprovals": 2, "claimMinutes": 3}, "reason": "team"}),
        content_type="application/json",
        **multi_admin,
    )
    assert response.json()["review"] == {
        "staleHours": 24,
        "claimMinutes": 3,
        "destructiveApprovals": 2,
    }


# --- exactly once under a race --------------------------------------------------------------------


@pytest.mark.django_db(transaction=True)
def test_two_second_approvers_racing_apply_it_once(file_db):
    configure(review__destructiveApprovals=2)
    targets = [
        writes.remember(f"Host alpha-{n} serves the lab.", actor=RITA).memory for n in range(8)
    ]
    set_mode("shadow")
    ids = []
    for n, target in enumerate(targets):
        # A DELETE proposal per target, each already approved once by rita.
        ids.append(pending_delete(target, n).id)
        review.approve(ids[-1], RITA)
    outcomes: dict[str, list] = {"sam": [], "tess": []}
    errors: list[str] = []
    barrier = threading.Barrier(2)

    def second(name: str, order: list[str]) -> None:
        try:
            barrier.wait()
            for proposal_id in order:
                try:
                    review.approve(proposal_id, Actor(name, "operator"))
                    outcomes[name].append((proposal_id, "applied"))
                except Refused as refused:
                    outcomes[name].append((proposal_id, refused.code))
        except Exception as exc:
            errors.append(f"{name}: {exc!r}")
        finally:
            connections.close_all()

    threads = [
        threading.Thread(target=second, args=("sam", ids)),
        threading.Thread(target=second, args=("tess", ids[::-1])),
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert errors == []
    for proposal_id in ids:
        codes = sorted(
            code for name in outcomes for pid, code in outcomes[name] if pid == proposal_id
        )
        assert codes == ["already_decided", "applied"]
        assert Approval.objects.filter(proposal_id=proposal_id, position=2).count() == 1
        deletes = MemoryHistory.objects.filter(event="deleted", metadata__proposalId=proposal_id)
        assert deletes.count() == 1
    assert all(t.is_deleted for t in Memory.objects.filter(id__in=[t.id for t in targets]))


# --- the dashboard --------------------------------------------------------------------------------


@pytest.fixture
def sam_client(role_users):
    from django.contrib.auth.models import Group, User
    from django.test import Client

    user = User.objects.create_user("sam", password="pw-sam")
    user.groups.add(Group.objects.get(name="reviewer"))
    client = Client()
    client.force_login(user)
    return client


def decide(client, proposal, hx, **data):
    return client.post(
        f"/proposals/{proposal.id}/decide/", {"decision": "approve", "from": "row", **data}, **hx
    )


def test_the_queue_row_counts_approvals_and_refuses_the_same_reviewer(
    reviewer_client, sam_client, pending, store, hx
):
    delete = pending["delete"]
    row = reviewer_client.get("/review/?action=delete").content.decode()
    assert 'data-testid="two-person"' in row and "Approve (1 of 2)" in row
    first = decide(reviewer_client, delete, hx)
    body = first.content.decode()
    assert "Approval 1 of 2 recorded for rita" in body
    assert f"/proposals/{delete.id}/undo/" in first.headers["HX-Trigger"]  # Undo withdraws it
    again = decide(reviewer_client, delete, hx).content.decode()
    assert "You already approved this proposal" in again
    assert "Ask another reviewer to approve it, or reject it." in again
    assert not Memory.objects.get(id=store.staging.id).is_deleted
    shown = sam_client.get("/review/?action=delete").content.decode()
    assert "Approve (2 of 2)" in shown and "Approved by <strong>rita</strong> (1 of 2)" in shown
    second = decide(sam_client, delete, hx).content.decode()
    assert "Approved by sam: memory deleted." in second
    assert Memory.objects.get(id=store.staging.id).is_deleted


def test_the_second_reviewer_sees_in_the_queue_the_text_the_first_approved(
    reviewer_client, sam_client, pending, store, hx
):
    """The second approval applies what the first approved: the queue row shows that text (the
    first reviewer's edit), not the model's, and offers no edit in between."""
    update = pending["update"]
    Memory.objects.filter(id=store.postgres.id).update(asserted_by=Authority.PERSON)
    edited = "The billing service runs on Postgres 16 <b>since</b> March"
    first = decide(reviewer_client, update, hx, content=edited)
    assert "Approval 1 of 2 recorded for rita" in first.content.decode()
    page = sam_client.get("/review/?action=update").content.decode()
    row = page[page.index(f'id="p-{update.id}"') :]
    row = row[: row.index("</tr>")]
    fact = row[row.index('data-testid="approved-text"') : row.index('data-testid="edited"')]
    assert escape(edited) in fact and edited not in row  # shown, and escaped
    assert "as rita edited it in the first approval" in row and update.fact_content[:40] in row
    assert 'data-reveal="edit"' not in row and "Approve (2 of 2)" in row
    # Before any approval, the row shows the model's text and its edit form, as ever.
    other = pending["delete"]
    page = sam_client.get("/review/?action=delete").content.decode()
    row = page[page.index(f'id="p-{other.id}"') :]
    assert 'data-testid="approved-text"' not in row[: row.index("</tr>")]
    assert decide(sam_client, update, hx).status_code == 200
    assert Memory.objects.get(id=store.postgres.id).content == edited


def test_the_settings_page_says_when_the_rule_is_on(admin_client_role, pending):
    assert 'data-testid="two-person-note"' in admin_client_role.get("/settings/").content.decode()
    configure(review__destructiveApprovals=1)
    assert (
        'data-testid="two-person-note"' not in admin_client_role.get("/settings/").content.decode()
    )


@pytest.mark.parametrize("page", ["detail", "card"])
def test_a_decision_refused_as_decided_meanwhile_gives_back_what_was_typed(
    pending, store, sam_client, hx, page
):
    """Found by a QA pass: on the proposal page the refusal was silent (the page came back with
    "applied", no error) and the edited text and note were lost; on the workbench's card the note
    said why, but the typed text went with the form."""
    configure(review__destructiveApprovals=1)
    add = pending["add"]
    review.approve(add.id, RITA)  # decided while sam was typing
    typed = {"decision": "approve", "from": page, "content": "Sam's edited fact", "reason": "why"}
    headers = hx if page == "card" else {}
    body = sam_client.post(f"/proposals/{add.id}/decide/", typed, **headers).content.decode()
    assert 'data-testid="decide-refused"' in body or 'data-testid="row-note"' in body
    kept = body[body.index('data-testid="kept-edit"') :]
    assert "Sam&#x27;s edited fact" in kept[: kept.index("</textarea>")]
    assert "why" in kept[: kept.index("</textarea>")]


# --- a token held by a reviewer -------------------------------------------------------------------


def _held_by(owner: str) -> dict:
    from api.auth import create_token

    _, plain = create_token(f"{owner.lower()}-cli", scopes=["review"], owner=owner)
    return {"HTTP_AUTHORIZATION": f"Bearer {plain}"}


def test_a_token_held_by_a_reviewer_is_that_reviewer_for_the_rule(
    client, reviewer_client, sam_client, pending, store, hx
):
    """Found by a QA pass: a person holding a review token and a dashboard login gave both
    approvals. A token created with --owner reviews as its owner, in either order."""
    delete = pending["delete"]
    rita_cli = _held_by("RITA")  # any case: the stored owner is the user's own name
    assert (
        "Approval 1 of 2 recorded for rita" in decide(reviewer_client, delete, hx).content.decode()
    )
    again = approve(client, rita_cli, delete)
    assert again.status_code == 409 and again.json()["error"] == "same_approver"
    assert not Memory.objects.get(id=store.staging.id).is_deleted

    second = approve(client, _held_by("sam"), delete)
    assert second.status_code == 200 and second.json()["decidedBy"] == "sam"
    rounds = list(Approval.objects.filter(proposal=delete).values_list("by", "position"))
    assert rounds == [("rita", 1), ("sam", 2)]
    deleted = MemoryHistory.objects.get(memory_id=store.staging.id, event="deleted")
    assert (deleted.changed_by, deleted.actor_type) == ("sam", "operator")


def test_a_first_approval_through_a_held_token_stops_its_owner_in_the_dashboard(
    client, reviewer_client, pending, store, hx
):
    delete = pending["delete"]
    first = approve(client, _held_by("rita"), delete)
    assert first.status_code == 202 and [a["by"] for a in first.json()["approvals"]] == ["rita"]
    assert (
        "You already approved this proposal" in decide(reviewer_client, delete, hx).content.decode()
    )
    assert not Memory.objects.get(id=store.staging.id).is_deleted


def test_a_first_approval_is_withdrawn_from_its_row_or_its_page_and_the_trail_says_so(
    reviewer_client, pending, store, hx
):
    """Found by a QA pass: a first approval could be withdrawn from the toast only; the row, the
    card and the proposal page offered Reject, which ends the round for everyone."""
    delete = pending["delete"]
    decide(reviewer_client, delete, hx)
    row = reviewer_client.get("/review/?action=delete").content.decode()
    assert 'data-testid="withdraw"' in row
    response = reviewer_client.post(
        f"/proposals/{delete.id}/undo/", HTTP_HX_TARGET=f"p-{delete.id}", **hx
    )
    assert (
        "First approval withdrawn by rita" in json.loads(response["HX-Trigger"])["toast"]["message"]
    )
    assert "Approve (1 of 2)" in response.content.decode()
    assert not Approval.objects.filter(proposal=delete, outcome="open").exists()

    decide(reviewer_client, delete, hx)
    page = reviewer_client.get(f"/proposals/{delete.id}/").content.decode()
    assert f'formaction="/proposals/{delete.id}/undo/"' in page
    reviewer_client.post(f"/proposals/{delete.id}/undo/", {"reason": "asked too early"})
    assert Proposal.objects.get(id=delete.id).is_pending
    page = reviewer_client.get(f"/proposals/{delete.id}/").content.decode()
    trail = page[page.index('data-testid="proposal-trail"') :]
    assert trail.count('data-testid="trail-event">first approval withdrawn<') == 2
    assert "asked too early" in trail
    assert not Memory.objects.get(id=store.staging.id).is_deleted


def test_the_changed_memorys_own_trail_names_both_approvers(pending, store):
    """Found by a QA pass: the deleted memory's trail and lineage named the second approver
    only; the first was on the raw memory's timeline alone."""
    from dashboard import lineage

    delete = pending["delete"]
    review.approve(delete.id, RITA)
    review.approve(delete.id, SAM)
    deleted = MemoryHistory.objects.get(memory_id=store.staging.id, event="deleted")
    assert deleted.changed_by == "sam" and deleted.metadata["approvals"] == ["rita", "sam"]
    steps = lineage.build(Memory.objects.get(id=store.staging.id))
    forgotten = next(s for s in steps if s.kind == "deleted")
    assert "approved by rita, then sam (two approvals)" in forgotten.text


def test_a_card_of_your_own_first_approval_offers_withdraw_and_refuses_a_second_as_yours(
    pending, store, reviewer_client, hx
):
    """Found by a day of reviewing: the workbench's card of rita's own first approval was
    focused first, offered Replace, Keep both, Merge and Delete the old one, and pressing them
    answered that "rita approved this as DELETE", twice over, instead of "you already approved"."""
    update = pending["update"]
    Memory.objects.filter(id=update.target_memory_id).update(asserted_by=Authority.PERSON)
    Proposal.objects.filter(id=update.id).update(review_needed=True)
    review.decide(update.id, RITA, "delete_old")
    page = reviewer_client.get("/contradictions/").content.decode()
    card = page[page.index(f'id="c-{update.id}"') :]
    card = card[: card.index("</article>")]
    assert 'data-open="1"' not in card[:200]  # the keyboard passes it by
    assert "You approved this as DELETE (1 of 2)" in card and 'data-testid="withdraw"' in card
    assert 'value="replace"' not in card and 'value="delete_old"' not in card
    assert "Merge: edit the text first" not in card
    assert 'value="reject"' in card  # Keep existing still ends the round
    answer = reviewer_client.post(
        f"/proposals/{update.id}/decide/", {"decision": "replace", "from": "card"}, **hx
    ).content.decode()
    assert "You already approved this proposal" in answer
    assert "rita approved this as DELETE with the text shown" not in answer
    withdrawn = reviewer_client.post(
        f"/proposals/{update.id}/undo/", **{**hx, "HTTP_HX_TARGET": f"c-{update.id}"}
    )
    assert withdrawn.status_code == 200 and not Approval.objects.filter(outcome="open").exists()


def test_a_round_opened_under_the_rule_is_approvable_once_the_rule_is_off(
    pending, store, reviewer_client, hx
):
    """Found by a day of reviewing: after the rule was turned off, the queue kept rita's row at
    "1 of 2" with no Approve, while the workbench's card applied it at once: the page and the
    write counted differently. Both count by the setting now."""
    delete = pending["delete"]
    review.decide(delete.id, RITA, "approve")
    configure(review__destructiveApprovals=1)
    row = reviewer_client.get("/review/?action=delete").content.decode()
    row = row[row.index(f'id="p-{delete.id}"') :]
    row = row[: row.index("</tr>")]
    assert 'data-action="approve"' in row and "(1 of 2)" not in row
    assert "the two-person rule is off now, and an approval applies it" in row
    assert "Approved by rita" in decide(reviewer_client, delete, hx).content.decode()
    assert Memory.objects.get(id=store.staging.id).is_deleted


def test_a_first_approval_says_what_it_did_though_a_second_lands_right_after_it(pending, store):
    """Found by a QA pass on PostgreSQL: two reviewers approving at once, the first was told 200
    "pending" with no approvals (or "applied"): its answer read the proposal after the second
    approval had committed. The answer is read under the first approval's own lock."""
    from api.serializers import approvals_json

    delete = pending["delete"]
    first = review.approve(delete.id, RITA, force=True)
    review.approve(delete.id, SAM, force=True)  # lands before the first's answer is written
    assert first.awaiting_second_approval
    assert [a["by"] for a in approvals_json(first)] == ["rita"]
    assert Proposal.objects.get(id=delete.id).status == "applied"


def test_a_round_the_rule_opened_for_a_delete_instead_of_a_plain_update_stays_two_on_the_pages(
    pending, store, reviewer_client
):
    """A second review: after rita's "Delete the old one" of an UPDATE the rule does not hold
    by itself (its target neither pinned nor a person's), the pages said "the two-person rule
    is off now" and offered her Approve, which the write refused. The open round counts."""
    update = pending["update"]
    Proposal.objects.filter(id=update.id).update(review_needed=True)
    review.decide(update.id, RITA, "delete_old")
    row = reviewer_client.get("/review/?action=update").content.decode()
    row = row[row.index(f'id="p-{update.id}"') :]
    row = row[: row.index("</tr>")]
    assert "(1 of 2): a second reviewer's approval applies it" in row
    assert 'data-testid="withdraw"' in row and "rule is off now" not in row
    assert 'data-open="1"' not in row[:300]
    page = reviewer_client.get(f"/proposals/{update.id}/").content.decode()
    assert 'data-testid="withdraw"' in page and "rule is off now" not in page


def test_the_admin_refuses_to_rename_a_reviewer_whose_first_approval_waits(
    pending, admin_client_role, role_users
):
    # Found by a QA pass: rita approved first, an admin renamed her, and "rita2" gave the second
    # approval: one person, two reviewers by name.
    rita = role_users["reviewer"]
    review.approve(pending["delete"].id, Actor(rita.username, "operator"))
    form = {"is_active": "on", "date_joined_0": "2025-01-01", "date_joined_1": "00:00:00"}
    change = f"/admin/auth/user/{rita.pk}/change/"
    refused = admin_client_role.post(change, {**form, "username": "rita2"})
    assert "gave the first of two approvals to 1 proposal that waits" in refused.content.decode()
    rita.refresh_from_db()
    assert rita.username == "rita"
    review.undo(pending["delete"].id, Actor("rita", "operator"))  # withdrawn: the name is free
    renamed = admin_client_role.post(change, {**form, "username": "rita2", "groups": []})
    assert renamed.status_code == 302
    rita.refresh_from_db()
    assert rita.username == "rita2"
