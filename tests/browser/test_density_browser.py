"""Issue 19, density: compact queue rows at 1280x800 show at least 10 proposals (full rows show a
handful), the choice is remembered per person, `d` toggles it, and the whole keyboard flow
(j/k/a/r/e/x/o) works on compact rows, the focused one showing its details."""

import re

import pytest
from playwright.sync_api import expect

from dashboard.models import Preferences
from pipeline.models import Proposal
from pipeline.writes.config import update_config
from tests.conftest import run_pipeline_on

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

SCREEN = {"width": 1280, "height": 800}
SEED = [
    "The team uses Kafka for billing events. Standup notes from Monday.",
    "Priya maintains billing-api. From the planning notes.",
]
LATER = [
    "The team doesn't use Kafka for billing events anymore. Standup notes from Friday.",
    "Priya maintains billing-api and reviews every schema migration for it. From the notes.",
]
FOCUSED = re.compile(r"\bfocused\b")


def owners(n: int) -> list[str]:
    return [
        f"Engineer {i} owns the release checklist for project {i} and signs off every "
        f"deploy of it to production. From the planning notes of week {i}."
        for i in range(n)
    ]


@pytest.fixture
def busy_queue(db):
    """UPDATEs (one a contradiction) with their targets, then many ADDs, all waiting."""
    update_config({"shadowMode": False}, changed_by="test", reason="seed")
    run_pipeline_on(*SEED)
    update_config({"shadowMode": True}, changed_by="test", reason="review")
    run_pipeline_on(*LATER, *owners(16))
    assert Proposal.objects.filter(status="pending").count() >= 14


def rows_in_view(page) -> int:
    """Queue rows whose whole box is inside the viewport."""
    return page.evaluate(
        """() => Array.from(document.querySelectorAll("tr[data-row]")).filter((row) => {
             const box = row.getBoundingClientRect();
             return box.top >= 0 && box.bottom <= window.innerHeight;
           }).length"""
    )


def test_compact_rows_fit_ten_proposals_on_a_laptop_screen_and_are_remembered(
    page, live_server, login, busy_queue
):
    page.set_viewport_size(SCREEN)
    login("reviewer")
    page.goto(f"{live_server.url}/review/")
    expect(page.locator("tr[data-row]").first).to_have_class(FOCUSED)
    full = rows_in_view(page)
    assert full < 10
    page.keyboard.press("d")
    expect(page.locator("#queue")).to_have_class(re.compile(r"\bcompact\b"))
    expect(page.locator("[data-density-toggle]")).to_have_attribute("aria-pressed", "true")
    compact = rows_in_view(page)
    assert compact >= 10, (full, compact)
    # Remembered: the next visit (a reload, another day) draws compact rows from the server.
    expect(page.locator("#toast")).to_contain_text("Compact rows")
    assert Preferences.objects.get(user__username="rita").compact_rows
    page.reload()
    expect(page.locator("#queue")).to_have_class(re.compile(r"\bcompact\b"))
    assert rows_in_view(page) >= 10
    # The button turns it off again.
    page.click("[data-density-toggle]")
    expect(page.locator("#queue")).not_to_have_class(re.compile(r"\bcompact\b"))
    assert not Preferences.objects.get(user__username="rita").compact_rows


def test_the_keyboard_flow_works_on_compact_rows(page, live_server, login, busy_queue):
    Preferences.objects.create(user_id=_rita_id(), compact_rows=True)
    page.set_viewport_size(SCREEN)
    login("reviewer")
    page.goto(f"{live_server.url}/review/?action=add&sort=age")
    rows = page.locator("tr[data-row]")
    first, second, third = rows.nth(0), rows.nth(1), rows.nth(2)
    expect(first).to_have_class(FOCUSED)
    # The focused row shows its details and buttons; the others are one line, buttons hidden.
    expect(first.locator("[data-action=approve]")).to_be_visible()
    expect(first.locator("td.fact > div.small.muted")).to_be_visible()
    expect(second.locator("[data-action=approve]")).to_be_hidden()
    one_line = second.bounding_box()["height"]
    assert one_line < 40 < first.bounding_box()["height"]

    page.keyboard.press("j")
    expect(second).to_have_class(FOCUSED)
    expect(second.locator("[data-action=approve]")).to_be_visible()
    expect(first.locator("[data-action=approve]")).to_be_hidden()
    page.keyboard.press("k")
    expect(first).to_have_class(FOCUSED)

    page.keyboard.press("x")
    expect(first.locator("input[data-select]")).to_be_checked()
    page.keyboard.press("a")
    expect(first.locator("[data-testid=row-note]")).to_contain_text("Approved by rita")
    expect(second).to_have_class(FOCUSED)  # a decision moves on to the next open row

    page.keyboard.press("e")
    box = second.locator("textarea[name=content]")
    expect(box).to_be_visible()
    expect(box).to_be_focused()
    page.keyboard.press("Escape")
    expect(box).to_be_hidden()

    page.keyboard.press("r")
    reason = second.locator("input[name=reason]")
    expect(reason).to_be_visible()
    reason.fill("not durable")
    page.keyboard.press("Enter")
    expect(second.locator("[data-testid=row-note]")).to_contain_text("Rejected by rita")
    expect(third).to_have_class(FOCUSED)

    target = third.get_attribute("id").removeprefix("p-")
    page.keyboard.press("o")
    page.wait_for_url(f"{live_server.url}/proposals/{target}/")


def _rita_id() -> int:
    from django.contrib.auth.models import User

    return User.objects.get(username="rita").id
