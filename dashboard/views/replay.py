"""Second opinion: replay recorded decisions with another model and adopt its answer.

Viewing the page needs the viewer role; asking for a second opinion calls a model, so it needs a
reviewer. The request only records a run and queues it (pipeline.replay); the run's page polls
its results while the task asks the model. Adopting goes through the shared review path.
"""

from __future__ import annotations

from django import forms
from django.conf import settings
from django.contrib import messages
from django.http import QueryDict
from django.shortcuts import get_object_or_404, redirect, render
from django.template.loader import render_to_string
from django.urls import reverse
from django.views.decorators.http import require_GET, require_http_methods, require_POST
from django.views.decorators.vary import vary_on_headers
from django_htmx.http import HttpResponseStopPolling, push_url

from dashboard import wording
from dashboard.access import reviewer_actor, role_required
from dashboard.forms import PROVIDER_CHOICES, default_model, default_provider
from dashboard.htmx import review_changed, toast, wants_fragment
from dashboard.review_forms import queue_for
from memory.writes import Refused
from pipeline import replay as replaying
from pipeline import review as reviewing
from pipeline.llm import OFFLINE_MODEL, ProviderError, get_chat_client
from pipeline.llm.prompts import PROMPT_VERSION
from pipeline.models import Action, Proposal, ProposalStatus, ReplayRun
from pipeline.parsing import ACTIONS

# The results region: a run's progress and cards, polling itself while the run is live.
RESULTS = "dashboard/replay.html#replay-results"


class ReplayForm(forms.Form):
    provider = forms.ChoiceField(choices=PROVIDER_CHOICES, label="Provider")
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


# --- the page --------------------------------------------------------------------------------------


def _scope(proposal_id: str, filters: str) -> dict:
    """What a run would compare: one proposal, or the review queue slice of `filters`."""
    if proposal_id:
        proposal = Proposal.objects.select_related("target_memory").filter(id=proposal_id).first()
        return {"proposal": proposal, "missing": proposal is None}
    form, query = queue_for(QueryDict(filters))
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
        return _ask(request)
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
def _ask(request):
    """Record a run and queue it, then answer with the run's page (htmx: its polling fragment)."""
    form = ReplayForm(request.POST)
    proposal_id = (request.POST.get("proposal") or "").strip()[:36]
    filters = request.POST.get("filters") or ""
    if form.is_valid():
        data = form.cleaned_data
        proposal_id, filters = data["proposal"].strip(), data["filters"]
        run, error = _start(request, data, proposal_id, filters)
    else:
        errors = "; ".join(e for errors in form.errors.values() for e in errors)
        run, error = None, f"Cannot run the replay: {errors}"
    if run is not None:
        url = reverse("dashboard:replay-run", args=[run.id])
        if not request.htmx:
            return redirect(url)
        return push_url(render(request, RESULTS, _run_context(run)), url)
    if request.htmx:
        return render(request, RESULTS, {"error": error})
    context = {**_page_context(form, proposal_id, filters), "error": error}
    return render(request, "dashboard/replay.html", context)


def _start(request, data: dict, proposal_id: str, filters: str) -> tuple[ReplayRun | None, str]:
    """(the queued run, "") or (None, why no run was started)."""
    provider = data["provider"]
    try:
        client = get_chat_client(provider, data["model"].strip() or default_model(provider))
    except ProviderError as exc:
        return None, f"The {provider} provider is not usable: {exc}"
    proposal = None
    if proposal_id:
        query = Proposal.objects.filter(id=proposal_id)
        proposal = query.first()
        if proposal is None:
            return None, f"Proposal {proposal_id} was not found."
    else:
        _, query = queue_for(QueryDict(filters))
    run = replaying.ask_second_opinion(
        query,
        requested_by=reviewer_actor(request).name,
        provider=client.provider,
        model=client.model,
        proposal=proposal,
        filters=filters,
        with_extraction=data["with_extraction"],
    )
    return run, ""


# --- a run's page: polls its results until the run is finished ------------------------------------


def _run_context(run: ReplayRun) -> dict:
    return {
        "run": run,
        "replay": replaying.results_of(run),
        "live": not run.finished,
        "compared_so_far": len(run.results),
        "to_compare": len(run.proposal_ids),
    }


@role_required("viewer")
@require_GET
@vary_on_headers("HX-Request")
def replay_run(request, run_id: str):
    run = get_object_or_404(ReplayRun, id=run_id)
    context = _run_context(run)
    if wants_fragment(request):  # not for a history restore: that needs the whole page
        if context["live"]:
            return render(request, RESULTS, context)
        return HttpResponseStopPolling(render_to_string(RESULTS, context, request=request))
    proposal_id = run.proposal_id or ""
    form = ReplayForm(
        initial={
            "provider": run.provider,
            "model": run.model,
            "with_extraction": run.with_extraction,
            "proposal": proposal_id,
            "filters": run.filters,
        }
    )
    page = {**_page_context(form, proposal_id, run.filters), **context}
    return render(request, "dashboard/replay.html", page)


# --- adopting the other answer ----------------------------------------------------------------------


def _adopt(request, proposal: Proposal, data: dict) -> tuple[str, str]:
    """Apply the other model's answer through the shared review path; returns (css, message)."""
    actor = reviewer_actor(request)
    model = data["model"].strip()
    action = data["action"]
    theirs = (data.get("target") or "").strip() or None
    if not replaying.answered(proposal.id, model, action, theirs):
        return "bad", (
            f"Not adopted: no second opinion of {model} on this proposal answered "
            f"{action.upper()}. Ask for one, or decide by hand."
        )
    try:
        if action == Action.NONE:
            reviewing.reject(proposal.id, actor, reason=f"second opinion ({model}): none")
            return "ok", f"Rejected by {actor.name}: {model} says nothing needs to change."
        if action in replaying.DESTRUCTIVE:
            ours = replaying.changed_memory(proposal)
            if theirs != ours:
                where = f"memory {wording.short_id(ours)}" if ours else "no existing memory"
                return "bad", (
                    f"Not adopted: {model} would {action} memory {wording.short_id(theirs) or '?'}, "
                    f"but this proposal targets {where}. Adopting only supports the same target; "
                    "open the proposal to decide by hand, or reject it."
                )
        if (kind := reviewing.confirmation_needed(proposal.id)) is not None:
            # The dashboard approves such a fact only once confirmed, which this button cannot ask.
            return "bad", (
                f"Not adopted: this fact contains {kind.noun}. Open the proposal to approve it "
                "there, where you confirm it."
            )
        decided = reviewing.approve(
            proposal.id, actor, action=action, note=f"adopted the answer of {model}"
        )
    except Refused as refused:
        return "bad", f"Not adopted: {refused.message}"
    verb = {Action.ADD: "added", Action.UPDATE: "updated", Action.DELETE: "deleted"}[action]
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
            review_changed(toast(response, message))
        return response
    (messages.error if css == "bad" else messages.success)(request, message)
    return redirect("dashboard:proposal", proposal_id=proposal_id)
