"""Undo in a real browser: the toast after a keyboard approval, revert and undo on the proposal page,
revert everything derived from a raw memory, and unsuppress in the queue."""

import pytest
from playwright.sync_api import expect

from memory.models import Memory
from memory.writes import Actor
from pipeline.models import Proposal
from pipeline.writes import review as review_writes
from pipeline.writes.config import update_config
from tests.conftest import run_pipeline_on

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

LATER = [
    "Kenji maintains the ingest-worker service and its Kafka consumers. From the team wiki.",
    "Sofia owns the component library in packages/ui. From the design sync.",
]
APPLIED = "Dana runs the weekly release train on Thursdays. From the release calendar."


@pytest.fixture
def queue(db):
    update_config({"shadowMode": True}, changed_by="test", reason="review")
    run_pipeline_on(*LATER)


@pytest.fixture
def applied(db):
    """ADDs applied by the pipeline in controlled-write mode."""
    update_config({"shadowMode": False}, changed_by="test", reason="controlled-write")
    (source,) = run_pipeline_on(APPLIED)
    return source, Proposal.objects.filter(source_memory=source, status="applied").order_by(
        "position"
    )


def test_undo_an_approval_from_the_toast(page, live_server, login, queue, shot):
    login("reviewer")
    page.goto(f"{live_server.url}/review/?action=add&sort=age")
    row_id = page.locator("tr[data-row]").first.get_attribute("id").removeprefix("p-")
    page.keyboard.press("a")
    expect(page.locator(f"#p-{row_id} [data-testid=row-note]")).to_contain_text("Approved by rita")
    created = Proposal.objects.get(id=row_id).created_memory_id
    assert created and not Memory.objects.get(id=created).is_deleted
    toast = page.locator("#toast")
    expect(toast).to_be_visible()
    expect(toast).to_contain_text("Approved by rita")
    shot("undo-toast")
    toast.get_by_role("button", name="Undo").click()
    # Back to pending, like after undoing a reject: the row is open for a new decision.
    expect(toast).to_contain_text("Decision undone by rita: ADD is pending again.")
    expect(page.locator(f"#p-{row_id} [data-action=approve]")).to_be_visible()
    expect(toast.get_by_role("button", name="Undo")).to_have_count(0)
    shot("undo-toast-reverted")
    proposal = Proposal.objects.get(id=row_id)
    assert (proposal.status, proposal.created_memory_id, proposal.reverted_at) == (
        "pending",
        None,
        None,
    )
    memory = Memory.objects.get(id=created)
    assert memory.is_deleted
    assert memory.history.order_by("-created_at", "-id").first().metadata["revert"] is True
    # The mistaken "a" becomes a reject.
    page.locator(f"#p-{row_id}").click()
    page.keyboard.press("r")
    page.keyboard.type("not durable after all")
    page.keyboard.press("Enter")
    expect(page.locator(f"#p-{row_id} [data-testid=row-note]")).to_contain_text("Rejected by rita")
    assert Proposal.objects.get(id=row_id).status == "rejected"


def test_undo_a_rejection_from_the_toast(page, live_server, login, queue):
    login("reviewer")
    page.goto(f"{live_server.url}/review/?action=add&sort=age")
    row_id = page.locator("tr[data-row]").first.get_attribute("id").removeprefix("p-")
    page.keyboard.press("r")
    page.keyboard.type("not durable")
    page.keyboard.press("Enter")
    expect(page.locator(f"#p-{row_id} [data-testid=row-note]")).to_contain_text("Rejected")
    page.locator("#toast").get_by_role("button", name="Undo").click()
    expect(page.locator("#toast")).to_contain_text("Rejection undone by rita.")
    expect(page.locator(f"#p-{row_id} [data-action=approve]")).to_be_visible()
    assert Proposal.objects.get(id=row_id).status == "pending"


def test_revert_from_the_proposal_page_and_undo_it(page, live_server, login, applied, shot):
    _, proposals = applied
    proposal = proposals.first()
    login("reviewer")
    page.goto(f"{live_server.url}/proposals/{proposal.id}/")
    section = page.locator("[data-testid=revert-section]")
    expect(section).to_contain_text("Soft-deletes the memory this proposal created")
    section.scroll_into_view_if_needed()
    shot("proposal-revert")
    page.fill("#revert-reason", "not a durable fact")
    page.click("[data-testid=revert]")
    expect(page.locator(".messages")).to_contain_text(
        "Reverted by rita: the memory it created is soft-deleted."
    )
    expect(section).to_contain_text("Reverted by rita")
    expect(page.locator("[data-testid=reverted-badge]")).to_be_visible()
    shot("proposal-reverted")
    memory = Memory.objects.get(id=proposal.created_memory_id)
    assert memory.is_deleted
    assert memory.history.order_by("-created_at", "-id").first().reason == "not a durable fact"

    page.click("[data-testid=undo-revert]")
    expect(page.locator(".messages")).to_contain_text("Revert undone by rita: the memory is back.")
    expect(page.locator("[data-testid=revert]")).to_be_visible()
    memory.refresh_from_db()
    assert not memory.is_deleted and memory.version == 3
    # The memory's page tells the whole story: created, deleted (revert), recovered (undo).
    page.click("[data-testid=affected-memory]")
    # Waited for: read at once, the list was sometimes the proposal page's (none) before the
    # memory's page came (a full run's flake).
    events = page.locator("#timeline .mb-ev .badge")
    expect(events).to_have_text(["created", "deleted", "recovered"], ignore_case=True)


def test_a_refused_revert_offers_to_open_the_memory(page, live_server, login, applied):
    from memory.writes import modify

    _, proposals = applied
    proposal = proposals.first()
    modify(
        proposal.created_memory_id,
        {"content": "Dana runs the release train on Fridays now."},
        actor=Actor("ada"),
        reason="moved",
    )
    login("reviewer")
    page.goto(f"{live_server.url}/proposals/{proposal.id}/")
    page.click("[data-testid=revert]")
    message = page.locator(".messages")
    expect(message).to_contain_text("the memory changed after this proposal was applied")
    message.get_by_role("link", name="Open the memory").click()
    expect(page.locator("[data-testid=content]")).to_contain_text("Fridays now")


def test_revert_everything_derived_from_the_raw_memory_page(
    page, live_server, login, applied, shot
):
    source, proposals = applied
    count = proposals.count()
    login("reviewer")
    page.goto(f"{live_server.url}/memories/{source.id}/")
    form = page.locator("[data-testid=revert-derived]")
    expect(form).to_contain_text(f"({count} applied proposal")
    form.locator("input[name=reason]").fill("bad source")
    form.get_by_role("button", name="Revert all").click()
    expect(page.locator(".messages")).to_contain_text(f"Reverted {count} of {count} proposal")
    shot("revert-derived")
    assert all(Memory.objects.get(id=p.created_memory_id).is_deleted for p in proposals)
    expect(page.locator("[data-testid=revert-derived]")).to_have_count(0)


def test_unsuppress_a_suppressed_proposal_in_the_queue(page, live_server, login, db, shot):
    update_config({"shadowMode": True}, changed_by="test", reason="review")
    (first,) = run_pipeline_on(LATER[0])
    rejected = Proposal.objects.filter(source_memory=first).first()
    review_writes.reject(rejected.id, reviewer=Actor("rita"), reason="no")
    from memory.writes import forget

    forget(first.id, actor=Actor("agent"), reason="rewritten")
    (again,) = run_pipeline_on(LATER[0])
    suppressed = Proposal.objects.get(source_memory=again, fact_content=rejected.fact_content)
    assert suppressed.status == "suppressed"
    login("reviewer")
    page.goto(f"{live_server.url}/review/")
    expect(page.locator("#id_status option[value=suppressed]")).to_have_text("Suppressed (1)")
    page.select_option("#id_status", "suppressed")
    row = page.locator(f"#p-{suppressed.id}")
    expect(row).to_contain_text("rejected_before")
    shot("queue-suppressed")
    row.locator("[data-action=unsuppress]").click()
    expect(page.locator(f"#p-{suppressed.id} [data-testid=row-note]")).to_contain_text(
        "Unsuppressed by rita"
    )
    assert Proposal.objects.get(id=suppressed.id).status == "pending"


@pytest.fixture
def contradiction(db):
    """A flagged UPDATE on the workbench: the base fact applied, its negation proposed."""
    update_config({"shadowMode": False}, changed_by="test", reason="seed")
    run_pipeline_on("Automatic staging deploys are enabled for every service. From the bot.")
    update_config({"shadowMode": True}, changed_by="test", reason="review")
    run_pipeline_on("Automatic staging deploys are disabled for every service. From the bot today.")
    return Proposal.objects.get(status="pending", review_needed=True)


def test_undo_a_workbench_decision_brings_its_card_back_open(
    page, live_server, login, contradiction
):
    login("reviewer")
    page.goto(f"{live_server.url}/contradictions/")
    card = page.locator(f"#c-{contradiction.id}")
    card.get_by_role("button", name="Replace").click()
    expect(card).to_contain_text("Approved by rita")
    expect(card.get_by_role("button", name="Keep both")).to_have_count(0)
    page.locator("#toast").get_by_role("button", name="Undo").click()
    expect(page.locator("#toast")).to_contain_text("Decision undone by rita")
    # The card is drawn again as it is now: open, with its buttons (it kept the old decision).
    expect(card.get_by_role("button", name="Keep both")).to_be_visible()
    expect(card).not_to_contain_text("Approved by rita")
    assert Proposal.objects.get(id=contradiction.id).status == "pending"
