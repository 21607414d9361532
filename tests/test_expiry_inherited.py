"""A memory the pipeline derives from a raw memory that expires expires with it: on the job's own
write (controlled-write) and on a reviewer's approval (shadow), so the facts of a memory meant to
be temporary do not outlive it in recall."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from memory.models import Memory
from memory.writes import Actor
from pipeline import review
from pipeline.models import Proposal, ProposalStatus
from pipeline.tasks import process_pending
from tests.pipeline_support import ScriptedModel, fact, raw, set_mode

pytestmark = pytest.mark.django_db

REVIEWER = Actor("ada", "operator")
FACT = "The billing freeze lasts until the audit closes"


def a_raw_memory_expiring(fake_ollama, when=None):
    ScriptedModel(fake_ollama, facts=[fact(FACT)])
    return raw("Billing is frozen until the audit closes.", expires_at=when).memory


def test_the_job_writes_a_derived_memory_that_expires_with_its_raw_memory(fake_ollama):
    set_mode("controlled-write")
    when = (timezone.now() + timedelta(days=3)).replace(microsecond=0)
    source = a_raw_memory_expiring(fake_ollama, when)
    process_pending()
    derived = Memory.objects.get(source_id=source.id)
    assert derived.content == FACT and derived.expires_at == when


def test_an_approved_add_expires_with_its_raw_memory(fake_ollama):
    set_mode("shadow")
    when = (timezone.now() + timedelta(days=3)).replace(microsecond=0)
    source = a_raw_memory_expiring(fake_ollama, when)
    process_pending()
    pending = Proposal.objects.get(source_memory=source, status=ProposalStatus.PENDING)
    approved = review.approve(pending.id, REVIEWER)
    assert Memory.objects.get(id=approved.created_memory_id).expires_at == when


def test_a_raw_memory_without_an_expiry_derives_memories_without_one(fake_ollama):
    set_mode("controlled-write")
    source = a_raw_memory_expiring(fake_ollama, None)
    process_pending()
    assert Memory.objects.get(source_id=source.id).expires_at is None
