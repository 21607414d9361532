"""htmx answers for every dashboard page: the page or one of its fragments, and client events.

A page view calls `render_page(request, "dashboard/x.html", "fragment", context)`: htmx gets
`x.html#fragment`, anything else (a first load, a history restore after a cache miss) the whole
page, and every answer says it varies on HX-Request so no cache serves one for the other. Client
events (the toast, `review-changed`) go through django-htmx's `trigger_client_event`.
"""

from __future__ import annotations

from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.utils.cache import patch_vary_headers
from django_htmx.http import trigger_client_event
from django_htmx.middleware import HtmxDetails


class HtmxHttpRequest(HttpRequest):
    htmx: HtmxDetails


def wants_fragment(request: HtmxHttpRequest) -> bool:
    """An htmx request, except a history restore: that one needs the whole page."""
    return bool(request.htmx) and not request.htmx.history_restore_request


def render_page(
    request: HtmxHttpRequest,
    template: str,
    fragment: str,
    context: dict,
    *,
    status: int = 200,
) -> HttpResponse:
    """The page, or `template#fragment` for htmx; always `Vary: HX-Request`."""
    name = f"{template}#{fragment}" if wants_fragment(request) else template
    response = render(request, name, context, status=status)
    patch_vary_headers(response, ("HX-Request",))
    return response


def toast(response: HttpResponse, message: str, **extra) -> HttpResponse:
    """Show `message` in the page's toast (`undo`: a URL the toast's Undo button posts to)."""
    return trigger_client_event(response, "toast", {"message": message, **extra})


def review_changed(response: HttpResponse) -> HttpResponse:
    """Tell the page the review counts changed: the mode banner and the nav counts refresh."""
    return trigger_client_event(response, "review-changed")
