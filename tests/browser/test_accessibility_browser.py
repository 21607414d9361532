"""The eight main pages pass axe-core with no serious or critical violation: colour contrast (WCAG
AA), links told apart from text by more than colour, every scrollable block reachable by keyboard
(issue 19, "Accessibility").

axe-core comes from the npm package pinned in package.json (`make browser` runs `npm ci`), injected
into each page by Playwright. Injecting a script is inline script to the Content-Security-Policy,
so this module's browser context bypasses the policy; tests/browser/test_csp_browser.py and
test_swap_console_browser.py check the policy itself."""

from pathlib import Path

import pytest
from playwright.sync_api import expect

from memory.models import Memory
from pipeline.models import Proposal
from pipeline.writes.config import update_config
from tests.conftest import run_pipeline_on

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

AXE = Path(__file__).resolve().parents[2] / "node_modules" / "axe-core" / "axe.min.js"
BLOCKING = {"serious", "critical"}
PHONE = {"width": 390, "height": 844}


@pytest.fixture
def browser_context_args(browser_context_args):
    return {**browser_context_args, "bypass_csp": True}


@pytest.fixture
def seeded(db):
    """Every badge colour on the pages: ADD, UPDATE, DELETE-worthy text, a contradiction, a safety
    finding, applied and pending proposals, memories written by the pipeline."""
    update_config({"shadowMode": False}, changed_by="test", reason="seed")
    run_pipeline_on(
        "The team uses Kafka for billing events. Standup notes from Monday.",
        "Automatic staging deploys are enabled for every service. Noted by the release bot.",
    )
    update_config({"shadowMode": True}, changed_by="test", reason="review")
    run_pipeline_on(
        "The team doesn't use Kafka for billing events anymore. Standup notes from Friday.",
        "The staging deploy key is AKIAIOSFODNN7EXAMPLE for billing-api. Rotate it monthly.",
        "Kenji maintains ingest-worker. Mail him at kenji@lumen.dev if it breaks.",
        "Sofia owns the component library in packages/ui. From the design sync.",
    )


def main_pages() -> list[str]:
    """Overview, review queue, a proposal, contradictions, memories, a memory, jobs, settings,
    export and import."""
    proposal = (
        Proposal.objects.filter(review_needed=True).first()
        or Proposal.objects.filter(status="pending").first()
    )
    memory = Memory.objects.filter(who="test-agent").first()
    return [
        "/",
        "/review/",
        f"/proposals/{proposal.id}/",
        "/contradictions/",
        "/memories/",
        f"/memories/{memory.id}/",
        "/jobs/",
        "/settings/",
        "/transfer/",
    ]


def blocking_violations(page, scope: str | None = None) -> list[str]:
    """Run axe on the page as it is (or on the elements `scope` selects); one line per serious or
    critical rule broken, with examples."""
    assert AXE.exists(), f"{AXE} is missing: `make browser` (or `npm ci`) installs it"
    page.add_script_tag(path=str(AXE))
    result = page.evaluate(
        "scope => axe.run(scope || document, {resultTypes: ['violations']})", scope
    )
    lines = []
    for rule in result["violations"]:
        if rule["impact"] not in BLOCKING:
            continue
        examples = "; ".join(
            f"{node['target'][-1]}: {node['failureSummary'].splitlines()[-1].strip()}"
            for node in rule["nodes"][:3]
        )
        lines.append(
            f"{page.url} {rule['id']} ({rule['impact']}, {len(rule['nodes'])}): {examples}"
        )
    return lines


@pytest.mark.parametrize("viewport", [None, PHONE], ids=["desktop", "phone"])
def test_the_main_pages_have_no_serious_accessibility_violation(
    page, live_server, login, seeded, shot, viewport
):
    login("admin")
    if viewport:
        page.set_viewport_size(viewport)
    found = []
    for index, url in enumerate(main_pages()):
        response = page.goto(live_server.url + url)
        assert response.status == 200, url
        page.wait_for_load_state("networkidle")
        found += blocking_violations(page)
        if viewport is None:
            shot(f"a11y-{index}-{url.strip('/').split('/')[0] or 'overview'}")
    assert found == [], "\n".join(found)


def test_the_analytics_and_evaluation_pages_have_no_serious_violation_on_a_phone(
    page, live_server, login, seeded
):
    """Their tables keep whole words on a phone and scroll in their own box, which then takes the
    keyboard's focus (app.js); before, they squeezed a column to a letter a line."""
    from pipeline import tasks
    from pipeline.eval import runs as eval_runs
    from pipeline.llm import get_chat_client

    client = get_chat_client("offline", "offline-heuristic-v2")
    a, b = (eval_runs.start_run("shipped", client, requested_by="ada", limit=n) for n in (3, 4))
    for run in (a, b):
        tasks.run_eval(run.id)
    login("admin")
    page.set_viewport_size(PHONE)
    found = []
    for url in (
        "/analytics/",
        "/evaluation/",
        f"/evaluation/compare/?a={a.id}&b={b.id}",
        f"/evaluation/runs/{a.id}/",
    ):
        page.goto(live_server.url + url)
        page.wait_for_load_state("networkidle")
        found += blocking_violations(page)
    assert found == [], "\n".join(found)
    page.set_viewport_size({"width": 1280, "height": 900})
    page.goto(f"{live_server.url}/evaluation/compare/?a={a.id}&b={b.id}")
    expect(page.locator("table.compare")).not_to_have_attribute("tabindex", "0")  # it fits


def test_a_decided_row_keeps_its_contrast(page, live_server, login, seeded):
    """A row swapped for its decided version stepped back with opacity .7, which took its badges
    and muted text below 4.5:1."""
    login("reviewer")
    page.goto(f"{live_server.url}/review/?action=add")
    page.keyboard.press("a")
    expect(page.locator("tr.decided [data-testid=row-note]")).to_contain_text("Approved")
    assert blocking_violations(page, "tr.decided") == []
