"""Agreement under the two-person rule (issue 26, item 6): per reviewer and action, how often the
second reviewer agreed with a first approval and how often the final outcome overturned it, on
the analytics page, with a query count that does not grow with the approvals."""

import re

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from memory.models import Memory
from memory.writes import Actor
from pipeline import agreement, review
from pipeline.analytics import Filters
from tests.pipeline_support import configure, pending_delete, seed

RITA, SAM = Actor("rita", "operator"), Actor("sam", "operator")


@pytest.fixture
def decided(db):
    """rita approves six DELETEs first: sam agrees on two (one of them reverted later), rejects
    one, rita rejects one herself, one still waits; sam approves one first and rita agrees."""
    configure(review__destructiveApprovals=2)
    p = [pending_delete(seed(f"Host alpha-{n} serves the lab."), n) for n in range(7)]
    for proposal in p[:6]:
        review.approve(proposal.id, RITA)
    review.approve(p[0].id, SAM)  # agreed, upheld
    review.approve(p[1].id, SAM)  # agreed, then reverted: overturned
    review.revert_once(p[1].id, SAM)
    review.reject(p[2].id, SAM, reason="still serves")  # disagreed: overturned
    review.reject(p[3].id, RITA, reason="second thoughts")  # not seconded, overturned
    review.approve(p[4].id, SAM)
    review.undo(p[4].id, SAM)  # agreed, then undone: overturned
    # p[5] waits for its second approval: counted nowhere.
    review.approve(p[6].id, SAM)
    review.approve(p[6].id, RITA)
    return p


def test_agreement_counts_seconded_agreed_settled_and_overturned(decided):
    report = agreement.agreement(Filters(days=None))
    by_name = {row["reviewer"]: row for row in report["reviewers"]}
    rita = by_name["rita"]["total"]
    assert (rita.seconded, rita.agreed, rita.settled, rita.overturned) == (4, 3, 5, 4)
    assert rita.agreement_rate == pytest.approx(3 / 4)
    assert rita.overturn_rate == pytest.approx(4 / 5)
    assert [a.action for a in by_name["rita"]["actions"]] == ["delete"]
    sam = by_name["sam"]["total"]
    assert (sam.seconded, sam.agreed, sam.settled, sam.overturned) == (1, 1, 1, 0)
    assert report["team"].settled == 6


@pytest.mark.parametrize("undo", ["undo", "reopen"])
def test_an_undone_rejection_settles_nothing_and_the_next_outcome_counts(db, undo):
    """rita approves first, sam rejects, then takes the rejection back and approves: the change
    applied as rita approved it. The undone rejection counted as a second, overturned round (a
    QA pass: 2 settled, 1 overturned, where the one outcome agreed with her)."""
    configure(review__destructiveApprovals=2)
    proposal = pending_delete(seed("Host beta-1 serves the lab."), 1)
    review.approve(proposal.id, RITA)
    review.reject(proposal.id, SAM, reason="not sure yet")
    getattr(review, undo)(proposal.id, SAM)
    review.approve(proposal.id, RITA)
    review.approve(proposal.id, SAM)
    by_name = {row["reviewer"]: row for row in agreement.agreement(Filters(days=None))["reviewers"]}
    rita = by_name["rita"]["total"]
    assert (rita.seconded, rita.agreed, rita.settled, rita.overturned) == (1, 1, 1, 0)


def test_an_update_of_a_pinned_memory_counts_under_its_action(decided):
    target = seed("The billing service runs on Postgres 14")
    Memory.objects.filter(id=target.id).update(pinned=True)
    target.refresh_from_db()
    update = pending_delete(target, 9, action="update")
    review.approve(update.id, RITA, force=True)
    review.approve(update.id, SAM, force=True)
    rita = {row["reviewer"]: row for row in agreement.agreement(Filters(days=None))["reviewers"]}
    actions = {a.action: a for a in rita["rita"]["actions"]}
    assert (actions["update"].seconded, actions["update"].agreed) == (1, 1)
    only_updates = agreement.agreement(Filters(days=None, action="update"))
    assert only_updates["team"].settled == 1


def test_the_analytics_page_shows_agreement_per_reviewer_and_action(viewer_client, decided):
    body = viewer_client.get("/analytics/?days=all").content.decode()
    row = re.search(r'<tr data-reviewer="rita" data-action="all">.*?</tr>', body, re.S).group(0)
    cells = re.findall(r'<td class="num"><strong>([^<]*)</strong></td>', row)
    assert cells == ["4", "3", "75%", "5", "4", "80%"]
    assert 'data-reviewer="rita" data-action="delete"' in body
    assert "Agreement under the two-person rule" in body


def test_the_analytics_page_costs_the_same_whatever_the_approvals(viewer_client, decided):
    def count() -> int:
        with CaptureQueriesContext(connection) as ctx:
            assert viewer_client.get("/analytics/?days=all").status_code == 200
        return len(ctx.captured_queries)

    few = count()
    more = [pending_delete(seed(f"Host beta-{n} serves the lab."), 20 + n) for n in range(5)]
    for proposal in more:
        review.approve(proposal.id, SAM)
        review.reject(proposal.id, RITA, reason="no")
    assert count() == few


def test_without_two_person_rounds_the_page_says_how_to_get_them(viewer_client, db):
    body = viewer_client.get("/analytics/").content.decode()
    assert "No first approval was decided in this period" in body


def test_the_migration_reopens_the_rounds_of_rejections_undone_before_it(db):
    """Migration 0022 gives rounds rejected on a proposal that is no longer rejected (undone
    before the reopened outcome existed) that outcome; a rejection that stands stays."""
    import importlib

    from django.apps import apps

    from pipeline.team import Approval

    configure(review__destructiveApprovals=2)
    undone, standing = (pending_delete(seed(f"Host gamma-{n} serves the lab."), n) for n in (1, 2))
    for proposal in (undone, standing):
        review.approve(proposal.id, RITA)
        review.reject(proposal.id, SAM, reason="not sure yet")
    review.reopen(undone.id, SAM)
    Approval.objects.filter(proposal=undone).update(outcome="rejected")  # as before 0022
    migration = importlib.import_module("pipeline.migrations.0022_approval_reopened")
    migration.reopen_undone_rejections(apps, None)
    assert Approval.objects.get(proposal=undone).outcome == "reopened"
    assert Approval.objects.get(proposal=standing).outcome == "rejected"
