"""Second opinion in a real browser: compare a review slice with another model, then adopt.

The run is queued by the page; the test plays the worker, and the page shows the answers as it polls.
"""

import json

import pytest
from playwright.sync_api import expect

from memory.models import Memory
from pipeline.models import Proposal
from pipeline.writes.config import update_config
from tests.conftest import run_pipeline_on

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

BASE = [
    "The team uses Kafka for billing events. Standup notes from Monday.",
    "Automatic staging deploys are enabled for every service. Noted by the release bot.",
]
LATER = [
    "The team doesn't use Kafka for billing events anymore. Standup notes from Friday.",
    "Automatic staging deploys are disabled for every service. Noted by the release bot today.",
]


def decision(action, target=None, reason="scripted"):
    return json.dumps({"action": action, "targetId": target, "confidence": 0.9, "reason": reason})


def test_compare_a_slice_with_another_model_and_adopt_its_answer(
    page, live_server, login, fake_ollama, settings, shot, drain_queue
):
    settings.MEMORY_LLM_PROVIDER = "offline"  # the original decisions
    update_config({"shadowMode": False}, changed_by="test", reason="seed")
    run_pipeline_on(*BASE)
    update_config({"shadowMode": True}, changed_by="test", reason="review")
    run_pipeline_on(*LATER)
    settings.MEMORY_LLM_PROVIDER = "ollama"  # the fake server is the other model

    def second_opinion(payload):
        fact = payload["messages"][-1]["content"].split("New fact", 1)[1].split("Candidates:")[0]
        if "staging" in fact:
            return decision("delete", 1, "Staging deploys being disabled retires the old memory.")
        return decision("update", 1, "The fact replaces the old Kafka memory.")

    fake_ollama.chat_handler = second_opinion
    staging = Proposal.objects.get(status="pending", fact_content__contains="staging deploys")

    login("reviewer")
    page.goto(f"{live_server.url}/review/?action=update&review_needed=yes")
    page.click("[data-testid=second-opinion-slice]")
    expect(page.locator("[data-testid=replay-scope]")).to_contain_text("2 proposals")
    expect(page.locator("#id_model")).to_have_value("qwen3:4b")
    page.click("[data-testid=replay-run]")
    expect(page.locator("[data-testid=replay-progress]")).to_contain_text("Waiting for a worker")
    assert fake_ollama.calls("/api/chat") == []  # asking only queued the run
    drain_queue()  # as a worker would: the replay (and the jobs' tasks, long since done)

    expect(page.locator("[data-testid=agreement-rate]")).to_have_text("50%")
    expect(page.locator("[data-testid=replay-card]")).to_have_count(2)
    card = page.locator(f"#r-{staging.id}")
    expect(card).to_have_attribute("data-agrees", "0")
    expect(card.locator("[data-testid=verdict]")).to_have_text("disagrees")
    expect(card.locator("[data-testid=original] [data-testid=answer-action]")).to_have_text(
        "update"
    )
    expect(card.locator("[data-testid=other] [data-testid=answer-action]")).to_have_text("delete")
    expect(card.locator("[data-testid=other]")).to_contain_text("retires the old memory")
    assert Proposal.objects.get(id=staging.id).status == "pending"  # the replay wrote nothing
    shot("replay")

    card.locator("[data-testid=adopt]").click()
    expect(card.locator("[data-testid=adopt-note]")).to_contain_text("Adopted")
    staging.refresh_from_db()
    # The model's proposed action stays on record; the adopted one is what was applied.
    assert (staging.status, staging.applied_as, staging.decided_by) == ("applied", "delete", "rita")
    assert staging.action != "delete"
    assert Memory.objects.get(id=staging.target_memory_id).is_deleted
