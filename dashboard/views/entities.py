"""The entity graph browser: entities by mentions (searchable), and one entity with its relations
and the memories that mention it."""

from __future__ import annotations

from django.core.paginator import Paginator
from django.db.models import Count, Q
from django.shortcuts import get_object_or_404
from django.views.decorators.http import require_GET

from dashboard.access import role_required
from dashboard.forms import EntitySearchForm
from dashboard.htmx import render_page
from memory import expiry
from memory.models import Entity, MemoryEntityMention

ENTITY_PAGE_SIZE = 50
MEMORY_PAGE_SIZE = 50


@role_required("viewer")
@require_GET
def entities(request):
    form = EntitySearchForm(request.GET)
    query = form.cleaned_data["q"].strip() if form.is_valid() else ""
    rows = Entity.objects.annotate(
        # Live memories: not deleted and not expired (a QA pass: expired ones were counted).
        memory_count=Count(
            "memory_mentions",
            filter=Q(memory_mentions__memory__is_deleted=False)
            & expiry.unexpired(through="memory_mentions__memory__"),
        )
    ).order_by("-mentions", "canonical_name", "id")
    if "q" in form.errors:  # too long: say so, never list every entity as if it matched
        rows = rows.none()
    elif query:
        rows = rows.filter(Q(name__icontains=query) | Q(canonical_name__icontains=query))
    page = Paginator(rows, ENTITY_PAGE_SIZE).get_page(request.GET.get("page"))
    context = {"form": form, "query": query, "typed_q": request.GET.get("q", ""), "page": page}
    return render_page(request, "dashboard/entities.html", "entity-list", context)


@role_required("viewer")
@require_GET
def entity(request, entity_id: int):
    entity = get_object_or_404(Entity, pk=entity_id)
    stated_by = Count("statements")  # memories that stated it (a purge of them all deletes it)
    outgoing = list(
        entity.outgoing.select_related("target")
        .annotate(stated_by=stated_by)
        .order_by("-mentions", "-confidence", "id")
    )
    incoming = list(
        entity.incoming.select_related("source")
        .annotate(stated_by=stated_by)
        .order_by("-mentions", "-confidence", "id")
    )
    mentions = (
        MemoryEntityMention.objects.filter(entity=entity)
        .select_related("memory")
        .defer("memory__normalized_content")
        .order_by("memory__is_deleted", "-memory__created_at", "id")
    )
    page = Paginator(mentions, MEMORY_PAGE_SIZE).get_page(request.GET.get("page"))
    context = {"entity": entity, "outgoing": outgoing, "incoming": incoming, "page": page}
    return render_page(request, "dashboard/entity.html", "entity-memories", context)
