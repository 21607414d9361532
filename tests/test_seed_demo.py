"""seed_demo fills a fresh store so every screen has something to show, and only once."""

import pytest
from django.core.management import call_command

from memory.models import Memory
from pipeline.models import Proposal, TripleReview

pytestmark = pytest.mark.django_db


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
