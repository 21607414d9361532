"""A NONE decision whose fact contradicts the memory it names waits for a reviewer (DESIGN §5's
detector, run on NONE too): the workbench's Replace applies the fact as an UPDATE, Keep both as
an ADD, Keep existing rejects it; approving it as it is applies nothing and says what would; an
applied Replace is undone like any UPDATE. Through the fake model server, on either engine."""

import json

import pytest

from memory.models import Memory
from memory.writes import Actor, Refused
from pipeline import review, tasks
from pipeline.models import Proposal
from tests.pipeline_support import (
    CONTRADICTING_FACT,
    ScriptedModel,
    decision,
    raw,
    seed_store,
    set_mode,
)

pytestmark = pytest.mark.django_db

RITA = Actor("rita", "operator")


@pytest.fixture
def flagged_none(fake_ollama) -> Proposal:
    store = seed_store()
    set_mode("full")
    ScriptedModel(
        fake_ollama,
        facts=[CONTRADICTING_FACT],
        decisions={CONTRADICTING_FACT: decision("none", store.postgres)},
    )
    raw("The team says the billing service does not run on Postgres 14 any more.")
    tasks.process_pending()
    proposal = Proposal.objects.get(action="none")
    assert proposal.status == "pending" and proposal.review_needed
    return proposal


def test_replace_applies_the_fact_as_an_update_of_the_memory_it_contradicts(flagged_none):
    decided = review.decide(flagged_none.id, RITA, "replace")
    assert (decided.status, decided.applied_as) == ("applied", "update")
    target = Memory.objects.get(id=flagged_none.target_memory_id)
    assert target.content == CONTRADICTING_FACT and target.version == 2
    assert decided.updated_memory_id == target.id

    undone = review.undo(flagged_none.id, RITA, reason="the model was right")
    assert undone.status == "pending"
    target.refresh_from_db()
    assert target.content == flagged_none.target_content


def test_keep_both_adds_the_fact_beside_the_memory(flagged_none):
    decided = review.decide(flagged_none.id, RITA, "keep_both")
    assert (decided.status, decided.applied_as) == ("applied", "add")
    assert Memory.objects.get(id=decided.created_memory_id).content == CONTRADICTING_FACT
    assert Memory.objects.get(id=flagged_none.target_memory_id).version == 1


def test_keep_existing_rejects_it_and_changes_nothing(flagged_none):
    decided = review.decide(flagged_none.id, RITA, "reject", reason="still on 14")
    assert decided.status == "rejected"
    assert Memory.objects.get(id=flagged_none.target_memory_id).version == 1


def test_approving_it_as_it_is_applies_nothing_and_says_what_would(flagged_none):
    with pytest.raises(Refused) as refused:
        review.decide(flagged_none.id, RITA, "approve")
    assert refused.value.code == "invalid_action"
    assert "approve it as an update (Replace)" in refused.value.message
    flagged_none.refresh_from_db()
    assert flagged_none.status == "pending"


def test_the_api_approves_it_as_an_update_and_refuses_it_as_it_is(
    client, review_auth, flagged_none
):
    url = f"/api/proposals/{flagged_none.id}/approve"
    plain = client.post(url, "{}", content_type="application/json", **review_auth)
    assert plain.status_code == 400
    assert plain.json()["error"] == "invalid_action"
    assert "contradicts the memory it names" in plain.json()["message"]
    body = json.dumps({"action": "update"})
    applied = client.post(url, body, content_type="application/json", **review_auth)
    assert applied.status_code == 200, applied.json()
    assert applied.json()["appliedAs"] == "update" and applied.json()["action"] == "none"
    assert Memory.objects.get(id=flagged_none.target_memory_id).content == CONTRADICTING_FACT


def test_the_queue_row_shows_the_memory_and_sends_the_reviewer_to_the_workbench(
    reviewer_client, flagged_none
):
    page = reviewer_client.get("/review/").content.decode()
    row = page[page.index(f'id="p-{flagged_none.id}"') :]
    row = row[: row.index("</tr>")]
    assert "the model kept this memory, which the fact contradicts" in row
    assert flagged_none.target_content in row
    assert 'data-testid="to-workbench"' in row and f"?card={flagged_none.id}#c-" in row
    assert 'data-action="approve"' not in row  # "a" would apply nothing
    assert 'data-reveal="edit"' not in row and 'data-reveal-button="edit"' not in row


def test_the_workbench_card_says_the_model_proposed_no_change_and_replace_applies_it(
    reviewer_client, hx, flagged_none
):
    page = reviewer_client.get("/contradictions/").content.decode()
    card = page[page.index(f'id="c-{flagged_none.id}"') :]
    assert "The model proposed no change. The new fact" in card[: card.index("</article>")]
    answer = reviewer_client.post(
        f"/proposals/{flagged_none.id}/decide/", {"decision": "replace", "from": "card"}, **hx
    )
    assert answer.status_code == 200
    flagged_none.refresh_from_db()
    assert (flagged_none.status, flagged_none.applied_as) == ("applied", "update")
    assert Memory.objects.get(id=flagged_none.target_memory_id).content == CONTRADICTING_FACT


def test_the_proposal_page_offers_the_workbench_not_an_approval_that_applies_nothing(
    reviewer_client, flagged_none
):
    page = reviewer_client.get(f"/proposals/{flagged_none.id}/").content.decode()
    assert 'data-testid="to-workbench"' in page
    assert 'name="decision" value="approve"' not in page and 'id="content"' not in page
    assert "The model said this memory already covers it:" in page
    assert 'value="reject"' in page  # keeping the memory as it is stays one click


def test_a_stale_flagged_none_applies_to_the_current_version_as_its_replace(flagged_none):
    from memory import writes

    writes.modify(
        flagged_none.target_memory_id,
        {"content": "The billing service runs on Postgres 14 in eu-west-1"},
        actor=RITA,
        reason="region",
    )
    with pytest.raises(Refused):
        review.decide(flagged_none.id, RITA, "replace")  # the memory moved on: stale
    flagged_none.refresh_from_db()
    assert flagged_none.status == "stale"
    decided = review.decide(flagged_none.id, RITA, "redecide")
    assert (decided.status, decided.applied_as) == ("applied", "update")
    assert Memory.objects.get(id=flagged_none.target_memory_id).content == CONTRADICTING_FACT


def test_a_rejected_flagged_none_stated_again_is_suppressed_not_asked_again(flagged_none):
    review.decide(flagged_none.id, RITA, "reject", reason="still on 14")
    raw("Again: the billing service does not run on Postgres 14 any more.")
    tasks.process_pending()
    again = Proposal.objects.exclude(id=flagged_none.id).get(action="none")
    assert (again.status, again.skipped_reason) == ("suppressed", "rejected_before")


def test_a_flagged_none_sorts_with_the_updates_it_may_become(flagged_none):
    from pipeline.models import RISK_OF

    assert flagged_none.risk == RISK_OF["update"]


def test_the_memorys_lineage_says_a_raw_memory_contradicts_it_not_that_it_said_it_again(
    reviewer_client, flagged_none
):
    page = reviewer_client.get(f"/memories/{flagged_none.target_memory_id}/").content.decode()
    assert "contradicts this memory" in page and "decided NONE (nothing to change)" in page
    assert "said this again" not in page
    assert CONTRADICTING_FACT in page  # the contradicting fact is quoted


def test_the_workbench_link_opens_its_card_even_behind_a_page_of_older_ones(
    reviewer_client, flagged_none
):
    from datetime import timedelta

    older = Proposal.objects.filter(id=flagged_none.id).values()[0]
    for n in range(21):  # a full page of older flagged cards ahead of it
        Proposal.objects.create(
            **{
                **older,
                "id": f"older-{n:02d}",
                "fingerprint": f"older-{n}",
                "created_at": older["created_at"] - timedelta(minutes=30 - n),
            }
        )
    first_page = reviewer_client.get("/contradictions/").content.decode()
    assert f'id="c-{flagged_none.id}"' not in first_page
    asked = reviewer_client.get(f"/contradictions/?card={flagged_none.id}").content.decode()
    assert f'id="c-{flagged_none.id}"' in asked and 'data-testid="one-card"' in asked
    assert asked.count('class="card contradiction"') == 1


def test_apply_to_the_current_version_completes_a_round_with_what_the_first_approved(
    flagged_none,
):
    # A second review: a first approval "Delete the old one" under the two-person rule, then a
    # re-decide with no action, was refused as differing (it was turned into a Replace).
    from tests.pipeline_support import configure

    configure(review__destructiveApprovals=2)
    review.decide(flagged_none.id, RITA, "delete_old")  # the first of two
    decided = review.approve(flagged_none.id, Actor("sam", "operator"), redecide=True)
    assert (decided.status, decided.applied_as) == ("applied", "delete")
    assert Memory.objects.get(id=flagged_none.target_memory_id).is_deleted


def test_a_flagged_none_saved_again_keeps_its_rank_and_a_gone_card_says_where_it_went(
    reviewer_client, flagged_none
):
    from pipeline.models import RISK_OF

    flagged_none.save()
    assert flagged_none.risk == RISK_OF["update"]
    review.decide(flagged_none.id, RITA, "reject", reason="still on 14")
    page = reviewer_client.get(f"/contradictions/?card={flagged_none.id}").content.decode()
    assert "waits here no more" in page and f"/proposals/{flagged_none.id}/" in page
    assert "No contradictions waiting" not in page


def test_bulk_approval_leaves_it_for_the_workbench_and_the_preview_says_so(
    flagged_none, reviewer_client, hx
):
    """A second review: the destructive queue now holds flagged NONEs, and a bulk approval
    over it answered an error per row (approved as they are, they apply nothing)."""
    (outcome,) = review.bulk_approve([flagged_none.id], RITA, note="ok")
    assert outcome.error == review.CONTRADICTING_NONE_LEFT_FOR_THE_WORKBENCH
    assert Proposal.objects.get(id=flagged_none.id).status == "pending"
    form = {"decision": "approve", "scope": "selected", "ids": flagged_none.id, "filters": ""}
    preview = reviewer_client.post(
        "/review/bulk/", {**form, "step": "preview"}, **hx
    ).content.decode()
    assert 'data-testid="bulk-contradicting-none">1 NONE whose fact contradicts its memory' in (
        preview
    )
    assert 'data-testid="bulk-none"' in preview  # nothing left to approve in bulk
