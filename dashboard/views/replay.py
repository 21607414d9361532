"""Second opinion: replay recorded decisions with another model and adopt its answer.

Viewing the page needs the viewer role; running a replay is a model call, so it needs a reviewer.
The replay itself writes nothing; adopting goes through the shared review path (approve / reject).
"""

from __future__ import annotations

import json

from django import forms
from django.conf import settings
from django.contrib import messages
from django.http import QueryDict
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.http import require_http_methods, require_POST

from dashboard.access import reviewer_actor, role_required
from dashboard.views.review import filtered_queue
from memory.writes import Refused
from pipeline import replay as replaying
from pipeline import review as reviewing
from pipeline.embedders import ProviderError
from pipeline.llm import OFFLINE_MODEL, get_chat_client
from pipeline.models import Action, Proposal, ProposalStatus
from pipeline.parsing import ACTIONS, PROMPT_VERSION

PROVIDERS = [
    ("ollama", "Ollama"),
    ("openai", "OpenAI-compatible"),
    ("offline", "Offline heuristics"),
]


def default_provider() -> str:
    configured = (settings.MEMORY_LLM_PROVIDER or "").strip().lower()
    return configured if configured in dict(PROVIDERS) else "ollama"


def default_model(provider: str) -> str:
    return OFFLINE_MODEL if provider == "offline" else settings.MEMORY_EXTRACTION_MODEL


class ReplayForm(forms.Form):
    provider = forms.ChoiceField(choices=PROVIDERS, label="Provider")
    model = forms.CharField(
        required=False,
        max_length=200,
        label="Model",
        help_text="Blank: the configured default for the provider.",
    )
    with_extraction = forms.BooleanField(
        required=False, label="Also re-run the extraction on the raw memory"
    )
    proposal = forms.CharField(required=False, max_length=36, widget=forms.HiddenInput)
    filters = forms.CharField(required=False, max_length=4000, widget=forms.HiddenInput)


class AdoptForm(forms.Form):
    action = forms.ChoiceField(choices=[(a, a) for a in ACTIONS])
    target = forms.CharField(required=False, max_length=36)
    model = forms.CharField(max_length=200)
    content = forms.CharField(required=False, max_length=100_000)


# --- the page --------------------------------------------------------------------------------------


def _scope(proposal_id: str, filters: str) -> dict:
    """What a run would compare: one proposal, or the review queue slice of `filters`."""
    if proposal_id:
        proposal = Proposal.objects.select_related("target_memory").filter(id=proposal_id).first()
        return {"proposal": proposal, "missing": proposal is None}
    form, query = filtered_queue(QueryDict(filters))
    data = getattr(form, "cleaned_data", {})  # an unbound form (no filters) has none
    described = [] if data.get("status") else [("Status", "Pending")]
    for name, value in data.items():
        if value in (None, ""):
            continue
        field = form.fields[name]
        shown = dict(getattr(field, "choices", ())).get(value, value)
        described.append((field.label or name.replace("_", " ").capitalize(), shown))
    return {
        "slice_total": query.count(),
        "slice_filters": described,
        "limit": replaying.SLICE_LIMIT,
    }


def _page_context(form: ReplayForm, proposal_id: str, filters: str) -> dict:
    return {
        "form": form,
        "prompt_version": PROMPT_VERSION,
        "defaults": {"offline": OFFLINE_MODEL, "http": settings.MEMORY_EXTRACTION_MODEL},
        "filters": filters,
        **_scope(proposal_id, filters),
    }


@role_required("viewer")
@require_http_methods(["GET", "POST"])
def replay(request):
    if request.method == "POST":
        return _run(request)
    provider = default_provider()
    proposal_id = (request.GET.get("proposal") or "").strip()[:36]
    filters = request.GET.get("filters") or ""
    form = ReplayForm(
        initial={
            "provider": provider,
            "model": default_model(provider),
            "proposal": proposal_id,
            "filters": filters,
        }
    )
    return render(request, "dashboard/replay.html", _page_context(form, proposal_id, filters))


@role_required("reviewer")
def _run(request):
    """Run the replay (model calls, no writes) and show the comparison."""
    form = ReplayForm(request.POST)
    context: dict = {}
    if not form.is_valid():
        errors = "; ".join(e for errors in form.errors.values() for e in errors)
        context["error"] = f"Cannot run the replay: {errors}"
        proposal_id = (request.POST.get("proposal") or "").strip()[:36]
        filters = request.POST.get("filters") or ""
    else:
        data = form.cleaned_data
        proposal_id, filters = data["proposal"].strip(), data["filters"]
        context.update(_replay(data, proposal_id, filters))
    if request.htmx:
        return render(request, "dashboard/replay.html#results", context)
    return render(
        request,
        "dashboard/replay.html",
        {**_page_context(form, proposal_id, filters), **context},
    )


def _replay(data: dict, proposal_id: str, filters: str) -> dict:
    provider = data["provider"]
    model = data["model"].strip() or default_model(provider)
    try:
        client = get_chat_client(provider, model)
    except ProviderError as exc:
        return {"error": f"The {provider} provider is not usable: {exc}"}
    if proposal_id:
        query = Proposal.objects.filter(id=proposal_id)
        if not query.exists():
            return {"error": f"Proposal {proposal_id} was not found."}
    else:
        _, query = filtered_queue(QueryDict(filters))
    result = replaying.replay_slice(query, client, with_extraction=data["with_extraction"])
    context = {"replay": result, "other_model": client.model, "other_provider": client.provider}
    if result.error:
        done = len(result.results)
        after = f" after {done} comparison{'s' if done != 1 else ''}" if done else ""
        context["error"] = (
            f"The {client.provider} model {client.model} failed{after}: {result.error}. "
            "Nothing was written; check the provider and try again."
        )
    return context


# --- adopting the other answer ----------------------------------------------------------------------


def _adopt(request, proposal: Proposal, data: dict) -> tuple[str, str]:
    """Apply the other model's answer through the shared review path; returns (css, message)."""
    actor = reviewer_actor(request)
    model = data["model"].strip()
    action = data["action"]
    try:
        if action == Action.NONE:
            reviewing.reject(proposal.id, actor, reason=f"second opinion ({model}): none")
            return "ok", f"Rejected by {actor.name}: {model} says nothing needs to change."
        if action in replaying.DESTRUCTIVE:
            ours = proposal.target_memory_id if proposal.is_destructive else None
            theirs = (data.get("target") or "").strip() or None
            if theirs != ours:
                where = f"memory {ours[:8]}" if ours else "no existing memory"
                return "bad", (
                    f"Not adopted: {model} would {action} memory {(theirs or '?')[:8]}, "
                    f"but this proposal targets {where}. Adopting only supports the same target; "
                    "open the proposal to decide by hand, or reject it."
                )
        decided = reviewing.approve(
            proposal.id,
            actor,
            content=data.get("content") or None,
            action=action,
            note=f"adopted the answer of {model}",
        )
    except Refused as refused:
        return "bad", f"Not adopted: {refused.message}"
    verb = {"add": "added", "update": "updated", "delete": "deleted"}[action]
    if decided.status == ProposalStatus.DEDUPED:
        return "ok", f"Adopted by {actor.name}: the store already had it (deduplicated)."
    return "ok", f"Adopted {model}'s answer by {actor.name}: memory {verb}."


@role_required("reviewer")
@require_POST
def adopt(request, proposal_id: str):
    proposal = get_object_or_404(Proposal, id=proposal_id)
    form = AdoptForm(request.POST)
    if form.is_valid():
        css, message = _adopt(request, proposal, form.cleaned_data)
    else:
        css = "bad"
        message = "Not adopted: " + "; ".join(
            f"{name}: {e}" for name, errors in form.errors.items() for e in errors
        )
    if request.htmx:
        proposal.refresh_from_db()
        response = render(
            request,
            "dashboard/replay.html#adopted",
            {"p": proposal, "note": message, "note_css": css},
        )
        if css == "ok":
            response["HX-Trigger"] = json.dumps(
                {"review-changed": True, "toast": {"message": message}}
            )
        return response
    (messages.error if css == "bad" else messages.success)(request, message)
    return redirect("dashboard:proposal", proposal_id=proposal_id)
