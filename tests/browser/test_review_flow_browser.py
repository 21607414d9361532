"""Issue 19, defects 7 and 8 and "undo by key", in a real browser: a refused edit keeps its text
and focus, a bulk action on all matching redraws the page's rows and counts, the last page says
it is the last and what arrived meanwhile, and `u` undoes the last decision while its toast shows."""

import re

import pytest
from playwright.sync_api import expect

from memory.models import Memory
from memory.writes import Actor
from pipeline import review as reviewing
from pipeline.models import Proposal
from pipeline.writes.config import update_config
from tests.conftest import run_pipeline_on

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

BASE = ["The team uses Kafka for billing events. Standup notes from Monday."]
LATER = ["The team doesn't use Kafka for billing events anymore. Standup notes from Friday."]
EDIT = "The team moved billing events from Kafka to Pulsar in March."


def owners(n: int, start: int = 0) -> list[str]:
    return [
        f"Engineer {i} owns the release checklist for project {i}. "
        f"The planning notes of week {i} say so."
        for i in range(start, start + n)
    ]


@pytest.fixture
def pinned_update(db):
    """An UPDATE waiting for a reviewer whose target memory is pinned."""
    update_config({"shadowMode": False}, changed_by="test", reason="seed")
    run_pipeline_on(*BASE)
    update_config({"shadowMode": True}, changed_by="test", reason="review")
    run_pipeline_on(*LATER)
    update = Proposal.objects.filter(status="pending", action="update").first()
    Memory.objects.filter(id=update.target_memory_id).update(pinned=True)
    return update


# --- 7. a refused edit keeps the text and the focus -----------------------------------------------


def test_an_edit_refused_for_a_pinned_target_keeps_the_text_and_offers_force(
    page, live_server, login, pinned_update
):
    login("reviewer")
    page.goto(f"{live_server.url}/review/?action=update")
    row = page.locator(f"#p-{pinned_update.id}")
    expect(row).to_have_class(re.compile(r"\bfocused\b"))
    page.keyboard.press("e")
    box = row.locator("textarea[name=content]")
    expect(box).to_be_focused()
    box.fill(EDIT)
    page.keyboard.press("Enter")
    expect(row.locator("[data-testid=row-note]")).to_contain_text("pinned")
    # The text, the open box and the focus stay; the next step (force) is offered beside it.
    box = page.locator(f"#p-{pinned_update.id} textarea[name=content]")
    expect(box).to_be_visible()
    expect(box).to_have_value(EDIT)
    expect(box).to_be_focused()
    expect(page.locator(f"#p-{pinned_update.id}")).to_have_class(re.compile(r"\bfocused\b"))
    force = page.locator(f"#p-{pinned_update.id} form[data-reveal=edit] [data-testid=force-pinned]")
    expect(force).to_be_visible()
    assert Proposal.objects.get(id=pinned_update.id).status == "pending"

    force.locator("input").check()
    box.focus()
    page.keyboard.press("Enter")
    expect(page.locator(f"#p-{pinned_update.id} [data-testid=row-note]")).to_contain_text(
        "Approved by rita"
    )
    assert Memory.objects.get(id=pinned_update.target_memory_id).content == EDIT


def test_an_edit_of_a_row_someone_else_decided_first_is_kept_to_copy(
    page, live_server, login, db, between_requests
):
    update_config({"shadowMode": True}, changed_by="t", reason="t")
    run_pipeline_on(*owners(2))
    login("reviewer")
    page.goto(f"{live_server.url}/review/?action=add&sort=age")
    row = page.locator("tr[data-row].focused")
    row_id = row.get_attribute("id")
    page.keyboard.press("e")
    box = row.locator("textarea[name=content]")
    expect(box).to_be_focused()
    box.fill(EDIT)
    # Rita's focus claimed the row (issue 26): bob takes it over, then decides it first.
    expect(row.locator("[data-claim=mine]")).to_have_count(1)
    with between_requests:  # the page's claims poll may be in flight
        reviewing.claim(row_id.removeprefix("p-"), Actor("bob", "operator"), takeover=True)
        reviewing.decide(row_id.removeprefix("p-"), Actor("bob", "operator"), "approve")
    page.keyboard.press("Enter")
    row = page.locator(f"#{row_id}")
    expect(row.locator("[data-testid=row-note]")).to_contain_text("bob")
    kept = row.locator("[data-testid=kept-edit] textarea")
    expect(kept).to_have_value(EDIT)
    expect(kept).to_be_focused()
    expect(row).to_have_class(re.compile(r"\bfocused\b"))
    expect(row.get_by_role("button", name="Copy the text")).to_be_visible()
    page.context.grant_permissions(["clipboard-read", "clipboard-write"])
    row.get_by_role("button", name="Copy the text").click()
    expect(page.locator("#toast")).to_contain_text("Copied your text.")
    assert page.evaluate("navigator.clipboard.readText()") == EDIT
    proposal = Proposal.objects.get(id=row_id.removeprefix("p-"))
    assert proposal.decided_by == "bob" and proposal.applied_content in (
        None,
        "",
        proposal.fact_content,
    )


# --- 8. stale state after actions -----------------------------------------------------------------


def test_a_bulk_action_on_all_matching_redraws_the_rows_and_the_count(page, live_server, login, db):
    update_config({"shadowMode": True}, changed_by="t", reason="t")
    run_pipeline_on(*owners(4))
    login("reviewer")
    page.goto(f"{live_server.url}/review/?action=add&sort=age")
    rows = page.locator("tr[data-row]")
    count = rows.count()
    assert count >= 4
    expect(page.locator("#queue-counts")).to_contain_text(f"{count} matching")
    page.check("[data-testid=scope-all]")
    page.click("text=Review bulk action…")
    page.click("[data-testid=bulk-confirm]")
    expect(page.locator("[data-testid=bulk-progress]")).to_contain_text(
        f"Done {count} approved of {count}."
    )
    for row in rows.all():
        expect(row).to_have_class(re.compile(r"\bdecided\b"))
        expect(row.locator("[data-action=approve]")).to_have_count(0)
        expect(row.locator("[data-testid=row-note]")).to_contain_text("Approved by rita")
    expect(page.locator("#queue-counts")).to_contain_text("0 matching")
    expect(page.locator("#scope-all-count")).to_have_text("0")


def test_the_last_page_says_so_and_announces_new_proposals(
    page, live_server, login, db, monkeypatch, between_requests
):
    from dashboard.views import review as views

    update_config({"shadowMode": True}, changed_by="t", reason="t")
    run_pipeline_on(*owners(3))
    adds = Proposal.objects.filter(status="pending", action="add").count()
    monkeypatch.setattr(views, "PAGE_SIZE", adds - 1)  # two pages, the last with one row
    login("reviewer")
    page.goto(f"{live_server.url}/review/?action=add&sort=newest")
    expect(page.locator("tr[data-row]")).to_have_count(adds - 1)
    page.keyboard.press("n")
    expect(page.locator("tr[data-row]")).to_have_count(1)
    expect(page.locator("[data-next-page]")).to_have_count(0)
    # The swapped-in page focuses its first row once htmx has settled; "j" before that would
    # focus the row instead of moving past it (CI pressed it in that gap once).
    expect(page.locator("tr[data-row].focused")).to_have_count(1)
    page.keyboard.press("j")  # past the last row of the last page
    end = page.locator("#queue-end")
    expect(end).to_contain_text("End of the queue: this is the last page.")
    expect(page.locator("#toast")).to_contain_text("End of the queue")
    expect(end.locator("[data-testid=fresh-proposals]")).to_have_count(0)

    # The page is still talking to the server (the claim sent on focus): the jobs' writes go
    # between its requests (CI once met one mid-request on SQLite: "database table is locked").
    with between_requests:
        run_pipeline_on(*owners(2, start=10))  # newest first: they land on page 1
    new = Proposal.objects.filter(status="pending", action="add").count() - adds
    assert new >= 2
    page.keyboard.press("n")
    fresh = end.locator("[data-testid=fresh-proposals]")
    expect(fresh).to_have_text(f"{new} new proposals — go to the first page")
    expect(page.locator("#toast")).to_contain_text(f"{new} new proposals")
    fresh.click()
    expect(page.locator("tr[data-row]", has_text="Engineer 11 owns")).to_have_count(1)
    expect(page.locator("[data-next-page]")).to_have_count(1)  # page 1 again


# --- undo by key ----------------------------------------------------------------------------------


def test_u_undoes_the_last_decision_while_its_toast_shows(page, live_server, login, db):
    update_config({"shadowMode": True}, changed_by="t", reason="t")
    run_pipeline_on(*owners(3))
    login("reviewer")
    page.goto(f"{live_server.url}/review/?action=add&sort=age")
    row_id = page.locator("tr[data-row].focused").get_attribute("id")
    page.keyboard.press("a")
    expect(page.locator(f"#{row_id} [data-testid=row-note]")).to_contain_text("Approved by rita")
    expect(page.locator("#toast").get_by_role("button", name="Undo")).to_be_visible()
    assert Proposal.objects.get(id=row_id.removeprefix("p-")).status == "applied"
    page.keyboard.press("u")
    expect(page.locator("#toast")).to_contain_text("Decision undone by rita")
    expect(page.locator(f"#{row_id} [data-action=approve]")).to_be_visible()
    expect(page.locator(f"#{row_id}")).to_have_class(re.compile(r"\bfocused\b"))
    assert Proposal.objects.get(id=row_id.removeprefix("p-")).status == "pending"
    # The help lists it, with the jumps that already work.
    page.keyboard.press("?")
    help_box = page.locator("#shortcuts")
    expect(help_box).to_be_visible()
    expect(help_box).to_contain_text("undo the last decision")
    expect(help_box).to_contain_text("jobs / overview")


def test_the_toast_stays_while_the_pointer_or_focus_is_on_it(page, live_server, login, db):
    update_config({"shadowMode": True}, changed_by="t", reason="t")
    run_pipeline_on(*owners(3))
    login("reviewer")
    page.clock.install()
    page.goto(f"{live_server.url}/review/?action=add&sort=age")
    toast = page.locator("#toast")
    page.keyboard.press("a")
    expect(toast.get_by_role("button", name="Undo")).to_be_visible()
    toast.hover()
    page.clock.fast_forward(20_000)
    expect(toast).to_be_visible()
    page.mouse.move(5, 5)
    page.clock.fast_forward(20_000)
    expect(toast).to_be_hidden()

    page.keyboard.press("j")
    page.keyboard.press("a")
    undo = toast.get_by_role("button", name="Undo")
    expect(undo).to_be_visible()
    undo.focus()
    page.clock.fast_forward(20_000)
    expect(toast).to_be_visible()
    undo.blur()
    page.clock.fast_forward(20_000)
    expect(toast).to_be_hidden()
