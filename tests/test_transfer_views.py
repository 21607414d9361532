"""The export and import page (issue 22, items 6 and 7): admin only; the export downloads as a
stream; an upload becomes a queued run (nothing is imported in the request) whose page polls its
progress and ends with the per-line report."""

import json

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.db import connection
from django.http import StreamingHttpResponse
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from django_q.models import OrmQ

from memory import export
from memory.models import Memory
from memory.writes import Actor, remember
from pipeline.imports.models import ImportRun
from pipeline.writes import imports as import_writes
from tests.aria_checks import assert_errors_described

pytestmark = pytest.mark.django_db

AGENT = Actor("agent-one", "agent")
PAGE = reverse("dashboard:transfer")
DOWNLOAD = reverse("dashboard:export-download")
UPLOAD = reverse("dashboard:import-start")

MIXED = (
    json.dumps({"format": export.FORMAT, "version": 1})
    + "\n"
    + json.dumps({"content": "Kenji deploys billing-api with Terraform.", "agentId": "ops"})
    + "\n"
    + json.dumps({"content": "A bad importance.", "importance": "high"})
    + "\n"
    + json.dumps({"content": "Priya prefers squash merges."})
    + "\n"
)


def upload(client, text: str, name: str = "store.jsonl", **fields):
    data = {"file": SimpleUploadedFile(name, text.encode()), **fields}
    return client.post(UPLOAD, data)


def a_run(**overrides) -> ImportRun:
    values = {
        "requested_by": "ada",
        "origin": "dashboard",
        "file_name": "f.md",
        "fmt": "",
        "agent": "",
        "process": False,
        "size": 1,
        "lines": 1,
    }
    return import_writes.create_run(**{**values, **overrides})


def test_anonymous_users_go_to_the_login_page(client):
    run = a_run()
    for url in (PAGE, DOWNLOAD, reverse("dashboard:import-run", args=[run.id])):
        response = client.get(url)
        assert response.status_code == 302 and "/login/" in response["Location"], url
    assert client.post(UPLOAD).status_code == 302


@pytest.mark.parametrize("role", ["viewer_client", "reviewer_client"])
def test_viewers_and_reviewers_may_neither_export_nor_import(request, role):
    client = request.getfixturevalue(role)
    remember("Kenji deploys billing-api.", actor=AGENT)
    run = a_run()
    for url in (PAGE, DOWNLOAD, reverse("dashboard:import-run", args=[run.id])):
        assert client.get(url).status_code == 403, url
    assert upload(client, "- A memory from a reviewer.\n").status_code == 403
    assert ImportRun.objects.count() == 1 and Memory.objects.count() == 1


def test_only_admins_see_the_nav_link(viewer_client, admin_client_role):
    assert PAGE.encode() not in viewer_client.get(reverse("dashboard:overview")).content
    assert PAGE.encode() in admin_client_role.get(reverse("dashboard:overview")).content


def test_the_page_offers_both_forms_and_lists_imports(admin_client_role, hx):
    remember("Kenji deploys billing-api.", actor=AGENT, agent_id="ops")
    a_run(file_name="notes.md")
    page = admin_client_role.get(PAGE).content.decode()
    assert 'data-testid="export-download"' in page and 'data-testid="import-start"' in page
    assert '<option value="ops">ops</option>' in page and "notes.md" in page
    fragment = admin_client_role.get(PAGE, **hx).content.decode()
    assert fragment.lstrip().startswith('<section id="import-runs"') and "<html" not in fragment


def test_the_list_of_imports_costs_the_same_queries_however_many_there_are(admin_client_role):
    def queries() -> int:
        with CaptureQueriesContext(connection) as captured:
            assert admin_client_role.get(PAGE).status_code == 200
        return len(captured.captured_queries)

    a_run()
    few = queries()
    for _ in range(12):
        a_run()
    assert queries() == few


def test_the_export_downloads_as_a_stream_of_the_chosen_agent(admin_client_role):
    remember("Kenji deploys billing-api.", actor=AGENT)
    ops = remember("The ops runbook lives in Notion.", actor=AGENT, agent_id="ops").memory
    response = admin_client_role.get(DOWNLOAD, {"agent": "ops", "include_history": "on"})
    assert isinstance(response, StreamingHttpResponse) and response.status_code == 200
    assert 'filename="memories-ops-' in response["Content-Disposition"]
    header, record = (
        json.loads(line) for line in b"".join(response.streaming_content).split(b"\n")[:2]
    )
    assert header["agent"] == "ops" and header["includeHistory"] is True
    assert record["id"] == ops.id and record["history"][0]["event"] == "created"


def test_an_unknown_agent_in_the_export_form_is_shown_next_to_the_field(admin_client_role):
    response = admin_client_role.get(DOWNLOAD, {"agent": "nobody"})
    assert response.status_code == 400 and not response.streaming
    assert 'class="field-error"' in response.content.decode()
    assert_errors_described(response.content.decode())


def test_an_upload_is_queued_then_its_page_polls_until_the_report(
    admin_client_role, drain_queue, hx
):
    response = upload(admin_client_role, MIXED)
    run = ImportRun.objects.get()
    assert response.status_code == 302
    assert response["Location"] == reverse("dashboard:import-run", args=[run.id])
    # Nothing imported inside the request: the run waits for a worker.
    assert not Memory.objects.exists() and run.status == "queued"
    assert [q.task["func"] for q in OrmQ.objects.all()] == ["pipeline.imports.runs.run_task"]
    live = admin_client_role.get(response["Location"], **hx)
    assert live.status_code == 200 and 'hx-trigger="every 2s"' in live.content.decode()

    assert drain_queue() == 1
    run.refresh_from_db()
    assert (run.status, run.imported, run.deduped, run.refused) == ("done", 2, 0, 1)
    assert run.upload is None  # the file is not kept once the store has it
    assert set(Memory.objects.values_list("asserted_by", flat=True)) == {"import"}
    done = admin_client_role.get(response["Location"], **hx)
    assert done.status_code == 286  # htmx stops polling
    body = done.content.decode()
    assert "every 2s" not in body
    assert 'data-testid="imported-lines">lines 2, 4<' in body
    assert '<td class="num">3</td><td class="mono small">importance</td>' in body
    assert "must be a number between 0 and 1" in body
    page = admin_client_role.get(response["Location"]).content.decode()
    assert "<html" in page and 'data-testid="import-report"' in page


def test_an_upload_for_one_agent_with_processing_queues_extraction(
    admin_client_role, drain_queue, django_capture_on_commit_callbacks
):
    upload(
        admin_client_role,
        "- Kenji deploys billing-api.\n- Priya reviews it.\n",
        name="notes.md",
        agent="ops",
        process="on",
    )
    with django_capture_on_commit_callbacks(execute=True):
        drain_queue()
    assert set(Memory.objects.values_list("agent_id", "extraction_status")) == {("ops", "pending")}
    jobs = [q.task for q in OrmQ.objects.all()]
    assert [task["func"] for task in jobs] == ["pipeline.tasks.run_job"] * 2


def test_a_file_over_the_limit_is_refused_next_to_the_file_field(admin_client_role, settings):
    settings.MEMORY_IMPORT_MAX_BYTES = 10
    response = upload(admin_client_role, "- A memory longer than ten bytes.\n")
    assert response.status_code == 400
    body = response.content.decode()
    assert 'data-testid="import-error"' in body and "MEMORY_IMPORT_MAX_BYTES" in body
    assert_errors_described(body)
    # Served at the upload's address, it is still the Data page (a QA day: nothing was current).
    assert 'aria-current="page" title="Export and import">Data</a>' in body
    assert not ImportRun.objects.exists() and not OrmQ.objects.exists()


def test_an_empty_file_is_refused(admin_client_role):
    response = upload(admin_client_role, "\n\n")
    assert response.status_code == 400 and "nothing to import" in response.content.decode()
    assert not ImportRun.objects.exists()


def test_a_file_the_format_cannot_read_fails_the_run_saying_where(admin_client_role, drain_queue):
    upload(admin_client_role, '{"results": [\n{"memory": "a"},\n}', name="mem0.json")
    drain_queue()
    run = ImportRun.objects.get()
    assert run.status == "failed" and run.error == "line 3: not valid JSON: Expecting value"
    page = admin_client_role.get(reverse("dashboard:import-run", args=[run.id])).content.decode()
    assert 'data-testid="import-failed"' in page and "Nothing was imported." in page


def test_the_run_page_lists_the_lines_whose_stored_text_was_kept(admin_client_role):
    run = a_run()
    ImportRun.objects.filter(id=run.id).update(
        status="done",
        deduped=4,
        report={"deduped": [[2, 5]], "textDiffers": [2, 3, 5], "textDiffersCount": 4},
    )
    page = admin_client_role.get(reverse("dashboard:import-run", args=[run.id])).content.decode()
    kept = page[page.index('data-testid="kept-stored-text">') :]
    assert kept.startswith('data-testid="kept-stored-text">lines 2-3, 5 and 1 more not listed:')
    plain = a_run()
    ImportRun.objects.filter(id=plain.id).update(status="done", report={"deduped": [[2, 2]]})
    page = admin_client_role.get(reverse("dashboard:import-run", args=[plain.id])).content.decode()
    assert "kept-stored-text" not in page
