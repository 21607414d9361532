"""Roles: viewer (read), reviewer (decide, edit memories), admin (also flags and users)."""

from __future__ import annotations

from django.contrib.auth.models import Group

VIEWER, REVIEWER, ADMIN = "viewer", "reviewer", "admin"
ROLE_ORDER = {VIEWER: 0, REVIEWER: 1, ADMIN: 2}


def ensure_role_groups() -> None:
    for name in ROLE_ORDER:
        Group.objects.get_or_create(name=name)


def role_of(user) -> str | None:
    """The strongest role of a user; superusers are admins, users without a group are viewers."""
    if not user.is_authenticated:
        return None
    if user.is_superuser:
        return ADMIN
    # One group query per request: the decorator and the context processor both ask.
    cached = getattr(user, "_curation_role", None)
    if cached is None:
        names = set(user.groups.values_list("name", flat=True))
        cached = next((role for role in (ADMIN, REVIEWER) if role in names), VIEWER)
        user._curation_role = cached
    return cached


def has_role(user, role: str) -> bool:
    current = role_of(user)
    return current is not None and ROLE_ORDER[current] >= ROLE_ORDER[role]
