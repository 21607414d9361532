"""The review keyboard does only what the reviewer sees and meant: a held key decides one row, an
open dialog stops the shortcuts behind it, a ticked checkbox neither submits on Enter nor takes
the letters, and a second "g" gets its own time to go somewhere."""

import re

import pytest
from playwright.sync_api import expect

from pipeline.models import Proposal
from pipeline.writes.config import update_config
from tests.conftest import run_pipeline_on

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

QUEUE = "/review/?action=add&sort=age"


@pytest.fixture
def queue(db):
    update_config({"shadowMode": True}, changed_by="t", reason="t")
    run_pipeline_on(
        *(
            f"Engineer {i} owns the release checklist for project {i}. From planning."
            for i in range(4)
        )
    )
    return Proposal.objects.filter(status="pending", action="add").count()


def applied() -> int:
    return Proposal.objects.filter(status="applied").count()


def open_queue(page, live_server, login):
    login("reviewer")
    page.goto(live_server.url + QUEUE)
    rows = page.locator("tr[data-row]")
    expect(rows.first).to_have_class(re.compile("focused"))
    return rows


def test_holding_a_decision_key_decides_one_row_not_every_row_it_reaches(
    page, live_server, login, queue
):
    rows = open_queue(page, live_server, login)
    first = rows.first.get_attribute("id")
    page.keyboard.down("a")
    expect(page.locator(f"#{first} [data-testid=row-note]")).to_contain_text("Approved")
    for _ in range(10):  # the key still held: the browser repeats it, and focus moved on
        page.keyboard.down("a")
        page.wait_for_timeout(40)
    page.keyboard.up("a")
    page.wait_for_timeout(300)  # a repeated "a" would have been answered by now
    assert applied() == 1 < queue


def test_shortcuts_do_nothing_behind_the_open_help_dialog(page, live_server, login, queue):
    rows = open_queue(page, live_server, login)
    first = rows.first.get_attribute("id")
    help_dialog = page.locator("#shortcuts")
    page.keyboard.press("?")
    expect(help_dialog).to_be_visible()
    page.keyboard.press("x")
    page.keyboard.press("Escape")
    expect(help_dialog).to_be_hidden()
    expect(page.locator(f"#{first} input[data-select]")).not_to_be_checked()
    page.keyboard.press("?")
    page.keyboard.press("a")
    page.wait_for_timeout(300)  # an approval behind the dialog would have been answered by now
    assert applied() == 0
    page.keyboard.press("Escape")
    page.keyboard.press("a")  # the dialog closed: the focused row, still the first
    expect(page.locator(f"#{first} [data-testid=row-note]")).to_contain_text("Approved")
    assert applied() == 1


def test_enter_on_a_ticked_checkbox_submits_nothing_and_letters_still_work(
    page, live_server, login, queue
):
    rows = open_queue(page, live_server, login)
    bulk = []
    page.on("request", lambda r: r.method == "POST" and "/bulk" in r.url and bulk.append(r))
    tick = rows.first.locator("input[data-select]")
    tick.click()
    expect(tick).to_be_checked()
    page.keyboard.press("Enter")  # submitted the bulk bar's form: a preview nobody asked for
    page.keyboard.press("j")  # the checkbox has focus, and it takes no letters
    expect(rows.nth(1)).to_have_class(re.compile("focused"))
    page.keyboard.press("x")
    expect(rows.nth(1).locator("input[data-select]")).to_be_checked()
    expect(page.locator("#bulk-panel")).not_to_contain_text("Confirm")
    assert bulk == []


def test_a_second_g_gets_its_own_time_to_go_somewhere(page, live_server, login, queue):
    open_queue(page, live_server, login)
    page.keyboard.press("g")
    page.keyboard.press("x")  # not a place: this "g" is spent
    page.wait_for_timeout(1000)
    page.keyboard.press("g")
    page.wait_for_timeout(500)  # past the first "g"'s 1.2 s, well within the second's
    page.keyboard.press("m")
    expect(page).to_have_url(re.compile(r"/memories/$"))


SECRET = "The staging deploy key is AKIAIOSFODNN7EXAMPLE for billing-api. Rotate it monthly."


def test_a_row_that_asks_first_keeps_the_focus_so_a_second_a_decides_no_other_row(
    page, live_server, login, db
):
    update_config({"shadowMode": True}, changed_by="t", reason="t")
    run_pipeline_on(SECRET, "Engineer 7 owns the release checklist for project 7. From planning.")
    secret = Proposal.objects.get(status="pending", safety_kinds__contains="secret")
    pending = Proposal.objects.filter(status="pending").count()
    rows = open_queue(page, live_server, login)
    assert rows.count() >= 2
    page.locator(f"#p-{secret.id} [data-fact]").click()  # focus it (a row after it is open)
    expect(page.locator(f"#p-{secret.id} ~ tr[data-open]").first).to_be_attached()

    page.keyboard.press("a")  # asks "Approve anyway?": nothing is decided yet
    note = page.locator(f"#p-{secret.id} [data-testid=row-note]")
    expect(note).to_contain_text("secret")
    expect(page.locator("tr[data-row].focused")).to_have_attribute("id", f"p-{secret.id}")
    page.keyboard.press("a")  # the same row asks again; before, this approved the next one
    expect(note).to_contain_text("secret")
    expect(page.locator("tr[data-row].focused")).to_have_attribute("id", f"p-{secret.id}")
    assert Proposal.objects.filter(status="pending").count() == pending
    assert applied() == 0

    page.keyboard.press("j")  # moving on is the reviewer's choice, and the keys work there
    page.keyboard.press("a")
    expect(page.locator("[data-testid=row-note]").filter(has_text="Approved")).to_have_count(1)
    assert Proposal.objects.get(id=secret.id).status == "pending"


def test_a_decision_in_a_row_brings_the_bulk_bars_counts_up_to_date(
    page, live_server, login, queue
):
    open_queue(page, live_server, login)
    counts, scope_all = page.locator("#queue-counts strong"), page.locator("#scope-all-count")
    expect(counts).to_have_text(str(queue))
    page.keyboard.press("a")
    expect(page.locator("[data-testid=row-note]").first).to_contain_text("Approved")
    expect(counts).to_have_text(str(queue - 1))  # before: the page's count until a reload
    expect(scope_all).to_have_text(str(queue - 1))
    page.locator("#toast [data-undo]").click()  # the undo puts it back: counted again
    expect(counts).to_have_text(str(queue))


@pytest.mark.parametrize("path", ["/jobs/", "/entities/"])
def test_o_opens_the_focused_row_of_the_jobs_and_entities_lists(
    page, live_server, login, queue, path
):
    """The ? help says o / Enter open the detail; on these two lists they opened nothing."""
    from django.utils import timezone

    from memory.models import Entity

    now = timezone.now()
    for name in ("Priya", "billing-api", "Kenji"):
        Entity.objects.create(
            name=name, canonical_name=name.lower(), created_at=now, updated_at=now
        )
    login("reviewer")
    page.goto(live_server.url + path)
    rows = page.locator("tr[data-row]")
    assert rows.count() >= 2, "the pipeline made jobs and entities"
    page.keyboard.press("j")
    page.keyboard.press("j")
    target = page.locator("tr[data-row].focused [data-action=open]").get_attribute("href")
    page.keyboard.press("o")
    page.wait_for_url(live_server.url + target)


def test_the_jobs_list_keeps_the_focused_row_when_it_refreshes_itself(
    page, live_server, login, queue
):
    """It refreshes every few seconds; each refresh dropped the focus and j began again."""
    login("reviewer")
    page.goto(live_server.url + "/jobs/")
    for _ in range(3):
        page.keyboard.press("j")
    focused = page.locator("tr[data-row].focused")
    row_id = focused.get_attribute("id")
    page.evaluate("() => { document.getElementById('job-list').dataset.old = '1'; }")
    page.evaluate(
        "() => htmx.ajax('GET', location.pathname, {target: '#job-list', swap: 'outerHTML'})"
    )
    expect(page.locator("#job-list:not([data-old])")).to_be_attached()  # the new list is in
    expect(focused).to_have_attribute("id", row_id)
    page.keyboard.press("j")  # and the keyboard goes on from there
    expect(focused).not_to_have_attribute("id", row_id)


def test_enter_in_a_rows_edit_box_applies_nothing_under_the_brake(page, live_server, login, queue):
    """Found by a second review: Enter in the edit box submitted the form past its disabled
    "Save & approve" (the server refused it, but the reviewer saw a refusal for a key press)."""
    update_config({"mutationsFrozen": True}, changed_by="t", reason="brake")
    rows = open_queue(page, live_server, login)
    first = rows.first.get_attribute("id")
    page.keyboard.press("e")
    box = page.locator(f"#{first} textarea[data-enter-submits]")
    expect(box).to_be_focused()
    expect(page.locator(f"#{first} form[data-reveal=edit] button.btn-approve")).to_be_disabled()
    box.press("End")
    box.type(" (checked)")
    box.press("Enter")
    page.wait_for_timeout(500)  # an answer would have come back by now
    expect(page.locator(f"#{first} [data-testid=row-note]")).to_have_count(0)
    expect(box).to_have_value(re.compile(r"\(checked\)$"))
    assert applied() == 0


def refresh_the_banner(page, brake: str) -> None:
    """The banner's 30 s refresh, now, until it shows the brake `brake`: a refresh asked while
    the one a decision started is out is dropped (htmx), and that one may predate the change."""
    banner = page.locator("#mode-banner")
    for _ in range(30):
        expect(banner).not_to_have_class(re.compile("htmx-request"))
        page.evaluate("htmx.trigger(document.body, 'review-changed')")
        page.wait_for_timeout(200)
        if banner.get_attribute("data-brake") == brake:
            return
    expect(banner).to_have_attribute("data-brake", brake)


def test_a_brake_lifted_or_set_while_the_queue_is_open_frees_or_holds_its_rows(
    page, live_server, login, queue
):
    """Found by a day of reviewing: after an admin lifted the brake, an open queue kept every
    Approve disabled and its rows said "held: the emergency brake is on" until a reload; "a" did
    nothing. The banner's refresh now carries the change to the rows, both ways."""
    update_config({"mutationsFrozen": True}, changed_by="t", reason="brake")
    rows = open_queue(page, live_server, login)
    first = rows.first
    approve = first.locator("button[data-action=approve]")
    expect(approve).to_be_disabled()
    expect(first.locator("[data-testid=waiting]")).to_have_text(re.compile("emergency brake is on"))
    update_config({"mutationsFrozen": False}, changed_by="t", reason="lifted")
    refresh_the_banner(page, "off")
    expect(approve).to_be_enabled()
    expect(approve).not_to_have_attribute("title", re.compile("brake"))
    expect(first.locator("[data-testid=waiting]")).to_have_text(re.compile("shadow mode"))
    page.keyboard.press("a")
    expect(first.locator("[data-testid=row-note]")).to_contain_text(re.compile("approved|added"))
    assert applied() == 1
    update_config({"mutationsFrozen": True}, changed_by="t", reason="brake again")
    refresh_the_banner(page, "on")
    second = rows.nth(1).locator("button[data-action=approve]")
    expect(second).to_be_disabled()
    expect(second).to_have_attribute("title", re.compile("emergency brake is on"))


def test_a_proposals_page_says_why_it_waits_as_the_brake_is_now(page, live_server, login, queue):
    """A second review: the proposal page freed its Approve when the brake was lifted but still
    said "held: the emergency brake is on"."""
    update_config({"mutationsFrozen": True}, changed_by="t", reason="brake")
    proposal = Proposal.objects.filter(status="pending", action="add").first()
    login("reviewer")
    page.goto(f"{live_server.url}/proposals/{proposal.id}/")
    waiting = page.get_by_test_id("waiting")
    expect(waiting).to_contain_text("emergency brake is on")
    update_config({"mutationsFrozen": False}, changed_by="t", reason="lifted")
    refresh_the_banner(page, "off")
    expect(waiting).to_contain_text("shadow mode writes nothing by itself")
    expect(page.locator("button[name=decision][value=approve]")).to_be_enabled()
