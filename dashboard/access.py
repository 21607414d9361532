"""View guards: every page needs login; actions check the role in the view, never in templates."""

from __future__ import annotations

import functools

from django.contrib.auth.decorators import login_required
from django.http import HttpResponseForbidden
from django.template.loader import render_to_string

from dashboard.roles import has_role, role_of
from memory.writes import Actor


def role_required(role: str):
    """login_required, then 403 unless the user holds `role` (viewer < reviewer < admin)."""

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

        return wrapper

    return decorate


def reviewer_actor(request) -> Actor:
    return Actor(request.user.get_username(), "operator")
