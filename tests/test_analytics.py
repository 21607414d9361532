"""Reviewer analytics: numbers for a constructed scenario, the CSV export, access and query counts."""

import csv
import io
from datetime import timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from dashboard.templatetags.curation import duration
from memory.writes import Actor
from pipeline import analytics, review
from pipeline.models import Proposal
from pipeline.writes import review as review_writes
from tests.pipeline_support import set_mode

pytestmark = pytest.mark.django_db

RITA, ADA = Actor("rita", "operator"), Actor("ada", "operator")
# One fact per raw memory (the second sentence is too short to be a fact), so each fact differs
# from its raw text and nothing is deduplicated against the raw memory itself.
AUTO_TEXTS = [
    "Priya maintains the billing-api service. Ok then.",
    "Kenji uses Grafana for dashboards. Ok then.",
    "The nightly backup runs at 02:00 UTC. Ok then.",
    "Omar owns the ingest-worker deployment. Ok then.",
]
REVIEW_TEXTS = [
    "Lena prefers short standups on Monday. Ok then.",
    "The release train leaves every Thursday. Ok then.",
    "Staging databases are refreshed weekly. Ok then.",
    "Sofia works on the search relevance project. Ok then.",
]


def _waited(proposal: Proposal, minutes: int) -> None:
    """The proposal was recorded `minutes` before the reviewer decides (only the clock moves)."""
    Proposal.objects.filter(id=proposal.id).update(
        created_at=timezone.now() - timedelta(minutes=minutes)
    )


@pytest.fixture
def scenario(pipeline_run):
    """4 automatic ADDs (1 reverted by rita); rita approves 2 and rejects 1, ada edits 1."""
    set_mode("controlled-write")
    pipeline_run(*AUTO_TEXTS)
    auto = list(Proposal.objects.filter(decided_by="pipeline-v2").order_by("created_at", "id"))
    assert len(auto) == 4 and all(p.status == "applied" for p in auto)
    review_writes.revert(auto[0].id, reviewer=RITA, reason="wrong owner")
    set_mode("shadow")
    pipeline_run(*REVIEW_TEXTS)
    pending = list(Proposal.objects.filter(status="pending").order_by("fact_content"))
    assert len(pending) == 4
    approved_a, approved_b, rejected, edited = pending
    for proposal, minutes in ((approved_a, 10), (approved_b, 20), (rejected, 30), (edited, 60)):
        _waited(proposal, minutes)
    review.approve(approved_a.id, RITA)
    review.approve(approved_b.id, RITA, content=approved_b.fact_content)  # same text: not edited
    review.reject(rejected.id, RITA, reason="too vague")
    review.approve(edited.id, ADA, content=edited.fact_content + " Confirmed by Sofia.")
    return {
        "auto": auto,
        "approved": [approved_a, approved_b],
        "rejected": rejected,
        "edited": edited,
    }


def test_the_report_counts_approvals_edits_rejections_and_revert_precision(scenario):
    data = analytics.report(analytics.parse_filters({}))
    total = data["total"]
    assert (total.approved, total.edited, total.rejected, total.decided) == (2, 1, 1, 4)
    assert (total.auto, total.reverted) == (4, 1)
    assert total.precision == pytest.approx(0.75)
    assert total.approval_rate == pytest.approx(0.75)
    assert total.edit_rate == pytest.approx(1 / 3)

    (row,) = data["action_model_rows"]
    assert (row["action"], row["model"]) == ("add", "offline-heuristic-v2")
    assert (row["tally"].approved, row["tally"].edited, row["tally"].rejected) == (2, 1, 1)
    assert (row["tally"].auto, row["tally"].reverted) == (4, 1)

    reviewers = {r["reviewer"]: r["tally"] for r in data["reviewer_rows"]}
    assert set(reviewers) == {"rita", "ada"}
    assert (reviewers["rita"].approved, reviewers["rita"].edited, reviewers["rita"].rejected) == (
        2,
        0,
        1,
    )
    assert (reviewers["ada"].approved, reviewers["ada"].edited, reviewers["ada"].rejected) == (
        0,
        1,
        0,
    )
    assert [r["reviewer"] for r in data["reviewer_rows"]] == ["rita", "ada"]  # busiest first


def test_decision_time_median_and_p90(scenario):
    total = analytics.report(analytics.parse_filters({}))["total"]
    # Waits of 10, 20, 30 and 60 minutes (plus the few milliseconds the test takes).
    assert total.median_seconds == pytest.approx(25 * 60, abs=5)
    assert total.p90_seconds == pytest.approx(60 * 60, abs=5)
    assert duration(total.median_seconds) == "25 min"
    rita = next(
        r["tally"]
        for r in analytics.report(analytics.Filters())["reviewer_rows"]
        if r["reviewer"] == "rita"
    )
    assert rita.median_seconds == pytest.approx(20 * 60, abs=5)


def test_percentiles_and_durations():
    assert analytics.median([]) is None and analytics.percentile([], 0.9) is None
    assert analytics.percentile([1, 2, 3, 4, 5, 6, 7, 8, 9, 10], 0.9) == 9
    assert analytics.percentile([5], 0.9) == 5
    assert duration(90) == "2 min"
    assert duration(3 * 3600) == "3.0 h"


def test_decisions_are_grouped_by_iso_week_of_the_decision(scenario):
    last_week = timezone.now() - timedelta(days=7)
    Proposal.objects.filter(id=scenario["rejected"].id).update(decided_at=last_week)
    data = analytics.report(analytics.Filters(days=30))
    weeks = {row["label"]: row["tally"] for row in data["week_rows"]}
    this_label = analytics.week_label(analytics._monday(timezone.now()))
    last_label = analytics.week_label(analytics._monday(last_week))
    assert weeks[last_label].rejected == 1 and weeks[last_label].decided == 1
    assert weeks[this_label].decided == 3 and weeks[this_label].auto == 4
    assert len(data["weeks"]) >= 5  # every week of the period is on the chart, empty or not


def test_the_last_7_days_are_7_times_24_hours_not_8_calendar_days(scenario):
    """Found by a QA pass: a decision 7 days and some hours old counted in "the last 7 days" (the
    window started at the calendar day's midnight)."""
    rejected = scenario["rejected"]
    Proposal.objects.filter(id=rejected.id).update(
        decided_at=timezone.now() - timedelta(days=7, minutes=1)  # the same calendar day
    )
    week = analytics.report(analytics.Filters(days=7))["total"]
    Proposal.objects.filter(id=rejected.id).update(
        decided_at=timezone.now() - timedelta(days=6, hours=23)
    )
    assert analytics.report(analytics.Filters(days=7))["total"].rejected == week.rejected + 1


def test_filters_narrow_the_numbers(scenario):
    assert analytics.report(analytics.parse_filters({"action": "update"}))["total"].decided == 0
    assert analytics.report(analytics.parse_filters({"model": "other-model"}))["total"].auto == 0
    old = timezone.now() - timedelta(days=40)
    Proposal.objects.filter(decided_by="ada").update(decided_at=old)
    assert analytics.report(analytics.parse_filters({"days": "30"}))["total"].edited == 0
    assert analytics.report(analytics.parse_filters({"days": "90"}))["total"].edited == 1
    assert analytics.report(analytics.parse_filters({"days": "all"}))["total"].edited == 1
    bad = analytics.parse_filters({"days": "soon", "action": "explode"})
    assert (bad.days, bad.action) == (90, "")


def test_the_page_shows_charts_tables_and_numbers_to_a_viewer(viewer_client, scenario):
    response = viewer_client.get("/analytics/")
    assert response.status_code == 200
    body = response.content.decode()
    assert body.count('<svg class="chart"') == 3
    assert 'data-testid="stat-decided">4<' in body
    assert 'data-testid="stat-precision">75%<' in body
    assert 'data-testid="stat-median">25 min<' in body
    assert 'data-reviewer="rita"' in body and 'data-reviewer="ada"' in body
    assert 'aria-current="page">Analytics</a>' in body
    assert 'href="/analytics.csv?days=90"' in body


def test_pages_need_login(client):
    for url in ("/analytics/", "/analytics.csv"):
        response = client.get(url)
        assert response.status_code == 302 and response["Location"].startswith("/login/")


def test_the_csv_has_one_row_per_week_action_model_reviewer_and_outcome(viewer_client, scenario):
    response = viewer_client.get("/analytics.csv?days=90")
    assert response.status_code == 200
    assert response["Content-Type"].startswith("text/csv")
    assert "attachment" in response["Content-Disposition"]
    rows = list(csv.reader(io.StringIO(response.content.decode())))
    assert rows[0] == list(analytics.CSV_HEADER)
    week = analytics.week_label(analytics._monday(timezone.now()))
    body = {(r[0], r[2], r[3], r[4], r[5]): int(r[6]) for r in rows[1:]}
    model = "offline-heuristic-v2"
    assert body == {
        (week, "add", model, "rita", "approved"): 2,
        (week, "add", model, "rita", "rejected"): 1,
        (week, "add", model, "ada", "edited"): 1,
        (week, "add", model, "pipeline-v2", "auto_applied"): 4,
        (week, "add", model, "rita", "reverted"): 1,
    }
    filtered = viewer_client.get("/analytics.csv?action=delete").content.decode()
    assert filtered.strip().splitlines() == [",".join(analytics.CSV_HEADER)]


def test_csv_cells_never_start_a_formula():
    assert analytics.csv_safe("=HYPERLINK(1)") == "'=HYPERLINK(1)"
    assert analytics.csv_safe("rita") == "rita" and analytics.csv_safe(3) == "3"


def _count(client, url):
    client.get(url)  # warm up: session, config row
    with CaptureQueriesContext(connection) as queries:
        assert client.get(url).status_code == 200
    return len(queries)


def test_the_query_count_does_not_grow_with_the_number_of_proposals(viewer_client, pipeline_run):
    set_mode("shadow")
    pipeline_run(*(f"Service number {i} runs in zone {i}. Ok then." for i in range(3)))
    for proposal in Proposal.objects.filter(status="pending"):
        review.approve(proposal.id, RITA)
    page, export = _count(viewer_client, "/analytics/"), _count(viewer_client, "/analytics.csv")
    pipeline_run(*(f"Service number {i} runs in zone {i}. Ok then." for i in range(3, 30)))
    for index, proposal in enumerate(Proposal.objects.filter(status="pending")):
        if index % 3:
            review.approve(proposal.id, ADA if index % 2 else RITA)
        else:
            review.reject(proposal.id, RITA, reason="no")
    assert Proposal.objects.filter(decided_at__isnull=False).count() >= 30
    assert _count(viewer_client, "/analytics/") == page
    assert _count(viewer_client, "/analytics.csv") == export
