"""Memory text is untrusted: one very long "word" (a hash, a URL, a paste) wraps inside its cell
on a desktop screen instead of widening the whole page (found by a QA pass: 2,626 px on the
Memories page, 3,896 px on a job's page)."""

import pytest
from playwright.sync_api import expect

from pipeline.writes.config import update_config
from tests.conftest import run_pipeline_on

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

LONG = "Supercalifragilistic" + "x" * 400
DESKTOP = {"width": 1280, "height": 900}


def test_a_very_long_word_wraps_in_its_cell_on_every_page_that_shows_it(page, live_server, login):
    from memory.models import Job

    update_config({"shadowMode": False}, changed_by="test", reason="seed")
    (raw,) = run_pipeline_on(f"The code word is {LONG} by Rosalind. Rosalind owns the billing API.")
    from memory.models import Memory

    job = Job.objects.get(memory=raw)
    derived = Memory.objects.filter(source_id=raw.id).first()  # its "Raw source" box (a QA pass)
    login("reviewer")
    page.set_viewport_size(DESKTOP)
    paths = (f"/memories/{derived.id}/", "/memories/", f"/memories/{raw.id}/", f"/jobs/{job.id}/")
    for path in paths:
        page.goto(live_server.url + path)
        expect(page.locator("h1").first).to_be_visible()
        assert page.evaluate("document.documentElement.scrollWidth - window.innerWidth") <= 0, path
    # The short columns keep their words whole: the fact's type is one line, not letters.
    type_cell = page.locator("section:has(h2:text('Extracted facts')) td:nth-child(2)").first
    assert type_cell.evaluate("el => el.getBoundingClientRect().width") >= 40


def test_a_long_word_in_a_candidate_wraps_on_the_proposal_page(page, live_server, login):
    """Found by a QA pass: the proposal page's candidates table widened the page past the screen
    with a 140-character word (the table's text is clipped to 140 characters, not wrapped)."""
    from pipeline.models import Proposal

    run_pipeline_on(f"{LONG} signs the billing API requests.")
    (raw,) = run_pipeline_on(f"{LONG} signs every billing API request now.")
    proposal = Proposal.objects.filter(source_memory=raw).exclude(candidates=[]).first()
    assert proposal is not None, "the second memory's fact saw the first as a candidate"
    login("reviewer")
    page.set_viewport_size(DESKTOP)
    page.goto(f"{live_server.url}/proposals/{proposal.id}/")
    expect(page.locator("table.candidates")).to_be_visible()
    assert page.evaluate("document.documentElement.scrollWidth - window.innerWidth") <= 0


def test_a_long_word_wraps_in_the_jobs_list_the_entities_and_a_searchs_summary(
    page, live_server, login
):
    """Found by a QA pass: the jobs list (1,535 px), the entities list and an entity's page (up
    to 3,145 px) and a long search's "1 match for ..." (3,889 px) widened the page."""
    from memory import writes
    from memory.graph import Triple
    from memory.models import Entity
    from memory.writes import Actor

    name = "X" * 200  # the longest entity name the API takes
    writes.remember(
        f"{name} owns the ledger service",
        actor=Actor("x", "agent"),
        triples=[Triple(name, "owns", "ledger service", "person", "service")],
    )
    entity = Entity.objects.get(name=name)
    login("reviewer")
    page.set_viewport_size(DESKTOP)
    query = "a" * 500
    for path in ("/jobs/", "/entities/", f"/entities/{entity.pk}/", f"/memories/?q={query}"):
        page.goto(live_server.url + path)
        expect(page.locator("h1").first).to_be_visible()
        assert page.evaluate("document.documentElement.scrollWidth - window.innerWidth") <= 0, path
