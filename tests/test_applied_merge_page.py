"""The proposal page of an applied merge (#19 item 6): the diff runs from the target as it was
before the change to the text applied, the merged text is shown, and "the target changed" is
said only when something other than the proposal's own change moved the target on."""

import html
import re

import pytest

from memory.models import Memory
from memory.writes import Actor, modify
from pipeline import review as reviewing
from pipeline.models import Proposal
from pipeline.writes.config import update_config

pytestmark = pytest.mark.django_db
RITA = Actor("rita", "operator")
BEFORE = "Automatic staging deploys are enabled for every service."
MERGED = "Automatic staging deploys were enabled for every service until this week."


@pytest.fixture
def flagged(pipeline_run):
    """A contradicting UPDATE of the memory BEFORE (v1), waiting for review (offline model)."""
    update_config({"shadowMode": False}, changed_by="t", reason="t")
    pipeline_run(
        "The team uses Kafka for billing events. Standup notes from Monday.",
        f"{BEFORE} Noted by the release bot.",
    )
    update_config({"shadowMode": True}, changed_by="t", reason="t")
    pipeline_run("Automatic staging deploys are disabled for every service. Noted by the bot.")
    proposal = Proposal.objects.get(
        action="update", review_needed=True, target_memory__content=BEFORE
    )
    assert proposal.target_version == proposal.target_memory.version == 1
    return proposal


@pytest.fixture
def merged(flagged):
    """The reviewer merged both texts into one: the target is at v2, written by this proposal."""
    proposal = reviewing.decide(flagged.id, RITA, "merge", content=MERGED)
    assert proposal.status == "applied" and proposal.applied_content == MERGED
    assert Memory.objects.get(id=proposal.target_memory_id).version == 2
    return proposal


def _page(client, proposal) -> str:
    response = client.get(f"/proposals/{proposal.id}/")
    assert response.status_code == 200
    return response.content.decode()


def _diff(page: str) -> str:
    return re.search(r'data-testid="diff">(.*?)</div>', page, re.S).group(1)


def test_the_merge_is_not_called_a_change_of_the_target_since_the_decision(viewer_client, merged):
    page = _page(viewer_client, merged)
    assert 'data-testid="target-changed"' not in page
    assert "The target changed" not in page


def test_a_later_edit_by_someone_else_is_flagged_from_the_version_the_merge_wrote(
    viewer_client, merged
):
    modify(
        merged.target_memory_id,
        {"content": "Staging deploys are manual now."},
        actor=Actor("kenji", "operator"),
        reason="deploys changed again",
        if_version=2,
    )
    page = html.unescape(_page(viewer_client, merged))
    note = re.search(r'data-testid="target-changed">(.*?)</p>', page, re.S).group(1)
    assert "changed after this proposal was applied (v2 → v3)" in note
    assert "Staging deploys are manual now." in note


def test_a_pending_update_still_flags_a_target_edited_since_the_decision(viewer_client, flagged):
    modify(
        flagged.target_memory_id,
        {"content": "Staging deploys are manual now."},
        actor=Actor("kenji", "operator"),
        reason="edit",
    )
    page = html.unescape(_page(viewer_client, flagged))
    assert "The target changed since the decision (v1 → v2)" in page


def test_the_diff_runs_from_the_target_before_to_the_applied_text(viewer_client, merged):
    page = _page(viewer_client, merged)
    diff = _diff(page)
    assert "<del>are</del>" in diff and "<ins>were</ins>" in diff
    assert "<ins>service until this week.</ins>" in diff
    assert "<del>were</del>" not in diff and "until this week.</del>" not in diff
    assert "Target before (v1) → applied text" in html.unescape(page)


def test_the_applied_text_is_shown_with_the_models_own_text_beside_it(viewer_client, merged):
    page = html.unescape(_page(viewer_client, merged))
    applied = re.search(r'data-testid="applied-text">(.*?)</div>', page, re.S).group(1)
    assert applied == MERGED
    model_text = re.search(r'data-testid="model-text">(.*?)</p>', page, re.S).group(1)
    assert merged.fact_content in model_text


def test_a_pending_update_diffs_the_current_target_to_the_proposed_text(viewer_client, flagged):
    diff = _diff(_page(viewer_client, flagged))
    assert "<del>enabled</del>" in diff and "<ins>disabled</ins>" in diff
