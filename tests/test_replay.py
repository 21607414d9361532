"""Second opinion: replay recorded decisions with another model, compare, adopt; never write.

The request only records a run and queues it; `drain_queue` then does what a worker does.
"""

import json
import re
import threading
import time
from urllib.parse import quote

import pytest
from django.db import connections
from django.utils import timezone
from django.utils.html import escape
from django_q.models import OrmQ

from memory.models import Job, Memory, MemoryHistory
from pipeline import replay
from pipeline.llm import get_chat_client, offline
from pipeline.llm.prompts import PROMPT_VERSION
from pipeline.models import LlmCall, Proposal, ReplayRun
from pipeline.writes.config import update_config
from tests.fake_ollama import Script

pytestmark = pytest.mark.django_db

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


def run_url(asked) -> str:
    """The run's page, from the answer to the POST (htmx pushes it, a plain POST redirects)."""
    return asked.get("HX-Push-Url") or asked["Location"]


@pytest.fixture
def run(hx, drain_queue):
    """Ask for a second opinion as the page does, let a worker run the queued task, then return
    the finished run as the page shows it: htmx's last poll (286: stop) or the whole page.
    A request that started no run (refused, invalid) is returned as it is."""

    def ask(client, htmx=True, **data):
        payload = {"provider": "ollama", "model": "qwen3:4b", **data}
        headers = hx if htmx else {}
        asked = client.post("/replay/", payload, **headers)
        if not (asked.has_header("HX-Push-Url") or asked.status_code == 302):
            return asked
        drain_queue()
        return client.get(run_url(asked), **headers)

    return ask


def proposal_about(word):
    return Proposal.objects.get(fact_content__contains=word, status="pending")


def test_a_slice_replay_shows_the_agreement_rate_and_the_disagreement_without_writing(
    reviewer_client, queue, fake_ollama, run
):
    kafka, staging = proposal_about("Kafka"), proposal_about("staging deploys")
    assert (kafka.action, staging.action) == ("update", "update")
    answers(fake_ollama, Kafka=reply("update", 1), staging=reply("delete", 1))
    before = counts()

    response = run(reviewer_client, filters=SLICE)

    assert response.status_code == 286  # htmx's last poll: the run is finished, stop polling
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
    reviewer_client, queue, fake_ollama, run
):
    answers(fake_ollama, Kafka=reply("update", 1), staging=reply("update", 1))
    assert run(reviewer_client, filters=SLICE).status_code == 286
    sent = [payload["messages"][-1]["content"] for payload in fake_ollama.calls("/api/chat")]
    assert len(sent) == 2
    for proposal in queue.filter(action="update", review_needed=True):
        original = LlmCall.objects.get(
            job_id=proposal.job_id, kind="decide", fact_index=proposal.position
        )
        other = next(prompt for prompt in sent if proposal.fact_content in prompt)
        assert CANDIDATE_LINE.findall(other) == CANDIDATE_LINE.findall(original.prompt)
        assert len(CANDIDATE_LINE.findall(other)) == len(proposal.candidates) > 1


def test_a_full_page_post_works_without_htmx(reviewer_client, queue, fake_ollama, run):
    answers(fake_ollama, Kafka=reply("update", 1), staging=reply("update", 1))
    response = run(reviewer_client, htmx=False, filters=SLICE)
    body = response.content.decode()
    assert response.status_code == 200 and "<html" in body
    assert 'data-testid="agreement-rate">100%<' in body


def test_adopting_an_update_answer_applies_it_through_the_review_path(
    reviewer_client, queue, fake_ollama, run, hx
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
        **hx,
    )

    assert response.status_code == 200
    assert "Adopted qwen3:4b&#x27;s answer by rita: memory updated." in response.content.decode()
    assert "review-changed" in response["HX-Trigger"]
    proposal.refresh_from_db()
    # What the model proposed stays on record; what was applied is kept beside it.
    assert (proposal.status, proposal.action, proposal.applied_as, proposal.decided_by) == (
        "applied",
        "delete",
        "update",
        "rita",
    )
    assert proposal.review_note == "adopted the answer of qwen3:4b"
    target = Memory.objects.get(id=proposal.target_memory_id)
    assert target.content == proposal.fact_content and not target.is_deleted
    updated = MemoryHistory.objects.get(memory_id=target.id, event="updated")
    assert (updated.changed_by, updated.actor_type) == ("rita", "operator")
    assert MemoryHistory.objects.filter(
        memory_id=proposal.source_memory_id, event="reviewed", changed_by="rita"
    ).exists()


def test_adopting_an_update_of_the_memory_a_flagged_none_contradicts_applies_it(
    reviewer_client, queue, fake_ollama, run, hx
):
    """A flagged NONE names the memory its fact negates; adoption said it targeted none."""
    proposal = proposal_about("Kafka")
    Proposal.objects.filter(id=proposal.id).update(action="none")  # still review_needed
    answers(fake_ollama, Kafka=reply("update", 1))
    body = run(reviewer_client, proposal=proposal.id).content.decode()
    assert 'data-testid="adopt-refused"' not in body and 'value="update"' in body

    response = reviewer_client.post(
        f"/replay/adopt/{proposal.id}/",
        {"action": "update", "target": proposal.target_memory_id, "model": "qwen3:4b"},
        **hx,
    )

    assert "memory updated" in response.content.decode()
    proposal.refresh_from_db()
    assert (proposal.status, proposal.action, proposal.applied_as) == ("applied", "none", "update")
    assert Memory.objects.get(id=proposal.target_memory_id).content == proposal.fact_content


def test_adopting_a_none_answer_rejects_the_proposal(reviewer_client, queue, fake_ollama, run):
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
    reviewer_client, queue, fake_ollama, run, hx
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
        **hx,
    )

    assert response.status_code == 200
    assert "Adopting only supports the same target" in response.content.decode()
    assert counts() == before


def test_a_provider_error_is_a_message_not_a_500(reviewer_client, queue, fake_ollama, run):
    fake_ollama.script("/api/chat", Script({"error": "model crashed"}, 500))
    before = counts()
    for htmx in (True, False):
        response = run(reviewer_client, htmx=htmx, filters=SLICE)
        assert response.status_code == (286 if htmx else 200)
        body = response.content.decode()
        assert 'data-testid="replay-error"' in body
        assert "failed" in body and "answered 500" in body
        assert "slice is empty" not in body and 'data-testid="replay-card"' not in body
        fake_ollama.script("/api/chat", Script({"error": "model crashed"}, 500))
    assert counts() == before


def test_an_unreachable_server_is_a_message_too(reviewer_client, queue, settings, run):
    settings.OLLAMA_URL = "http://127.0.0.1:9"  # nothing listens on the discard port
    response = run(reviewer_client, proposal=proposal_about("Kafka").id)
    assert response.status_code == 286 and "unreachable" in response.content.decode()


def test_an_unusable_reply_counts_as_a_disagreement_and_cannot_be_adopted(
    reviewer_client, queue, fake_ollama, run
):
    answers(fake_ollama, Kafka="I am not sure.", staging=reply("update", 1))
    response = run(reviewer_client, filters=SLICE)
    body = response.content.decode()
    assert 'data-testid="agreement-rate">50%<' in body
    assert "no usable answer" in body and "Failed to parse model output as JSON" in body
    assert 'data-testid="adopt"' not in body


def test_viewers_may_look_but_not_run_or_adopt(viewer_client, queue, fake_ollama, run):
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
    assert fake_ollama.calls("/api/chat") == [] and not ReplayRun.objects.exists()
    assert Proposal.objects.get(id=proposal.id).status == "pending"


def test_the_page_describes_the_slice_and_the_links_lead_to_it(reviewer_client, queue):
    review = reviewer_client.get("/review/?action=update").content.decode()
    assert f'href="/replay/?filters={quote("action=update", safe="")}"' in review
    page = reviewer_client.get("/replay/?filters=action%3Dupdate").content.decode()
    updates = Proposal.objects.filter(status="pending", action="update").count()
    assert updates >= 2  # the Kafka and the staging contradictions
    assert "Review queue slice:" in page and f"<strong>{updates}</strong> proposals" in page
    assert f'data-testid="prompt-version">{PROMPT_VERSION}<' in page
    assert 'value="qwen3:4b"' in page  # the configured model is the default
    proposal = proposal_about("Kafka")
    detail = reviewer_client.get(f"/proposals/{proposal.id}/").content.decode()
    assert f'href="/replay/?proposal={proposal.id}"' in detail
    page = reviewer_client.get(f"/replay/?proposal={proposal.id}").content.decode()
    assert "One proposal:" in page and escape(proposal.fact_content) in page


def test_with_extraction_checks_the_fact_once_per_raw_memory(
    reviewer_client, queue, fake_ollama, run
):
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


def test_the_offline_model_agrees_with_itself(reviewer_client, queue, run):
    response = run(reviewer_client, provider="offline", model="", filters="")
    body = response.content.decode()
    assert 'data-testid="agreement-rate">100%<' in body
    assert "<strong>offline-heuristic-v2</strong> (offline)" in body


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


# --- the run: queued by the request, done by a task, shown as it goes --------------------------


def queued_replays() -> list[tuple]:
    return [
        (q.task["func"], q.task["args"])
        for q in OrmQ.objects.order_by("id")
        if q.task["func"] == "pipeline.replay.run_replay"
    ]


def test_asking_calls_no_model_and_queues_the_run(
    reviewer_client, queue, fake_ollama, hx, drain_queue
):
    flagged = list(queue.filter(action="update", review_needed=True).values_list("id", flat=True))
    asked = reviewer_client.post(
        "/replay/", {"provider": "ollama", "model": "qwen3:4b", "filters": SLICE}, **hx
    )

    assert asked.status_code == 200 and fake_ollama.calls("/api/chat") == []
    run = ReplayRun.objects.get()
    assert (run.status, run.requested_by, run.provider, run.model) == (
        "queued",
        "rita",
        "ollama",
        "qwen3:4b",
    )
    assert sorted(run.proposal_ids) == sorted(flagged) and run.total == 2 and run.results == []
    assert queued_replays() == [("pipeline.replay.run_replay", (run.id,))]
    assert asked["HX-Push-Url"] == f"/replay/runs/{run.id}/"
    body = asked.content.decode()
    assert 'hx-trigger="every 2s"' in body and "Waiting for a worker" in body
    assert 'data-testid="replay-card"' not in body and 'data-testid="agreement-rate"' not in body

    waiting = reviewer_client.get(f"/replay/runs/{run.id}/", **hx)
    assert waiting.status_code == 200 and 'hx-trigger="every 2s"' in waiting.content.decode()
    drain_queue()
    assert len(fake_ollama.calls("/api/chat")) == 2
    finished = reviewer_client.get(f"/replay/runs/{run.id}/", **hx)
    assert finished.status_code == 286 and 'hx-trigger="every 2s"' not in finished.content.decode()
    page = reviewer_client.get(f"/replay/runs/{run.id}/").content.decode()
    assert "<html" in page and "Review queue slice:" in page
    assert page.count('data-testid="replay-card"') == 2


def test_an_empty_slice_is_finished_at_once_without_a_task(reviewer_client, queue, run):
    body = run(reviewer_client, filters="action=delete").content.decode()
    assert "the slice is empty" in body and not queued_replays()
    assert ReplayRun.objects.get().status == "done"


def test_a_model_failing_midway_fails_the_run_keeps_the_answers_so_far_and_says_why(
    reviewer_client, queue, fake_ollama, run
):
    fake_ollama.chat_reply(json.dumps(reply("update", 1)))
    fake_ollama.script("/api/chat", Script({"error": "model crashed"}, 500))
    body = run(reviewer_client, filters=SLICE).content.decode()

    saved = ReplayRun.objects.get()
    assert saved.status == "failed" and "answered 500" in saved.error and saved.finished_at
    assert len(saved.results) == 1
    assert body.count('data-testid="replay-card"') == 1
    assert 'data-testid="replay-error"' in body
    assert escape(f"The ollama model qwen3:4b failed after 1 comparison: {saved.error}") in body
    assert 'hx-trigger="every 2s"' not in body


def test_a_redelivered_task_goes_on_after_the_saved_answers_and_a_finished_run_stays_put(
    reviewer_client, queue, fake_ollama, run
):
    answers(fake_ollama, Kafka=reply("update", 1), staging=reply("update", 1))
    run(reviewer_client, filters=SLICE)
    saved = ReplayRun.objects.get()
    assert saved.status == "done" and len(fake_ollama.calls("/api/chat")) == 2

    assert replay.run_replay(saved.id) is None  # finished: a stray re-delivery does nothing
    # The worker died after the first answer was saved: django-q2 delivers the task again.
    ReplayRun.objects.filter(id=saved.id).update(status="running", results=saved.results[:1])
    assert replay.run_replay(saved.id) == "done"

    assert len(fake_ollama.calls("/api/chat")) == 3  # only the missing answer was asked again
    resumed = ReplayRun.objects.get()
    assert resumed.results == saved.results and resumed.started_at == saved.started_at


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_each_answer_shows_while_the_model_is_still_slow_and_no_write_waits_for_it(
    file_db, queue, fake_ollama, settings, reviewer_client, hx
):
    """A real worker thread on a file database: the second model call hangs until released; in
    the meantime the page shows the first answer, and a reviewer adopts it (a write)."""
    settings.MEMORY_LLM_TIMEOUT_SECONDS = 30
    release, calls = threading.Event(), []

    def slow_second(payload):
        calls.append(payload)
        if len(calls) == 2:
            assert release.wait(20), "the test never released the model"
        return json.dumps(reply("none", 1, reason="nothing new"))

    fake_ollama.chat_handler = slow_second
    asked = reviewer_client.post(
        "/replay/", {"provider": "ollama", "model": "qwen3:4b", "filters": SLICE}, **hx
    )
    run = ReplayRun.objects.get()

    def worker():
        try:
            replay.run_replay(run.id)
        finally:
            connections.close_all()

    thread = threading.Thread(target=worker)
    thread.start()
    try:
        deadline = time.monotonic() + 20
        while len(ReplayRun.objects.get(id=run.id).results) < 1 or len(calls) < 2:
            assert time.monotonic() < deadline, "the first answer never arrived"
            time.sleep(0.05)
        during = reviewer_client.get(run_url(asked), **hx)
        body = during.content.decode()
        assert during.status_code == 200 and 'hx-trigger="every 2s"' in body
        assert body.count('data-testid="replay-card"') == 1 and "1 of 2 compared" in body
        assert 'data-testid="agreement-rate"' not in body

        first = ReplayRun.objects.get(id=run.id).results[0]["proposal"]
        adopted = reviewer_client.post(
            f"/replay/adopt/{first}/", {"action": "none", "model": "qwen3:4b"}, **hx
        )
        assert adopted.status_code == 200 and "Rejected by rita" in adopted.content.decode()
        assert Proposal.objects.get(id=first).status == "rejected"
    finally:
        release.set()
        thread.join(30)

    finished = reviewer_client.get(run_url(asked), **hx)
    body = finished.content.decode()
    assert finished.status_code == 286 and body.count('data-testid="replay-card"') == 2
    assert 'data-testid="agreement-rate">0%<' in body


# --- a run whose worker died --------------------------------------------------------------------


def test_a_running_run_whose_worker_died_is_reclaimed_by_the_sweep_then_failed_out_of_attempts():
    from datetime import timedelta

    from django.utils import timezone

    from pipeline import tasks
    from pipeline.config import get_config
    from pipeline.writes import replay as replay_writes

    config = get_config()
    lease = timedelta(seconds=config.lease_timeout_seconds)
    run = replay_writes.create_run(
        requested_by="rita", provider="offline", model="offline", proposal_ids=["gone"], total=1
    )
    claimed = replay_writes.claim_run(run.id, lease_timeout=lease, max_attempts=3)
    assert (claimed.status, claimed.attempts) == ("running", 1) and claimed.leased_at
    # A live worker's run is neither claimed by a second task nor reclaimed by the sweep.
    assert replay_writes.claim_run(run.id, lease_timeout=lease, max_attempts=3) is None
    assert "replayRuns" not in tasks.sweep()
    assert ReplayRun.objects.get().status == "running"

    # The worker dies: nothing renews the lease, which then outlives the lease timeout.
    died = timezone.now() - lease - timedelta(seconds=1)
    ReplayRun.objects.filter(id=run.id).update(leased_at=died)
    assert tasks.sweep()["replayRuns"] == {"retried": 1, "failed": 0}
    assert ReplayRun.objects.get().status == "queued"
    assert queued_replays() == [("pipeline.replay.run_replay", (run.id,))]
    assert replay.run_replay(run.id) == "done"
    assert ReplayRun.objects.get().attempts == 2

    # A run that kills its worker on every attempt ends failed, saying why.
    ReplayRun.objects.filter(id=run.id).update(
        status="running", attempts=config.max_attempts, leased_at=died, finished_at=None
    )
    assert replay.run_replay(run.id) is None  # out of attempts: not claimed again
    assert tasks.sweep()["replayRuns"] == {"retried": 0, "failed": 1}
    failed = ReplayRun.objects.get()
    assert failed.status == "failed" and failed.finished_at and "worker" in failed.error


def test_a_queued_run_whose_hand_off_was_lost_is_handed_off_again_after_five_quiet_minutes():
    from datetime import timedelta

    from django.utils import timezone

    from pipeline import tasks
    from pipeline.writes import replay as replay_writes

    run = replay_writes.create_run(
        requested_by="rita", provider="offline", model="offline", proposal_ids=["gone"], total=1
    )
    # Created, and the process died before the hand-off: no task will ever claim it.
    assert "replayRuns" not in tasks.sweep()
    ReplayRun.objects.filter(id=run.id).update(created_at=timezone.now() - timedelta(minutes=6))
    assert tasks.sweep()["replayRuns"] == {"retried": 1, "failed": 0}
    assert queued_replays() == [("pipeline.replay.run_replay", (run.id,))]
    assert "replayRuns" not in tasks.sweep()  # handed off just now: not again every minute
    assert replay.run_replay(run.id) == "done"


def test_a_queued_run_left_with_no_attempt_is_failed_by_the_sweep_not_handed_off_forever():
    from datetime import timedelta

    from django.utils import timezone

    from pipeline import tasks
    from pipeline.config import get_config
    from pipeline.writes import replay as replay_writes

    run = replay_writes.create_run(
        requested_by="rita", provider="offline", model="offline", proposal_ids=["gone"], total=1
    )
    ReplayRun.objects.filter(id=run.id).update(
        attempts=get_config().max_attempts, created_at=timezone.now() - timedelta(minutes=6)
    )
    assert replay.run_replay(run.id) is None  # no task can claim it
    assert tasks.sweep()["replayRuns"] == {"retried": 0, "failed": 1}
    failed = ReplayRun.objects.get()
    assert failed.status == "failed" and failed.finished_at and "no attempt left" in failed.error
    assert not queued_replays()


def test_an_answer_no_model_gave_is_not_adopted(reviewer_client, queue, hx):
    """Adopting takes what a second opinion said, not what a form posts: no run of qwen3:8b
    answered this proposal, so nothing is applied (the audit would have named it)."""
    proposal = proposal_about("Standup notes from Friday")
    before = counts()
    response = reviewer_client.post(
        f"/replay/adopt/{proposal.id}/", {"action": "add", "model": "qwen3:8b"}, **hx
    )
    body = response.content.decode()
    assert "Not adopted: no second opinion of qwen3:8b on this proposal answered ADD" in body
    assert counts() == before


def test_adopting_a_fact_with_a_secret_sends_the_reviewer_to_confirm_it(reviewer_client, queue, hx):
    """The dashboard approves a fact holding a secret only once confirmed; adopting skipped it."""
    proposal = proposal_about("Standup notes from Friday")
    Proposal.objects.filter(id=proposal.id).update(
        fact_content="The deploy key is AKIAIOSFODNN7EXAMPLE", safety_kinds="secret"
    )
    ReplayRun.objects.create(
        requested_by="rita",
        provider="ollama",
        model="qwen3:4b",
        proposal=proposal,
        created_at=timezone.now(),
        results=[{"proposal": proposal.id, "other": {"model": "qwen3:4b", "action": "add"}}],
    )
    before = counts()
    response = reviewer_client.post(
        f"/replay/adopt/{proposal.id}/", {"action": "add", "model": "qwen3:4b"}, **hx
    )
    body = response.content.decode()
    assert "Not adopted: this fact contains a secret" in body and "Open the proposal" in body
    assert counts() == before
