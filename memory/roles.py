"""Roles: viewer (read), reviewer (decide, edit memories), admin (also flags and users), as Django
groups. One owner for what a role may do, read by the dashboard's views and by the API: a token
held by a person acts within that person's role (memory.reviewer_names, api.auth)."""

from __future__ import annotations

from django.contrib.auth import get_user_model

VIEWER, REVIEWER, ADMIN = "viewer", "reviewer", "admin"
ROLE_ORDER = {VIEWER: 0, REVIEWER: 1, ADMIN: 2}


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


def role_of_user_named(username: str) -> str | None:
    """The role of the active dashboard user of that name, or None (no such active user)."""
    user = get_user_model().objects.filter(username=username, is_active=True).first()
    return role_of(user) if user is not None else None
