"""A phone (390 px wide): nothing scrolls sideways, the header stays compact, the review queue is a
list of cards, and the review page opens at its title."""

from itertools import pairwise

import pytest
from playwright.sync_api import expect

from pipeline.writes.config import update_config
from tests.conftest import run_pipeline_on

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

PHONE = {"width": 390, "height": 844}
RAW = [
    "The team uses Kafka for billing events. Standup notes from Monday.",
    "The staging deploy key is AKIAIOSFODNN7EXAMPLE for billing-api. Rotate it monthly.",
    "Kenji maintains ingest-worker. Mail him at kenji@lumen.dev if it breaks.",
    *[
        f"Engineer {name} owns the release checklist for the payments-gateway-{name.lower()}"
        f"-service deployment pipeline. From the planning notes."
        for name in ("Amara", "Bruno", "Chen", "Dana", "Eli", "Farah", "Goran", "Hana")
    ],
]


@pytest.fixture
def seeded(db):
    update_config({"shadowMode": False}, changed_by="test", reason="seed")
    run_pipeline_on(RAW[0])
    update_config({"shadowMode": True}, changed_by="test", reason="review")
    run_pipeline_on("The team doesn't use Kafka for billing events anymore.", *RAW[1:])


def lines(element) -> int:
    """How many lines an element's text takes (its line boxes' distinct tops)."""
    return element.evaluate(
        "el => { const r = document.createRange(); r.selectNodeContents(el);"
        " return new Set([...r.getClientRects()].map(x => Math.round(x.top))).size; }"
    )


def sideways(page) -> int:
    """How far the page scrolls sideways (0: it fits the screen)."""
    return page.evaluate("document.documentElement.scrollWidth - window.innerWidth")


@pytest.mark.parametrize("path", ["/review/", "/memories/", "/analytics/", "/jobs/", "/settings/"])
def test_a_page_fits_a_phone_without_scrolling_sideways(page, live_server, login, seeded, path):
    login("reviewer")
    page.set_viewport_size(PHONE)
    page.goto(live_server.url + path)
    expect(page.locator("h1").first).to_be_visible()
    assert sideways(page) <= 0, path


def test_the_review_queue_is_cards_under_a_compact_header_on_a_phone(
    page, live_server, login, seeded, shot
):
    login("reviewer")
    page.set_viewport_size(PHONE)
    page.goto(f"{live_server.url}/review/")
    first = page.locator("tr[data-row]").first
    expect(first).to_have_class("focused")
    assert first.evaluate("row => getComputedStyle(row).display") == "block"
    # The review page opens at its title: focusing the first row did not scroll past it.
    assert page.evaluate("window.scrollY") == 0
    expect(page.locator("h1")).to_be_in_viewport()
    header = page.evaluate("document.querySelector('.topbar').getBoundingClientRect().bottom")
    assert header < PHONE["height"] * 0.15
    # The header scrolls away instead of covering a quarter of the screen.
    page.evaluate("window.scrollTo(0, 600)")
    assert page.evaluate("document.querySelector('.topbar').getBoundingClientRect().bottom") <= 0
    page.evaluate("window.scrollTo(0, 0)")
    shot("review-phone")


def test_the_jobs_list_is_usable_on_a_phone(page, live_server, login, seeded, shot):
    """Issue 19, defect 10: each job is a compact card (long text clipped), not a 1,800 px row,
    and no template comment shows."""
    login("reviewer")
    page.set_viewport_size(PHONE)
    page.goto(f"{live_server.url}/jobs/")
    rows = page.locator("table.jobs tbody tr")
    expect(rows.first).to_be_visible()
    assert rows.count() >= 5
    expect(page.locator("body")).not_to_contain_text("{#")
    assert sideways(page) <= 0
    heights = rows.evaluate_all("rows => rows.map(r => r.getBoundingClientRect().height)")
    assert max(heights) < 260, heights
    # Each card still names its job, its memory and its status, on screen.
    first = rows.first
    expect(first.locator("a.mono")).to_be_in_viewport()
    expect(first.locator(".badge").first).to_be_visible()
    box = first.locator("td.excerpt").bounding_box()
    assert box and box["width"] > PHONE["width"] * 0.6, box
    shot("jobs-phone")


def test_contradiction_badges_stay_on_one_line_on_a_phone(page, live_server, login, seeded, shot):
    """Issue 19, phone: the card head squeezed its badges to one letter per line."""
    login("reviewer")
    page.set_viewport_size(PHONE)
    page.goto(f"{live_server.url}/contradictions/")
    badges = page.locator(".contradiction .card-head .badge")
    expect(badges.first).to_be_visible()
    # One line of text: a badge is less than twice as tall as its font size (two lines are ~3x).
    sizes = badges.evaluate_all(
        """badges => badges.map(b => [b.textContent.trim(), b.getBoundingClientRect().height,
                                      parseFloat(getComputedStyle(b).fontSize)])"""
    )
    assert all(height < 2 * font for _, height, font in sizes), sizes
    assert sideways(page) <= 0
    shot("contradictions-phone")


def test_overview_chart_labels_are_readable_on_a_phone(page, live_server, login, seeded, shot):
    """Issue 19, phone: the charts, scaled to the screen, drew their labels at 6 px. Every label
    shown is at least 11 px on screen, inside its chart, and none overlaps the next."""
    login("reviewer")
    page.set_viewport_size(PHONE)
    page.goto(f"{live_server.url}/")
    expect(page.locator("svg.chart").first).to_be_visible()
    charts = page.locator("svg.chart").evaluate_all(
        """charts => charts.map(svg => {
             const box = svg.getBoundingClientRect();
             const labels = Array.from(svg.querySelectorAll("text"))
               .filter(t => getComputedStyle(t).display !== "none")
               .map(t => {
                 const r = t.getBoundingClientRect();
                 return {text: t.textContent, px: parseFloat(getComputedStyle(t).fontSize) *
                         svg.getScreenCTM().a, left: r.left, right: r.right, top: r.top,
                         bottom: r.bottom, y: t.getAttribute("y")};
               });
             return {left: box.left, right: box.right, top: box.top, labels};
           })"""
    )
    assert len(charts) >= 3
    for chart in charts:
        labels = chart["labels"]
        assert labels and min(label["px"] for label in labels) >= 11, labels
        for label in labels:
            assert chart["left"] - 1 <= label["left"], (chart, label)
            assert label["right"] <= chart["right"] + 1, (chart, label)
            assert label["top"] >= chart["top"] - 1, label
        axis = sorted(
            (lb for lb in labels if lb["y"] == labels[-1]["y"]), key=lambda lb: lb["left"]
        )
        assert len(axis) >= 4, axis
        assert all(a["right"] <= b["left"] for a, b in pairwise(axis)), axis
    shot("overview-phone")


def test_a_proposals_candidates_and_entity_triples_are_readable_on_a_phone(
    page, live_server, login, seeded, shot
):
    """Found by a day of QA: each score stood a digit a line, each triple's word a letter a line,
    and its Approve and Reject past the screen's edge."""
    from pipeline.models import Proposal

    with_both = [
        p for p in Proposal.objects.filter(job__triples__isnull=False).distinct() if p.candidates
    ]
    assert with_both, "the seeded proposals have candidates and triples"
    login("reviewer")
    page.set_viewport_size(PHONE)
    page.goto(f"{live_server.url}/proposals/{with_both[0].id}/")
    expect(page.get_by_test_id("triples")).to_be_visible()
    assert sideways(page) <= 0
    scores = page.locator("table.candidates td.confidence")
    assert scores.count() >= 3
    assert all(lines(cell) == 1 for cell in scores.all())
    for button in page.locator("#triples button:visible").all():
        box = button.bounding_box()
        assert box and box["x"] >= 0 and box["x"] + box["width"] <= PHONE["width"], box
    assert lines(page.locator("#triples td.mono").first) == 1  # the relationship, one word
    shot("proposal-phone")


def test_a_jobs_facts_and_a_memorys_snapshots_are_readable_on_a_phone(
    page, live_server, login, seeded
):
    """Found by a day of QA: a job's Fact column and a memory's "Content at that version" stood a
    letter or two a line."""
    from memory.models import Memory
    from memory.writes import Actor, modify
    from pipeline.models import Proposal

    job_id = Proposal.objects.values_list("job_id", flat=True).first()
    memory = Memory.objects.filter(source_id__isnull=True, is_deleted=False).first()
    modify(memory.id, {"content": memory.content + " Checked again."}, actor=Actor("t"), reason="t")
    login("reviewer")
    page.set_viewport_size(PHONE)
    for path, cell in (
        (f"/jobs/{job_id}/", "table.proposals td.fact"),
        (f"/memories/{memory.id}/", "table.mb-mini td.snapshot"),
    ):
        page.goto(live_server.url + path)
        expect(page.locator(cell).first).to_be_visible()
        assert sideways(page) <= 0, path
        width = page.locator(cell).first.evaluate("el => el.getBoundingClientRect().width")
        assert width >= 180, (path, width)  # words a line, not letters


def test_the_run_pickers_of_the_evaluation_comparison_fit_a_phone(page, live_server, login):
    """Found by a day of QA: a run's name (model, prompt, set, cases, time) pushed its select past
    the card and the page scrolled sideways."""
    login("reviewer")
    page.set_viewport_size(PHONE)
    page.goto(live_server.url + "/evaluation/compare/")
    name = "offline-heuristic-v2 · prompt v2 · shipped.jsonl, 331 cases · 2026-12-06 18:23:45"
    page.evaluate(
        "name => { for (const id of ['compare-a', 'compare-b']) {"
        " const s = document.getElementById(id); s.add(new Option(name, 'x')); s.value = 'x'; } }",
        name,
    )
    card = page.locator("form.replay-form").bounding_box()
    for picker in ("#compare-a", "#compare-b"):
        box = page.locator(picker).bounding_box()
        assert box["x"] + box["width"] <= card["x"] + card["width"], (picker, box, card)
    assert sideways(page) <= 0


def test_the_evaluation_runs_their_comparison_and_the_imports_keep_whole_words_on_a_phone(
    page, live_server, login, db, tmp_path
):
    """Found by a day of QA: "shipped.jsonl", "offline-heuristic-v2" and "Decision accuracy" stood
    a letter a line, a row some 500 px tall; the tables now scroll in their own box."""
    from pipeline import tasks
    from pipeline.eval import runs as eval_runs
    from pipeline.imports import runs as import_runs
    from pipeline.llm import get_chat_client

    client = get_chat_client("offline", "offline-heuristic-v2")
    first, second = (
        eval_runs.start_run("shipped", client, requested_by="ada", limit=limit) for limit in (3, 4)
    )
    for run in (first, second):
        tasks.run_eval(run.id)
    notes = tmp_path / "notes.md"
    notes.write_text("- Kenji deploys billing-api.\n")
    import_runs.import_file(notes)
    login("admin")
    page.set_viewport_size(PHONE)
    for path, table in (
        ("/evaluation/", "[data-testid=eval-runs]"),
        (f"/evaluation/compare/?a={first.id}&b={second.id}", "table.compare"),
        ("/transfer/", "[data-testid=import-runs]"),
    ):
        page.goto(live_server.url + path)
        cells = page.locator(f"{table} tbody tr:first-child td")
        expect(cells.first).to_be_visible()
        assert sideways(page) <= 0, path
        for cell in cells.all():
            # A line a word at most (a hyphen may break a name), not a letter a line.
            words = len(cell.inner_text().replace("-", " ").split())
            assert lines(cell) <= max(words, 1) + 1, (path, cell.inner_text())
