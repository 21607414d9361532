"""Evaluation: the model's decisions measured on the shipped set or the reviewers' own verdicts
(runs started by an admin, done by a queued task), each run's report, two runs side by side, a
failure's case, and the operating points of `minFactConfidenceForWrite`. Reviewers read."""

from __future__ import annotations

from django import forms
from django.core.paginator import Paginator
from django.shortcuts import get_object_or_404, redirect, render
from django.template.loader import render_to_string
from django.urls import reverse
from django.views.decorators.http import require_GET, require_http_methods
from django.views.decorators.vary import vary_on_headers
from django_htmx.http import HttpResponseStopPolling

from dashboard.access import role_required
from dashboard.forms import PROVIDER_CHOICES, default_model, default_provider
from dashboard.htmx import render_page, wants_fragment
from memory.roles import ADMIN, has_role
from pipeline.config import get_config
from pipeline.eval import runs, summary
from pipeline.eval.cases import CaseError
from pipeline.eval.operating import operating_points
from pipeline.llm import ProviderError, get_chat_client
from pipeline.llm.prompts import PROMPT_VERSION
from pipeline.models import EvalRun

RUN_PAGE_SIZE = 20
CHOICES_SHOWN = 50  # finished runs offered in the side-by-side pickers
REPORT = "dashboard/eval_run.html#eval-report"


class EvalRunForm(forms.Form):
    case_set = forms.ChoiceField(choices=list(runs.SETS.items()), label="Case set")
    provider = forms.ChoiceField(choices=PROVIDER_CHOICES, label="Provider")
    model = forms.CharField(
        required=False, max_length=200, label="Model", help_text="Blank: the provider's default."
    )
    category = forms.CharField(required=False, max_length=100, label="Only category")
    limit = forms.IntegerField(required=False, min_value=1, label="First N cases")


def _page_context(request, form: EvalRunForm, error: str = "") -> dict:
    page = Paginator(
        EvalRun.objects.defer("set_text", "report").order_by("-created_at", "-id"), RUN_PAGE_SIZE
    ).get_page(request.GET.get("page"))
    current = get_config().min_fact_confidence_for_write
    return {
        "form": form,
        "can_start": has_role(request.user, ADMIN),
        "error": error,
        "page": page,
        "finished": list(runs.finished_runs()[:CHOICES_SHOWN]),
        "points": operating_points(current),
        "prompt_version": PROMPT_VERSION,
    }


@role_required("reviewer")
@require_http_methods(["GET", "POST"])
def evaluation(request):
    if request.method == "POST":
        return _start(request)
    provider = default_provider()
    form = EvalRunForm(initial={"provider": provider, "model": default_model(provider)})
    context = _page_context(request, form)
    return render_page(request, "dashboard/evaluation.html", "eval-runs", context)


@role_required("admin")
def _start(request):
    """Record a run and queue it, then go to its page; refusals re-render the form, saying why."""
    form = EvalRunForm(request.POST)
    error = ""
    if form.is_valid():
        data = form.cleaned_data
        try:
            client = get_chat_client(
                data["provider"], data["model"].strip() or default_model(data["provider"])
            )
            run = runs.start_run(
                data["case_set"],
                client,
                requested_by=request.user.get_username(),
                category=data["category"].strip() or None,
                limit=data["limit"],
            )
        except ProviderError as exc:
            error = f"The {data['provider']} provider is not usable: {exc}"
        except runs.NoCases as exc:
            if exc.categories is not None:  # the category matched none: said by its field
                form.add_error("category", str(exc))
                error = "Nothing was started: fix the fields marked below."
            else:
                error = f"Nothing to run: {exc}"
        except CaseError as exc:
            error = f"Nothing to run: {exc}"
        else:
            url = reverse("dashboard:eval-run", args=[run.id])
            return redirect(url)
    else:
        # Each field's error stands by its field; the form's own ones here.
        error = " ".join(
            ["Nothing was started: fix the fields marked below.", *form.non_field_errors()]
        )
    # A plain form post (no htmx): the whole page again, with the form as it was sent.
    return render(
        request, "dashboard/evaluation.html", _page_context(request, form, error), status=400
    )


# --- one run -----------------------------------------------------------------------------------------


def _run_context(run: EvalRun) -> dict:
    report = run.report or {}
    context = {"run": run, "live": not run.finished, "report": report}
    if report:
        context.update(
            heat=summary.heat_rows(report),
            measured=summary.measured(report),
            categories=summary.category_rows(report),
            answers=summary.ANSWERS,
        )
    return context


@role_required("reviewer")
@require_GET
@vary_on_headers("HX-Request")
def eval_run(request, run_id: str):
    """The report; while the run is queued or running, its progress polls itself (286 stops)."""
    run = get_object_or_404(EvalRun.objects.defer("set_text"), id=run_id)
    context = _run_context(run)
    if wants_fragment(request):
        if context["live"]:
            return render_page(request, "dashboard/eval_run.html", "eval-report", context)
        return HttpResponseStopPolling(render_to_string(REPORT, context, request=request))
    return render_page(request, "dashboard/eval_run.html", "eval-report", context)


@role_required("reviewer")
@require_GET
def eval_case(request, run_id: str, case_id: str):
    """One failure: the case's fact and candidates (or raw text), what was expected, what the
    job's code made of the reply, and the raw reply."""
    run = get_object_or_404(EvalRun, id=run_id)
    failure = summary.failure_of(run.report or {}, case_id)
    case = summary.case_of(runs.cases_of(run), case_id)
    if case is None:
        return render_page(
            request,
            "dashboard/eval_case.html",
            "eval-case",
            {"run": run, "case": None, "missing": case_id},
            status=404,
        )
    expected = summary.expect_rows(case.expect())
    context = {"run": run, "case": case, "failure": failure, "expected": expected, "missing": ""}
    return render_page(request, "dashboard/eval_case.html", "eval-case", context)


# --- two runs side by side ------------------------------------------------------------------------------


@role_required("reviewer")
@require_GET
def eval_compare(request):
    finished = list(runs.finished_runs()[:CHOICES_SHOWN])
    ids = {request.GET.get("a", ""), request.GET.get("b", "")} - {""}
    chosen = EvalRun.objects.defer("set_text").in_bulk(list(ids))
    a, b = chosen.get(request.GET.get("a", "")), chosen.get(request.GET.get("b", ""))
    context = {"finished": finished, "a": a, "b": b, "comparison": None, "error": ""}
    if a is not None and b is not None and a.report and b.report:
        context["comparison"] = summary.compare(a.report, b.report)
    elif ids:
        context["error"] = "Pick two finished runs."
    return render_page(request, "dashboard/eval_compare.html", "eval-comparison", context)
