"""Expiry on the memory pages (issue 22, item 8): a reviewer sets, moves or lifts a memory's
expiry on its page (an audited edit; a bad value is shown next to the field and changes
nothing; viewers cannot), an expired memory shows as expired on its page and in the list (with
when maintenance purges it), and the list's search and its "live" state leave it out."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from dashboard.templatetags.curation import relative
from memory import writes
from memory.models import Memory, MemoryHistory
from memory.writes import Actor
from pipeline.review import update_config
from tests.aria_checks import assert_errors_described

pytestmark = pytest.mark.django_db

AGENT = Actor("x", "agent")


def remember(text: str, **kwargs) -> Memory:
    return writes.remember(text, actor=AGENT, create_job=False, **kwargs).memory


def expired(text: str, days_ago: float = 1) -> Memory:
    return remember(text, expires_at=timezone.now() - timedelta(days=days_ago))


def action(client, memory, hx=None, **data):
    return client.post(f"/memories/{memory.id}/action/", {"action": "expiry", **data}, **(hx or {}))


def state(memory):
    memory.refresh_from_db()
    updates = MemoryHistory.objects.filter(memory_id=memory.id, event="updated").count()
    return memory.expires_at, memory.version, updates


# --- the edit -----------------------------------------------------------------------------------


def test_a_reviewer_sets_an_expiry_in_utc_and_the_timeline_records_it(reviewer_client, hx):
    memory = remember("The deploy freeze lasts all January")
    response = action(reviewer_client, memory, hx, expires_at="2099-01-31T00:00", if_version=1)
    assert response.status_code == 200
    assert state(memory) == (datetime(2099, 1, 31, tzinfo=UTC), 2, 1)
    page = response.content.decode()
    assert "Expires 2099-01-31 00:00 UTC" in page  # the notice
    assert 'data-testid="expires"' in page and "2099-01-31 00:00:00 UTC" in page
    event = MemoryHistory.objects.get(memory_id=memory.id, event="updated")
    assert (event.changed_by, event.actor_type) == ("rita", "operator")
    assert event.metadata["changedFields"] == ["expires_at"]
    assert event.metadata["expiresAt"] == "2099-01-31T00:00:00Z"
    assert event.reason == "expiry set to 2099-01-31 00:00:00 UTC from the memory browser"


def test_clearing_the_field_lifts_the_expiry_with_the_reason_given(reviewer_client):
    memory = expired("The deploy freeze lasts all January")
    response = action(reviewer_client, memory, expires_at="", reason="still true", if_version=1)
    assert response.status_code == 302
    assert state(memory) == (None, 2, 1)
    event = MemoryHistory.objects.get(memory_id=memory.id, event="updated")
    assert event.reason == "still true" and event.metadata["expiresAt"] is None
    page = reviewer_client.get(f"/memories/{memory.id}/").content.decode()
    assert 'data-testid="expired"' not in page and "Expiry lifted" in page


def test_a_past_moment_expires_the_memory_now(reviewer_client, hx):
    memory = remember("The deploy freeze lasts all January")
    response = action(reviewer_client, memory, hx, expires_at="2001-01-01T00:00:00", if_version=1)
    assert "Expired now" in response.content.decode()
    assert Memory.objects.get(id=memory.id).is_expired


@pytest.mark.parametrize(
    ("value", "says"),
    [
        ("next tuesday", "is not an ISO 8601 date and time"),
        ("2099-02-30T10:00", "ISO 8601"),
        ("9999-12-31T23:59:59", "is too far ahead"),
    ],
)
def test_a_bad_value_is_shown_next_to_the_field_and_changes_nothing(
    reviewer_client, hx, value, says
):
    memory = remember("The deploy freeze lasts all January")
    before = state(memory)
    response = action(reviewer_client, memory, hx, expires_at=value, if_version=1)
    page = response.content.decode()
    assert response.status_code == 200
    field = page.index('id="expiry-at"')
    error = page.index('id="expiry-at-error"')
    assert field < error < page.index('id="expiry-reason"')
    assert says in page[error : error + 300]
    assert_errors_described(page)
    assert 'open data-testid="expiry-action"' in page  # the form stays open on its error
    assert state(memory) == before
    plain = action(reviewer_client, memory, expires_at=value, if_version=1)
    assert plain.status_code == 400 and state(memory) == before


def test_saving_the_same_expiry_again_says_nothing_changed(reviewer_client, hx):
    memory = remember("Freeze", expires_at=datetime(2099, 1, 31, tzinfo=UTC))
    response = action(reviewer_client, memory, hx, expires_at="2099-01-31T00:00:00", if_version=1)
    assert "this is already the memory&#x27;s expiry" in response.content.decode()
    assert state(memory)[1:] == (1, 0)


def test_a_stale_page_is_refused_with_the_current_version(reviewer_client, hx):
    memory = remember("Freeze")
    writes.modify(memory.id, {"pinned": True}, actor=Actor("ada"), reason="r")
    response = action(reviewer_client, memory, hx, expires_at="2099-01-31T00:00", if_version=1)
    assert "now version 2" in response.content.decode()
    assert state(memory) == (None, 2, 1)


def test_viewers_cannot_change_an_expiry(viewer_client, hx):
    memory = remember("Freeze")
    for extra in ({}, hx):
        response = action(viewer_client, memory, extra, expires_at="2099-01-31T00:00")
        assert response.status_code == 403
    assert state(memory) == (None, 1, 0)
    page = viewer_client.get(f"/memories/{memory.id}/").content.decode()
    assert 'id="expiry-at"' not in page


# --- the expired display ------------------------------------------------------------------------


def test_an_expired_memory_shows_as_expired_with_when_maintenance_purges_it(viewer_client):
    memory = expired("The deploy freeze lasts all January", days_ago=3)
    page = viewer_client.get(f"/memories/{memory.id}/").content.decode()
    assert 'data-testid="expired"' in page and 'data-testid="expiry-notice"' in page
    purge_at = memory.expires_at + timedelta(days=30)
    assert f"purges it {purge_at:%Y-%m-%d %H:%M} UTC, 30 days after it expired" in page
    update_config(
        {"autonomous.frozen": True, "retention.expiredPurgeDays": 0}, changed_by="t", reason="t"
    )
    page = viewer_client.get(f"/memories/{memory.id}/").content.decode()
    assert "never purged for its expiry" in page


def test_a_far_expiry_stored_before_the_bound_still_shows_its_page(viewer_client):
    """Expiries were not bounded before: a year-9999 one must not break the memory's page (its
    purge date, ten years of retention later, is past the calendar: none is shown)."""
    memory = remember("The archive is kept forever")
    far = datetime(9999, 12, 31, 23, 59, 59, tzinfo=UTC)
    Memory.objects.filter(id=memory.id).update(expires_at=far)
    update_config({"retention.expiredPurgeDays": 3650}, changed_by="t", reason="t")
    response = viewer_client.get(f"/memories/{memory.id}/")
    assert response.status_code == 200
    assert "9999-12-31" in response.content.decode()


def test_an_expired_memory_past_retention_is_said_to_go_at_the_next_run(viewer_client):
    memory = expired("The deploy freeze lasts all January", days_ago=40)
    page = viewer_client.get(f"/memories/{memory.id}/").content.decode()
    assert "the next maintenance run purges it" in page
    assert f"expired on {memory.expires_at:%Y-%m-%d}" in page


def test_near_moments_read_as_durations_and_far_ones_as_dates():
    now = timezone.now()
    assert relative(now + timedelta(hours=5, seconds=30)) == "in 5.0 h"
    assert relative(now - timedelta(days=3, seconds=30)) == "3.0 d ago"
    assert relative(datetime(2099, 1, 31, tzinfo=UTC)) == "on 2099-01-31"


def test_maintenance_paused_is_said_on_the_expired_page(viewer_client):
    memory = expired("The deploy freeze lasts all January")
    update_config({"autonomous.frozen": True}, changed_by="t", reason="t")
    page = viewer_client.get(f"/memories/{memory.id}/").content.decode()
    assert "it is paused now" in page


def test_the_list_shows_expired_memories_under_expired_and_all_not_live(viewer_client):
    gone = expired("The freeze code is 4417")
    later = remember("The freeze ends in 2099", expires_at=datetime(2099, 1, 31, tzinfo=UTC))
    plain = remember("Billing runs on Postgres 16")

    def listed(state: str) -> str:
        return viewer_client.get("/memories/", {"deleted": state}).content.decode()

    live = listed("live")
    assert gone.id not in live and later.id in live and plain.id in live
    assert 'data-testid="expires"' in live and 'data-testid="expired"' not in live
    only = listed("expired")
    assert gone.id in only and later.id not in only and plain.id not in only
    assert 'data-testid="expired"' in only and "mb-expired" in only
    assert all(m.id in listed("all") for m in (gone, later, plain))


def test_the_dashboard_search_leaves_expired_memories_out(viewer_client):
    gone = expired("The Hamburg vault code is 4417")
    kept = remember("The Hamburg vault opens at nine")
    page = viewer_client.get("/memories/", {"q": "Hamburg vault", "deleted": "all"}).content
    assert kept.id in page.decode() and gone.id not in page.decode()


def test_the_list_query_count_does_not_grow_with_expired_rows(viewer_client, hx):
    def count() -> int:
        with CaptureQueriesContext(connection) as captured:
            assert viewer_client.get("/memories/", {"deleted": "all"}, **hx).status_code == 200
        return len(captured)

    for i in range(3):
        expired(f"Expired note {i}")
    few = count()
    for i in range(20):
        expired(f"Another expired note {i}")
        remember(f"A note expiring later {i}", expires_at=timezone.now() + timedelta(days=9))
    assert count() == few


def test_the_overview_counts_expired_memories_apart_from_the_live_ones(viewer_client):
    remember("Kenji deploys billing-api on Fridays")
    expired("The deploy freeze lasts all January")
    page = viewer_client.get("/").content.decode()
    assert "1 expired, out of recall" in page
    live = page.split('<div class="label">live memories')[0].rsplit('<div class="value">', 1)[1]
    assert live.startswith("1<")


def test_re_saving_a_precise_expiry_as_the_field_shows_it_changes_nothing(reviewer_client, hx):
    """Found by a QA pass: an expiry set to the microsecond (the API keeps it) shows in the field
    to the second, and saving the form untouched moved it by that fraction, as an audited change."""
    moment = datetime(2099, 1, 31, 12, 30, 15, 987654, tzinfo=UTC)
    memory = remember("The deploy freeze lasts all January", expires_at=moment)
    form = reviewer_client.get(f"/memories/{memory.id}/").content.decode()
    assert 'value="2099-01-31T12:30:15"' in form  # what the field shows
    response = action(reviewer_client, memory, hx, expires_at="2099-01-31T12:30:15", if_version=1)
    assert "Nothing changed: this is already the memory" in response.content.decode()
    assert state(memory) == (moment, 1, 0)
    # A second's difference is a change.
    action(reviewer_client, memory, hx, expires_at="2099-01-31T12:30:16", if_version=1)
    assert state(memory) == (datetime(2099, 1, 31, 12, 30, 16, tzinfo=UTC), 2, 1)
