"""Purge (admins): name what goes and why, see the preview (memories, rows per table, what is out
of reach), type the confirmation, get the erasure receipt; and the receipt of any purge."""

from __future__ import annotations

import json

from django.shortcuts import get_object_or_404, redirect
from django.urls import reverse
from django.views.decorators.http import require_GET, require_http_methods
from django_htmx.http import HttpResponseClientRedirect

from dashboard.access import reviewer_actor, role_required
from dashboard.htmx import render_page
from dashboard.purge_forms import CONFIRM_WORD, PurgeForm, previewed
from memory.erasure import PURGED_EVENT
from memory.models import Memory, MemoryHistory
from memory.writes import Refused
from pipeline import review
from pipeline.purge import Receipt

PREVIEW_MEMORIES = 20  # memories listed by the preview (the count says how many in all)


@require_http_methods(["GET", "POST"])
@role_required("admin")
def purge_page(request):
    if request.method == "GET":
        memory_id = request.GET.get("memory", "")
        form = PurgeForm(
            initial={"scope": "lineage" if memory_id else "memory", "memory": memory_id}
        )
        return render_page(request, "dashboard/purge.html", "purge-main", {"form": form})
    form = PurgeForm(request.POST)
    preview = None
    if form.is_valid():
        try:
            preview = review.purge(
                form.purge_request(),
                reason=form.cleaned_data["reason"],
                actor=reviewer_actor(request),
                dry_run=True,
            )
        except Refused as refused:
            form.add_refusal(refused.code, refused.message)
    confirming = preview is not None and request.POST.get("step") == "purge"
    if confirming and form.confirmed(preview.memories):
        return _purge(request, form)
    context = {"form": form, "preview": preview, "confirm_word": CONFIRM_WORD}
    if preview is not None:
        context.update(
            listed=Memory.objects.filter(id__in=preview.memories[:PREVIEW_MEMORIES]).order_by(
                "created_at", "id"
            ),
            previewed=previewed(preview.memories),
        )
    # htmx swaps only a 2xx answer: the form comes back with its errors beside the fields.
    status = 200 if request.htmx or not form.errors else 400
    return render_page(request, "dashboard/purge.html", "purge-main", context, status=status)


def _purge(request, form: PurgeForm):
    try:
        receipt = review.purge(
            form.purge_request(),
            reason=form.cleaned_data["reason"],
            actor=reviewer_actor(request),
        )
    except Refused as refused:
        form.add_refusal(refused.code, refused.message)
        status = 200 if request.htmx else 400
        return render_page(
            request, "dashboard/purge.html", "purge-main", {"form": form}, status=status
        )
    if request.htmx:
        return HttpResponseClientRedirect(_receipt_url(receipt))
    return redirect(_receipt_url(receipt))


def _receipt_url(receipt: Receipt) -> str:
    return reverse("dashboard:purge-receipt", args=[receipt.tombstone])


@require_GET
@role_required("viewer")
def purge_receipt(request, tombstone_id: str):
    tombstone = get_object_or_404(
        MemoryHistory.objects.select_related("memory"), id=tombstone_id, event=PURGED_EVENT
    )
    receipt = (tombstone.metadata or {}).get("receipt")
    context = {
        "tombstone": tombstone,
        "receipt": receipt,
        "rows": sorted((receipt or {}).get("rows", {}).items()),
        # The API's shape, as a script would have got it (the checks are the page's words).
        "receipt_json": json.dumps(
            {k: v for k, v in (receipt or {}).items() if k != "checks"}, indent=2
        ),
    }
    return render_page(request, "dashboard/purge_receipt.html", "receipt-main", context)
