"""The Evaluation page: reviewers read, admins start runs that a queued task does through the fake
model server; the report (heat map, categories, failures), a failure's case, two runs side by
side, a dead worker's run reclaimed, the operating points of minFactConfidenceForWrite, and the
settings page's evidence before a switch to a writing mode."""

from __future__ import annotations

import json
import re
from datetime import timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone
from django_q.models import OrmQ

from memory.writes import Actor
from pipeline import review as reviewing
from pipeline import tasks
from pipeline.config import get_config
from pipeline.eval import cases as case_format
from pipeline.eval import runs
from pipeline.eval.operating import operating_points
from pipeline.eval.run import run_case, run_set
from pipeline.llm import get_chat_client
from pipeline.models import ConfigChange, EvalResult, EvalRun, Proposal
from pipeline.tasks import process_pending
from pipeline.writes import evaluation as eval_writes
from pipeline.writes import review as review_writes
from tests.aria_checks import assert_errors_described
from tests.pipeline_support import (
    RAW_TEXT,
    UPDATE_FACT,
    four_decisions,
    raw,
    seed_store,
    set_mode,
)
from tests.test_settings_view import form_data

pytestmark = pytest.mark.django_db
URL = "/evaluation/"
RITA = Actor("rita", "operator")


def queued_evals() -> list[tuple]:
    return [
        (q.task["func"], q.task["args"])
        for q in OrmQ.objects.order_by("id")
        if q.task["func"] == "pipeline.tasks.run_eval"
    ]


def drain_all(drain_queue) -> None:
    while drain_queue():
        pass


def start(client, **data):
    payload = {"case_set": "shipped", "provider": "ollama", "model": "qwen3:4b", **data}
    return client.post(URL, payload)


@pytest.fixture
def reviewed(fake_ollama):
    """One job's ADD approved, UPDATE approved with edited text, DELETE rejected."""
    store = seed_store()
    four_decisions(fake_ollama, store)
    set_mode("shadow")
    raw(RAW_TEXT)
    process_pending()
    proposals = {p.action: p for p in Proposal.objects.all()}
    reviewing.approve(proposals["add"].id, RITA)
    reviewing.approve(proposals["update"].id, RITA, content=UPDATE_FACT + ".1")
    reviewing.reject(proposals["delete"].id, RITA, reason="the cluster still runs")
    fake_ollama.requests.clear()
    return store


def finished_run(client, drain_queue, **data) -> EvalRun:
    asked = start(client, **data)
    assert asked.status_code == 302, asked.content.decode()[:2000]
    drain_all(drain_queue)
    return EvalRun.objects.get(id=asked["Location"].rstrip("/").rsplit("/", 1)[1])


# --- roles ------------------------------------------------------------------------------------------


def test_anonymous_users_go_to_login(client):
    response = client.get(URL)
    assert response.status_code == 302 and "login" in response["Location"]


def test_a_viewer_is_refused_the_page_and_cannot_start_a_run(viewer_client):
    assert viewer_client.get(URL).status_code == 403
    assert start(viewer_client, limit="3").status_code == 403
    assert EvalRun.objects.count() == 0 and not queued_evals()
    assert "/evaluation/" not in viewer_client.get("/").content.decode()  # no nav link either


def test_a_reviewer_reads_the_page_but_is_refused_a_start(reviewer_client):
    page = reviewer_client.get(URL)
    body = page.content.decode()
    assert page.status_code == 200 and 'aria-current="page">Evaluation<' in body
    assert 'data-testid="eval-run"' not in body and "needs the admin role" in body
    assert start(reviewer_client, limit="3").status_code == 403
    assert EvalRun.objects.count() == 0 and not queued_evals()


def test_bad_input_starts_nothing_and_says_why(admin_client_role):
    refused = start(admin_client_role, limit="0")
    body = refused.content.decode()
    assert refused.status_code == 400 and 'data-testid="eval-error"' in body
    # The error stands by its field (it stood only atop the card, naming no field).
    limit = re.search(
        r'<input[^>]*name="limit"[^>]*>\s*<p class="field-error"[^>]*>([^<]+)</p>', body
    )
    assert limit and "greater than or equal to 1" in limit.group(1)
    assert 'aria-invalid="true"' in re.search(r'<input[^>]*name="limit"[^>]*>', body).group(0)
    assert_errors_described(body)
    missing = start(admin_client_role, category="no-such-category")
    assert missing.status_code == 400
    # By its field, naming the set's categories (it stood atop the form alone: a QA pass).
    category = re.search(
        r'<input[^>]*name="category"[^>]*>\s*<p class="field-error"[^>]*>([^<]+)</p>',
        missing.content.decode(),
    )
    assert category and "no-such-category" in category.group(1)
    assert "its categories are" in category.group(1) and "paraphrase" in category.group(1)
    assert_errors_described(missing.content.decode())
    none_reviewed = start(admin_client_role, case_set="reviewed")
    assert none_reviewed.status_code == 400
    assert "No reviewer has decided" in none_reviewed.content.decode()
    assert EvalRun.objects.count() == 0 and not queued_evals()


# --- a run, end to end through the queue -------------------------------------------------------------


def test_an_admin_run_goes_through_the_queue_and_reports_what_manage_py_eval_reports(
    admin_client_role, fake_ollama, drain_queue, hx
):
    asked = start(admin_client_role, limit="8")
    run = EvalRun.objects.get()
    assert asked.status_code == 302 and asked["Location"] == f"/evaluation/runs/{run.id}/"
    assert fake_ollama.calls("/api/chat") == []  # the request calls no model
    assert queued_evals() == [("pipeline.tasks.run_eval", (run.id,))]
    assert (run.status, run.set_kind, run.total, run.provider, run.model) == (
        "queued",
        "shipped",
        8,
        "ollama",
        "qwen3:4b",
    )
    waiting = admin_client_role.get(asked["Location"], **hx)
    assert waiting.status_code == 200 and 'hx-trigger="every 2s"' in waiting.content.decode()

    drain_all(drain_queue)
    run.refresh_from_db()
    assert run.status == "done" and run.done == 8 and not EvalResult.objects.exists()
    # The same cases through `run_set` (what manage.py eval runs) score the same.
    expected = run_set(case_format.load().select(limit=8), get_chat_client("ollama", "qwen3:4b"))
    assert {k: v for k, v in run.report.items() if k != "latencyMs"} == {
        k: v for k, v in expected.items() if k != "latencyMs"
    }
    done = admin_client_role.get(asked["Location"], **hx)
    body = done.content.decode()
    assert done.status_code == 286 and 'hx-trigger="every 2s"' not in body
    assert 'data-testid="heatmap"' in body and 'data-testid="categories"' in body
    page = admin_client_role.get(asked["Location"]).content.decode()
    assert "<html" in page and "Confusion matrix" in page


def test_a_run_on_the_reviewers_verdicts_measures_the_model_against_them(
    admin_client_role, reviewed, fake_ollama, drain_queue
):
    run = finished_run(admin_client_role, drain_queue, case_set="reviewed")
    assert run.set_kind == "reviewed" and run.total == 3
    report = run.report
    # The scripted model repeats the original decisions: right on both approvals, wrong on the
    # rejected DELETE it proposes again.
    assert report["categories"]["rejected"] == {"cases": 1, "correct": 0}
    assert report["decision"]["notAction"] == {"cases": 1, "correct": 0}
    assert run.counts == {
        "decisions": 3,
        "agreed": 2,
        "destructive": 1,
        "harmless": 2,
        "providerErrors": 0,
    }
    listing = admin_client_role.get(URL).content.decode()
    assert "2 of 3" in listing and "1 of 2" in listing


def test_a_run_hands_itself_on_when_its_time_slice_is_used(
    admin_client_role, fake_ollama, drain_queue, settings, monkeypatch
):
    monkeypatch.setattr(runs, "FLUSH_CASES", 2)
    settings.Q_CLUSTER = {**settings.Q_CLUSTER, "timeout": 0}
    settings.MEMORY_LLM_PARALLEL = 1
    start(admin_client_role, limit="5")
    run = EvalRun.objects.get()
    drain_queue()  # the first task records 2 cases and queues the rest
    run.refresh_from_db()
    assert (run.status, run.done, run.attempts) == ("queued", 2, 0)
    assert queued_evals() == [("pipeline.tasks.run_eval", (run.id,))]
    drain_all(drain_queue)
    run.refresh_from_db()
    assert run.status == "done" and run.report["set"]["cases"] == 5


def test_a_dead_workers_run_is_reclaimed_and_goes_on_after_its_recorded_outcomes(fake_ollama):
    config = get_config()
    lease = timedelta(seconds=config.lease_timeout_seconds)
    client = get_chat_client("ollama", "qwen3:4b")
    run = runs.start_run("shipped", client, requested_by="ada", limit=4)
    OrmQ.objects.all().delete()
    claimed, worker = runs.claim(run.id)
    # The worker records two outcomes, then dies.
    first_two = runs.cases_of(claimed).cases[:2]
    assert eval_writes.record(
        run.id, worker, {i: run_case(client, c).as_json() for i, c in enumerate(first_two)}
    )
    # A live worker's run is neither claimed again nor reclaimed.
    assert runs.claim(run.id) is None
    assert "evalRuns" not in tasks.sweep()
    fake_ollama.requests.clear()

    EvalRun.objects.filter(id=run.id).update(heartbeat_at=timezone.now() - lease - timedelta(1))
    assert tasks.sweep()["evalRuns"] == {"retried": 1, "failed": 0}
    assert EvalRun.objects.get().status == "queued"
    assert queued_evals() == [("pipeline.tasks.run_eval", (run.id,))]
    assert eval_writes.record(run.id, worker, {}) is False  # the dead worker can write no more
    assert tasks.run_eval(run.id) == "done"
    finished = EvalRun.objects.get()
    assert finished.attempts == 2 and finished.report["set"]["cases"] == 4
    # Only the two cases not recorded were asked again.
    assert len(fake_ollama.calls("/api/chat")) == sum(
        1 for c in runs.cases_of(claimed).cases[2:] if c.kind == "extraction" or c.candidates
    )

    # A run that kills its worker on every attempt ends failed, saying why.
    EvalRun.objects.filter(id=run.id).update(
        status="running",
        attempts=config.max_attempts,
        heartbeat_at=timezone.now() - lease - timedelta(1),
    )
    assert tasks.run_eval(run.id) is None
    assert tasks.sweep()["evalRuns"] == {"retried": 0, "failed": 1}
    failed = EvalRun.objects.get()
    assert failed.status == "failed" and "worker" in failed.error


def test_a_run_whose_hand_off_was_lost_is_handed_off_again_after_five_quiet_minutes(fake_ollama):
    client = get_chat_client("ollama", "qwen3:4b")
    run = runs.start_run("shipped", client, requested_by="ada", limit=2)
    OrmQ.objects.all().delete()  # the process died before the queue had its task
    assert "evalRuns" not in tasks.sweep()
    EvalRun.objects.filter(id=run.id).update(created_at=timezone.now() - timedelta(minutes=6))
    assert tasks.sweep()["evalRuns"] == {"retried": 1, "failed": 0}
    assert queued_evals() == [("pipeline.tasks.run_eval", (run.id,))]
    assert "evalRuns" not in tasks.sweep()  # not handed off again every minute
    assert tasks.run_eval(run.id) == "done"


def test_a_queued_run_left_with_no_attempt_is_failed_by_the_sweep_not_handed_off_forever(
    fake_ollama,
):
    client = get_chat_client("ollama", "qwen3:4b")
    run = runs.start_run("shipped", client, requested_by="ada", limit=2)
    OrmQ.objects.all().delete()
    # Its worker died on its last attempt but one, and the attempts allowed were lowered since.
    allowed = get_config().max_attempts
    EvalRun.objects.filter(id=run.id).update(
        attempts=allowed, created_at=timezone.now() - timedelta(minutes=6)
    )
    assert tasks.run_eval(run.id) is None  # no task can claim it
    assert tasks.sweep()["evalRuns"] == {"retried": 0, "failed": 1}
    failed = EvalRun.objects.get()
    assert failed.status == "failed" and "no attempt left" in failed.error
    assert not queued_evals()


def test_a_server_that_answers_nothing_fails_the_run_and_the_page_says_so(
    admin_client_role, fake_ollama, drain_queue, settings
):
    settings.OLLAMA_URL = "http://127.0.0.1:9"  # nothing listens
    run = finished_run(admin_client_role, drain_queue, limit="3")
    assert run.status == "failed" and "answered none" in run.error
    body = admin_client_role.get(f"/evaluation/runs/{run.id}/").content.decode()
    assert 'data-testid="eval-failed"' in body


# --- a failure's case, two runs side by side -------------------------------------------------------

HOSTILE_FACT = "<script>alert('fact')</script> The ledger listens on port 9090"
HOSTILE_REPLY = '<img src=x onerror="alert(1)"> I would rather not say'


def hostile_run(client) -> EvalRun:
    line = {
        "id": "x<1>",
        "kind": "decision",
        "category": "hostile",
        "fact": {"content": HOSTILE_FACT, "type": "fact", "confidence": 0.9},
        "candidates": [{"id": "c1", "content": "<b>The ledger</b> listens on port 8080"}],
        "expect": {"action": "update", "target": "c1"},
    }
    text = json.dumps(line) + "\n"
    case_set = case_format.parse(text, "hostile.jsonl")
    run = eval_writes.create_run(
        requested_by="ada",
        set_kind="shipped",
        set_name="hostile.jsonl",
        set_sha256=case_set.sha256,
        set_text=text,
        total=1,
        provider="ollama",
        model="qwen3:4b",
        prompt_version="v2",
    )
    assert tasks.run_eval(run.id) == "done"
    return EvalRun.objects.get(id=run.id)


def test_a_failure_drills_down_to_its_fact_candidates_expectation_and_escaped_reply(
    reviewer_client, fake_ollama
):
    fake_ollama.chat_reply(HOSTILE_REPLY)
    run = hostile_run(reviewer_client)
    report = reviewer_client.get(f"/evaluation/runs/{run.id}/").content.decode()
    assert "/cases/x%3C1%3E/" in report
    page = reviewer_client.get(f"/evaluation/runs/{run.id}/cases/x%3C1%3E/")
    body = page.content.decode()
    assert page.status_code == 200
    assert "<script>alert" not in body and "<img src=x" not in body and "<b>The ledger" not in body
    assert "&lt;script&gt;alert(&#x27;fact&#x27;)&lt;/script&gt;" in body
    assert "&lt;img src=x onerror=&quot;alert(1)&quot;&gt; I would rather not say" in body
    assert 'data-testid="case-candidates"' in body and "c1" in body
    assert "<dt>action</dt><dd>update</dd>" in body and "<dt>target</dt><dd>c1</dd>" in body
    assert "dropped" in body  # the validator refused the unparseable reply
    assert reviewer_client.get(f"/evaluation/runs/{run.id}/cases/nope/").status_code == 404


def test_two_runs_side_by_side_show_each_rate_and_the_cases_one_got_right(
    admin_client_role, fake_ollama, drain_queue, settings
):
    a = finished_run(admin_client_role, drain_queue, limit="10", provider="offline", model="")
    # Model B answers "none" to every decision.
    fake_ollama.chat_handler = lambda payload: (
        json.dumps({"facts": [], "entities": []})
        if "facts" in json.dumps(payload.get("format") or {})
        else json.dumps({"action": "none", "targetId": 1, "confidence": 0.9, "reason": "same"})
    )
    b = finished_run(admin_client_role, drain_queue, limit="10")
    page = admin_client_role.get("/evaluation/compare/", {"a": a.id, "b": b.id})
    body = page.content.decode()
    assert page.status_code == 200 and 'data-testid="comparison"' in body
    assert a.model in body and "qwen3:4b" in body and 'data-testid="different-sets"' not in body
    assert body.count('data-testid="compare-row"') >= 9 + 4
    right_in_a = {f["id"] for f in b.report["failures"]} - {f["id"] for f in a.report["failures"]}
    for case_id in right_in_a:
        assert f"/evaluation/runs/{b.id}/cases/{case_id}/" in body
    assert admin_client_role.get("/evaluation/compare/", {"a": a.id}).status_code == 200


def test_two_selections_of_one_set_are_two_sets_and_each_run_names_its_selection(
    admin_client_role, drain_queue
):
    """Found by a QA pass: a run of the paraphrase cases and one of the refinement cases (20
    each, the same file's SHA-256) were compared as one set ("25% -> 100%", 15 cases "right in B
    only" that B never ran), and the pages showed both as "shipped.jsonl 20 cases"."""
    a = finished_run(
        admin_client_role, drain_queue, provider="offline", model="", category="paraphrase"
    )
    b = finished_run(
        admin_client_role, drain_queue, provider="offline", model="", category="refinement"
    )
    assert (a.selection, b.selection) == ("category paraphrase", "category refinement")
    assert a.set_sha256 != b.set_sha256
    body = admin_client_role.get("/evaluation/compare/", {"a": a.id, "b": b.id}).content.decode()
    assert 'data-testid="different-sets"' in body and "another selection of its cases" in body
    assert "/cases/para-" not in body  # no case is "right in one only" across two sets
    listed = admin_client_role.get(URL).content.decode()
    assert "(category paraphrase)" in listed and "(category refinement)" in listed
    again = finished_run(
        admin_client_role, drain_queue, provider="offline", model="", category="paraphrase"
    )
    assert again.set_sha256 == a.set_sha256  # the same selection is the same set


def _report(update_support: int, update_f1: float, categories=None) -> dict:
    per = {"add": {"f1": 0.9, "support": 4}, "update": {"f1": update_f1, "support": update_support}}
    return {
        "decision": {"cases": 4 + update_support, "accuracy": 0.8, "perAction": per},
        "extraction": {"cases": 0},
        "categories": categories or {},
        "set": {"sha256": "s", "cases": 4 + update_support},
    }


def test_a_comparison_claims_no_difference_for_an_action_one_run_had_no_case_of():
    """Found by a day of QA: B, a selection with no update case, read "update F1 93% -> 0%,
    worse"."""
    from pipeline.eval.summary import compare

    rows = {row["label"]: row for row in compare(_report(3, 0.93), _report(0, 0.0)).actions}
    assert rows["update"]["b"] is None and rows["update"]["delta"] is None
    assert not rows["update"]["worse"] and not rows["update"]["better"]
    assert rows["add"]["delta"] == 0 and not rows["add"]["worse"]
    both = compare(_report(3, 0.93), _report(3, 0.5)).actions
    assert next(r for r in both if r["label"] == "update")["worse"]  # measured on both: said
    # The same for a category B's selection left out, and rates with nothing to measure.
    full = _report(
        3, 0.9, {"temporal": {"cases": 5, "correct": 5}, "negation": {"cases": 3, "correct": 2}}
    )
    part = _report(0, 0.0, {"negation": {"cases": 3, "correct": 2}})
    c = compare(full, part)
    categories = {row["label"]: row for row in c.categories}
    assert categories["temporal"]["b"] is None and not categories["temporal"]["worse"]
    assert categories["negation"]["delta"] == 0
    headlines = {row["label"]: row for row in c.headlines}
    assert headlines["Wrong target"]["b"] is None and headlines["Wrong target"]["a"] is not None
    assert headlines["Extraction fact recall"]["delta"] is None


def test_a_review_flag_or_fact_recall_with_nothing_to_measure_is_a_dash_not_0_percent(
    admin_client_role, reviewer_client, drain_queue
):
    """Found by a day of QA: a selection with no contradiction case read "0% contradictions
    flagged · precision 0%", and the comparison called it a 100-point drop."""
    from pipeline.eval.summary import compare, measured

    run = finished_run(admin_client_role, drain_queue, limit="3", provider="offline", model="")
    review = run.report["decision"]["reviewNeeded"]
    assert (review["flagged"], review["needed"]) == (0, 0)  # the first three cases flag nothing
    assert measured(run.report)["reviewRecall"] is None
    assert measured(run.report)["reviewPrecision"] is None
    body = reviewer_client.get(f"/evaluation/runs/{run.id}/").content.decode()
    flag = body[body.index('data-testid="eval-review-flag"') :][:300]
    assert '<div class="value">–</div>' in flag and "precision <b>–</b>" in flag
    full = dict(run.report, decision=dict(run.report["decision"]))
    full["decision"]["reviewNeeded"] = {"precision": 1.0, "recall": 0.98, "flagged": 9, "needed": 9}
    rows = {row["label"]: row for row in compare(full, run.report).headlines}
    assert rows["Review needed: recall"]["delta"] is None
    assert not rows["Review needed: recall"]["worse"]


def test_a_difference_the_pages_whole_percents_do_not_show_is_no_difference():
    """7.59% against 7.50% read "8% -> 8%, better" (a QA day)."""
    from pipeline.eval.summary import _row

    tiny = _row("Destructive false positives", 0.0759, 0.0750, False)
    assert not tiny["better"] and not tiny["worse"]
    assert _row("Destructive false positives", 0.0759, 0.0650, False)["better"]
    # The page's whole percents decide: 7.49% -> 7.51% reads "7% -> 8%", a difference.
    assert _row("Destructive false positives", 0.0749, 0.0751, False)["worse"]


def test_the_run_list_costs_the_same_queries_for_3_runs_as_for_15(admin_client_role):
    client = get_chat_client("offline")

    def count() -> int:
        with CaptureQueriesContext(connection) as queries:
            assert admin_client_role.get(URL).status_code == 200
        return len(queries)

    for _ in range(3):
        runs.start_run("shipped", client, requested_by="ada", limit=2)
    few = count()
    for _ in range(12):
        runs.start_run("shipped", client, requested_by="ada", limit=2)
    for run in EvalRun.objects.all():
        tasks.run_eval(run.id)
    assert count() == few


# --- operating points --------------------------------------------------------------------------------


def verdicts(pipeline_run) -> dict[str, list[Proposal]]:
    """Automatic ADDs (one reverted), then held ADDs a reviewer approves or rejects."""
    set_mode("controlled-write")
    # One fact per raw memory (the second sentence is too short to be one), unlike its raw text.
    pipeline_run(
        "Priya maintains the billing-api service. Ok then.",
        "Kenji uses Grafana for dashboards. Ok then.",
        "The nightly backup runs at 02:00 UTC. Ok then.",
    )
    auto = list(Proposal.objects.filter(status="applied").order_by("created_at", "id"))
    review_writes.revert(auto[0].id, reviewer=RITA, reason="wrong")
    set_mode("shadow")
    pipeline_run(
        "Lena prefers short standups on Monday. Ok then.",
        "The release train leaves every Thursday. Ok then.",
    )
    pending = list(Proposal.objects.filter(status="pending", action="add").order_by("id"))
    reviewing.approve(pending[0].id, RITA)
    reviewing.reject(pending[1].id, RITA, reason="vague")
    return {"bad": [auto[0], pending[1]], "good": [*auto[1:], pending[0]]}


def test_operating_points_count_rejected_automatic_writes_and_held_proposals(pipeline_run):
    seeded = verdicts(pipeline_run)
    bad, good = seeded["bad"], seeded["good"]
    assert len(good) >= 3
    Proposal.objects.filter(id=bad[0].id).update(fact_confidence=0.55)
    Proposal.objects.filter(id=bad[1].id).update(fact_confidence=0.72)
    Proposal.objects.filter(id=good[0].id).update(fact_confidence=0.6)
    Proposal.objects.filter(id__in=[p.id for p in good[1:]]).update(fact_confidence=0.9)
    n = len(good) + 2

    points = operating_points(0.7)
    rows = {p.threshold: (p.written, p.rejected, p.held) for p in points.points}
    assert (points.judged, points.rejected) == (n, 2)
    assert rows[0.5] == (n, 2, 0)
    assert rows[0.6] == (n - 1, 1, 1)
    assert rows[0.7] == (n - 2, 1, 2)
    assert rows[0.75] == (n - 3, 0, 3)
    assert rows[0.95] == (0, 0, n)
    assert points.recommended.threshold == 0.75 and points.changes_setting


def test_a_jobs_own_dedupes_and_flagged_proposals_are_not_verdicts(pipeline_run):
    """Facts equal to their raw memory are deduplicated by the job: nothing was written or judged
    (a QA pass saw 260 of them counted as accepted writes, and a lower threshold recommended).
    A proposal flagged for review is never written automatically, whatever the threshold."""
    seeded = verdicts(pipeline_run)
    judged = operating_points(0.7).judged
    set_mode("shadow")
    pipeline_run(
        *[f"Service svc-{i} runs on host node-{i} in the Frankfurt rack." for i in range(4)]
    )
    assert Proposal.objects.filter(status="deduped", decided_by=None).count() >= 4
    flagged = seeded["good"][-1]
    Proposal.objects.filter(id=flagged.id).update(review_needed=True)
    assert operating_points(0.7).judged == judged - 1


def test_the_page_shows_the_operating_points_and_an_admin_link_that_only_prefills(
    admin_client_role, reviewer_client, pipeline_run
):
    seeded = verdicts(pipeline_run)
    Proposal.objects.update(fact_confidence=0.9)
    Proposal.objects.filter(id__in=[p.id for p in seeded["bad"]]).update(fact_confidence=0.55)
    body = admin_client_role.get(URL).content.decode()
    assert 'data-testid="operating-table"' in body
    assert 'href="/settings/?minFactConfidenceForWrite=0.6#settings-form"' in body
    assert 'data-testid="apply-threshold"' not in reviewer_client.get(URL).content.decode()
    changes = ConfigChange.objects.count()
    settings_page = admin_client_role.get("/settings/", {"minFactConfidenceForWrite": "0.6"})
    page = settings_page.content.decode()
    assert 'data-testid="prefilled"' in page and 'value="0.6"' in page
    assert (
        ConfigChange.objects.count() == changes
        and get_config().min_fact_confidence_for_write == 0.7
    )


# --- settings evidence -------------------------------------------------------------------------------


def preview_switch(client, hx) -> str:
    set_mode("shadow")
    response = client.post("/settings/?preview=1", form_data(shadowMode=False), **hx)
    assert response.status_code == 200
    return response.content.decode()


def test_settings_warn_when_the_configured_model_was_never_evaluated(admin_client_role, hx):
    body = preview_switch(admin_client_role, hx)
    assert 'data-testid="evidence-missing"' in body and "offline" in body


def test_settings_show_the_configured_models_agreement_with_the_reviewers(
    admin_client_role, reviewed, fake_ollama, drain_queue, hx
):
    finished_run(admin_client_role, drain_queue, case_set="reviewed")
    body = preview_switch(admin_client_role, hx)
    assert (
        "On 3 reviewed decisions this model agrees 67%; destructive false positives 1 of 2." in body
    )
    # Another model's run is no evidence for this one.
    EvalRun.objects.update(model="another-model")
    assert 'data-testid="evidence-missing"' in preview_switch(admin_client_role, hx)


def test_settings_quote_no_run_of_one_category_of_the_verdicts_as_the_models_agreement(
    admin_client_role, reviewed, fake_ollama, drain_queue, hx
):
    """Found by a QA pass: a run of the rejected verdicts alone was quoted as "agrees 0%"."""
    finished_run(admin_client_role, drain_queue, case_set="reviewed", category="rejected")
    assert 'data-testid="evidence-missing"' in preview_switch(admin_client_role, hx)
    finished_run(admin_client_role, drain_queue, case_set="reviewed")
    assert "On 3 reviewed decisions" in preview_switch(admin_client_role, hx)
