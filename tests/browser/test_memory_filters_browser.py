"""The Memories page's filters in a real browser: Back and Forward bring the fields back in step
with the results they show (a QA pass: after Back the search box was empty while the list was
still the search's, and the next change dropped the search without a word)."""

from __future__ import annotations

import re

import pytest
from playwright.sync_api import expect

from memory import writes
from memory.writes import Actor

pytestmark = pytest.mark.django_db(transaction=True)


def test_back_and_forward_set_the_filters_from_the_address(page, live_server, login):
    for text, kind in [
        ("The runbook for the ledger restore lives in the wiki", "procedural"),
        ("The runbook for billing incidents is pinned in the channel", "fact"),
        ("Kenji owns the ingest worker", "fact"),
    ]:
        writes.remember(text, actor=Actor("x", "agent"), create_job=False, type=kind)
    login("viewer")
    page.goto(f"{live_server.url}/memories/")
    page.fill("#mb-q", "runbook")
    expect(page).to_have_url(re.compile(r"q=runbook"))
    page.select_option("#mb-type", "procedural")
    expect(page).to_have_url(re.compile(r"type=procedural"))
    page.select_option("#mb-pinned", index=1)
    expect(page).to_have_url(re.compile(r"pinned=[a-z]"))

    page.go_back()
    expect(page).to_have_url(re.compile(r"type=procedural"))
    expect(page.locator("#mb-q")).to_have_value("runbook")
    expect(page.locator("#mb-type")).to_have_value("procedural")
    expect(page.locator("#mb-pinned")).to_have_value("")
    page.go_back()
    expect(page.locator("#mb-q")).to_have_value("runbook")
    expect(page.locator("#mb-type")).to_have_value("")
    # The next change keeps the search the page shows.
    page.select_option("#mb-type", "fact")
    expect(page).to_have_url(re.compile(r"q=runbook.*type=fact|type=fact.*q=runbook"))
    expect(page.locator("#results")).to_contain_text("billing incidents")
    expect(page.locator("#results")).not_to_contain_text("Kenji")


def test_a_searchs_first_result_is_focused_so_o_opens_it(page, live_server, login):
    """Found by a day of reviewing: "/", a search, Esc, "o" did nothing, no row being focused
    after the results came (the review queue focuses its first row)."""
    for text in ("The ledger restore runbook lives in the wiki", "Kenji owns the ingest worker"):
        writes.remember(text, actor=Actor("x", "agent"), create_job=False)
    login("viewer")
    page.goto(f"{live_server.url}/memories/")
    page.keyboard.press("/")
    expect(page.locator("#mb-q")).to_be_focused()
    page.keyboard.type("ledger")
    expect(page).to_have_url(re.compile(r"q=ledger"))
    first = page.locator("#results tr[data-row]").first
    expect(first).to_contain_text("ledger restore")
    expect(first).to_have_class(re.compile("focused"))
    page.keyboard.press("Escape")
    page.keyboard.press("o")
    expect(page).to_have_url(re.compile(r"/memories/[0-9a-f-]+/$"))
