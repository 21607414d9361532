"""Issue 19, "a tool people use all day": compact queue rows and the overview's first-visit hint,
remembered per person (dashboard.prefs), a glossary of the outcome words from one table, and the
queue's "[N]" in a model's reason naming the candidate memory it points at."""

import re

import pytest
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from django.utils.html import escape

from dashboard import glossary
from dashboard.models import Preferences
from dashboard.templatetags.curation import cited
from memory.models import JobStatus
from pipeline.models import Proposal, ProposalStatus
from pipeline.status import BANNERS
from pipeline.writes.config import update_config

pytestmark = pytest.mark.django_db

DENSITY = reverse("dashboard:prefs-density")
DISMISS = reverse("dashboard:prefs-dismiss-hint")
OWNS = "Priya maintains billing-api. From the planning notes."
OWNS_MORE = "Priya maintains billing-api and reviews every schema migration for it. From the planning notes."


def _queue(client) -> str:
    return client.get(reverse("dashboard:review")).content.decode()


def _compact(body: str) -> bool:
    return bool(re.search(r'<section id="queue" class="compact"', body))


# --- compact rows ---------------------------------------------------------------------------------


def test_compact_rows_are_remembered_per_person(reviewer_client, viewer_client, hx, pipeline_run):
    update_config({"shadowMode": True}, changed_by="t", reason="t")
    pipeline_run(OWNS)
    assert not _compact(_queue(reviewer_client))
    response = reviewer_client.post(DENSITY, **hx)
    assert response.status_code == 200
    assert '"density": {"compact": true}' in response["HX-Trigger"]
    body = _queue(reviewer_client)
    assert _compact(body) and 'aria-pressed="true"' in body
    # Another person's queue is drawn as they like it, and a second toggle turns it off again.
    assert not _compact(_queue(viewer_client))
    reviewer_client.post(DENSITY, **hx)
    assert not _compact(_queue(reviewer_client))
    assert Preferences.objects.get(user__username="rita").compact_rows is False


def test_the_density_toggle_sets_an_explicit_value_and_works_without_script(reviewer_client, hx):
    reviewer_client.post(DENSITY, {"compact": "1"}, **hx)
    reviewer_client.post(DENSITY, {"compact": "1"}, **hx)
    assert Preferences.objects.get(user__username="rita").compact_rows is True
    plain = reviewer_client.post(DENSITY, {"compact": "0"})
    assert plain.status_code == 302 and plain["Location"] == reverse("dashboard:review")
    assert Preferences.objects.get(user__username="rita").compact_rows is False


def test_preference_posts_need_csrf_a_session_and_post(role_users, hx):
    strict = Client(enforce_csrf_checks=True)
    strict.force_login(role_users["viewer"])
    assert strict.post(DENSITY, **hx).status_code == 403
    assert strict.post(DISMISS, **hx).status_code == 403
    assert strict.get(DENSITY).status_code == 405
    anonymous = Client()
    assert anonymous.post(DENSITY, **hx).status_code == 401
    assert anonymous.post(DISMISS).status_code == 302
    assert not Preferences.objects.exists()


def test_compact_rows_fold_the_filters_unless_one_is_set(reviewer_client, hx):
    reviewer_client.post(DENSITY, {"compact": "1"}, **hx)
    folded = _queue(reviewer_client)
    assert re.search(r'<details class="filter-box compact" data-fold-on-phone>', folded)
    filtered = reviewer_client.get(reverse("dashboard:review") + "?action=update").content.decode()
    assert re.search(
        r'<details class="filter-box compact" data-fold-on-phone data-filtered open>', filtered
    )


def test_the_preference_read_is_one_query_whatever_the_preference(
    reviewer_client, hx, pipeline_run
):
    update_config({"shadowMode": True}, changed_by="t", reason="t")
    pipeline_run(OWNS, "Bob owns the deploy pipeline. Said in standup.")
    url = reverse("dashboard:review")

    def count() -> int:
        with CaptureQueriesContext(connection) as ctx:
            assert reviewer_client.get(url).status_code == 200
        return len(ctx.captured_queries)

    without_row = count()
    reviewer_client.post(DENSITY, {"compact": "1"}, **hx)
    assert count() == without_row
    assert sum("dashboard_preferences" in q["sql"] for q in ctx_queries(reviewer_client, url)) == 1


def ctx_queries(client, url):
    with CaptureQueriesContext(connection) as ctx:
        client.get(url)
    return ctx.captured_queries


def test_the_shortcuts_help_lists_the_density_key(viewer_client):
    body = viewer_client.get(reverse("dashboard:overview")).content.decode()
    assert re.search(r"<dt><kbd>d</kbd></dt><dd>compact rows", body)


# --- the overview's first-visit hint --------------------------------------------------------------


def test_the_overview_says_where_to_start_until_dismissed(reviewer_client, hx, pipeline_run):
    update_config({"shadowMode": True}, changed_by="t", reason="t")
    pipeline_run(OWNS)
    waiting = Proposal.objects.filter(status=ProposalStatus.PENDING).count()
    body = reviewer_client.get(reverse("dashboard:overview")).content.decode()
    hint = re.search(r'data-testid="start-here">(.*?)</div>', body, re.S).group(1)
    assert f'<a href="{reverse("dashboard:review")}">{waiting} waiting for review</a>' in hint
    assert reviewer_client.post(DISMISS, **hx).content == b""
    assert 'data-testid="start-here"' not in reviewer_client.get("/").content.decode()
    assert Preferences.objects.get(user__username="rita").overview_hint_dismissed


def test_the_overview_hint_is_not_shown_when_nothing_waits(viewer_client):
    assert not Proposal.objects.filter(status=ProposalStatus.PENDING).exists()
    assert 'data-testid="start-here"' not in viewer_client.get("/").content.decode()


# --- the glossary ---------------------------------------------------------------------------------


def test_every_proposal_and_job_status_word_has_one_meaning():
    for status in ProposalStatus.values:
        assert glossary.meaning(status, "proposal"), status
    for status in JobStatus.values:
        assert glossary.meaning(status, "job"), status
    # The modes' meanings are the banner's own sentences, not a second copy.
    for key, (_label, meaning) in BANNERS.items():
        assert glossary.meaning(key, "mode") == meaning


def test_the_glossary_page_defines_each_word_at_its_anchor(viewer_client):
    body = viewer_client.get(reverse("dashboard:glossary")).content.decode()
    for section in glossary.SECTIONS:
        for word, text in section.words.items():
            anchor = glossary.anchor(word, section.key)
            assert re.search(
                rf'<dt id="{anchor}">.*?</dt><dd>{re.escape(escape(text))}</dd>', body
            ), anchor
    assert Client().get(reverse("dashboard:glossary")).status_code == 302


def test_a_status_badge_links_to_its_glossary_entry(reviewer_client, pipeline_run):
    update_config({"shadowMode": True}, changed_by="t", reason="t")
    pipeline_run(OWNS)
    Proposal.objects.update(status=ProposalStatus.STALE)
    body = reviewer_client.get(reverse("dashboard:review") + "?status=stale").content.decode()
    link = re.search(
        r'<a class="badge badge-status badge-link" href="([^"]+)" title="([^"]+)"', body
    )
    assert link.group(1) == reverse("dashboard:glossary") + "#proposal-stale"
    assert link.group(2) == glossary.meaning("stale")
    assert 'href="/glossary/">What the words mean' in body


# --- [N] names the memory it points at ------------------------------------------------------------


def test_the_queue_names_the_memory_a_reason_cites(reviewer_client, pipeline_run):
    update_config({"shadowMode": False}, changed_by="t", reason="seed")
    pipeline_run(OWNS)
    update_config({"shadowMode": True}, changed_by="t", reason="review")
    pipeline_run(OWNS_MORE)
    update = Proposal.objects.get(status=ProposalStatus.PENDING, action="update")
    assert update.reason == "Adds detail to memory [1]"
    body = reviewer_client.get(reverse("dashboard:review")).content.decode()
    memory = reverse("dashboard:memory", args=[update.target_memory_id])
    assert re.search(
        rf'Adds detail to memory <a class="cite" href="{memory}" title="Priya maintains '
        r'billing-api\.?"[^>]*>\[1\] <q>Priya maintains billing-api',
        body,
    )


def test_a_cited_memory_is_escaped_and_an_unknown_number_stays_text():
    candidates = [
        {"number": 1, "memoryId": "m-1", "content": '<script>alert(1)</script> "Bob" owns it'},
        {"number": 2, "memoryId": "m-2", "content": "x" * 200},
    ]
    # A reason from another model that cites two candidates, one that does not exist, and markup.
    html = str(cited("Merges [1] and [2], not [7] <b>really</b>", candidates))
    assert "<script>" not in html and "<b>" not in html and "&lt;b&gt;really" in html
    assert "[1] <q>&lt;script&gt;alert(1)&lt;/script&gt; &quot;Bob&quot; owns it</q>" in html
    assert 'href="/memories/m-2/"' in html and "x" * 60 not in html.split("<q>")[2]
    assert "not [7]" in html
    assert str(cited("No citation here", [])) == "No citation here"
