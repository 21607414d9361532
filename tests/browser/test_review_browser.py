"""A reviewer's day in a real browser: log in, keyboard review, bulk, contradictions, escaping."""

import re

import pytest
from playwright.sync_api import expect

from memory.models import Memory
from pipeline.models import Proposal
from pipeline.writes.config import update_config
from tests.conftest import run_pipeline_on

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

BASE = [
    "The team uses Kafka for billing events. Standup notes from Monday.",
    "Automatic staging deploys are enabled for every service. Noted by the release bot.",
]
LATER = [
    "The team doesn't use Kafka for billing events anymore. Standup notes from Friday.",
    "Kenji maintains the ingest-worker service and its Kafka consumers. From the team wiki.",
    "Sofia owns the component library in packages/ui. From the design sync.",
    "Dana runs the weekly release train on Thursdays. From the release calendar.",
]


@pytest.fixture
def seeded(db):
    update_config({"shadowMode": False}, changed_by="test", reason="seed")
    run_pipeline_on(*BASE)
    update_config({"shadowMode": True}, changed_by="test", reason="review")
    run_pipeline_on(*LATER)


def test_a_reviewer_logs_in_and_sees_the_mode_banner_and_queue(
    page, live_server, login, seeded, shot
):
    page.goto(f"{live_server.url}/login/")
    page.fill("#id_username", "rita")
    page.fill("#id_password", "wrong")
    page.click("button[type=submit]")
    expect(page.locator(".field-error")).to_contain_text("correct username and password")
    login("reviewer")
    expect(page.locator(".banner-label")).to_have_text("SHADOW")
    page.goto(f"{live_server.url}/review/")
    expect(page.locator("tr[data-row]").first).to_be_visible()
    shot("review-queue")


def test_approve_and_reject_with_the_keyboard(page, live_server, login, seeded, shot):
    login("reviewer")
    page.goto(f"{live_server.url}/review/?action=add&sort=age")
    rows = page.locator("tr[data-row]")
    first_id = rows.first.get_attribute("id").removeprefix("p-")
    second_id = rows.nth(1).get_attribute("id").removeprefix("p-")
    expect(rows.first).to_have_class("focused")
    page.keyboard.press("a")
    expect(page.locator(f"#p-{first_id} [data-testid=row-note]")).to_contain_text(
        "Approved by rita"
    )
    expect(page.locator(f"#p-{second_id}")).to_have_class("focused")  # focus moved to the next row
    page.keyboard.press("r")
    page.keyboard.type("not durable knowledge")
    page.keyboard.press("Enter")
    expect(page.locator(f"#p-{second_id} [data-testid=row-note]")).to_contain_text(
        "Rejected by rita"
    )
    expect(page.locator("[data-testid=pending-count]")).to_have_text(
        str(Proposal.objects.filter(status="pending").count())
    )
    shot("review-keyboard")
    assert Proposal.objects.get(id=first_id).status == "applied"
    rejected = Proposal.objects.get(id=second_id)
    assert (rejected.status, rejected.review_note, rejected.decided_by) == (
        "rejected",
        "not durable knowledge",
        "rita",
    )


def test_edit_then_approve_with_the_keyboard(page, live_server, login, seeded):
    login("reviewer")
    page.goto(f"{live_server.url}/review/?action=add&sort=age")
    row_id = page.locator("tr[data-row]").first.get_attribute("id").removeprefix("p-")
    page.keyboard.press("e")
    box = page.locator(f"#p-{row_id} textarea")
    expect(box).to_be_focused()
    box.fill("Kenji maintains ingest-worker.")
    page.keyboard.press("Enter")
    expect(page.locator(f"#p-{row_id} [data-testid=row-note]")).to_contain_text("Approved")
    assert (
        Proposal.objects.get(id=row_id).created_memory.content == "Kenji maintains ingest-worker."
    )


def test_bulk_approve_a_filtered_slice_after_confirming_the_counts(
    page, live_server, login, seeded, shot
):
    login("reviewer")
    adds = Proposal.objects.filter(status="pending", action="add").count()
    page.goto(f"{live_server.url}/review/")
    page.select_option("#id_action", "add")
    expect(page.locator("tr[data-row]")).to_have_count(adds)
    page.check("[data-testid=scope-all]")
    page.click("text=Review bulk action…")
    expect(page.locator("#bulk-panel")).to_contain_text(f"Approve {adds} proposal")
    assert Proposal.objects.filter(status="pending", action="add").count() == adds  # nothing yet
    shot("bulk-confirm")
    page.click("[data-testid=bulk-confirm]")
    expect(page.locator("[data-testid=bulk-progress]")).to_contain_text("Done")
    assert Proposal.objects.filter(status="pending", action="add").count() == 0
    assert Proposal.objects.filter(status="pending", action="update").exists()  # outside the slice


def test_resolve_a_contradiction_in_the_workbench(page, live_server, login, seeded, shot):
    login("reviewer")
    flagged = Proposal.objects.get(status="pending", review_needed=True)
    page.goto(f"{live_server.url}/contradictions/")
    card = page.locator(f"#c-{flagged.id}")
    expect(card.locator("mark.conflict").first).to_be_visible()
    shot("contradictions")
    card.locator("button[value=keep_both]").click()
    expect(page.locator(f"#c-{flagged.id} [data-testid=row-note]")).to_contain_text(
        "Approved by rita"
    )
    flagged.refresh_from_db()
    assert flagged.status == "applied" and flagged.created_memory is not None
    assert not Memory.objects.get(id=flagged.target_memory_id).is_deleted


def test_letters_after_opening_the_merge_box_go_into_its_text_not_to_the_shortcuts(
    page, live_server, login, seeded
):
    """Found by a QA pass: clicking "Merge: edit the text first" left the focus on the summary,
    so typing "also" approved the card as proposed ("a") and opened its page ("o")."""
    login("reviewer")
    flagged = Proposal.objects.get(status="pending", review_needed=True)
    page.goto(f"{live_server.url}/contradictions/")
    card = page.locator(f"#c-{flagged.id}")
    card.locator("summary").click()
    merged = card.locator("textarea[name=content]")
    expect(merged).to_be_focused()
    page.keyboard.type(" also")
    expect(merged).to_have_value(re.compile(r" also$"))
    assert page.url.endswith("/contradictions/")
    flagged.refresh_from_db()
    assert flagged.status == "pending"


@pytest.mark.parametrize("where", ["contradictions", "proposal"])
def test_enter_in_a_note_decides_nothing_where_several_decisions_share_the_form(
    page, live_server, login, seeded, where
):
    login("reviewer")
    flagged = Proposal.objects.get(status="pending", review_needed=True)
    if where == "contradictions":
        page.goto(f"{live_server.url}/contradictions/")
        form = page.locator(f"#c-{flagged.id} form")
        decided = page.locator(f"#c-{flagged.id} [data-testid=row-note]")
    else:
        page.goto(f"{live_server.url}/proposals/{flagged.id}/")
        form = page.locator("form:has(#reason)")
        decided = page.locator(".badge-status").first  # this proposal's, above its others
    # A note typed for "Keep existing" (or "Reject"), then Enter: the form's first decision is
    # "Replace" (or "Approve"), which Enter used to press. Then the button the note was for.
    note = form.locator("input[name=reason]")
    note.fill("the old one still holds")
    note.press("Enter")
    form.locator("button[value=reject]").click()  # "Keep existing" (or "Reject")
    expect(decided).to_contain_text(re.compile("rejected", re.I))
    flagged.refresh_from_db()
    assert flagged.status == "rejected" and flagged.review_note == "the old one still holds"
    assert Memory.objects.get(id=flagged.target_memory_id).content == flagged.target_content


def test_hostile_memory_content_shows_as_text_and_runs_nothing(page, live_server, login, db, shot):
    update_config({"shadowMode": True}, changed_by="t", reason="t")
    run_pipeline_on(
        '<script>window.__pwned = 1</script> Marco said <img src=x onerror="window.__pwned = 2"> works. Billing is fine too.'
    )
    login("reviewer")
    dialogs = []
    page.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))
    for path in ("/review/", f"/proposals/{Proposal.objects.first().id}/"):
        page.goto(live_server.url + path)
        expect(
            page.get_by_text("<script>window.__pwned = 1</script>", exact=False).first
        ).to_be_visible()
        assert page.evaluate("window.__pwned") is None
    assert page.locator("img[src=x]").count() == 0 and dialogs == []
    shot("escaping")


# --- issue 11: the review flow at full speed ------------------------------------------------------


def many_raw(n: int) -> list[str]:
    return [
        f"Engineer {i} owns the release checklist for project {i}. "
        f"The planning notes of week {i} say so."
        for i in range(n)
    ]


def focused_id(page) -> str:
    return page.locator("tr[data-row].focused").get_attribute("id")


def test_a_row_note_never_resizes_the_other_rows(page, live_server, login, db):
    update_config({"shadowMode": True}, changed_by="t", reason="t")
    run_pipeline_on(
        "The staging deploy key is AKIAIOSFODNN7EXAMPLE for billing-api. Rotate it monthly.",
        *LATER[1:],
    )
    secret = Proposal.objects.get(status="pending", safety_kinds__contains="secret")
    login("reviewer")
    page.set_viewport_size({"width": 1400, "height": 900})
    page.goto(f"{live_server.url}/review/?action=add&sort=age")
    other = page.locator(f"tr[data-row]:not(#p-{secret.id}) td.fact").first
    before = other.bounding_box()["width"]
    page.locator(f"#p-{secret.id} [data-action=approve]").click()
    expect(page.locator(f"#p-{secret.id} [data-testid=row-note]")).to_contain_text("secret")
    assert other.bounding_box()["width"] == before
    page.locator(f"#p-{secret.id} [data-testid=confirm-secret]").click()
    expect(page.locator(f"#p-{secret.id} [data-testid=row-note]")).to_contain_text("Approved")
    assert other.bounding_box()["width"] == before


# The next task after a swap of #target is as soon as a person (or Playwright) can act on what it
# drew: then click `selector`, or press "a" when it is null.
ACT_RIGHT_AFTER_SWAP = """([target, selector]) => {
    let done = false;
    document.addEventListener("htmx:afterSwap", (event) => {
        if (done || event.detail.target.id !== target) return;
        done = true;
        setTimeout(() => selector
            ? document.querySelector(selector).click()
            : document.dispatchEvent(new KeyboardEvent("keydown", {key: "a", bubbles: true})), 0);
    });
}"""


def test_a_key_pressed_right_after_a_filter_swaps_the_queue_decides_through_htmx(
    page, live_server, login, db
):
    update_config({"shadowMode": True}, changed_by="t", reason="t")
    run_pipeline_on(*many_raw(2))
    login("reviewer")
    page.goto(f"{live_server.url}/review/?sort=age")
    expect(page.locator("tr[data-row]").first).to_have_class("focused")
    # "a" the moment the new list is there: htmx must have wired its forms (a settle delay left
    # them unwired for 20 ms, and the key submitted the form natively, a GET that left the page).
    page.evaluate(ACT_RIGHT_AFTER_SWAP, ["queue", None])
    page.select_option("#id_action", "add")
    expect(page.locator("[data-testid=row-note]")).to_contain_text("Approved by rita")
    assert "decision=" not in page.url
    assert Proposal.objects.filter(status="applied").count() == 1


def test_confirming_a_bulk_action_right_after_its_preview_applies_it(page, live_server, login, db):
    update_config({"shadowMode": True}, changed_by="t", reason="t")
    run_pipeline_on(*many_raw(2))
    login("reviewer")
    page.goto(f"{live_server.url}/review/?sort=age")
    page.check("[data-testid=scope-all]")
    page.evaluate(ACT_RIGHT_AFTER_SWAP, ["bulk-panel", "[data-testid=bulk-confirm]"])
    page.click("text=Review bulk action…")
    expect(page.locator("[data-testid=bulk-progress]")).to_contain_text("Done")
    assert "decision=" not in page.url
    assert not Proposal.objects.filter(status="pending").exists()


def test_the_keyboard_flow_through_filters_pages_and_decided_rows(page, live_server, login, db):
    update_config({"shadowMode": True}, changed_by="t", reason="t")
    run_pipeline_on(*many_raw(15))  # 30 pending ADDs: two pages
    login("reviewer")
    page.goto(f"{live_server.url}/review/?sort=age")
    page.select_option("#id_action", "add")  # a filter change swaps the queue...
    expect(page).to_have_url(re.compile(r"action=add"))
    rows = page.locator("tr[data-row]")
    expect(rows.first).to_have_class("focused")  # ...and focuses its first row: "a" is not lost
    first = rows.first.get_attribute("id")
    page.keyboard.press("a")
    expect(page.locator(f"#{first} [data-testid=row-note]")).to_contain_text("Approved by rita")
    second = rows.nth(1).get_attribute("id")
    expect(page.locator(f"#{second}")).to_have_class("focused")
    page.keyboard.press("k")  # decided rows are skipped
    assert focused_id(page) == second
    # The nav count follows the banner.
    pending = str(Proposal.objects.filter(status="pending").count())
    expect(page.locator("[data-testid=pending-count]")).to_have_text(pending)
    expect(page.locator("#nav-review-count")).to_have_text(pending)
    # Pass over the second row, approve the last one: focus never wraps back up to the second.
    for _ in range(rows.count() - 2):
        page.keyboard.press("j")
    last = rows.last.get_attribute("id")
    assert focused_id(page) == last
    page.keyboard.press("a")
    expect(page.locator(f"#{last} [data-testid=row-note]")).to_contain_text("Approved")
    assert focused_id(page) == last
    # "j" past the last row loads the next page, which starts right after it.
    page.keyboard.press("j")
    expect(page).to_have_url(re.compile(f"after={last.removeprefix('p-')}"))
    expect(rows.first).to_have_class("focused")
    assert rows.first.get_attribute("id") not in {first, second, last}
