"""Issue 26, item 3: choosing a saved queue in the review filters shows its rows and, beside
them on a wide screen (above them on a phone), its guidelines; the overview links each queue."""

import re

import pytest
from playwright.sync_api import expect

from pipeline.models import Proposal
from pipeline.writes.config import update_config
from tests.conftest import run_pipeline_on

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def mixed_queue(db):
    """An UPDATE of an existing memory and ADDs, all waiting."""
    update_config({"shadowMode": False}, changed_by="test", reason="seed")
    run_pipeline_on("The team uses Kafka for billing events. Standup notes from Monday.")
    update_config({"shadowMode": True}, changed_by="test", reason="review")
    run_pipeline_on(
        "The team doesn't use Kafka for billing events anymore. Standup notes from Friday.",
        "Priya maintains billing-api. From the planning notes.",
    )
    pending = Proposal.objects.filter(status="pending")
    assert pending.filter(action__in=["update", "delete"]).exists()
    assert pending.filter(action="add").exists()


def box(page, selector):
    return page.locator(selector).first.bounding_box()


def test_a_queue_chosen_in_the_filters_shows_its_rows_and_its_guidelines_beside_them(
    page, live_server, login, mixed_queue
):
    page.set_viewport_size({"width": 1440, "height": 900})
    login("reviewer")
    page.goto(f"{live_server.url}/")
    page.get_by_role("link", name="Destructive").click()
    expect(page.get_by_test_id("queue-guidelines")).to_be_visible()
    expect(page.locator("tr[data-row] .badge-add")).to_have_count(0)
    guidelines, rows = box(page, "[data-testid=queue-guidelines]"), box(page, "tr[data-row]")
    assert guidelines["x"] >= rows["x"] + rows["width"] - 1  # beside the rows, to their right

    page.goto(f"{live_server.url}/review/")
    expect(page.get_by_test_id("queue-guidelines")).to_have_count(0)
    expect(page.locator("tr[data-row] .badge-add").first).to_be_visible()
    page.select_option("#id_queue", "destructive")  # htmx swaps the queue in place
    expect(page.get_by_test_id("queue-guidelines")).to_contain_text("pinned")
    expect(page).to_have_url(re.compile(r"/review/\?queue=destructive&"))
    expect(page.locator("tr[data-row] .badge-add")).to_have_count(0)


def test_on_a_phone_the_guidelines_sit_above_the_rows(page, live_server, login, mixed_queue):
    page.set_viewport_size({"width": 390, "height": 844})
    login("reviewer")
    page.goto(f"{live_server.url}/review/?queue=destructive")
    expect(page.get_by_test_id("queue-guidelines")).to_be_visible()
    guidelines, rows = box(page, "[data-testid=queue-guidelines]"), box(page, "tr[data-row]")
    assert guidelines["y"] + guidelines["height"] <= rows["y"] + 1
