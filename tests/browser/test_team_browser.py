"""Issue 26 in a real browser, with two reviewers in two browser contexts: a row one reviewer
focuses is marked for the other within the polling interval, their keyboard skips it and it is
never decided by both; a takeover; a claim that expires; and the two-person rule through the
queue (same person twice refused, the second reviewer applies, a rejection ends it, bulk)."""

import re
from datetime import timedelta

import pytest
from django.contrib.auth.models import Group, User
from django.utils import timezone
from playwright.sync_api import expect

from memory.models import Memory, MemoryHistory
from pipeline.models import Approval, Claim, Proposal
from pipeline.writes.config import update_config
from tests.browser.conftest import ARTIFACTS
from tests.conftest import run_pipeline_on
from tests.pipeline_support import pending_delete, seed

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

POLL_SECONDS = 1
# A claim shows on the other page within the polling interval (the poll, then its swap).
WITHIN_POLL = 4 * POLL_SECONDS * 1000


# Two sentences each: the offline model makes a fact of each (one alone is the raw memory itself).
FACTS = [
    "Priya owns the release checklist for the billing service. "
    "Marco maintains the staging cluster in the eu-west-1 region.",
    "The team deploys the API gateway every Tuesday afternoon. "
    "Kenji reviews every schema migration before it ships.",
    "Support escalations go to the on-call engineer first. "
    "The billing dashboard refreshes every fifteen minutes.",
]


@pytest.fixture(autouse=True)
def fast_poll(monkeypatch):
    from dashboard.views import review as views

    monkeypatch.setattr(views, "CLAIMS_POLL_SECONDS", POLL_SECONDS)


def sign_in(page, live_server, username: str):
    page.set_default_timeout(20_000)
    page.goto(f"{live_server.url}/login/")
    page.fill("#id_username", username)
    page.fill("#id_password", "pw-" + username)
    page.click("button[type=submit]")
    page.wait_for_url(f"{live_server.url}/")
    return page


@pytest.fixture
def sam_page(browser, live_server, role_users):
    """A second reviewer, sam, in a browser context of his own (his own session and tabs)."""
    user = User.objects.create_user("sam", password="pw-sam")
    user.groups.add(Group.objects.get(name="reviewer"))
    context = browser.new_context(viewport={"width": 1400, "height": 900})
    page = sign_in(context.new_page(), live_server, "sam")
    yield page
    # Quiet, like the main page (conftest.quiet_at_the_end): no beacon or poll after the test.
    try:
        page.evaluate("navigator.sendBeacon = () => true")
        page.route("**/*", lambda route: route.abort())
        page.goto("about:blank")
    finally:
        context.close()


@pytest.fixture
def queue(db):
    update_config({"shadowMode": True}, changed_by="t", reason="t")
    run_pipeline_on(*FACTS)
    return [
        f"p-{pid}"
        for pid in Proposal.objects.filter(status="pending", action="add")
        .order_by("created_at", "id")
        .values_list("id", flat=True)
    ]


def marker(page, row_id: str):
    return page.locator(f"#{row_id} [data-claim]")


def focused(page) -> str:
    row = page.locator("tr[data-row].focused")
    expect(row).to_have_count(1)
    return row.get_attribute("id")


URL = "/review/?action=add&sort=age"


# --- claims ---------------------------------------------------------------------------------------


def test_a_claimed_row_is_marked_for_the_other_skipped_by_the_keyboard_and_decided_once(
    page, sam_page, live_server, login, queue
):
    first, second, third = queue[:3]
    login("reviewer")
    page.set_viewport_size({"width": 1400, "height": 900})
    page.goto(live_server.url + URL)
    expect(page.locator(f"#{first}")).to_have_class(re.compile(r"\bfocused\b"))
    expect(marker(page, first)).to_have_attribute("data-claim", "mine")

    # Sam opens the queue: rita's row says so, and his focus starts on the next open row.
    sam_page.goto(live_server.url + URL)
    expect(marker(sam_page, first)).to_contain_text("rita is reviewing")
    expect(sam_page.locator(f"#{first} [data-action=approve]")).to_be_hidden()
    assert focused(sam_page) == second
    expect(marker(sam_page, second)).to_have_attribute("data-claim", "mine")

    # Rita's page learns of sam's claim within the polling interval, and j skips that row.
    expect(marker(page, second)).to_contain_text("sam is reviewing", timeout=WITHIN_POLL)
    take_screenshots(page, sam_page, first)
    page.keyboard.press("j")
    assert focused(page) == third
    expect(marker(page, third)).to_have_attribute("data-claim", "mine")
    # Moving on let the first row go: sam's page shows it free again, and the third one held.
    expect(marker(sam_page, third)).to_contain_text("rita is reviewing", timeout=WITHIN_POLL)
    expect(marker(sam_page, first)).to_have_attribute("data-claim", "free")

    # Sam reaches for rita's row anyway: its buttons are hidden, and "a" is refused.
    sam_page.locator(f"#{third} [data-fact]").click()
    sam_page.keyboard.press("a")
    expect(sam_page.locator(f"#{third} [data-testid=row-note]")).to_contain_text(
        "This proposal is being reviewed by rita"
    )
    page.keyboard.press("a")
    expect(page.locator(f"#{third} [data-testid=row-note]")).to_contain_text("Approved by rita")
    sam_page.locator(f"#{second} [data-fact]").click()
    sam_page.keyboard.press("a")
    expect(sam_page.locator(f"#{second} [data-testid=row-note]")).to_contain_text("Approved by sam")
    decided = dict(
        Proposal.objects.filter(id__in=[third[2:], second[2:]]).values_list("id", "decided_by")
    )
    assert decided == {third[2:]: "rita", second[2:]: "sam"}
    for row in (second, third):
        approvals = MemoryHistory.objects.filter(
            metadata__proposalId=row[2:], metadata__decision="approved"
        )
        assert approvals.count() == 1
    # Rita's page hears of sam's decision too: that row is no longer one to stop on.
    expect(marker(page, second)).to_have_attribute("data-claim", "decided", timeout=WITHIN_POLL)


def take_screenshots(rita, sam, row_id: str) -> None:
    """Both reviewers' views of one claimed row, for the docs (test-artifacts/, then copied)."""
    ARTIFACTS.mkdir(exist_ok=True)
    for name, page in (("rita", rita), ("sam", sam)):
        page.locator(f"#{row_id}").scroll_into_view_if_needed()
        page.screenshot(path=str(ARTIFACTS / f"claims-{name}.png"))


def button_tops(page) -> list[float]:
    """Where each row's Open button is on the page (not the viewport: a focus may scroll)."""
    return page.eval_on_selector_all(
        "tr[data-row] [data-action=open]",
        "els => els.map(e => e.getBoundingClientRect().top + window.scrollY)",
    )


@pytest.mark.parametrize("viewport", [(1400, 900), (390, 844)], ids=["desktop", "phone"])
def test_focusing_a_row_and_the_claim_it_gets_move_no_button_on_the_page(
    page, live_server, login, queue, viewport
):
    """The claim's answer comes 150 ms and a round trip after the focus: a row that grew then
    moved every button below it while the reviewer was reaching for one (a press and a release
    split by the move are no click at all)."""
    width, height = viewport
    held = []
    page.route("**/proposals/*/claim/", lambda route: held.append(route))
    login("reviewer")
    page.set_viewport_size({"width": width, "height": height})
    page.goto(live_server.url + URL)
    first, second = queue[:2]
    expect(page.locator(f"#{first}")).to_have_class(re.compile(r"\bfocused\b"))
    for _ in range(200):  # the claim leaves 150 ms after the focus; held until let through
        if held:
            break
        page.wait_for_timeout(25)
    assert len(held) == 1
    before = button_tops(page)
    assert len(before) == len(queue)

    held[0].continue_()
    page.unroute("**/proposals/*/claim/")
    expect(marker(page, first).get_by_test_id("claimed-by-me")).to_be_visible()
    assert button_tops(page) == before

    page.keyboard.press("j")  # the first row's claim hides, the second's comes
    expect(marker(page, second).get_by_test_id("claimed-by-me")).to_be_visible()
    expect(marker(page, first).get_by_test_id("claimed-by-me")).to_be_hidden()
    assert button_tops(page) == before


def test_opening_a_proposal_and_the_claim_it_gets_move_nothing_on_its_page(
    page, live_server, login, queue
):
    held = []
    page.route("**/proposals/*/claim/", lambda route: held.append(route))
    login("reviewer")
    page.goto(f"{live_server.url}/proposals/{queue[0][2:]}/")
    for _ in range(200):
        if held:
            break
        page.wait_for_timeout(25)
    assert len(held) == 1
    box = page.locator("#content")
    before = box.bounding_box()["y"]
    held[0].continue_()
    expect(page.get_by_test_id("claimed-by-me")).to_be_visible()
    assert box.bounding_box()["y"] == before


def test_taking_a_claimed_row_over_is_logged_and_moves_the_claim(
    page, sam_page, live_server, login, queue
):
    first = queue[0]
    login("reviewer")
    page.goto(live_server.url + URL)
    expect(marker(page, first)).to_have_attribute("data-claim", "mine")
    sam_page.goto(live_server.url + URL)
    expect(marker(sam_page, first)).to_contain_text("rita is reviewing")
    sam_page.locator(f"#{first} [data-testid=take-over]").click()
    expect(marker(sam_page, first)).to_have_attribute("data-claim", "mine")
    expect(sam_page.locator("#toast")).to_contain_text("You are reviewing it now")
    expect(sam_page.locator(f"#{first} [data-action=approve]")).to_be_visible()
    # Rita sees it passed to sam, and her "a" on it is refused.
    expect(marker(page, first)).to_contain_text("sam is reviewing", timeout=WITHIN_POLL)
    page.locator(f"#{first} [data-fact]").click()
    page.keyboard.press("a")
    expect(page.locator(f"#{first} [data-testid=row-note]")).to_contain_text(
        "being reviewed by sam"
    )
    audit = MemoryHistory.objects.get(
        metadata__proposalId=first[2:], metadata__decision="taken_over"
    )
    assert (audit.changed_by, audit.metadata["from"]) == ("sam", "rita")
    assert Claim.objects.get(proposal_id=first[2:]).by == "sam"


def test_an_expired_claim_frees_the_row_for_the_other(
    page, sam_page, live_server, login, queue, between_requests
):
    first = queue[0]
    login("reviewer")
    page.goto(live_server.url + URL)
    expect(marker(page, first)).to_have_attribute("data-claim", "mine")
    sam_page.goto(live_server.url + URL)
    expect(marker(sam_page, first)).to_contain_text("rita is reviewing")
    assert focused(sam_page) != first
    # review.claimMinutes go by (the claim's end moved into the past, not waited for).
    with between_requests:
        Claim.objects.filter(proposal_id=first[2:]).update(
            expires_at=timezone.now() - timedelta(seconds=1)
        )
    expect(marker(sam_page, first)).to_have_attribute("data-claim", "free", timeout=WITHIN_POLL)
    sam_page.keyboard.press("k")
    assert focused(sam_page) == first
    expect(marker(sam_page, first)).to_have_attribute("data-claim", "mine")
    sam_page.keyboard.press("a")
    expect(sam_page.locator(f"#{first} [data-testid=row-note]")).to_contain_text("Approved by sam")


# --- the two-person rule --------------------------------------------------------------------------


def pending_deletes(n: int) -> list[str]:
    """`n` DELETE proposals waiting for review, each of a memory of its own, oldest first."""
    targets = [seed(f"Host alpha-{i} serves the lab.") for i in range(n)]
    return [pending_delete(target, i).id for i, target in enumerate(targets)]


@pytest.fixture
def deletes(db):
    update_config(
        {"shadowMode": True, "review": {"destructiveApprovals": 2}}, changed_by="t", reason="t"
    )
    return pending_deletes(4)


def target_deleted(proposal_id: str) -> bool:
    return Memory.objects.get(id=Proposal.objects.get(id=proposal_id).target_memory_id).is_deleted


DELETES = "/review/?action=delete&sort=age"


def test_two_reviewers_apply_a_delete_and_the_same_one_twice_is_refused(
    page, sam_page, live_server, login, deletes
):
    one = f"p-{deletes[0]}"
    login("reviewer")
    # A second tab of rita's, opened before her approval: it still offers Approve.
    other_tab = page.context.new_page()
    other_tab.goto(live_server.url + DELETES)
    page.goto(live_server.url + DELETES)
    expect(page.locator(f"#{one} [data-testid=two-person]")).to_be_visible()
    expect(page.locator(f"#{one} [data-action=approve]")).to_contain_text("Approve (1 of 2)")
    page.locator(f"#{one} [data-fact]").click()
    page.keyboard.press("a")
    expect(page.locator(f"#{one} [data-testid=row-note]")).to_contain_text(
        "Approval 1 of 2 recorded for rita"
    )
    assert not target_deleted(deletes[0])

    other_tab.locator(f"#{one} [data-fact]").click()
    other_tab.keyboard.press("a")
    expect(other_tab.locator(f"#{one} [data-testid=row-note]")).to_contain_text(
        "You already approved this proposal"
    )
    expect(other_tab.locator(f"#{one} [data-testid=row-note]")).to_contain_text(
        "Ask another reviewer to approve it"
    )
    other_tab.evaluate("navigator.sendBeacon = () => true")
    other_tab.close()
    assert not target_deleted(deletes[0])

    sam_page.goto(live_server.url + DELETES)
    expect(sam_page.locator(f"#{one} [data-testid=approvals]")).to_contain_text(
        "Approved by rita (1 of 2)"
    )
    expect(sam_page.locator(f"#{one} [data-action=approve]")).to_contain_text("Approve (2 of 2)")
    sam_page.locator(f"#{one} [data-fact]").click()
    sam_page.keyboard.press("a")
    expect(sam_page.locator(f"#{one} [data-testid=row-note]")).to_contain_text("Approved by sam")
    assert target_deleted(deletes[0])
    assert list(Approval.objects.filter(proposal_id=deletes[0]).values_list("by", "position")) == [
        ("rita", 1),
        ("sam", 2),
    ]


def test_a_rejection_by_the_second_reviewer_ends_the_round(
    page, sam_page, live_server, login, deletes
):
    one = f"p-{deletes[0]}"
    login("reviewer")
    page.goto(live_server.url + DELETES)
    page.locator(f"#{one} [data-fact]").click()
    page.keyboard.press("a")
    expect(page.locator(f"#{one} [data-testid=row-note]")).to_contain_text("1 of 2")
    sam_page.goto(live_server.url + DELETES)
    sam_page.locator(f"#{one} [data-fact]").click()
    sam_page.keyboard.press("r")
    sam_page.locator(f"#{one} input[name=reason]").fill("alpha-0 still serves the lab")
    sam_page.keyboard.press("Enter")
    expect(sam_page.locator(f"#{one} [data-testid=row-note]")).to_contain_text("Rejected by sam")
    assert Proposal.objects.get(id=deletes[0]).status == "rejected"
    assert Approval.objects.get(proposal_id=deletes[0]).outcome == "rejected"
    assert not target_deleted(deletes[0])


def test_bulk_approval_counts_once_per_reviewer(page, sam_page, live_server, login, deletes):
    login("reviewer")
    for reviewer, browser_page in (("rita", page), ("sam", sam_page)):
        browser_page.goto(live_server.url + DELETES)
        browser_page.check("[data-testid=scope-all]")
        browser_page.click("text=Review bulk action…")
        expect(browser_page.locator("[data-testid=bulk-two-person]")).to_contain_text(
            "4 need two reviewers"
        )
        browser_page.click("[data-testid=bulk-confirm]")
        progress = browser_page.locator("[data-testid=bulk-progress]")
        expect(progress).to_contain_text("Done")
        if reviewer == "rita":
            expect(browser_page.locator("[data-testid=bulk-awaiting]")).to_contain_text(
                "4 of them need a second reviewer"
            )
            assert not any(target_deleted(pid) for pid in deletes)
    assert all(target_deleted(pid) for pid in deletes)
    assert set(Proposal.objects.filter(id__in=deletes).values_list("decided_by", flat=True)) == {
        "sam"
    }
