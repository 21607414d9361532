"""Reviewer analytics: approval rates, precision and volumes by reviewer, model and week, agreement
under the two-person rule, and the decision numbers as a CSV export."""

from __future__ import annotations

import csv

from django.http import HttpResponse
from django.shortcuts import render
from django.utils import timezone
from django.views.decorators.http import require_GET

from dashboard.access import role_required
from pipeline import agreement, analytics

# --- analytics ------------------------------------------------------------------------------------


@role_required("viewer")
@require_GET
def analytics_page(request):
    filters = analytics.parse_filters(request.GET)
    context = {
        **analytics.report(filters),
        "agreement": agreement.agreement(filters),
        "options": analytics.filter_options(),
        "day_choices": analytics.DAY_CHOICES,
        "outcome_colours": analytics.OUTCOME_COLOURS,
        "auto_colours": analytics.AUTO_COLOURS,
        "auto_name": analytics.AUTO,
        "csv_query": filters.querystring(),
    }
    return render(request, "dashboard/analytics.html", context)


@role_required("viewer")
@require_GET
def analytics_csv(request):
    filters = analytics.parse_filters(request.GET)
    response = HttpResponse(content_type="text/csv; charset=utf-8")
    stamp = timezone.now().strftime("%Y%m%d")
    response["Content-Disposition"] = (
        f'attachment; filename="reviewer-analytics-{filters.days_param}-{stamp}.csv"'
    )
    writer = csv.writer(response)
    writer.writerow(analytics.CSV_HEADER)
    for row in analytics.csv_rows(filters):
        writer.writerow([analytics.csv_safe(cell) for cell in row])
    return response
