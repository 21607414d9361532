"""manage.py eval export-reviewed: reviewers' verdicts become decision cases with the fact and the
candidates the model saw, and running eval on them measures a model against those verdicts."""

from __future__ import annotations

import json
from io import StringIO

import pytest
from django.core.management import CommandError, call_command

from memory.writes import Actor
from pipeline import review as reviewing
from pipeline.eval import cases as case_format
from pipeline.llm import prompts
from pipeline.models import LlmCall, Proposal
from pipeline.parsing import Candidate, Fact
from pipeline.tasks import process_pending
from tests.pipeline_support import (
    ADD_FACT,
    DELETE_FACT,
    RAW_TEXT,
    UPDATE_FACT,
    ScriptedModel,
    decision,
    fact,
    four_decisions,
    raw,
    seed_store,
    set_mode,
)

pytestmark = pytest.mark.django_db
RITA = Actor("rita", "operator")
EDITED = "The billing service runs on Postgres 16.2"


def command(*args) -> tuple[str, str]:
    out, err = StringIO(), StringIO()
    call_command("eval", *args, stdout=out, stderr=err)
    return out.getvalue(), err.getvalue()


@pytest.fixture
def reviewed(fake_ollama):
    """One job's ADD approved, UPDATE approved with edited text, DELETE rejected (NONE recorded)."""
    store = seed_store()
    four_decisions(fake_ollama, store)
    set_mode("shadow")
    raw(RAW_TEXT)
    process_pending()
    proposals = {p.action: p for p in Proposal.objects.all()}
    reviewing.approve(proposals["add"].id, RITA)
    reviewing.approve(proposals["update"].id, RITA, content=EDITED)
    reviewing.reject(proposals["delete"].id, RITA, reason="the cluster still runs")
    return store, proposals


def exported(tmp_path, *args):
    out, _ = command("export-reviewed", *args)
    path = tmp_path / "reviewed.jsonl"
    path.write_text(out)
    return path, case_format.load(path)


def test_each_decided_proposal_becomes_a_case_with_the_reviewers_verdict(reviewed, tmp_path):
    store, proposals = reviewed
    _, case_set = exported(tmp_path)
    by_fact = {c.fact_content: c for c in case_set.cases}
    assert set(by_fact) == {ADD_FACT, UPDATE_FACT, DELETE_FACT}  # NONE was recorded, not decided
    assert by_fact[ADD_FACT].expect() == {"action": "add"}
    assert by_fact[ADD_FACT].category == "approved"
    # The edited approval keeps its action, on the fact as the model saw it (not the edit).
    assert by_fact[UPDATE_FACT].expect() == {"action": "update", "target": store.postgres.id}
    assert by_fact[UPDATE_FACT].category == "edited"
    assert by_fact[DELETE_FACT].expect() == {"notAction": "delete"}
    assert by_fact[DELETE_FACT].category == "rejected"


def test_the_fact_and_candidates_are_exactly_what_the_decide_call_showed(reviewed, tmp_path):
    _, proposals = reviewed
    _, case_set = exported(tmp_path)
    by_fact = {p.fact_content: p for p in proposals.values()}
    for case in case_set.cases:
        proposal = by_fact[case.fact_content]
        call = LlmCall.objects.filter(
            job_id=proposal.job_id, kind="decide", fact_index=proposal.position
        ).first()
        if call is None:  # no candidates: the job added without asking
            assert case.candidates == ()
            continue
        fact = Fact(case.fact_content, case.fact_type, case.fact_confidence)
        candidates = [
            Candidate(n, c.id, c.content, c.type) for n, c in enumerate(case.candidates, 1)
        ]
        shown = prompts.decision_prompt(fact, candidates)
        assert shown == call.prompt
        recorded = {c["memoryId"]: c["pinned"] for c in proposal.candidates}
        assert {c.id: c.pinned for c in case.candidates} == recorded


def test_a_purged_call_log_still_exports_the_candidates_recorded_at_decision(reviewed, tmp_path):
    first, _ = exported(tmp_path)
    before = first.read_text().splitlines()[1:]  # without the dated header
    LlmCall.objects.all().delete()  # what the retention purge does to old jobs' call logs
    after, _ = exported(tmp_path)
    assert after.read_text().splitlines()[1:] == before


def test_a_model_repeating_the_original_decisions_agrees_with_every_approval(
    reviewed, fake_ollama, tmp_path
):
    store, _ = reviewed
    path, _ = exported(tmp_path)
    report_path = tmp_path / "report.json"
    # four_decisions' scripted model still answers: the original decisions, repeated.
    fake_ollama.requests.clear()
    command("--set", str(path), "--provider", "ollama", "--json", str(report_path))
    report = json.loads(report_path.read_text())
    assert report["categories"]["approved"]["correct"] == report["categories"]["approved"]["cases"]
    assert report["categories"]["edited"] == {"cases": 1, "correct": 1}
    assert report["decision"]["perAction"]["update"]["recall"] == 1.0
    # The rejected DELETE proposed again: not correct.
    assert report["categories"]["rejected"] == {"cases": 1, "correct": 0}
    assert report["decision"]["notAction"] == {"cases": 1, "correct": 0}
    # A model that now chooses differently on the rejected fact gets it right.
    ScriptedModel(
        fake_ollama,
        decisions={
            UPDATE_FACT: decision("update", store.postgres, reason="upgraded"),
            DELETE_FACT: decision("none", store.staging, reason="still there"),
        },
    )
    command("--set", str(path), "--provider", "ollama", "--json", str(report_path))
    report = json.loads(report_path.read_text())
    assert report["decision"]["accuracy"] == 1.0
    assert report["decision"]["notAction"] == {"cases": 1, "correct": 1}


def test_since_and_agent_choose_the_proposals_exported(reviewed, tmp_path):
    assert len(exported(tmp_path, "--agent", "default")[1].cases) == 3
    out, _ = command("export-reviewed", "--agent", "someone-else")
    assert out.startswith("# 0 reviewed decisions")
    out, _ = command("export-reviewed", "--since", "2999-01-01")
    assert out.startswith("# 0 reviewed decisions")
    assert len(exported(tmp_path, "--since", "2000-01-01")[1].cases) == 3
    for day in ("2026-13-45", "2026-02-30T10:00"):  # well formed, no such day: was a traceback
        with pytest.raises(CommandError, match="--since expects a date"):
            command("export-reviewed", "--since", day)


def test_a_reverted_approval_is_left_out(reviewed, tmp_path):
    _, proposals = reviewed
    reviewing.revert_once(proposals["add"].id, RITA, reason="wrong after all")
    _, case_set = exported(tmp_path)
    assert {c.fact_content for c in case_set.cases} == {UPDATE_FACT, DELETE_FACT}


def test_nothing_decided_exports_an_empty_set_with_its_header(db):
    out, err = command("export-reviewed")
    assert out.splitlines() == [out.splitlines()[0]]
    assert out.startswith("# 0 reviewed decisions")
    assert "0 cases" in err


def test_the_logged_prompt_wins_over_a_record_that_differs_from_it(reviewed, tmp_path):
    store, proposals = reviewed
    update = proposals["update"]
    changed = [{**c, "content": "something else"} for c in update.candidates]
    Proposal.objects.filter(id=update.id).update(candidates=changed)
    out, err = command("export-reviewed")
    case = next(json.loads(line) for line in out.splitlines()[1:] if UPDATE_FACT in line)
    assert store.postgres.content in [c["content"] for c in case["candidates"]]
    assert "something else" not in out
    assert f"proposal {update.id}: candidates taken from the logged prompt" in err


def test_what_the_pipeline_applied_on_its_own_is_no_reviewers_verdict(fake_ollama, tmp_path):
    four_decisions(fake_ollama, seed_store())
    set_mode("full")
    raw(RAW_TEXT)
    process_pending()
    assert Proposal.objects.filter(status="applied", decided_by="pipeline-v2").exists()
    out, _ = command("export-reviewed")
    assert out.startswith("# 0 reviewed decisions")


def test_keeping_both_is_an_approval_of_the_add_the_reviewer_chose(fake_ollama, tmp_path):
    four_decisions(fake_ollama, seed_store())
    set_mode("shadow")
    raw(RAW_TEXT)
    process_pending()
    update = Proposal.objects.get(action="update")
    reviewing.decide(update.id, RITA, "keep_both")
    _, case_set = exported(tmp_path)
    (case,) = case_set.cases
    assert (case.category, case.expect()) == ("overridden", {"action": "add"})


def test_a_rejected_add_without_candidates_is_left_out_with_a_note(fake_ollama, tmp_path):
    """Without candidates no model is asked and the answer is add: a case expecting "not add"
    could never pass (a QA pass scored a model 0 of 1 on it, with no call made)."""
    ScriptedModel(fake_ollama, facts=[fact("Quokkas are small marsupials from Rottnest Island")])
    set_mode("shadow")
    raw("FYI: Quokkas are small marsupials from Rottnest Island.")
    process_pending()
    lonely = Proposal.objects.get(action="add")
    assert not lonely.candidates
    reviewing.reject(lonely.id, RITA, reason="not ours")
    out, err = command("export-reviewed")
    assert out.startswith("# 0 reviewed decisions")
    assert "a rejected add without candidates" in out + err
    bad = tmp_path / "bad.jsonl"
    case = {
        "id": "c1",
        "kind": "decision",
        "category": "rejected",
        "fact": {"content": "Quokkas are small marsupials", "type": "fact", "confidence": 0.9},
        "candidates": [],
        "expect": {"notAction": "add"},
    }
    bad.write_text(json.dumps(case) + "\n")
    with pytest.raises(case_format.CaseError, match="no candidates cannot expect notAction add"):
        case_format.load(bad)
