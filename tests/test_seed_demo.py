"""seed_demo fills a fresh store so every screen has something to show, and only once."""

import pytest
from django.core.management import call_command

from memory.models import Memory
from pipeline.models import Proposal, TripleReview

pytestmark = pytest.mark.django_db


@pytest.mark.slow  # the whole demo store, its pipeline runs included
def test_seed_demo_fills_the_queue_workbench_and_every_beyond_review_screen(capsys):
    call_command("seed_demo")
    out = capsys.readouterr().out
    assert "Remembered" in out and "Review needed" in out
    assert Memory.objects.filter(source_type="manual").count() >= 95
    pending = Proposal.objects.filter(status="pending")
    assert pending.count() >= 15
    assert pending.filter(review_needed=True).count() >= 10  # contradictions to resolve
    assert Proposal.objects.filter(status="applied", decided_by="pipeline-v2").exists()  # auto ADDs
    assert Proposal.objects.filter(reverted_at__isnull=False).exists()  # a revert to undo
    assert Proposal.objects.filter(status="suppressed").exists()  # a rejection learned
    assert Proposal.objects.filter(status="rejected").exists()
    assert (
        Proposal.objects.exclude(applied_content__isnull=True)
        .exclude(decided_by="pipeline-v2")
        .exists()
    )
    assert Proposal.objects.filter(supported=False).exists()  # grounding: an unsupported fact
    assert Proposal.objects.filter(safety_kinds__contains="secret").exists()  # a safety badge
    assert TripleReview.objects.filter(status="pending").exists()  # triples to review
    assert Memory.objects.filter(agent_id="ops-bot").exists()


def test_if_empty_does_nothing_on_a_store_with_memories(capsys):
    from memory.writes import Actor, remember

    remember("An existing memory", actor=Actor("x", "agent"))
    call_command("seed_demo", "--if-empty")
    assert "did nothing" in capsys.readouterr().out
    assert Memory.objects.count() == 1


def test_demo_users_on_a_store_with_data_only_creates_the_users(capsys):
    from django.contrib.auth.models import User

    from memory.writes import Actor, remember
    from pipeline.config import get_config
    from pipeline.models import ConfigChange

    remember("An existing memory about the billing service.", actor=Actor("x", "agent"))
    shadow = get_config().shadow_mode
    call_command("seed_demo", "--with-demo-users")
    out = capsys.readouterr().out
    assert 'Created demo user "reviewer"' in out and "created the demo users only" in out
    assert User.objects.get(username="reviewer").groups.filter(name="reviewer").exists()
    assert Memory.objects.count() == 1 and not Proposal.objects.exists()
    assert not ConfigChange.objects.exists() and get_config().shadow_mode == shadow


@pytest.mark.slow  # the whole demo store
def test_the_demo_history_is_spread_over_weeks_with_a_mix_of_decisions(capsys):
    from datetime import timedelta

    from django.utils import timezone

    call_command("seed_demo")
    now = timezone.now()
    days = {(now - created).days for created in Memory.objects.values_list("created_at", flat=True)}
    assert max(days) >= 28 and len(days) >= 20  # five weeks, most days with something
    decided = Proposal.objects.exclude(decided_by__in=["pipeline-v2"]).exclude(
        decided_by__isnull=True
    )
    assert set(decided.values_list("decided_by", flat=True)) >= {"rita", "ada", "sam"}
    assert decided.filter(status="rejected").count() >= 3
    assert decided.filter(status="applied").count() >= 3
    lags = [p.decided_at - p.created_at for p in decided]
    assert all(lag > timedelta(0) for lag in lags) and max(lags) > timedelta(hours=1)
    assert Proposal.objects.filter(status="pending", action="add").exists()
    assert Proposal.objects.filter(status="pending", review_needed=True).count() >= 10


def queued_job_ids() -> list[str]:
    """The job ids queued for `run_job` (an approval also queues its memory's embedding)."""
    from django_q.models import OrmQ

    return [
        task.args()[0] for task in OrmQ.objects.all() if task.func() == "pipeline.tasks.run_job"
    ]


# Transactional: hand-offs run on commit, as in `make run`, not when a captured test transaction ends.
@pytest.mark.slow  # the whole demo store
@pytest.mark.django_db(transaction=True)
def test_the_workers_first_start_finds_no_task_for_a_job_the_demo_already_ran():
    from memory.models import Job

    call_command("seed_demo")
    assert Job.objects.filter(status="completed").count() >= 95
    pending = set(Job.objects.filter(status="pending").values_list("id", flat=True))
    assert set(queued_job_ids()) == pending  # nothing for a completed job: no no-op lines


@pytest.mark.django_db(transaction=True)
def test_jobs_the_demo_left_pending_are_still_handed_to_the_workers(capsys):
    from memory.models import Job
    from pipeline.writes.config import update_config

    update_config({"enabled": False}, changed_by="test", reason="jobs wait")
    call_command("seed_demo")
    pending = list(Job.objects.filter(status="pending").values_list("id", flat=True))
    assert len(pending) >= 95 and not Job.objects.filter(status="completed").exists()
    assert sorted(queued_job_ids()) == sorted(pending)  # each exactly once
