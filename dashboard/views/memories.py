"""Memory browser: a searchable list, a detail page with the audit trail, and reviewer actions.

Reads only here; every write goes through memory.writes. Each page renders a fragment of the
same template for htmx requests, and each page uses a fixed number of queries whatever its size.
"""

from __future__ import annotations

import json
import re
from datetime import UTC

from django.conf import settings
from django.contrib import messages
from django.core.paginator import Paginator
from django.db.models import Prefetch, Q
from django.db.models.functions import Length, Substr
from django.http import HttpResponseBadRequest
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import NoReverseMatch, reverse
from django.views.decorators.http import require_GET, require_POST

from dashboard import feedback, lineage, wording
from dashboard.access import reviewer_actor, role_required
from dashboard.htmx import HtmxHttpRequest, render_page, toast
from dashboard.memory_forms import (
    ACTION_FORMS,
    DELETED_CHOICES,
    ORIGIN_CHOICES,
    PINNED_CHOICES,
    ActionForm,
    EditForm,
    ExpiryForm,
    ForgetForm,
    MemoryFilterForm,
    PinForm,
    RecoverForm,
)
from memory import expiry, keyword, writes
from memory.erasure import PURGED_EVENT
from memory.filters import attributes
from memory.models import DERIVED_SOURCE_TYPE, Authority, Memory, MemoryEntityMention
from memory.redaction import REDACTED_EVENT
from memory.search import Hit
from pipeline import memory_ops
from pipeline.expiry import outlook as expiry_outlook
from pipeline.models import Proposal

PAGE_SIZE = 50
SEARCH_K = 200  # the best matches a search shows, ranked
SNIPPET_CHARS = 240
META_VALUE_CHARS = 140


# --- list -----------------------------------------------------------------------------------------


def _filtered(filters: dict[str, str]):
    """Memories matching every filter but the search box, without their (possibly huge) text."""
    memories = Memory.objects.annotate(
        snippet=Substr("content", 1, SNIPPET_CHARS + 1), content_length=Length("content")
    ).defer("content", "normalized_content")
    if filters["deleted"] == "live":
        memories = memories.filter(expiry.unexpired(), is_deleted=False)
    elif filters["deleted"] == "expired":
        memories = memories.filter(expiry.expired(), is_deleted=False)
    elif filters["deleted"] == "deleted":
        memories = memories.filter(is_deleted=True)
    memories = memories.filter(_attributes(filters))
    if filters["agent"]:
        memories = memories.filter(agent_id=filters["agent"])
    # Agent feedback slice: adds report counts and orders by them.
    return feedback.reported(memories, filters["feedback"])


def _attributes(filters: dict[str, str]) -> Q:
    """The type, who, pinned, tag and origin filters, as the list and a search both apply them."""
    return attributes(
        type=filters["type"],
        who=filters["who"],
        pinned={"yes": True, "no": False}.get(filters["pinned"]),
        tags=[filters["tag"]] if filters["tag"] else [],
        origin=filters["origin"],
    )


def _search_filter(filters: dict[str, str]) -> Q | None:
    """The list's filters a search applies inside itself (a search looks at live memories), the
    agents' feedback slice included."""
    where = _attributes(filters)
    if (reported := feedback.in_slice(filters["feedback"])) is not None:
        where &= reported
    return where or None


def _search(filters: dict[str, str], agents: list[str]) -> tuple[dict[str, Hit], list[str]]:
    """Hybrid search over each agent's live memories that the filters admit (inside the search:
    filtering its best SEARCH_K afterwards showed 2 of 9 procedural matches); the query is
    embedded once, up front."""
    recalled = memory_ops.recall(filters["q"], agents, k=SEARCH_K, where=_search_filter(filters))
    warnings = (
        ["The embedding server is unavailable: keyword matches only."]
        if recalled.keyword_only
        else []
    )
    return {hit.memory_id: hit for hit in recalled.hits}, warnings


def _query_words(q: str) -> list[str]:
    """The query's meaningful words, lowercased, for highlighting them in the results."""
    words = [word.lower() for word in re.findall(r"\w+", q)]
    return [word for word in words if word not in keyword.STOP_WORDS] or words


@require_GET
@role_required("viewer")
def memory_list(request: HtmxHttpRequest):
    form = MemoryFilterForm(request.GET)
    filters = form.filters()
    agents = list(Memory.objects.order_by("agent_id").values_list("agent_id", flat=True).distinct())
    types = list(Memory.objects.order_by("type").values_list("type", flat=True).distinct())
    memories = _filtered(filters)
    warnings: list[str] = []
    if "q" in form.errors:  # too long: say so, never list every memory as if it matched
        page = Paginator([], PAGE_SIZE).get_page(1)
    elif filters["q"]:
        hits, warnings = _search(filters, [filters["agent"]] if filters["agent"] else agents)
        rows = list(memories.filter(id__in=list(hits)))
        for row in rows:
            row.hit = hits[row.id]
        rows.sort(key=lambda row: (-row.hit.score, row.id))
        if len(rows) >= SEARCH_K:  # what the list shows, after its state filter (a QA pass)
            warnings.append(
                f"Showing the best {SEARCH_K} matches: add words or filters to see others."
            )
        if filters["deleted"] != "live":
            warnings.append("Search looks at live memories only (not deleted, not expired).")
        page = Paginator(rows, PAGE_SIZE).get_page(request.GET.get("page"))
    else:
        ordered = memories if filters["feedback"] else memories.order_by("-created_at", "-id")
        page = Paginator(ordered, PAGE_SIZE).get_page(request.GET.get("page"))
    context = {
        "form": form,
        "filters": filters,
        "q": filters["q"],
        "typed_q": request.GET.get("q", ""),  # as typed, kept in the box even when refused
        "q_words": _query_words(filters["q"]),
        "page": page,
        "agents": agents,
        "types": types,
        "warnings": warnings,
        "pinned_choices": PINNED_CHOICES,
        "deleted_choices": DELETED_CHOICES,
        "origin_choices": ORIGIN_CHOICES,
        "feedback_choices": feedback.FEEDBACK_CHOICES,
        "filtered": any(value for name, value in filters.items() if name != "deleted")
        or filters["deleted"] != "live",
        "snippet_chars": SNIPPET_CHARS,
    }
    return render_page(request, "dashboard/memory_list.html", "results", context)


# --- detail ---------------------------------------------------------------------------------------


def _load(memory_id: str) -> Memory:
    """The memory with its timeline, cold snapshots and entity mentions: four queries in all."""
    memories = Memory.objects.prefetch_related(
        "history",
        "cold_snapshots",
        Prefetch(
            "entity_mentions",
            queryset=MemoryEntityMention.objects.select_related("entity").order_by("entity__name"),
        ),
    )
    return get_object_or_404(memories, id=memory_id)


def _link(key: str, value) -> str | None:
    if not isinstance(value, str) or not value:
        return None
    try:
        if key == "proposalId":
            return reverse("dashboard:proposal", args=[value])
        if key == "jobId":
            return reverse("dashboard:job", args=[value])
        if key.endswith("MemoryId") or key == "dedupedExistingId":
            return reverse("dashboard:memory", args=[value])
    except NoReverseMatch:
        return None
    return None


def _meta_items(metadata) -> list[dict]:
    """Compact key/value pairs of a history row's metadata; ids become links, nulls are dropped."""
    if not isinstance(metadata, dict):
        return [{"key": "metadata", "value": str(metadata), "href": None}]
    items = []
    for key, value in metadata.items():
        # Unset values and false flags are noise in a timeline; what happened stays visible. A
        # purge's receipt has a page of its own (linked from the memory's purge notice).
        if value is None or value is False or value in ("", [], {}) or key == "receipt":
            continue
        if key == "changes" and isinstance(value, dict):
            text = wording.field_changes(value)
        elif isinstance(value, dict) and "content" in value:
            extra = ", ".join(f"{k} {v}" for k, v in value.items() if k != "content")
            text = f"“{value['content']}”" + (f" ({extra})" if extra else "")
        elif isinstance(value, list) and all(isinstance(v, str | int | float) for v in value):
            text = ", ".join(str(v) for v in value)
        elif isinstance(value, dict | list):
            text = json.dumps(value, ensure_ascii=False, separators=(", ", ": "))
        elif isinstance(value, float):
            text = f"{value:.2f}"
        else:
            text = str(value)
        if len(text) > META_VALUE_CHARS:
            text = text[: META_VALUE_CHARS - 1] + "…"
        href = _link(key, value)
        if href and len(text) > 8:
            text = wording.short_id(text)  # ids: the link carries the rest
        items.append({"key": key, "value": text, "href": href})
    return items


EVENT_CSS = {
    "created": "badge-add",
    "updated": "badge-update",
    "deleted": "badge-delete",
    "recovered": "badge-add",
    "reviewed": "badge-status",
    "feedback": "badge-warn",
    PURGED_EVENT: "badge-delete",
    REDACTED_EVENT: "badge-warn",
}

PROPOSAL_ROLES = (
    ("source_memory_id", "from this raw memory"),
    ("target_memory_id", "targets this"),
    ("created_memory_id", "created this"),
    ("updated_memory_id", "updated this"),
    ("deleted_memory_id", "deleted this"),
    ("deduped_existing_id", "duplicate of this"),
)


def _proposals(memory: Memory) -> list[Proposal]:
    proposals = list(
        Proposal.objects.filter(
            Q(source_memory=memory)
            | Q(target_memory=memory)
            | Q(created_memory=memory)
            | Q(updated_memory=memory)
            | Q(deleted_memory=memory)
            | Q(deduped_existing=memory)
        ).order_by("created_at", "position")
    )
    for proposal in proposals:
        proposal.roles = [
            label for attr, label in PROPOSAL_ROLES if getattr(proposal, attr) == memory.id
        ]
    return proposals


def _forms(memory: Memory, bound: ActionForm | None = None) -> dict[str, ActionForm]:
    forms = {
        "pin": PinForm(initial={"action": "unpin" if memory.pinned else "pin"}),
        "edit": EditForm(
            initial={"action": "edit", "content": memory.content, "if_version": memory.version}
        ),
        "expiry": ExpiryForm(
            initial={
                "action": "expiry",
                "expires_at": _local(memory.expires_at),
                "if_version": memory.version,
            }
        ),
        "forget": ForgetForm(initial={"action": "forget", "if_version": memory.version}),
        "recover": RecoverForm(initial={"action": "recover", "if_version": memory.version}),
    }
    if bound is not None:
        action = bound.data.get("action")
        forms["pin" if action in {"pin", "unpin"} else action] = bound
    return forms


def _local(moment) -> str:
    """A moment as a datetime-local field shows it: in UTC, as the field's label says."""
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S") if moment else ""


def _orphan_errors(memory: Memory, bound: ActionForm | None) -> list[str]:
    """Errors of an action whose form the page does not show (recover on a live memory...)."""
    if bound is None:
        return []
    shown = {"recover"} if memory.is_deleted else {"pin", "unpin", "edit", "expiry", "forget"}
    if bound.data.get("action") in shown:
        return []
    return [str(error) for errors in bound.errors.values() for error in errors]


def _detail_context(
    memory: Memory, *, bound: ActionForm | None = None, notice: str | None = None
) -> dict:
    timeline = list(memory.history.all())
    for event in timeline:
        event.css = EVENT_CSS.get(event.event, "badge-none")
        event.label = event.event
        proposed = (event.metadata or {}).get("proposedAction") if event.event == "none" else None
        if proposed:
            # A pipeline decision audit: it recorded a proposal, it did not "NONE" the memory.
            event.label, event.css = f"{proposed} proposed", "badge-status"
        event.meta_items = _meta_items(event.metadata)
        if event.event == REDACTED_EVENT and (event.metadata or {}).get("receipt"):
            verified = event.metadata["receipt"].get("verified")
            href = reverse("dashboard:redaction-receipt", args=[event.id])
            event.meta_items.append(
                {"key": "receipt", "value": "verified" if verified else "failed", "href": href}
            )
        event.relabel = (
            wording.approval_relabel(event.metadata) if event.event == "reviewed" else ""
        )
    source = None
    if memory.source_id and memory.is_derived:
        source = Memory.objects.filter(id=memory.source_id).first()
    proposals = _proposals(memory)
    derived = list(
        Memory.objects.filter(source_id=memory.id, source_type=DERIVED_SOURCE_TYPE).order_by(
            "created_at", "id"
        )
    )
    return {
        "memory": memory,
        "timeline": timeline,
        "feedback_counts": feedback.counts_of(timeline),
        "cold": list(memory.cold_snapshots.all()),
        "mentions": list(memory.entity_mentions.all()),
        "proposals": proposals,
        # Applied proposals of this raw memory still in effect: "revert everything derived".
        "revertible": [
            p
            for p in proposals
            if p.source_memory_id == memory.id and p.can_revert and not p.reverted_at
        ],
        "source": source,
        "derived": derived,
        "lineage": lineage.build(memory, proposals=proposals, source=source, derived=derived),
        "forms": _forms(memory, bound),
        "open_action": bound.data.get("action") if bound is not None else None,
        "orphan_errors": _orphan_errors(memory, bound),
        "notice": notice,
        "recover_days": settings.MEMORY_RECOVER_DAYS,
        "tombstone": next((e for e in timeline if e.event == PURGED_EVENT), None),
        "expiry": expiry_outlook(memory),
    }


@require_GET
@role_required("viewer")
def memory_detail(request: HtmxHttpRequest, memory_id: str):
    memory = _load(memory_id)
    return render_page(
        request, "dashboard/memory_detail.html", "memory-main", _detail_context(memory)
    )


# --- actions --------------------------------------------------------------------------------------


def _apply(action: str, form: ActionForm, memory: Memory, actor: writes.Actor) -> str:
    """Run one reviewer action through memory.writes; returns the notice for the reviewer."""
    data = form.cleaned_data
    if action in {"pin", "unpin"}:
        done = writes.modify(
            memory.id,
            {"pinned": action == "pin"},
            actor=actor,
            reason=form.reason_or_default(action),
        )
        return f"{action.capitalize()}ned (now version {done.version})."
    if action == "edit":
        done = memory_ops.modify(
            memory,
            # A person wrote this text in the dashboard: the memory is now theirs.
            {"content": data["content"], "asserted_by": Authority.PERSON},
            actor=actor,
            reason=data["reason"],
            if_version=data["if_version"],
        )
        return f"Saved as version {done.version}; the previous text is in the cold tier."
    if action == "expiry":
        done = writes.modify(
            memory.id,
            {"expires_at": form.moment_for(memory.expires_at)},
            actor=actor,
            reason=form.reason_or_default(memory.expires_at),
            if_version=data["if_version"],
        )
        return wording.expiry_saved(done)
    if action == "forget":
        done = writes.forget(
            memory.id,
            actor=actor,
            reason=data["reason"],
            force=data["force"],
            if_version=data["if_version"],
        )
        return (
            f"Forgotten (soft delete, version {done.version}). "
            f"It can be recovered for {settings.MEMORY_RECOVER_DAYS} days."
        )
    done = writes.recover(
        memory.id, actor=actor, reason=data["reason"], if_version=data["if_version"]
    )
    return f"Recovered (now version {done.version})."


REFUSAL_FIELDS = {
    "reason_required": "reason",
    "pinned_requires_force": "force",
    "invalid_content": "content",
    "duplicate_content_hash": "content",
}
REFUSAL_MESSAGES = {
    "pinned_requires_force": "This memory is pinned: tick “force” to forget it anyway.",
    "invalid_content": "The content is empty after normalisation.",
    "deleted": "This memory was forgotten since you opened it: recover it first.",
    "purged": "This memory was erased since you opened it: its text is gone for good.",
    "duplicate_content_hash": "Another active memory already has this content.",
}


def _refusal_form(request, form: ActionForm, refused: writes.Refused, memory_id: str):
    """The action's form bound again, with the refusal shown next to the field it concerns."""
    if refused.code == "version_conflict":
        current = refused.details.get("currentVersion")
        if current is None:
            current = Memory.objects.filter(id=memory_id).values_list("version", flat=True).first()
        # Rebind at the current version: submitting again is then a deliberate overwrite.
        data = request.POST.copy()
        data["if_version"] = str(current)
        form = type(form)(data)
        form.is_valid()
        form.add_error(
            None,
            f"This memory changed since you opened it (now version {current}). "
            "Check the content and the timeline, then submit again if you still want this.",
        )
        return form
    if refused.code == "no_changes":
        field = next((f for f in ("content", "expires_at") if f in form.fields), None)
        message = {
            "content": "Nothing changed: the text is the same as the current version.",
            "expires_at": "Nothing changed: this is already the memory's expiry.",
        }.get(field, "Nothing to change: the memory is already in that state.")
        form.add_error(field, message)
        return form
    message = REFUSAL_MESSAGES.get(refused.code, refused.message)
    # The template links to it beside the error (a bare id could not be opened).
    form.duplicate_of = refused.details.get("duplicateMemoryId")
    field = REFUSAL_FIELDS.get(refused.code)
    form.add_error(field if field in form.fields else None, message)
    return form


@require_POST
@role_required("reviewer")
def memory_action(request: HtmxHttpRequest, memory_id: str):
    memory = get_object_or_404(Memory, id=memory_id)
    action = request.POST.get("action", "")
    form_class = ACTION_FORMS.get(action)
    if form_class is None:
        return HttpResponseBadRequest("unknown action")
    form = form_class(request.POST)
    notice = None
    if form.is_valid():
        try:
            notice = _apply(action, form, memory, reviewer_actor(request))
        except writes.Refused as refused:
            form = _refusal_form(request, form, refused, memory.id)
    if notice is not None and not request.htmx:
        messages.success(request, notice)
        return redirect("dashboard:memory", memory_id=memory.id)
    context = _detail_context(_load(memory.id), bound=None if notice else form, notice=notice)
    if request.htmx:
        response = render(request, "dashboard/memory_detail.html#memory-main", context)
        return toast(response, notice) if notice else response
    return render(request, "dashboard/memory_detail.html", context, status=400)
