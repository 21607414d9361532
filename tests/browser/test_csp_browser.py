"""The Content-Security-Policy holds in a real browser: no main page (nor its htmx fragments)
makes Chromium report a violation (issue 10 item 13)."""

import pytest

from memory.models import Job, Memory
from pipeline.models import Proposal
from tests.conftest import run_pipeline_on

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

PAGES = [
    "/",
    "/review/",
    "/contradictions/",
    "/memories/",
    "/jobs/",
    "/entities/",
    "/analytics/",
    "/settings/",
    "/replay/",
    "/admin/",
]


def test_no_main_page_reports_a_csp_violation(page, live_server, login):
    run_pipeline_on(
        "Priya prefers squash merges. The billing service no longer uses Kafka.",
        "The billing service uses Kafka for events. Alice leads the platform team.",
    )
    source = Memory.objects.filter(who="test-agent").first()
    proposal = Proposal.objects.first()
    job = Job.objects.first()
    violations: list[str] = []
    page.on(
        "console",
        lambda message: (
            violations.append(f"{page.url}: {message.text}")
            if "Content Security Policy" in message.text
            else None
        ),
    )
    login("admin")
    urls = [*PAGES, f"/memories/{source.id}/", f"/proposals/{proposal.id}/", f"/jobs/{job.id}/"]
    for url in urls:
        response = page.goto(f"{live_server.url}{url}")
        assert response.status == 200, url
        assert "default-src 'self'" in response.headers["content-security-policy"]
        page.wait_for_load_state("networkidle")
    assert violations == []
