"""Purging in the browser: from a memory's page to the preview, the typed confirmation and the
receipt (htmx swaps and the client redirect), on a desktop and on a 390 px phone."""

import pytest
from playwright.sync_api import expect

from memory import writes
from memory.writes import Actor

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

SECRET = "The staging DB password is hunter2-prod, Priya rotates it monthly."


@pytest.fixture
def leaked(db):
    writes.remember("Priya owns the staging database.", actor=Actor("agent-one", "agent"))
    return writes.remember(SECRET, actor=Actor("agent-one", "agent"), create_job=False).memory


def test_an_admin_previews_confirms_and_gets_the_receipt(page, live_server, login, leaked, shot):
    login("admin")
    page.goto(f"{live_server.url}/memories/{leaked.id}/")
    page.get_by_test_id("purge-link").click()
    page.get_by_label("Reason").fill("a leaked password")
    page.get_by_role("button", name="Preview").click()
    preview = page.get_by_test_id("purge-preview")
    expect(preview).to_contain_text("1 memory becomes a tombstone")
    expect(page.get_by_test_id("rows-memories")).to_have_text("1")
    shot("purge-preview")
    page.get_by_test_id("confirm").fill("purge")
    page.get_by_test_id("purge").click()
    expect(page.locator(".field-error")).to_contain_text("Type PURGE")
    page.get_by_test_id("confirm").fill("PURGE")
    page.get_by_test_id("purge").click()
    expect(page.get_by_test_id("receipt-status")).to_contain_text("Done.")
    assert "/purge/receipts/" in page.url
    expect(page.locator("body")).not_to_contain_text("hunter2-prod")
    shot("purge-receipt")
    page.get_by_role("link", name="← Memory").click()
    expect(page.get_by_test_id("purge-notice")).to_be_visible()
    expect(page.get_by_test_id("content")).to_have_text("[purged]")
    shot("purge-memory")


def test_the_purge_pages_fit_a_phone(page, live_server, login, leaked, shot):
    login("admin")
    page.set_viewport_size({"width": 390, "height": 844})
    page.goto(f"{live_server.url}/purge/?memory={leaked.id}")
    page.get_by_label("Reason").fill("a leaked password")
    page.get_by_role("button", name="Preview").click()
    expect(page.get_by_test_id("purge-preview")).to_be_visible()
    assert page.evaluate("document.documentElement.scrollWidth - window.innerWidth") <= 0
    shot("purge-preview-phone")
