"""Learning from rejections: recent rejections reach the decision prompt only when the flag is on."""

import pytest

from memory.writes import Actor
from pipeline import review
from pipeline.models import Proposal
from pipeline.writes.config import update_config

pytestmark = pytest.mark.django_db


def _reject_one(pipeline_run):
    update_config({"shadowMode": True}, changed_by="t", reason="t")
    pipeline_run("Redis caches sessions for auth-service. From the wiki.")
    pipeline_run("Redis caches sessions for auth-service and billing-api. From chat.")
    proposal = Proposal.objects.filter(
        status="pending", fact_content__contains="billing-api"
    ).first()
    review.reject(proposal.id, Actor("rita"), reason="billing-api has its own cache")
    return proposal


def _decide_prompts(fake_ollama):
    return [
        p["messages"][-1]["content"]
        for p in fake_ollama.calls("/api/chat")
        if "Candidates:" in p["messages"][-1]["content"]
    ]


def test_rejections_are_not_shown_to_the_model_by_default(fake_ollama, pipeline_run):
    rejected = _reject_one(pipeline_run)
    fake_ollama.requests.clear()
    pipeline_run("Redis caches sessions for auth-service, says Marco. From standup.")
    prompts = _decide_prompts(fake_ollama)
    assert prompts and rejected.id
    assert all(
        "Reviewers rejected" not in p and "billing-api has its own cache" not in p for p in prompts
    )


def test_with_the_flag_the_decision_prompt_lists_recent_rejections(fake_ollama, pipeline_run):
    rejected = _reject_one(pipeline_run)
    update_config({"rejectionsAsExamples": True}, changed_by="t", reason="learn")
    fake_ollama.requests.clear()
    pipeline_run("Redis caches sessions for auth-service, says Marco. From standup.")
    prompts = _decide_prompts(fake_ollama)
    assert prompts
    assert all("Reviewers rejected these earlier proposals" in prompt for prompt in prompts)
    assert all(
        rejected.fact_content in prompt and "billing-api has its own cache" in prompt
        for prompt in prompts
    )
