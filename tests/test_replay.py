"""Second opinion: replay recorded decisions with another model, compare, adopt; never write."""

import json
import re
from urllib.parse import quote

import pytest
from django.utils.html import escape

from memory.models import Job, Memory, MemoryHistory
from pipeline import offline, replay
from pipeline.config import update_config
from pipeline.llm import get_chat_client
from pipeline.models import LlmCall, Proposal
from tests.fake_ollama import Script

pytestmark = pytest.mark.django_db
HX = {"HTTP_HX_REQUEST": "true"}

BASE = [
    "The team uses Kafka for billing events. Standup notes from Monday.",
    "Automatic staging deploys are enabled for every service. Noted by the release bot.",
]
LATER = [
    "The team doesn't use Kafka for billing events anymore. Standup notes from Friday.",
    "Automatic staging deploys are disabled for every service. Noted by the release bot today.",
]
SLICE = "action=update&review_needed=yes"  # the two flagged contradictions
CANDIDATE_LINE = re.compile(r"^\[(\d+)\] ID: (\S+)$", re.MULTILINE)


@pytest.fixture
def queue(fake_ollama, settings, pipeline_run):
    """Original proposals made by the offline model; the fake Ollama server is the other model."""
    settings.MEMORY_LLM_PROVIDER = "offline"
    update_config({"shadowMode": False}, changed_by="test", reason="seed")
    pipeline_run(*BASE)
    update_config({"shadowMode": True}, changed_by="test", reason="review")
    pipeline_run(*LATER)
    settings.MEMORY_LLM_PROVIDER = "ollama"
    return Proposal.objects.filter(status="pending")


def reply(action, target=None, confidence=0.8, reason="scripted second opinion"):
    return {"action": action, "targetId": target, "confidence": confidence, "reason": reason}


def answers(fake, **by_word):
    """The fake model answers decisions by a word of the fact; extractions like the offline model."""

    def handler(payload):
        prompt = payload["messages"][-1]["content"]
        if "facts" in json.dumps(payload.get("format") or {}):
            return offline.extract_reply(prompt.rsplit("Text:", 1)[1].strip())
        fact = prompt.split("New fact", 1)[1].split("Candidates:", 1)[0]
        for word, answer in by_word.items():
            if word in fact:
                return answer if isinstance(answer, str) else json.dumps(answer)
        return json.dumps(reply("add", reason="fake default"))

    fake.chat_handler = handler


def counts():
    return {
        "memories": Memory.objects.count(),
        "proposals": list(Proposal.objects.order_by("id").values_list("id", "status", "action")),
        "history": MemoryHistory.objects.count(),
        "calls": LlmCall.objects.count(),
        "jobs": Job.objects.count(),
    }


def run(client, htmx=True, **data):
    payload = {"provider": "ollama", "model": "qwen3:4b", **data}
    return client.post("/replay/", payload, **(HX if htmx else {}))


def proposal_about(word):
    return Proposal.objects.get(fact_content__contains=word, status="pending")


def test_a_slice_replay_shows_the_agreement_rate_and_the_disagreement_without_writing(
    reviewer_client, queue, fake_ollama
):
    kafka, staging = proposal_about("Kafka"), proposal_about("staging deploys")
    assert (kafka.action, staging.action) == ("update", "update")
    answers(fake_ollama, Kafka=reply("update", 1), staging=reply("delete", 1))
    before = counts()

    response = run(reviewer_client, filters=SLICE)

    assert response.status_code == 200
    body = response.content.decode()
    assert "<html" not in body  # the htmx fragment
    assert 'data-testid="agreement-rate">50%<' in body
    assert "same action and target on 1 of 2 decisions" in body
    assert body.count('data-agrees="0"') == 1 and body.count('data-agrees="1"') == 1
    card = body.split(f'id="r-{staging.id}"', 1)[1].split("</article>", 1)[0]
    assert "disagrees" in card and "would delete" in card and "Adopt this answer" in card
    assert staging.target_memory.content in card
    assert "Adopt this answer" not in body.split(f'id="r-{kafka.id}"', 1)[1].split("</article>")[0]
    assert counts() == before  # nothing written, not even a call log row


def test_the_other_model_sees_the_same_candidates_as_the_original_decision(
    reviewer_client, queue, fake_ollama
):
    answers(fake_ollama, Kafka=reply("update", 1), staging=reply("update", 1))
    assert run(reviewer_client, filters=SLICE).status_code == 200
    sent = [payload["messages"][-1]["content"] for payload in fake_ollama.calls("/api/chat")]
    assert len(sent) == 2
    for proposal in queue.filter(action="update", review_needed=True):
        original = LlmCall.objects.get(
            job_id=proposal.job_id, kind="decide", fact_index=proposal.position
        )
        other = next(prompt for prompt in sent if proposal.fact_content in prompt)
        assert CANDIDATE_LINE.findall(other) == CANDIDATE_LINE.findall(original.prompt)
        assert len(CANDIDATE_LINE.findall(other)) == len(proposal.candidates) > 1


def test_a_full_page_post_works_without_htmx(reviewer_client, queue, fake_ollama):
    answers(fake_ollama, Kafka=reply("update", 1), staging=reply("update", 1))
    response = run(reviewer_client, htmx=False, filters=SLICE)
    body = response.content.decode()
    assert response.status_code == 200 and "<html" in body
    assert 'data-testid="agreement-rate">100%<' in body


def test_adopting_an_update_answer_applies_it_through_the_review_path(
    reviewer_client, queue, fake_ollama
):
    proposal = proposal_about("Kafka")
    # The original model had said DELETE of the same target; the other one says UPDATE.
    Proposal.objects.filter(id=proposal.id).update(action="delete")
    answers(fake_ollama, Kafka=reply("update", 1))
    body = run(reviewer_client, proposal=proposal.id).content.decode()
    assert 'data-agrees="0"' in body and 'name="action" value="update"' in body

    response = reviewer_client.post(
        f"/replay/adopt/{proposal.id}/",
        {"action": "update", "target": proposal.target_memory_id, "model": "qwen3:4b"},
        **HX,
    )

    assert response.status_code == 200
    assert "Adopted qwen3:4b&#x27;s answer by rita: memory updated." in response.content.decode()
    assert "review-changed" in response["HX-Trigger"]
    proposal.refresh_from_db()
    assert (proposal.status, proposal.action, proposal.decided_by) == ("applied", "update", "rita")
    assert proposal.review_note == "adopted the answer of qwen3:4b"
    target = Memory.objects.get(id=proposal.target_memory_id)
    assert target.content == proposal.fact_content and not target.is_deleted
    updated = MemoryHistory.objects.get(memory_id=target.id, event="updated")
    assert (updated.changed_by, updated.actor_type) == ("rita", "operator")
    assert MemoryHistory.objects.filter(
        memory_id=proposal.source_memory_id, event="reviewed", changed_by="rita"
    ).exists()


def test_adopting_a_none_answer_rejects_the_proposal(reviewer_client, queue, fake_ollama):
    proposal = proposal_about("Standup notes from Friday")
    assert proposal.action == "add" and proposal.candidates
    answers(fake_ollama, Standup=reply("none", 1, reason="already stored"))
    body = run(reviewer_client, proposal=proposal.id).content.decode()
    assert "disagrees" in body and 'name="action" value="none"' in body
    memories = Memory.objects.count()

    response = reviewer_client.post(
        f"/replay/adopt/{proposal.id}/", {"action": "none", "model": "qwen3:4b"}
    )

    assert response.status_code == 302  # the plain-POST fallback goes to the proposal
    proposal.refresh_from_db()
    assert (proposal.status, proposal.decided_by) == ("rejected", "rita")
    assert proposal.review_note == "second opinion (qwen3:4b): none"
    assert Memory.objects.count() == memories
    page = reviewer_client.get(response["Location"]).content.decode()
    assert "Rejected by rita" in page


def test_adopting_an_answer_about_another_target_is_refused_with_an_explanation(
    reviewer_client, queue, fake_ollama
):
    proposal = proposal_about("Kafka")
    other = next(c for c in proposal.candidates if c["memoryId"] != proposal.target_memory_id)
    answers(fake_ollama, Kafka=reply("delete", other["number"]))
    body = run(reviewer_client, proposal=proposal.id).content.decode()
    assert 'data-testid="adopt-refused"' in body and 'data-testid="adopt"' not in body
    before = counts()

    response = reviewer_client.post(
        f"/replay/adopt/{proposal.id}/",
        {"action": "delete", "target": other["memoryId"], "model": "qwen3:4b"},
        **HX,
    )

    assert response.status_code == 200
    assert "Adopting only supports the same target" in response.content.decode()
    assert counts() == before


def test_a_provider_error_is_a_message_not_a_500(reviewer_client, queue, fake_ollama):
    fake_ollama.script("/api/chat", Script({"error": "model crashed"}, 500))
    before = counts()
    for htmx in (True, False):
        response = run(reviewer_client, htmx=htmx, filters=SLICE)
        assert response.status_code == 200
        body = response.content.decode()
        assert 'data-testid="replay-error"' in body
        assert "failed" in body and "answered 500" in body
        assert "slice is empty" not in body and 'data-testid="replay-card"' not in body
        fake_ollama.script("/api/chat", Script({"error": "model crashed"}, 500))
    assert counts() == before


def test_an_unreachable_server_is_a_message_too(reviewer_client, queue, settings):
    settings.OLLAMA_URL = "http://127.0.0.1:9"  # nothing listens on the discard port
    response = run(reviewer_client, proposal=proposal_about("Kafka").id)
    assert response.status_code == 200 and "unreachable" in response.content.decode()


def test_an_unusable_reply_counts_as_a_disagreement_and_cannot_be_adopted(
    reviewer_client, queue, fake_ollama
):
    answers(fake_ollama, Kafka="I am not sure.", staging=reply("update", 1))
    response = run(reviewer_client, filters=SLICE)
    body = response.content.decode()
    assert 'data-testid="agreement-rate">50%<' in body
    assert "no usable answer" in body and "Failed to parse model output as JSON" in body
    assert 'data-testid="adopt"' not in body


def test_viewers_may_look_but_not_run_or_adopt(viewer_client, queue, fake_ollama):
    page = viewer_client.get("/replay/?filters=action%3Dupdate")
    assert page.status_code == 200
    body = page.content.decode()
    assert "needs the reviewer role" in body and 'data-testid="replay-run"' not in body
    assert run(viewer_client, filters="action=update").status_code == 403
    proposal = proposal_about("Kafka")
    response = viewer_client.post(
        f"/replay/adopt/{proposal.id}/", {"action": "none", "model": "qwen3:4b"}
    )
    assert response.status_code == 403
    assert fake_ollama.calls("/api/chat") == []
    assert Proposal.objects.get(id=proposal.id).status == "pending"


def test_the_page_describes_the_slice_and_the_links_lead_to_it(reviewer_client, queue):
    review = reviewer_client.get("/review/?action=update").content.decode()
    assert f'href="/replay/?filters={quote("action=update", safe="")}"' in review
    page = reviewer_client.get("/replay/?filters=action%3Dupdate").content.decode()
    assert "Review queue slice:" in page and "<strong>3</strong> proposals" in page
    assert 'data-testid="prompt-version">v1<' in page
    assert 'value="qwen3:4b"' in page  # the configured model is the default
    proposal = proposal_about("Kafka")
    detail = reviewer_client.get(f"/proposals/{proposal.id}/").content.decode()
    assert f'href="/replay/?proposal={proposal.id}"' in detail
    page = reviewer_client.get(f"/replay/?proposal={proposal.id}").content.decode()
    assert "One proposal:" in page and escape(proposal.fact_content) in page


def test_with_extraction_checks_the_fact_once_per_raw_memory(reviewer_client, queue, fake_ollama):
    kafka = proposal_about("Kafka")
    answers(fake_ollama, Kafka=reply("update", 1), Standup=reply("add"))
    response = run(
        reviewer_client, filters=f"source={kafka.source_memory_id}", with_extraction="on"
    )
    body = response.content.decode()
    assert body.count('data-testid="replay-card"') == 2
    assert body.count("fact extracted") == 2 and "fact not extracted" not in body
    extractions = [
        p for p in fake_ollama.calls("/api/chat") if "facts" in json.dumps(p.get("format"))
    ]
    assert len(extractions) == 1


def test_the_offline_model_agrees_with_itself(reviewer_client, queue):
    response = reviewer_client.post(
        "/replay/", {"provider": "offline", "model": "", "filters": ""}, **HX
    )
    body = response.content.decode()
    assert 'data-testid="agreement-rate">100%<' in body
    assert "<strong>offline-heuristic-v1</strong> (offline)" in body


def test_replay_proposal_rebuilds_the_candidates_and_compares(queue, fake_ollama):
    proposal = proposal_about("staging deploys")
    answers(fake_ollama, staging=reply("update", proposal.target_memory_id))
    result = replay.replay_proposal(proposal, get_chat_client("ollama", "other-model"))
    assert result.agrees and result.other.model == "other-model"
    assert result.other.target_id == result.original.target_id == proposal.target_memory_id
    assert result.original.prompt and result.other.prompt
    candidates, similarities = replay.candidates_of(proposal)
    assert [c.memory_id for c in candidates] == [c["memoryId"] for c in proposal.candidates]
    assert set(similarities) == {c.memory_id for c in candidates}
