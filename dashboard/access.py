"""View guards: every page needs login; actions check the role in the view, never in templates."""

from __future__ import annotations

import functools

from django.contrib.auth.decorators import login_required
from django.contrib.auth.views import redirect_to_login
from django.http import HttpResponse, HttpResponseForbidden
from django.template.loader import render_to_string
from django_htmx.http import trigger_client_event

from dashboard import wording
from memory.models import ActorType
from memory.roles import has_role, role_of
from memory.writes import Actor


def role_required(role: str):
    """login_required, then 403 unless the user holds `role` (viewer < reviewer < admin); an htmx
    request without a session gets session_ended() instead of the redirect to the login form."""

    def decorate(view):
        @login_required
        @functools.wraps(view)
        def wrapper(request, *args, **kwargs):
            if not has_role(request.user, role):
                body = render_to_string(
                    "403.html", {"needed": role, "role": role_of(request.user)}, request=request
                )
                return HttpResponseForbidden(body)
            return view(request, *args, **kwargs)

        @functools.wraps(view)
        def guarded(request, *args, **kwargs):
            if request.htmx and not request.user.is_authenticated:
                return session_ended(request)
            return wrapper(request, *args, **kwargs)

        return guarded

    return decorate


def session_ended(request) -> HttpResponse:
    """An htmx request without a session (it expired, or the reviewer logged out in another tab).

    login_required's 302 would be followed by the XHR and the login form swapped into a table row.
    Answer 401 instead, which htmx never swaps, so the page and anything typed in it stay; the
    "session-ended" event makes app.js show the message with a sign-in link back to this page."""
    login = redirect_to_login(request.htmx.current_url_abs_path or "/")
    response = HttpResponse(wording.SESSION_ENDED, status=401, content_type="text/plain")
    return trigger_client_event(
        response, "session-ended", {"message": wording.SESSION_ENDED, "login": login.url}
    )


def reviewer_actor(request) -> Actor:
    return Actor(request.user.get_username(), ActorType.OPERATOR)
