"""Template context for every dashboard page: the mode banner, the review count and the role."""

from __future__ import annotations

from memory.roles import has_role, role_of
from pipeline.status import banner_context


def dashboard(request):
    user = getattr(request, "user", None)
    if user is None or not user.is_authenticated:
        return {}
    return {
        **banner_context(),
        "role": role_of(user),
        "can_review": has_role(user, "reviewer"),
        "is_admin": has_role(user, "admin"),
    }
