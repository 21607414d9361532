"""Export and import (admin): download the store as JSON Lines (streamed as it is read), upload a
file to import (our export, mem0's get_all JSON, plain text or Markdown) as a queued run whose
page polls its progress and ends with the per-line report, and the list of recent imports."""

from __future__ import annotations

from django import forms
from django.conf import settings
from django.core.paginator import Paginator
from django.http import StreamingHttpResponse
from django.shortcuts import get_object_or_404, redirect
from django.template.loader import render_to_string
from django.urls import reverse
from django.views.decorators.http import require_GET, require_POST
from django.views.decorators.vary import vary_on_headers
from django_htmx.http import HttpResponseStopPolling

from dashboard.access import reviewer_actor, role_required
from dashboard.htmx import render_page, wants_fragment
from memory import export as exporting
from memory.models import Memory
from pipeline.imports import formats, runs
from pipeline.imports.models import ImportRun
from pipeline.imports.report import kept_stored_text, lines

RUNS_PER_PAGE = 20
PROGRESS = "dashboard/import_run.html#import-progress"


def agent_choices() -> list[tuple[str, str]]:
    agents = Memory.objects.order_by("agent_id").values_list("agent_id", flat=True).distinct()
    return [(agent, agent) for agent in agents]


class ExportForm(forms.Form):
    agent = forms.ChoiceField(required=False, label="Agent")
    include_history = forms.BooleanField(required=False, label="Include each memory's history")
    include_deleted = forms.BooleanField(required=False, label="Include forgotten memories")

    def __init__(self, *args, **kwargs):
        # Both forms have an agent field on one page: ids of their own (export_agent).
        super().__init__(*args, auto_id="export_%s", **kwargs)
        self.fields["agent"].choices = [("", "Every agent"), *agent_choices()]


class ImportForm(forms.Form):
    file = forms.FileField(label="File")
    format = forms.ChoiceField(
        choices=[("", "Tell from the file"), *formats.FORMATS.items()],
        required=False,
        label="Format",
    )
    agent = forms.CharField(
        required=False,
        max_length=200,
        label="Agent",
        help_text="Blank: as the file says (text files: default).",
    )
    process = forms.BooleanField(
        required=False, label="Queue an extraction job for each imported memory"
    )

    def __init__(self, *args, **kwargs):
        super().__init__(*args, auto_id="import_%s", **kwargs)


def _page_context(request, export_form: ExportForm, import_form: ImportForm) -> dict:
    page = Paginator(
        ImportRun.objects.defer("upload", "report").order_by("-created_at", "-id"),
        RUNS_PER_PAGE,
    ).get_page(request.GET.get("page"))
    return {
        "export_form": export_form,
        "import_form": import_form,
        "page": page,
        "format_name": exporting.FORMAT,
        "format_version": exporting.VERSION,
        "max_mb": round(settings.MEMORY_IMPORT_MAX_BYTES / 1e6),
    }


@role_required("admin")
@require_GET
def transfer(request):
    context = _page_context(request, ExportForm(), ImportForm())
    return render_page(request, "dashboard/transfer.html", "import-runs", context)


@role_required("admin")
@require_GET
def export_download(request):
    """The export as a download, streamed page by page as the store is read."""
    form = ExportForm(request.GET)
    if not form.is_valid():
        context = _page_context(request, form, ImportForm())
        return render_page(request, "dashboard/transfer.html", "import-runs", context, status=400)
    data = form.cleaned_data
    agent = data["agent"] or None
    response = StreamingHttpResponse(
        exporting.lines(
            agent=agent,
            include_history=data["include_history"],
            include_deleted=data["include_deleted"],
        ),
        content_type="application/x-ndjson; charset=utf-8",
    )
    response["Content-Disposition"] = f'attachment; filename="{exporting.file_name(agent)}"'
    return response


@role_required("admin")
@require_POST
def import_start(request):
    """Store the upload as a queued run and go to its page; nothing is imported in the request."""
    form = ImportForm(request.POST, request.FILES)
    if form.is_valid():
        data = form.cleaned_data
        upload = data["file"]
        try:
            run = runs.start_upload(
                upload.read(),
                file_name=upload.name or "upload",
                requested_by=reviewer_actor(request).name,
                agent=data["agent"].strip(),
                process=data["process"],
                fmt=data["format"],
            )
        except runs.UploadRefused as refused:
            form.add_error("file", str(refused))
        else:
            return redirect(reverse("dashboard:import-run", args=[run.id]))
    context = _page_context(request, ExportForm(), form)
    return render_page(request, "dashboard/transfer.html", "import-runs", context, status=400)


# --- one run -------------------------------------------------------------------------------------


def _run_context(run: ImportRun) -> dict:
    report = run.report or {}
    unlisted = report.get("unlisted", {})
    return {
        "run": run,
        "live": not run.finished,
        "format_label": formats.FORMATS.get(run.format, "not read yet"),
        "imported_lines": lines(report.get("imported", []), unlisted.get("imported", 0)),
        "deduped_lines": lines(report.get("deduped", []), unlisted.get("deduped", 0)),
        "kept_stored_text": kept_stored_text(report),
        "refusals": report.get("refused", []),
        "refusals_left_out": max(0, run.refused - len(report.get("refused", []))),
    }


@role_required("admin")
@require_GET
@vary_on_headers("HX-Request")
def import_run(request, run_id: str):
    """The run: its progress while queued or running (polling itself; 286 stops it), then the
    per-line report."""
    run = get_object_or_404(ImportRun.objects.defer("upload"), id=run_id)
    context = _run_context(run)
    if wants_fragment(request) and not context["live"]:
        return HttpResponseStopPolling(render_to_string(PROGRESS, context, request=request))
    return render_page(request, "dashboard/import_run.html", "import-progress", context)
