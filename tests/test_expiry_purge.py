"""Expired memories purged by the maintenance schedule (issue 22, item 8): after
`retention.expiredPurgeDays` (30 by default; 0 = never), not before, through the purge's own
entry with a system actor and a reason naming expiry (the tombstone and the verified receipt a
manual purge leaves), and never while `autonomous.frozen` (or `autonomous.enabled` off) stops
maintenance. The setting is a config key like any other (API, Settings page, validation)."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest
from django.utils import timezone

from memory import writes
from memory.erasure import PURGED, PURGED_EVENT
from memory.models import Memory, MemoryHistory
from memory.writes import Actor
from pipeline import expiry
from pipeline.config import get_config
from pipeline.review import update_config
from pipeline.tasks import tick

pytestmark = pytest.mark.django_db(transaction=True)  # a purge vacuums after its commit

AGENT = Actor("claude-code", "agent")


def remember(text: str, expired_days_ago: float | None = None) -> Memory:
    """A memory, expired that many days ago: expired through the edit path, as PATCH does (which
    stores a past moment as the moment of the change), then those days gone by."""
    memory = writes.remember(text, actor=AGENT, create_job=False).memory
    if expired_days_ago is not None:
        writes.modify(
            memory.id, {"expires_at": timezone.now()}, actor=Actor("ada"), reason="no longer true"
        )
        at = timezone.now() - timedelta(days=expired_days_ago)
        Memory.objects.filter(id=memory.id).update(expires_at=at)
        memory = Memory.objects.get(id=memory.id)
    return memory


def configure(**values) -> None:
    update_config(values, changed_by="test", reason="test")


def purged(memory: Memory) -> bool:
    memory.refresh_from_db()
    return memory.is_purged


# --- the setting --------------------------------------------------------------------------------


def test_expired_purge_days_is_30_by_default_and_a_config_key_like_the_others(
    client, multi_admin, admin_client_role
):
    assert get_config().expired_purge_days == 30
    body = client.get("/api/pipeline/config", **multi_admin).json()
    assert body["retention"] == {"expiredPurgeDays": 30}
    response = client.patch(
        "/api/pipeline/config",
        json.dumps({"retention": {"expiredPurgeDays": 0}, "reason": "keep expired memories"}),
        content_type="application/json",
        **multi_admin,
    )
    assert response.status_code == 200 and response.json()["retention"]["expiredPurgeDays"] == 0
    for bad in (-1, 3651, 1.5, "soon"):
        refused = client.patch(
            "/api/pipeline/config",
            json.dumps({"retention": {"expiredPurgeDays": bad}, "reason": "r"}),
            content_type="application/json",
            **multi_admin,
        )
        assert refused.status_code == 400, bad
    assert get_config().expired_purge_days == 0
    page = admin_client_role.get("/settings/").content.decode()
    assert "retention.expiredPurgeDays" in page and "0: never" in page


# --- the maintenance purge ----------------------------------------------------------------------


def test_maintenance_purges_an_expired_memory_past_retention_with_a_tombstone_and_receipt():
    due = remember("The staging freeze code is 4417-alpha", expired_days_ago=31)
    report = tick()
    assert report["maintenance"]["expired"]["purged"] == 1
    assert report["maintenance"]["expired"]["verified"] is True
    due.refresh_from_db()
    assert due.is_purged and due.content == PURGED and due.is_deleted
    tombstone = MemoryHistory.objects.get(memory_id=due.id, event=PURGED_EVENT)
    assert (tombstone.changed_by, tombstone.actor_type) == ("expiry", "system")
    assert "expired" in tombstone.reason and "retention.expiredPurgeDays" in tombstone.reason
    assert tombstone.metadata["scope"] == "expiry"
    receipt = tombstone.metadata["receipt"]
    assert receipt["verified"] is True and receipt["memories"] == [due.id]
    assert receipt["tombstone"] == tombstone.id == report["maintenance"]["expired"]["tombstone"]
    assert not MemoryHistory.objects.filter(new_content__contains="4417-alpha").exists()


def test_nothing_is_purged_before_the_retention_days_have_passed():
    waiting = remember("The staging freeze code is 4417-alpha", expired_days_ago=29)
    future = remember("The deploy freeze ends next month")
    writes.modify(
        future.id,
        {"expires_at": timezone.now() + timedelta(days=20)},
        actor=Actor("ada"),
        reason="r",
    )
    never = remember("Billing runs on Postgres 16")
    assert "expired" not in tick()["maintenance"]
    assert not any(purged(m) for m in (waiting, future, never))
    # Two days later the first one is due (the store's clock is the only thing that moved).
    later = timezone.now() + timedelta(days=2)
    assert expiry.purge_expired(now=later)["purged"] == 1
    assert purged(waiting) and not purged(future) and not purged(never)


def test_zero_days_means_expired_memories_are_never_purged():
    configure(**{"retention.expiredPurgeDays": 0})
    ancient = remember("The staging freeze code is 4417-alpha", expired_days_ago=3650)
    assert "expired" not in tick()["maintenance"]
    assert expiry.purge_expired(now=timezone.now() + timedelta(days=36500)) is None
    assert not purged(ancient)


def test_the_retention_days_are_read_at_each_run():
    memory = remember("The staging freeze code is 4417-alpha", expired_days_ago=10)
    assert expiry.purge_expired() is None
    configure(**{"retention.expiredPurgeDays": 7})
    assert expiry.purge_expired()["purged"] == 1 and purged(memory)


@pytest.mark.parametrize(
    "paused", [{"autonomous.frozen": True}, {"autonomous.enabled": False}], ids=str
)
def test_paused_maintenance_purges_nothing_until_it_runs_again(paused):
    due = remember("The staging freeze code is 4417-alpha", expired_days_ago=45)
    configure(**paused)
    assert "maintenance" not in tick()
    assert not purged(due)
    configure(**{"autonomous.frozen": False, "autonomous.enabled": True})
    assert tick()["maintenance"]["expired"]["purged"] == 1
    assert purged(due)


def test_a_run_purges_one_batch_soonest_expired_first_and_the_next_run_the_rest():
    oldest = remember("Expired memory one: the freeze code 4417", expired_days_ago=60)
    middle = remember("Expired memory two: the vault code 9921", expired_days_ago=50)
    newest = remember("Expired memory three: the door code 7733", expired_days_ago=40)
    first = expiry.purge_expired(batch=2)
    assert first["purged"] == 2 and purged(oldest) and purged(middle) and not purged(newest)
    # One receipt for the batch, kept with the first tombstone; every memory has its tombstone.
    tombstones = MemoryHistory.objects.filter(event=PURGED_EVENT)
    assert {t.metadata["receiptId"] for t in tombstones} == {first["tombstone"]}
    assert expiry.purge_expired(batch=2)["purged"] == 1 and purged(newest)
    assert expiry.purge_expired(batch=2) is None


def test_a_forgotten_memory_that_expired_is_purged_too():
    memory = remember("The staging freeze code is 4417-alpha", expired_days_ago=31)
    writes.forget(memory.id, actor=Actor("ada"), reason="wrong")
    assert expiry.purge_expired()["purged"] == 1 and purged(memory)


def test_the_outlook_says_when_maintenance_purges_an_expired_memory():
    memory = remember("The staging freeze code is 4417-alpha", expired_days_ago=1)
    seen = expiry.outlook(memory)
    assert seen.expired and seen.purge_at == memory.expires_at + timedelta(days=30)
    assert not seen.paused
    configure(**{"retention.expiredPurgeDays": 0, "autonomous.frozen": True})
    seen = expiry.outlook(memory)
    assert seen.purge_at is None and seen.paused
    assert expiry.outlook(remember("Billing runs on Postgres 16")) is None
