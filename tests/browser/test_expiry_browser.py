"""Expiry in a real browser: a reviewer sets a memory's expiry with the page's date and time
picker (htmx swaps the page in place), lifts it by emptying the field, expires it with a moment
already past, and then finds it marked expired on its page and in the list's "expired" state."""

from __future__ import annotations

import re

import pytest
from playwright.sync_api import expect

from memory import writes
from memory.writes import Actor

pytestmark = pytest.mark.django_db(transaction=True)


def test_a_reviewer_sets_lifts_and_passes_an_expiry_on_the_memory_page(
    page, live_server, login, shot
):
    memory = writes.remember(
        "The deploy freeze lasts all January", actor=Actor("x", "agent"), create_job=False
    ).memory
    login("reviewer")
    page.goto(f"{live_server.url}/memories/{memory.id}/")
    expiry = page.get_by_test_id("expiry-action")
    expiry.locator("summary").click()
    page.fill("#expiry-at", "2099-01-31T09:30")
    page.fill("#expiry-reason", "the freeze ends with January")
    expiry.get_by_role("button", name="Save expiry").click()
    expect(page.get_by_test_id("expires")).to_have_text("expires on 2099-01-31")
    expect(page.get_by_test_id("expires-at")).to_contain_text("2099-01-31 09:30:00 UTC")
    expect(page.locator(".mb-timeline")).to_contain_text("the freeze ends with January")
    shot("expiry-set")

    page.get_by_test_id("expiry-action").locator("summary").click()
    page.fill("#expiry-at", "")
    page.get_by_test_id("expiry-action").get_by_role("button", name="Save expiry").click()
    expect(page.locator("#actions .row-note")).to_contain_text("Expiry lifted")
    expect(page.get_by_test_id("expires-at")).to_have_text("–")

    page.get_by_test_id("expiry-action").locator("summary").click()
    page.fill("#expiry-at", "2001-01-01T00:00")
    page.get_by_test_id("expiry-action").get_by_role("button", name="Save expiry").click()
    expect(page.get_by_test_id("expired")).to_contain_text("expired")
    expect(page.get_by_test_id("expiry-notice")).to_contain_text("no longer find it")
    shot("expiry-expired-page")

    page.goto(f"{live_server.url}/memories/?deleted=expired")
    row = page.locator(f"#memory-{memory.id}")
    expect(row.get_by_test_id("expired")).to_be_visible()
    expect(row).to_have_class(re.compile("mb-expired"))
    shot("expiry-expired-list")
    page.goto(f"{live_server.url}/memories/")
    expect(page.locator(f"#memory-{memory.id}")).to_have_count(0)
