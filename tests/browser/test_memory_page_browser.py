"""A memory's page in a real browser: an action redraws the page in place and keeps what was
typed in its other boxes."""

from __future__ import annotations

import pytest
from playwright.sync_api import expect

from memory import writes
from memory.models import Memory
from memory.writes import Actor

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def open_a_memory(page, live_server, login):
    """A reviewer on the page of a fresh memory ("Billing deploys on Tuesdays")."""
    memory = writes.remember(
        "Billing deploys on Tuesdays", actor=Actor("x", "agent"), create_job=False
    ).memory
    login("reviewer")
    page.goto(f"{live_server.url}/memories/{memory.id}/")
    return memory


def test_pinning_keeps_an_edit_typed_but_not_saved_and_the_edit_then_saves(
    page, live_server, login
):
    """Found by a day of reviewing: an edit typed, then a pin, and the edit box came back closed
    with the old text: the edit was gone."""
    memory = open_a_memory(page, live_server, login)
    page.locator("summary", has_text="Edit content").click()
    page.fill("#edit-content", "Billing deploys on Wednesdays")
    page.fill("#edit-reason", "moved with the release train")
    page.fill("#pin-reason", "the release calendar depends on it")
    page.get_by_role("button", name="Pin", exact=True).click()
    expect(page.get_by_test_id("version")).to_contain_text("version 2")  # the pin's answer
    expect(page.locator("#edit-content")).to_be_visible()  # its box is open again
    expect(page.locator("#edit-content")).to_have_value("Billing deploys on Wednesdays")
    expect(page.locator("#edit-reason")).to_have_value("moved with the release train")
    expect(page.locator("#pin-reason")).to_have_value("")  # the sent form's own box is not
    page.get_by_role("button", name="Save as v3").click()
    expect(page.get_by_test_id("version")).to_contain_text("version 3")  # the save's answer
    memory.refresh_from_db()
    assert (memory.content, memory.pinned, memory.version) == (
        "Billing deploys on Wednesdays",
        True,
        3,
    )


def test_an_edit_typed_on_a_text_changed_meanwhile_is_not_put_back_on_the_new_text(
    page, live_server, login
):
    """What was typed starts from the text the page showed: when another edit changed that text
    before the redraw, the box shows the new text (saving the old draft would undo that edit)."""
    memory = open_a_memory(page, live_server, login)
    page.locator("summary", has_text="Edit content").click()
    page.fill("#edit-content", "Billing deploys on Wednesdays")
    writes.modify(
        memory.id,
        {"content": "Billing deploys on Thursdays"},
        actor=Actor("ada", "operator"),
        reason="someone else",
    )
    page.get_by_role("button", name="Pin", exact=True).click()
    expect(page.get_by_role("button", name="Unpin", exact=True)).to_be_visible()
    assert Memory.objects.get(id=memory.id).pinned
    expect(page.locator("#edit-content")).to_have_value("Billing deploys on Thursdays")


def test_a_pin_reason_is_not_put_into_the_unpin_form_someone_elses_pin_made_of_it(
    page, live_server, login
):
    """A second review: a Pin reason typed, another reviewer pinned the memory, and after any
    other action the reason sat in the Unpin box beside its button."""
    memory = open_a_memory(page, live_server, login)
    page.fill("#pin-reason", "the release calendar depends on it")
    writes.modify(memory.id, {"pinned": True}, actor=Actor("ada", "operator"), reason="pinned")
    expiry = page.get_by_test_id("expiry-action")
    expiry.locator("summary").click()
    page.fill("#expiry-at", "2099-01-31T09:30")
    expiry.get_by_role("button", name="Save expiry").click()
    # The answer (the expiry refused: the memory changed since the page was drawn) shows the
    # memory as it is now, pinned; the reason typed for a Pin is not the Unpin's.
    expect(page.get_by_role("button", name="Unpin", exact=True)).to_be_visible()
    expect(page.locator("#pin-reason")).to_have_value("")
