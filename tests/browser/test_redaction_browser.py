"""Redacting in the browser: from a queue row (the confirmation opens inside the row, the row is
swapped with the redacted fact), from a memory's page and from a proposal's page (the page is
refreshed in place by htmx), with the CSRF header htmx sends and the page kept."""

import pytest
from playwright.sync_api import expect

from memory.models import Memory
from pipeline.models import Proposal
from tests.test_redaction import FACT, MARKER, SECRET, story

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def told(fake_ollama, role_users):
    memory = story(fake_ollama, edit=False)
    return memory, Proposal.objects.get(source_memory=memory, fact_content=FACT)


def test_a_reviewer_redacts_a_password_from_its_queue_row(page, live_server, login, told, shot):
    memory, proposal = told
    login("reviewer")
    page.goto(f"{live_server.url}/review/")
    row = page.locator(f"#p-{proposal.id}")
    row.get_by_test_id("redact-offer").click()
    panel = row.get_by_test_id("redact-panel")
    expect(panel.get_by_test_id("redact-span")).to_have_text(SECRET)
    expect(panel.get_by_test_id("redact-marker")).to_have_text(MARKER)
    expect(panel.get_by_test_id("redact-after").first).to_contain_text(f"password is {MARKER}")
    panel.scroll_into_view_if_needed()
    shot("redact-confirm")
    panel.get_by_test_id("redact-confirm").click()
    expect(page.locator("#toast")).to_contain_text("Checked: no copy is left.")
    expect(page.locator(f"#p-{proposal.id} [data-fact]")).to_have_text(
        f"The staging DB password is {MARKER}"
    )
    expect(page.locator("#queue")).not_to_contain_text(SECRET)
    assert page.url.endswith("/review/")  # the page was kept: the row was swapped in place
    shot("redact-result-row")
    assert SECRET not in Memory.objects.get(id=memory.id).content


def test_a_reviewer_redacts_from_a_memorys_page_and_the_page_stays(
    page, live_server, login, told, shot
):
    memory, _ = told
    login("reviewer")
    page.goto(f"{live_server.url}/memories/{memory.id}/")
    page.evaluate("window.__kept = true")  # gone if the page reloaded
    page.get_by_test_id("redact-offer").click()
    expect(page.get_by_test_id("redact-panel")).to_contain_text("Redact a password?")
    redactions = []
    page.on("request", lambda r: "step=redact" in (r.post_data or "") and redactions.append(r))
    reason = page.get_by_test_id("redact-reason")
    reason.fill("an agent pasted the staging password")
    reason.press("Enter")  # what cannot be undone runs from its button, never from Enter
    page.get_by_test_id("redact-confirm").click()
    expect(page.get_by_test_id("content")).to_contain_text(MARKER)
    assert len(redactions) == 1
    expect(page.locator("#timeline")).to_contain_text("redacted")
    expect(page.locator("#toast")).to_contain_text("Redacted a password")
    assert page.evaluate("window.__kept === true")
    shot("redact-result-memory")
    page.locator("#timeline").get_by_role("link", name="verified").click()
    expect(page.get_by_test_id("receipt-status")).to_contain_text("Done.")
    shot("redact-receipt")


def test_a_reviewer_redacts_from_a_proposals_page(page, live_server, login, told, shot):
    _, proposal = told
    login("reviewer")
    page.goto(f"{live_server.url}/proposals/{proposal.id}/")
    page.get_by_test_id("redact-section").get_by_test_id("redact-offer").click()
    expect(page.get_by_test_id("redact-panel")).to_contain_text("Redact a password?")
    shot("redact-confirm-proposal")
    page.get_by_test_id("redact-confirm").click()
    expect(page.locator("h1")).to_contain_text(MARKER)
    expect(page.locator("main")).not_to_contain_text(SECRET)
    expect(page.locator(".messages")).to_contain_text("Redacted a password")


def test_the_confirmation_in_a_queue_row_fits_a_phone(page, live_server, login, told, shot):
    _, proposal = told
    login("reviewer")
    page.set_viewport_size({"width": 390, "height": 844})
    page.goto(f"{live_server.url}/review/")
    page.locator(f"#p-{proposal.id}").get_by_test_id("redact-offer").click()
    expect(page.get_by_test_id("redact-confirm")).to_be_visible()
    assert page.evaluate("document.documentElement.scrollWidth - window.innerWidth") <= 0
    shot("redact-confirm-phone")
